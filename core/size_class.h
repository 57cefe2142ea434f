// core/size_class.h: size arithmetic and the size classes that index the free
// bins.
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
