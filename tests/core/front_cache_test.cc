// SPDX-License-Identifier: Apache-2.0
// The per-stream front caches (Options::front_cache): the FrontCache record
// keeping (core/bfc/front_cache.h) and what the BFC facade does with it.
#include "core/bfc/front_cache.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using core::FrontCache;
using testing::Addr;
using ::testing::HasSubstr;
using testing::kMiB;
using testing::MakeAllocator;
using testing::MakeSim;

TEST(FrontCacheRecords, TakesBackExactSizesLastFreedFirst) {
  FrontCache c(1 << 20, 1000);
  EXPECT_FALSE(c.Take(512, 500).has_value());  // empty: a miss
  EXPECT_TRUE(c.Wanted(512));                  // ... that wants 512
  c.Adopt(0x1000, 512, 400);
  c.Adopt(0x2000, 512, 300);
  c.Adopt(0x3000, 1024, 1000);
  EXPECT_EQ(c.cached_bytes(), 2048u);
  EXPECT_EQ(c.cached_requested(), 1700u);
  GPUALLOC_ASSERT_OK(c.Validate());
  EXPECT_FALSE(c.Take(768, 700).has_value());  // no block of exactly 768
  EXPECT_EQ(c.Take(512, 512), 0x2000u);        // the last freed
  EXPECT_EQ(c.requested_adjust(), 512 - 300);
  EXPECT_EQ(c.Put(0x2000).result, FrontCache::PutResult::kCached);
  EXPECT_EQ(c.Put(0x2000).result, FrontCache::PutResult::kAlreadyFree);
  EXPECT_EQ(c.Put(0x9000).result, FrontCache::PutResult::kNotOwned);
  EXPECT_EQ(c.requested_adjust(), 0);
  EXPECT_EQ(c.hits(), 1u);
  EXPECT_EQ(c.misses(), 2u);
  GPUALLOC_ASSERT_OK(c.Validate());
}

TEST(FrontCacheRecords, EvictsOldestFirstOverBudgetAndPastTheAgeBound) {
  FrontCache c(1024, 1000);
  c.Adopt(0x1000, 512, 512);
  c.Adopt(0x2000, 512, 512);
  EXPECT_FALSE(c.NeedsEviction());
  c.Adopt(0x3000, 256, 256);  // 1280 bytes > 1024
  ASSERT_TRUE(c.NeedsEviction());
  const auto e = c.Evict();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->address, 0x1000u);  // the oldest, from under 0x2000
  EXPECT_FALSE(c.NeedsEviction());
  GPUALLOC_ASSERT_OK(c.Validate());
  // Age: 1000 operations later the oldest must go.
  FrontCache aged(1 << 20, 10);
  aged.Adopt(0x1000, 512, 512);
  for (int i = 0; i < 11; ++i) (void)aged.Take(256, 256);
  EXPECT_TRUE(aged.NeedsEviction());
  EXPECT_EQ(aged.Evict()->address, 0x1000u);
  EXPECT_TRUE(aged.empty());
  GPUALLOC_ASSERT_OK(aged.Validate());
}

TEST(FrontCacheRecords, ForgetsLiveBlocksOnly) {
  FrontCache c(1 << 20, 1000);
  c.Adopt(0x1000, 512, 100);
  EXPECT_FALSE(c.Forget(0x1000).has_value());  // cached, not live
  ASSERT_EQ(c.Take(512, 200), 0x1000u);
  const auto gone = c.Forget(0x1000);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->requested, 200u);
  EXPECT_EQ(gone->core_requested, 100u);
  EXPECT_FALSE(c.Owns(0x1000));
  EXPECT_EQ(c.requested_adjust(), 0);
  GPUALLOC_ASSERT_OK(c.Validate());
}

Options FrontOptions(bool preallocate = true) {
  Options o;
  o.preallocate = preallocate;
  o.memory_limit = 64 * kMiB;
  o.front_cache = 4 * kMiB;
  return o;
}

// A loop that allocates the same sizes every step.
void Step(Allocator& a, Stream s = Stream()) {
  std::vector<void*> live;
  for (std::size_t bytes : {1000, 5000, 70000, 1000, 300000}) {
    auto p = a.Allocate(bytes, s);
    ASSERT_TRUE(p.ok()) << p.status();
    live.push_back(*p);
  }
  for (void* p : live) GPUALLOC_ASSERT_OK(a.Deallocate(p, s));
}

TEST(FrontCaches, ARepeatedStepIsServedByTheCacheWithExactFigures) {
  auto sim = MakeSim(256 * kMiB);
  auto a = MakeAllocator(FrontOptions(), sim);
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 10; ++i) Step(*a);
  const Stats s = a->GetStats();
  EXPECT_EQ(s.num_allocs, 50u);
  // The first two steps fill the cache; later, every block but the last
  // (freed next to free memory, which the BFC merges at once) is a hit.
  EXPECT_GE(s.front_cache_hits, 28u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_requested, 0u);
  EXPECT_EQ(s.peak_bytes_requested, 1000u + 5000 + 70000 + 1000 + 300000);
  EXPECT_GT(s.front_cache_bytes, 0u);
  GPUALLOC_ASSERT_OK(a->Validate());
  // Trim returns the cached blocks to the BFC (and the device).
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().front_cache_bytes, 0u);
  GPUALLOC_ASSERT_OK(a->Validate());
}

TEST(FrontCaches, ASecondFreeOfACachedBlockIsRefused) {
  auto a = MakeAllocator(FrontOptions(), MakeSim(256 * kMiB));
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 3; ++i) Step(*a);
  auto p = a->Allocate(1000);
  ASSERT_TRUE(p.ok());
  GPUALLOC_ASSERT_OK(a->Deallocate(*p));
  const absl::Status twice = a->Deallocate(*p);
  EXPECT_EQ(twice.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.message(), HasSubstr("already free"));
  GPUALLOC_ASSERT_OK(a->Validate());
}

TEST(FrontCaches, ABlockFreedOnAnotherStreamGoesToTheCore) {
  auto sim = MakeSim(256 * kMiB);
  auto a = MakeAllocator(FrontOptions(), sim);
  ASSERT_NE(a, nullptr);
  const Stream s1(1);
  const Stream s2(2);
  for (int i = 0; i < 3; ++i) Step(*a, s1);
  auto p = a->Allocate(1000, s1);  // a hit: the front's block
  ASSERT_TRUE(p.ok());
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, s2));
  GPUALLOC_ASSERT_OK(a->Validate());
  EXPECT_EQ(a->GetStats().bytes_in_use, 0u);
  // RecordStream takes a block out of its front too.
  auto q = a->Allocate(1000, s1);
  ASSERT_TRUE(q.ok());
  GPUALLOC_ASSERT_OK(a->RecordStream(*q, s2));
  GPUALLOC_ASSERT_OK(a->Deallocate(*q, s1));
  GPUALLOC_ASSERT_OK(a->Validate());
  EXPECT_EQ(a->GetStats().bytes_requested, 0u);
  EXPECT_EQ(sim->hazards(), 0u);
}

TEST(FrontCaches, NoGrowthWhileTheCacheHoldsMemoryThatWouldServe) {
  // Growing on demand: a request that fits only once the cached blocks are
  // merged back takes them instead of new memory.
  auto sim = MakeSim(256 * kMiB);
  Options o = FrontOptions(/*preallocate=*/false);
  o.front_cache = 64 * kMiB;
  auto a = MakeAllocator(o, sim);
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 3; ++i) Step(*a);
  const std::uint64_t reserved = a->GetStats().bytes_reserved;
  ASSERT_GT(a->GetStats().front_cache_bytes, 70000u);
  auto p = a->Allocate(reserved);  // the whole region, cached blocks too
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(a->GetStats().bytes_reserved, reserved);
  EXPECT_EQ(a->GetStats().front_cache_bytes, 0u);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p));
  GPUALLOC_ASSERT_OK(a->Validate());
}

TEST(FrontCaches, APoolTurnsThemOffAndKeepsTheFigures) {
  auto a = MakeAllocator(FrontOptions(), MakeSim(256 * kMiB));
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 3; ++i) Step(*a);
  auto live = a->Allocate(5000);  // a hit, live across the switch
  ASSERT_TRUE(live.ok());
  const Stats before = a->GetStats();
  auto pool = a->CreatePool();
  ASSERT_TRUE(pool.ok()) << pool.status();
  const Stats after = a->GetStats();
  EXPECT_EQ(after.front_cache_bytes, 0u);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.bytes_requested, before.bytes_requested);
  EXPECT_EQ(after.peak_bytes_requested, before.peak_bytes_requested);
  GPUALLOC_ASSERT_OK(a->Deallocate(*live));
  EXPECT_EQ(a->GetStats().bytes_requested, 0u);
  GPUALLOC_ASSERT_OK(a->Validate());
}

// Each front keeps its own figures, so that hits on different streams share
// no cache line: with several streams the peaks fold each front's largest
// change, which may have come at different moments. They never fall below the
// true peak and run above it by at most what the fronts cached; the present
// figures stay exact. Two streams take turns with whole steps here, so the
// true peak is one step's bytes.
TEST(FrontCaches, PeaksWithSeveralStreamsAreBoundedAbove) {
  auto a = MakeAllocator(FrontOptions(), MakeSim(256 * kMiB));
  ASSERT_NE(a, nullptr);
  constexpr std::uint64_t kStepRequested = 1000 + 5000 + 70000 + 1000 + 300000;
  for (int i = 0; i < 20; ++i) {
    Step(*a, Stream(1));
    Step(*a, Stream(2));
  }
  const Stats s = a->GetStats();
  EXPECT_GT(s.front_cache_hits, 60u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_requested, 0u);
  EXPECT_GE(s.peak_bytes_requested, kStepRequested);
  EXPECT_LE(s.peak_bytes_requested, 2 * kStepRequested);
  EXPECT_LE(s.peak_bytes_in_use, s.peak_bytes_requested + 2 * 4 * kMiB);
  GPUALLOC_ASSERT_OK(a->Validate());
}

TEST(FrontCaches, TwoThreadsOnTwoStreams) {
  auto sim = MakeSim(256 * kMiB);
  auto a = MakeAllocator(FrontOptions(), sim);
  ASSERT_NE(a, nullptr);
  const Stream s1(1);
  const Stream s2(2);
  auto run = [&](Stream s) {
    for (int i = 0; i < 300; ++i) Step(*a, s);
  };
  std::thread t1(run, s1), t2(run, s2);
  t1.join();
  t2.join();
  const Stats s = a->GetStats();
  EXPECT_EQ(s.num_allocs, 3000u);
  EXPECT_GT(s.front_cache_hits, 500u);
  EXPECT_EQ(s.bytes_requested, 0u);
  EXPECT_EQ(s.peak_bytes_requested % 1000, 0u);  // whole steps at the peak
  GPUALLOC_ASSERT_OK(a->Validate());
}

// A server with a stream per request: each stream is made, used for a few
// steps and released. Released streams give their front back, so every
// request gets a front cache of its own however many came before.
TEST(FrontCaches, EveryStreamOfAStreamPerRequestProgramGetsHits) {
  auto sim = MakeSim(256 * kMiB);
  auto a = MakeAllocator(FrontOptions(), sim);
  ASSERT_NE(a, nullptr);
  for (int request = 0; request < 100; ++request) {
    const Stream s(0x1000 + request);
    const std::uint64_t hits = a->GetStats().front_cache_hits;
    for (int i = 0; i < 4; ++i) Step(*a, s);
    EXPECT_GT(a->GetStats().front_cache_hits, hits) << "request " << request;
    GPUALLOC_ASSERT_OK(a->ReleaseStream(s));
    sim->DestroyStream(s);
    GPUALLOC_ASSERT_OK(a->Validate());
  }
  const Stats s = a->GetStats();
  EXPECT_EQ(s.num_allocs, 100u * 4 * 5);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_requested, 0u);
  EXPECT_EQ(s.front_cache_bytes, 0u);  // released fronts hold nothing
  EXPECT_EQ(sim->hazards(), 0u);
}

// A program that uses stream after stream without releasing them (each
// stream's work done, its cached blocks given back by a Trim): every
// stream's work gets a front, the slot of an idle one, and hits; not only
// the first 16 streams'.
TEST(FrontCaches, StreamsInUseGetTheSlotsOfIdleOnes) {
  auto sim = MakeSim(256 * kMiB);
  auto a = MakeAllocator(FrontOptions(), sim);
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 24; ++i) {
    const Stream s(0x100 + i);
    const std::uint64_t hits = a->GetStats().front_cache_hits;
    for (int k = 0; k < 4; ++k) Step(*a, s);
    EXPECT_GT(a->GetStats().front_cache_hits, hits) << "stream " << i;
    GPUALLOC_ASSERT_OK(a->Trim());
    GPUALLOC_ASSERT_OK(a->Validate());
  }
  const Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_requested, 0u);
  EXPECT_EQ(sim->hazards(), 0u);
}

// Blocks of `bytes` freed on `s` in a loop: the bytes its front then holds.
std::uint64_t CachedAfterLoop(Allocator& a, Stream s, std::uint64_t bytes) {
  for (int i = 0; i < 4; ++i) {
    std::vector<void*> live;
    for (int k = 0; k < 3; ++k) {
      auto p = a.Allocate(bytes, s);
      EXPECT_TRUE(p.ok()) << p.status();
      if (p.ok()) live.push_back(*p);
    }
    // Each block is freed while its neighbours are in use (a block next to
    // free memory is merged, not cached).
    auto guard = a.Allocate(bytes, s);
    EXPECT_TRUE(guard.ok());
    for (void* p : live) EXPECT_TRUE(a.Deallocate(p, s).ok());
    if (guard.ok()) {
      EXPECT_TRUE(a.Deallocate(*guard, s).ok());
    }
  }
  return a.GetStats().front_cache_bytes;
}

// The fronts share their total budget (4x front_cache) among the streams
// that are alive: released streams take no share.
TEST(FrontCaches, ReleasedStreamsTakeNoShareOfTheBudget) {
  Options o = FrontOptions();
  o.front_cache = kMiB;
  constexpr std::uint64_t kBlock =
      200 * 1024;  // 3 fit in 1 MiB, not in 256 KiB
  auto fresh = MakeAllocator(o, MakeSim(256 * kMiB));
  ASSERT_NE(fresh, nullptr);
  const std::uint64_t alone = CachedAfterLoop(*fresh, Stream(7), kBlock);
  EXPECT_GE(alone, 2 * kBlock);

  auto sim = MakeSim(256 * kMiB);
  auto a = MakeAllocator(o, sim);
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 15; ++i) {
    const Stream s(0x100 + i);
    Step(*a, s);
    Step(*a, s);
    GPUALLOC_ASSERT_OK(a->ReleaseStream(s));
  }
  // (With the 15 released fronts sharing, the budget was 1/16 of the total:
  // 256 KiB, one block.)
  EXPECT_GE(CachedAfterLoop(*a, Stream(7), kBlock), 2 * kBlock);
  GPUALLOC_ASSERT_OK(a->Validate());
}

// Streams made and released by some threads while others allocate on
// streams that live throughout (run under ThreadSanitizer in CI): fronts are
// looked up without the global lock while their slots are reused.
TEST(FrontCaches, ThreadsReleasingStreamsWhileOthersHitTheirCaches) {
  auto sim = MakeSim(256 * kMiB);
  auto a = MakeAllocator(FrontOptions(), sim);
  ASSERT_NE(a, nullptr);
  auto steady = [&](Stream s) {
    for (int i = 0; i < 200; ++i) Step(*a, s);
  };
  auto churn = [&](std::uintptr_t first) {
    for (int i = 0; i < 40; ++i) {
      const Stream s(first + static_cast<std::uintptr_t>(i));
      Step(*a, s);
      Step(*a, s);
      EXPECT_TRUE(a->ReleaseStream(s).ok());
    }
  };
  std::thread t1(steady, Stream(1)), t2(steady, Stream(2));
  std::thread t3(churn, 0x1000), t4(churn, 0x2000);
  t1.join();
  t2.join();
  t3.join();
  t4.join();
  const Stats s = a->GetStats();
  EXPECT_EQ(s.num_allocs, (2 * 200 + 2 * 40 * 2) * 5u);
  EXPECT_GT(s.front_cache_hits, 0u);
  EXPECT_EQ(s.bytes_requested, 0u);
  GPUALLOC_ASSERT_OK(a->Validate());
}

}  // namespace
}  // namespace gpualloc
