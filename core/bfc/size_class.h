// SPDX-License-Identifier: Apache-2.0
// core/bfc/size_class.h: size arithmetic and the size classes that index the
// free bins.
//
// Size classes split every power of two into kSubBins equal steps (TLSF-style
// two-level index): class(s) = 8 * (floor(log2 s) - 3) + the next 3 bits of s.
// A class therefore spans at most 1/8 of its lower bound, so the smallest chunk
// of the first non-empty class above a request wastes at most 12.5% before
// splitting; the free bins refine the search inside a class by exact size.
#ifndef GPUALLOC_CORE_SIZE_CLASS_H_
#define GPUALLOC_CORE_SIZE_CLASS_H_

#include <bit>
#include <cstdint>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "core/layer.h"

namespace gpualloc::core {

inline constexpr int kSubBinsLog2 = 3;
inline constexpr int kSubBins = 1 << kSubBinsLog2;
// Smallest size the classes distinguish; smaller sizes share class 0.
inline constexpr std::uint64_t kMinClassedSize = kSubBins;
inline constexpr int kNumSizeClasses = (64 - kSubBinsLog2) * kSubBins;

// REQUIRES: `alignment` is a power of two and the result does not overflow.
constexpr std::uint64_t RoundUp(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) & ~(alignment - 1);
}
// For any non-zero multiple, not only powers of two.
constexpr std::uint64_t RoundUpToMultiple(std::uint64_t x, std::uint64_t m) {
  return (x + m - 1) / m * m;
}
constexpr std::uint64_t RoundDownToMultiple(std::uint64_t x, std::uint64_t m) {
  return x / m * m;
}

// PyTorch's roundup_power2_divisions (roundup_power2_next_division in its
// CUDA caching allocator): a size already rounded to `min_block`, when
// `divisions` > 1, size > min_block * divisions and size is not a power of
// two, rounds up to the next multiple of floor_power_of_two(size) /
// divisions: each power-of-two range is cut in `divisions` equal steps. A step
// that would be 0 gives the next power of two. The result stays a multiple of
// min_block (the step is at least min_block once size > min_block *
// divisions). REQUIRES: `divisions` is a power of two (or 0 or 1: none);
// the result does not overflow.
constexpr std::uint64_t RoundUpToDivision(std::uint64_t size,
                                          std::uint64_t divisions,
                                          std::uint64_t min_block) {
  if (divisions <= 1 || size <= min_block * divisions ||
      std::has_single_bit(size)) {
    return size;
  }
  const std::uint64_t floor = std::bit_floor(size);
  const std::uint64_t step = floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return floor << 1;
  return RoundUp(size, step);
}

// The chunk size of a request of `bytes` (0 counts as 1): rounded up to
// `min_block`, then to `divisions` (RoundUpToDivision) when that is not 0.
// Off, it costs one predicted branch.
ABSL_ATTRIBUTE_ALWAYS_INLINE constexpr std::uint64_t ChunkSize(
    std::uint64_t bytes, std::uint64_t min_block, std::uint32_t divisions) {
  const std::uint64_t size = RoundUp(bytes == 0 ? 1 : bytes, min_block);
  if (ABSL_PREDICT_TRUE(divisions == 0)) return size;
  return RoundUpToDivision(size, divisions, min_block);
}

// The size class holding chunks of `size` bytes.
constexpr int SizeClass(std::uint64_t size) {
  if (size < kMinClassedSize) return 0;
  const int exponent = 63 - std::countl_zero(size);
  const int sub =
      static_cast<int>(size >> (exponent - kSubBinsLog2)) & (kSubBins - 1);
  return (exponent - kSubBinsLog2) * kSubBins + sub;
}

// The smallest size in class `size_class`.
constexpr std::uint64_t SizeClassLowerBound(int size_class) {
  const int exponent = size_class / kSubBins + kSubBinsLog2;
  const std::uint64_t sub = static_cast<std::uint64_t>(size_class % kSubBins);
  return (kSubBins + sub) << (exponent - kSubBinsLog2);
}

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_SIZE_CLASS_H_
