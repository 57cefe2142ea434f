// SPDX-License-Identifier: Apache-2.0
// core/modes/async_allocator.h: allocator=async (JAX's cuda_async,
// TensorFlow's GpuCudaMallocAsyncAllocator, PyTorch's
// CUDAMallocAsyncAllocator): every Allocate is one allocation from the
// backend's stream-ordered pool (cuMemAllocFromPoolAsync) and every Deallocate
// one stream-ordered free (cuMemFreeAsync). The pool keeps freed memory up to
// its release threshold, which is the limit, and reuses it across streams by
// CUDA's rules (all three turned on).
//
// What the allocator adds to the pool:
//  - The limit, on the bytes the live allocations hold and on the memory the
//    pool reserves (the pool itself only knows a release threshold, applied
//    at synchronization points). The pool grows only in PoolAllocate, by at
//    most a segment of whole recommended granules, so the allocator keeps an
//    upper bound of what it reserves (the last reading plus that much per
//    allocation since) and asks the pool nothing while the bound plus the
//    next segment fits. Otherwise it reads the pool's usage, and when a new
//    segment would pass the limit the pool first returns what it keeps
//    unused and complete (PoolTrim to the limit less the segment), then,
//    with garbage collection, again after a host wait for the streams that
//    freed memory; out of memory when that is not enough. The pool's free
//    memory might have held the request without growing, but nothing tells
//    (its free memory in pieces counts against the limit, as the bfc mode's
//    does). Far from the limit this costs a usage read now and then (each
//    time the segments allocated since the last add up to the room left);
//    near it, one per allocation, and a trim when a new segment would not
//    fit.
//  - The free rule (the same in every mode): a freed block is reusable only
//    after the work of its allocation stream, of the stream named in the free
//    and of every stream RecordStream declared. The pool orders a free only
//    after the work on the freeing stream, so Deallocate first records an
//    event on each of the others (the allocation stream when it differs, the
//    recorded ones) and makes the freeing stream wait for it, so the pool's
//    ordering covers their work too (what PyTorch's CUDAMallocAsyncAllocator
//    does for recorded streams). A free on the allocation stream costs
//    nothing extra.
//  - Garbage collection on out of memory: memory freed on a stream whose work
//    has not completed may be held back from other streams. The allocator
//    waits on the host for every stream that freed memory since its last wait
//    and retries once (TensorFlow's allocator synchronizes its stream and
//    retries the same way).
//  - Statistics, snapshot, Validate, double-free detection, alignments above
//    the device's (padding, as in the platform mode).
//  - Frees that cannot be ordered now: when recording or waiting for the
//    event that orders a free after another stream fails (or the pool's free
//    itself does), the free is accepted, the block is held back (it still
//    counts against the limit) and the free is tried again at every later
//    call until it goes through; the first such failure is reported on
//    stderr. The memory is never handed back unordered.
//
// Events come from a small pool of reusable ones, created on demand and
// destroyed with the allocator: a StreamWaitEvent captures the work an event
// stands for when it is called, so the event can be recorded again right after.
//
// The class is internal to core/modes: CreateAsyncAllocator
// (core/modes/modes.h) builds it. Its allocation, statistics, limit and
// validation live in core/modes/async_allocator.cc; the ordering of frees after
// other streams, the deferred frees, released streams and the out-of-memory
// wait in core/modes/async_allocator_frees.cc.
#ifndef GPUALLOC_CORE_ASYNC_ALLOCATOR_H_
#define GPUALLOC_CORE_ASYNC_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config/options.h"
#include "core/layer.h"
#include "core/live_allocations.h"
#include "core/lock.h"
#include "core/modes/non_caching_allocator.h"
#include "core/report/oom_message.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

class AsyncAllocator final : public NonCachingAllocator {
 public:
  AsyncAllocator(ResolvedOptions resolved, std::shared_ptr<Backend> backend,
                 const PoolUsage& usage);

  ~AsyncAllocator() override;

  // Tags change nothing here: this mode keeps no memory (Sleep refuses).
  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream,
                                 std::size_t alignment, Tag /*tag*/) override;

  // One attempt: one pool allocation. Out of memory is answered through
  // NoteOutOfMemory; `pending` is null on the handler's retry.
  absl::StatusOr<void*> AllocateOnce(std::size_t bytes, Stream stream,
                                     std::size_t alignment,
                                     PendingOutOfMemory* pending);

  absl::Status Deallocate(void* ptr, Stream stream) override;

  absl::Status RecordStream(void* ptr, Stream stream) override;

  Stats GetStats() const override;

  void ResetPeakStats() override;

  Snapshot GetSnapshot() const override;

  // Returns the pool's unused memory to the device (cuMemPoolTrimTo(0)).
  absl::Status Trim() override;

  // Records one last event on `stream` when anything here names it (a live
  // block's allocation or RecordStream stream, or a pool free awaiting the
  // out-of-memory wait) and names a key for that event instead: frees then
  // make their stream wait for the event, the out-of-memory wait
  // synchronizes it, and nothing is ever recorded on `stream` again.
  absl::Status ReleaseStream(Stream stream) override;

  // Also makes the new limit the pool's release threshold.
  absl::Status SetLimit(std::uint64_t bytes) override;

  // The pool's configuration for `limit`: the limit as its release
  // threshold (what it keeps cached at synchronization points), and every
  // reuse rule on.
  static PoolOptions PoolOptionsFor(std::uint64_t limit);

 private:
  static constexpr absl::string_view kMode = "async";

  static std::uint64_t SaturatingAdd(std::uint64_t a, std::uint64_t b);

  // How much more the pool may reserve when it reserves `reserved`.
  std::uint64_t Headroom(std::uint64_t reserved) const;

  // The most the pool grows by to serve a request of `device` bytes: a new
  // segment of whole recommended granules (how CUDA's pools and the
  // simulator's grow).
  std::uint64_t PoolGrowth(std::uint64_t device) const;

  // Before a request that may take the pool's reserved memory past the
  // limit (a new segment of `growth` bytes on top of what it may hold):
  // reads the pool's usage; when the segment does not fit, the pool returns
  // what it keeps unused and complete down to limit - growth (PoolTrim),
  // and with garbage collection again after a host wait for the streams
  // that freed memory. Whether the segment fits then. The pool's free
  // memory may hold the request without growing, but nothing tells; the
  // limit holds either way.
  absl::StatusOr<bool> MakeRoomLocked(std::uint64_t growth)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Reads the pool's usage (RefreshUsageLocked's bookkeeping); an error
  // names `call`.
  absl::Status ReadUsageLocked(absl::string_view call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Returns the pool's unused memory down to `keep` bytes, then reads it.
  absl::Status TrimLocked(std::uint64_t keep, absl::string_view call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Out of memory: the pool would pass the limit.
  absl::Status OverLimit(const OutOfMemoryFacts& facts,
                         PendingOutOfMemory* pending, std::uint64_t growth)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Returns the live allocation at `address` to the pool, ordered after the
  // work queued on `stream` and on every stream recorded for it. On error the
  // allocation stays live (waits already inserted only order streams more).
  absl::Status FreeLocked(DeviceAddress address, Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The pool orders a free after `stream` only: the allocation stream and
  // the recorded streams are made to come first, then the block goes back
  // to the pool. On error nothing went back (waits already inserted only
  // order streams more).
  absl::Status OrderAndFree(const LiveAllocation& a,
                            const std::vector<std::uintptr_t>& recorded,
                            Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A free that could not be ordered or done: the block leaves the live set
  // (the caller freed it) but its memory stays held, counted against the
  // limit, until RetryDeferredLocked gets the free through.
  void Defer(DeviceAddress address, Stream stream, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Tries every deferred free again, in order; those that still fail stay.
  void RetryDeferredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Makes work queued on `waiter` from now on start after the work queued so
  // far on `other`.
  absl::Status StreamWaitLocked(Stream waiter, Stream other)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Garbage collection: blocks the host until the work queued on every stream
  // that freed memory since the last wait has completed, so that the pool can
  // hand that memory to any stream. true when it waited for anything.
  absl::StatusOr<bool> WaitForFreesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Forgets the released streams whose last event has completed (a query
  // each, no wait): what names them then needs no ordering.
  void PruneReleasedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Calls visit(std::uintptr_t&) on every stream this allocator remembers
  // for a block: live blocks' allocation and RecordStream streams, and the
  // deferred frees' streams.
  template <typename Visit>
  void ForEachStreamFieldLocked(Visit visit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<EventHandle> AcquireEventLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Reads the pool's usage and folds the reserved bytes into the peak.
  // Reserved memory grows only in PoolAllocate and shrinks only at Trim and
  // synchronization points, so the pool's own high-water mark gives the exact
  // peak whenever it rose since the last reset; otherwise the peak is the
  // largest value seen since the reset (at the reset, before each Trim and at
  // each read).
  void RefreshUsageLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteUsageLocked(const PoolUsage& usage) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Invariants beyond LiveAllocations' L1-L3:
  //   A1. Each live allocation and each deferred free is one pool
  //       allocation: live + deferred = allocs - frees.
  //   A2. The live allocations and deferred frees hold no more than the
  //       limit, and deferred_bytes_ is what the deferred frees hold.
  //   A3. Streams are recorded only for live allocations, each at most once.
  //   A4. Every event created is idle between calls, or the last event of a
  //       released stream (none leaked).
  absl::Status ValidateLocked() const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Stats StatsLocked() const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The pool's reserved bytes, read now.
  std::uint64_t ReservedLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Streams declared with RecordStream, for the live allocations that have
  // any (empty on single-stream workloads).
  absl::flat_hash_map<DeviceAddress, std::vector<std::uintptr_t>> recorded_
      ABSL_GUARDED_BY(mu_);
  // Streams that freed memory since the last out-of-memory wait.
  absl::flat_hash_set<std::uintptr_t> freed_streams_ ABSL_GUARDED_BY(mu_);
  std::vector<EventHandle> idle_events_ ABSL_GUARDED_BY(mu_);
  // Frees accepted but not yet done (Defer), and the bytes they hold.
  struct Deferred {
    LiveAllocation allocation;
    std::vector<std::uintptr_t> recorded;
    Stream stream;
  };
  std::vector<Deferred> deferred_ ABSL_GUARDED_BY(mu_);
  std::uint64_t deferred_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool reported_deferral_ ABSL_GUARDED_BY(mu_) = false;
  // Released streams whose last event is not known complete: key -> event.
  absl::flat_hash_map<std::uintptr_t, EventHandle> released_
      ABSL_GUARDED_BY(mu_);
  std::uint64_t streams_released_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t events_created_ ABSL_GUARDED_BY(mu_) = 0;
  // The pool's usage at the last read, and the peak bookkeeping (see
  // RefreshUsageLocked).
  mutable PoolUsage usage_ ABSL_GUARDED_BY(mu_);
  std::uint64_t pool_peak_at_reset_ ABSL_GUARDED_BY(mu_);
  mutable std::uint64_t peak_reserved_ ABSL_GUARDED_BY(mu_);
  // At least what the pool reserves: its reserved bytes at the last reading
  // plus, for each allocation since, the most it may have grown by
  // (PoolGrowth). The pool grows only in PoolAllocate; it shrinks at Trim
  // and synchronization points, which only make this more pessimistic.
  mutable std::uint64_t reserved_bound_ ABSL_GUARDED_BY(mu_);
  std::uint64_t events_recorded_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t stream_waits_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t host_waits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_ASYNC_ALLOCATOR_H_
