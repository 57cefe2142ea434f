// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_allocator_slow_path.cc: the BFC facade
// (core/bfc/bfc_allocator.h) when no free chunk fits: growth, waiting for other
// streams' frees, garbage collection, out-of-memory reports.
#include <vector>

#include "absl/strings/str_format.h"
#include "core/bfc/bfc_allocator.h"
#include "core/report/format_bytes.h"

namespace gpualloc::core {

absl::Status BfcAllocator::RejectTooLarge(std::size_t bytes,
                                          PendingOutOfMemory* pending) {
  LockGuard lock(&mu_);
  return RejectTooLargeLocked(bytes, pending);
}

absl::Status BfcAllocator::RejectTooLargeLocked(std::size_t bytes,
                                                PendingOutOfMemory* pending) {
  return Exhausted(
      bytes,
      absl::ResourceExhaustedError(absl::StrFormat(
          "out of memory: Allocate(%d bytes) can never succeed: it exceeds "
          "the "
          "allocator's limit of %d bytes (%s) on %s. Hint: %s.",
          bytes, resolved_.limit, FormatBytes(resolved_.limit),
          backend_->info().name, RaiseLimitHint(resolved_))),
      StatsLocked(), pending);
}

absl::Status BfcAllocator::Exhausted(std::uint64_t bytes, absl::Status error,
                                     const Stats& stats,
                                     PendingOutOfMemory* pending) {
  if (history_ != nullptr) RecordOom(*history_, bytes, stats);
  return NoteOutOfMemory(std::move(error), oom_handler_, stats, pending,
                         &num_ooms_);
}

void BfcAllocator::BeginSearch(std::uintptr_t stream) {
  stream_order_.NewSearch();
  if (MayAsk() && !StreamOrder::IsReleasedKey(stream)) {
    stream_order_.BeforeAllocate(stream);
  }
}

void BfcAllocator::NoteFreeAmongStreams(std::uintptr_t stream,
                                        std::uint64_t bytes) {
  if (!MayAsk() || StreamOrder::IsReleasedKey(stream)) return;
  const std::uint64_t reserved = core_.counters().bytes_reserved;
  stream_order_.NoteFree(stream, bytes, reserved, /*earns=*/true);
  // A block handed over (or used on streams RecordStream named) waits for
  // those streams' work too: they want a marker as well.
  for (std::uintptr_t other : core_.last_free_others()) {
    if (!StreamOrder::IsReleasedKey(other)) {
      stream_order_.NoteFree(other, bytes, reserved, /*earns=*/false);
    }
  }
}

// Returns every free region or granule to the device (Trim, garbage
// collection). With several streams, free pieces of different streams'
// frees are separate chunks until their work is known complete: the host
// waits for that work first, so that they merge into whole free regions
// and granules that can go back.
absl::Status BfcAllocator::ReleaseFree() {
  fronts_.Flush();
  if (core_.multi_stream() && MayAsk()) {
    GPUALLOC_RETURN_IF_ERROR(WaitForFreeMemory(
        stream_order_, core_.PendingStreams(stream_order_, kNoStream),
        "returning it to the device"));
    core_.Settle(stream_order_);
  }
  return source_->ReleaseFree();
}

std::optional<DeviceAddress> BfcAllocator::Retry(
    const AllocationRequest& request, bool* event_failed,
    BfcCore::Search search) {
  // Every fitting chunk is looked at: this is the slow path.
  std::optional<DeviceAddress> a =
      core_.Allocate(request.chunk_size, request.requested, request.alignment,
                     request.stream.handle, Oracle(), search);
  *event_failed = !a.has_value() && stream_order_.has_error();
  return a;
}

// Several streams, before growing: ask the device (without waiting) how far
// the other streams whose frees hold free memory have come, and look at
// every fitting chunk (settling what completed); then, with the
// before_growth policy, make the stream wait on the device for the best
// fit's freeing work rather than grow. Growth is never the answer to work
// nobody asked about.
std::optional<DeviceAddress> BfcAllocator::SettleAndRetry(
    const AllocationRequest& request, bool* event_failed) {
  *event_failed = false;
  if (!stream_order_.streams() || !core_.multi_stream()) return std::nullopt;
  for (const StreamStamp& p :
       core_.PendingConditions(stream_order_, request.stream.handle)) {
    if (capturing_) break;  // known answers only
    if (!stream_order_.Poll(p.stream, p.stamp)) {
      *event_failed = true;
      return std::nullopt;
    }
  }
  if (std::optional<DeviceAddress> a = Retry(request, event_failed)) {
    return a;
  }
  if (*event_failed) return std::nullopt;
  if (stream_order_.policy() != CrossStreamReuse::kBeforeGrowth || !MayAsk() ||
      !stream_order_.MayWaitBeforeGrowth() ||
      StreamOrder::IsReleasedKey(request.stream.handle)) {
    return std::nullopt;
  }
  return Retry(request, event_failed, BfcCore::Search::kMayWait);
}

// Out of fitting free chunks: grow (or preallocate), then wait for the work
// of other streams' frees, then collect free regions and grow again; each
// step retries the core before the next. Only then out of memory.
absl::StatusOr<DeviceAddress> BfcAllocator::AllocateSlow(
    const AllocationRequest& request, PendingOutOfMemory* pending) {
  const std::uint64_t bytes = request.requested;
  const Stream stream = request.stream;
  // A retry that met a failing event call stops everything (EventFailure).
  bool event_failed = false;
  // Exported blocks freed and closed by every importer since, then blocks
  // waiting in the front caches, go back to the core first: no growth
  // while one of them would have served this request.
  if (shared_.any_held()) {
    ReleaseHeld();
    if (std::optional<DeviceAddress> a = Retry(request, &event_failed))
      return *a;
    if (event_failed) return EventFailure(bytes, stream);
  }
  if (fronts_.Flush()) {
    if (std::optional<DeviceAddress> a = Retry(request, &event_failed))
      return *a;
    if (event_failed) return EventFailure(bytes, stream);
  }
  if (core_.num_regions() != 0) {
    if (std::optional<DeviceAddress> a = SettleAndRetry(request, &event_failed))
      return *a;
    if (event_failed) return EventFailure(bytes, stream);
  }
  absl::Status why;
  const bool grows =
      !resolved_.options.preallocate || source_->GrowsAfterPreallocation();
  if (resolved_.options.preallocate && core_.num_regions() == 0) {
    why = source_->Preallocate();
    if (!why.ok()) {
      why = absl::Status(why.code(),
                         absl::StrFormat("preallocating %d bytes: %s",
                                         resolved_.limit, why.message()));
    }
  } else if (!grows) {
    why = absl::ResourceExhaustedError(
        "the preallocated region has no free chunk large enough");
  } else {
    why = source_->Grow(request.needed, stream);
  }
  if (why.ok()) {
    // Growth counted the free ends other streams' work may still use when
    // the stream may wait for them (expandable regions): so may the retry.
    const BfcCore::Search after_growth =
        core_.multi_stream() && MayAsk() &&
                stream_order_.MayWaitBeforeGrowth() &&
                !StreamOrder::IsReleasedKey(stream.handle)
            ? BfcCore::Search::kMayWait
            : BfcCore::Search::kAll;
    if (std::optional<DeviceAddress> a =
            Retry(request, &event_failed, after_growth))
      return *a;
    if (event_failed) return EventFailure(bytes, stream);
    why = absl::ResourceExhaustedError("no free chunk fits even after growing");
  }
  if (!absl::IsResourceExhausted(why)) return why;  // a driver error, not OOM

  // Memory other streams freed may be waiting for their work to finish:
  // first what a stream wait makes usable (when the policy says so) or a
  // query finds complete, then waiting on the host.
  // (Never for a private pool's block: its key is no stream to wait.)
  if (MayAsk() && core_.multi_stream() &&
      !StreamOrder::IsReleasedKey(stream.handle)) {
    if (std::optional<DeviceAddress> a =
            Retry(request, &event_failed, BfcCore::Search::kMayWait))
      return *a;
    if (event_failed) return EventFailure(bytes, stream);
  }
  if (MayAsk()) {
    const std::vector<std::uintptr_t> pending =
        core_.PendingStreams(stream_order_, stream.handle);
    if (!pending.empty()) {
      absl::Status waited = stream_order_.WaitForAll(pending);
      if (!waited.ok()) return EventFailure(bytes, stream, waited);
      // What the wait completed settles now.
      if (core_.multi_stream()) core_.Settle(stream_order_);
      if (std::optional<DeviceAddress> a = Retry(request, &event_failed))
        return *a;
      if (event_failed) return EventFailure(bytes, stream);
    }
  }

  // (The tags' free blocks first go back to general memory.)
  if (grows && resolved_.options.garbage_collection && !capturing_ &&
      pools_on_) {
    ReturnFreeTagMemory();
  }
  if (grows && resolved_.options.garbage_collection && !capturing_ &&
      source_->HasFreeToRelease()) {
    GPUALLOC_RETURN_IF_ERROR(ReleaseFree());
    absl::Status grown = source_->Grow(request.needed, stream);
    if (grown.ok()) {
      if (std::optional<DeviceAddress> a = Retry(request, &event_failed))
        return *a;
      if (event_failed) return EventFailure(bytes, stream);
    } else if (!absl::IsResourceExhausted(grown)) {
      return grown;
    } else {
      why = grown;
    }
  }
  if (capturing_) {
    why = absl::ResourceExhaustedError(absl::StrFormat(
        "%s; a graph capture is underway, during which the allocator "
        "neither waits for other streams' work nor returns memory to the "
        "device",
        why.message()));
  }
  return OutOfMemory(request, why, pending);
}

absl::Status BfcAllocator::EventFailure(std::uint64_t bytes, Stream stream,
                                        absl::Status error) {
  absl::Status kept = stream_order_.TakeError();
  if (error.ok()) error = kept;
  return absl::Status(
      error.code(),
      absl::StrFormat("Allocate(%d bytes) on stream %#x: a backend event "
                      "call failed, so memory other streams freed cannot be "
                      "reused safely: %s",
                      bytes, stream.handle, error.message()));
}

absl::Status BfcAllocator::OutOfMemory(const AllocationRequest& request,
                                       const absl::Status& why,
                                       PendingOutOfMemory* pending) {
  const Stats s = StatsLocked();
  return Exhausted(request.requested,
                   BfcOutOfMemoryError(backend_->info(), resolved_,
                                       request.requested, request.chunk_size,
                                       why.message(), s, core_.FreeBytes()),
                   s, pending);
}

}  // namespace gpualloc::core
