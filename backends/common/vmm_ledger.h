// SPDX-License-Identifier: Apache-2.0
// backends/common/vmm_ledger.h: the Backend's virtual-memory rules
// (gpualloc/core/backend.h), written once for every backend: the size, address
// and alignment rules (VmmRules, which the simulator checks too), and the
// host-side record of address reservations, physical handles and mappings
// that checks the rest before any driver call (VmmLedger, which the CUDA and
// HIP backends keep).
//
// A driver answers a broken rule with an invalid-value error at best and
// undefined behaviour at worst (unmapping part of a mapping, freeing a
// reservation that still has memory mapped in it), so a backend asks the
// ledger first and calls the driver only when the ledger says yes; after the
// call succeeds it records the change. Nothing here calls a vendor: CUDA's
// cuMem* and HIP's hipMem* calls have the same rules.
//
// Invariants: (1) reservations do not overlap; (2) every mapping lies inside
// one reservation and mappings do not overlap; (3) every size and address is
// a multiple of the granularity.
//
// Not thread-safe: the backend holds its lock across check, call and record.
#ifndef GPUALLOC_BACKENDS_COMMON_VMM_LEDGER_H_
#define GPUALLOC_BACKENDS_COMMON_VMM_LEDGER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::common {

// The rules on sizes, addresses and alignments. Each Check* answers
// InvalidArgument "`call`: the rule broken".
class VmmRules {
 public:
  // REQUIRES: `granularity` is a power of two (the device's minimum).
  explicit VmmRules(std::uint64_t granularity) : granularity_(granularity) {}

  // A positive multiple of the granularity.
  absl::Status CheckSize(absl::string_view call, std::uint64_t bytes) const;
  // Size and address in granules, no wrap-around.
  absl::Status CheckRange(absl::string_view call, DeviceAddress address,
                          std::uint64_t bytes) const;
  // The size, and an alignment of 0 (the granularity) or a power of two that
  // is a multiple of the granularity. Answers the alignment to reserve with.
  absl::StatusOr<std::uint64_t> CheckReserve(absl::string_view call,
                                             std::uint64_t bytes,
                                             std::uint64_t alignment) const;

  std::uint64_t granularity() const { return granularity_; }

 private:
  const std::uint64_t granularity_;
};

class VmmLedger {
 public:
  struct Mapping {
    DeviceAddress address = 0;
    std::uint64_t bytes = 0;
    PhysicalHandle handle = 0;
  };
  struct Reservation {
    DeviceAddress address = 0;
    std::uint64_t bytes = 0;
  };

  // REQUIRES: `granularity` is a power of two (the device's minimum).
  explicit VmmLedger(std::uint64_t granularity) : rules_(granularity) {}

  // Each Check* answers InvalidArgument naming the call and the rule broken,
  // and changes nothing.

  // The alignment to reserve with (0 becomes the granularity).
  absl::StatusOr<std::uint64_t> CheckReserve(std::uint64_t bytes,
                                             std::uint64_t alignment) const;
  void AddReservation(DeviceAddress address, std::uint64_t bytes);
  absl::Status CheckFreeAddress(DeviceAddress address,
                                std::uint64_t bytes) const;
  void RemoveReservation(DeviceAddress address);

  absl::Status CheckCreate(std::uint64_t bytes) const;
  // The size rule for ImportPhysical (the handle is then added like a
  // created one).
  absl::Status CheckImport(std::uint64_t bytes) const;
  void AddHandle(PhysicalHandle handle, std::uint64_t bytes);
  absl::Status CheckRelease(PhysicalHandle handle) const;
  void RemoveHandle(PhysicalHandle handle);

  absl::Status CheckMap(DeviceAddress address, std::uint64_t bytes,
                        PhysicalHandle handle) const;
  void AddMapping(DeviceAddress address, std::uint64_t bytes,
                  PhysicalHandle handle);
  // The whole mappings [address, address + bytes) consists of, in address
  // order.
  absl::StatusOr<std::vector<Mapping>> CheckUnmap(DeviceAddress address,
                                                  std::uint64_t bytes) const;
  void RemoveMapping(DeviceAddress address);
  absl::Status CheckSetAccess(DeviceAddress address, std::uint64_t bytes) const;
  // The mappings that overlap [address, address + bytes), in address order.
  std::vector<Mapping> MappingsIn(DeviceAddress address,
                                  std::uint64_t bytes) const;

  // What is still recorded (for a destructor that cleans up).
  std::vector<Mapping> mappings() const;
  std::vector<PhysicalHandle> handles() const;
  std::vector<Reservation> reservations() const;

  std::uint64_t granularity() const { return rules_.granularity(); }

 private:
  // The reservation that holds all of [address, address + bytes), or null.
  const Reservation* Holder(DeviceAddress address, std::uint64_t bytes) const;
  // Whether mappings cover [address, address + bytes) without a hole.
  bool FullyMapped(DeviceAddress address, std::uint64_t bytes) const;

  const VmmRules rules_;
  absl::btree_map<DeviceAddress, Reservation> reservations_;
  absl::btree_map<DeviceAddress, Mapping> mappings_;
  // Live handles (created, not released) and their sizes.
  absl::flat_hash_map<PhysicalHandle, std::uint64_t> handles_;
};

}  // namespace gpualloc::common

#endif  // GPUALLOC_BACKENDS_COMMON_VMM_LEDGER_H_
