// SPDX-License-Identifier: Apache-2.0
// The per-stream front caches as a component (core/bfc/stream_fronts.h): slots,
// budgets, hits, the global free path, figures and the invariants FC4-FC6,
// over a BfcCore of its own. front_cache_test.cc tests one cache's records
// and the fronts through the facade.
#include "core/bfc/stream_fronts.h"

#include <cstdint>
#include <memory>
#include <optional>

#include "core/bfc/bfc.h"
#include "core/streams/oracle.h"
#include "core/streams/stream_order.h"
#include "gmock/gmock.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

using ::testing::HasSubstr;
using testing::kMiB;

constexpr DeviceAddress kBase = 0x10000000;
constexpr std::uintptr_t kStream = 0x100;
constexpr std::uint64_t kBudget = 64 * 1024;

class StreamFrontsTest : public ::testing::Test {
 protected:
  StreamFrontsTest() { core_.AddRegion(kBase, 4 * kMiB); }
  void TearDown() override { GPUALLOC_EXPECT_OK(fronts_.Validate()); }

  DeviceAddress Alloc(std::uint64_t size, std::uintptr_t stream = kStream) {
    std::optional<DeviceAddress> a =
        core_.Allocate(size, size, 256, stream, &oracle_);
    EXPECT_TRUE(a.has_value()) << size;
    return a.value_or(0);
  }
  // A block of `size` freed on kStream into its front: the front exists and
  // wants the size (a miss), and the block has in-use neighbours.
  DeviceAddress Adopted(std::uint64_t size) {
    fronts_.Make(kStream);
    EXPECT_FALSE(fronts_.Take(kStream, size, size).has_value());
    const DeviceAddress block = Alloc(size);
    Alloc(256);  // its neighbour above stays in use
    bool changed = false;
    GPUALLOC_EXPECT_OK(fronts_.Deallocate(block, kStream, &changed));
    EXPECT_TRUE(changed);
    return block;
  }

  std::shared_ptr<SimBackend> sim_ = testing::MakeSim(64 * kMiB);
  BfcCore core_{BfcConfig{256, 0}};
  StreamOrder order_{sim_.get(), CrossStreamReuse::kWhenComplete};
  AllComplete oracle_;
  StreamFronts fronts_{kBudget, core_, order_, &oracle_};
};

TEST_F(StreamFrontsTest, OnlyWithABudget) {
  EXPECT_TRUE(fronts_.on());
  StreamFronts off(0, core_, order_, &oracle_);
  EXPECT_FALSE(off.on());
}

TEST_F(StreamFrontsTest, AStreamsFirstFreeMakesItsFront) {
  EXPECT_EQ(fronts_.For(kStream), nullptr);
  const DeviceAddress a = Alloc(1024);
  bool changed = false;
  GPUALLOC_ASSERT_OK(fronts_.Deallocate(a, kStream, &changed));
  EXPECT_TRUE(changed);
  EXPECT_NE(fronts_.For(kStream), nullptr);
  // Freed in the core: the front did not want that size yet.
  EXPECT_EQ(core_.counters().bytes_in_use, 0u);
}

TEST_F(StreamFrontsTest, AWantedBlockComesBackWithoutTheCore) {
  const DeviceAddress block = Adopted(1024);
  const std::uint64_t in_use = core_.counters().bytes_in_use;
  Stats s;
  fronts_.AddStats(&s);
  EXPECT_EQ(s.front_cache_bytes, 1024u);
  EXPECT_EQ(s.bytes_in_use, in_use - 1024);  // a cached block is free
  GPUALLOC_EXPECT_OK(fronts_.Validate());

  EXPECT_EQ(fronts_.Take(kStream, 1024, 1000), block);
  EXPECT_EQ(core_.counters().bytes_in_use, in_use);  // the core saw nothing
  Stats hit;
  fronts_.AddStats(&hit);
  EXPECT_EQ(hit.front_cache_hits, 1u);
  EXPECT_EQ(hit.bytes_in_use, in_use);
  GPUALLOC_EXPECT_OK(fronts_.Validate());

  // Its free goes back to the front, under the front's lock alone.
  StreamFronts::Freed freed = fronts_.Put(kStream, block);
  EXPECT_EQ(freed.put, FrontCache::PutResult::kCached);
  EXPECT_EQ(freed.front, fronts_.For(kStream));
  freed = fronts_.Put(kStream, block);
  EXPECT_EQ(freed.put, FrontCache::PutResult::kAlreadyFree);
  EXPECT_THAT(StreamFronts::FreedTwice(block, *freed.front).message(),
              HasSubstr("already free"));
  // The global path refuses the second free too, and changes nothing.
  bool changed = true;
  EXPECT_FALSE(fronts_.Deallocate(block, kStream, &changed).ok());
  EXPECT_FALSE(changed);
}

TEST_F(StreamFrontsTest, OtherStreamsAndOtherBlocksAreNotCached) {
  const DeviceAddress block = Adopted(1024);
  EXPECT_FALSE(fronts_.Take(kStream + 1, 1024, 1024).has_value());
  EXPECT_EQ(fronts_.Put(kStream + 1, block).put,
            FrontCache::PutResult::kNotOwned);
  EXPECT_EQ(fronts_.Put(kStream, kBase + 3 * kMiB).put,
            FrontCache::PutResult::kNotOwned);
}

TEST_F(StreamFrontsTest, FlushGivesEveryCachedBlockToTheCore) {
  Adopted(1024);
  const std::uint64_t in_use = core_.counters().bytes_in_use;
  EXPECT_TRUE(fronts_.Flush());
  EXPECT_EQ(core_.counters().bytes_in_use, in_use - 1024);
  EXPECT_FALSE(fronts_.Flush());  // nothing left
}

TEST_F(StreamFrontsTest, PeaksFoldEachFrontsLargestChange) {
  const DeviceAddress block = Adopted(1024);
  fronts_.ResetPeaks();
  const std::uint64_t in_use = core_.counters().bytes_in_use;
  EXPECT_EQ(fronts_.peak_in_use(), in_use - 1024);
  ASSERT_EQ(fronts_.Take(kStream, 1024, 1024), block);
  EXPECT_EQ(fronts_.Put(kStream, block).put, FrontCache::PutResult::kCached);
  // The hit's high point counts at the next fold, though it is gone now.
  fronts_.Fold();
  EXPECT_EQ(fronts_.peak_in_use(), in_use);
  Stats s;
  fronts_.AddStats(&s);
  EXPECT_EQ(s.bytes_in_use, in_use - 1024);
  EXPECT_EQ(s.peak_bytes_in_use, in_use);
}

TEST_F(StreamFrontsTest, ReleaseFreesTheSlotForTheNextStream) {
  const DeviceAddress block = Adopted(1024);
  ASSERT_EQ(fronts_.Take(kStream, 1024, 1024), block);  // live, the front's
  StreamFront* f = fronts_.For(kStream);
  ASSERT_NE(f, nullptr);
  fronts_.Release(*f);
  EXPECT_EQ(fronts_.For(kStream), nullptr);
  GPUALLOC_EXPECT_OK(fronts_.Validate());
  // The live block is the core's now: its free goes there.
  EXPECT_TRUE(core_.FindInUse(block).has_value());
  GPUALLOC_EXPECT_OK(core_.Deallocate(block, kStream));
  // The slot serves the next stream.
  EXPECT_EQ(fronts_.Make(kStream + 1), f);
}

TEST_F(StreamFrontsTest, AtMostkMaxFrontsServeAtOnce) {
  for (int i = 0; i < StreamFronts::kMaxFronts; ++i) {
    EXPECT_NE(fronts_.Make(kStream + i), nullptr);
  }
  // Every front used since it was made: the next stream has none.
  for (int i = 0; i < StreamFronts::kMaxFronts; ++i) {
    EXPECT_FALSE(fronts_.Take(kStream + i, 1024, 1024).has_value());
  }
  EXPECT_EQ(fronts_.Make(kStream + StreamFronts::kMaxFronts), nullptr);
  GPUALLOC_EXPECT_OK(fronts_.Validate());  // FC6: even shares
  fronts_.Release(*fronts_.For(kStream));
  EXPECT_NE(fronts_.Make(kStream + StreamFronts::kMaxFronts), nullptr);
}

// Slots go to the streams in use: a front idle since the last sweep of the
// slots gives its slot (and its blocks) to a new stream; fronts in use keep
// theirs.
TEST_F(StreamFrontsTest, AnIdleFrontsSlotGoesToANewStream) {
  constexpr int kN = StreamFronts::kMaxFronts;
  const DeviceAddress cached = Adopted(1024);  // kStream's front holds it
  for (int i = 1; i < kN; ++i) EXPECT_NE(fronts_.Make(kStream + i), nullptr);
  for (int i = 0; i < kN; ++i) (void)fronts_.Take(kStream + i, 4096, 4096);
  const std::uintptr_t late = kStream + 1000;
  // Each front was used since the sweep last looked (it had not yet).
  EXPECT_EQ(fronts_.Make(late), nullptr);
  // Now every stream but kStream is used again.
  for (int i = 1; i < kN; ++i) (void)fronts_.Take(kStream + i, 4096, 4096);
  StreamFront* f = fronts_.Make(late);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(fronts_.For(late), f);
  EXPECT_EQ(fronts_.For(kStream), nullptr);
  for (int i = 1; i < kN; ++i) EXPECT_NE(fronts_.For(kStream + i), nullptr);
  // kStream's cached block went back to the core.
  EXPECT_FALSE(core_.FindInUse(cached).has_value());
  GPUALLOC_EXPECT_OK(fronts_.Validate());
  // A thread of kStream that found the slot before it changed hands gets
  // nothing from the new stream's front.
  EXPECT_FALSE(fronts_.Take(kStream, 1024, 1024).has_value());
}

TEST_F(StreamFrontsTest, LeaveHandsALiveBlockToTheCore) {
  const DeviceAddress block = Adopted(1024);
  ASSERT_EQ(fronts_.Take(kStream, 1024, 1024), block);
  fronts_.Leave(block);
  EXPECT_EQ(fronts_.Put(kStream, block).put, FrontCache::PutResult::kNotOwned);
}

TEST_F(StreamFrontsTest, DisableGivesEverythingBack) {
  Adopted(1024);
  fronts_.Disable();
  EXPECT_FALSE(fronts_.on());
  Stats s;
  fronts_.AddStats(&s);  // off: adds nothing
  EXPECT_EQ(s.front_cache_bytes, 0u);
  EXPECT_EQ(fronts_.Put(kStream, kBase).put, FrontCache::PutResult::kNotOwned);
}

TEST_F(StreamFrontsTest, ValidateNamesFC4ForABlockTheCoreFreed) {
  const DeviceAddress block = Adopted(1024);
  // Freed behind the front's back: the front still holds it.
  GPUALLOC_ASSERT_OK(core_.Deallocate(block, kStream));
  const absl::Status status = fronts_.Validate();
  EXPECT_THAT(status.message(), HasSubstr("FC4"));
  // (Taken out again, so that TearDown's check holds.)
  ASSERT_EQ(core_.Allocate(1024, 1024, 256, kStream, &oracle_), block);
}

}  // namespace
}  // namespace gpualloc::core
