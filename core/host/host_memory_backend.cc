// SPDX-License-Identifier: Apache-2.0
// core/host/host_memory_backend.cc: pinned host memory as a Backend.
#include "core/host/host_memory_backend.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpualloc/core/host_allocator.h"

namespace gpualloc {

std::uint64_t DefaultHostMemoryLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return kHostRegionBytes;
  const std::uint64_t bytes =
      static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
  return std::max(kHostRegionBytes,
                  bytes / kHostRegionBytes * kHostRegionBytes);
}

namespace core {
namespace {

DeviceInfo HostInfo(const DeviceInfo& device, std::uint64_t limit) {
  const long page_size = sysconf(_SC_PAGESIZE);
  const std::uint64_t page =
      page_size > 0 ? static_cast<std::uint64_t>(page_size) : 4096;
  DeviceInfo info;
  info.backend = device.backend;
  info.vendor = device.vendor;
  info.name = absl::StrCat("pinned host memory of ", device.name);
  info.arch_id = device.arch_id;
  info.profile = device.profile;
  info.profile_reason = device.profile_reason;
  info.ordinal = device.ordinal;
  const std::uint64_t total = std::max(DefaultHostMemoryLimit(), limit);
  // A whole number of regions, and never below the limit asked for (a limit
  // within a region of 2^64 is rounded down instead: nothing overflows).
  const std::uint64_t regions =
      total / kHostRegionBytes + (total % kHostRegionBytes != 0 ? 1 : 0);
  info.total_bytes = regions > UINT64_MAX / kHostRegionBytes
                         ? UINT64_MAX / kHostRegionBytes * kHostRegionBytes
                         : regions * kHostRegionBytes;
  info.min_granularity = page;
  info.recommended_granularity = kHostRegionBytes;
  info.allocation_alignment = page;
  info.page_sizes = {page};
  info.capabilities.host_accessible = true;
  info.driver_version = device.driver_version;
  return info;
}

}  // namespace

HostMemoryBackend::HostMemoryBackend(std::shared_ptr<Backend> device,
                                     std::uint64_t limit)
    : device_(std::move(device)), info_(HostInfo(device_->info(), limit)) {}

absl::StatusOr<std::uint64_t> HostMemoryBackend::FreeBytes() {
  LockGuard lock(&mu_);
  return info_.total_bytes - std::min(allocated_, info_.total_bytes);
}

absl::StatusOr<DeviceAddress> HostMemoryBackend::Allocate(std::uint64_t bytes) {
  absl::StatusOr<void*> ptr = device_->HostAllocate(bytes);
  if (!ptr.ok()) return ptr.status();
  const auto address = reinterpret_cast<DeviceAddress>(*ptr);
  LockGuard lock(&mu_);
  sizes_[address] = bytes;
  allocated_ += bytes;
  return address;
}

absl::Status HostMemoryBackend::Free(DeviceAddress address) {
  if (absl::Status s = device_->HostFree(reinterpret_cast<void*>(address));
      !s.ok()) {
    return s;
  }
  LockGuard lock(&mu_);
  auto it = sizes_.find(address);
  if (it != sizes_.end()) {
    allocated_ -= it->second;
    sizes_.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace core
}  // namespace gpualloc
