// tests/core/size_class_test.cc: size arithmetic and size classes.
#include "core/size_class.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace gpualloc::core {
namespace {

TEST(SizeClassTest, RoundUp) {
  EXPECT_EQ(RoundUp(1, 256), 256u);
  EXPECT_EQ(RoundUp(256, 256), 256u);
  EXPECT_EQ(RoundUp(257, 256), 512u);
  EXPECT_EQ(RoundUpToMultiple(3, 3 << 20), 3u << 20);
  EXPECT_EQ(RoundDownToMultiple((5u << 20) + 1, 2u << 20), 4u << 20);
}

TEST(SizeClassTest, EveryPowerOfTwoHasEightClasses) {
  for (int e = 4; e < 63; ++e) {
    const std::uint64_t p = std::uint64_t{1} << e;
    EXPECT_EQ(SizeClass(p), (e - 3) * 8) << e;
    EXPECT_EQ(SizeClass(2 * p - 1), (e - 3) * 8 + 7) << e;
  }
  EXPECT_EQ(SizeClass(UINT64_MAX), kNumSizeClasses - 1);
  EXPECT_EQ(SizeClass(1), 0);
}

TEST(SizeClassTest, LowerBoundsAreMonotoneAndConsistent) {
  for (int c = 0; c < kNumSizeClasses; ++c) {
    const std::uint64_t lo = SizeClassLowerBound(c);
    EXPECT_EQ(SizeClass(lo), c) << c;
    if (lo > 8) {
      EXPECT_EQ(SizeClass(lo - 1), c - 1) << c;
    }
    if (c + 1 < kNumSizeClasses) {
      EXPECT_LT(lo, SizeClassLowerBound(c + 1));
    }
  }
}

TEST(SizeClassTest, ClassWidthBoundsWaste) {
  // A class spans at most 1/8 of its lower bound (documented waste bound).
  for (int c = 8; c + 1 < kNumSizeClasses; ++c) {
    const std::uint64_t lo = SizeClassLowerBound(c);
    const std::uint64_t hi = SizeClassLowerBound(c + 1);
    EXPECT_LE(hi - lo, lo / 8) << c;
  }
}

}  // namespace
}  // namespace gpualloc::core
