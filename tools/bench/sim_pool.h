// SPDX-License-Identifier: Apache-2.0
// tools/bench/sim_pool.h: the allocator the benchmarks measure, shared by
// allocator_benchmark.cc and trace_benchmark.cc: one preallocated region of
// `pool` bytes on a simulated H100 of exactly that size. Benchmark-only code:
// a failure aborts.
#ifndef GPUALLOC_TOOLS_BENCH_SIM_POOL_H_
#define GPUALLOC_TOOLS_BENCH_SIM_POOL_H_

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::bench {

inline std::shared_ptr<SimBackend> Sim(std::uint64_t total) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = total;
  return *SimBackend::Create(o);
}

// Options::front_cache as given (0: off, the default).
inline std::unique_ptr<Allocator> Preallocated(std::uint64_t pool,
                                               std::uint64_t front_cache = 0) {
  Options o;
  o.memory_limit = pool;
  o.front_cache = front_cache;
  auto a = CreateAllocator(o, Sim(pool));
  if (!a.ok()) std::abort();
  return std::move(*a);
}

}  // namespace gpualloc::bench

#endif  // GPUALLOC_TOOLS_BENCH_SIM_POOL_H_
