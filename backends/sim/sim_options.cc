// SPDX-License-Identifier: Apache-2.0
// backends/sim/sim_options.cc: SimOptions -> DeviceInfo, and its checks.
#include "backends/sim/sim_options.h"

#include <unistd.h>

#include <bit>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/sim/sim_util.h"

namespace gpualloc::sim {

absl::Status InvalidField(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("SimOptions.", field, ": ", problem));
}

std::uint64_t HostPageSize() {
  return static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

absl::StatusOr<DeviceInfo> MakeDeviceInfo(const SimOptions& options,
                                          const ArchProfile& profile) {
  DeviceInfo info;
  info.backend = "sim";
  info.vendor = profile.vendor;
  info.name =
      absl::StrCat("simulated ", profile.description, " (", profile.name, ")");
  info.arch_id = profile.arch_ids.empty() ? std::string()
                                          : std::string(profile.arch_ids[0]);
  info.profile = std::string(profile.name);
  info.profile_reason =
      absl::StrCat("the simulator models profile ", profile.name);
  info.ordinal = options.ordinal;
  info.total_bytes =
      options.total_bytes != 0 ? options.total_bytes : profile.memory_bytes;
  info.min_granularity = options.min_granularity != 0 ? options.min_granularity
                                                      : profile.min_granularity;
  info.recommended_granularity = options.recommended_granularity != 0
                                     ? options.recommended_granularity
                                     : profile.recommended_granularity;
  info.allocation_alignment = options.allocation_alignment != 0
                                  ? options.allocation_alignment
                                  : profile.allocation_alignment;
  info.page_sizes = profile.page_sizes;
  info.capabilities.virtual_memory = options.virtual_memory;
  info.capabilities.streams = options.streams;
  // A stream-ordered pool allocates and frees on streams: without streams
  // there is no pool either.
  info.capabilities.stream_ordered_pools =
      options.streams && options.stream_ordered_pools;
  // Graph capture records the work of streams: it needs them too.
  info.capabilities.graph_capture = options.streams && options.graph_capture;
  info.capabilities.host_accessible = options.memory == SimMemory::kHostBacked;
  // Fake memory has no bytes to copy.
  info.capabilities.host_copy = options.memory == SimMemory::kHostBacked;
  info.capabilities.host_memory = options.host_memory;
  info.capabilities.ipc_handles = options.ipc_handles;
  // Exported memory is physical memory mapped through virtual memory.
  info.capabilities.shareable_handles =
      options.virtual_memory && options.shareable_handles;
  // Counters are written and waited for by streams.
  info.capabilities.completion_counters =
      options.streams && options.completion_counters;
  info.driver_version = "gpualloc-sim";

  if (options.memory != SimMemory::kFake &&
      options.memory != SimMemory::kHostBacked) {
    return InvalidField("memory", "neither kFake nor kHostBacked");
  }
  if (options.clock != SimClock::kManual &&
      options.clock != SimClock::kModeled) {
    return InvalidField("clock", "neither kManual nor kModeled");
  }
  if (options.ordinal < 0 || options.ordinal > kMaxOrdinal) {
    return InvalidField(
        "ordinal",
        absl::StrCat(options.ordinal, " is outside [0, ", kMaxOrdinal, "]"));
  }
  if (!std::has_single_bit(info.min_granularity)) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity, " is not a power of two"));
  }
  if (!std::has_single_bit(info.recommended_granularity)) {
    return InvalidField(
        "recommended_granularity",
        absl::StrCat(info.recommended_granularity, " is not a power of two"));
  }
  if (info.min_granularity > info.recommended_granularity) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity,
                     " exceeds SimOptions.recommended_granularity (",
                     info.recommended_granularity, ")"));
  }
  // Host-backed virtual memory maps host pages at granule boundaries.
  const std::uint64_t host_page = HostPageSize();
  if (options.memory == SimMemory::kHostBacked && options.virtual_memory &&
      info.min_granularity % host_page != 0) {
    return InvalidField(
        "min_granularity",
        absl::StrCat(info.min_granularity,
                     " is not a multiple of the host page size (", host_page,
                     "), which host-backed virtual memory needs (or set "
                     "SimOptions.virtual_memory = false)"));
  }
  if (!std::has_single_bit(info.allocation_alignment)) {
    return InvalidField(
        "allocation_alignment",
        absl::StrCat(info.allocation_alignment, " is not a power of two"));
  }
  if (info.total_bytes == 0) {
    return InvalidField(
        "total_bytes",
        absl::StrCat("must be given: profile ", profile.name,
                     " has no memory size (generic profiles take it from "
                     "the device)"));
  }
  // Real devices report totals that are not granule multiples (an H200 shows
  // 143771 MiB, an odd number of 2 MiB granules), so the total only has to be
  // a whole number of plain-allocation units: then the device can be filled
  // exactly and capacity checks cannot overflow.
  if (info.total_bytes % info.allocation_alignment != 0) {
    return InvalidField(
        "total_bytes",
        absl::StrCat(info.total_bytes,
                     " is not a multiple of the allocation alignment (",
                     info.allocation_alignment, ")"));
  }

  return info;
}

}  // namespace gpualloc::sim
