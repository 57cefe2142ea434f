// SPDX-License-Identifier: Apache-2.0
// Private pools (Allocator::CreatePool ... ReleasePool) outside graph
// capture: routing, reuse only within the pool, release, statistics,
// snapshot, errors that change nothing, and the modes without pools.
// tests/core/graph_capture_test.cc covers capture.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/snapshot_json.h"
#include "gtest/gtest.h"
#include "tests/core/allocator_modes.h"
#include "tests/test_util.h"

namespace gpualloc::testing {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
const Stream kS1(1);
const Stream kS2(2);

class PrivatePoolsTest : public ::testing::TestWithParam<AllocatorModeSpec> {
 protected:
  void SetUp() override {
    sim_ = MakeSim(8 * kGiB);
    alloc_ = MakeAllocator(ModeOptions(GetParam(), 2 * kGiB), sim_);
  }
  void TearDown() override {
    if (alloc_ != nullptr) {
      EXPECT_TRUE(alloc_->Validate().ok());
    }
  }
  void* Alloc(std::uint64_t bytes, Stream s) {
    absl::StatusOr<void*> p = alloc_->Allocate(bytes, s);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : nullptr;
  }
  // Whether `p` lies in memory the snapshot lists under pool `id`.
  bool InPool(void* p, PoolId id) {
    const Snapshot s = alloc_->GetSnapshot();
    for (const PoolSnapshot& pool : s.pools) {
      if (pool.id != id) continue;
      for (const RegionSnapshot& r : pool.regions) {
        if (Addr(p) >= r.base && Addr(p) < r.base + r.size) return true;
      }
    }
    return false;
  }

  std::shared_ptr<SimBackend> sim_;
  std::unique_ptr<Allocator> alloc_;
};

TEST_P(PrivatePoolsTest, RoutedStreamAllocatesFromItsPoolOnly) {
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_NE(*pool, 0u);
  void* before = Alloc(kMiB, kS1);  // general memory
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* a = Alloc(kMiB, kS1);
  void* b = Alloc(3 * kMiB, kS1);
  void* other = Alloc(kMiB, kS2);  // not routed
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  void* after = Alloc(kMiB, kS1);
  EXPECT_TRUE(InPool(a, *pool));
  EXPECT_TRUE(InPool(b, *pool));
  EXPECT_FALSE(InPool(before, *pool));
  EXPECT_FALSE(InPool(other, *pool));
  EXPECT_FALSE(InPool(after, *pool));

  const Stats s = alloc_->GetStats();
  EXPECT_EQ(s.pool_bytes_in_use, 4 * kMiB);
  EXPECT_GE(s.pool_bytes_reserved, 4 * kMiB);
  EXPECT_EQ(s.bytes_in_use, 7 * kMiB);  // pool blocks, not the pool's slabs
  EXPECT_EQ(s.bytes_requested, 7 * kMiB);
  EXPECT_EQ(s.num_allocs, 5u);
  EXPECT_EQ(s.largest_alloc_size, 3 * kMiB);
  EXPECT_GE(s.peak_bytes_in_use, 7 * kMiB);
  for (void* p : {a, b, other, after, before}) {
    ASSERT_TRUE(alloc_->Deallocate(p, kS1).ok());
  }
  EXPECT_EQ(alloc_->GetStats().bytes_in_use, 0u);
  EXPECT_EQ(alloc_->GetStats().pool_bytes_in_use, 0u);
}

TEST_P(PrivatePoolsTest, FreedPoolMemoryIsReusedOnlyByThePool) {
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* a = Alloc(4 * kMiB, kS1);
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(alloc_->Deallocate(a, kS1).ok());
  // The same stream and size outside the pool: never the pool's bytes.
  void* g = Alloc(4 * kMiB, kS1);
  EXPECT_FALSE(InPool(g, *pool));
  EXPECT_NE(g, a);
  // Back in the pool: its own free block again.
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* again = Alloc(4 * kMiB, kS1);
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  EXPECT_EQ(again, a);
  ASSERT_TRUE(alloc_->Deallocate(again, kS1).ok());
  ASSERT_TRUE(alloc_->Deallocate(g, kS1).ok());
}

TEST_P(PrivatePoolsTest, ReleasedPoolGivesItsMemoryBackOnceItsBlocksAreFree) {
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* kept = Alloc(kMiB, kS1);
  void* dropped = Alloc(8 * kMiB, kS1);
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(alloc_->Deallocate(dropped, kS1).ok());
  const std::uint64_t held = alloc_->GetStats().pool_bytes_reserved;
  ASSERT_GT(held, 0u);
  ASSERT_TRUE(alloc_->ReleasePool(*pool, kS1).ok());
  // A block still lives: what holds it stays with the pool.
  EXPECT_GT(alloc_->GetStats().pool_bytes_reserved, 0u);
  EXPECT_TRUE(alloc_->Validate().ok());
  ASSERT_TRUE(alloc_->Deallocate(kept, kS1).ok());
  EXPECT_EQ(alloc_->GetStats().pool_bytes_reserved, 0u);
  EXPECT_TRUE(alloc_->GetSnapshot().pools.empty());
  // The memory is the allocator's again: the same stream reuses it at once.
  void* g = Alloc(8 * kMiB, kS1);
  EXPECT_EQ(alloc_->GetStats().num_allocs, 3u);
  ASSERT_TRUE(alloc_->Deallocate(g, kS1).ok());
  // The pool is gone.
  EXPECT_TRUE(absl::IsNotFound(alloc_->BeginAllocateToPool(*pool, kS1)));
}

// Pieces freed on different streams stay apart inside the pool; a released
// pool still gives the whole region back.
TEST_P(PrivatePoolsTest, ReleasedPoolReturnsPiecesFreedOnDifferentStreams) {
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* a = Alloc(kMiB, kS1);
  void* b = Alloc(kMiB, kS1);
  ASSERT_TRUE(alloc_->RecordStream(b, kS2).ok());
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(alloc_->Deallocate(a, kS1).ok());
  ASSERT_TRUE(alloc_->Deallocate(b, kS2).ok());
  ASSERT_GT(alloc_->GetStats().pool_bytes_reserved, 0u);
  ASSERT_TRUE(alloc_->ReleasePool(*pool, kS1).ok());
  EXPECT_EQ(alloc_->GetStats().pool_bytes_reserved, 0u);
  EXPECT_TRUE(alloc_->GetSnapshot().pools.empty());
}

TEST_P(PrivatePoolsTest, SharedPoolNeedsEveryReferenceReleased) {
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->RetainPool(*pool).ok());  // a second graph shares it
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* a = Alloc(2 * kMiB, kS1);
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(alloc_->Deallocate(a, kS1).ok());
  ASSERT_TRUE(alloc_->ReleasePool(*pool, kS1).ok());
  EXPECT_GT(alloc_->GetStats().pool_bytes_reserved, 0u);  // one left
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS2).ok());
  void* b = Alloc(2 * kMiB, kS2);
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(alloc_->Deallocate(b, kS2).ok());
  ASSERT_TRUE(alloc_->ReleasePool(*pool, kS2).ok());
  EXPECT_EQ(alloc_->GetStats().pool_bytes_reserved, 0u);
}

TEST_P(PrivatePoolsTest, BadCallsNameTheProblemAndChangeNothing) {
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* a = Alloc(kMiB, kS1);
  const Snapshot before = alloc_->GetSnapshot();
  const std::uint64_t calls =
      sim_->calls(SimOp::kAllocate) + sim_->calls(SimOp::kCreatePhysical);

  absl::Status s = alloc_->BeginAllocateToPool(*pool + 100, kS2);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("no such pool"));
  s = alloc_->BeginAllocateToPool(*pool, kS1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("already allocates to pool"));
  s = alloc_->ReleasePool(*pool, kS1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("EndAllocateToPool"));
  s = alloc_->ReleaseStream(kS1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::IsNotFound(alloc_->RetainPool(0)));
  EXPECT_TRUE(absl::IsNotFound(alloc_->ReleasePool(12345)));
  const Snapshot after = alloc_->GetSnapshot();
  EXPECT_EQ(SnapshotToJson(after), SnapshotToJson(before));
  EXPECT_EQ(sim_->calls(SimOp::kAllocate) + sim_->calls(SimOp::kCreatePhysical),
            calls);
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(alloc_->EndAllocateToPool(*pool)));
  ASSERT_TRUE(alloc_->Deallocate(a, kS1).ok());
  EXPECT_FALSE(alloc_->Deallocate(a, kS1).ok());  // a second free
  ASSERT_TRUE(alloc_->ReleasePool(*pool).ok());
  EXPECT_TRUE(absl::IsNotFound(alloc_->ReleasePool(*pool)));
}

// ReleasePool's last_use after ReleaseStream of that stream would make the
// allocator record an event on a destroyed stream later: refused, nothing
// changed. Once the handle names a stream again (an allocation on it), it
// is accepted.
TEST_P(PrivatePoolsTest, ReleasePoolRefusesAReleasedStream) {
  const Stream s3(3);
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* a = Alloc(kMiB, kS1);
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  sim_->Use(kS1, Addr(a), kMiB);
  ASSERT_TRUE(alloc_->Deallocate(a, kS1).ok());
  void* x = Alloc(kMiB, s3);
  sim_->Use(s3, Addr(x), kMiB);
  ASSERT_TRUE(alloc_->Deallocate(x, s3).ok());
  ASSERT_TRUE(alloc_->ReleaseStream(s3).ok());
  sim_->DestroyStream(s3);
  // A stream the allocator never saw, released: refused as well.
  const Stream s4(4);
  ASSERT_TRUE(alloc_->ReleaseStream(s4).ok());

  const Snapshot before = alloc_->GetSnapshot();
  const std::uint64_t events = sim_->calls(SimOp::kRecordEvent);
  for (const Stream dead : {s3, s4}) {
    absl::Status s = alloc_->ReleasePool(*pool, dead);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(std::string(s.message()),
                ::testing::HasSubstr(absl::StrFormat(
                    "ReleasePool(pool %d, stream %#x)", *pool, dead.handle)));
    EXPECT_THAT(std::string(s.message()),
                ::testing::HasSubstr("released with ReleaseStream"));
  }
  EXPECT_EQ(SnapshotToJson(alloc_->GetSnapshot()), SnapshotToJson(before));
  EXPECT_EQ(sim_->calls(SimOp::kRecordEvent), events);

  // The pool is still there: released on a live stream, its memory goes
  // back once that stream's work is done, and the dead one is never named.
  ASSERT_TRUE(alloc_->ReleasePool(*pool, kS2).ok());
  sim_->CompleteAll();
  void* big = Alloc(kGiB + kGiB / 2, kS2);
  ASSERT_TRUE(alloc_->Deallocate(big, kS2).ok());
  ASSERT_TRUE(alloc_->Trim().ok());
  EXPECT_EQ(sim_->calls_on_destroyed_streams(), 0u);

  // The handle names a new stream once the program allocates on it.
  absl::StatusOr<PoolId> next = alloc_->CreatePool();
  ASSERT_TRUE(next.ok());
  void* y = Alloc(kMiB, s3);
  EXPECT_TRUE(alloc_->ReleasePool(*next, s3).ok());
  ASSERT_TRUE(alloc_->Deallocate(y, s3).ok());
}

TEST_P(PrivatePoolsTest, SnapshotShowsPoolsAndRoundTripsThroughJson) {
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  void* a = Alloc(kMiB, kS1);
  const Snapshot s = alloc_->GetSnapshot();
  ASSERT_EQ(s.pools.size(), 1u);
  EXPECT_EQ(s.pools[0].id, *pool);
  EXPECT_EQ(s.pools[0].references, 1u);
  EXPECT_THAT(s.pools[0].streams, ::testing::ElementsAre(kS1.handle));
  EXPECT_EQ(s.pools[0].bytes_in_use, kMiB);
  // The slab appears in the general regions as an in-use chunk of the pool.
  std::uint64_t slab_bytes = 0;
  for (const RegionSnapshot& r : s.regions) {
    for (const ChunkSnapshot& c : r.chunks) {
      if (c.pool == *pool) slab_bytes += c.size;
    }
  }
  EXPECT_EQ(slab_bytes, s.pools[0].bytes_reserved);
  absl::StatusOr<Snapshot> back = SnapshotFromJson(SnapshotToJson(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SnapshotToJson(*back), SnapshotToJson(s));
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(alloc_->Deallocate(a, kS1).ok());
}

TEST_P(PrivatePoolsTest, PoolGrowthThatCannotFitIsOutOfMemory) {
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  absl::StatusOr<void*> never = alloc_->Allocate(3 * kGiB, kS1);
  EXPECT_TRUE(absl::IsResourceExhausted(never.status())) << never.status();
  absl::StatusOr<void*> big = alloc_->Allocate(kGiB + kGiB / 2, kS1);
  ASSERT_TRUE(big.ok()) << big.status();
  absl::StatusOr<void*> more = alloc_->Allocate(kGiB, kS1);
  EXPECT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  // The report names the pool and the request, then why the block failed.
  EXPECT_THAT(std::string(more.status().message()),
              ::testing::StartsWith(
                  "private pool 1, Allocate(1073741824 bytes) on stream 0x1: "
                  "a new block of 1073741824 bytes for the pool: out of "
                  "memory"));
  EXPECT_EQ(alloc_->GetStats().num_ooms, 2u);
  ASSERT_TRUE(alloc_->Deallocate(*big, kS1).ok());
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(alloc_->ReleasePool(*pool, kS1).ok());
  EXPECT_EQ(alloc_->GetStats().pool_bytes_reserved, 0u);
}

TEST_P(PrivatePoolsTest, OutOfMemoryHandlerCanMakeRoomForAPoolBlock) {
  void* cache = Alloc(kGiB, kS2);  // general memory a cache holds
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS1).ok());
  int calls = 0;
  alloc_->SetOutOfMemoryHandler([&](const OutOfMemoryInfo& info) {
    ++calls;
    EXPECT_EQ(info.bytes, kGiB + kGiB / 2);
    EXPECT_EQ(info.stream, kS1);
    if (cache == nullptr) return OutOfMemoryAction::kFail;
    EXPECT_TRUE(alloc_->Deallocate(cache, kS2).ok());  // reentrant
    cache = nullptr;
    return OutOfMemoryAction::kRetry;
  });
  absl::StatusOr<void*> p = alloc_->Allocate(kGiB + kGiB / 2, kS1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(alloc_->GetStats().num_ooms, 0u);
  ASSERT_TRUE(alloc_->Deallocate(*p, kS1).ok());
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(alloc_->ReleasePool(*pool, kS1).ok());
  alloc_->SetOutOfMemoryHandler(nullptr);
}

// A split bound leaves surplus bytes with an allocation, a pool's block
// included: the pool owns the whole chunk (invariants G1-G2 after each call).
TEST_P(PrivatePoolsTest, SplitBoundSurplusOfABlockBelongsToThePool) {
  Options o = ModeOptions(GetParam(), 2 * kGiB);
  o.max_internal_fragmentation = 4 * kMiB;
  alloc_ = MakeAllocator(o, sim_);
  std::vector<void*> general;
  for (std::uint64_t mib : {3, 5, 7}) general.push_back(Alloc(mib * kMiB, kS2));
  for (void* p : general) ASSERT_TRUE(alloc_->Deallocate(p, kS2).ok());
  absl::StatusOr<PoolId> pool = alloc_->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(alloc_->BeginAllocateToPool(*pool, kS2).ok());
  std::vector<void*> in_pool;
  for (std::uint64_t kib : {512, 1500, 3000, 100, 6000}) {
    in_pool.push_back(Alloc(kib << 10, kS2));
    ASSERT_TRUE(alloc_->Validate().ok()) << alloc_->Validate();
  }
  ASSERT_TRUE(alloc_->EndAllocateToPool(*pool).ok());
  std::uint64_t held = 0;
  for (const RegionSnapshot& r : alloc_->GetSnapshot().regions) {
    for (const ChunkSnapshot& c : r.chunks)
      held += c.pool == *pool ? c.size : 0;
  }
  EXPECT_EQ(held, alloc_->GetStats().pool_bytes_reserved);
  // Requested bytes are the callers', whatever surplus the blocks carry.
  EXPECT_EQ(alloc_->GetStats().bytes_requested, (512 + 1500 + 3000 + 100 + 6000)
                                                    << 10);
  for (void* p : in_pool) ASSERT_TRUE(alloc_->Deallocate(p, kS2).ok());
  ASSERT_TRUE(alloc_->ReleasePool(*pool, kS2).ok());
  EXPECT_EQ(alloc_->GetStats().pool_bytes_reserved, 0u);
}

INSTANTIATE_TEST_SUITE_P(Bfc, PrivatePoolsTest,
                         ::testing::Values(kBfcSeparate, kBfcExpandable,
                                           kBfcPreallocated),
                         [](const auto& info) { return info.param.name; });

TEST(PrivatePoolsModesTest, PlatformAndAsyncHaveNoPools) {
  for (const AllocatorModeSpec& spec : {kPlatform, kAsync}) {
    auto sim = MakeSim(8 * kGiB);
    auto alloc = MakeAllocator(ModeOptions(spec, 2 * kGiB), sim);
    ASSERT_NE(alloc, nullptr);
    absl::StatusOr<PoolId> pool = alloc->CreatePool();
    EXPECT_TRUE(absl::IsUnimplemented(pool.status())) << pool.status();
    EXPECT_THAT(std::string(pool.status().message()),
                ::testing::HasSubstr("need allocator mode bfc"));
    EXPECT_TRUE(absl::IsUnimplemented(alloc->BeginAllocateToPool(1, kS1)));
  }
}

// Destroying the allocator unmaps its memory (expandable regions, growing or
// preallocated) only after the work still queued on a pool's blocks, live or
// freed into the pool, has completed, as for plain blocks.
TEST(PrivatePoolsDestructionTest, WaitsForTheWorkOnPoolBlocks) {
  for (bool preallocate : {false, true}) {
    SCOPED_TRACE(preallocate ? "preallocated" : "growing");
    auto sim = MakeSim(8 * kGiB);
    {
      Options o = ModeOptions(kBfcExpandable, 2 * kGiB);
      o.preallocate = preallocate;
      auto alloc = MakeAllocator(o, sim);
      ASSERT_NE(alloc, nullptr);
      absl::StatusOr<PoolId> pool = alloc->CreatePool();
      ASSERT_TRUE(pool.ok()) << pool.status();
      ASSERT_TRUE(alloc->BeginAllocateToPool(*pool, kS2).ok());
      absl::StatusOr<void*> live = alloc->Allocate(4 * kMiB, kS2);
      absl::StatusOr<void*> freed = alloc->Allocate(4 * kMiB, kS2);
      ASSERT_TRUE(live.ok() && freed.ok());
      ASSERT_TRUE(alloc->EndAllocateToPool(*pool).ok());
      sim->Use(kS2, Addr(*live), 4 * kMiB);
      sim->Use(kS2, Addr(*freed), 4 * kMiB);
      ASSERT_TRUE(alloc->Deallocate(*freed, kS2).ok());
      // `live` dies with the allocator, its kernel still running.
    }
    EXPECT_EQ(sim->hazards(), 0u);
    if (sim->hazards() != 0) {
      EXPECT_EQ(sim->hazard_log().front().ToString(), "");
    }
    EXPECT_EQ(sim->physical_bytes(), 0u);
    EXPECT_EQ(sim->mapped_bytes(), 0u);
  }
}

}  // namespace
}  // namespace gpualloc::testing
