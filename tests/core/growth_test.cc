// SPDX-License-Identifier: Apache-2.0
// tests/core/growth_test.cc: region sizes to ask for when growing, and the
// growth policy with expandable regions.
#include "core/regions/growth.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
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

Options ExpandableOptions(GrowthPolicy policy) {
  Options o;
  o.preallocate = false;
  o.memory_limit = 1024 * kMiB;
  o.expandable = Tristate::kOn;
  o.growth_policy = policy;
  return o;
}

// The reserved sizes an allocator with expandable regions goes through while
// 24 blocks of 2 MiB are allocated one by one (on a simulated H100, 2 MiB
// granules).
std::vector<std::uint64_t> ExpandableGrowth(GrowthPolicy policy) {
  auto a = testing::MakeAllocator(ExpandableOptions(policy),
                                  testing::MakeSim(8 * 1024 * kMiB));
  std::vector<std::uint64_t> reserved;
  std::vector<void*> blocks;
  for (int i = 0; i < 24; ++i) {
    auto p = a->Allocate(2 * kMiB);
    EXPECT_TRUE(p.ok()) << i << ": " << p.status();
    if (p.ok()) blocks.push_back(*p);
    const std::uint64_t now = a->GetStats().bytes_reserved;
    if (reserved.empty() || reserved.back() != now) reserved.push_back(now);
  }
  EXPECT_TRUE(a->Validate().ok());
  for (void* p : blocks) EXPECT_TRUE(a->Deallocate(p).ok());
  return reserved;
}

TEST(GrowthTest, ExpandableRegionsHonourThePolicy) {
  // Exact: the least that fits, at least three granules at a time.
  EXPECT_THAT(ExpandableGrowth(GrowthPolicy::kExact),
              ElementsAre(6 * kMiB, 12 * kMiB, 18 * kMiB, 24 * kMiB, 30 * kMiB,
                          36 * kMiB, 42 * kMiB, 48 * kMiB));
  // Doubling: each growth maps at least as much as is mapped already.
  EXPECT_THAT(ExpandableGrowth(GrowthPolicy::kDoubling),
              ElementsAre(6 * kMiB, 12 * kMiB, 24 * kMiB, 48 * kMiB));
}

TEST(GrowthTest, ExpandableDoublingBacksOffWhenTheDeviceRefuses) {
  auto sim = testing::MakeSim(8 * 1024 * kMiB);
  auto a =
      testing::MakeAllocator(ExpandableOptions(GrowthPolicy::kDoubling), sim);
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(*a->Allocate(2 * kMiB));
  ASSERT_EQ(a->GetStats().bytes_reserved, 12 * kMiB);
  // The doubling growth's first handle fails: the exact growth is mapped.
  sim->FailNthCall(SimOp::kCreatePhysical, 1);
  blocks.push_back(*a->Allocate(2 * kMiB));
  EXPECT_EQ(sim->failed_calls(SimOp::kCreatePhysical), 1u);
  EXPECT_EQ(a->GetStats().bytes_reserved, 18 * kMiB);
  EXPECT_TRUE(a->Validate().ok());
  for (void* p : blocks) EXPECT_TRUE(a->Deallocate(p).ok());
}

}  // namespace
}  // namespace gpualloc::core
