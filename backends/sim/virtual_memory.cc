// SPDX-License-Identifier: Apache-2.0
// backends/sim/virtual_memory.cc: reservations, physical handles, mappings
// and access, with CUDA's rules.
#include "backends/sim/virtual_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/sim/sim_util.h"

namespace gpualloc::sim {
namespace {

std::string RangeCall(absl::string_view name, DeviceAddress address,
                      std::uint64_t bytes) {
  return absl::StrFormat("%s of [%#x, %#x) (%d bytes)", name, address,
                         address + bytes, bytes);
}

std::string CreateCall(std::uint64_t bytes) {
  return absl::StrFormat("CreatePhysical of %d bytes", bytes);
}

}  // namespace

VirtualMemory::~VirtualMemory() {
  if (memory_ != SimMemory::kHostBacked) return;
  // A reservation's munmap takes its mappings with it.
  for (const auto& [address, reservation] : reservations_) {
    munmap(reinterpret_cast<void*>(address), reservation.size);
  }
  for (const auto& [handle, physical] : physicals_) {
    if (physical.fd >= 0) close(physical.fd);
  }
  for (const auto& [address, mapping] : mappings_) {
    if (mapping.fd >= 0) close(mapping.fd);
  }
}

absl::StatusOr<int> VirtualMemory::MappingFd(const std::string& call,
                                             DeviceAddress address,
                                             std::uint64_t* bytes) const {
  const auto it = mappings_.find(address);
  if (it == mappings_.end()) {
    const auto holder = Holding(mappings_, address);
    if (holder != mappings_.end()) {
      return Invalid(
          call, absl::StrFormat("%#x is inside the mapping [%#x, %#x): name "
                                "the start of a whole mapping",
                                address, holder->first,
                                holder->first + holder->second.size));
    }
    return Invalid(call, absl::StrFormat("nothing is mapped at %#x", address));
  }
  *bytes = it->second.size;
  return it->second.fd;
}

absl::StatusOr<PhysicalHandle> VirtualMemory::Import(const std::string& call,
                                                     int fd,
                                                     std::uint64_t bytes) {
  Physical physical;
  physical.size = bytes;
  physical.imported = true;
  if (memory_ == SimMemory::kHostBacked) {
    physical.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (physical.fd < 0)
      return SystemError(call, "dup of the descriptor", errno);
  }
  const PhysicalHandle handle = next_physical_++;
  physicals_.emplace(handle, physical);
  return handle;
}

void VirtualMemory::DropMapping(
    absl::btree_map<PhysicalHandle, Physical>::iterator physical) {
  if (--physical->second.mappings == 0 && physical->second.released) {
    if (!physical->second.imported) physical_bytes_ -= physical->second.size;
    physicals_.erase(physical);
  }
}

std::uint64_t VirtualMemory::HandleBytes(PhysicalHandle handle) const {
  const auto physical = physicals_.find(handle);
  return physical != physicals_.end() ? physical->second.size : 0;
}

absl::Status VirtualMemory::Invalid(const std::string& call,
                                    absl::string_view rule) const {
  return absl::InvalidArgumentError(
      absl::StrCat(call, " on ", info_.name, ": ", rule));
}

// The system call `what` failed with `error` during `call`.
absl::Status VirtualMemory::SystemError(const std::string& call,
                                        absl::string_view what,
                                        int error) const {
  const std::string message = absl::StrCat(call, " on ", info_.name, ": ", what,
                                           ": ", std::strerror(error));
  if (error == ENOMEM || error == EMFILE || error == ENFILE ||
      error == ENOSPC) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

std::string VirtualMemory::OnDevice(const std::string& call) const {
  return absl::StrCat(call, " on ", info_.name);
}

absl::StatusOr<DeviceAddress> VirtualMemory::Reserve(std::uint64_t bytes,
                                                     std::uint64_t alignment) {
  const std::string call = absl::StrFormat(
      "ReserveAddress of %d bytes aligned to %d", bytes, alignment);
  absl::StatusOr<std::uint64_t> aligned =
      rules_.CheckReserve(OnDevice(call), bytes, alignment);
  if (!aligned.ok()) return aligned.status();
  alignment = *aligned;
  DeviceAddress address = 0;
  if (memory_ == SimMemory::kFake) {
    // Down from the lowest reservation so far, a guard granule below it,
    // staying above what plain allocations and pool segments took.
    absl::StatusOr<DeviceAddress> placed =
        placement_->PlaceFakeReservation(call, bytes, alignment);
    if (!placed.ok()) return placed.status();
    address = *placed;
  } else {
    // Over-reserve by the alignment, then trim both ends, so that the
    // reservation is exactly [address, address + bytes).
    const std::uint64_t page = host_page_size_;
    const std::uint64_t slack = alignment > page ? alignment - page : 0;
    if (bytes > std::numeric_limits<std::uint64_t>::max() - slack) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s on %s: larger than the host's address space", call, info_.name));
    }
    const std::uint64_t length = bytes + slack;
    void* mapping = mmap(nullptr, length, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED) {
      const int error = errno;
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s on %s: mmap of %d bytes of host address space: %s", call,
          info_.name, length, std::strerror(error)));
    }
    const DeviceAddress base = reinterpret_cast<std::uintptr_t>(mapping);
    address = AlignUp(base, alignment);
    if (address > base) {
      (void)munmap(mapping, address - base);
    }
    if (base + length > address + bytes) {
      (void)munmap(reinterpret_cast<void*>(address + bytes),
                   base + length - address - bytes);
    }
  }
  reservations_.emplace(address, Reservation{bytes});
  reserved_bytes_ += bytes;
  return address;
}

absl::Status VirtualMemory::FreeAddress(DeviceAddress address,
                                        std::uint64_t bytes) {
  const std::string call = RangeCall("FreeAddress", address, bytes);
  if (absl::Status s = rules_.CheckRange(OnDevice(call), address, bytes);
      !s.ok()) {
    return s;
  }
  auto it = reservations_.find(address);
  if (it == reservations_.end()) {
    const auto holder = Holding(reservations_, address);
    if (holder != reservations_.end()) {
      return Invalid(
          call,
          absl::StrFormat(
              "%#x is inside the reservation [%#x, %#x): FreeAddress "
              "takes a whole reservation",
              address, holder->first, holder->first + holder->second.size));
    }
    return Invalid(call,
                   absl::StrFormat("no reservation starts at %#x", address));
  }
  if (it->second.size != bytes) {
    return Invalid(call,
                   absl::StrFormat("the reservation at %#x has %d bytes: "
                                   "FreeAddress takes a whole reservation",
                                   address, it->second.size));
  }
  const auto mapped = mappings_.lower_bound(address);
  if (mapped != mappings_.end() && mapped->first < address + bytes) {
    return Invalid(call, absl::StrFormat(
                             "the mapping [%#x, %#x) of physical handle "
                             "%d is still in it: unmap it first",
                             mapped->first, mapped->first + mapped->second.size,
                             mapped->second.handle));
  }
  if (memory_ == SimMemory::kHostBacked &&
      munmap(reinterpret_cast<void*>(address), bytes) != 0) {
    return SystemError(call, "munmap", errno);
  }
  reservations_.erase(it);
  reserved_bytes_ -= bytes;
  return absl::OkStatus();
}

absl::Status VirtualMemory::CheckCreate(std::uint64_t bytes) const {
  return rules_.CheckSize(OnDevice(CreateCall(bytes)), bytes);
}

absl::StatusOr<PhysicalHandle> VirtualMemory::Create(std::uint64_t bytes) {
  const std::string call = CreateCall(bytes);
  Physical physical;
  physical.size = bytes;
  if (memory_ == SimMemory::kHostBacked) {
    const int fd = memfd_create("gpualloc-sim-physical", MFD_CLOEXEC);
    if (fd < 0) return SystemError(call, "memfd_create", errno);
    if (bytes > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ||
        ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int error = errno;
      close(fd);
      return SystemError(call, "ftruncate of the memfd", error);
    }
    physical.fd = fd;
  }
  const PhysicalHandle handle = next_physical_++;
  physicals_.emplace(handle, physical);
  physical_bytes_ += bytes;
  return handle;
}

absl::Status VirtualMemory::Release(PhysicalHandle handle) {
  const std::string call =
      absl::StrFormat("ReleasePhysical of handle %d", handle);
  auto it = physicals_.find(handle);
  if (it == physicals_.end()) {
    return Invalid(call,
                   "no such physical handle (never created, or released "
                   "and no longer mapped)");
  }
  Physical& physical = it->second;
  if (physical.released) {
    return Invalid(call,
                   absl::StrFormat("the handle was already released (its %d "
                                   "bytes stay until its %d mapping(s) go)",
                                   physical.size, physical.mappings));
  }
  if (physical.fd >= 0) {
    // Whatever close answers, the descriptor is gone (Linux frees it
    // before reporting an error).
    const int fd = std::exchange(physical.fd, -1);
    if (close(fd) != 0) return SystemError(call, "close of the memfd", errno);
  }
  if (physical.mappings > 0) {
    physical.released = true;  // alive until its last mapping goes
    return absl::OkStatus();
  }
  if (!physical.imported) physical_bytes_ -= physical.size;
  physicals_.erase(it);
  return absl::OkStatus();
}

absl::Status VirtualMemory::Map(DeviceAddress address, std::uint64_t bytes,
                                PhysicalHandle handle) {
  const std::string call = absl::StrCat(RangeCall("Map", address, bytes),
                                        " to physical handle ", handle);
  if (absl::Status s = rules_.CheckRange(OnDevice(call), address, bytes);
      !s.ok()) {
    return s;
  }
  auto physical = physicals_.find(handle);
  if (physical == physicals_.end()) {
    return Invalid(call,
                   "no such physical handle (never created, or released "
                   "and no longer mapped)");
  }
  if (physical->second.released) {
    return Invalid(call,
                   "the handle was released: only a live handle can be "
                   "mapped");
  }
  if (physical->second.size != bytes) {
    return Invalid(call,
                   absl::StrFormat("a mapping covers its whole handle from "
                                   "offset 0, and the handle has %d bytes",
                                   physical->second.size));
  }
  const auto reservation = Holding(reservations_, address);
  if (reservation == reservations_.end()) {
    return Invalid(call,
                   absl::StrFormat("%#x is not inside a reservation", address));
  }
  const DeviceAddress end = address + bytes;
  const DeviceAddress reservation_end =
      reservation->first + reservation->second.size;
  if (end > reservation_end) {
    return Invalid(call,
                   absl::StrFormat("the range runs past the end of the "
                                   "reservation [%#x, %#x): a mapping lies "
                                   "inside one reservation",
                                   reservation->first, reservation_end));
  }
  auto overlap = mappings_.lower_bound(end);
  if (overlap != mappings_.begin()) {
    --overlap;
    if (overlap->first + overlap->second.size > address) {
      return Invalid(
          call,
          absl::StrFormat("the range overlaps the mapping [%#x, %#x) "
                          "of physical handle %d",
                          overlap->first, overlap->first + overlap->second.size,
                          overlap->second.handle));
    }
  }
  int kept = -1;
  if (memory_ == SimMemory::kHostBacked) {
    // Kept with the mapping for ExportMapping, which works after the
    // handle's release.
    kept = fcntl(physical->second.fd, F_DUPFD_CLOEXEC, 0);
    if (kept < 0) return SystemError(call, "dup of the memfd", errno);
    void* mapped = mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
                        MAP_SHARED | MAP_FIXED, physical->second.fd, 0);
    if (mapped == MAP_FAILED) {
      const int error = errno;
      // A failed MAP_FIXED may have dropped what was there: put the
      // reservation's inaccessible memory back.
      (void)mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                 0);
      close(kept);
      return SystemError(call, "mmap of the memfd", error);
    }
  }
  mappings_.emplace(address, Mapping{bytes, handle, kept});
  ++physical->second.mappings;
  mapped_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status VirtualMemory::Unmap(
    DeviceAddress address, std::uint64_t bytes,
    absl::FunctionRef<void(DeviceAddress, DeviceAddress)> in_use) {
  const std::string call = RangeCall("Unmap", address, bytes);
  if (absl::Status s = rules_.CheckRange(OnDevice(call), address, bytes);
      !s.ok()) {
    return s;
  }
  const DeviceAddress end = address + bytes;
  if (!mappings_.contains(address)) {
    const auto holder = Holding(mappings_, address);
    if (holder != mappings_.end()) {
      return Invalid(call,
                     absl::StrFormat("%#x is inside the mapping [%#x, %#x): "
                                     "Unmap takes whole mappings (no partial "
                                     "unmap)",
                                     address, holder->first,
                                     holder->first + holder->second.size));
    }
    return Invalid(call, absl::StrFormat("nothing is mapped at %#x", address));
  }
  for (DeviceAddress at = address; at < end;) {
    const auto it = mappings_.find(at);
    if (it == mappings_.end()) {
      const auto next = mappings_.lower_bound(at);
      const DeviceAddress hole_end =
          next == mappings_.end() ? end : std::min(end, next->first);
      return Invalid(call,
                     absl::StrFormat("[%#x, %#x) in the range is not mapped: "
                                     "Unmap takes contiguous whole mappings",
                                     at, hole_end));
    }
    const DeviceAddress mapping_end = at + it->second.size;
    if (mapping_end > end) {
      return Invalid(call,
                     absl::StrFormat("the range ends inside the mapping [%#x, "
                                     "%#x): Unmap takes whole mappings (no "
                                     "partial unmap)",
                                     at, mapping_end));
    }
    at = mapping_end;
  }
  if (memory_ == SimMemory::kHostBacked) {
    void* back =
        mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (back == MAP_FAILED) {
      return SystemError(call, "mmap of PROT_NONE memory over the range",
                         errno);
    }
  }
  in_use(address, end);
  for (auto it = mappings_.lower_bound(address);
       it != mappings_.end() && it->first < end;) {
    if (it->second.fd >= 0) close(it->second.fd);
    DropMapping(physicals_.find(it->second.handle));
    it = mappings_.erase(it);
  }
  mapped_bytes_ -= bytes;
  RemoveAccess(address, end);
  return absl::OkStatus();
}

absl::Status VirtualMemory::SetAccess(DeviceAddress address,
                                      std::uint64_t bytes) {
  const std::string call = RangeCall("SetAccess", address, bytes);
  if (absl::Status s = rules_.CheckRange(OnDevice(call), address, bytes);
      !s.ok()) {
    return s;
  }
  const DeviceAddress end = address + bytes;
  DeviceAddress at = address;
  const auto first = Holding(mappings_, address);
  if (first != mappings_.end()) at = first->first + first->second.size;
  while (at < end) {
    if (at == address || !mappings_.contains(at)) {
      const auto next = mappings_.lower_bound(at);
      const DeviceAddress hole_end =
          next == mappings_.end() ? end : std::min(end, next->first);
      return Invalid(call,
                     absl::StrFormat("[%#x, %#x) in the range is not mapped: "
                                     "SetAccess needs the whole range mapped",
                                     at, hole_end));
    }
    at += mappings_.at(at).size;
  }
  if (memory_ == SimMemory::kHostBacked &&
      mprotect(reinterpret_cast<void*>(address), bytes,
               PROT_READ | PROT_WRITE) != 0) {
    return SystemError(call, "mprotect", errno);
  }
  AddAccess(address, end);
  return absl::OkStatus();
}

// accessible_ holds disjoint, non-touching [start, end) ranges.
void VirtualMemory::AddAccess(DeviceAddress start, DeviceAddress end) {
  auto it = accessible_.upper_bound(start);
  if (it != accessible_.begin() && std::prev(it)->second >= start) --it;
  while (it != accessible_.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    it = accessible_.erase(it);
  }
  accessible_.emplace(start, end);
}

void VirtualMemory::RemoveAccess(DeviceAddress start, DeviceAddress end) {
  auto it = accessible_.upper_bound(start);
  if (it != accessible_.begin() && std::prev(it)->second > start) --it;
  std::vector<std::pair<DeviceAddress, DeviceAddress>> kept;
  while (it != accessible_.end() && it->first < end) {
    if (it->first < start) kept.emplace_back(it->first, start);
    if (it->second > end) kept.emplace_back(end, it->second);
    it = accessible_.erase(it);
  }
  for (const auto& range : kept) accessible_.insert(range);
}

bool VirtualMemory::Accessible(DeviceAddress start, DeviceAddress end) const {
  auto it = accessible_.upper_bound(start);
  if (it == accessible_.begin()) return false;
  --it;
  return it->second >= end;
}

bool VirtualMemory::Reserved(DeviceAddress start, DeviceAddress end) const {
  auto it = Holding(reservations_, start);
  return it != reservations_.end() && end - it->first <= it->second.size;
}

}  // namespace gpualloc::sim
