// SPDX-License-Identifier: Apache-2.0
// backends/sim/placement.h: where the simulator puts memory, and the plain
// allocations it holds.
//
// Every address is aligned to the allocation alignment; requests of at least
// one recommended granule are aligned to the recommended granularity, like a
// driver that backs them with large pages. At least one recommended granule
// of unused address space follows every allocation, so separate allocations
// are never contiguous. Fake memory hands out addresses from a deterministic
// bump pointer going up from the bottom of the ordinal's window, never
// reused; fake reservations (virtual memory) come down from the top, and each
// side checks the other's mark. Host-backed memory maps each allocation
// privately and lazily (MAP_NORESERVE): only the requested bytes are readable
// and writable, the alignment slack before them and the guard after them are
// PROT_NONE.
//
// Not thread-safe: the backend holds its lock around every use.
#ifndef GPUALLOC_BACKENDS_SIM_PLACEMENT_H_
#define GPUALLOC_BACKENDS_SIM_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// Memory placed for a plain allocation or a pool segment.
struct Allocation {
  std::uint64_t size = 0;   // accounted: rounded up to the alignment
  void* mapping = nullptr;  // host-backed only: the whole mapping
  std::uint64_t mapping_length = 0;
  // Host-backed and shared (SharedFd): the memfd mapped MAP_SHARED over the
  // accessible bytes.
  int fd = -1;
};

class Placement {
 public:
  Placement(SimMemory memory, const DeviceInfo& info, int ordinal,
            std::uint64_t host_page_size);
  ~Placement();
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;

  // Picks an address for `size` bytes (a multiple of the alignment) and, for
  // host-backed memory, maps it. Capacity is the caller's business.
  absl::StatusOr<DeviceAddress> Place(std::uint64_t size,
                                      Allocation* allocation);
  // Gives back the host mapping of what Place made (a failed munmap leaks
  // host address space, nothing the simulated device would notice).
  static void Unplace(const Allocation& allocation);

  // A plain allocation of `bytes` (positive, fitting the device).
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes);
  // InvalidArgument for an address Allocate did not return (or freed), and
  // Internal when munmap fails; then nothing changes.
  absl::Status Free(DeviceAddress address);
  // The accounted size of the plain allocation at `address`, or 0.
  std::uint64_t SizeAt(DeviceAddress address) const;
  // Whether all of [start, end) lies in one live plain allocation.
  bool Holds(DeviceAddress start, DeviceAddress end) const;
  // The live plain allocation holding `address` (start, accounted size), or
  // (0, 0).
  std::pair<DeviceAddress, std::uint64_t> RangeOf(DeviceAddress address) const;
  // Host-backed memory: the memfd behind the plain allocation at `address`
  // (its start), made at the first call: the accessible bytes move to a
  // memfd mapped MAP_SHARED | MAP_FIXED at the same address, their content
  // copied (the resident pages only), so that another process can map them.
  // The allocation keeps it until freed. InvalidArgument naming `call` for
  // an address that does not start a live plain allocation.
  absl::StatusOr<int> SharedFd(absl::string_view call, DeviceAddress address);

  // Fake memory: the start of a reservation of `bytes` aligned to `alignment`
  // just below the lowest one so far, a guard granule below it and above
  // what plain allocations and pool segments took. `call` names the call for
  // the message.
  absl::StatusOr<DeviceAddress> PlaceFakeReservation(const std::string& call,
                                                     std::uint64_t bytes,
                                                     std::uint64_t alignment);

  std::uint64_t bytes_allocated() const { return bytes_allocated_; }
  std::uint64_t live_allocations() const { return live_.size(); }

 private:
  const SimMemory memory_;
  const DeviceInfo& info_;
  const std::uint64_t host_page_size_;
  DeviceAddress next_fake_address_;
  // Fake reservations take addresses below this one, going down.
  DeviceAddress fake_reserve_low_;
  std::uint64_t bytes_allocated_ = 0;
  absl::btree_map<DeviceAddress, Allocation> live_;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_PLACEMENT_H_
