// SPDX-License-Identifier: Apache-2.0
// core/bfc/tagged_memory.cc: the tags' memory asleep and awake
// (core/bfc/tagged_memory.h).
#include "core/bfc/tagged_memory.h"

#include <new>
#include <string>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace gpualloc::core {

absl::Status TaggedMemory::CheckAllocate(Tag tag, std::size_t bytes) const {
  if (!asleep(tag)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "Allocate(%d bytes, tag %d): tag %d is asleep; Wake(%d) first", bytes,
      tag, tag, tag));
}

absl::Status TaggedMemory::CheckAwake(DeviceAddress address,
                                      absl::string_view call) const {
  const Tag tag = static_cast<Tag>(pools_.PoolOf(address));
  // (Only a live block's start: a bad address gets its usual answer, which
  // touches nothing.)
  if (!asleep_.contains(tag) || pools_.AllocatedSize(address) == 0) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s(%#x): the allocation's tag %d is asleep (its memory is given back); "
      "Wake(%d) first",
      call, address, tag, tag));
}

absl::Status TaggedMemory::CheckSleepable(absl::string_view call, Tag tag,
                                          bool backup,
                                          const RegionSource& source) const {
  const DeviceInfo& info = backend_.info();
  if (tag == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s(tag 0): 0 is no tag; tag allocations with a non-zero tag", call));
  }
  if (!source.CanSleep()) {
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
  return absl::OkStatus();
}

std::uint64_t TaggedMemory::SleepingBytesOf(Tag tag,
                                            const RegionSource& source) const {
  std::uint64_t n = 0;
  if (!pools_.Has(tag)) return n;
  for (const auto& [base, bytes] : pools_.Slabs(tag)) {
    n += source.SleepingWithin(base, bytes);
  }
  return n;
}

absl::Status TaggedMemory::SleepOrWakeSlab(RegionSource& source,
                                           DeviceAddress base,
                                           std::uint64_t size, bool sleep) {
  std::uint64_t done = 0;
  absl::Status status =
      sleep ? source.Sleep(base, size, &done) : source.Wake(base, size, &done);
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
absl::Status TaggedMemory::SleepSlabs(RegionSource& source, const Slabs& slabs,
                                      bool sleep, absl::string_view call,
                                      bool* clean) {
  *clean = true;
  for (std::size_t i = 0; i < slabs.size(); ++i) {
    const auto [base, size] = slabs[i];
    absl::Status status = SleepOrWakeSlab(source, base, size, sleep);
    if (status.ok()) continue;
    for (std::size_t j = 0; j <= i; ++j) {
      const absl::Status back =
          SleepOrWakeSlab(source, slabs[j].first, slabs[j].second, !sleep);
      *clean = *clean && back.ok();
    }
    return absl::Status(status.code(),
                        absl::StrFormat("%s: %s", call, status.message()));
  }
  return absl::OkStatus();
}

absl::Status TaggedMemory::CountAndBackUp(Tag tag, bool backup,
                                          absl::string_view call,
                                          SleepReport* report, Backup* copies) {
  for (const auto& [address, size] : pools_.ChunksInUse(tag)) {
    ++report->allocations;
    report->bytes_in_use += size;
    if (!backup) continue;
    // Not zero-filled, and out of host memory is an answer, not a throw.
    HostCopy copy{address, size,
                  std::unique_ptr<unsigned char[]>(
                      new (std::nothrow) unsigned char[size])};
    absl::Status copied =
        copy.data == nullptr
            ? absl::ResourceExhaustedError("out of host memory")
            : backend_.CopyToHost(copy.data.get(), address, size);
    if (!copied.ok()) {
      return absl::Status(
          copied.code(),
          absl::StrFormat("%s: backing up %d bytes at %#x: %s; nothing "
                          "changed",
                          call, size, address, copied.message()));
    }
    report->bytes_backed_up += size;
    copies->push_back(std::move(copy));
  }
  return absl::OkStatus();
}

absl::StatusOr<SleepReport> TaggedMemory::Sleep(Tag tag, bool backup,
                                                StreamOrder* order,
                                                RegionSource& source) {
  if (asleep_.contains(tag)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Sleep(tag %d): the tag is asleep already; Wake(%d) first", tag, tag));
  }
  const std::string call = absl::StrFormat("Sleep(tag %d)", tag);
  SleepReport report;
  Backup copies;
  if (pools_.Has(tag)) {
    // The work queued so far that may use the tag's memory, done.
    if (order != nullptr) {
      absl::Status waited = order->WaitForAll(pools_.Users(tag));
      if (!waited.ok()) {
        (void)order->TakeError();
        return absl::Status(
            waited.code(),
            absl::StrFormat("%s: waiting for the work that uses its memory: "
                            "%s; nothing changed",
                            call, waited.message()));
      }
    }
    GPUALLOC_RETURN_IF_ERROR(
        CountAndBackUp(tag, backup, call, &report, &copies));
    bool clean = true;
    absl::Status slept =
        SleepSlabs(source, pools_.Slabs(tag), /*sleep=*/true, call, &clean);
    if (!slept.ok() && clean) {
      // Mapped again: the content comes back from the backup, if any.
      for (const HostCopy& copy : copies) {
        (void)backend_.CopyFromHost(copy.address, copy.data.get(), copy.bytes);
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
      asleep_.emplace(tag, std::move(copies));
      return absl::Status(
          slept.code(),
          absl::StrFormat("%s; mapping its memory again failed too, so the "
                          "tag is left asleep: Wake(%d) maps the rest",
                          slept.message(), tag));
    }
    report.bytes_released = SleepingBytesOf(tag, source);
  }
  asleep_.emplace(tag, std::move(copies));
  return report;
}

absl::Status TaggedMemory::Wake(Tag tag, RegionSource& source) {
  auto it = asleep_.find(tag);
  const std::string call = absl::StrFormat("Wake(tag %d)", tag);
  const Slabs slabs = pools_.Has(tag) ? pools_.Slabs(tag) : Slabs();
  bool clean = true;
  absl::Status status =
      SleepSlabs(source, slabs, /*sleep=*/false, call, &clean);
  for (const HostCopy& copy : it->second) {
    if (!status.ok()) break;
    status = backend_.CopyFromHost(copy.address, copy.data.get(), copy.bytes);
    if (!status.ok()) {
      status = absl::Status(
          status.code(),
          absl::StrFormat("%s: restoring %d bytes at %#x from the backup: %s",
                          call, copy.bytes, copy.address, status.message()));
      for (const auto& [base, size] : slabs) {
        clean =
            clean && SleepOrWakeSlab(source, base, size, /*sleep=*/true).ok();
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
  return absl::OkStatus();
}

void TaggedMemory::ReturnFree(StreamOrder* order, const ReuseOracle& known,
                              SlabSource& slabs) {
  for (PoolId id : pools_.Ids()) {
    if (asleep_.contains(static_cast<Tag>(id))) continue;  // keeps its memory
    // Free pieces of different streams' frees merge once their work is
    // done: the host waits for it, as Trim does for general memory.
    if (order != nullptr &&
        !WaitForFreeMemory(*order, pools_.PendingStreams(id, *order),
                           "returning a tag's memory")
             .ok()) {
      continue;  // kept for now; the error is the event's, met again later
    }
    pools_.ReturnFreeSlabs(id, slabs, known);
  }
}

absl::Status TaggedMemory::Validate(const RegionSource& source) const {
  std::uint64_t asleep = 0;
  for (PoolId id : pools_.Ids()) {
    const Tag tag = static_cast<Tag>(id);
    const std::uint64_t n = SleepingBytesOf(tag, source);
    if (n != 0 && !asleep_.contains(tag)) {
      return absl::InternalError(absl::StrFormat(
          "invariant S1 broken: tag %d is awake but %d bytes of its memory "
          "are asleep",
          tag, n));
    }
    asleep += n;
  }
  if (asleep != source.sleeping_bytes()) {
    return absl::InternalError(absl::StrFormat(
        "invariant S1 broken: %d bytes asleep, of which the tags asleep hold "
        "%d",
        source.sleeping_bytes(), asleep));
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core
