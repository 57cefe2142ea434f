// SPDX-License-Identifier: Apache-2.0
// core/options.h: checks allocator Options against a device and fills in
// defaults.
#ifndef GPUALLOC_CORE_OPTIONS_H_
#define GPUALLOC_CORE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/layer.h"
#include "gpualloc/allocator.h"
#include "gpualloc/arch.h"

namespace gpualloc::core {

// Options with every "take the default" resolved for one device.
struct ResolvedOptions {
  Options options;
  const ArchProfile* profile = nullptr;  // null when the device matches none
  std::uint64_t limit = 0;               // bytes; a multiple of granularity
  std::uint64_t granularity = 0;         // region sizes are multiples of this
  std::uint64_t min_block_size = 0;
  // Options.size_divisions, checked: 0 (off) or a power of two 2..64.
  std::uint32_t size_divisions = 0;
  // Options.history, checked: entries, 0 (off) to kMaxHistory, bfc only.
  std::uint64_t history = 0;
  // Options.front_cache for bfc mode without history, else 0 (no fronts).
  std::uint64_t front_cache = 0;
  std::uint64_t max_alignment = 0;  // largest alignment Allocate accepts
  // Expandable regions resolved for this device (Options.expandable).
  bool expandable = false;
  // Big-page placement threshold and alignment; 0 for none.
  std::uint64_t large_page = 0;
};

// InvalidArgument naming the offending field and value; the device is only
// read (info), never called.
absl::StatusOr<ResolvedOptions> ResolveOptions(const Options& options,
                                               const DeviceInfo& device);

// The limit Allocator::SetLimit(bytes) asks for, rounded down to `unit`:
// InvalidArgument when that leaves nothing or exceeds the device's total
// memory.
absl::StatusOr<std::uint64_t> NewLimit(std::uint64_t bytes, std::uint64_t unit,
                                       const DeviceInfo& device);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_OPTIONS_H_
