// SPDX-License-Identifier: Apache-2.0
// backends/sim/sim_util.h: small helpers the simulator's parts share.
#ifndef GPUALLOC_BACKENDS_SIM_SIM_UTIL_H_
#define GPUALLOC_BACKENDS_SIM_SIM_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "backends/layer.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// First fake address of device ordinal 0, and the size of each ordinal's
// window. Fake addresses past the canonical user range are fine: they are
// never dereferenced.
inline constexpr DeviceAddress kFakeBase = 0x7f00'0000'0000;
inline constexpr std::uint64_t kFakeWindow = std::uint64_t{1} << 48;
inline constexpr int kMaxOrdinal = 255;
// How many hazards (and access violations) the logs keep.
inline constexpr std::size_t kHazardLogSize = 64;

// REQUIRES: `alignment` is a power of two and the result does not overflow.
inline std::uint64_t AlignUp(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) & ~(alignment - 1);
}

inline int OpIndex(SimOp op) {
  const int index = static_cast<int>(op);
  return index >= 0 && index < kNumSimOps ? index : -1;
}

inline std::uint64_t SaturatingAdd(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

// One past the last byte of [address, address + bytes), clamped to the top
// of the address space.
inline DeviceAddress SaturatingEnd(DeviceAddress address, std::uint64_t bytes) {
  return SaturatingAdd(address, bytes);
}

// The entry of `map` (start -> something with a `size`) whose range holds
// `address`, or end().
template <typename Map>
typename Map::const_iterator Holding(const Map& map, DeviceAddress address) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) return map.end();
  --it;
  return address < it->first + it->second.size ? it : map.end();
}

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_SIM_UTIL_H_
