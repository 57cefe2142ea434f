// SPDX-License-Identifier: Apache-2.0
// core/modes/async_allocator.cc: allocator=async
// (core/modes/async_allocator.h): allocation from the stream-ordered pool, the
// limit on what the pool reserves (its usage, trims), Deallocate and
// RecordStream, statistics, snapshot, Validate, and CreateAsyncAllocator, which
// configures the pool.
#include "core/modes/async_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
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
#include "core/streams/stream_order.h"

namespace gpualloc::core {

AsyncAllocator::AsyncAllocator(ResolvedOptions resolved,
                               std::shared_ptr<Backend> backend,
                               const PoolUsage& usage)
    : NonCachingAllocator(std::move(resolved), std::move(backend)),
      usage_(usage),
      pool_peak_at_reset_(usage.peak_reserved),
      peak_reserved_(usage.reserved),
      reserved_bound_(usage.reserved) {}

AsyncAllocator::~AsyncAllocator() {
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
  // A free the pool refuses is tried once more (nothing could free it
  // later), and so are frees deferred since.
  for (const auto& [address, stream] : live) {
    if (!FreeLocked(address, stream).ok()) (void)FreeLocked(address, stream);
  }
  if (!deferred_.empty()) RetryDeferredLocked();
  // No event is in use outside a call, so every one is idle here, or a
  // released stream's last.
  for (EventHandle event : idle_events_) (void)backend_->DestroyEvent(event);
  for (const auto& [key, event] : released_) {
    (void)backend_->DestroyEvent(event);
  }
}

absl::StatusOr<void*> AsyncAllocator::Allocate(std::size_t bytes, Stream stream,
                                               std::size_t alignment,
                                               Tag /*tag*/) {
  return AllocateHandlingOutOfMemory(*this, bytes, stream, alignment);
}

absl::StatusOr<void*> AsyncAllocator::AllocateOnce(
    std::size_t bytes, Stream stream, std::size_t alignment,
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
  if (live_.counters().bytes_held + deferred_bytes_ + facts.device > Limit()) {
    return OutOfMemory(
        facts, pending, "the limit is reached",
        absl::StrFormat("the live allocations fill the limit; free memory "
                        "earlier, %s, or lower the batch size",
                        RaiseLimitHint(resolved_)));
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
  live_.Insert(*address, LiveAllocation{*base, facts.device, facts.size, bytes,
                                        stream.handle});
  MaybeValidate();
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
}

absl::Status AsyncAllocator::Deallocate(void* ptr, Stream stream) {
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

absl::Status AsyncAllocator::RecordStream(void* ptr, Stream stream) {
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

Stats AsyncAllocator::GetStats() const {
  LockGuard lock(&mu_);
  RefreshUsageLocked();
  return StatsLocked();
}

void AsyncAllocator::ResetPeakStats() {
  LockGuard lock(&mu_);
  live_.ResetPeaks();
  RefreshUsageLocked();
  pool_peak_at_reset_ = usage_.peak_reserved;
  peak_reserved_ = usage_.reserved;
}

Snapshot AsyncAllocator::GetSnapshot() const {
  LockGuard lock(&mu_);
  RefreshUsageLocked();
  Snapshot s;
  live_.AppendSnapshot(&s.regions);
  s.stats = StatsLocked();
  return s;
}

absl::Status AsyncAllocator::Trim() {
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

absl::Status AsyncAllocator::SetLimit(std::uint64_t bytes) {
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
  // The pool keeps up to the limit cached at synchronization points (its
  // release threshold, CreateAsyncAllocator): the new limit from now on.
  if (limit != Limit()) {
    absl::Status configured = backend_->ConfigurePool(PoolOptionsFor(limit));
    if (!configured.ok()) {
      return absl::Status(
          configured.code(),
          absl::StrFormat("SetLimit(%d bytes): setting the pool's release "
                          "threshold: %s; the limit stays %d",
                          limit, configured.message(), Limit()));
    }
  }
  limit_.store(limit, std::memory_order_relaxed);
  return absl::OkStatus();
}

PoolOptions AsyncAllocator::PoolOptionsFor(std::uint64_t limit) {
  PoolOptions pool;
  // Keep up to the limit cached at synchronization points: the allocator's
  // limit already bounds what the pool holds in use.
  pool.release_threshold = limit;
  pool.reuse = PoolReuse{/*follow_event_dependencies=*/true,
                         /*opportunistic=*/true,
                         /*internal_dependencies=*/true};
  return pool;
}

std::uint64_t AsyncAllocator::SaturatingAdd(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

std::uint64_t AsyncAllocator::Headroom(std::uint64_t reserved) const {
  return Limit() > reserved ? Limit() - reserved : 0;
}

std::uint64_t AsyncAllocator::PoolGrowth(std::uint64_t device) const {
  const DeviceInfo& info = backend_->info();
  const std::uint64_t size = RoundUpToMultiple(
      device, std::max<std::uint64_t>(info.allocation_alignment, 1));
  return RoundUpToMultiple(
      size, std::max<std::uint64_t>(info.recommended_granularity, 1));
}

absl::StatusOr<bool> AsyncAllocator::MakeRoomLocked(std::uint64_t growth) {
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

absl::Status AsyncAllocator::ReadUsageLocked(absl::string_view call) {
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

absl::Status AsyncAllocator::TrimLocked(std::uint64_t keep,
                                        absl::string_view call) {
  const absl::Status status = backend_->PoolTrim(keep);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrFormat("%s: backend %s PoolTrim(%d): %s", call,
                        backend_->info().backend, keep, status.message()));
  }
  return ReadUsageLocked(call);
}

absl::Status AsyncAllocator::OverLimit(const OutOfMemoryFacts& facts,
                                       PendingOutOfMemory* pending,
                                       std::uint64_t growth) {
  return OutOfMemory(
      facts, pending,
      absl::StrFormat(
          "the pool would pass the limit: it reserves %d bytes and may need "
          "%d more for a new segment; it returned what it keeps unused and "
          "complete, and the rest is in use, in pieces of partly used "
          "segments, or freed on streams whose work has not completed",
          usage_.reserved, growth),
      resolved_.options.garbage_collection
          ? absl::StrFormat("free memory earlier, %s, or lower the batch size",
                            RaiseLimitHint(resolved_))
          : "garbage collection is off (gc=false), so the allocator does "
            "not wait for pending frees: synchronize the streams that "
            "freed memory, turn gc on, free memory earlier or raise the "
            "limit");
}

void AsyncAllocator::RefreshUsageLocked() const {
  absl::StatusOr<PoolUsage> usage = backend_->GetPoolUsage();
  if (!usage.ok()) return;  // keep the last known values
  NoteUsageLocked(*usage);
}

void AsyncAllocator::NoteUsageLocked(const PoolUsage& usage) const {
  usage_ = usage;
  reserved_bound_ = usage_.reserved;
  peak_reserved_ = std::max(peak_reserved_, usage_.reserved);
  if (usage_.peak_reserved > pool_peak_at_reset_) {
    peak_reserved_ = std::max(peak_reserved_, usage_.peak_reserved);
  }
}

absl::Status AsyncAllocator::ValidateLocked() const {
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
        live_.counters().bytes_held, deferred_bytes, deferred_bytes_, Limit()));
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

Stats AsyncAllocator::StatsLocked() const {
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

std::uint64_t AsyncAllocator::ReservedLocked() {
  RefreshUsageLocked();
  return usage_.reserved;
}

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
  absl::Status configured =
      backend->ConfigurePool(AsyncAllocator::PoolOptionsFor(resolved.limit));
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
