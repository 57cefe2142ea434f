// SPDX-License-Identifier: Apache-2.0
// backends/sim/host_memory.cc: the simulator's pinned host memory.
#include "backends/sim/host_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "backends/sim/sim_util.h"

namespace gpualloc::sim {

namespace {

// Above the device windows of every ordinal (kFakeBase + 256 windows).
constexpr std::uintptr_t kFakeHostBase =
    kFakeBase + static_cast<std::uintptr_t>(kMaxOrdinal + 1) * kFakeWindow;

}  // namespace

HostMemory::HostMemory(SimMemory memory, std::string device_name, int ordinal,
                       std::uint64_t capacity, std::uint64_t host_page_size)
    : memory_(memory),
      device_name_(std::move(device_name)),
      capacity_(capacity),
      page_(host_page_size),
      next_fake_(kFakeHostBase +
                 static_cast<std::uintptr_t>(ordinal) * kFakeHostWindow) {}

HostMemory::~HostMemory() {
  for (const auto& [start, block] : live_) {
    if (block.mapped) {
      (void)munmap(reinterpret_cast<void*>(start), block.size);
    }
  }
}

absl::StatusOr<void*> HostMemory::Allocate(std::uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sim: HostAllocate of 0 bytes on %s: the size must be positive",
        device_name_));
  }
  if (bytes > capacity_ - bytes_ ||
      AlignUp(bytes, page_) > capacity_ - bytes_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "sim: out of pinned host memory on %s: HostAllocate of %d bytes, %d "
        "of %d bytes pinned (SimOptions.host_memory_bytes) in %d allocations",
        device_name_, bytes, bytes_, capacity_, live_.size()));
  }
  const std::uint64_t size = AlignUp(bytes, page_);
  std::uintptr_t start = 0;
  bool mapped = false;
  if (memory_ == SimMemory::kHostBacked) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      const int error = errno;
      const std::string text = std::strerror(error);
      return error == ENOMEM
                 ? absl::ResourceExhaustedError(absl::StrFormat(
                       "sim: HostAllocate of %d bytes on %s: mmap: %s", bytes,
                       device_name_, text))
                 : absl::InternalError(absl::StrFormat(
                       "sim: HostAllocate of %d bytes on %s: mmap: %s", bytes,
                       device_name_, text));
    }
    start = reinterpret_cast<std::uintptr_t>(p);
    mapped = true;
  } else {
    start = next_fake_;
    next_fake_ += size + page_;  // a guard page: never contiguous
  }
  live_.emplace(start, Block{size, mapped});
  bytes_ += size;
  if (bytes_ > peak_bytes_) peak_bytes_ = bytes_;
  return reinterpret_cast<void*>(start);
}

absl::Status HostMemory::Free(void* ptr) {
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = live_.find(start);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sim: HostFree of %p on %s: not the start of a live HostAllocate "
        "allocation",
        ptr, device_name_));
  }
  if (it->second.mapped && munmap(ptr, it->second.size) != 0) {
    const int error = errno;
    return absl::InternalError(
        absl::StrFormat("sim: HostFree of %p on %s: munmap: %s", ptr,
                        device_name_, std::strerror(error)));
  }
  bytes_ -= it->second.size;
  live_.erase(it);
  return absl::OkStatus();
}

std::uint64_t HostMemory::SizeAt(const void* ptr) const {
  auto it = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
  return it == live_.end() ? 0 : it->second.size;
}

bool HostMemory::Holds(std::uintptr_t start, std::uintptr_t end) const {
  if (end <= start) return false;
  auto it = Holding(live_, start);
  return it != live_.end() && end <= it->first + it->second.size;
}

bool HostMemory::Pinned(const void* ptr, std::uint64_t bytes) const {
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  return Holds(start, SaturatingEnd(start, bytes));
}

}  // namespace gpualloc::sim
