// SPDX-License-Identifier: Apache-2.0
// tools/bench/random_pairs.cc: the random benchmark's workload without a
// timer, for counting what it executes under valgrind (instructions and cache
// misses per pair are stable where wall time on a shared machine is not).
//
//   random_pairs LIVE PAIRS
//
// Runs tools/bench/random_workload.h: LIVE allocations in a preallocated
// pool, then PAIRS times frees a random one and allocates a new random size.
// tools/bench/instructions.sh runs it twice under cachegrind (PAIRS = 0 and
// PAIRS = N) and prints the difference per pair.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "tools/bench/random_workload.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: random_pairs LIVE PAIRS\n");
    return 2;
  }
  const std::size_t live = std::strtoull(argv[1], nullptr, 10);
  const std::size_t pairs = std::strtoull(argv[2], nullptr, 10);
  if (live == 0) return 2;
  const gpualloc::bench::RandomWorkload w(live);
  const std::uint64_t pool = gpualloc::bench::RandomWorkload::PoolFor(live);
  gpualloc::SimOptions so;
  so.profile = "h100";
  so.total_bytes = pool;
  gpualloc::Options o;
  o.memory_limit = pool;
  auto allocator =
      gpualloc::CreateAllocator(o, *gpualloc::SimBackend::Create(so));
  if (!allocator.ok()) return 1;
  gpualloc::Allocator& a = **allocator;

  std::vector<void*> slots(live);
  for (std::size_t i = 0; i < live; ++i) {
    auto p = a.Allocate(w.initial_size(i));
    if (!p.ok()) return 1;
    slots[i] = *p;
  }
  for (std::size_t i = 0; i < pairs; ++i) {
    void*& slot = slots[w.victim(i)];
    if (!a.Deallocate(slot).ok()) return 1;
    auto p = a.Allocate(w.size(i));
    if (!p.ok()) return 1;
    slot = *p;
  }
  std::printf("%zu live, %zu pairs, fragmentation %.3f\n", live, pairs,
              a.GetStats().fragmentation);
  return 0;
}
