// SPDX-License-Identifier: Apache-2.0
// backends/sim/placement.cc: addresses, guards and host mappings of the
// simulator's plain allocations and pool segments.
#include "backends/sim/placement.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/sim/sim_util.h"

namespace gpualloc::sim {

Placement::Placement(SimMemory memory, const DeviceInfo& info, int ordinal,
                     std::uint64_t host_page_size)
    : memory_(memory),
      info_(info),
      host_page_size_(host_page_size),
      next_fake_address_(kFakeBase +
                         static_cast<std::uint64_t>(ordinal) * kFakeWindow),
      fake_reserve_low_(next_fake_address_ + kFakeWindow) {}

Placement::~Placement() {
  for (const auto& [address, allocation] : live_) Unplace(allocation);
}

void Placement::Unplace(const Allocation& allocation) {
  if (allocation.mapping != nullptr) {
    (void)munmap(allocation.mapping, allocation.mapping_length);
  }
  if (allocation.fd >= 0) (void)close(allocation.fd);
}

absl::StatusOr<DeviceAddress> Placement::Place(std::uint64_t size,
                                               Allocation* allocation) {
  std::uint64_t placement = info_.allocation_alignment;
  if (size >= info_.recommended_granularity &&
      info_.recommended_granularity > placement) {
    placement = info_.recommended_granularity;
  }
  const std::uint64_t guard = info_.recommended_granularity;
  allocation->size = size;
  if (memory_ == SimMemory::kFake) {
    const DeviceAddress address = AlignUp(next_fake_address_, placement);
    // Reservations come down from the top of the window.
    const std::uint64_t window_end = fake_reserve_low_;
    if (address > window_end || size > window_end - address ||
        guard > window_end - address - size) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "fake address space of %s exhausted after %#x (%d bytes per "
          "device; addresses are never reused)",
          info_.name, next_fake_address_, kFakeWindow));
    }
    next_fake_address_ = address + size + guard;
    return address;
  }
  const std::uint64_t page = host_page_size_;
  const std::uint64_t slack = placement > page ? placement - page : 0;
  const std::uint64_t accessible = AlignUp(size, page);
  const std::uint64_t length = slack + accessible + AlignUp(guard, page);
  void* mapping = mmap(nullptr, length, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) {
    const int error = errno;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "host-backed allocation of %d bytes on %s failed: mmap of %d "
        "bytes: %s",
        size, info_.name, length, std::strerror(error)));
  }
  const DeviceAddress address =
      AlignUp(reinterpret_cast<std::uintptr_t>(mapping), placement);
  if (mprotect(reinterpret_cast<void*>(address), accessible,
               PROT_READ | PROT_WRITE) != 0) {
    const int error = errno;
    munmap(mapping, length);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "host-backed allocation of %d bytes on %s failed: mprotect: %s", size,
        info_.name, std::strerror(error)));
  }
  allocation->mapping = mapping;
  allocation->mapping_length = length;
  return address;
}

absl::StatusOr<DeviceAddress> Placement::Allocate(std::uint64_t bytes) {
  Allocation allocation;
  absl::StatusOr<DeviceAddress> address =
      Place(AlignUp(bytes, info_.allocation_alignment), &allocation);
  if (!address.ok()) return address.status();
  live_.emplace(*address, allocation);
  bytes_allocated_ += allocation.size;
  return *address;
}

absl::Status Placement::Free(DeviceAddress address) {
  auto it = live_.find(address);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Free of %#x on %s: not an address this device allocated, or "
        "already freed",
        address, info_.name));
  }
  const Allocation& allocation = it->second;
  if (allocation.mapping != nullptr &&
      munmap(allocation.mapping, allocation.mapping_length) != 0) {
    const int error = errno;
    return absl::InternalError(absl::StrFormat("Free of %#x on %s: munmap: %s",
                                               address, info_.name,
                                               std::strerror(error)));
  }
  if (allocation.fd >= 0) (void)close(allocation.fd);
  bytes_allocated_ -= allocation.size;
  live_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<int> Placement::SharedFd(absl::string_view call,
                                        DeviceAddress address) {
  auto it = live_.find(address);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s of %#x on %s: not the start of a live allocation of this device "
        "(an address Allocate returned and Free did not take back)",
        call, address, info_.name));
  }
  Allocation& allocation = it->second;
  if (allocation.fd >= 0 || memory_ != SimMemory::kHostBacked) {
    return allocation.fd;
  }
  const std::uint64_t length = AlignUp(allocation.size, host_page_size_);
  const auto fail = [&](absl::string_view what, int error, int fd) {
    if (fd >= 0) close(fd);
    return absl::InternalError(absl::StrFormat("%s of %#x on %s: %s: %s", call,
                                               address, info_.name, what,
                                               std::strerror(error)));
  };
  const int fd = memfd_create("gpualloc-sim-allocation", MFD_CLOEXEC);
  if (fd < 0) return fail("memfd_create", errno, -1);
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
    return fail("ftruncate of the memfd", errno, fd);
  }
  // Only the resident pages hold anything: the rest reads as zeros, which
  // the memfd's holes do too.
  auto* base = reinterpret_cast<unsigned char*>(address);
  const std::uint64_t pages = length / host_page_size_;
  std::vector<unsigned char> resident(pages);
  if (mincore(base, length, resident.data()) != 0) {
    return fail("mincore", errno, fd);
  }
  for (std::uint64_t page = 0; page < pages; ++page) {
    if ((resident[page] & 1) == 0) continue;
    const std::uint64_t offset = page * host_page_size_;
    if (pwrite(fd, base + offset, host_page_size_,
               static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(host_page_size_)) {
      return fail("copy to the memfd", errno, fd);
    }
  }
  if (mmap(base, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
           0) == MAP_FAILED) {
    // The private pages are still there only if MAP_FIXED failed before
    // replacing them, which Linux does for the errors it reports here.
    return fail("mmap of the memfd", errno, fd);
  }
  allocation.fd = fd;
  return fd;
}

std::uint64_t Placement::SizeAt(DeviceAddress address) const {
  const auto live = live_.find(address);
  return live != live_.end() ? live->second.size : 0;
}

bool Placement::Holds(DeviceAddress start, DeviceAddress end) const {
  const auto it = Holding(live_, start);
  return it != live_.end() && end <= it->first + it->second.size;
}

std::pair<DeviceAddress, std::uint64_t> Placement::RangeOf(
    DeviceAddress address) const {
  const auto it = Holding(live_, address);
  if (it == live_.end()) return {0, 0};
  return {it->first, it->second.size};
}

absl::StatusOr<DeviceAddress> Placement::PlaceFakeReservation(
    const std::string& call, std::uint64_t bytes, std::uint64_t alignment) {
  const std::uint64_t guard = info_.recommended_granularity;
  const DeviceAddress top = fake_reserve_low_;
  const DeviceAddress low = next_fake_address_;
  if (top < low || top - low < guard || top - low - guard < bytes ||
      ((top - guard - bytes) & ~(alignment - 1)) < low) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s on %s: fake address space exhausted: [%#x, %#x) is left "
        "between plain allocations and reservations (%d bytes per device; "
        "addresses are never reused)",
        call, info_.name, low, top, kFakeWindow));
  }
  fake_reserve_low_ = (top - guard - bytes) & ~(alignment - 1);
  return fake_reserve_low_;
}

}  // namespace gpualloc::sim
