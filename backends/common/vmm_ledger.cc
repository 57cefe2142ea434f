// SPDX-License-Identifier: Apache-2.0
// backends/common/vmm_ledger.cc: the virtual-memory rule checks.
#include "backends/common/vmm_ledger.h"

#include <bit>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpualloc::common {
namespace {

std::string Call(absl::string_view name, DeviceAddress address,
                 std::uint64_t bytes) {
  return absl::StrFormat("%s(%#x, %d bytes)", name, address, bytes);
}

absl::Status Broken(absl::string_view call, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(call, ": ", rule));
}

// The granularity is the device's minimum: the simulator's messages have
// always named it so.
std::string NotMultiple(absl::string_view what, std::uint64_t granularity) {
  return absl::StrFormat(
      "%s is not a multiple of the granularity (%d bytes, the minimum "
      "granularity)",
      what, granularity);
}

}  // namespace

absl::Status VmmRules::CheckSize(absl::string_view call,
                                 std::uint64_t bytes) const {
  if (bytes == 0) return Broken(call, "the size is 0");
  if (bytes % granularity_ != 0) {
    return Broken(call, NotMultiple("the size", granularity_));
  }
  return absl::OkStatus();
}

absl::Status VmmRules::CheckRange(absl::string_view call, DeviceAddress address,
                                  std::uint64_t bytes) const {
  if (absl::Status s = CheckSize(call, bytes); !s.ok()) return s;
  if (address % granularity_ != 0) {
    return Broken(call, NotMultiple("the address", granularity_));
  }
  if (address > std::numeric_limits<std::uint64_t>::max() - bytes) {
    return Broken(call, "the range wraps around the address space");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::uint64_t> VmmRules::CheckReserve(
    absl::string_view call, std::uint64_t bytes,
    std::uint64_t alignment) const {
  if (absl::Status s = CheckSize(call, bytes); !s.ok()) return s;
  if (alignment == 0) return granularity_;
  if (!std::has_single_bit(alignment)) {
    return Broken(call, "the alignment is not a power of two");
  }
  if (alignment % granularity_ != 0) {
    return Broken(call, NotMultiple("the alignment", granularity_));
  }
  return alignment;
}

const VmmLedger::Reservation* VmmLedger::Holder(DeviceAddress address,
                                                std::uint64_t bytes) const {
  auto it = reservations_.upper_bound(address);
  if (it == reservations_.begin()) return nullptr;
  --it;
  const Reservation& r = it->second;
  if (address >= r.address && address + bytes <= r.address + r.bytes) {
    return &r;
  }
  return nullptr;
}

bool VmmLedger::FullyMapped(DeviceAddress address, std::uint64_t bytes) const {
  const DeviceAddress end = address + bytes;
  DeviceAddress at = address;
  auto it = mappings_.upper_bound(at);
  if (it != mappings_.begin()) {
    auto before = std::prev(it);
    if (before->second.address + before->second.bytes > at) it = before;
  }
  while (at < end) {
    if (it == mappings_.end() || it->second.address > at) return false;
    at = it->second.address + it->second.bytes;
    ++it;
  }
  return true;
}

absl::StatusOr<std::uint64_t> VmmLedger::CheckReserve(
    std::uint64_t bytes, std::uint64_t alignment) const {
  return rules_.CheckReserve(
      absl::StrFormat("ReserveAddress(%d bytes, alignment %d)", bytes,
                      alignment),
      bytes, alignment);
}

void VmmLedger::AddReservation(DeviceAddress address, std::uint64_t bytes) {
  reservations_[address] = Reservation{address, bytes};
}

absl::Status VmmLedger::CheckFreeAddress(DeviceAddress address,
                                         std::uint64_t bytes) const {
  const std::string call = Call("FreeAddress", address, bytes);
  auto it = reservations_.find(address);
  if (it == reservations_.end() || it->second.bytes != bytes) {
    return Broken(call,
                  "not a whole reservation ReserveAddress returned (a "
                  "reservation is freed whole, once)");
  }
  auto m = mappings_.lower_bound(address);
  if (m != mappings_.end() && m->first < address + bytes) {
    return Broken(call, absl::StrFormat("memory is still mapped in it (at "
                                        "%#x, %d bytes); Unmap first",
                                        m->first, m->second.bytes));
  }
  return absl::OkStatus();
}

void VmmLedger::RemoveReservation(DeviceAddress address) {
  reservations_.erase(address);
}

absl::Status VmmLedger::CheckCreate(std::uint64_t bytes) const {
  return rules_.CheckSize(absl::StrFormat("CreatePhysical(%d bytes)", bytes),
                          bytes);
}

absl::Status VmmLedger::CheckImport(std::uint64_t bytes) const {
  return rules_.CheckSize(absl::StrFormat("ImportPhysical(%d bytes)", bytes),
                          bytes);
}

void VmmLedger::AddHandle(PhysicalHandle handle, std::uint64_t bytes) {
  handles_[handle] = bytes;
}

absl::Status VmmLedger::CheckRelease(PhysicalHandle handle) const {
  if (!handles_.contains(handle)) {
    return Broken(
        absl::StrFormat("ReleasePhysical(%#x)", handle),
        "not a live handle CreatePhysical or ImportPhysical returned");
  }
  return absl::OkStatus();
}

void VmmLedger::RemoveHandle(PhysicalHandle handle) { handles_.erase(handle); }

absl::Status VmmLedger::CheckMap(DeviceAddress address, std::uint64_t bytes,
                                 PhysicalHandle handle) const {
  const std::string call =
      absl::StrFormat("Map(%#x, %d bytes, handle %#x)", address, bytes, handle);
  if (absl::Status s = rules_.CheckRange(call, address, bytes); !s.ok()) {
    return s;
  }
  auto h = handles_.find(handle);
  if (h == handles_.end()) {
    return Broken(
        call, "not a live handle CreatePhysical or ImportPhysical returned");
  }
  if (h->second != bytes) {
    return Broken(call, absl::StrFormat("a mapping covers its whole handle "
                                        "from offset 0, and the handle has "
                                        "%d bytes",
                                        h->second));
  }
  if (Holder(address, bytes) == nullptr) {
    return Broken(call, "the range is not inside one reservation");
  }
  auto m = mappings_.upper_bound(address);
  if (m != mappings_.begin()) {
    auto before = std::prev(m);
    if (before->second.address + before->second.bytes > address) m = before;
  }
  if (m != mappings_.end() && m->second.address < address + bytes) {
    return Broken(call, absl::StrFormat("the range overlaps the mapping at "
                                        "%#x (%d bytes)",
                                        m->second.address, m->second.bytes));
  }
  return absl::OkStatus();
}

void VmmLedger::AddMapping(DeviceAddress address, std::uint64_t bytes,
                           PhysicalHandle handle) {
  mappings_[address] = Mapping{address, bytes, handle};
}

absl::StatusOr<std::vector<VmmLedger::Mapping>> VmmLedger::CheckUnmap(
    DeviceAddress address, std::uint64_t bytes) const {
  const std::string call = Call("Unmap", address, bytes);
  if (absl::Status s = rules_.CheckRange(call, address, bytes); !s.ok()) {
    return s;
  }
  const DeviceAddress end = address + bytes;
  auto it = mappings_.find(address);
  if (it == mappings_.end()) {
    return Broken(call,
                  "no mapping starts at the address (Unmap takes whole "
                  "mappings, no partial unmap)");
  }
  std::vector<Mapping> found;
  DeviceAddress at = address;
  while (at < end) {
    if (it == mappings_.end() || it->second.address != at) {
      return Broken(call, absl::StrFormat("nothing is mapped at %#x (the "
                                          "range must hold contiguous whole "
                                          "mappings)",
                                          at));
    }
    found.push_back(it->second);
    at += it->second.bytes;
    ++it;
  }
  if (at != end) {
    return Broken(call, absl::StrFormat("the range ends inside the mapping "
                                        "at %#x (no partial unmap)",
                                        found.back().address));
  }
  return found;
}

void VmmLedger::RemoveMapping(DeviceAddress address) {
  mappings_.erase(address);
}

absl::Status VmmLedger::CheckSetAccess(DeviceAddress address,
                                       std::uint64_t bytes) const {
  const std::string call = Call("SetAccess", address, bytes);
  if (absl::Status s = rules_.CheckRange(call, address, bytes); !s.ok()) {
    return s;
  }
  if (!FullyMapped(address, bytes)) {
    return Broken(call, "part of the range is not mapped");
  }
  return absl::OkStatus();
}

std::vector<VmmLedger::Mapping> VmmLedger::MappingsIn(
    DeviceAddress address, std::uint64_t bytes) const {
  std::vector<Mapping> out;
  auto it = mappings_.upper_bound(address);
  if (it != mappings_.begin()) {
    auto before = std::prev(it);
    if (before->second.address + before->second.bytes > address) it = before;
  }
  for (; it != mappings_.end() && it->first < address + bytes; ++it) {
    out.push_back(it->second);
  }
  return out;
}

std::vector<VmmLedger::Mapping> VmmLedger::mappings() const {
  std::vector<Mapping> out;
  for (const auto& [address, m] : mappings_) out.push_back(m);
  return out;
}

std::vector<PhysicalHandle> VmmLedger::handles() const {
  std::vector<PhysicalHandle> out;
  for (const auto& [handle, bytes] : handles_) out.push_back(handle);
  return out;
}

std::vector<VmmLedger::Reservation> VmmLedger::reservations() const {
  std::vector<Reservation> out;
  for (const auto& [address, r] : reservations_) out.push_back(r);
  return out;
}

}  // namespace gpualloc::common
