// SPDX-License-Identifier: Apache-2.0
// gpualloc/arch/profiles.h: architecture profiles, the numbers the core tunes
// by.
//
// A profile is data: allocation granularity, plain-allocation alignment, page
// or fragment sizes, memory size and the allocator's minimum block size for one
// GPU architecture, and the modeled cost of its driver calls. The table lives
// in arch/profiles.cc with the public source of every number. Profiles
// are immutable and live for the whole program.
#ifndef GPUALLOC_ARCH_H_
#define GPUALLOC_ARCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpualloc {

// The GPU vendor, which decides the backend and the profile family.
enum class Vendor : std::uint8_t { kUnknown, kNvidia, kAmd };

absl::string_view VendorName(Vendor vendor);

// Modeled host time of one driver call, for the simulator's cost model:
// call_ns for the call plus per_mib_ns for each MiB it handles (pro rata).
struct CallCost {
  std::uint64_t call_ns = 0;
  std::uint64_t per_mib_ns = 0;
};

// The modeled costs that differ between vendors: the calls that allocate,
// map and free device memory, and those of completion counters. The names are
// CUDA's; AMD rows give HIP's equivalents (hipMalloc, hipMemCreate,
// hipMemMap, hipStreamWriteValue64...).
struct DriverCosts {
  CallCost allocate;          // cuMemAlloc (cudaMalloc)
  CallCost free;              // cuMemFree; the wait for the device is extra
  CallCost reserve_address;   // cuMemAddressReserve
  CallCost free_address;      // cuMemAddressFree
  CallCost create_physical;   // cuMemCreate
  CallCost release_physical;  // cuMemRelease
  CallCost map;               // cuMemMap
  CallCost unmap;             // cuMemUnmap
  CallCost set_access;        // cuMemSetAccess
  // Completion counters: a block of mapped page-locked host memory
  // (cuMemHostAlloc + cuMemHostGetDevicePointer; cuMemFreeHost, whose wait
  // for the device is extra), and the stream memory operations.
  CallCost create_counters;   // cuMemHostAlloc(DEVICEMAP)
  CallCost destroy_counters;  // cuMemFreeHost
  CallCost write_counter;     // cuStreamWriteValue64
  CallCost wait_counter;      // cuStreamWaitValue64
  absl::string_view sources;  // where the numbers come from
  // Where the completion counters' numbers come from.
  absl::string_view counter_sources;
};

struct ArchProfile {
  absl::string_view name;  // lookup key: "h100", "mi300x", "generic-amd", ...
  absl::string_view description;
  Vendor vendor = Vendor::kUnknown;
  // Architecture ids this profile describes ("sm_90", "gfx942"); empty for the
  // generic fallbacks.
  std::vector<absl::string_view> arch_ids;
  // Device memory as the driver reports it; 0 for generic profiles (taken from
  // the device).
  std::uint64_t memory_bytes = 0;
  std::uint64_t min_granularity = 0;
  std::uint64_t recommended_granularity = 0;
  std::uint64_t allocation_alignment = 0;  // of plain allocations
  std::vector<std::uint64_t> page_sizes;   // TLB pages / fragments, ascending
  // Every chunk the allocator hands out is a multiple of this (TF's 256 B).
  std::uint64_t min_block_size = 256;
  // Where large allocations prefer to start (big page / fragment boundary).
  std::uint64_t large_page_size = 0;
  absl::string_view sources;  // where the numbers come from
  DriverCosts costs;          // the simulator's cost model for this device
};

// Every profile, in a stable order.
absl::Span<const ArchProfile> AllArchProfiles();

// By name ("h200", "generic-nvidia"; case-insensitive). NotFound lists the
// names.
absl::StatusOr<const ArchProfile*> FindArchProfile(absl::string_view name);

// By what a device reports. Several products can share an architecture id
// (H100 and H200 are both sm_90): `memory_bytes`, when non-zero, picks the one
// whose memory size is closest. An unknown id falls back to the vendor's
// generic profile; an unknown vendor is NotFound.
absl::StatusOr<const ArchProfile*> FindArchProfile(
    Vendor vendor, absl::string_view arch_id, std::uint64_t memory_bytes = 0);

}  // namespace gpualloc

#endif  // GPUALLOC_ARCH_H_
