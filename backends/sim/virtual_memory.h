// SPDX-License-Identifier: Apache-2.0
// backends/sim/virtual_memory.h: the simulator's virtual memory.
//
// Reservations, physical handles and mappings are three maps; a mapping is
// always a whole handle, so a handle counts its mappings and a released one
// lives (and counts against the capacity) until the last goes. Accessible
// memory is a set of disjoint, merged ranges, so "is all of [a, b)
// accessible" is one lookup. The size, address and alignment rules are the
// ones every backend checks (backends/common/vmm_ledger.h, VmmRules); the
// rest, with the simulator's own wording, are here. Every rule is checked
// before any system call, and system calls come before any bookkeeping
// changes, so a failed call changes nothing. Fake reservations come down from
// the top of the ordinal's window (Placement); host-backed ones are real:
// PROT_NONE anonymous reservations, memfd handles mapped MAP_SHARED | MAP_FIXED
// over them, mprotect for access.
//
// Not thread-safe: the backend holds its lock around every use.
#ifndef GPUALLOC_BACKENDS_SIM_VIRTUAL_MEMORY_H_
#define GPUALLOC_BACKENDS_SIM_VIRTUAL_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/container/btree_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/common/vmm_ledger.h"
#include "backends/layer.h"
#include "backends/sim/placement.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

class VirtualMemory {
 public:
  VirtualMemory(SimMemory memory, const DeviceInfo& info,
                std::uint64_t host_page_size, Placement* placement)
      : memory_(memory),
        info_(info),
        host_page_size_(host_page_size),
        placement_(placement),
        rules_(info.min_granularity) {}
  ~VirtualMemory();
  VirtualMemory(const VirtualMemory&) = delete;
  VirtualMemory& operator=(const VirtualMemory&) = delete;

  absl::StatusOr<DeviceAddress> Reserve(std::uint64_t bytes,
                                        std::uint64_t alignment);
  absl::Status FreeAddress(DeviceAddress address, std::uint64_t bytes);
  // The size rule of CreatePhysical, checked before the capacity.
  absl::Status CheckCreate(std::uint64_t bytes) const;
  // REQUIRES: CheckCreate passed and the bytes fit the device.
  absl::StatusOr<PhysicalHandle> Create(std::uint64_t bytes);
  absl::Status Release(PhysicalHandle handle);
  absl::Status Map(DeviceAddress address, std::uint64_t bytes,
                   PhysicalHandle handle);
  // `in_use` is told the range once the rules and system calls passed,
  // before the mappings go.
  absl::Status Unmap(
      DeviceAddress address, std::uint64_t bytes,
      absl::FunctionRef<void(DeviceAddress, DeviceAddress)> in_use);
  absl::Status SetAccess(DeviceAddress address, std::uint64_t bytes);

  // Sharing (backends/sim/ipc.h). Host-backed: the memfd kept with the
  // mapping that starts at `address` (a duplicate of its handle's, so it
  // outlives ReleasePhysical), and the mapping's size in *bytes; fake: -1.
  // InvalidArgument naming `call` when no mapping starts there.
  absl::StatusOr<int> MappingFd(const std::string& call, DeviceAddress address,
                                std::uint64_t* bytes) const;
  // A handle of `bytes` over memory another device exported: host-backed, a
  // duplicate of `fd` (the caller keeps `fd`); fake, nothing behind it.
  // Not counted in physical_bytes() (the exporter's device holds it).
  // REQUIRES: the caller checked `fd` and `bytes`.
  absl::StatusOr<PhysicalHandle> Import(const std::string& call, int fd,
                                        std::uint64_t bytes);
  // The size rule of a handle (CreatePhysical's, and ImportPhysical's).
  absl::Status CheckSize(const std::string& call, std::uint64_t bytes) const {
    return rules_.CheckSize(OnDevice(call), bytes);
  }

  // The bytes of the handle, or 0 when there is none.
  std::uint64_t HandleBytes(PhysicalHandle handle) const;
  // Whether all of [start, end) (non-empty) is mapped with access set.
  bool Accessible(DeviceAddress start, DeviceAddress end) const;
  // Whether all of [start, end) (non-empty) lies inside one reservation.
  bool Reserved(DeviceAddress start, DeviceAddress end) const;
  std::uint64_t mapped_bytes() const { return mapped_bytes_; }
  std::uint64_t physical_bytes() const { return physical_bytes_; }
  std::uint64_t reserved_bytes() const { return reserved_bytes_; }

 private:
  // A reservation of address space; mappings live inside reservations.
  struct Reservation {
    std::uint64_t size = 0;
  };
  // Physical memory made by Create. A released handle stays here while it is
  // mapped (its memory is still alive), marked released.
  struct Physical {
    std::uint64_t size = 0;
    int fd = -1;  // host-backed and not released: its memfd
    bool released = false;
    std::uint64_t mappings = 0;  // how many mappings of it exist
    bool imported = false;       // ImportPhysical: not this device's memory
  };
  struct Mapping {
    std::uint64_t size = 0;  // the handle's size: mappings are whole handles
    PhysicalHandle handle = 0;
    int fd = -1;  // host-backed: a duplicate of the handle's memfd
  };
  // Drops one mapping of `physical`; the handle goes with its last mapping
  // once released.
  void DropMapping(absl::btree_map<PhysicalHandle, Physical>::iterator it);

  absl::Status Invalid(const std::string& call, absl::string_view rule) const;
  absl::Status SystemError(const std::string& call, absl::string_view what,
                           int error) const;
  // "`call` on the device": what the rules' messages start with.
  std::string OnDevice(const std::string& call) const;
  void AddAccess(DeviceAddress start, DeviceAddress end);
  void RemoveAccess(DeviceAddress start, DeviceAddress end);

  const SimMemory memory_;
  const DeviceInfo& info_;
  const std::uint64_t host_page_size_;
  Placement* const placement_;
  const common::VmmRules rules_;
  absl::btree_map<DeviceAddress, Reservation> reservations_;
  absl::btree_map<PhysicalHandle, Physical> physicals_;
  absl::btree_map<DeviceAddress, Mapping> mappings_;
  // Mapped ranges with access set: start -> end, disjoint and not touching.
  absl::btree_map<DeviceAddress, DeviceAddress> accessible_;
  PhysicalHandle next_physical_ = 1;
  std::uint64_t reserved_bytes_ = 0;
  std::uint64_t physical_bytes_ = 0;
  std::uint64_t mapped_bytes_ = 0;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_VIRTUAL_MEMORY_H_
