// SPDX-License-Identifier: Apache-2.0
// tests/core/bfc_streams_test.cc: the BFC core across streams, with a scripted
// ReuseOracle: same-stream reuse at once, other streams only as the oracle
// allows, RecordStream, merges that keep each part's condition, the
// best_fit search, the candidate walk, and invariant I9 after every
// operation; random sequences against the shared shadow model
// (tests/core/shadow_model.h).
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "core/bfc/bfc.h"
#include "gtest/gtest.h"
#include "tests/core/shadow_model.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

using testing::kMiB;

constexpr DeviceAddress kBase = 0x10000000;
constexpr std::uintptr_t kS1 = 0x1001;
constexpr std::uintptr_t kS2 = 0x2002;
constexpr std::uintptr_t kS3 = 0x3003;

// Answers as the test scripts: per stream, the stamps below `complete_below`
// are complete; Prepare answers kWaited when `wait` is on, else kBlocked for
// incomplete work. Every Prepare call is logged.
class ScriptedOracle final : public ReuseOracle {
 public:
  bool KnownComplete(std::uintptr_t stream,
                     std::uint64_t stamp) const override {
    auto it = complete_below.find(stream);
    return it != complete_below.end() && stamp < it->second;
  }
  Verdict Prepare(std::uintptr_t from, std::uint64_t stamp, std::uintptr_t to,
                  Ask ask) override {
    calls.emplace_back(from, stamp, to);
    if (KnownComplete(from, stamp)) return Verdict::kReady;
    return wait && ask == Ask::kWait ? Verdict::kWaited : Verdict::kBlocked;
  }

  std::map<std::uintptr_t, std::uint64_t> complete_below;
  bool wait = false;
  // What `to` was made to wait for (Prepare with `wait`): (to, from) ->
  // stamp bound.
  std::map<std::pair<std::uintptr_t, std::uintptr_t>, std::uint64_t> waited;
  std::vector<std::tuple<std::uintptr_t, std::uint64_t, std::uintptr_t>> calls;
};

class BfcStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override { core_.AddRegion(kBase, 2 * kMiB); }
  void TearDown() override {
    EXPECT_TRUE(core_.Validate().ok()) << core_.Validate();
  }

  // With oracle_.wait, as the slow path asks when memory is short (the
  // oracle may make the stream wait).
  std::optional<DeviceAddress> Alloc(std::uint64_t size, std::uintptr_t stream,
                                     bool with_oracle = true) {
    auto a = core_.Allocate(
        size, size, 256, stream, with_oracle ? &oracle_ : nullptr,
        oracle_.wait ? BfcCore::Search::kMayWait : BfcCore::Search::kFast);
    EXPECT_TRUE(core_.Validate().ok()) << core_.Validate();
    return a;
  }
  void Free(DeviceAddress a, std::uintptr_t stream, std::uint64_t stamp = 0) {
    EXPECT_TRUE(core_.Deallocate(a, stream, stamp, &oracle_).ok());
    EXPECT_TRUE(core_.Validate().ok()) << core_.Validate();
  }
  // Fills the region's tail so that only freed chunks can serve requests.
  void FillTail() {
    const std::uint64_t rest = core_.LargestFreeBlock();
    ASSERT_TRUE(Alloc(rest, kS3).has_value());
  }

  BfcCore core_{BfcConfig{256, 0}};
  ScriptedOracle oracle_;
};

TEST_F(BfcStreamsTest, SameStreamReusesAtOnceWithoutAsking) {
  const DeviceAddress a = *Alloc(4096, kS1);
  Free(a, kS1, 7);
  EXPECT_EQ(Alloc(4096, kS1), a);
  EXPECT_TRUE(oracle_.calls.empty());
}

TEST_F(BfcStreamsTest, OtherStreamWaitsForCompletion) {
  const DeviceAddress a = *Alloc(4096, kS1);
  const DeviceAddress guard = *Alloc(256, kS1);  // keeps `a` from merging
  FillTail();
  Free(a, kS1, 5);
  // Work queued on s1 before the free may still run: s2 must not get it.
  EXPECT_FALSE(Alloc(4096, kS2).has_value());
  ASSERT_EQ(oracle_.calls.size(), 1u);
  EXPECT_EQ(oracle_.calls[0], std::make_tuple(kS1, std::uint64_t{5}, kS2));
  // Once the stream's work up to the free completed, it may.
  oracle_.complete_below[kS1] = 6;
  EXPECT_EQ(Alloc(4096, kS2), a);
  (void)guard;
}

TEST_F(BfcStreamsTest, NoOracleNeverCrossesStreams) {
  const DeviceAddress a = *Alloc(4096, kS1);
  FillTail();
  Free(a, kS1, 0);
  EXPECT_FALSE(Alloc(4096, kS2, /*with_oracle=*/false).has_value());
  EXPECT_EQ(Alloc(4096, kS1, /*with_oracle=*/false), a);
}

TEST_F(BfcStreamsTest, CompletedChunkBecomesCleanForEveryStream) {
  const DeviceAddress a = *Alloc(8192, kS1);
  FillTail();
  Free(a, kS1, 1);
  oracle_.complete_below[kS1] = 2;
  EXPECT_EQ(Alloc(4096, kS2), a);  // asks once; the rest of `a` turns clean
  oracle_.calls.clear();
  oracle_.complete_below.clear();  // the oracle forgets: no need to ask again
  EXPECT_EQ(Alloc(4096, kS3), a + 4096);
  EXPECT_TRUE(oracle_.calls.empty());
}

TEST_F(BfcStreamsTest, StreamWaitPolicyHandsOutAndKeepsTheRestFenced) {
  const DeviceAddress a = *Alloc(8192, kS1);
  FillTail();
  Free(a, kS1, 3);
  oracle_.wait = true;
  EXPECT_EQ(Alloc(4096, kS2), a);  // s2 was made to wait
  // The rest is still fenced for every other stream: s3 asks again.
  oracle_.calls.clear();
  EXPECT_EQ(Alloc(4096, kS3), a + 4096);
  ASSERT_EQ(oracle_.calls.size(), 1u);
  EXPECT_EQ(std::get<2>(oracle_.calls[0]), kS3);
}

TEST_F(BfcStreamsTest, RecordStreamFencesTheFreeingStreamToo) {
  const DeviceAddress a = *Alloc(4096, kS1);
  const DeviceAddress guard = *Alloc(256, kS1);
  FillTail();
  ASSERT_TRUE(core_.RecordStream(a, kS2).ok());
  ASSERT_TRUE(core_.Validate().ok());
  Free(a, kS1, 4);
  // Reuse on s1 itself must wait for s2's work.
  EXPECT_FALSE(Alloc(4096, kS1).has_value());
  ASSERT_EQ(oracle_.calls.size(), 1u);
  EXPECT_EQ(oracle_.calls[0], std::make_tuple(kS2, std::uint64_t{4}, kS1));
  // And on s2 it must wait for s1's.
  oracle_.calls.clear();
  EXPECT_FALSE(Alloc(4096, kS2).has_value());
  ASSERT_EQ(oracle_.calls.size(), 1u);
  EXPECT_EQ(oracle_.calls[0], std::make_tuple(kS1, std::uint64_t{4}, kS2));
  oracle_.complete_below[kS2] = 5;
  EXPECT_EQ(Alloc(4096, kS1), a);
  (void)guard;
}

TEST_F(BfcStreamsTest, RecordStreamOfTheFreeingStreamAddsNothing) {
  const DeviceAddress a = *Alloc(4096, kS1);
  FillTail();
  ASSERT_TRUE(core_.RecordStream(a, kS1).ok());
  Free(a, kS1, 0);
  EXPECT_EQ(core_.num_condition_sets(), 0u);  // one stream: no set
  EXPECT_EQ(Alloc(4096, kS1), a);
  EXPECT_TRUE(oracle_.calls.empty());
}

TEST_F(BfcStreamsTest, RecordStreamOnBadPointersNamesThem) {
  const DeviceAddress a = *Alloc(4096, kS1);
  absl::Status interior = core_.RecordStream(a + 256, kS2);
  EXPECT_TRUE(absl::IsInvalidArgument(interior)) << interior;
  EXPECT_NE(interior.message().find("RecordStream"), std::string::npos);
  Free(a, kS1);
  absl::Status freed = core_.RecordStream(a, kS2);
  EXPECT_TRUE(absl::IsFailedPrecondition(freed)) << freed;
  absl::Status stray = core_.RecordStream(0x1234, kS2);
  EXPECT_TRUE(absl::IsInvalidArgument(stray)) << stray;
  EXPECT_EQ(core_.num_condition_sets(), 0u);
}

// Free neighbours merge whatever stream freed them, each part keeping its
// condition: each stream takes its own part at once, and bytes over another
// stream's part wait for that stream's work.
TEST_F(BfcStreamsTest, PiecesFreedOnDifferentStreamsMergeKeepingTheirParts) {
  const DeviceAddress a = *Alloc(4096, kS1);
  const DeviceAddress b = *Alloc(4096, kS2);
  const DeviceAddress guard = *Alloc(256, kS3);
  FillTail();
  Free(a, kS1, 2);
  Free(b, kS2, 3);  // next to a: one chunk, two parts
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_EQ(core_.num_condition_maps(), 1u);
  EXPECT_EQ(core_.LargestFreeBlock(), 8192u);
  // Each stream reuses its own part at once, without asking.
  EXPECT_EQ(Alloc(4096, kS2), b);
  EXPECT_EQ(Alloc(4096, kS1), a);
  EXPECT_TRUE(oracle_.calls.empty());
  EXPECT_EQ(core_.num_condition_maps(), 0u);
  Free(a, kS1, 4);
  Free(b, kS2, 5);
  // Nobody gets 8 KiB while either part's work may run.
  EXPECT_FALSE(Alloc(8192, kS3).has_value());
  oracle_.complete_below[kS1] = 5;
  oracle_.complete_below[kS2] = 6;
  // Once both are known complete, settling leaves one clean chunk.
  EXPECT_EQ(core_.Settle(oracle_), 1u);
  ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
  EXPECT_EQ(core_.num_condition_maps(), 0u);
  oracle_.complete_below.clear();
  oracle_.calls.clear();
  EXPECT_EQ(Alloc(8192, kS3), a);
  EXPECT_TRUE(oracle_.calls.empty());
  (void)guard;
}

// Two frees of one stream with different stamps keep their own parts:
// giving the older bytes the later stamp would make other streams wait for
// the later free's work before using them.
TEST_F(BfcStreamsTest, FreesOfOneStreamWithDifferentStampsKeepTheirParts) {
  const DeviceAddress a = *Alloc(4096, kS1);
  const DeviceAddress b = *Alloc(4096, kS1);
  ASSERT_TRUE(Alloc(256, kS2).has_value());  // a second stream was seen
  FillTail();
  Free(a, kS1, 2);
  Free(b, kS1, 9);
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_EQ(core_.num_condition_maps(), 1u);
  GPUALLOC_ASSERT_OK(core_.Validate());
  oracle_.complete_below[kS1] = 9;  // the first free done, the second not
  EXPECT_EQ(Alloc(4096, kS2), a);   // known complete: no question asked
  EXPECT_TRUE(oracle_.calls.empty());
  EXPECT_FALSE(Alloc(4096, kS2).has_value());
  ASSERT_FALSE(oracle_.calls.empty());
  EXPECT_EQ(oracle_.calls.back(), std::make_tuple(kS1, std::uint64_t{9}, kS2));
}
TEST_F(BfcStreamsTest, FreesOfOneStreamWithOneStampMerge) {
  const DeviceAddress a = *Alloc(4096, kS1);
  const DeviceAddress c = *Alloc(4096, kS1);
  ASSERT_TRUE(Alloc(4096, kS2).has_value());  // a second stream was seen
  FillTail();
  ASSERT_TRUE(core_.multi_stream());
  Free(a, kS1, 4);
  Free(c, kS1, 4);  // no event recorded in between: one condition
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  GPUALLOC_ASSERT_OK(core_.Validate());
}

TEST_F(BfcStreamsTest, FreeNextToPiecesKnownCompleteMergesWithThem) {
  const DeviceAddress a = *Alloc(4096, kS1);
  const DeviceAddress b = *Alloc(4096, kS2);
  const DeviceAddress c = *Alloc(4096, kS3);
  FillTail();
  Free(a, kS1, 2);
  Free(c, kS1, 2);
  oracle_.complete_below[kS1] = 3;
  // Freeing b: one chunk around it; b keeps its own condition (s2's).
  Free(b, kS2, 3);
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_EQ(Alloc(4096, kS3), a);  // known complete: no question asked
  EXPECT_EQ(Alloc(4096, kS2), b);  // its own
  EXPECT_EQ(Alloc(4096, kS3), c);
  EXPECT_TRUE(oracle_.calls.empty());
}
TEST_F(BfcStreamsTest, OneStreamMergesAsAnyBfcUntilASecondAppears) {
  const DeviceAddress a = *Alloc(4096, kS1);
  const DeviceAddress b = *Alloc(4096, kS1);
  Free(a, kS1, 0);
  Free(b, kS1, 0);
  EXPECT_FALSE(core_.multi_stream());
  EXPECT_EQ(core_.num_free_chunks(), 1u);  // the region is one chunk again
  // The switch: a second stream. What s1 never reached (above the highest
  // allocation's end) is clean again; s1's bytes stay s1's.
  EXPECT_EQ(Alloc(4096, kS2), b + 4096);
  EXPECT_TRUE(core_.multi_stream());
  EXPECT_TRUE(oracle_.calls.empty());
  EXPECT_EQ(Alloc(4096, kS1), a);
}

// The best_fit search takes the best fit whatever stream freed it, making
// the stream wait where its work is not known complete; the kFast search
// would look past it for memory usable at once.
TEST_F(BfcStreamsTest, BestFitSearchWaitsForTheBestFit) {
  const DeviceAddress small = *Alloc(4096, kS1);
  const DeviceAddress g1 = *Alloc(256, kS3);
  const DeviceAddress big = *Alloc(8192, kS2);
  const DeviceAddress g2 = *Alloc(256, kS3);
  FillTail();
  Free(small, kS1, 1);
  Free(big, kS2, 1);
  oracle_.wait = true;
  const auto fast =
      core_.Allocate(4096, 4096, 256, kS2, &oracle_, BfcCore::Search::kFast);
  EXPECT_EQ(fast, big);  // its own, at once
  EXPECT_TRUE(oracle_.calls.empty());
  Free(big, kS2, 2);
  const auto best =
      core_.Allocate(4096, 4096, 256, kS2, &oracle_, BfcCore::Search::kBestFit);
  EXPECT_EQ(best, small);  // s1's, after a wait
  ASSERT_EQ(oracle_.calls.size(), 1u);
  EXPECT_EQ(oracle_.calls[0], std::make_tuple(kS1, std::uint64_t{1}, kS2));
  ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
  (void)g1;
  (void)g2;
}
TEST_F(BfcStreamsTest, TwoStreamsTakingTurnsKeepTheirOwnBlocks) {
  // The pattern of a compute and a copy stream: allocate, free, on s1 and
  // s2 in turn, with work never observed complete.
  std::uint64_t stamp = 0;
  std::set<DeviceAddress> seen;
  for (int round = 0; round < 1000; ++round) {
    const std::uintptr_t s = round % 2 == 0 ? kS1 : kS2;
    const auto a = core_.Allocate(256, 256, 256, s, &oracle_);
    ASSERT_TRUE(a.has_value()) << "round " << round;
    seen.insert(*a);
    ASSERT_TRUE(core_.Deallocate(*a, s, ++stamp, &oracle_).ok());
  }
  ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
  EXPECT_EQ(seen.size(), 2u);  // one block per stream
  EXPECT_TRUE(oracle_.calls.empty());
}

// Fresh memory joined to a chunk whose work just became known complete:
// the seam merges, and the chunk, now clean, merges with its clean left
// neighbour too (gpualloc-soak found the join touching the merged-away
// record).
TEST_F(BfcStreamsTest, JoinMergesAcrossTheSeamAndOnToTheLeft) {
  const DeviceAddress x = *Alloc(kMiB, kS2);
  const DeviceAddress y = *Alloc(kMiB, kS1);
  Free(x, kS2, 1);
  oracle_.complete_below[kS2] = 2;  // x's work is done
  Free(y, kS1, 2);                  // one chunk: x's part and y's (s1's)
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  oracle_.complete_below[kS1] = 3;
  const RegionId added = core_.AddRegion(kBase + 2 * kMiB, 2 * kMiB);
  core_.JoinRegions(*core_.RegionAt(kBase), added, &oracle_);
  ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
  EXPECT_EQ(core_.num_free_chunks(), 1u);
  EXPECT_EQ(core_.LargestFreeBlock(), 4 * kMiB);
}

TEST_F(BfcStreamsTest, FreshMemoryJoinedToAFreedChunkStaysClean) {
  const DeviceAddress a = *Alloc(2 * kMiB, kS1);
  EXPECT_FALSE(Alloc(256, kS2).has_value());  // several streams now
  Free(a, kS1, 1);                            // the whole region is s1's
  // Fresh memory right after the region: one chunk with s1's, the fresh part
  // clean and usable by any stream at once.
  const RegionId added = core_.AddRegion(kBase + 2 * kMiB, 2 * kMiB);
  core_.JoinRegions(*core_.RegionAt(kBase), added, &oracle_);
  ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
  // s3 may use the fresh bytes at the end, not s1's in front of them.
  EXPECT_EQ(core_.region_edges(*core_.RegionAt(kBase), kS3, oracle_).free_tail,
            4 * kMiB - 2 * kMiB);
  EXPECT_EQ(core_.region_edges(*core_.RegionAt(kBase), kS1, oracle_).free_tail,
            4 * kMiB);
  oracle_.calls.clear();
  EXPECT_EQ(Alloc(2 * kMiB, kS3), kBase + 2 * kMiB);
  EXPECT_TRUE(oracle_.calls.empty());
}

TEST_F(BfcStreamsTest, BlockedBestFitFallsBackToTheNextFit) {
  const DeviceAddress small = *Alloc(4096, kS1);
  const DeviceAddress g1 = *Alloc(256, kS1);
  const DeviceAddress big = *Alloc(8192, kS2);
  const DeviceAddress g2 = *Alloc(256, kS1);
  FillTail();
  Free(small, kS1, 1);  // the best fit for 4 KiB, but s1's
  Free(big, kS2, 1);    // the next fit
  // On s2, the best fit is blocked: the next fit serves.
  EXPECT_EQ(Alloc(4096, kS2), big);
  (void)g1;
  (void)g2;
}

TEST_F(BfcStreamsTest, CandidateWalkIsBounded) {
  // More blocked chunks than the walk visits, then a usable one.
  std::vector<DeviceAddress> blocked;
  for (int i = 0; i < BfcCore::kMaxCrossStreamCandidates + 1; ++i) {
    blocked.push_back(*Alloc(4096, kS1));
    (void)*Alloc(256, kS1);  // separators
  }
  const DeviceAddress usable = *Alloc(4096, kS2);
  (void)*Alloc(256, kS1);
  FillTail();
  for (DeviceAddress a : blocked) Free(a, kS1, 0);
  Free(usable, kS2, 0);
  // The usable chunk is last in best-fit order (highest address): not found.
  EXPECT_FALSE(Alloc(4096, kS2).has_value());
  EXPECT_EQ(oracle_.calls.size(),
            static_cast<std::size_t>(BfcCore::kMaxCrossStreamCandidates));
}

TEST_F(BfcStreamsTest, PendingStreamsNamesOtherStreamsNotYetComplete) {
  const DeviceAddress a = *Alloc(4096, kS1);
  const DeviceAddress g1 = *Alloc(256, kS3);
  const DeviceAddress b = *Alloc(4096, kS2);
  const DeviceAddress g2 = *Alloc(256, kS3);
  Free(a, kS1, 1);
  Free(b, kS2, 1);
  EXPECT_EQ(core_.PendingStreams(oracle_, kS1),
            std::vector<std::uintptr_t>{kS2});
  auto both = core_.PendingStreams(oracle_, kS3);
  EXPECT_EQ(std::set<std::uintptr_t>(both.begin(), both.end()),
            (std::set<std::uintptr_t>{kS1, kS2}));
  oracle_.complete_below[kS2] = 2;
  EXPECT_EQ(core_.PendingStreams(oracle_, kS3),
            std::vector<std::uintptr_t>{kS1});
  (void)g1;
  (void)g2;
}

TEST_F(BfcStreamsTest, AlignmentPaddingKeepsTheCondition) {
  (void)*Alloc(256, kS3);  // so that the freed chunk starts misaligned
  const DeviceAddress a = *Alloc(64 * 1024, kS1);
  const DeviceAddress guard = *Alloc(256, kS3);
  FillTail();
  ASSERT_TRUE(core_.RecordStream(a, kS2).ok());
  Free(a, kS1, 1);  // fenced by s1 and s2: a set
  EXPECT_EQ(core_.num_condition_sets(), 1u);
  oracle_.wait = true;
  // Aligned inside the chunk: the padding in front stays free and keeps
  // both conditions (a second fence set).
  auto c = core_.Allocate(4096, 4096, 32 * 1024, kS3, &oracle_,
                          BfcCore::Search::kMayWait);
  ASSERT_TRUE(c.has_value());
  ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
  EXPECT_EQ(core_.num_condition_sets(), 2u);
  (void)guard;
}

// Random operations on three streams with a scripted oracle; Validate after
// each one, and every hand-out checked against a shadow of what each stream
// freed and when.
TEST_F(BfcStreamsTest, RandomMultiStreamSequencesKeepInvariantsAndOrder) {
  const std::uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  const std::uintptr_t streams[] = {kS1, kS2, kS3};
  struct Live {
    DeviceAddress address;
    std::uint64_t size;
    std::set<std::uintptr_t> users;
  };
  std::vector<Live> live;
  // The shadow model: live chunks, and freed byte ranges with the (stream,
  // stamp) conditions of their frees.
  testing::ShadowModel shadow;
  std::uint64_t stamp = 0;
  for (int op = 0; op < 4000; ++op) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 4 || live.empty()) {
      const std::uint64_t size = 256 * (1 + rng() % 64);
      const std::uintptr_t s = streams[rng() % 3];
      oracle_.wait = rng() % 2 == 0;
      oracle_.calls.clear();
      const BfcCore::Search search =
          oracle_.wait ? (rng() % 2 == 0 ? BfcCore::Search::kMayWait
                                         : BfcCore::Search::kBestFit)
                       : BfcCore::Search::kFast;
      auto a = core_.Allocate(size, size, 256, s, &oracle_, search);
      ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
      if (!a.has_value()) continue;
      // Every freed range it overlaps on another stream was complete, or the
      // oracle was asked about that stream (and said ready or waited). The
      // hand-out's bytes are no longer freed.
      for (const testing::ShadowFree& f : shadow.TakeFreed(*a, size)) {
        if (f.stream == s || oracle_.KnownComplete(f.stream, f.stamp)) {
          continue;
        }
        bool asked = false;
        for (const auto& [from, st, to] : oracle_.calls) {
          asked |= from == f.stream && st >= f.stamp && to == s;
        }
        ASSERT_TRUE(asked && oracle_.wait)
            << "op " << op << ": chunk at " << *a << " handed to stream " << s
            << " while stream " << f.stream << "'s work (stamp " << f.stamp
            << ") may use it";
      }
      GPUALLOC_ASSERT_OK(shadow.Add(*a, size, 256, s));
      live.push_back({*a, size, {}});
    } else if (what < 5) {
      Live& l = live[rng() % live.size()];
      const std::uintptr_t s = streams[rng() % 3];
      ASSERT_TRUE(core_.RecordStream(l.address, s).ok());
      l.users.insert(s);
    } else if (what < 6) {
      // Streams make progress; now and then the slow path settles.
      oracle_.complete_below[streams[rng() % 3]] = stamp;
      ++stamp;
      if (rng() % 4 == 0) {
        core_.Settle(oracle_);
        ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
      }
    } else {
      const std::size_t i = rng() % live.size();
      const Live l = live[i];
      live[i] = live.back();
      live.pop_back();
      const std::uintptr_t s = streams[rng() % 3];
      ASSERT_TRUE(core_.Deallocate(l.address, s, stamp, &oracle_).ok());
      ASSERT_TRUE(core_.Validate().ok()) << core_.Validate();
      GPUALLOC_ASSERT_OK(shadow.Remove(l.address));
      shadow.RecordFree({l.address, l.size, s, stamp});
      for (std::uintptr_t u : l.users) {
        shadow.RecordFree({l.address, l.size, u, stamp});
      }
      if (rng() % 4 == 0) ++stamp;
    }
  }
}

}  // namespace
}  // namespace gpualloc::core
