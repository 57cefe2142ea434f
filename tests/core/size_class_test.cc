// SPDX-License-Identifier: Apache-2.0
// tests/core/size_class_test.cc: size arithmetic and size classes.
#include "core/bfc/size_class.h"

#include <bit>
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

// PyTorch's roundup_power2_divisions, values worked out by hand from its
// formula: floor_power_of_two(size) / N steps above min_block * N.
struct DivisionCase {
  std::uint64_t size;  // already a multiple of min_block
  std::uint64_t divisions;
  std::uint64_t min_block;
  std::uint64_t rounded;
};

TEST(SizeClassTest, RoundUpToDivisionIsPytorchs) {
  constexpr std::uint64_t kKiB = 1024;
  constexpr std::uint64_t kMiB = kKiB * 1024;
  constexpr std::uint64_t kGiB = kMiB * 1024;
  const DivisionCase cases[] = {
      // N=4: quarters of each power of two.
      {1200 * kKiB, 4, 512, 1280 * kKiB},  // 1 MiB + 176 KiB -> 1.25 MiB
      {5 * kMiB + 512, 4, 512, 6 * kMiB},  // 5 MiB + 1 rounds to 5 MiB + 512
      {6 * kMiB, 4, 512, 6 * kMiB},        // already a quarter step
      {7 * kMiB, 4, 512, 7 * kMiB},
      {7 * kMiB + 512, 4, 512, 8 * kMiB},
      {4 * kMiB, 4, 512, 4 * kMiB},  // a power of two stays
      {4 * kMiB + 512, 4, 512, 5 * kMiB},
      {kGiB + 512, 4, 512, kGiB + kGiB / 4},  // 1 GiB + 1 -> 1.25 GiB
      {3 * kGiB + kMiB, 4, 512, 3 * kGiB + kGiB / 2},
      // At most min_block * N: only the min_block rounding.
      {2048, 4, 512, 2048},
      {1536, 4, 512, 1536},
      // Just above: steps of 512 between 2 KiB and 4 KiB.
      {2560, 4, 512, 2560},
      {3584, 4, 512, 3584},
      // min_block 256 (the profiles'): 1280 > 1024, steps of 256.
      {1280, 4, 256, 1280},
      {1536 + 256, 4, 256, 1792},
      {2304, 4, 256, 2560},
      // N=2: halves.
      {3 * kMiB + 512, 2, 512, 4 * kMiB},
      {3 * kMiB, 2, 512, 3 * kMiB},
      {1536 * kKiB, 2, 512, 1536 * kKiB},
      {1537 * kKiB, 2, 512, 2 * kMiB},
      // N=8: eighths (1200 KiB between 1152 and 1280 KiB).
      {1200 * kKiB, 8, 512, 1280 * kKiB},
      {1152 * kKiB, 8, 512, 1152 * kKiB},
      {9 * kMiB, 8, 512, 9 * kMiB},
      {9 * kMiB + 512, 8, 512, 10 * kMiB},
      // N=16 and N=64.
      {40448, 16, 512, 40960},  // 32 KiB + 7.5 KiB, steps of 2 KiB
      {100 * kKiB, 64, 512, 100 * kKiB},
      {100 * kKiB + 512, 64, 512, 101 * kKiB},
      // Just above 512 * 64 = 32 KiB: steps of 512, nothing to round.
      {32 * kKiB + 512, 64, 512, 32 * kKiB + 512},
      {64 * kKiB + 512, 64, 512, 65 * kKiB},
      // Off: 0 and 1 leave the size.
      {1200 * kKiB, 0, 512, 1200 * kKiB},
      {1200 * kKiB, 1, 512, 1200 * kKiB},
      // A step of 0 (possible only below min_block * N, here min_block 0):
      // the next power of two.
      {5, 8, 0, 8},
  };
  for (const DivisionCase& t : cases) {
    EXPECT_EQ(RoundUpToDivision(t.size, t.divisions, t.min_block), t.rounded)
        << t.size << " N=" << t.divisions << " min_block=" << t.min_block;
  }
  static_assert(RoundUpToDivision(1200 * kKiB, 4, 512) == 1280 * kKiB);
}

// PyTorch's round_size with divisions, transcribed: it rounds the raw size,
// gpualloc rounds the size already rounded to min_block; the result is the
// same for every size.
std::uint64_t PytorchRoundSize(std::uint64_t size, std::uint64_t divisions) {
  constexpr std::uint64_t kMinBlockSize = 512;
  if (size < kMinBlockSize) return kMinBlockSize;
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    if (std::has_single_bit(size)) return size;
    const std::uint64_t power2_floor = std::bit_floor(size);
    const std::uint64_t power2_division =
        power2_floor >> (63 - std::countl_zero(divisions));
    if (power2_division == 0) return power2_floor << 1;
    const std::uint64_t round_size_floor = size & ~(power2_division - 1);
    return round_size_floor == size ? size : round_size_floor + power2_division;
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

TEST(SizeClassTest, RoundUpToDivisionAgreesWithPytorchOnRawSizes) {
  for (std::uint64_t n : {2, 4, 8, 16, 32, 64}) {
    for (std::uint64_t size = 1; size < (1u << 18); size += 37) {
      EXPECT_EQ(RoundUpToDivision(RoundUp(size, 512), n, 512),
                PytorchRoundSize(size, n))
          << size << " N=" << n;
    }
    for (int e = 10; e < 40; ++e) {
      const std::uint64_t p = std::uint64_t{1} << e;
      for (std::uint64_t size : {p - 1, p, p + 1, p + p / 3, 2 * p - 1}) {
        EXPECT_EQ(RoundUpToDivision(RoundUp(size, 512), n, 512),
                  PytorchRoundSize(size, n))
            << size << " N=" << n;
      }
    }
  }
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
