// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_async.cc: the driver's stream-ordered pool
// (cudaMallocAsync / cudaFreeAsync on a cudaMemPool_t; hipMallocAsync) used
// directly, as PyTorch's backend:cudaMallocAsync does
// (c10/cuda/CUDAMallocAsyncAllocator.cpp), for comparison. The pool itself
// is the backend's (the simulator models CUDA's release threshold and its
// three reuse rules, cudaMemPoolReuseFollowEventDependencies,
// cudaMemPoolReuseAllowOpportunistic and
// cudaMemPoolReuseAllowInternalDependencies); this model is the caller's
// side: every allocation a pool allocation on its stream, every free a
// cudaFreeAsync on the freeing stream, and, when the pool cannot grow, the
// allocating stream synchronized, the pool trimmed (cudaMemPoolTrimTo(0))
// and one retry; a memory fraction (set_per_process_memory_fraction)
// refuses an allocation that would bring the bytes allocated above it. What
// it leaves out: docs/REFERENCE.md, "Reference models".
//
// Checked against PyTorch's main branch (version.txt 2.15.0a0), whose
// mallocAsync has the synchronize-trim-retry at a failed cudaMallocAsync;
// earlier 2.x releases have the same memory-fraction check and no retry.
//
// What it counts: the stream waits the driver's pool inserts (its
// cudaMemPoolReuseAllowInternalDependencies), which a real driver does not
// report: the simulator's (SimBackend::pool_stream_waits), 0 on another
// backend; a host wait per stream synchronization before a trim (the
// backend interface has no stream synchronize: an event recorded on the
// stream and synchronized stands for cudaStreamSynchronize, so each also
// counts one event record among the replay's completion calls).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/replay/reference.h"
#include "tools/replay/reference_model.h"

namespace gpualloc::replay {
namespace {

class AsyncModel final : public ReferenceModel {
 public:
  AsyncModel(const AsyncModelOptions& o, std::shared_ptr<Backend> backend)
      : ReferenceModel("async", std::move(backend)),
        o_(o),
        sim_(std::dynamic_pointer_cast<SimBackend>(backend_)) {
    stats_.bytes_limit =
        o.memory_limit != 0 ? o.memory_limit : backend_->info().total_bytes;
    if (sim_ != nullptr) pool_waits_seen_ = sim_->pool_stream_waits();
  }

  absl::Status Configure() {
    PoolOptions p;
    p.release_threshold = o_.release_threshold;
    p.reuse = o_.reuse;
    return backend_->ConfigurePool(p);
  }

  ~AsyncModel() override {
    for (auto& [ptr, entry] : live_) {
      (void)backend_->PoolFree(ptr, Stream(entry.stream));
    }
    if (sync_event_.has_value()) (void)backend_->DestroyEvent(*sync_event_);
  }

  // mallocAsync.
  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream, std::size_t,
                                 Tag) override {
    // setMemoryFraction: pytorch_used_bytes + size above the limit is out of
    // memory before any pool call (the pool's reserve is not counted).
    if (o_.memory_limit != 0 && stats_.bytes_in_use + bytes > o_.memory_limit) {
      return OutOfMemory(
          bytes, absl::StrCat("the bytes allocated would pass the memory "
                              "limit of ",
                              o_.memory_limit,
                              " bytes (set_per_process_memory_fraction)"));
    }
    // cudaMallocAsync refuses 0 bytes; PyTorch asks for 1 then.
    const std::uint64_t size = std::max<std::size_t>(bytes, 1);
    absl::StatusOr<DeviceAddress> p = backend_->PoolAllocate(size, stream);
    if (absl::IsResourceExhausted(p.status())) {
      // A failed cudaMallocAsync: the stream is synchronized (the trim
      // releases only memory whose frees have completed), the pool's unused
      // memory goes back, then one retry.
      absl::Status s = SynchronizeStream(stream);
      if (!s.ok()) return s;
      s = TrimTo(0);
      if (!s.ok()) return s;
      p = backend_->PoolAllocate(size, stream);
    }
    if (absl::IsResourceExhausted(p.status())) {
      return OutOfMemory(bytes, p.status().message());
    }
    if (!p.ok()) return p.status();
    ++stats_.backend_allocs;
    live_[*p] = {bytes, stream.handle};
    OnAllocated(bytes, bytes);
    return reinterpret_cast<void*>(*p);
  }

  // cudaFreeAsync on the freeing stream: the pool reuses it by its rules.
  absl::Status Deallocate(void* ptr, Stream stream) override {
    const DeviceAddress a = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = live_.find(a);
    if (it == live_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the async model did not hand out ", a));
    }
    absl::Status s = backend_->PoolFree(a, stream);
    if (!s.ok()) return s;
    ++stats_.backend_frees;
    OnFreed(it->second.bytes, it->second.bytes);
    live_.erase(it);
    return absl::OkStatus();
  }

  Stats GetStats() const override {
    Refresh();
    return ReferenceModel::GetStats();
  }
  void ResetPeakStats() override {
    Refresh();
    ReferenceModel::ResetPeakStats();
    pool_peak_at_reset_ = pool_peak_;
  }
  Snapshot GetSnapshot() const override {
    Snapshot snap;
    snap.stats = GetStats();
    return snap;
  }
  absl::Status Trim() override { return TrimTo(0); }

 protected:
  // The pool's free memory is the driver's: not visible.
  void FreeSummary(std::uint64_t* largest, double* frag) const override {
    *largest = 0;
    *frag = 0;
  }

 private:
  absl::Status TrimTo(std::uint64_t keep) {
    Refresh();
    return backend_->PoolTrim(keep);
  }

  // cudaStreamSynchronize(stream): the host waits for the stream's work. The
  // backend interface has none, so an event (made once) is recorded on the
  // stream and synchronized.
  absl::Status SynchronizeStream(Stream stream) {
    if (!sync_event_.has_value()) {
      absl::StatusOr<EventHandle> e = backend_->CreateEvent();
      if (!e.ok()) return e.status();
      sync_event_ = *e;
    }
    absl::Status s = backend_->RecordEvent(*sync_event_, stream);
    if (!s.ok()) return s;
    s = backend_->SynchronizeEvent(*sync_event_);
    if (!s.ok()) return s;
    ++stats_.host_waits;
    return absl::OkStatus();
  }

  // The pool's reserved bytes (cudaMemPoolAttrReservedMemCurrent and
  // ...High): read when the figures are wanted, and before a trim; reserved
  // memory grows only in allocations, so the pool's high-water mark is the
  // peak whenever it rose since the last reset.
  void Refresh() const {
    // The stream waits the pool inserted since the last reading (a reset of
    // the simulator's counters starts them again from 0).
    if (sim_ != nullptr) {
      const std::uint64_t waits = sim_->pool_stream_waits();
      stats_.stream_waits +=
          waits >= pool_waits_seen_ ? waits - pool_waits_seen_ : waits;
      pool_waits_seen_ = waits;
    }
    absl::StatusOr<PoolUsage> u = backend_->GetPoolUsage();
    if (!u.ok()) return;
    stats_.bytes_reserved = u->reserved;
    pool_peak_ = u->peak_reserved;
    stats_.peak_bytes_reserved =
        std::max(stats_.peak_bytes_reserved, u->reserved);
    if (pool_peak_ > pool_peak_at_reset_) {
      stats_.peak_bytes_reserved =
          std::max(stats_.peak_bytes_reserved, pool_peak_);
    }
  }

  struct Entry {
    std::uint64_t bytes = 0;
    std::uintptr_t stream = 0;
  };
  const AsyncModelOptions o_;
  // The simulator, for the stream waits its pool inserts; null on a vendor
  // backend (the driver does not report them).
  const std::shared_ptr<SimBackend> sim_;
  mutable std::uint64_t pool_waits_seen_ = 0;
  std::optional<EventHandle> sync_event_;
  absl::flat_hash_map<DeviceAddress, Entry> live_;
  mutable std::uint64_t pool_peak_ = 0;
  std::uint64_t pool_peak_at_reset_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Allocator>> CreateAsyncModel(
    const AsyncModelOptions& options, std::shared_ptr<Backend> backend) {
  if (!backend->info().capabilities.stream_ordered_pools) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the async model needs a backend with stream-ordered pools; ",
        backend->info().backend, " has none"));
  }
  auto model = std::make_unique<AsyncModel>(options, std::move(backend));
  absl::Status s = model->Configure();
  if (!s.ok()) return s;
  return std::unique_ptr<Allocator>(std::move(model));
}

}  // namespace gpualloc::replay
