// SPDX-License-Identifier: Apache-2.0
// core/regions/growth.h: how much device memory to ask for when the allocator
// must grow.
//
// Pure arithmetic, no device calls: the facade asks the backend for each size
// in turn until one is granted ("backing off when the backend refuses").
#ifndef GPUALLOC_CORE_GROWTH_H_
#define GPUALLOC_CORE_GROWTH_H_

#include <cstdint>
#include <vector>

#include "core/layer.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::core {

struct GrowthRequest {
  std::uint64_t needed = 0;       // bytes the new region must hold
  std::uint64_t reserved = 0;     // bytes the allocator holds now
  std::uint64_t limit = 0;        // bytes it may hold at most
  std::uint64_t granularity = 0;  // region sizes are multiples of this
  GrowthPolicy policy = GrowthPolicy::kExact;
  // kDoubling: the size the next region should have if the request is smaller.
  std::uint64_t next_region_size = 0;
};

// Region sizes to try, largest first: each a multiple of the granularity, at
// least `needed` and within `limit - reserved`. Empty when even the smallest
// region that holds `needed` would pass the limit.
// REQUIRES: granularity > 0; reserved <= limit.
std::vector<std::uint64_t> GrowthCandidates(const GrowthRequest& request);

// The bytes reserved past which a growth first gives free memory back
// (Options::trim_before_growth): the limit, or with a gc_threshold T in
// (0, 1) (PyTorch's garbage_collection_threshold) T x the limit.
std::uint64_t GiveBackAbove(std::uint64_t limit, double gc_threshold);

// kDoubling's next_region_size after a region of `granted` bytes was added.
std::uint64_t NextRegionSize(std::uint64_t granted, std::uint64_t current_next);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_GROWTH_H_
