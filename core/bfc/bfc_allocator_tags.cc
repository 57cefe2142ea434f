// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_allocator_tags.cc: the BFC facade's (core/bfc/bfc_allocator.h)
// tagged allocations and Sleep / Wake (Allocator::Sleep): the lock, the capture
// and limit checks and the statistics around the tags' memory
// (core/bfc/tagged_memory.h), and the mappings of their own that the tags'
// slabs are with expandable regions.
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "core/bfc/bfc_allocator.h"

namespace gpualloc::core {

// The tags' SlabSource: TakeTagSlab, the rest as for private pools.
class TagSlabs final : public SlabSource {
 public:
  explicit TagSlabs(BfcAllocator& a) : a_(a) {}
  absl::StatusOr<DeviceAddress> TakeSlab(std::uint64_t* bytes,
                                         std::uintptr_t key) override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {  // called under mu_, via tags_
    return a_.TakeTagSlab(bytes, key);
  }
  bool Contiguous(DeviceAddress a, DeviceAddress b) const override {
    return a_.Contiguous(a, b);
  }
  void ReturnSlab(DeviceAddress base, absl::Span<const std::uintptr_t> streams)
      override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    a_.ReturnSlab(base, streams);
  }

 private:
  BfcAllocator& a_;
};

std::unique_ptr<SlabSource> BfcAllocator::MakeTagSlabs() {
  return std::make_unique<TagSlabs>(*this);
}

absl::StatusOr<void*> BfcAllocator::AllocateTagged(std::size_t bytes,
                                                   Stream given,
                                                   std::size_t alignment,
                                                   Tag tag) {
  return AllocateHandlingOutOfMemory(*this, bytes, given, alignment, tag);
}

// A tag's memory is a pool of its own (tags_, the tag as its id) whose
// slabs are mappings of their own where memory can sleep (TakeTagSlab), so
// that no granule holds another tag's or untagged memory.
absl::StatusOr<DeviceAddress> BfcAllocator::AllocateToTag(
    Tag tag, const AllocationRequest& request, PendingOutOfMemory* pending) {
  const Stream stream = request.stream;
  if (std::optional<PoolId> pool = pools_.RoutedPool(stream.handle)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Allocate(%d bytes, tag %d) on stream %#x: the stream allocates to "
        "private pool %d, whose memory a graph replays and may not sleep",
        request.requested, tag, stream.handle, *pool));
  }
  GPUALLOC_RETURN_IF_ERROR(tags_.CheckAllocate(tag, request.requested));
  if (!tags_.pools().Has(tag)) {
    // A key no stream has, like a private pool's (CreatePool).
    tags_.pools().Create(StreamOrder::kReleasedBit | ++streams_released_, tag);
  }
  slab_pending_ = pending;
  absl::StatusOr<DeviceAddress> address = tags_.pools().Allocate(
      tag, request.chunk_size, request.requested, request.alignment,
      stream.handle, Oracle(), *tag_slabs_);
  slab_pending_ = nullptr;
  return address;
}

// A slab for a tag: with expandable regions, a new mapping of exactly the
// slab (whole granules); otherwise a block of general memory.
absl::StatusOr<DeviceAddress> BfcAllocator::TakeTagSlab(std::uint64_t* bytes,
                                                        std::uintptr_t key) {
  if (!source_->CanSleep()) return TakeSlab(bytes, key);
  const std::uint64_t want = RoundUpToMultiple(*bytes, resolved_.granularity);
  if (want > resolved_.limit) return RejectTooLargeLocked(want, slab_pending_);
  // The first memory of a preallocating allocator is the preallocation.
  if (resolved_.options.preallocate && core_.num_regions() == 0) {
    absl::Status preallocated = source_->Preallocate();
    if (!preallocated.ok() && !absl::IsResourceExhausted(preallocated)) {
      return preallocated;
    }
  }
  RelaxedCapture relaxed(*backend_, capturing_);
  GPUALLOC_RETURN_IF_ERROR(relaxed.status());
  absl::StatusOr<DeviceAddress> base = source_->MapExclusive(want);
  // Out of room: the free memory that waits for other streams' work, then
  // mapped again.
  if (absl::IsResourceExhausted(base.status()) &&
      resolved_.options.garbage_collection && !capturing_ &&
      source_->HasFreeToRelease()) {
    GPUALLOC_RETURN_IF_ERROR(ReleaseFree());
    base = source_->MapExclusive(want);
  }
  if (!base.ok()) {
    if (!absl::IsResourceExhausted(base.status())) return base.status();
    return OutOfMemory({.requested = want,
                        .chunk_size = want,
                        .alignment = resolved_.granularity,
                        .needed = want,
                        .stream = Stream(key)},
                       base.status(), slab_pending_);
  }
  core_.AllocateAt(*base, want, want, key);
  *bytes = want;
  return *base;
}

absl::Status BfcAllocator::CheckSleepable(absl::string_view call, Tag tag,
                                          bool backup) {
  GPUALLOC_RETURN_IF_ERROR(tags_.CheckSleepable(call, tag, backup, *source_));
  if (capturing_ && CaptureNow()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s(tag %d) during a graph capture: it would make the host wait and "
        "map or unmap memory; call it after EndAllocateToPool",
        call, tag));
  }
  return absl::OkStatus();
}

void BfcAllocator::ReturnFreeTagMemory() {
  tags_.ReturnFree(MayAsk() ? &stream_order_ : nullptr, *oracle_, *tag_slabs_);
}

absl::Status BfcAllocator::ReleaseAllFree() {
  if (pools_on_) ReturnFreeTagMemory();
  return ReleaseFree();
}

absl::StatusOr<SleepReport> BfcAllocator::Sleep(Tag tag, bool backup) {
  LockGuard lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(CheckSleepable("Sleep", tag, backup));
  // Memory shared with other processes stays theirs: a block of the tag
  // exported (or freed and held for its importers) keeps the tag awake.
  if (!shared_.empty()) {
    if (shared_.any_held()) ReleaseHeld();
    const PrivatePools& tagged = tags_.pools();
    if (const auto shared = shared_.FindExport([&](DeviceAddress a) {
          return tagged.Owns(a) && tagged.PoolOf(a) == tag;
        })) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "Sleep(tag %d): the tag's block at %#x is exported to other "
          "processes (Export), and sleeping would give its memory back "
          "under them; %s. Nothing changed",
          tag, shared->first,
          shared->second ? "it is freed and held for importers that still "
                           "have it open: let every importer close it first"
                         : "free it and let every importer close it first"));
    }
  }
  // No routed stream captures (CheckSleepable): wait as usual.
  const CaptureOff capture_off(capturing_);
  GPUALLOC_ASSIGN_OR_RETURN(
      SleepReport report,
      tags_.Sleep(tag, backup, MayAsk() ? &stream_order_ : nullptr, *source_));
  if (!slept_) {
    peak_reserved_ =
        std::max(peak_reserved_, core_.counters().peak_bytes_reserved);
    slept_ = true;
  }
  MaybeValidate();
  return report;
}

absl::Status BfcAllocator::Wake(Tag tag) {
  LockGuard lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(CheckSleepable("Wake", tag, /*backup=*/false));
  if (!tags_.asleep(tag)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("Wake(tag %d): the tag is not asleep", tag));
  }
  const CaptureOff capture_off(capturing_);
  const std::string call = absl::StrFormat("Wake(tag %d)", tag);
  const std::uint64_t bytes = tags_.SleepingBytesOf(tag, *source_);
  // Free memory still mapped makes room first, as garbage collection would.
  if (Physical() + bytes > resolved_.limit &&
      resolved_.options.garbage_collection) {
    GPUALLOC_RETURN_IF_ERROR(ReleaseAllFree());
  }
  if (Physical() + bytes > resolved_.limit) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: mapping its %d bytes again would pass the limit of %d bytes "
        "(%d reserved now, none of it free); free memory first. The tag "
        "stays asleep",
        call, bytes, resolved_.limit, Physical()));
  }
  GPUALLOC_RETURN_IF_ERROR(tags_.Wake(tag, *source_));
  peak_reserved_ = std::max(peak_reserved_, Physical());
  MaybeValidate();
  return absl::OkStatus();
}

}  // namespace gpualloc::core
