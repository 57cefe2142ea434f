// SPDX-License-Identifier: Apache-2.0
// tests/core/pending_frees_test.cc: the per-stream queues of fenced free
// chunks (core/bfc/pending_frees.h): order, what a pop settles, re-queueing
// from the settle callback, compaction of stale entries, renaming.
#include "core/bfc/pending_frees.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace gpualloc::core {
namespace {

constexpr std::uintptr_t kS1 = 0x1001;
constexpr std::uintptr_t kS2 = 0x2002;

auto AllPending() {
  return [](const PendingFrees::Entry&) { return true; };
}

TEST(PendingFreesTest, PopsTheFrontOfOneStreamWhileComplete) {
  PendingFrees q;
  q.Push(kS1, 1, 3, AllPending());
  q.Push(kS1, 2, 5, AllPending());
  q.Push(kS1, 3, 9, AllPending());
  q.Push(kS2, 4, 1, AllPending());
  std::vector<ChunkId> settled;
  const std::size_t popped = q.PopCompleted(
      kS1, [](std::uint64_t stamp) { return stamp < 6; },
      [&](const PendingFrees::Entry& e) { settled.push_back(e.id); });
  EXPECT_EQ(popped, 2u);
  EXPECT_EQ(settled, (std::vector<ChunkId>{1, 2}));
  EXPECT_EQ(q.size(), 2u);  // 3 on kS1 (stamp 9), 4 on kS2
  EXPECT_TRUE(q.HasStream(kS1));
  EXPECT_TRUE(q.HasStream(kS2));
}

TEST(PendingFreesTest, AnEmptiedQueueIsForgotten) {
  PendingFrees q;
  q.Push(kS1, 1, 0, AllPending());
  q.PopCompleted(
      kS1, [](std::uint64_t) { return true; },
      [](const PendingFrees::Entry&) {});
  EXPECT_FALSE(q.HasStream(kS1));
  EXPECT_EQ(q.num_streams(), 0u);
  EXPECT_EQ(q.size(), 0u);
  // Unknown streams pop nothing.
  EXPECT_EQ(q.PopCompleted(
                kS2, [](std::uint64_t) { return true; },
                [](const PendingFrees::Entry&) {}),
            0u);
}

TEST(PendingFreesTest, SettleMayQueueAgainWithoutLooping) {
  // A chunk whose condition also names a later stamp of the same stream is
  // queued again at the back: the pop stops there.
  PendingFrees q;
  q.Push(kS1, 7, 1, AllPending());
  int calls = 0;
  q.PopCompleted(
      kS1, [](std::uint64_t stamp) { return stamp < 5; },
      [&](const PendingFrees::Entry& e) {
        ++calls;
        q.Push(kS1, e.id, 8, AllPending());  // still waits for stamp 8
        q.Push(kS2, e.id, 2, AllPending());  // and for another stream
      });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_TRUE(q.HasStream(kS1));
  EXPECT_TRUE(q.HasStream(kS2));
}

TEST(PendingFreesTest, StaleEntriesAreCompactedAway) {
  // A stream whose work nobody asks about: its queue stays within twice its
  // live entries (plus the floor below which nothing is compacted).
  PendingFrees q;
  std::set<ChunkId> live;
  auto still = [&](const PendingFrees::Entry& e) { return live.count(e.id); };
  for (ChunkId id = 0; id < 10000; ++id) {
    live.insert(id);
    if (id >= 10) live.erase(id - 10);  // 10 live at any time
    q.Push(kS1, id, id, still);
    ASSERT_LE(q.size(), 2 * 64u) << "at " << id;
  }
}

TEST(PendingFreesTest, RenameMovesTheEntries) {
  PendingFrees q;
  q.Push(kS1, 1, 2, AllPending());
  q.Push(kS2, 2, 3, AllPending());
  q.Rename(kS1, kS2);
  EXPECT_FALSE(q.HasStream(kS1));
  std::vector<ChunkId> settled;
  q.PopCompleted(
      kS2, [](std::uint64_t) { return true; },
      [&](const PendingFrees::Entry& e) { settled.push_back(e.id); });
  EXPECT_EQ(settled, (std::vector<ChunkId>{2, 1}));
  EXPECT_EQ(q.size(), 0u);
}

}  // namespace
}  // namespace gpualloc::core
