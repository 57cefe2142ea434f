// SPDX-License-Identifier: Apache-2.0
// backends/sim/host_memory.h: the simulator's page-locked host memory
// (HostAllocate / HostFree, cuMemHostAlloc / hipHostMalloc).
//
// Host-backed memory: each allocation is a private anonymous mapping of whole
// host pages (the requested bytes rounded up to the page size), readable and
// writable, page-aligned as cuMemHostAlloc's are. Fake memory: addresses
// only, from a range of their own above every ordinal's device window
// (kFakeHostBase), deterministic and never reused, a guard page between two
// allocations; nothing behind them is ever touched, so a trace that pins
// terabytes replays in constant host memory.
//
// Capacity: SimOptions::host_memory_bytes (the modeled machine's pinnable
// memory); a request beyond what is left is ResourceExhausted with the
// numbers. Pinned host memory does not count against the device's capacity.
//
// Copies (CopyToHost / CopyFromHost) whose host range lies wholly inside one
// live pinned allocation run at the link's rate; others come from pageable
// memory, which the driver stages through a pinned bounce buffer: they cost
// SimOptions::pageable_copy_ns_per_mib instead (Pinned answers which).
//
// Not thread-safe: the backend holds its lock around every use.
#ifndef GPUALLOC_BACKENDS_SIM_HOST_MEMORY_H_
#define GPUALLOC_BACKENDS_SIM_HOST_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/layer.h"
#include "gpualloc/backends/sim_backend.h"

namespace gpualloc::sim {

// First fake pinned host address, past every ordinal's device window, and the
// size of each ordinal's host window (16 TiB).
inline constexpr std::uintptr_t kFakeHostWindow = std::uintptr_t{1} << 44;

class HostMemory {
 public:
  HostMemory(SimMemory memory, std::string device_name, int ordinal,
             std::uint64_t capacity, std::uint64_t host_page_size);
  ~HostMemory();
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  // `bytes` (positive) of pinned host memory, page-aligned.
  absl::StatusOr<void*> Allocate(std::uint64_t bytes);
  // InvalidArgument for a pointer Allocate did not return (or freed);
  // Internal when munmap fails. Nothing changes on error.
  absl::Status Free(void* ptr);
  // The accounted (page-rounded) size of the allocation at `ptr`, or 0.
  std::uint64_t SizeAt(const void* ptr) const;
  // Whether all of [start, end) lies in one live allocation.
  bool Holds(std::uintptr_t start, std::uintptr_t end) const;
  // Whether the `bytes` at `ptr` (positive) lie in one live allocation.
  bool Pinned(const void* ptr, std::uint64_t bytes) const;

  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t peak_bytes() const { return peak_bytes_; }
  std::uint64_t live() const { return live_.size(); }
  std::uint64_t capacity() const { return capacity_; }

 private:
  struct Block {
    std::uint64_t size = 0;  // page-rounded
    bool mapped = false;     // host-backed: munmap at Free
  };

  const SimMemory memory_;
  const std::string device_name_;
  const std::uint64_t capacity_;
  const std::uint64_t page_;
  std::uintptr_t next_fake_;
  std::uint64_t bytes_ = 0;
  std::uint64_t peak_bytes_ = 0;
  absl::btree_map<std::uintptr_t, Block> live_;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_HOST_MEMORY_H_
