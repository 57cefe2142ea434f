// tools/bench/random_pairs.cc: the random benchmark's workload without a
// timer, for counting what it executes under valgrind (instructions and cache
// misses per pair are stable where wall time on a shared machine is not).
//
//   random_pairs LIVE PAIRS
//
// Keeps LIVE allocations (log-uniform 256 B .. 64 MiB) in a preallocated pool
// of 16 GiB per 1000 of them, then PAIRS times frees a random one and
// allocates a new random size. tools/bench/instructions.sh runs it twice under
// cachegrind (PAIRS = 0 and PAIRS = N) and prints the difference per pair.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gpualloc/allocator.h"
#include "gpualloc/sim_backend.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: random_pairs LIVE PAIRS\n");
    return 2;
  }
  const std::size_t live = std::strtoull(argv[1], nullptr, 10);
  const std::size_t pairs = std::strtoull(argv[2], nullptr, 10);
  if (live == 0) return 2;
  const std::uint64_t pool = std::max<std::uint64_t>(
      std::uint64_t{16} << 30, live * (std::uint64_t{16} << 30) / 1000);
  gpualloc::SimOptions so;
  so.profile = "h100";
  so.total_bytes = pool;
  gpualloc::Options o;
  o.memory_limit = pool;
  auto allocator =
      gpualloc::CreateAllocator(o, *gpualloc::SimBackend::Create(so));
  if (!allocator.ok()) return 1;
  gpualloc::Allocator& a = **allocator;

  constexpr std::size_t kDraws = 1 << 16;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> exponent(8, 26);
  std::vector<std::size_t> sizes(kDraws), victims(kDraws);
  for (auto& s : sizes) s = static_cast<std::size_t>(std::exp2(exponent(rng)));
  for (auto& v : victims) v = rng() % live;
  std::vector<void*> slots(live);
  for (std::size_t i = 0; i < live; ++i)
    slots[i] = *a.Allocate(sizes[i % kDraws]);
  for (std::size_t i = 0; i < pairs; ++i) {
    void*& slot = slots[victims[i & (kDraws - 1)]];
    if (!a.Deallocate(slot).ok()) return 1;
    auto p = a.Allocate(sizes[(i * 31 + 17) & (kDraws - 1)]);
    if (!p.ok()) return 1;
    slot = *p;
  }
  std::printf("%zu live, %zu pairs, fragmentation %.3f\n", live, pairs,
              a.GetStats().fragmentation);
  return 0;
}
