// SPDX-License-Identifier: Apache-2.0
// core/bfc_tags.cc: the BFC facade's tagged memory and Sleep / Wake
// (Allocator::Sleep). A tag's memory is a pool of its own (tags_, keyed by
// the tag) whose slabs, with expandable regions, are mappings of their own:
// sleeping unmaps exactly them and keeps their addresses.
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/bfc_allocator.h"

namespace gpualloc {

// Sleep and wake in the modes that keep no memory.
absl::StatusOr<SleepReport> Allocator::Sleep(Tag tag, bool) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "Sleep(tag %d): sleeping memory needs allocator mode bfc with "
      "expandable regions; this allocator runs in mode %s",
      tag, AllocatorModeName(options().mode)));
}
absl::Status Allocator::Wake(Tag tag) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "Wake(tag %d): sleeping memory needs allocator mode bfc with "
      "expandable regions; this allocator runs in mode %s",
      tag, AllocatorModeName(options().mode)));
}

namespace core {

absl::StatusOr<void*> BfcAllocator::AllocateTagged(std::size_t bytes,
                                                   Stream given,
                                                   std::size_t alignment,
                                                   Tag tag) {
  return AllocateHandlingOutOfMemory(*this, bytes, given, alignment, tag);
}

absl::StatusOr<DeviceAddress> BfcAllocator::AllocateToTag(
    Tag tag, std::uint64_t size, std::size_t bytes, std::uint64_t align,
    Stream stream, PendingOutOfMemory* pending) {
  if (std::optional<PoolId> pool = pools_.RoutedPool(stream.handle)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Allocate(%d bytes, tag %d) on stream %#x: the stream allocates to "
        "private pool %d, whose memory a graph replays and may not sleep",
        bytes, tag, stream.handle, *pool));
  }
  if (asleep_.contains(tag)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Allocate(%d bytes, tag %d): tag %d is asleep; Wake(%d) first", bytes,
        tag, tag, tag));
  }
  if (!tags_.Has(tag)) {
    // A key no stream has, like a private pool's (CreatePool).
    tags_.Create(StreamOrder::kReleasedBit | ++streams_released_, tag);
  }
  slab_pending_ = pending;
  absl::StatusOr<DeviceAddress> address = tags_.Allocate(
      tag, size, bytes, align, stream.handle, Oracle(), tag_slabs_);
  slab_pending_ = nullptr;
  return address;
}

absl::Status BfcAllocator::CheckAwake(DeviceAddress address,
                                      absl::string_view call) const {
  const Tag tag = static_cast<Tag>(tags_.PoolOf(address));
  // (Only a live block's start: a bad address gets its usual answer, which
  // touches nothing.)
  if (!asleep_.contains(tag) || tags_.AllocatedSize(address) == 0) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s(%#x): the allocation's tag %d is asleep (its memory is given back); "
      "Wake(%d) first",
      call, address, tag, tag));
}

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
    return OutOfMemory(want, want, base.status(), slab_pending_);
  }
  core_.AllocateAt(*base, want, want, key);
  *bytes = want;
  return *base;
}

absl::Status BfcAllocator::CheckSleepable(absl::string_view call, Tag tag,
                                          bool backup) {
  const DeviceInfo& info = backend_->info();
  if (tag == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s(tag 0): 0 is no tag; tag allocations with a non-zero tag", call));
  }
  if (!source_->CanSleep()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s(tag %d): giving memory back while keeping its addresses needs "
        "expandable regions over virtual memory; %s",
        call, tag,
        info.capabilities.virtual_memory
            ? "this allocator has them off (expandable=off)"
            : absl::StrFormat("backend %s (%s) has no virtual memory",
                              info.backend, info.name)));
  }
  if (backup && !info.capabilities.host_copy) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s(tag %d, backup): backend %s (%s) cannot copy device memory to "
        "the host (capabilities.host_copy); sleep without a backup",
        call, tag, info.backend, info.name));
  }
  if (capturing_ && CaptureNow()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s(tag %d) during a graph capture: it would make the host wait and "
        "map or unmap memory; call it after EndAllocateToPool",
        call, tag));
  }
  return absl::OkStatus();
}

absl::Status BfcAllocator::SleepOrWakeSlab(DeviceAddress base,
                                           std::uint64_t size, bool sleep) {
  std::uint64_t done = 0;
  absl::Status status = sleep ? source_->Sleep(base, size, &done)
                              : source_->Wake(base, size, &done);
  // The memory given back or mapped again, as PyTorch's expandable segments
  // record it (the first `done` bytes changed, even on an error).
  if (done != 0 && history_ != nullptr) {
    history_->Record(
        sleep ? HistoryAction::kSegmentUnmap : HistoryAction::kSegmentMap, base,
        done, 0);
  }
  return status;
}

// Each slab in turn; on an error, the slabs done are turned back. *clean
// says whether that worked (else some of the tag's mappings are asleep and
// some awake, and the caller keeps the tag asleep).
absl::Status BfcAllocator::SleepSlabs(
    const std::vector<std::pair<DeviceAddress, std::uint64_t>>& slabs,
    bool sleep, absl::string_view call, bool* clean) {
  *clean = true;
  for (std::size_t i = 0; i < slabs.size(); ++i) {
    const auto [base, size] = slabs[i];
    absl::Status status = SleepOrWakeSlab(base, size, sleep);
    if (status.ok()) continue;
    for (std::size_t j = 0; j <= i; ++j) {
      const absl::Status back =
          SleepOrWakeSlab(slabs[j].first, slabs[j].second, !sleep);
      *clean = *clean && back.ok();
    }
    return absl::Status(status.code(),
                        absl::StrFormat("%s: %s", call, status.message()));
  }
  return absl::OkStatus();
}

std::uint64_t BfcAllocator::SleepingBytesOf(Tag tag) const {
  std::uint64_t n = 0;
  if (!tags_.Has(tag)) return n;
  for (const auto& [base, bytes] : tags_.Slabs(tag)) {
    n += source_->SleepingWithin(base, bytes);
  }
  return n;
}

void BfcAllocator::ReturnFreeTagMemory() {
  for (PoolId id : tags_.Ids()) {
    if (asleep_.contains(static_cast<Tag>(id))) continue;  // keeps its memory
    // Free pieces of different streams' frees merge once their work is
    // done: the host waits for it, as Trim does for general memory.
    if (MayAsk() && !WaitForFreeMemory(stream_order_,
                                       tags_.PendingStreams(id, stream_order_),
                                       "returning a tag's memory")
                         .ok()) {
      continue;  // kept for now; the error is the event's, met again later
    }
    tags_.ReturnFreeSlabs(id, tag_slabs_, *oracle_);
  }
}

absl::Status BfcAllocator::ReleaseAllFree() {
  if (pools_on_) ReturnFreeTagMemory();
  return ReleaseFree();
}

absl::Status BfcAllocator::SleepValidate() const {
  std::uint64_t asleep = 0;
  for (PoolId id : tags_.Ids()) {
    const Tag tag = static_cast<Tag>(id);
    const std::uint64_t n = SleepingBytesOf(tag);
    if (n != 0 && !asleep_.contains(tag)) {
      return absl::InternalError(absl::StrFormat(
          "invariant S1 broken: tag %d is awake but %d bytes of its memory "
          "are asleep",
          tag, n));
    }
    asleep += n;
  }
  if (asleep != source_->sleeping_bytes()) {
    return absl::InternalError(absl::StrFormat(
        "invariant S1 broken: %d bytes asleep, of which the tags asleep hold "
        "%d",
        source_->sleeping_bytes(), asleep));
  }
  return absl::OkStatus();
}

absl::StatusOr<SleepReport> BfcAllocator::Sleep(Tag tag, bool backup) {
  LockGuard lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(CheckSleepable("Sleep", tag, backup));
  if (asleep_.contains(tag)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Sleep(tag %d): the tag is asleep already; Wake(%d) first", tag, tag));
  }
  // No routed stream captures (CheckSleepable): wait as usual.
  const CaptureOff capture_off(capturing_);
  const std::string call = absl::StrFormat("Sleep(tag %d)", tag);
  SleepReport report;
  AsleepTag asleep;
  if (tags_.Has(tag)) {
    // The work queued so far that may use the tag's memory, done.
    if (MayAsk()) {
      absl::Status waited = stream_order_.WaitForAll(tags_.Users(tag));
      if (!waited.ok()) {
        (void)stream_order_.TakeError();
        return absl::Status(
            waited.code(),
            absl::StrFormat("%s: waiting for the work that uses its memory: "
                            "%s; nothing changed",
                            call, waited.message()));
      }
    }
    for (const auto& [address, size] : tags_.ChunksInUse(tag)) {
      ++report.allocations;
      report.bytes_in_use += size;
      if (!backup) continue;
      // Not zero-filled, and out of host memory is an answer, not a throw.
      HostCopy copy{address, size,
                    std::unique_ptr<unsigned char[]>(
                        new (std::nothrow) unsigned char[size])};
      absl::Status copied =
          copy.data == nullptr
              ? absl::ResourceExhaustedError("out of host memory")
              : backend_->CopyToHost(copy.data.get(), address, size);
      if (!copied.ok()) {
        return absl::Status(
            copied.code(),
            absl::StrFormat("%s: backing up %d bytes at %#x: %s; nothing "
                            "changed",
                            call, size, address, copied.message()));
      }
      report.bytes_backed_up += size;
      asleep.backup.push_back(std::move(copy));
    }
    bool clean = true;
    absl::Status slept =
        SleepSlabs(tags_.Slabs(tag), /*sleep=*/true, call, &clean);
    if (!slept.ok() && clean) {
      // Mapped again: the content comes back from the backup, if any.
      for (const HostCopy& copy : asleep.backup) {
        (void)backend_->CopyFromHost(copy.address, copy.data.get(), copy.bytes);
      }
      return absl::Status(
          slept.code(),
          absl::StrFormat("%s; the tag's memory was mapped again (%s)",
                          slept.message(),
                          backup ? "its content restored from the backup"
                                 : "its content lost"));
    }
    if (!slept.ok()) {
      // Part asleep and part awake: the tag stays asleep (refused) until a
      // Wake maps the rest.
      asleep_.emplace(tag, std::move(asleep));
      return absl::Status(
          slept.code(),
          absl::StrFormat("%s; mapping its memory again failed too, so the "
                          "tag is left asleep: Wake(%d) maps the rest",
                          slept.message(), tag));
    }
    report.bytes_released = SleepingBytesOf(tag);
  }
  if (!slept_) {
    peak_reserved_ =
        std::max(peak_reserved_, core_.counters().peak_bytes_reserved);
    slept_ = true;
  }
  asleep_.emplace(tag, std::move(asleep));
  MaybeValidate();
  return report;
}

absl::Status BfcAllocator::Wake(Tag tag) {
  LockGuard lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(CheckSleepable("Wake", tag, /*backup=*/false));
  auto it = asleep_.find(tag);
  if (it == asleep_.end()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("Wake(tag %d): the tag is not asleep", tag));
  }
  const CaptureOff capture_off(capturing_);
  const std::string call = absl::StrFormat("Wake(tag %d)", tag);
  const std::uint64_t bytes = SleepingBytesOf(tag);
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
  const std::vector<std::pair<DeviceAddress, std::uint64_t>> slabs =
      tags_.Has(tag) ? tags_.Slabs(tag)
                     : std::vector<std::pair<DeviceAddress, std::uint64_t>>();
  bool clean = true;
  absl::Status status = SleepSlabs(slabs, /*sleep=*/false, call, &clean);
  for (const HostCopy& copy : it->second.backup) {
    if (!status.ok()) break;
    status = backend_->CopyFromHost(copy.address, copy.data.get(), copy.bytes);
    if (!status.ok()) {
      status = absl::Status(
          status.code(),
          absl::StrFormat("%s: restoring %d bytes at %#x from the backup: %s",
                          call, copy.bytes, copy.address, status.message()));
      for (const auto& [base, size] : slabs) {
        clean = clean && SleepOrWakeSlab(base, size, /*sleep=*/true).ok();
      }
    }
  }
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrFormat("%s; the tag stays asleep%s", status.message(),
                        clean ? "" : " with part of its memory mapped"));
  }
  asleep_.erase(it);
  peak_reserved_ = std::max(peak_reserved_, Physical());
  MaybeValidate();
  return absl::OkStatus();
}

}  // namespace core
}  // namespace gpualloc
