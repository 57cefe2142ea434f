// SPDX-License-Identifier: Apache-2.0
// backends/sim/pool.cc: the stream-ordered pool's blocks, segments and reuse
// rules.
#include "backends/sim/pool.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>

#include "absl/strings/str_format.h"
#include "backends/sim/sim_util.h"

namespace gpualloc::sim {

Pool::~Pool() {
  for (const auto& [address, segment] : segments_) {
    Placement::Unplace(segment);
  }
}

bool Pool::Holds(DeviceAddress start, DeviceAddress end) const {
  const auto it = Holding(segments_, start);
  return it != segments_.end() && end <= it->first + it->second.size;
}

// Whether a block freed under `freed` may be handed to `stream` (`s`), and at
// what price.
Pool::Reuse Pool::CanReuse(const FreeCondition& freed, std::uintptr_t stream,
                           const StreamState& s) {
  if (!freed.mixed && freed.stream == stream) return Reuse::kNow;
  // What a synchronization point saw freed is available to every stream
  // regardless of the reuse rules, as in CUDA.
  if (streams_->Observed(freed.work.clock)) return Reuse::kNow;
  const PoolReuse& rules = options_.reuse;
  if (rules.follow_event_dependencies) {
    bool covered = true;
    for (const auto& [handle, position] : freed.work.clock) {
      if (handle != stream && ClockAt(s.clock, handle) < position) {
        covered = false;
        break;
      }
    }
    if (covered) return Reuse::kNow;
  }
  if (rules.opportunistic && streams_->Completed(freed.work.clock)) {
    return Reuse::kNow;
  }
  if (rules.internal_dependencies) return Reuse::kAfterWait;
  return Reuse::kNo;
}

// The condition of a block merged from two free neighbours: the strictest of
// the two, except that a part whose free a synchronization point saw imposes
// nothing.
FreeCondition Pool::MergeConditions(const FreeCondition& a,
                                    const FreeCondition& b) {
  if (streams_->Observed(a.work.clock)) return b;
  if (streams_->Observed(b.work.clock)) return a;
  FreeCondition merged = a;
  merged.mixed = a.mixed || b.mixed || a.stream != b.stream;
  for (const auto& [handle, position] : b.work.clock) {
    ClockRaise(&merged.work.clock, handle, position);
  }
  merged.work.done_ns = std::max(a.work.done_ns, b.work.done_ns);
  return merged;
}

void Pool::NoteUse(std::uint64_t more_used) {
  usage_.used += more_used;
  usage_.peak_used = std::max(usage_.peak_used, usage_.used);
  usage_.peak_reserved = std::max(usage_.peak_reserved, usage_.reserved);
}

std::uint64_t Pool::LargestFreeBlock() const {
  return free_.empty() ? 0 : free_.rbegin()->first;
}

// Adds a segment of `size` bytes (a multiple of the granularity) holding one
// free block with no condition.
absl::StatusOr<DeviceAddress> Pool::Grow(std::uint64_t size) {
  Allocation segment;
  absl::StatusOr<DeviceAddress> address = placement_->Place(size, &segment);
  if (!address.ok()) return address.status();
  segments_.emplace(*address, segment);
  PoolBlock block;
  block.size = size;
  block.segment = *address;
  blocks_.emplace(*address, std::move(block));
  free_.emplace(size, *address);
  usage_.reserved += size;
  NoteUse(0);
  // The device pays for the physical allocation behind the segment.
  ledger_->Charge(SimOp::kAllocate, size);
  return *address;
}

bool Pool::Releasable(DeviceAddress start, const Allocation& segment) {
  auto block = blocks_.find(start);
  return block != blocks_.end() && block->second.free &&
         block->second.size == segment.size &&
         streams_->Completed(block->second.freed.work.clock);
}

std::uint64_t Pool::ReleasableBytes() {
  std::uint64_t bytes = 0;
  for (const auto& [start, segment] : segments_) {
    if (Releasable(start, segment)) bytes += segment.size;
  }
  return bytes;
}

void Pool::ReleaseSegments(std::uint64_t keep, std::uint64_t want_free) {
  for (auto it = segments_.end(); it != segments_.begin();) {
    if (usage_.reserved <= keep && device_free_() >= want_free) return;
    --it;
    const DeviceAddress start = it->first;
    const Allocation& segment = it->second;
    if (!Releasable(start, segment)) continue;
    // A failed munmap leaks host address space, nothing the simulated device
    // would notice; the segment is gone either way.
    Placement::Unplace(segment);
    free_.erase({segment.size, start});
    blocks_.erase(start);
    freed_starts_.erase(freed_starts_.lower_bound(start),
                        freed_starts_.lower_bound(start + segment.size));
    usage_.reserved -= segment.size;
    ledger_->Charge(SimOp::kFree, segment.size);
    it = segments_.erase(it);
  }
}

void Pool::ReleaseAboveThreshold() {
  if (usage_.reserved > options_.release_threshold) {
    ReleaseSegments(options_.release_threshold, 0);
  }
}

absl::Status Pool::OutOfMemory(std::uint64_t bytes, Stream stream,
                               std::uint64_t segment) const {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "PoolAllocate of %d bytes on stream %#x on %s: out of memory: the "
      "pool holds %d bytes (%d in use, largest free block %d) and needs "
      "a new segment of %d bytes; the device has %d of %d bytes free",
      bytes, stream.handle, info_.name, usage_.reserved, usage_.used,
      LargestFreeBlock(), segment, device_free_(), info_.total_bytes));
}

absl::StatusOr<DeviceAddress> Pool::Allocate(std::uint64_t bytes,
                                             Stream stream) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PoolAllocate of 0 bytes on stream %#x on %s: the size must be "
        "positive",
        stream.handle, info_.name));
  }
  if (bytes > info_.total_bytes) return OutOfMemory(bytes, stream, bytes);
  const std::uint64_t size = AlignUp(bytes, info_.allocation_alignment);
  StreamState& s = streams_->GetStream(stream.handle);

  // Best fit among the blocks the stream can use without a new dependency;
  // failing that, best fit among those it can use after one, since an
  // inserted wait serializes streams that need not be.
  std::optional<DeviceAddress> chosen;
  std::optional<DeviceAddress> after_wait;
  for (auto it = free_.lower_bound({size, 0}); it != free_.end(); ++it) {
    const Reuse reuse =
        CanReuse(blocks_.at(it->second).freed, stream.handle, s);
    if (reuse == Reuse::kNow) {
      chosen = it->second;
      break;
    }
    if (reuse == Reuse::kAfterWait && !after_wait.has_value()) {
      after_wait = it->second;
    }
  }
  if (!chosen.has_value() && after_wait.has_value()) {
    const FreeCondition& freed = blocks_.at(*after_wait).freed;
    streams_->Wait(stream.handle, freed.work.clock, freed.work.done_ns);
    ++stream_waits_;
    chosen = after_wait;
  }
  if (!chosen.has_value()) {
    const std::uint64_t granule = info_.recommended_granularity;
    if (size > std::numeric_limits<std::uint64_t>::max() - granule) {
      return OutOfMemory(bytes, stream, size);
    }
    const std::uint64_t segment = AlignUp(size, granule);
    // Completed free segments go back first, the way a driver trims its pool
    // before failing an allocation; but only when that makes room, since a
    // failed call changes nothing.
    if (segment > device_free_()) {
      if (segment - device_free_() > ReleasableBytes()) {
        return OutOfMemory(bytes, stream, segment);
      }
      ReleaseSegments(0, segment);
    }
    absl::StatusOr<DeviceAddress> grown = Grow(segment);
    if (!grown.ok()) return grown.status();
    chosen = *grown;
  }

  const DeviceAddress address = *chosen;
  PoolBlock& block = blocks_.at(address);
  free_.erase({block.size, address});
  if (block.size > size) {
    PoolBlock rest;
    rest.size = block.size - size;
    rest.segment = block.segment;
    rest.freed = block.freed;
    free_.emplace(rest.size, address + size);
    blocks_.emplace(address + size, std::move(rest));
  }
  PoolBlock& taken = blocks_.at(address);  // emplace may move blocks
  taken.size = size;
  taken.free = false;
  taken.freed = FreeCondition{};
  freed_starts_.erase(freed_starts_.lower_bound(address),
                      freed_starts_.lower_bound(address + size));
  NoteUse(size);
  return address;
}

absl::Status Pool::Free(DeviceAddress address, Stream stream) {
  auto it = blocks_.find(address);
  if (freed_starts_.contains(address)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("PoolFree of %#x on stream %#x on %s: already freed",
                        address, stream.handle, info_.name));
  }
  if (it == blocks_.end() || it->second.free) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PoolFree of %#x on stream %#x on %s: not an address the pool "
        "handed out",
        address, stream.handle, info_.name));
  }
  PoolBlock& block = it->second;
  block.free = true;
  block.freed.stream = stream.handle;
  block.freed.mixed = false;
  block.freed.work = streams_->Capture(stream.handle);
  freed_starts_.insert(address);
  usage_.used -= block.size;

  // Merge with free neighbours of the same segment.
  DeviceAddress start = address;
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free &&
      next->second.segment == block.segment &&
      start + block.size == next->first) {
    free_.erase({next->second.size, next->first});
    block.freed = MergeConditions(block.freed, next->second.freed);
    block.size += next->second.size;
    blocks_.erase(next);
    it = blocks_.find(start);  // erase may move blocks
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    PoolBlock& before = prev->second;
    if (before.free && before.segment == it->second.segment &&
        prev->first + before.size == start) {
      free_.erase({before.size, prev->first});
      before.freed = MergeConditions(before.freed, it->second.freed);
      before.size += it->second.size;
      start = prev->first;
      blocks_.erase(it);
    }
  }
  const PoolBlock& merged = blocks_.at(start);
  free_.emplace(merged.size, start);
  return absl::OkStatus();
}

}  // namespace gpualloc::sim
