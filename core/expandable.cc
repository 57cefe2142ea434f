// SPDX-License-Identifier: Apache-2.0
// core/expandable.cc: growth planning and the mappings of expandable regions.
#include "core/expandable.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/size_class.h"

namespace gpualloc::core {
namespace {

// The error `status` with what the allocator was doing in front.
absl::Status Context(const absl::Status& status, absl::string_view doing) {
  return absl::Status(status.code(),
                      absl::StrFormat("%s: %s", doing, status.message()));
}

}  // namespace

std::optional<GrowthPlan> PlanGrowth(const std::vector<Extent>& extents,
                                     DeviceAddress space_base,
                                     std::uint64_t space_size,
                                     std::uint64_t needed, std::uint64_t unit) {
  std::optional<GrowthPlan> best;
  auto consider = [&](DeviceAddress address, std::uint64_t bytes,
                      std::uint64_t room_after) {
    if (!best.has_value() || bytes < best->bytes ||
        (bytes == best->bytes && address < best->address)) {
      best = GrowthPlan{address, bytes, room_after};
    }
  };
  // Units to map next to `have` free bytes so that `needed` fit.
  auto beyond = [&](std::uint64_t have) {
    return have >= needed ? unit : RoundUpToMultiple(needed - have, unit);
  };
  // A hole [from, to) with `left` free bytes before it and `right` after.
  auto hole = [&](DeviceAddress from, DeviceAddress to, std::uint64_t left,
                  std::uint64_t right) {
    const std::uint64_t room = to - from;
    if (room == 0) return;
    const std::uint64_t from_left = beyond(left);
    if (from_left <= room) consider(from, from_left, room - from_left);
    const std::uint64_t from_right = beyond(right);
    if (from_right <= room) consider(to - from_right, from_right, 0);
    if (left + room + right >= needed) consider(from, room, 0);
  };
  DeviceAddress cursor = space_base;
  std::uint64_t left = 0;
  for (const Extent& e : extents) {
    hole(cursor, e.base, left, e.free_head);
    cursor = e.base + e.size;
    left = e.free_tail;
  }
  hole(cursor, space_base + space_size, left, 0);
  return best;
}

ExpandableSpace::~ExpandableSpace() {
  for (const auto& [address, m] : mappings_) {
    if (m.asleep) {
      // A handle kept by a failed release (Sleep) goes now.
      if (m.handle != 0) (void)backend_.ReleasePhysical(m.handle);
      continue;
    }
    if (backend_.Unmap(address, m.bytes).ok()) {
      (void)backend_.ReleasePhysical(m.handle);
    }
  }
  if (size_ != 0) (void)backend_.FreeAddress(base_, size_);
}

absl::Status ExpandableSpace::Reserve(std::uint64_t bytes) {
  if (size_ != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the expandable range is already reserved (%d bytes at %#x)", size_,
        base_));
  }
  const std::uint64_t size = RoundUpToMultiple(bytes, unit_);
  // A 6 MiB unit is reserved at 2 MiB alignment: mappings sit at multiples
  // of the unit from the base, so this keeps them granularity-aligned.
  const std::uint64_t alignment = unit_ & (~unit_ + 1);
  absl::StatusOr<DeviceAddress> base = backend_.ReserveAddress(size, alignment);
  if (!base.ok()) {
    return Context(base.status(),
                   absl::StrFormat("reserving %d bytes of address space for "
                                   "expandable regions",
                                   size));
  }
  if (*base == 0 || *base % alignment != 0) {
    (void)backend_.FreeAddress(*base, size);
    return absl::InternalError(absl::StrFormat(
        "backend %s reserved address %#x for %d bytes: null or not aligned to "
        "%d bytes",
        backend_.info().backend, *base, size, alignment));
  }
  base_ = *base;
  size_ = size;
  return absl::OkStatus();
}

absl::Status ExpandableSpace::MapOne(DeviceAddress address,
                                     std::uint64_t bytes) {
  absl::StatusOr<PhysicalHandle> handle = backend_.CreatePhysical(bytes);
  if (!handle.ok()) return handle.status();
  absl::Status mapped = backend_.Map(address, bytes, *handle);
  if (!mapped.ok()) {
    (void)backend_.ReleasePhysical(*handle);
    return mapped;
  }
  mappings_.emplace(address, Mapping{bytes, *handle});
  mapped_bytes_ += bytes;
  ++maps_;
  return absl::OkStatus();
}

absl::Status ExpandableSpace::Map(DeviceAddress address, std::uint64_t bytes,
                                  std::uint64_t handle_bytes) {
  if (address < base_ || bytes == 0 || address + bytes > base_ + size_ ||
      (address - base_) % unit_ != 0 || handle_bytes == 0 ||
      handle_bytes % unit_ != 0 || bytes % unit_ != 0) {
    return absl::InternalError(absl::StrFormat(
        "mapping %d bytes at %#x in handles of %d: outside the reserved "
        "range [%#x, %#x) or not in whole granules of %d bytes",
        bytes, address, handle_bytes, base_, base_ + size_, unit_));
  }
  absl::Status status;
  std::uint64_t done = 0;
  while (done < bytes) {
    // (The last handle takes what is left: less than handle_bytes.)
    const std::uint64_t n = std::min(handle_bytes, bytes - done);
    status = MapOne(address + done, n);
    if (!status.ok()) break;
    done += n;
  }
  if (status.ok()) status = backend_.SetAccess(address, bytes);
  if (status.ok()) return status;
  // Take back whatever this call mapped.
  std::uint64_t ignored = 0;
  (void)Unmap(address, bytes, &ignored);
  return Context(status,
                 absl::StrFormat("mapping %d bytes at %#x (%d bytes were "
                                 "mapped when it failed)",
                                 bytes, address, done));
}

absl::Status ExpandableSpace::Unmap(DeviceAddress address, std::uint64_t bytes,
                                    std::uint64_t* unmapped) {
  *unmapped = 0;
  const DeviceAddress end = address + bytes;
  auto it = mappings_.lower_bound(address);
  while (it != mappings_.end() && it->first + it->second.bytes <= end) {
    const DeviceAddress at = it->first;
    const Mapping m = it->second;
    if (m.asleep) {  // nothing mapped; a handle kept goes
      if (m.handle != 0) (void)backend_.ReleasePhysical(m.handle);
      *unmapped += m.bytes;
      mapped_bytes_ -= m.bytes;
      sleeping_bytes_ -= m.bytes;
      it = mappings_.erase(it);
      continue;
    }
    absl::Status status = backend_.Unmap(at, m.bytes);
    if (!status.ok()) {
      return Context(status,
                     absl::StrFormat("unmapping %d bytes at %#x", m.bytes, at));
    }
    *unmapped += m.bytes;
    mapped_bytes_ -= m.bytes;
    ++unmaps_;
    it = mappings_.erase(it);
    status = backend_.ReleasePhysical(m.handle);
    if (!status.ok()) {
      return Context(status, absl::StrFormat("releasing the handle of the %d "
                                             "bytes unmapped at %#x",
                                             m.bytes, at));
    }
  }
  return absl::OkStatus();
}

absl::Status ExpandableSpace::Sleep(DeviceAddress address, std::uint64_t bytes,
                                    std::uint64_t* done) {
  *done = 0;
  const DeviceAddress end = address + bytes;
  for (auto it = mappings_.lower_bound(address);
       it != mappings_.end() && it->first + it->second.bytes <= end; ++it) {
    Mapping& m = it->second;
    if (m.asleep) continue;
    absl::Status status = backend_.Unmap(it->first, m.bytes);
    if (!status.ok()) {
      return Context(status, absl::StrFormat("unmapping %d bytes at %#x to "
                                             "put them to sleep",
                                             m.bytes, it->first));
    }
    ++unmaps_;
    status = backend_.ReleasePhysical(m.handle);
    if (!status.ok()) {
      // The memory is still the handle's: map it back (content and all), or
      // else keep the handle for Wake, so that it is never lost.
      absl::Status back = backend_.Map(it->first, m.bytes, m.handle);
      if (back.ok()) back = backend_.SetAccess(it->first, m.bytes);
      if (back.ok()) {
        ++maps_;
      } else {
        m.asleep = true;
        sleeping_bytes_ += m.bytes;
        *done += m.bytes;
      }
      return Context(
          status,
          absl::StrFormat("releasing the handle of the %d bytes "
                          "unmapped at %#x (%s)",
                          m.bytes, it->first,
                          back.ok() ? "mapped back" : "kept for the wake"));
    }
    m.handle = 0;
    m.asleep = true;
    sleeping_bytes_ += m.bytes;
    *done += m.bytes;
  }
  return absl::OkStatus();
}

std::uint64_t ExpandableSpace::SleepingWithin(DeviceAddress address,
                                              std::uint64_t bytes) const {
  std::uint64_t n = 0;
  const DeviceAddress end = address + bytes;
  for (auto it = mappings_.lower_bound(address);
       it != mappings_.end() && it->first + it->second.bytes <= end; ++it) {
    if (it->second.asleep) n += it->second.bytes;
  }
  return n;
}

absl::Status ExpandableSpace::Wake(DeviceAddress address, std::uint64_t bytes,
                                   std::uint64_t* done) {
  *done = 0;
  const DeviceAddress end = address + bytes;
  for (auto it = mappings_.lower_bound(address);
       it != mappings_.end() && it->first + it->second.bytes <= end; ++it) {
    Mapping& m = it->second;
    if (!m.asleep) continue;
    const DeviceAddress at = it->first;
    // A handle a failed release left is mapped again as it is.
    const bool kept = m.handle != 0;
    absl::StatusOr<PhysicalHandle> handle =
        kept ? absl::StatusOr<PhysicalHandle>(m.handle)
             : backend_.CreatePhysical(m.bytes);
    absl::Status status = handle.status();
    if (status.ok()) status = backend_.Map(at, m.bytes, *handle);
    if (status.ok()) {
      status = backend_.SetAccess(at, m.bytes);
      if (!status.ok()) (void)backend_.Unmap(at, m.bytes);
    }
    if (!status.ok()) {
      if (handle.ok() && !kept) (void)backend_.ReleasePhysical(*handle);
      return Context(status, absl::StrFormat("mapping %d bytes at %#x again "
                                             "to wake them",
                                             m.bytes, at));
    }
    ++maps_;
    m.handle = *handle;
    m.asleep = false;
    sleeping_bytes_ -= m.bytes;
    *done += m.bytes;
  }
  return absl::OkStatus();
}

std::vector<std::pair<DeviceAddress, std::uint64_t>>
ExpandableSpace::MappedRunsWithin(DeviceAddress address, std::uint64_t bytes,
                                  bool merged) const {
  std::vector<std::pair<DeviceAddress, std::uint64_t>> runs;
  const DeviceAddress end = address + bytes;
  for (auto it = mappings_.lower_bound(address);
       it != mappings_.end() && it->first + it->second.bytes <= end; ++it) {
    if (merged && !runs.empty() &&
        runs.back().first + runs.back().second == it->first) {
      runs.back().second += it->second.bytes;
    } else {
      runs.emplace_back(it->first, it->second.bytes);
    }
  }
  return runs;
}

}  // namespace gpualloc::core
