// SPDX-License-Identifier: Apache-2.0
// tests/core/condition_test.cc: the condition table (core/streams/
// condition.h): sets, joins that keep each part's condition, splits, settling,
// what a stream may use without asking, windows, and every id given back.
#include "core/streams/condition.h"

#include <map>
#include <utility>

#include "gtest/gtest.h"

namespace gpualloc::core {
namespace {

constexpr std::uintptr_t kS1 = 0x10;
constexpr std::uintptr_t kS2 = 0x20;
constexpr std::uintptr_t kS3 = 0x30;

// Complete below a stamp per stream; `to` waited for `from` below a stamp.
class Known final : public ReuseOracle {
 public:
  bool KnownComplete(std::uintptr_t stream,
                     std::uint64_t stamp) const override {
    auto it = complete_below.find(stream);
    return it != complete_below.end() && stamp < it->second;
  }
  bool KnownOrdered(std::uintptr_t to, std::uintptr_t from,
                    std::uint64_t stamp) const override {
    if (to == from || KnownComplete(from, stamp)) return true;
    auto it = waited.find({to, from});
    return it != waited.end() && stamp < it->second;
  }
  Verdict Prepare(std::uintptr_t, std::uint64_t, std::uintptr_t, Ask) override {
    return Verdict::kBlocked;
  }
  std::map<std::uintptr_t, std::uint64_t> complete_below;
  std::map<std::pair<std::uintptr_t, std::uintptr_t>, std::uint64_t> waited;
};

ChunkCond Clean() { return ChunkCond(); }
ChunkCond On(std::uintptr_t stream, std::uint64_t stamp) {
  return ChunkCond{Cond::kStream, kNoCond, stream, stamp};
}

class ConditionTableTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Every test gives back what it made.
    EXPECT_EQ(table_.live_sets(), 0u);
    EXPECT_EQ(table_.live_maps(), 0u);
  }
  ChunkCond Set(std::initializer_list<StreamStamp> pairs) {
    const CondId id = table_.NewSet();
    for (const StreamStamp& p : pairs) table_.AddPair(id, p.stream, p.stamp);
    return ChunkCond{Cond::kSet, id, 0, 0};
  }
  ConditionTable table_;
  Known known_;
};

TEST_F(ConditionTableTest, EqualConditionsJoinIntoOne) {
  ChunkCond c = table_.Join(On(kS1, 3), 100, On(kS1, 3), 50, /*solo=*/false);
  EXPECT_EQ(c.kind, Cond::kStream);
  EXPECT_EQ(table_.Join(Clean(), 10, Clean(), 10, false).kind, Cond::kClean);
  table_.Release(c);
}

TEST_F(ConditionTableTest, OneStreamJoinsKeepTheLaterStamp) {
  ChunkCond c = table_.Join(On(kS1, 3), 100, On(kS1, 7), 50, /*solo=*/true);
  EXPECT_EQ(c.kind, Cond::kStream);
  EXPECT_EQ(c.stamp, 7u);
  c = table_.Join(Clean(), 100, c, 150, /*solo=*/true);
  EXPECT_EQ(c.kind, Cond::kStream);
  table_.Release(c);
}

TEST_F(ConditionTableTest, DifferentConditionsJoinIntoAMapOfParts) {
  ChunkCond c = table_.Join(On(kS1, 3), 100, Clean(), 200, /*solo=*/false);
  ASSERT_EQ(c.kind, Cond::kMap);
  EXPECT_EQ(table_.CheckMap(c, 300), "");
  c = table_.Join(c, 300, On(kS2, 4), 50, false);
  ASSERT_EQ(c.kind, Cond::kMap);
  ASSERT_EQ(table_.Parts(c).size(), 3u);
  EXPECT_EQ(table_.Parts(c)[0].bytes, 100u);
  EXPECT_EQ(table_.Parts(c)[1].cond.kind, Cond::kClean);
  EXPECT_EQ(table_.Parts(c)[2].cond.stream, kS2);
  EXPECT_EQ(table_.CheckMap(c, 350), "");
  // A map joined with a map: the parts, neighbours merged where equal.
  ChunkCond d = table_.Join(On(kS2, 4), 10, On(kS3, 1), 10, false);
  c = table_.Join(c, 350, d, 20, false);
  ASSERT_EQ(table_.Parts(c).size(), 4u);  // (s2@4 merged: 60 bytes)
  EXPECT_EQ(table_.Parts(c)[2].bytes, 60u);
  EXPECT_EQ(table_.CheckMap(c, 370), "");
  EXPECT_EQ(table_.live_maps(), 1u);
  table_.Release(c);
}

TEST_F(ConditionTableTest, SplitsCutPartsAndCopySets) {
  ChunkCond c = table_.Join(Set({{kS1, 2}, {kS2, 2}}), 100, Clean(), 100,
                            /*solo=*/false);
  // A cut inside the set's part: both sides get it.
  auto [front, back] = table_.Split(c, 200, 40);
  EXPECT_EQ(front.kind, Cond::kSet);
  EXPECT_EQ(table_.Pairs(front.id).size(), 2u);
  ASSERT_EQ(back.kind, Cond::kMap);
  EXPECT_EQ(table_.CheckMap(back, 160), "");
  EXPECT_EQ(table_.live_sets(), 2u);
  // What is left once the front is handed out.
  back = table_.DropFront(back, 60);
  EXPECT_EQ(back.kind, Cond::kClean);
  table_.Release(front);
  table_.Release(back);
}

TEST_F(ConditionTableTest, SettlingDropsWhatIsKnownCompleteAndMerges) {
  ChunkCond c = table_.Join(On(kS1, 3), 100, On(kS2, 5), 100, false);
  c = table_.Join(c, 200, Set({{kS1, 4}, {kS2, 5}}), 100, false);
  known_.complete_below[kS1] = 10;
  EXPECT_TRUE(table_.Settle(c, known_));
  // [clean, s2@5, s2@5 (the set less s1)] -> [clean 100, s2@5 200]
  ASSERT_EQ(c.kind, Cond::kMap);
  ASSERT_EQ(table_.Parts(c).size(), 2u);
  EXPECT_EQ(table_.Parts(c)[1].bytes, 200u);
  EXPECT_FALSE(table_.Settle(c, known_));
  known_.complete_below[kS2] = 10;
  EXPECT_TRUE(table_.Settle(c, known_));
  EXPECT_EQ(c.kind, Cond::kClean);
}

TEST_F(ConditionTableTest, UsableNowAsksOnlyTheOverlappedParts) {
  ChunkCond c = table_.Join(On(kS1, 3), 100, On(kS2, 5), 100, false);
  EXPECT_TRUE(table_.UsableNow(c, 0, 100, kS1, known_));   // its own
  EXPECT_FALSE(table_.UsableNow(c, 0, 101, kS1, known_));  // s2's byte
  EXPECT_TRUE(table_.UsableNow(c, 100, 100, kS2, known_));
  EXPECT_FALSE(table_.UsableNow(c, 50, 100, kS3, known_));
  known_.waited[{kS3, kS1}] = 4;  // s3 waits for s1 already
  known_.waited[{kS3, kS2}] = 6;
  EXPECT_TRUE(table_.UsableNow(c, 50, 100, kS3, known_));
  table_.Release(c);
}

TEST_F(ConditionTableTest, WindowsAreTheTightestUsableRunAligned) {
  // [s1 96 | clean 160 | s2 256]: on s3 the only usable run is the clean
  // part; 128 bytes at 64-byte alignment of base 0x1000 start at 128 (96
  // rounded up), and 128 + 128 <= 256.
  ChunkCond c = table_.Join(On(kS1, 1), 96, Clean(), 160, false);
  c = table_.Join(c, 256, On(kS2, 1), 256, false);
  auto w = table_.BestUsableWindow(c, 0x1000, 512, 128, 64, kS3, known_);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->offset, 128u);
  EXPECT_EQ(w->run, 160u);
  EXPECT_FALSE(table_.BestUsableWindow(c, 0x1000, 512, 192, 64, kS3, known_));
  // s2 may use its own part too: one run [clean | s2] from 96 on.
  w = table_.BestUsableWindow(c, 0x1000, 512, 384, 64, kS2, known_);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->offset, 128u);
  EXPECT_EQ(w->run, 416u);
  EXPECT_EQ(table_.UsablePrefix(c, 512, kS1, known_), 256u);
  EXPECT_EQ(table_.UsableSuffix(c, 512, kS3, known_), 0u);
  EXPECT_EQ(table_.UsableSuffix(c, 512, kS2, known_), 416u);
  table_.Release(c);
  // The tightest run wins: [s3 64 | s1 100 | s3 32] for 32 bytes on s3
  // takes the 32-byte run, not the first.
  ChunkCond d = table_.Join(On(kS3, 1), 64, On(kS1, 1), 100, false);
  d = table_.Join(d, 164, On(kS3, 2), 32, false);
  w = table_.BestUsableWindow(d, 0, 196, 32, 4, kS3, known_);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->offset, 164u);
  EXPECT_EQ(w->run, 32u);
  table_.Release(d);
}

TEST_F(ConditionTableTest, RenamesMergePartsThatBecomeEqual) {
  ChunkCond c = table_.Join(On(kS1, 3), 100, On(kS2, 3), 100, false);
  table_.RenameStreams(c, [](std::uintptr_t& s) {
    if (s == kS2) s = kS1;
  });
  EXPECT_EQ(c.kind, Cond::kStream);
  EXPECT_EQ(c.stream, kS1);
  EXPECT_TRUE(table_.Names(c, kS1));
  EXPECT_FALSE(table_.Names(c, kS2));
}

TEST_F(ConditionTableTest, CheckMapNamesWhatIsWrong) {
  ChunkCond c = table_.Join(On(kS1, 3), 100, Clean(), 100, false);
  EXPECT_NE(table_.CheckMap(c, 300).find("sum to 200"), std::string::npos);
  table_.Release(c);
}

}  // namespace
}  // namespace gpualloc::core
