// tests/growth_test.cc: region sizes to ask for when growing.
#include "core/growth.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::kMiB;

GrowthRequest Request(std::uint64_t needed, std::uint64_t reserved,
                      std::uint64_t limit,
                      GrowthPolicy policy = GrowthPolicy::kExact,
                      std::uint64_t next = 0) {
  GrowthRequest r;
  r.needed = needed;
  r.reserved = reserved;
  r.limit = limit;
  r.granularity = 2 * kMiB;
  r.policy = policy;
  r.next_region_size = next;
  return r;
}

TEST(GrowthTest, ExactRoundsUpToTheGranularity) {
  EXPECT_THAT(GrowthCandidates(Request(256, 0, 100 * kMiB)),
              ElementsAre(2 * kMiB));
  EXPECT_THAT(GrowthCandidates(Request(5 * kMiB, 0, 100 * kMiB)),
              ElementsAre(6 * kMiB));
}

TEST(GrowthTest, NeverPassesTheLimit) {
  EXPECT_THAT(GrowthCandidates(Request(4 * kMiB, 98 * kMiB, 100 * kMiB)),
              IsEmpty());
  EXPECT_THAT(GrowthCandidates(Request(2 * kMiB, 98 * kMiB, 100 * kMiB)),
              ElementsAre(2 * kMiB));
  // A limit that is not a multiple of the granularity: the tail cannot be used.
  EXPECT_THAT(GrowthCandidates(Request(kMiB, 0, kMiB)), IsEmpty());
}

TEST(GrowthTest, DoublingBacksOffByHalvesDownToTheNeed) {
  EXPECT_THAT(GrowthCandidates(Request(kMiB, 0, 1024 * kMiB,
                                       GrowthPolicy::kDoubling, 16 * kMiB)),
              ElementsAre(16 * kMiB, 8 * kMiB, 4 * kMiB, 2 * kMiB));
  // Capped by the headroom.
  EXPECT_THAT(GrowthCandidates(Request(kMiB, 1016 * kMiB, 1024 * kMiB,
                                       GrowthPolicy::kDoubling, 64 * kMiB)),
              ElementsAre(8 * kMiB, 4 * kMiB, 2 * kMiB));
  // A need above the doubling size wins.
  EXPECT_THAT(GrowthCandidates(Request(30 * kMiB, 0, 1024 * kMiB,
                                       GrowthPolicy::kDoubling, 4 * kMiB)),
              ElementsAre(30 * kMiB));
}

TEST(GrowthTest, NextRegionSizeDoubles) {
  EXPECT_EQ(NextRegionSize(2 * kMiB, 2 * kMiB), 4 * kMiB);
  EXPECT_EQ(NextRegionSize(2 * kMiB, 64 * kMiB), 64 * kMiB);
  EXPECT_EQ(NextRegionSize(UINT64_MAX / 2 + 1, 0), UINT64_MAX);
}

}  // namespace
}  // namespace gpualloc::core
