// SPDX-License-Identifier: Apache-2.0
// tools/bench/trace_benchmark.cc: the bundled single-stream traces
// (tests/data/traces/torch-*.csv, recorded from PyTorch) replayed through
// Google Benchmark, one benchmark iteration per trace operation, so that the
// reported time is the cost of one allocate or free. Per trace, side by side
// in one run:
//   tf_reference   TensorFlow's BFC algorithm (tf_bfc_reference.h) on one
//                  preallocated region of 1.25x the trace's peak
//   preallocated   gpualloc, the same region (Options::memory_limit)
//   preallocated_front_cache
//                  the same with Options::front_cache = 4 MiB (its hit rate:
//                  hits / (hits + misses) of allocations on the cache path)
//   default        gpualloc with nothing set on a simulated H100 (JAX's
//                  default: 75% of the device preallocated on first use)
//   grow           gpualloc growing on demand (preallocate=false)
//
//   trace_benchmark [--benchmark_filter=...] [TRACE.csv ...]
//
// Without trace arguments it reads the bundled traces from the source tree.
// At the end of each pass over the trace, what the trace left live is freed
// (inside the timed loop; at most a few hundred frees per pass).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "tools/bench/sim_pool.h"
#include "tools/bench/tf_bfc_reference.h"
#include "tools/replay/replay.h"

namespace gpualloc {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// Replays `trace` one operation per benchmark iteration through
// allocate(bytes, stream) -> void* and release(void*, stream).
template <typename AllocateFn, typename ReleaseFn>
void ReplayOps(benchmark::State& state, const replay::Trace& trace,
               AllocateFn allocate, ReleaseFn release) {
  std::vector<void*> slot(trace.num_allocs + 1, nullptr);
  std::vector<Stream> stream_of(trace.num_allocs + 1, Stream());
  // What the trace left live (at the end of each pass, and at the end).
  auto release_live = [&] {
    for (std::size_t id = 0; id < slot.size(); ++id) {
      if (slot[id] != nullptr) release(slot[id], stream_of[id]);
      slot[id] = nullptr;
    }
  };
  const std::size_t n = trace.ops.size();
  std::size_t i = 0;
  for (auto _ : state) {
    const replay::TraceOp& op = trace.ops[i];
    const Stream stream(op.stream);
    if (op.kind == replay::TraceOp::Kind::kAlloc) {
      void* p = allocate(op.size, stream);
      if (p == nullptr) {
        state.SkipWithError("out of memory");
        break;
      }
      slot[op.id] = p;
      stream_of[op.id] = stream;
    } else if (slot[op.id] != nullptr) {
      release(slot[op.id], stream);
      slot[op.id] = nullptr;
    }
    if (++i == n) {
      i = 0;
      release_live();
    }
  }
  release_live();
}

std::unique_ptr<Allocator> FromConfig(const std::string& text) {
  absl::StatusOr<ConfigOverrides> overrides = ParseConfigString(text);
  if (!overrides.ok()) std::abort();
  overrides->backend = BackendKind::kSim;
  absl::StatusOr<Config> config = ResolveConfig(*overrides, MapEnvironment({}));
  if (!config.ok()) std::abort();
  absl::StatusOr<std::shared_ptr<Backend>> backend = CreateBackend(*config, 0);
  if (!backend.ok()) std::abort();
  absl::StatusOr<std::unique_ptr<Allocator>> a =
      CreateAllocator(config->options, *backend);
  if (!a.ok()) std::abort();
  return std::move(*a);
}

void RunGpualloc(benchmark::State& state, const replay::Trace& trace,
                 Allocator& a) {
  ReplayOps(
      state, trace,
      [&](std::size_t bytes, Stream stream) -> void* {
        absl::StatusOr<void*> p = a.Allocate(bytes, stream);
        return p.ok() ? *p : nullptr;
      },
      [&](void* p, Stream stream) { (void)a.Deallocate(p, stream); });
  state.counters["peak_reserved_GiB"] =
      static_cast<double>(a.GetStats().peak_bytes_reserved) /
      static_cast<double>(kGiB);
}

void Register(const std::shared_ptr<const replay::Trace>& trace) {
  const std::uint64_t pool = std::max<std::uint64_t>(
      2 * kGiB,
      (replay::PeakRequested(*trace) * 5 / 4 + kGiB - 1) / kGiB * kGiB);
  const std::string base = "BM_Trace/" + trace->name + "/";
  benchmark::RegisterBenchmark(
      (base + "tf_reference").c_str(), [trace, pool](benchmark::State& state) {
        bench::TfBfcReference tf(std::uint64_t{1} << 40, pool);
        ReplayOps(
            state, *trace,
            [&](std::size_t bytes, Stream) { return tf.Allocate(bytes); },
            [&](void* p, Stream) { tf.Deallocate(p); });
      });
  benchmark::RegisterBenchmark(
      (base + "preallocated").c_str(), [trace, pool](benchmark::State& state) {
        std::unique_ptr<Allocator> a = bench::Preallocated(pool);
        RunGpualloc(state, *trace, *a);
      });
  benchmark::RegisterBenchmark(
      (base + "preallocated_front_cache").c_str(),
      [trace, pool](benchmark::State& state) {
        std::unique_ptr<Allocator> a = bench::Preallocated(pool, 4 << 20);
        RunGpualloc(state, *trace, *a);
        const Stats s = a->GetStats();
        state.counters["hit_rate"] =
            static_cast<double>(s.front_cache_hits) /
            static_cast<double>(s.front_cache_hits + s.front_cache_misses);
      });
  benchmark::RegisterBenchmark(
      (base + "default").c_str(), [trace](benchmark::State& state) {
        std::unique_ptr<Allocator> a = FromConfig("arch=h100");
        RunGpualloc(state, *trace, *a);
      });
  benchmark::RegisterBenchmark((base + "grow").c_str(),
                               [trace](benchmark::State& state) {
                                 std::unique_ptr<Allocator> a =
                                     FromConfig("arch=h100,preallocate=false");
                                 RunGpualloc(state, *trace, *a);
                               });
}

}  // namespace
}  // namespace gpualloc

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::vector<std::string> paths(argv + 1, argv + argc);
  if (paths.empty()) {
    for (const char* name :
         {"torch-cs336-medium_1024_inference",
          "torch-cs336-medium_1024_training", "torch-cs336-medium_128_training",
          "torch-opt125m-zo-finetune"}) {
      paths.push_back(std::string(GPUALLOC_TRACE_DIR) + "/" + name + ".csv");
    }
  }
  for (const std::string& path : paths) {
    absl::StatusOr<gpualloc::replay::Trace> trace =
        gpualloc::replay::LoadTrace(path);
    if (!trace.ok()) {
      std::fprintf(stderr, "trace_benchmark: %s\n",
                   std::string(trace.status().message()).c_str());
      return 1;
    }
    if (trace->num_streams > 1) {
      std::fprintf(stderr,
                   "trace_benchmark: %s: skipped, %d streams (this benchmark "
                   "replays single-stream traces; gpualloc-replay models "
                   "several)\n",
                   path.c_str(), static_cast<int>(trace->num_streams));
      continue;
    }
    gpualloc::Register(
        std::make_shared<const gpualloc::replay::Trace>(std::move(*trace)));
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
