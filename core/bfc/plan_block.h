// SPDX-License-Identifier: Apache-2.0
// core/bfc/plan_block.h: the device block behind one Allocate of the modes that
// hand every request to the device (platform and async), and the pointer handed
// out inside it.
#ifndef GPUALLOC_CORE_PLAN_BLOCK_H_
#define GPUALLOC_CORE_PLAN_BLOCK_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/layer.h"
#include "core/report/oom_message.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

// The device's share of one Allocate: what an out-of-memory report states
// (the sizes), the alignment handed out and the device's own alignment.
struct BlockPlan {
  OutOfMemoryFacts facts;   // mode, bytes, size, device (asked) and limit
  std::uint64_t align = 0;  // handed-out alignment, >= the minimum block
  std::uint64_t unit = 0;   // the device's allocation alignment, >= 1
};

// Plans Allocate(bytes, alignment) of a mode that asks the device for each
// block. The size is the request rounded to the minimum block (a 0-byte
// request gets one, so its pointer is unique). When `align` is stricter than
// the device's `unit`, the block is padded by align - unit so that an aligned
// address fits; `whole_units` rounds the device size up to units too (plain
// allocations, which the device accounts in units; a pool rounds its own).
// A request above the limit is left unrounded (no overflow): the caller
// rejects every plan whose facts.device exceeds the limit.
// REQUIRES: CheckAlignment(bytes, alignment, ...) passed.
BlockPlan PlanBlock(absl::string_view mode, std::size_t bytes,
                    std::size_t alignment, std::uint64_t min_block_size,
                    std::uint64_t limit, const DeviceInfo& device,
                    bool whole_units);

// The pointer to hand out for the block `call` returned at `base` under
// `plan`: base rounded up to plan.align. Internal, naming the backend, when
// base is 0 or not on the alignment the padding assumed; the caller then
// returns the block.
absl::StatusOr<DeviceAddress> HandOutAddress(const DeviceInfo& device,
                                             absl::string_view call,
                                             DeviceAddress base,
                                             const BlockPlan& plan);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_PLAN_BLOCK_H_
