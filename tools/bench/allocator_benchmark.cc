// SPDX-License-Identifier: Apache-2.0
// tools/bench/allocator_benchmark.cc: host-side cost of the allocator's hot
// path.
//
// Every case runs on the simulated backend with fake addresses: what is timed
// is the allocator's own work (lock, best fit, split, coalesce, bookkeeping),
// which is what a runtime pays per call once the pool exists.
//
//   build:  meson setup build-bench -Dbenchmarks=enabled -Dbuildtype=release
//             -Ddebug_checks=0 && ninja -C build-bench
//   run:    build-bench/tools/bench/allocator_benchmark
//   --benchmark_repetitions=5
//             --benchmark_report_aggregates_only=true
#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "core/lock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "tools/bench/random_workload.h"
#include "tools/bench/sim_pool.h"
#include "tools/bench/tf_bfc_reference.h"

namespace gpualloc {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

using bench::Preallocated;
using bench::Sim;

void* MustAllocate(Allocator& a, std::size_t bytes, Stream stream = Stream()) {
  auto p = a.Allocate(bytes, stream);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str());
    std::abort();
  }
  return *p;
}

void BM_FixedSizePair(benchmark::State& state) {
  auto a = Preallocated(16 * kGiB);
  const std::size_t size = static_cast<std::size_t>(state.range(0));
  void* keep = MustAllocate(*a, 1 << 20);  // the pool is not empty
  for (auto _ : state) {
    void* p = MustAllocate(*a, size);
    benchmark::DoNotOptimize(p);
    (void)a->Deallocate(p);
  }
  (void)a->Deallocate(keep);
}
BENCHMARK(BM_FixedSizePair)->Arg(256)->Arg(1 << 20);

// The allocation history's cost: a 256-byte pair (three events: alloc,
// free_requested, free_completed) with Options::history off (0) and on
// (1 Mi entries, wrapping), the thread's context set. The difference per
// pair over three is the cost per event.
void BM_HistoryPair(benchmark::State& state) {
  Options o;
  o.memory_limit = 16 * kGiB;
  o.history = static_cast<std::uint64_t>(state.range(0));
  auto a = CreateAllocator(o, Sim(16 * kGiB));
  if (!a.ok()) std::abort();
  SetThreadContext("benchmark");
  void* keep = MustAllocate(**a, 1 << 20);
  for (auto _ : state) {
    void* p = MustAllocate(**a, 256);
    benchmark::DoNotOptimize(p);
    (void)(*a)->Deallocate(p);
  }
  (void)(*a)->Deallocate(keep);
  SetThreadContext("");
}
BENCHMARK(BM_HistoryPair)->Arg(0)->Arg(1 << 20);

// Random replacement (random_workload.h): each iteration frees a random live
// allocation and allocates a new random size in its place (one pair).
template <typename AllocateFn, typename FreeFn>
void RandomPairs(benchmark::State& state, std::size_t live, AllocateFn allocate,
                 FreeFn release) {
  const bench::RandomWorkload w(live);
  std::vector<void*> slots(live);
  for (std::size_t i = 0; i < live; ++i) slots[i] = allocate(w.initial_size(i));
  std::size_t i = 0;
  for (auto _ : state) {
    void*& slot = slots[w.victim(i)];
    release(slot);
    slot = allocate(w.size(i));
    ++i;
  }
  for (void* p : slots) release(p);
  state.counters["live"] = static_cast<double>(live);
}

void BM_RandomPair(benchmark::State& state) {
  const std::size_t live = static_cast<std::size_t>(state.range(0));
  auto a = Preallocated(bench::RandomWorkload::PoolFor(live));
  RandomPairs(
      state, live, [&](std::size_t n) { return MustAllocate(*a, n); },
      [&](void* p) { (void)a->Deallocate(p); });
}
BENCHMARK(BM_RandomPair)->Arg(100)->Arg(1000)->Arg(10000)->Arg(100000);

// The random workload on several streams: step i allocates on stream i % n
// and each block is freed on the stream it was allocated on, so most reuse
// crosses streams. The simulated streams carry no work, so the lazily
// recorded events complete at their first query: this measures the
// bookkeeping (event record and query calls into the simulator included).
// Arguments: live allocations, streams, policy (0 when complete, 1 wait).
void BM_RandomPair_MultiStream(benchmark::State& state) {
  const std::size_t live = static_cast<std::size_t>(state.range(0));
  const std::size_t num_streams = static_cast<std::size_t>(state.range(1));
  Options o;
  o.memory_limit = bench::RandomWorkload::PoolFor(live);
  o.cross_stream_reuse = state.range(2) == 0 ? CrossStreamReuse::kWhenComplete
                                             : CrossStreamReuse::kStreamWait;
  auto a = std::move(*CreateAllocator(o, Sim(o.memory_limit)));
  const bench::RandomWorkload w(live);
  struct Slot {
    void* p;
    Stream stream;
  };
  std::vector<Slot> slots(live);
  auto stream_of = [&](std::size_t i) {
    return Stream(0x100 * (1 + i % num_streams));
  };
  for (std::size_t i = 0; i < live; ++i) {
    slots[i] = {*a->Allocate(w.initial_size(i), stream_of(i)), stream_of(i)};
  }
  std::size_t i = 0;
  for (auto _ : state) {
    Slot& slot = slots[w.victim(i)];
    (void)a->Deallocate(slot.p, slot.stream);
    slot.stream = stream_of(i);
    auto p = a->Allocate(w.size(i), slot.stream);
    if (!p.ok()) std::abort();
    slot.p = *p;
    ++i;
  }
  const Stats stats = a->GetStats();
  for (const Slot& slot : slots) (void)a->Deallocate(slot.p, slot.stream);
  state.counters["events_per_pair"] =
      static_cast<double>(stats.events_recorded) / static_cast<double>(i);
  state.counters["waits_per_pair"] =
      static_cast<double>(stats.stream_waits) / static_cast<double>(i);
}
BENCHMARK(BM_RandomPair_MultiStream)
    ->Args({1000, 1, 0})
    ->Args({1000, 4, 0})
    ->Args({1000, 4, 1});

// The cost of Deallocate alone: 1000 blocks of random sizes allocated untimed
// on `streams` streams in turn, then freed (timed) in random order, each on
// its own stream. With several streams, freed neighbours from different
// streams merge into chunks with several conditions.
void BM_Free_MultiStream(benchmark::State& state) {
  const std::size_t num_streams = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t kBlocks = 1000;
  auto a = Preallocated(16 * kGiB);
  const auto sizes = bench::LogUniformSizes(kBlocks, 3);
  std::vector<std::size_t> order(kBlocks);
  for (std::size_t i = 0; i < kBlocks; ++i) order[i] = i;
  std::mt19937_64 rng(5);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<void*> blocks(kBlocks);
  for (auto _ : state) {
    state.PauseTiming();
    for (std::size_t i = 0; i < kBlocks; ++i) {
      blocks[i] = *a->Allocate(sizes[i], Stream(0x100 * (1 + i % num_streams)));
    }
    state.ResumeTiming();
    for (std::size_t k : order) {
      (void)a->Deallocate(blocks[k], Stream(0x100 * (1 + k % num_streams)));
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kBlocks));
}
BENCHMARK(BM_Free_MultiStream)->Arg(1)->Arg(4);

// The same workload on a re-implementation of TensorFlow's BFC algorithm
// (tf_bfc_reference.h), for a ratio measured in the same run. Its pointer
// table costs 8 bytes per 256 B of pool, so only the smaller cases run.
void BM_RandomPair_TfBfcReference(benchmark::State& state) {
  const std::size_t live = static_cast<std::size_t>(state.range(0));
  bench::TfBfcReference tf(std::uint64_t{1} << 40,
                           bench::RandomWorkload::PoolFor(live));
  RandomPairs(
      state, live,
      [&](std::size_t n) {
        void* p = tf.Allocate(n);
        if (p == nullptr) std::abort();
        return p;
      },
      [&](void* p) { tf.Deallocate(p); });
  state.counters["host_table_MiB"] =
      static_cast<double>(tf.HostTableBytes() >> 20);
}
BENCHMARK(BM_RandomPair_TfBfcReference)->Arg(100)->Arg(1000);

// Threads sharing one allocator. Each thread replaces blocks of its own:
// step 0 is the random replacement above (1000 live per thread), step 1 a
// 1 MiB block between two blocks that stay (a step that repeats its
// sizes: the freed block has no free neighbour). Each thread allocates and
// frees on a stream of its own (own_stream 1) or all on one stream (0), with
// Options::front_cache off (front 0) or 4 MiB (front 1). items_per_second is
// the total over the threads: the 2-thread case against the 1-thread case is
// the scaling. Setup starts and joins a thread first, so that the 1-thread
// case takes the lock's atomic path too, as in any multi-threaded process
// (core/lock.h).
std::unique_ptr<Allocator> g_shared;
constexpr std::size_t kLivePerThread = 1000;
void SharedSetup(const benchmark::State& state) {
  std::thread([] {}).join();
  const std::uint64_t pool = bench::RandomWorkload::PoolFor(
      kLivePerThread * static_cast<std::size_t>(state.threads()));
  g_shared = Preallocated(pool, state.range(2) == 1 ? 4 << 20 : 0);
}
void SharedTeardown(const benchmark::State&) { g_shared.reset(); }
void BM_Threads(benchmark::State& state) {
  const bool random = state.range(0) == 0;
  const bool own_stream = state.range(1) == 1;
  const std::size_t thread = static_cast<std::size_t>(state.thread_index());
  const Stream stream(own_stream ? 0x100 * (1 + thread) : 0x100);
  Allocator& a = *g_shared;
  auto allocate = [&](std::size_t n) { return MustAllocate(a, n, stream); };
  if (random) {
    const bench::RandomWorkload w(kLivePerThread);
    std::vector<void*> slots(kLivePerThread);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      slots[i] = allocate(w.initial_size(i + thread * 7919));
    }
    std::size_t i = thread * 7919;
    for (auto _ : state) {
      void*& slot = slots[w.victim(i)];
      (void)a.Deallocate(slot, stream);
      slot = allocate(w.size(i));
      ++i;
    }
    for (void* p : slots) (void)a.Deallocate(p, stream);
  } else {
    void* before = allocate(1 << 20);
    void* p = allocate(1 << 20);
    void* after = allocate(1 << 20);
    for (auto _ : state) {
      (void)a.Deallocate(p, stream);
      p = allocate(1 << 20);
      benchmark::DoNotOptimize(p);
    }
    for (void* q : {before, p, after}) (void)a.Deallocate(q, stream);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_Threads)
    ->ArgNames({"step", "own_stream", "front"})
    ->ArgsProduct({{0, 1}, {1, 0}, {0, 1}})
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->Setup(SharedSetup)
    ->Teardown(SharedTeardown);

// Why core/lock.h is not absl::Mutex: an uncontended Lock+Unlock of each
// candidate (the allocator takes its lock twice per pair).
void BM_LockUnlock_AbslMutex_DeadlockDetection(benchmark::State& state) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
  absl::Mutex mu;
  for (auto _ : state) {
    mu.Lock();
    mu.Unlock();
  }
}
BENCHMARK(BM_LockUnlock_AbslMutex_DeadlockDetection);
void BM_LockUnlock_AbslMutex_NoDetection(benchmark::State& state) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::Mutex mu;
  for (auto _ : state) {
    mu.Lock();
    mu.Unlock();
  }
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
}
BENCHMARK(BM_LockUnlock_AbslMutex_NoDetection);
void BM_LockUnlock_StdMutex(benchmark::State& state) {
  std::mutex mu;
  for (auto _ : state) {
    mu.lock();
    mu.unlock();
  }
}
BENCHMARK(BM_LockUnlock_StdMutex);
// The allocator's own lock (core/lock.h): the plain path while the process
// has a single thread, as glibc's std::mutex above.
void BM_LockUnlock_GpuallocLock(benchmark::State& state) {
  core::Lock mu;
  for (auto _ : state) {
    mu.lock();
    benchmark::ClobberMemory();
    mu.unlock();
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_LockUnlock_GpuallocLock);

// Allocate a batch, then free it all; time per pair.
void BM_BatchAllocateThenFree(benchmark::State& state) {
  const std::size_t batch = static_cast<std::size_t>(state.range(0));
  auto a = Preallocated(16 * kGiB);
  const std::vector<std::size_t> sizes = bench::LogUniformSizes(batch, 3);
  std::vector<void*> ptrs(batch);
  for (auto _ : state) {
    for (std::size_t i = 0; i < batch; ++i)
      ptrs[i] = MustAllocate(*a, sizes[i] / 8);
    for (void* p : ptrs) (void)a->Deallocate(p);
  }
  state.SetItemsProcessed(
      static_cast<std::int64_t>(state.iterations() * batch));
}
BENCHMARK(BM_BatchAllocateThenFree)->Arg(1000);

// Creating an allocator and its first allocation into a 16 GiB preallocated
// pool: what JAX-style preallocation costs on the host.
void BM_FirstAllocationIntoPreallocatedPool(benchmark::State& state) {
  const std::uint64_t pool = static_cast<std::uint64_t>(state.range(0)) * kGiB;
  for (auto _ : state) {
    // A fresh device each time: the simulator never reuses fake addresses.
    state.PauseTiming();
    auto sim = Sim(pool);
    state.ResumeTiming();
    Options o;
    o.memory_limit = pool;
    auto a = CreateAllocator(o, sim);
    void* p = MustAllocate(**a, 1024);
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_FirstAllocationIntoPreallocatedPool)
    ->Arg(16)
    ->Unit(benchmark::kMicrosecond);

// Host memory right after preallocating 75% of a simulated H200 (141 GB).
void BM_HostMemoryAfterH200Preallocation(benchmark::State& state) {
  SimOptions so;
  so.profile = "h200";
  std::size_t host_bytes = 0;
  std::uint64_t total = 0;
  for (auto _ : state) {
    auto sim = *SimBackend::Create(so);
    total = sim->info().total_bytes;
    const std::size_t before = mallinfo2().uordblks;
    auto a = CreateAllocator(Options(), sim);
    void* p = MustAllocate(**a, 1024);
    benchmark::DoNotOptimize(p);
    host_bytes = mallinfo2().uordblks - before;
  }
  state.counters["host_bytes"] = static_cast<double>(host_bytes);
  state.counters["pool_bytes"] = static_cast<double>(
      static_cast<std::uint64_t>(0.75 * static_cast<double>(total)));
}
BENCHMARK(BM_HostMemoryAfterH200Preallocation)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpualloc

BENCHMARK_MAIN();
