// SPDX-License-Identifier: Apache-2.0
// tests/core/bfc_test.cc: the BFC core on its own: splitting, coalescing, best
// fit, alignment, regions, bad frees and the invariant validator.
#include "core/bfc/bfc.h"

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

using testing::kMiB;

constexpr DeviceAddress kBase = 0x10000000;

class BfcCoreTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_TRUE(core_.Validate().ok()) << core_.Validate();
  }

  DeviceAddress Alloc(std::uint64_t size, std::uint64_t alignment = 256) {
    auto a = core_.Allocate(size, size, alignment, 0);
    EXPECT_TRUE(a.has_value()) << size;
    EXPECT_TRUE(core_.Validate().ok()) << core_.Validate();
    return a.value_or(0);
  }
  void Free(DeviceAddress a) {
    EXPECT_TRUE(core_.Deallocate(a, 0).ok());
    EXPECT_TRUE(core_.Validate().ok()) << core_.Validate();
  }

  BfcCore core_{BfcConfig{256, 0}};
};

TEST_F(BfcCoreTest, EmptyCoreAllocatesNothing) {
  EXPECT_FALSE(core_.Allocate(256, 1, 256, 0).has_value());
  EXPECT_EQ(core_.num_regions(), 0u);
}

TEST_F(BfcCoreTest, SplitsFromTheFrontAndCoalescesBack) {
  core_.AddRegion(kBase, 2 * kMiB);
  const DeviceAddress a = Alloc(1024);
  const DeviceAddress b = Alloc(4096);
  const DeviceAddress c = Alloc(256);
  EXPECT_EQ(a, kBase);
  EXPECT_EQ(b, kBase + 1024);
  EXPECT_EQ(c, kBase + 1024 + 4096);
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_EQ(core_.counters().bytes_in_use, 1024u + 4096 + 256);
  Free(b);  // a hole between two in-use chunks
  EXPECT_EQ(core_.num_free_chunks(), 2u);
  Free(a);  // merges with the hole
  EXPECT_EQ(core_.num_free_chunks(), 2u);
  EXPECT_EQ(core_.LargestFreeBlock(), 2 * kMiB - 1024 - 4096 - 256);
  Free(c);  // merges both sides: one chunk again
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_EQ(core_.LargestFreeBlock(), 2 * kMiB);
  EXPECT_TRUE(core_.IsRegionFree(0));
}

TEST_F(BfcCoreTest, BestFitPrefersTheSmallestHole) {
  core_.AddRegion(kBase, 2 * kMiB);
  const DeviceAddress a = Alloc(8192);
  Alloc(256);
  const DeviceAddress b = Alloc(2048);
  Alloc(256);
  Free(a);                    // 8 KiB hole at the front
  Free(b);                    // 2 KiB hole later
  EXPECT_EQ(Alloc(2048), b);  // the exact hole, not the first one
  EXPECT_EQ(Alloc(4096), a);  // split from the 8 KiB hole
}

TEST_F(BfcCoreTest, LowestAddressAmongEqualSizes) {
  core_.AddRegion(kBase, 2 * kMiB);
  DeviceAddress holes[3];
  for (auto& h : holes) {
    h = Alloc(4096);
    Alloc(256);
  }
  Free(holes[2]);
  Free(holes[0]);
  Free(holes[1]);
  EXPECT_EQ(Alloc(4096), holes[0]);
}

TEST_F(BfcCoreTest, AlignmentCutsFrontPaddingAsAFreeChunk) {
  core_.AddRegion(kBase, 4 * kMiB);
  Alloc(256);
  const DeviceAddress a = Alloc(4096, kMiB);
  EXPECT_EQ(a % kMiB, 0u);
  EXPECT_EQ(a, kBase + kMiB);
  // The padding before it is free and usable.
  EXPECT_EQ(Alloc(1024), kBase + 256);
}

TEST_F(BfcCoreTest, SplitBoundKeepsSmallSurplusWithTheAllocation) {
  BfcCore core(BfcConfig{256, 4096});
  core.AddRegion(kBase, 2 * kMiB);
  auto a = core.Allocate(2 * kMiB - 4096, 1, 256, 0);  // surplus 4096 <= bound
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(core.counters().bytes_in_use, 2 * kMiB);
  EXPECT_EQ(core.num_free_chunks(), 0u);
  EXPECT_TRUE(core.Validate().ok()) << core.Validate();
  ASSERT_TRUE(core.Deallocate(*a, 0).ok());
  auto b = core.Allocate(kMiB, 1, 256, 0);  // surplus 1 MiB > bound: split
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(core.counters().bytes_in_use, kMiB);
  EXPECT_TRUE(core.Validate().ok()) << core.Validate();
}

TEST_F(BfcCoreTest, ChunksNeverMergeAcrossRegions) {
  core_.AddRegion(kBase, 2 * kMiB);
  core_.AddRegion(kBase + 2 * kMiB,
                  2 * kMiB);  // adjacent addresses, separate regions
  EXPECT_EQ(core_.num_free_chunks(), 2u);
  EXPECT_FALSE(core_.Allocate(3 * kMiB, 1, 256, 0).has_value());
  EXPECT_EQ(core_.FreeRegions().size(), 2u);
}

TEST_F(BfcCoreTest, RemoveRegionGivesBackReservedBytes) {
  const RegionId r = core_.AddRegion(kBase, 2 * kMiB);
  const DeviceAddress a = Alloc(256);
  EXPECT_FALSE(core_.IsRegionFree(r));
  EXPECT_TRUE(core_.FreeRegions().empty());
  Free(a);
  ASSERT_TRUE(core_.IsRegionFree(r));
  core_.RemoveRegion(r);
  EXPECT_EQ(core_.counters().bytes_reserved, 0u);
  EXPECT_EQ(core_.counters().peak_bytes_reserved, 2 * kMiB);
  EXPECT_EQ(core_.num_regions(), 0u);
}

TEST_F(BfcCoreTest, BadFreesAreDiagnosedAndChangeNothing) {
  core_.AddRegion(kBase, 2 * kMiB);
  const DeviceAddress a = Alloc(4096);
  const DeviceAddress b = Alloc(4096);
  Free(b);
  const CoreCounters before = core_.counters();

  absl::Status foreign = core_.Deallocate(0x1234, 0);
  EXPECT_EQ(foreign.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.message().find("0x1234"), std::string::npos) << foreign;
  EXPECT_NE(foreign.message().find("not allocated by this allocator"),
            std::string::npos);

  absl::Status interior = core_.Deallocate(a + 256, 0);
  EXPECT_EQ(interior.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(interior.message().find("interior"), std::string::npos) << interior;

  absl::Status twice = core_.Deallocate(b, 0);
  EXPECT_EQ(twice.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(twice.message().find("double free"), std::string::npos) << twice;

  EXPECT_EQ(core_.counters().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(core_.AllocatedSize(a), 4096u);
}

TEST_F(BfcCoreTest, PeaksAndReset) {
  core_.AddRegion(kBase, 2 * kMiB);
  const DeviceAddress a = Alloc(kMiB);
  Free(a);
  EXPECT_EQ(core_.counters().peak_bytes_in_use, kMiB);
  EXPECT_EQ(core_.counters().largest_alloc_size, kMiB);
  core_.ResetPeaks();
  EXPECT_EQ(core_.counters().peak_bytes_in_use, 0u);
  EXPECT_EQ(core_.counters().peak_bytes_reserved, 2 * kMiB);
}

TEST_F(BfcCoreTest, SnapshotListsEveryChunkInAddressOrder) {
  core_.AddRegion(kBase + 8 * kMiB, 2 * kMiB);
  core_.AddRegion(kBase, 2 * kMiB);
  Alloc(512);
  std::vector<RegionSnapshot> regions;
  core_.AppendSnapshot(&regions);
  ASSERT_EQ(regions.size(), 2u);
  EXPECT_EQ(regions[0].base, kBase);
  ASSERT_EQ(regions[0].chunks.size(), 2u);
  EXPECT_TRUE(regions[0].chunks[0].in_use);
  EXPECT_EQ(regions[0].chunks[0].requested, 512u);
  EXPECT_FALSE(regions[0].chunks[1].in_use);
  EXPECT_EQ(regions[1].chunks.size(), 1u);
}

TEST_F(BfcCoreTest, MetadataDoesNotGrowWithRegionSize) {
  BfcCore small(BfcConfig{});
  BfcCore huge(BfcConfig{});
  small.AddRegion(kBase, 2 * kMiB);
  huge.AddRegion(kBase, std::uint64_t{106} << 30);
  EXPECT_EQ(small.MetadataBytes(), huge.MetadataBytes());
}

}  // namespace
}  // namespace gpualloc::core
