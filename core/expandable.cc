// core/expandable.cc: growth planning and the mappings of expandable regions.
#include "core/expandable.h"

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
  auto consider = [&](DeviceAddress address, std::uint64_t bytes) {
    if (!best.has_value() || bytes < best->bytes ||
        (bytes == best->bytes && address < best->address)) {
      best = GrowthPlan{address, bytes};
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
    if (from_left <= room) consider(from, from_left);
    const std::uint64_t from_right = beyond(right);
    if (from_right <= room) consider(to - from_right, from_right);
    if (left + room + right >= needed) consider(from, room);
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
  for (const auto& [address, bytes] : mappings_) {
    (void)backend_.Unmap(address, bytes);
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
  absl::StatusOr<DeviceAddress> base = backend_.ReserveAddress(size, unit_);
  if (!base.ok()) {
    return Context(base.status(),
                   absl::StrFormat("reserving %d bytes of address space for "
                                   "expandable regions",
                                   size));
  }
  if (*base == 0 || *base % unit_ != 0) {
    (void)backend_.FreeAddress(*base, size);
    return absl::InternalError(absl::StrFormat(
        "backend %s reserved address %#x for %d bytes: null or not aligned to "
        "the granule of %d bytes",
        backend_.info().backend, *base, size, unit_));
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
  mappings_.emplace(address, bytes);
  mapped_bytes_ += bytes;
  ++maps_;
  // The mapping keeps the memory alive; unmapping it returns the memory.
  return backend_.ReleasePhysical(*handle);
}

absl::Status ExpandableSpace::Map(DeviceAddress address, std::uint64_t bytes,
                                  std::uint64_t handle_bytes) {
  if (address < base_ || bytes == 0 || address + bytes > base_ + size_ ||
      (address - base_) % unit_ != 0 || handle_bytes == 0 ||
      handle_bytes % unit_ != 0 || bytes % handle_bytes != 0) {
    return absl::InternalError(absl::StrFormat(
        "mapping %d bytes at %#x in handles of %d: outside the reserved "
        "range [%#x, %#x) or not in whole granules of %d bytes",
        bytes, address, handle_bytes, base_, base_ + size_, unit_));
  }
  absl::Status status;
  std::uint64_t done = 0;
  for (; done < bytes; done += handle_bytes) {
    status = MapOne(address + done, handle_bytes);
    if (!status.ok()) break;
  }
  if (status.ok()) status = backend_.SetAccess(address, bytes);
  if (status.ok()) return status;
  // Take back whatever this call mapped (MapOne may have mapped the handle
  // whose release failed).
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
  while (it != mappings_.end() && it->first + it->second <= end) {
    absl::Status status = backend_.Unmap(it->first, it->second);
    if (!status.ok()) {
      return Context(status, absl::StrFormat("unmapping %d bytes at %#x",
                                             it->second, it->first));
    }
    *unmapped += it->second;
    mapped_bytes_ -= it->second;
    ++unmaps_;
    it = mappings_.erase(it);
  }
  return absl::OkStatus();
}

std::vector<std::pair<DeviceAddress, std::uint64_t>>
ExpandableSpace::MappedRunsWithin(DeviceAddress address,
                                  std::uint64_t bytes) const {
  std::vector<std::pair<DeviceAddress, std::uint64_t>> runs;
  const DeviceAddress end = address + bytes;
  for (auto it = mappings_.lower_bound(address);
       it != mappings_.end() && it->first + it->second <= end; ++it) {
    if (!runs.empty() && runs.back().first + runs.back().second == it->first) {
      runs.back().second += it->second;
    } else {
      runs.emplace_back(it->first, it->second);
    }
  }
  return runs;
}

}  // namespace gpualloc::core
