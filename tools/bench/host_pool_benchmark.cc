// SPDX-License-Identifier: Apache-2.0
// tools/bench/host_pool_benchmark.cc: the pinned host memory pool
// (gpualloc/core/host_allocator.h) on the simulator: the host's cost of one
// allocate/free pair out of the pool's cached memory, with and without a
// recorded copy stream (one event recorded at the free and queried at the
// next allocation). Run with -Dbenchmarks=enabled:
//   ninja -C build tools/bench/host_pool_benchmark
//   build/tools/bench/host_pool_benchmark
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "benchmark/benchmark.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/host_allocator.h"

namespace gpualloc {
namespace {

struct HostPool {
  std::shared_ptr<SimBackend> sim;
  std::unique_ptr<Allocator> pool;
};

HostPool MakeHostPool() {
  HostPool h;
  h.sim = *SimBackend::Create(SimOptions());
  auto pool = CreateHostAllocator(Options(), h.sim);
  if (!pool.ok()) std::abort();
  h.pool = std::move(*pool);
  return h;
}

// Allocate and free one block of state.range(0) bytes: after the first pair,
// the pool's cached memory serves every request.
void BM_HostPoolPair(benchmark::State& state) {
  HostPool h = MakeHostPool();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = *h.pool->Allocate(bytes);
    benchmark::DoNotOptimize(p);
    if (!h.pool->Deallocate(p).ok()) std::abort();
  }
  state.counters["host_allocates"] =
      static_cast<double>(h.sim->calls(SimOp::kHostAllocate));
}
BENCHMARK(BM_HostPoolPair)->Arg(4096)->Arg(4 << 20)->Arg(64 << 20);

// The same with a copy stream recorded on the block (its work completes at
// once): one event recorded per free, queried at the next allocation.
void BM_HostPoolPairRecorded(benchmark::State& state) {
  HostPool h = MakeHostPool();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const Stream copy(0x100);
  for (auto _ : state) {
    void* p = *h.pool->Allocate(bytes);
    if (!h.pool->RecordStream(p, copy).ok()) std::abort();
    if (!h.pool->Deallocate(p).ok()) std::abort();
  }
  state.counters["host_allocates"] =
      static_cast<double>(h.sim->calls(SimOp::kHostAllocate));
}
BENCHMARK(BM_HostPoolPairRecorded)->Arg(4096)->Arg(4 << 20)->Arg(64 << 20);

}  // namespace
}  // namespace gpualloc

BENCHMARK_MAIN();
