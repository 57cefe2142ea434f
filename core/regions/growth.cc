// SPDX-License-Identifier: Apache-2.0
// core/regions/growth.cc: region sizes to ask the backend for.
#include "core/regions/growth.h"

#include <algorithm>

#include "core/bfc/size_class.h"

namespace gpualloc::core {

std::vector<std::uint64_t> GrowthCandidates(const GrowthRequest& r) {
  std::vector<std::uint64_t> sizes;
  const std::uint64_t headroom =
      RoundDownToMultiple(r.limit - r.reserved, r.granularity);
  if (r.needed == 0 || r.needed > headroom) return sizes;
  const std::uint64_t smallest = RoundUpToMultiple(r.needed, r.granularity);
  if (r.policy == GrowthPolicy::kDoubling) {
    std::uint64_t size = std::min(
        headroom, std::max(smallest, RoundUpToMultiple(r.next_region_size,
                                                       r.granularity)));
    while (size > smallest) {
      sizes.push_back(size);
      size = RoundUpToMultiple(size / 2, r.granularity);
    }
  }
  sizes.push_back(smallest);
  return sizes;
}

std::uint64_t GiveBackAbove(std::uint64_t limit, double gc_threshold) {
  if (!(gc_threshold > 0 && gc_threshold < 1)) return limit;
  // As PyTorch computes its threshold: T x the allowed memory, truncated.
  return static_cast<std::uint64_t>(gc_threshold * static_cast<double>(limit));
}

std::uint64_t NextRegionSize(std::uint64_t granted,
                             std::uint64_t current_next) {
  const std::uint64_t doubled =
      granted > UINT64_MAX / 2 ? UINT64_MAX : granted * 2;
  return std::max(current_next, doubled);
}

}  // namespace gpualloc::core
