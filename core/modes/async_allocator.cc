// SPDX-License-Identifier: Apache-2.0
// core/modes/async_allocator.cc: allocator=async (JAX's cuda_async,
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
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "core/alignment.h"
#include "core/bfc/plan_block.h"
#include "core/bfc/size_class.h"
#include "core/live_allocations.h"
#include "core/lock.h"
#include "core/modes/modes.h"
#include "core/modes/non_caching_allocator.h"
#include "core/report/oom_message.h"
#include "core/status_macros.h"
#include "core/stream_order.h"

namespace gpualloc::core {
namespace {

constexpr absl::string_view kMode = "async";

class AsyncAllocator final : public NonCachingAllocator {
 public:
  AsyncAllocator(ResolvedOptions resolved, std::shared_ptr<Backend> backend,
                 const PoolUsage& usage)
      : NonCachingAllocator(std::move(resolved), std::move(backend)),
        usage_(usage),
        pool_peak_at_reset_(usage.peak_reserved),
        peak_reserved_(usage.reserved),
        reserved_bound_(usage.reserved) {}

  ~AsyncAllocator() override {
    LockGuard lock(&mu_);
    RetryDeferredLocked();
    ReportLiveAtDestruction(kMode, backend_->info(), live_.size(),
                            live_.counters().bytes_requested);
    // Live allocations die with the allocator (as with BFC); their memory goes
    // back to the pool, ordered after the work of every stream known to use
    // it.
    std::vector<std::pair<DeviceAddress, Stream>> live;
    live.reserve(live_.size());
    live_.ForEach([&live](DeviceAddress address, const LiveAllocation& a) {
      // A released stream's blocks are freed on the default stream, made to
      // wait for that stream's last event.
      live.emplace_back(
          address, Stream(StreamOrder::IsReleasedKey(a.stream) ? 0 : a.stream));
    });
    for (const auto& [address, stream] : live) {
      (void)FreeLocked(address, stream);
    }
    // No event is in use outside a call, so every one is idle here, or a
    // released stream's last.
    for (EventHandle event : idle_events_) (void)backend_->DestroyEvent(event);
    for (const auto& [key, event] : released_) {
      (void)backend_->DestroyEvent(event);
    }
  }

  // Tags change nothing here: this mode keeps no memory (Sleep refuses).
  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream,
                                 std::size_t alignment, Tag /*tag*/) override {
    return AllocateHandlingOutOfMemory(*this, bytes, stream, alignment);
  }

  // One attempt: one pool allocation. Out of memory is answered through
  // NoteOutOfMemory; `pending` is null on the handler's retry.
  absl::StatusOr<void*> AllocateOnce(std::size_t bytes, Stream stream,
                                     std::size_t alignment,
                                     PendingOutOfMemory* pending) {
    GPUALLOC_RETURN_IF_ERROR(
        CheckAlignment(bytes, alignment, resolved_.max_alignment));
    // The pool rounds its own sizes; only a stricter alignment than the
    // device's needs padding from us.
    const BlockPlan plan =
        PlanBlock(kMode, bytes, alignment, resolved_.min_block_size, Limit(),
                  backend_->info(), /*whole_units=*/false);
    const OutOfMemoryFacts& facts = plan.facts;
    if (facts.device > Limit()) return RejectTooLarge(facts, pending);

    LockGuard lock(&mu_);
    if (ABSL_PREDICT_FALSE(!deferred_.empty())) RetryDeferredLocked();
    if (live_.counters().bytes_held + deferred_bytes_ + facts.device >
        Limit()) {
      return OutOfMemory(
          facts, pending, "the limit is reached",
          absl::StrFormat(
              "the live allocations fill the limit; free memory earlier, "
              "raise memory_fraction (now %g) or memory_limit, or lower the "
              "batch size",
              resolved_.options.memory_fraction));
    }
    // The pool's reserved memory stays within the limit too. While what it
    // may hold after this request (reserved_bound_ plus a new segment) fits,
    // nothing is asked; otherwise MakeRoomLocked reads the pool and trims it
    // (or waits for pending frees) until a new segment fits.
    const std::uint64_t growth = PoolGrowth(facts.device);
    if (growth > Headroom(reserved_bound_)) {
      GPUALLOC_ASSIGN_OR_RETURN(const bool room, MakeRoomLocked(growth));
      if (!room) return OverLimit(facts, pending, growth);
    }
    absl::StatusOr<DeviceAddress> base =
        backend_->PoolAllocate(facts.device, stream);
    bool waited = false;
    if (absl::IsResourceExhausted(base.status()) &&
        resolved_.options.garbage_collection) {
      absl::StatusOr<bool> w = WaitForFreesLocked();
      if (!w.ok()) return w.status();
      waited = *w;
      // Retry once, and only when something may have changed.
      if (waited) base = backend_->PoolAllocate(facts.device, stream);
    }
    if (!base.ok()) {
      if (absl::IsResourceExhausted(base.status())) {
        return OutOfMemory(
            facts, pending, base.status().message(),
            waited ? "the pool found no memory even after waiting for the "
                     "pending frees of every stream; the device may be held "
                     "by other processes: lower the limit or free device "
                     "memory elsewhere"
                   : "the device refused more memory below the limit (other "
                     "processes may hold it); lower the limit or free device "
                     "memory elsewhere");
      }
      return absl::Status(
          base.status().code(),
          absl::StrFormat("async allocator: backend %s PoolAllocate(%d bytes, "
                          "stream %#x) for Allocate(%d bytes): %s",
                          backend_->info().backend, facts.device, stream.handle,
                          bytes, base.status().message()));
    }
    reserved_bound_ = SaturatingAdd(reserved_bound_, growth);
    const absl::StatusOr<DeviceAddress> address =
        HandOutAddress(backend_->info(), "PoolAllocate", *base, plan);
    if (!address.ok()) {
      (void)backend_->PoolFree(*base, stream);
      return address.status();
    }
    ++backend_allocs_;
    live_.Insert(*address, LiveAllocation{*base, facts.device, facts.size,
                                          bytes, stream.handle});
    MaybeValidate();
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
  }

  absl::Status Deallocate(void* ptr, Stream stream) override {
    if (ptr == nullptr) return absl::OkStatus();  // like free(NULL)
    const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
    LockGuard lock(&mu_);
    if (ABSL_PREDICT_FALSE(!deferred_.empty())) RetryDeferredLocked();
    if (live_.Find(address) == nullptr) {
      return live_.DiagnoseUnknown("Deallocate", address);
    }
    absl::Status status = FreeLocked(address, stream);
    if (!status.ok()) {
      // Accepted all the same: the block waits until the free can be
      // ordered (Deferred).
      Defer(address, stream, status);
      status = absl::OkStatus();
    }
    MaybeValidate();
    return status;
  }

  absl::Status RecordStream(void* ptr, Stream stream) override {
    const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
    LockGuard lock(&mu_);
    if (live_.Find(address) == nullptr) {
      return live_.DiagnoseUnknown("RecordStream", address);
    }
    const DeviceInfo& info = backend_->info();
    if (!info.capabilities.streams) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "RecordStream(%#x, stream %#x): backend %s (device %d, %s) lacks "
          "the streams capability, so a free cannot be ordered after another "
          "stream's work",
          address, stream.handle, info.backend, info.ordinal, info.name));
    }
    std::vector<std::uintptr_t>& streams = recorded_[address];
    if (std::find(streams.begin(), streams.end(), stream.handle) ==
        streams.end()) {
      streams.push_back(stream.handle);
    }
    return absl::OkStatus();
  }

  Stats GetStats() const override {
    LockGuard lock(&mu_);
    RefreshUsageLocked();
    return StatsLocked();
  }

  void ResetPeakStats() override {
    LockGuard lock(&mu_);
    live_.ResetPeaks();
    RefreshUsageLocked();
    pool_peak_at_reset_ = usage_.peak_reserved;
    peak_reserved_ = usage_.reserved;
  }

  Snapshot GetSnapshot() const override {
    LockGuard lock(&mu_);
    RefreshUsageLocked();
    Snapshot s;
    live_.AppendSnapshot(&s.regions);
    s.stats = StatsLocked();
    return s;
  }

  // Returns the pool's unused memory to the device (cuMemPoolTrimTo(0)).
  absl::Status Trim() override {
    LockGuard lock(&mu_);
    if (!deferred_.empty()) RetryDeferredLocked();
    // Reserved memory only shrinks here (and at synchronization points above
    // the release threshold): note its value first so the peak keeps it.
    RefreshUsageLocked();
    absl::Status status = backend_->PoolTrim(0);
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrFormat("Trim: backend %s PoolTrim(0): %s",
                          backend_->info().backend, status.message()));
    }
    RefreshUsageLocked();
    return absl::OkStatus();
  }

  // Records one last event on `stream` when anything here names it (a live
  // block's allocation or RecordStream stream, or a pool free awaiting the
  // out-of-memory wait) and names a key for that event instead: frees then
  // make their stream wait for the event, the out-of-memory wait
  // synchronizes it, and nothing is ever recorded on `stream` again.
  absl::Status ReleaseStream(Stream stream) override {
    LockGuard lock(&mu_);
    if (!backend_->info().capabilities.streams) return absl::OkStatus();
    PruneReleasedLocked();
    const std::uintptr_t s = stream.handle;
    bool named = freed_streams_.contains(s);
    ForEachStreamFieldLocked([&](std::uintptr_t& f) { named |= f == s; });
    if (!named) return absl::OkStatus();
    GPUALLOC_ASSIGN_OR_RETURN(const EventHandle event, AcquireEventLocked());
    absl::Status status = backend_->RecordEvent(event, stream);
    if (!status.ok()) {
      idle_events_.push_back(event);
      return absl::Status(
          status.code(),
          absl::StrFormat("ReleaseStream(stream %#x): recording its last "
                          "event failed, nothing changed: %s",
                          s, status.message()));
    }
    ++events_recorded_;
    const std::uintptr_t key = StreamOrder::kReleasedBit | ++streams_released_;
    released_[key] = event;
    ForEachStreamFieldLocked([&](std::uintptr_t& f) {
      if (f == s) f = key;
    });
    if (freed_streams_.erase(s) != 0) freed_streams_.insert(key);
    for (Deferred& d : deferred_) {
      if (d.stream.handle == key) {
        // Freed on it: the default stream frees it, after its last event.
        d.stream = Stream(0);
        if (std::find(d.recorded.begin(), d.recorded.end(), key) ==
            d.recorded.end()) {
          d.recorded.push_back(key);
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status SetLimit(std::uint64_t bytes) override {
    GPUALLOC_ASSIGN_OR_RETURN(
        const std::uint64_t limit,
        NewLimit(bytes, resolved_.granularity, backend_->info()));
    LockGuard lock(&mu_);
    if (!deferred_.empty()) RetryDeferredLocked();
    const std::uint64_t held = live_.counters().bytes_held + deferred_bytes_;
    if (held > limit) return LiveAboveNewLimit(limit, held, kMode);
    // The pool's unused memory counts as reserved: below a lower limit it
    // goes back first, as Trim does. When the pool still reserves more, the
    // call is refused and the limit stays.
    GPUALLOC_RETURN_IF_ERROR(ReadUsageLocked("SetLimit"));
    if (usage_.reserved > limit) {
      GPUALLOC_RETURN_IF_ERROR(TrimLocked(limit, "SetLimit"));
      if (usage_.reserved > limit) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "SetLimit(%d bytes): the pool still reserves %d bytes after "
            "returning what it keeps unused and complete (the rest is in "
            "use, in pieces of partly used segments, or freed on streams "
            "whose work has not completed); the limit stays %d. Free memory "
            "first, or synchronize the streams that freed it",
            limit, usage_.reserved, Limit()));
      }
    }
    limit_.store(limit, std::memory_order_relaxed);
    return absl::OkStatus();
  }

 private:
  static std::uint64_t SaturatingAdd(std::uint64_t a, std::uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
  }
  // How much more the pool may reserve when it reserves `reserved`.
  std::uint64_t Headroom(std::uint64_t reserved) const {
    return Limit() > reserved ? Limit() - reserved : 0;
  }
  // The most the pool grows by to serve a request of `device` bytes: a new
  // segment of whole recommended granules (how CUDA's pools and the
  // simulator's grow).
  std::uint64_t PoolGrowth(std::uint64_t device) const {
    const DeviceInfo& info = backend_->info();
    const std::uint64_t size = RoundUpToMultiple(
        device, std::max<std::uint64_t>(info.allocation_alignment, 1));
    return RoundUpToMultiple(
        size, std::max<std::uint64_t>(info.recommended_granularity, 1));
  }
  // Before a request that may take the pool's reserved memory past the
  // limit (a new segment of `growth` bytes on top of what it may hold):
  // reads the pool's usage; when the segment does not fit, the pool returns
  // what it keeps unused and complete down to limit - growth (PoolTrim),
  // and with garbage collection again after a host wait for the streams
  // that freed memory. Whether the segment fits then. The pool's free
  // memory may hold the request without growing, but nothing tells; the
  // limit holds either way.
  absl::StatusOr<bool> MakeRoomLocked(std::uint64_t growth)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_RETURN_IF_ERROR(ReadUsageLocked("Allocate"));
    if (growth <= Headroom(usage_.reserved)) return true;
    // The pool reserves at least what the live blocks and deferred frees
    // hold: when that leaves no room for the segment, nothing would help.
    if (growth > Limit() ||
        live_.counters().bytes_held + deferred_bytes_ > Limit() - growth) {
      return false;
    }
    const std::uint64_t keep = Limit() - growth;
    GPUALLOC_RETURN_IF_ERROR(TrimLocked(keep, "Allocate"));
    if (growth <= Headroom(usage_.reserved)) return true;
    if (!resolved_.options.garbage_collection) return false;
    GPUALLOC_ASSIGN_OR_RETURN(const bool waited, WaitForFreesLocked());
    if (!waited) return false;
    GPUALLOC_RETURN_IF_ERROR(TrimLocked(keep, "Allocate"));
    return growth <= Headroom(usage_.reserved);
  }

  // Reads the pool's usage (RefreshUsageLocked's bookkeeping); an error
  // names `call`.
  absl::Status ReadUsageLocked(absl::string_view call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<PoolUsage> usage = backend_->GetPoolUsage();
    if (!usage.ok()) {
      return absl::Status(
          usage.status().code(),
          absl::StrFormat("%s: backend %s GetPoolUsage (the pool's reserved "
                          "memory, kept within the limit): %s",
                          call, backend_->info().backend,
                          usage.status().message()));
    }
    NoteUsageLocked(*usage);
    return absl::OkStatus();
  }

  // Returns the pool's unused memory down to `keep` bytes, then reads it.
  absl::Status TrimLocked(std::uint64_t keep, absl::string_view call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Status status = backend_->PoolTrim(keep);
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrFormat("%s: backend %s PoolTrim(%d): %s", call,
                          backend_->info().backend, keep, status.message()));
    }
    return ReadUsageLocked(call);
  }

  // Out of memory: the pool would pass the limit.
  absl::Status OverLimit(const OutOfMemoryFacts& facts,
                         PendingOutOfMemory* pending, std::uint64_t growth)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return OutOfMemory(
        facts, pending,
        absl::StrFormat(
            "the pool would pass the limit: it reserves %d bytes and may need "
            "%d more for a new segment; it returned what it keeps unused and "
            "complete, and the rest is in use, in pieces of partly used "
            "segments, or freed on streams whose work has not completed",
            usage_.reserved, growth),
        resolved_.options.garbage_collection
            ? "free memory earlier, raise memory_fraction or memory_limit, or "
              "lower the batch size"
            : "garbage collection is off (gc=false), so the allocator does "
              "not wait for pending frees: synchronize the streams that "
              "freed memory, turn gc on, free memory earlier or raise the "
              "limit");
  }

  // Returns the live allocation at `address` to the pool, ordered after the
  // work queued on `stream` and on every stream recorded for it. On error the
  // allocation stays live (waits already inserted only order streams more).
  absl::Status FreeLocked(DeviceAddress address, Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const LiveAllocation* a = live_.Find(address);
    GPUALLOC_DCHECK(a != nullptr);
    auto recorded = recorded_.find(address);
    static const std::vector<std::uintptr_t> kNone;
    absl::Status status = OrderAndFree(
        *a, recorded != recorded_.end() ? recorded->second : kNone, stream);
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrFormat("Deallocate(%#x, stream %#x): %s", address,
                          stream.handle, status.message()));
    }
    live_.Remove(address);
    if (recorded != recorded_.end()) recorded_.erase(recorded);
    return absl::OkStatus();
  }

  // The pool orders a free after `stream` only: the allocation stream and
  // the recorded streams are made to come first, then the block goes back
  // to the pool. On error nothing went back (waits already inserted only
  // order streams more).
  absl::Status OrderAndFree(const LiveAllocation& a,
                            const std::vector<std::uintptr_t>& recorded,
                            Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::uintptr_t> others;
    if (a.stream != stream.handle) others.push_back(a.stream);
    for (std::uintptr_t other : recorded) {
      if (other != stream.handle &&
          std::find(others.begin(), others.end(), other) == others.end()) {
        others.push_back(other);
      }
    }
    if (!backend_->info().capabilities.streams) others.clear();
    for (std::uintptr_t other : others) {
      absl::Status waited = StreamWaitLocked(stream, Stream(other));
      if (!waited.ok()) {
        return absl::Status(
            waited.code(),
            absl::StrFormat("ordering the free after %s stream %#x: %s",
                            other == a.stream ? "allocation" : "recorded",
                            other, waited.message()));
      }
    }
    absl::Status freed = backend_->PoolFree(a.base, stream);
    if (!freed.ok()) {
      return absl::Status(
          freed.code(),
          absl::StrFormat("backend %s PoolFree(%#x): %s",
                          backend_->info().backend, a.base, freed.message()));
    }
    ++backend_frees_;
    freed_streams_.insert(stream.handle);
    return absl::OkStatus();
  }

  // A free that could not be ordered or done: the block leaves the live set
  // (the caller freed it) but its memory stays held, counted against the
  // limit, until RetryDeferredLocked gets the free through.
  void Defer(DeviceAddress address, Stream stream, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Deferred d;
    d.stream = stream;
    auto recorded = recorded_.find(address);
    if (recorded != recorded_.end()) {
      d.recorded = std::move(recorded->second);
      recorded_.erase(recorded);
    }
    d.allocation = live_.Remove(address);
    deferred_bytes_ += d.allocation.held;
    deferred_.push_back(std::move(d));
    if (!reported_deferral_) {
      reported_deferral_ = true;
      std::fprintf(stderr,
                   "gpualloc: async allocator on %s (device %d): a free could "
                   "not be ordered or done (%s); its block is held back and "
                   "the free retried at later calls\n",
                   backend_->info().name.c_str(), backend_->info().ordinal,
                   std::string(why.message()).c_str());
    }
  }

  // Tries every deferred free again, in order; those that still fail stay.
  void RetryDeferredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<Deferred> still;
    for (Deferred& d : deferred_) {
      if (OrderAndFree(d.allocation, d.recorded, d.stream).ok()) {
        deferred_bytes_ -= d.allocation.held;
      } else {
        still.push_back(std::move(d));
      }
    }
    deferred_ = std::move(still);
  }

  // Makes work queued on `waiter` from now on start after the work queued so
  // far on `other`.
  absl::Status StreamWaitLocked(Stream waiter, Stream other)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (StreamOrder::IsReleasedKey(other.handle)) {
      // Its last event stands for it; a forgotten one has completed.
      auto it = released_.find(other.handle);
      if (it == released_.end()) return absl::OkStatus();
      absl::Status status = backend_->StreamWaitEvent(waiter, it->second);
      if (status.ok()) ++stream_waits_;
      return status;
    }
    GPUALLOC_ASSIGN_OR_RETURN(const EventHandle event, AcquireEventLocked());
    absl::Status status = backend_->RecordEvent(event, other);
    if (status.ok()) {
      ++events_recorded_;
      status = backend_->StreamWaitEvent(waiter, event);
      if (status.ok()) ++stream_waits_;
    }
    idle_events_.push_back(event);
    return status;
  }

  // Garbage collection: blocks the host until the work queued on every stream
  // that freed memory since the last wait has completed, so that the pool can
  // hand that memory to any stream. true when it waited for anything.
  absl::StatusOr<bool> WaitForFreesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (freed_streams_.empty() || !backend_->info().capabilities.streams) {
      return false;
    }
    GPUALLOC_ASSIGN_OR_RETURN(const EventHandle event, AcquireEventLocked());
    absl::Status status;
    std::vector<std::uintptr_t> done;
    for (std::uintptr_t s : freed_streams_) {
      if (StreamOrder::IsReleasedKey(s)) {
        auto it = released_.find(s);
        if (it != released_.end()) {
          status = backend_->SynchronizeEvent(it->second);
          if (!status.ok()) break;
          ++host_waits_;
          idle_events_.push_back(it->second);
          released_.erase(it);
        }
        done.push_back(s);
        continue;
      }
      status = backend_->RecordEvent(event, Stream(s));
      if (!status.ok()) break;
      ++events_recorded_;
      status = backend_->SynchronizeEvent(event);
      if (!status.ok()) break;
      ++host_waits_;
      done.push_back(s);
    }
    idle_events_.push_back(event);
    for (std::uintptr_t s : done) freed_streams_.erase(s);
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrFormat("async allocator: waiting for pending frees after "
                          "running out of memory on backend %s: %s",
                          backend_->info().backend, status.message()));
    }
    return !done.empty();
  }

  // Forgets the released streams whose last event has completed (a query
  // each, no wait): what names them then needs no ordering.
  void PruneReleasedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = released_.begin(); it != released_.end();) {
      absl::StatusOr<bool> done = backend_->QueryEvent(it->second);
      if (done.ok() && *done) {
        idle_events_.push_back(it->second);
        freed_streams_.erase(it->first);
        released_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  // Calls visit(std::uintptr_t&) on every stream this allocator remembers
  // for a block: live blocks' allocation and RecordStream streams, and the
  // deferred frees' streams.
  template <typename Visit>
  void ForEachStreamFieldLocked(Visit visit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    live_.ForEachStream(visit);
    for (auto& [address, streams] : recorded_) {
      for (std::uintptr_t& s : streams) visit(s);
    }
    for (Deferred& d : deferred_) {
      visit(d.allocation.stream);
      for (std::uintptr_t& s : d.recorded) visit(s);
      visit(d.stream.handle);
    }
  }

  absl::StatusOr<EventHandle> AcquireEventLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!idle_events_.empty()) {
      const EventHandle event = idle_events_.back();
      idle_events_.pop_back();
      return event;
    }
    absl::StatusOr<EventHandle> event = backend_->CreateEvent();
    if (event.ok()) ++events_created_;
    return event;
  }

  // Reads the pool's usage and folds the reserved bytes into the peak.
  // Reserved memory grows only in PoolAllocate and shrinks only at Trim and
  // synchronization points, so the pool's own high-water mark gives the exact
  // peak whenever it rose since the last reset; otherwise the peak is the
  // largest value seen since the reset (at the reset, before each Trim and at
  // each read).
  void RefreshUsageLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<PoolUsage> usage = backend_->GetPoolUsage();
    if (!usage.ok()) return;  // keep the last known values
    NoteUsageLocked(*usage);
  }
  void NoteUsageLocked(const PoolUsage& usage) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    usage_ = usage;
    reserved_bound_ = usage_.reserved;
    peak_reserved_ = std::max(peak_reserved_, usage_.reserved);
    if (usage_.peak_reserved > pool_peak_at_reset_) {
      peak_reserved_ = std::max(peak_reserved_, usage_.peak_reserved);
    }
  }

  // Invariants beyond LiveAllocations' L1-L3:
  //   A1. Each live allocation and each deferred free is one pool
  //       allocation: live + deferred = allocs - frees.
  //   A2. The live allocations and deferred frees hold no more than the
  //       limit, and deferred_bytes_ is what the deferred frees hold.
  //   A3. Streams are recorded only for live allocations, each at most once.
  //   A4. Every event created is idle between calls, or the last event of a
  //       released stream (none leaked).
  absl::Status ValidateLocked() const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_RETURN_IF_ERROR(live_.Validate());
    if (backend_allocs_ - backend_frees_ != live_.size() + deferred_.size()) {
      return absl::InternalError(absl::StrFormat(
          "invariant A1 broken: %d live allocations and %d deferred frees, "
          "but %d pool allocations minus %d frees",
          live_.size(), deferred_.size(), backend_allocs_, backend_frees_));
    }
    std::uint64_t deferred_bytes = 0;
    for (const Deferred& d : deferred_) deferred_bytes += d.allocation.held;
    if (deferred_bytes != deferred_bytes_ ||
        live_.counters().bytes_held + deferred_bytes_ > Limit()) {
      return absl::InternalError(absl::StrFormat(
          "invariant A2 broken: %d bytes held live and %d (counted %d) by "
          "deferred frees, limit %d",
          live_.counters().bytes_held, deferred_bytes, deferred_bytes_,
          Limit()));
    }
    for (const auto& [address, streams] : recorded_) {
      std::vector<std::uintptr_t> sorted = streams;
      std::sort(sorted.begin(), sorted.end());
      if (live_.Find(address) == nullptr || streams.empty() ||
          std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
        return absl::InternalError(absl::StrFormat(
            "invariant A3 broken: %d streams recorded for %#x, which is %s",
            streams.size(), address,
            live_.Find(address) == nullptr ? "not live" : "live"));
      }
    }
    if (idle_events_.size() + released_.size() != events_created_) {
      return absl::InternalError(absl::StrFormat(
          "invariant A4 broken: %d events created, %d idle, %d kept for "
          "released streams",
          events_created_, idle_events_.size(), released_.size()));
    }
    return absl::OkStatus();
  }

  Stats StatsLocked() const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stats s = CommonStatsLocked();
    // The pool's view; its free memory is not visible block by block, so
    // largest_free_block_bytes and fragmentation stay 0.
    s.bytes_reserved = usage_.reserved;
    s.peak_bytes_reserved = peak_reserved_;
    s.events_recorded = events_recorded_;
    s.stream_waits = stream_waits_;
    s.host_waits = host_waits_;
    return s;
  }

  // The pool's reserved bytes, read now.
  std::uint64_t ReservedLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    RefreshUsageLocked();
    return usage_.reserved;
  }

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

}  // namespace

absl::StatusOr<std::unique_ptr<Allocator>> CreateAsyncAllocator(
    ResolvedOptions resolved, std::shared_ptr<Backend> backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CreateAsyncAllocator: backend is null");
  }
  const DeviceInfo& info = backend->info();
  if (!info.capabilities.stream_ordered_pools) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "allocator=async needs a stream-ordered memory pool "
        "(cuMemAllocFromPoolAsync / hipMallocFromPoolAsync), but backend %s "
        "(device %d, %s) lacks the stream_ordered_pools capability; use "
        "allocator=bfc",
        info.backend, info.ordinal, info.name));
  }
  PoolOptions pool;
  // Keep up to the limit cached at synchronization points: the allocator's
  // limit already bounds what the pool holds in use.
  pool.release_threshold = resolved.limit;
  pool.reuse = PoolReuse{/*follow_event_dependencies=*/true,
                         /*opportunistic=*/true,
                         /*internal_dependencies=*/true};
  absl::Status configured = backend->ConfigurePool(pool);
  if (!configured.ok()) {
    return absl::Status(
        configured.code(),
        absl::StrFormat("allocator=async: configuring the stream-ordered pool "
                        "of backend %s (device %d, %s): %s",
                        info.backend, info.ordinal, info.name,
                        configured.message()));
  }
  absl::StatusOr<PoolUsage> usage = backend->GetPoolUsage();
  if (!usage.ok()) {
    return absl::Status(
        usage.status().code(),
        absl::StrFormat("allocator=async: reading the pool usage of backend "
                        "%s (device %d, %s): %s",
                        info.backend, info.ordinal, info.name,
                        usage.status().message()));
  }
  return std::unique_ptr<Allocator>(
      new AsyncAllocator(std::move(resolved), std::move(backend), *usage));
}

}  // namespace gpualloc::core
