// SPDX-License-Identifier: Apache-2.0
// core/bfc/plan_block.cc: see plan_block.h.
#include "core/bfc/plan_block.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/bfc/size_class.h"

namespace gpualloc::core {

BlockPlan PlanBlock(absl::string_view mode, std::size_t bytes,
                    std::size_t alignment, std::uint64_t min_block_size,
                    std::uint64_t limit, const DeviceInfo& device,
                    bool whole_units) {
  BlockPlan plan;
  plan.facts = OutOfMemoryFacts{mode, bytes, bytes, bytes, limit};
  plan.align = std::max<std::uint64_t>(alignment, min_block_size);
  plan.unit = std::max<std::uint64_t>(device.allocation_alignment, 1);
  // Sizes beyond the limit are rejected before any arithmetic can overflow.
  if (bytes > limit) return plan;
  plan.facts.size = RoundUp(bytes == 0 ? 1 : bytes, min_block_size);
  // A block at a multiple of `unit` reaches the next multiple of `align`
  // within align - unit bytes.
  const std::uint64_t slack =
      plan.align > plan.unit ? plan.align - plan.unit : 0;
  plan.facts.device = plan.facts.size + slack;
  if (whole_units) plan.facts.device = RoundUp(plan.facts.device, plan.unit);
  return plan;
}

absl::StatusOr<DeviceAddress> HandOutAddress(const DeviceInfo& device,
                                             absl::string_view call,
                                             DeviceAddress base,
                                             const BlockPlan& plan) {
  const std::uint64_t assumed = std::min(plan.align, plan.unit);
  if (base == 0 || base % assumed != 0) {
    return absl::InternalError(absl::StrFormat(
        "backend %s %s returned %#x for %d bytes, not aligned to %d (its "
        "allocation alignment %d, the requested alignment %d)",
        device.backend, call, base, plan.facts.device, assumed, plan.unit,
        plan.align));
  }
  return RoundUp(base, plan.align);
}

}  // namespace gpualloc::core
