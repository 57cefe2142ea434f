// SPDX-License-Identifier: Apache-2.0
// core/options.cc: validation and defaults of allocator Options.
#include "core/options.h"

#include <bit>
#include <cmath>

#include "absl/strings/str_format.h"
#include "core/format_bytes.h"
#include "core/size_class.h"
#include "core/status_macros.h"

namespace gpualloc::core {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrFormat("Options.%s: %s", field, why));
}

}  // namespace

absl::StatusOr<ResolvedOptions> ResolveOptions(const Options& options,
                                               const DeviceInfo& device) {
  ResolvedOptions r;
  r.options = options;
  if (device.total_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %s reports 0 bytes of total memory", device.name));
  }

  if ((options.arch.empty() || options.arch == "auto") &&
      !device.profile.empty()) {
    auto found = FindArchProfile(device.profile);
    if (!found.ok()) {
      return absl::InternalError(absl::StrFormat(
          "backend %s matched device %s to profile \"%s\", which does not "
          "exist: %s",
          device.backend, device.name, device.profile,
          found.status().message()));
    }
    r.profile = *found;
  } else if (options.arch.empty() || options.arch == "auto") {
    auto found =
        FindArchProfile(device.vendor, device.arch_id, device.total_bytes);
    r.profile =
        found.ok() ? *found : nullptr;  // unknown vendor: the device's numbers
  } else {
    auto found = FindArchProfile(options.arch);
    if (!found.ok()) return Bad("arch", found.status().message());
    r.profile = *found;
  }

  r.min_block_size = options.min_block_size != 0 ? options.min_block_size
                     : r.profile != nullptr      ? r.profile->min_block_size
                                                 : 256;
  if (!std::has_single_bit(r.min_block_size) || r.min_block_size < 16) {
    return Bad(
        "min_block_size",
        absl::StrFormat("%d is not a power of two >= 16", r.min_block_size));
  }
  if (device.allocation_alignment != 0 &&
      device.allocation_alignment % r.min_block_size != 0 &&
      r.min_block_size % device.allocation_alignment != 0) {
    return Bad(
        "min_block_size",
        absl::StrFormat(
            "%d is incompatible with the device's allocation alignment %d",
            r.min_block_size, device.allocation_alignment));
  }

  std::uint64_t granularity = options.growth_granularity;
  if (granularity == 0) {
    granularity = device.recommended_granularity;
    if (r.profile != nullptr &&
        r.profile->recommended_granularity > granularity) {
      granularity = r.profile->recommended_granularity;
    }
  }
  if (granularity == 0) granularity = std::uint64_t{2} << 20;
  if (granularity % r.min_block_size != 0) {
    return Bad(
        "growth_granularity",
        absl::StrFormat("%d is not a multiple of the minimum block size %d",
                        granularity, r.min_block_size));
  }
  if (device.min_granularity != 0 &&
      granularity % device.min_granularity != 0) {
    return Bad(
        "growth_granularity",
        absl::StrFormat(
            "%d is not a multiple of the device's minimum granularity %d",
            granularity, device.min_granularity));
  }
  r.granularity = granularity;

  std::uint64_t limit;
  if (options.memory_limit != 0) {
    if (options.memory_limit > device.total_bytes) {
      return Bad("memory_limit",
                 absl::StrFormat(
                     "%d bytes exceeds the device's total memory of %d bytes",
                     options.memory_limit, device.total_bytes));
    }
    limit = options.memory_limit;
  } else {
    const double f = options.memory_fraction;
    if (!std::isfinite(f) || f <= 0 || f > 1) {
      return Bad("memory_fraction", absl::StrFormat("%g is not in (0, 1]", f));
    }
    limit =
        static_cast<std::uint64_t>(f * static_cast<double>(device.total_bytes));
    if (limit > device.total_bytes) limit = device.total_bytes;
  }
  r.limit = RoundDownToMultiple(limit, granularity);
  if (r.limit == 0) {
    return Bad(options.memory_limit != 0 ? "memory_limit" : "memory_fraction",
               absl::StrFormat("the limit of %d bytes is smaller than one "
                               "growth granule of %d bytes",
                               limit, granularity));
  }
  if (options.expandable == Tristate::kOn &&
      !device.capabilities.virtual_memory) {
    return Bad("expandable",
               absl::StrFormat("expandable regions were asked for, but backend "
                               "%s (%s) has no virtual memory support; use "
                               "expandable=auto (on where it works) or false",
                               device.backend, device.name));
  }
  if (options.expandable == Tristate::kOn &&
      options.mode != AllocatorMode::kBfc) {
    return Bad("expandable",
               absl::StrFormat("expandable regions belong to allocator=bfc; "
                               "allocator=%s manages no regions of its own",
                               AllocatorModeName(options.mode)));
  }
  r.expandable = options.mode == AllocatorMode::kBfc &&
                 options.expandable != Tristate::kOff &&
                 device.capabilities.virtual_memory;
  if (options.size_divisions != 0) {
    if (!std::has_single_bit(options.size_divisions) ||
        options.size_divisions < 2 || options.size_divisions > 64) {
      return Bad("size_divisions",
                 absl::StrFormat("%d is not 0 or a power of two from 2 to 64",
                                 options.size_divisions));
    }
    if (options.mode != AllocatorMode::kBfc) {
      return Bad("size_divisions",
                 absl::StrFormat("%d: size rounding belongs to "
                                 "allocator=bfc; allocator=%s has no chunks "
                                 "of its own to round (use 0)",
                                 options.size_divisions,
                                 AllocatorModeName(options.mode)));
    }
  }
  r.size_divisions = options.size_divisions;
  if (options.history > kMaxHistory) {
    return Bad("history", absl::StrFormat("%d entries is more than the "
                                          "largest history, %d entries",
                                          options.history, kMaxHistory));
  }
  if (options.history != 0 && options.mode != AllocatorMode::kBfc) {
    return Bad(
        "history",
        absl::StrFormat("%d: the allocation history belongs to "
                        "allocator=bfc; allocator=%s records none "
                        "(use 0)",
                        options.history, AllocatorModeName(options.mode)));
  }
  r.history = options.history;
  // The history sees every operation, so it has no front caches; the other
  // modes have no chunks to cache.
  r.front_cache = options.mode == AllocatorMode::kBfc && options.history == 0
                      ? options.front_cache
                      : 0;
  if (options.large_page_placement && r.profile != nullptr) {
    const std::uint64_t page = r.profile->large_page_size;
    if (std::has_single_bit(page) && page > r.min_block_size)
      r.large_page = page;
  }
  // Any alignment up to one granule can be honoured by padding inside a region.
  r.max_alignment = granularity;
  return r;
}

absl::StatusOr<std::uint64_t> NewLimit(std::uint64_t bytes, std::uint64_t unit,
                                       const DeviceInfo& device) {
  if (bytes > device.total_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SetLimit(%d bytes, %s): more than the device's total memory of %d "
        "bytes (%s) on %s",
        bytes, FormatBytes(bytes), device.total_bytes,
        FormatBytes(device.total_bytes), device.name));
  }
  const std::uint64_t limit = RoundDownToMultiple(bytes, unit);
  if (limit == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SetLimit(%d bytes): less than one growth granule of %d bytes (%s); "
        "the limit must hold at least one",
        bytes, unit, FormatBytes(unit)));
  }
  return limit;
}

}  // namespace gpualloc::core
