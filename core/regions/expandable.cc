// SPDX-License-Identifier: Apache-2.0
// core/regions/expandable.cc: growth planning and the mappings of expandable
// regions.
#include "core/regions/expandable.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/bfc/size_class.h"

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
    // (A mapping asleep holds a handle, maybe mapped, only where a failed
    // call left one.)
    (void)GiveBack(address, m.bytes, m.handle, !m.asleep || m.mapped);
  }
  mappings_.clear();
  (void)ReleaseSpares();
  // What the device refused, before or just now, once more.
  (void)RetryPending();
  if (size_ != 0 && !backend_.FreeAddress(base_, size_).ok()) {
    (void)backend_.FreeAddress(base_, size_);
  }
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

absl::Status ExpandableSpace::MapOne(DeviceAddress address, std::uint64_t bytes,
                                     PhysicalHandle reuse) {
  absl::StatusOr<PhysicalHandle> handle =
      reuse != 0 ? absl::StatusOr<PhysicalHandle>(reuse)
                 : backend_.CreatePhysical(bytes);
  if (!handle.ok()) return handle.status();
  absl::Status mapped = backend_.Map(address, bytes, *handle);
  if (!mapped.ok()) {
    // (A refused release keeps the handle: the map's error says what failed.)
    (void)GiveBack(address, bytes, *handle, /*mapped=*/false);
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
    std::uint64_t n = std::min(handle_bytes, bytes - done);
    const auto [spare, spare_bytes] = TakeSpare(n, bytes - done);
    if (spare != 0) n = spare_bytes;
    status = MapOne(address + done, n, spare);
    if (!status.ok()) break;
    done += n;
  }
  if (status.ok()) status = backend_.SetAccess(address, bytes);
  if (status.ok()) return status;
  // Take back whatever this call mapped: no region will hold it. What the
  // device refuses to take back stays ours (refused_), never lost.
  const absl::Status back = TakeBack(address, done);
  return Context(
      status,
      absl::StrFormat("mapping %d bytes at %#x (%d bytes were mapped when it "
                      "failed%s)",
                      bytes, address, done,
                      back.ok() ? ""
                                : absl::StrCat("; taking them back failed "
                                               "too, so they are kept and "
                                               "given back later: ",
                                               back.message())));
}

std::pair<PhysicalHandle, std::uint64_t> ExpandableSpace::TakeSpare(
    std::uint64_t want, std::uint64_t room) {
  std::size_t best = spares_.size();
  for (std::size_t i = 0; i < spares_.size(); ++i) {
    const std::uint64_t b = spares_[i].bytes;
    if (b == want) {
      best = i;
      break;
    }
    if (b <= room && (best == spares_.size() || b > spares_[best].bytes)) {
      best = i;
    }
  }
  if (best == spares_.size()) return {0, 0};
  const Spare s = spares_[best];
  spares_[best] = spares_.back();
  spares_.pop_back();
  spare_bytes_ -= s.bytes;
  return {s.handle, s.bytes};
}

absl::Status ExpandableSpace::ReleaseSpares() {
  absl::Status first_error;
  std::vector<Spare> todo;
  todo.swap(spares_);
  spare_bytes_ = 0;
  for (const Spare& s : todo) {
    // (Refused: kept as refused, with no mapping left.)
    absl::Status status =
        GiveBack(s.unmapped_at, s.bytes, s.handle, /*mapped=*/false);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
}

absl::Status ExpandableSpace::TakeBack(DeviceAddress address,
                                       std::uint64_t bytes) {
  absl::Status first_error;
  auto it = mappings_.lower_bound(address);
  while (it != mappings_.end() && it->first < address + bytes) {
    const DeviceAddress at = it->first;
    const Mapping m = it->second;
    it = mappings_.erase(it);
    mapped_bytes_ -= m.bytes;
    absl::Status status = GiveBack(at, m.bytes, m.handle, /*mapped=*/true);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
}

absl::Status ExpandableSpace::GiveBack(DeviceAddress at, std::uint64_t bytes,
                                       PhysicalHandle handle, bool mapped) {
  if (mapped) {
    absl::Status status = backend_.Unmap(at, bytes);
    if (!status.ok()) {
      refused_.push_back(Refused{at, bytes, handle, /*mapped=*/true});
      refused_bytes_ += bytes;
      return Context(status,
                     absl::StrFormat("unmapping %d bytes at %#x", bytes, at));
    }
    ++unmaps_;
  }
  if (handle == 0) return absl::OkStatus();
  absl::Status status = backend_.ReleasePhysical(handle);
  if (!status.ok()) {
    refused_.push_back(Refused{at, bytes, handle, /*mapped=*/false});
    refused_bytes_ += bytes;
    return Context(status,
                   absl::StrFormat("releasing the handle of the %d bytes "
                                   "unmapped at %#x (kept, to release later)",
                                   bytes, at));
  }
  return absl::OkStatus();
}

absl::Status ExpandableSpace::RetryPending() {
  if (refused_.empty()) return absl::OkStatus();
  std::vector<Refused> todo;
  todo.swap(refused_);
  refused_bytes_ = 0;
  absl::Status first_error;
  for (const Refused& r : todo) {
    absl::Status status = GiveBack(r.address, r.bytes, r.handle, r.mapped);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  if (first_error.ok()) return first_error;
  return Context(first_error,
                 absl::StrFormat("giving back memory the device refused "
                                 "before (%d bytes still held)",
                                 refused_bytes_));
}

std::vector<std::pair<DeviceAddress, std::uint64_t>>
ExpandableSpace::RefusedMappedRanges() const {
  std::vector<std::pair<DeviceAddress, std::uint64_t>> ranges;
  for (const Refused& r : refused_) {
    if (r.mapped) ranges.emplace_back(r.address, r.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

absl::Status ExpandableSpace::Unmap(DeviceAddress address, std::uint64_t bytes,
                                    std::uint64_t* unmapped,
                                    bool keep_handles) {
  *unmapped = 0;
  const DeviceAddress end = address + bytes;
  absl::Status first_error;
  auto it = mappings_.lower_bound(address);
  while (it != mappings_.end() && it->first + it->second.bytes <= end) {
    const DeviceAddress at = it->first;
    const Mapping m = it->second;
    // (Asleep: mapped, or holding a handle, only where a failed call left
    // it so.)
    if (!m.asleep || m.mapped) {
      absl::Status status = backend_.Unmap(at, m.bytes);
      if (!status.ok()) {
        if (!first_error.ok()) return first_error;
        return Context(
            status, absl::StrFormat("unmapping %d bytes at %#x", m.bytes, at));
      }
      ++unmaps_;
    }
    *unmapped += m.bytes;
    mapped_bytes_ -= m.bytes;
    if (m.asleep) {
      sleeping_bytes_ -= m.bytes;
      if (m.handle != 0) asleep_held_bytes_ -= m.bytes;
    }
    it = mappings_.erase(it);
    if (keep_handles && !m.asleep && m.handle != 0) {
      spares_.push_back(Spare{m.handle, m.bytes, at});
      spare_bytes_ += m.bytes;
      continue;
    }
    // Unmapped: a refused release keeps the handle for later (GiveBack).
    absl::Status status = GiveBack(at, m.bytes, m.handle, /*mapped=*/false);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
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
      // else keep the handle (mapped, if only the access was refused) for
      // Wake, so that it is never lost.
      absl::Status back = backend_.Map(it->first, m.bytes, m.handle);
      const bool remapped = back.ok();
      if (remapped) {
        ++maps_;
        back = backend_.SetAccess(it->first, m.bytes);
      }
      if (!back.ok()) {
        m.asleep = true;
        m.mapped = remapped;
        sleeping_bytes_ += m.bytes;
        asleep_held_bytes_ += m.bytes;
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
    const auto fail = [&](const absl::Status& status) {
      return Context(status, absl::StrFormat("mapping %d bytes at %#x again "
                                             "to wake them",
                                             m.bytes, at));
    };
    // A handle a failed call left is mapped again as it is (or only made
    // accessible, where it is still mapped).
    const bool kept = m.handle != 0;
    absl::StatusOr<PhysicalHandle> handle =
        kept ? absl::StatusOr<PhysicalHandle>(m.handle)
             : backend_.CreatePhysical(m.bytes);
    if (!handle.ok()) return fail(handle.status());
    if (!m.mapped) {
      absl::Status mapped = backend_.Map(at, m.bytes, *handle);
      if (!mapped.ok()) {
        if (!kept) (void)GiveBack(at, m.bytes, *handle, /*mapped=*/false);
        return fail(mapped);
      }
      ++maps_;
    }
    absl::Status status = backend_.SetAccess(at, m.bytes);
    if (!status.ok()) {
      // Unmapped again (and a fresh handle released); what the device
      // refuses stays this mapping's, for the next Wake.
      bool held = true;
      if (!m.mapped && backend_.Unmap(at, m.bytes).ok()) {
        ++unmaps_;
        held = kept || !backend_.ReleasePhysical(*handle).ok();
      } else {
        m.mapped = true;
      }
      if (held) {
        if (!kept) asleep_held_bytes_ += m.bytes;
        m.handle = *handle;
      }
      return fail(status);
    }
    if (kept) asleep_held_bytes_ -= m.bytes;
    m.handle = *handle;
    m.asleep = false;
    m.mapped = false;
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
