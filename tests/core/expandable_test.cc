// SPDX-License-Identifier: Apache-2.0
// tests/core/expandable_test.cc: expandable regions in the core: the growth
// planner, the BFC core's region surgery (JoinRegions, CarveFree) and
// big-page placement, each checked with the invariant validator.
#include "core/regions/expandable.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "core/bfc/bfc.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

using testing::kMiB;

constexpr DeviceAddress kSpace = 0x100000000;
constexpr std::uint64_t kUnit = 2 * kMiB;
constexpr std::uint64_t kSpaceSize = 64 * kUnit;

TEST(PlanGrowthTest, EmptySpaceMapsAtTheBase) {
  auto plan = PlanGrowth({}, kSpace, kSpaceSize, 3 * kMiB, kUnit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, kSpace);
  EXPECT_EQ(plan->bytes, 2 * kUnit);
  EXPECT_EQ(plan->room_after, kSpaceSize - 2 * kUnit);  // may map more
}

TEST(PlanGrowthTest, FreeTailCountsTowardsTheRequest) {
  // 4 units mapped, the last 1.5 units free: 3 MiB more needs 1 unit only.
  std::vector<Extent> extents = {{kSpace, 4 * kUnit, 0, 3 * kMiB}};
  auto plan = PlanGrowth(extents, kSpace, kSpaceSize, 4 * kMiB, kUnit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, kSpace + 4 * kUnit);
  EXPECT_EQ(plan->bytes, kUnit);
}

TEST(PlanGrowthTest, FillsAHoleWhenThatMapsLess) {
  // [0,4) mapped with 1 MiB free at its end, hole [4,6), [6,10) mapped with
  // 1 MiB free at its start: bridging the hole (2 units) gives 6 MiB, while
  // the end of the space would need 3 units.
  std::vector<Extent> extents = {{kSpace, 4 * kUnit, 0, kMiB},
                                 {kSpace + 6 * kUnit, 4 * kUnit, kMiB, 0}};
  auto plan = PlanGrowth(extents, kSpace, kSpaceSize, 6 * kMiB, kUnit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, kSpace + 4 * kUnit);
  EXPECT_EQ(plan->bytes, 2 * kUnit);
  EXPECT_EQ(plan->room_after, 0u);  // the hole is filled
}

TEST(PlanGrowthTest, PartOfAHoleNextToTheFreeSide) {
  // Hole [4,10) with 1 MiB free after it: 3 MiB needs 1 unit at the hole's
  // end, touching the free head.
  std::vector<Extent> extents = {{kSpace, 4 * kUnit, 0, 0},
                                 {kSpace + 10 * kUnit, 2 * kUnit, kMiB, 0}};
  auto plan = PlanGrowth(extents, kSpace, kSpaceSize, 3 * kMiB, kUnit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, kSpace + 9 * kUnit);
  EXPECT_EQ(plan->bytes, kUnit);
  // Mapping more would cut the plan off from the free head it counts on.
  EXPECT_EQ(plan->room_after, 0u);
}

TEST(PlanGrowthTest, TiesGoToTheLowestAddress) {
  std::vector<Extent> extents = {{kSpace + 2 * kUnit, 2 * kUnit, 0, 0}};
  auto plan = PlanGrowth(extents, kSpace, kSpaceSize, kUnit, kUnit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, kSpace);
  EXPECT_EQ(plan->bytes, kUnit);
}

TEST(PlanGrowthTest, NothingWhenNoHoleIsLargeEnough) {
  std::vector<Extent> extents = {{kSpace, kSpaceSize - kUnit, 0, 0}};
  EXPECT_FALSE(
      PlanGrowth(extents, kSpace, kSpaceSize, 3 * kMiB, kUnit).has_value());
  auto plan = PlanGrowth(extents, kSpace, kSpaceSize, kUnit, kUnit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, kSpace + kSpaceSize - kUnit);
}

class RegionSurgeryTest : public ::testing::Test {
 protected:
  void TearDown() override { Check(); }
  void Check() {
    absl::Status s = core_.Validate();
    EXPECT_TRUE(s.ok()) << s;
  }
  DeviceAddress Alloc(std::uint64_t size) {
    auto a = core_.Allocate(size, size, 256, 0);
    EXPECT_TRUE(a.has_value()) << size;
    Check();
    return a.value_or(0);
  }
  BfcCore core_{BfcConfig{256, 0, 0}};
};

TEST_F(RegionSurgeryTest, JoinMergesTheFreeChunksAtTheSeam) {
  const RegionId a = core_.AddRegion(kSpace, kUnit);
  const DeviceAddress x = Alloc(kMiB);  // [0, 1 MiB) used, 1 MiB free
  const RegionId b = core_.AddRegion(kSpace + kUnit, kUnit);
  EXPECT_EQ(core_.num_regions(), 2u);
  EXPECT_EQ(core_.JoinRegions(a, b), a);
  Check();
  EXPECT_EQ(core_.num_regions(), 1u);
  EXPECT_EQ(core_.region_size(a), 2 * kUnit);
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_EQ(core_.LargestFreeBlock(), 3 * kMiB);
  // 3 MiB now fits across the old seam.
  const DeviceAddress y = Alloc(3 * kMiB);
  EXPECT_EQ(y, kSpace + kMiB);
  EXPECT_TRUE(core_.Deallocate(x, 0).ok());
  EXPECT_TRUE(core_.Deallocate(y, 0).ok());
  EXPECT_TRUE(core_.IsRegionFree(a));
}

TEST_F(RegionSurgeryTest, JoinKeepsInUseChunksOnBothSides) {
  const RegionId a = core_.AddRegion(kSpace, kUnit);
  const DeviceAddress x = Alloc(kUnit);
  const RegionId b = core_.AddRegion(kSpace + kUnit, kUnit);
  const DeviceAddress y = Alloc(kUnit);
  EXPECT_EQ(y, kSpace + kUnit);
  core_.JoinRegions(a, b);
  Check();
  EXPECT_EQ(core_.num_free_chunks(), 0u);
  EXPECT_TRUE(core_.Deallocate(x, 0).ok());
  EXPECT_TRUE(core_.Deallocate(y, 0).ok());  // merges across the old seam
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_TRUE(core_.IsRegionFree(a));
}

TEST_F(RegionSurgeryTest, CarveSplitsTheRegionAroundTheHole) {
  core_.AddRegion(kSpace, 8 * kUnit);
  const DeviceAddress x = Alloc(kMiB);  // [0, 1 MiB)
  const DeviceAddress big = Alloc(10 * kMiB);
  const DeviceAddress z = Alloc(kMiB);  // after the big one
  EXPECT_TRUE(core_.Deallocate(big, 0).ok());
  // Free [1 MiB, 11 MiB): carve the whole units inside it, [2, 10) MiB.
  core_.CarveFree(kSpace + kUnit, 4 * kUnit);
  Check();
  EXPECT_EQ(core_.num_regions(), 2u);
  EXPECT_EQ(core_.counters().bytes_reserved, 4 * kUnit);
  EXPECT_EQ(core_.region_size(*core_.RegionAt(kSpace)), kUnit);
  const auto after = core_.RegionAt(kSpace + 5 * kUnit);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(core_.region_base(*after), kSpace + 5 * kUnit);
  EXPECT_EQ(core_.region_size(*after), 3 * kUnit);
  EXPECT_FALSE(core_.RegionAt(kSpace + 2 * kUnit).has_value());
  // The pieces left on both sides are free and usable; z is untouched.
  EXPECT_EQ(core_.AllocatedSize(z), kMiB);
  EXPECT_TRUE(core_.Deallocate(x, 0).ok());
  EXPECT_TRUE(core_.Deallocate(z, 0).ok());
  Check();
  EXPECT_EQ(core_.num_free_chunks(), 2u);
}

TEST_F(RegionSurgeryTest, CarvingAWholeFreeRegionRemovesIt) {
  core_.AddRegion(kSpace, 2 * kUnit);
  core_.CarveFree(kSpace, 2 * kUnit);
  Check();
  EXPECT_EQ(core_.num_regions(), 0u);
  EXPECT_EQ(core_.counters().bytes_reserved, 0u);
  EXPECT_EQ(core_.counters().peak_bytes_reserved, 2 * kUnit);
}

TEST_F(RegionSurgeryTest, CarvingTheFrontOrTheEndKeepsOneRegion) {
  core_.AddRegion(kSpace, 4 * kUnit);
  const DeviceAddress x = Alloc(kUnit);        // unit 0 used, units 1-3 free
  core_.CarveFree(kSpace + 3 * kUnit, kUnit);  // the end
  Check();
  EXPECT_EQ(core_.num_regions(), 1u);
  EXPECT_EQ(core_.region_size(*core_.RegionAt(kSpace)), 3 * kUnit);
  EXPECT_TRUE(core_.Deallocate(x, 0).ok());
  core_.CarveFree(kSpace, kUnit);  // the front
  Check();
  EXPECT_EQ(core_.num_regions(), 1u);
  const auto r = core_.RegionAt(kSpace + kUnit);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(core_.region_base(*r), kSpace + kUnit);
  EXPECT_EQ(core_.region_size(*r), 2 * kUnit);
  EXPECT_TRUE(core_.IsRegionFree(*r));
}

TEST_F(RegionSurgeryTest, CarveThenJoinRestoresOneRegion) {
  core_.AddRegion(kSpace, 6 * kUnit);
  const DeviceAddress x = Alloc(kMiB);
  core_.CarveFree(kSpace + 2 * kUnit, 2 * kUnit);
  Check();
  ASSERT_EQ(core_.num_regions(), 2u);
  const RegionId hole = core_.AddRegion(kSpace + 2 * kUnit, 2 * kUnit);
  const RegionId left = core_.JoinRegions(*core_.RegionAt(kSpace), hole);
  core_.JoinRegions(left, *core_.RegionAt(kSpace + 4 * kUnit));
  Check();
  EXPECT_EQ(core_.num_regions(), 1u);
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_EQ(core_.LargestFreeBlock(), 6 * kUnit - kMiB);
  EXPECT_TRUE(core_.Deallocate(x, 0).ok());
}

TEST_F(RegionSurgeryTest, CarveKeepsTheStreamConditionOfTheRest) {
  core_.AddRegion(kSpace, 4 * kUnit);
  const DeviceAddress x = Alloc(kMiB);
  const DeviceAddress y = Alloc(4 * kUnit - 2 * kMiB);
  const DeviceAddress z = Alloc(kMiB);
  ASSERT_TRUE(core_.Deallocate(y, /*stream=*/0, /*stamp=*/3).ok());
  core_.CarveFree(kSpace + kUnit, 2 * kUnit);
  Check();
  // The remaining free pieces are still tied to stream 0 (where y was
  // allocated and freed): stream 9 cannot take them without an oracle,
  // stream 0 can.
  EXPECT_FALSE(core_.Allocate(kMiB, kMiB, 256, 9).has_value());
  auto again = core_.Allocate(kMiB, kMiB, 256, 0);
  ASSERT_TRUE(again.has_value());
  for (DeviceAddress a : {x, z, *again}) {
    EXPECT_TRUE(core_.Deallocate(a, 0).ok());
  }
}

TEST(LargePagePlacementTest, LargeAllocationsStartOnABigPageWhenFree) {
  BfcCore core(BfcConfig{256, 0, 2 * kMiB});
  core.AddRegion(kSpace, 16 * kMiB);
  auto small = core.Allocate(4096, 4096, 256, 0);
  ASSERT_TRUE(small.has_value());
  auto big = core.Allocate(4 * kMiB, 4 * kMiB, 256, 0);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(*big % (2 * kMiB), 0u);
  EXPECT_EQ(*big, kSpace + 2 * kMiB);
  // The padding in front stays free for small requests.
  auto small2 = core.Allocate(8192, 8192, 256, 0);
  ASSERT_TRUE(small2.has_value());
  EXPECT_EQ(*small2, kSpace + 4096);
  EXPECT_TRUE(core.Validate().ok()) << core.Validate();
}

TEST(LargePagePlacementTest, NoPaddingWhenTheChunkHasNoRoomForIt) {
  BfcCore core(BfcConfig{256, 0, 2 * kMiB});
  core.AddRegion(kSpace, 5 * kMiB);
  auto small = core.Allocate(4096, 4096, 256, 0);
  ASSERT_TRUE(small.has_value());
  // 5 MiB - 4 KiB free: 4 MiB fits only unaligned, so it stays unaligned.
  auto big = core.Allocate(4 * kMiB, 4 * kMiB, 256, 0);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(*big, kSpace + 4096);
  EXPECT_TRUE(core.Validate().ok()) << core.Validate();
}

TEST(LargePagePlacementTest, RaggedSizesAreNotMoved) {
  // Only whole big pages are aligned: a 3 MiB block would leave a padding
  // fragment for half a page of TLB reach.
  BfcCore core(BfcConfig{256, 0, 2 * kMiB});
  core.AddRegion(kSpace, 16 * kMiB);
  ASSERT_TRUE(core.Allocate(4096, 4096, 256, 0).has_value());
  auto big = core.Allocate(3 * kMiB, 3 * kMiB, 256, 0);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(*big, kSpace + 4096);
}

TEST(LargePagePlacementTest, SmallAllocationsAreNotMoved) {
  BfcCore core(BfcConfig{256, 0, 2 * kMiB});
  core.AddRegion(kSpace, 8 * kMiB);
  ASSERT_TRUE(core.Allocate(4096, 4096, 256, 0).has_value());
  auto a = core.Allocate(kMiB, kMiB, 256, 0);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, kSpace + 4096);
}

}  // namespace
}  // namespace gpualloc::core
