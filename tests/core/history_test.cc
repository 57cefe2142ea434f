// SPDX-License-Identifier: Apache-2.0
// The allocation history (Options::history, core/report/history.h): the ring
// buffer, the per-thread contexts, and what the BFC facade records.
#include "core/report/history.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeAllocator;
using testing::MakeSim;

std::vector<HistoryAction> Actions(const Snapshot& s) {
  std::vector<HistoryAction> out;
  for (const HistoryEvent& e : s.history) out.push_back(e.action);
  return out;
}

TEST(HistoryRing, KeepsTheLastEntriesOldestFirstAndCountsDrops) {
  core::History h(3);
  for (std::uint64_t i = 1; i <= 5; ++i)
    h.Record(HistoryAction::kAlloc, i * 256, i, 0);
  Snapshot s;
  h.AppendTo(&s);
  ASSERT_EQ(s.history.size(), 3u);
  EXPECT_EQ(s.history[0].address, 3u * 256);
  EXPECT_EQ(s.history[2].address, 5u * 256);
  EXPECT_EQ(s.history_recorded, 5u);
  EXPECT_EQ(s.history_dropped, 2u);
  EXPECT_LE(s.history[0].time_ns, s.history[2].time_ns);
}

// A large capacity costs memory as the ring fills, not at creation; a
// capacity that is no whole number of chunks wraps at its end.
TEST(HistoryRing, GrowsAsItFills) {
  core::History big(kMaxHistory);
  EXPECT_EQ(big.bytes_held(), 0u);
  big.Record(HistoryAction::kAlloc, 256, 1, 0);
  EXPECT_GT(big.bytes_held(), 0u);
  EXPECT_LE(big.bytes_held(), 256u * 1024);
  core::History h(5000);
  for (std::uint64_t i = 1; i <= 12000; ++i) {
    h.Record(HistoryAction::kAlloc, i, i, 0);
  }
  Snapshot s;
  h.AppendTo(&s);
  ASSERT_EQ(s.history.size(), 5000u);
  for (std::uint64_t n = 0; n < 5000; ++n) {
    ASSERT_EQ(s.history[n].address, 7001 + n) << n;
  }
  EXPECT_EQ(s.history_dropped, 7000u);
}

// The largest history, set and never used: the allocator does not make it
// up front (it took 640 MiB at creation).
TEST(AllocatorHistory, TheLargestHistoryCostsNothingUntilUsed) {
  const auto resident = [] {
    long pages = 0, rss = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
      std::fclose(f);
    }
    return static_cast<std::uint64_t>(rss) * 4096;
  };
  const std::uint64_t before = resident();
  Options o;
  o.history = kMaxHistory;
  auto a = CreateAllocator(o, MakeSim(std::uint64_t{1} << 30));
  ASSERT_TRUE(a.ok()) << a.status();
  auto p = (*a)->Allocate(1000);
  ASSERT_TRUE(p.ok());
  EXPECT_LT(resident(), before + 64 * testing::kMiB);
  GPUALLOC_EXPECT_OK((*a)->Deallocate(*p));
  EXPECT_GE((*a)->GetSnapshot().history.size(), 3u);
}

TEST(HistoryRing, NotYetFull) {
  core::History h(8);
  h.Record(HistoryAction::kSegmentAlloc, 1, 2, 3);
  Snapshot s;
  h.AppendTo(&s);
  ASSERT_EQ(s.history.size(), 1u);
  EXPECT_EQ(s.history[0].action, HistoryAction::kSegmentAlloc);
  EXPECT_EQ(s.history[0].stream, 3u);
  EXPECT_EQ(s.history_dropped, 0u);
}

TEST(HistoryContext, PerThreadInternedAndCleared) {
  core::History h(8);
  SetThreadContext("forward");
  h.Record(HistoryAction::kAlloc, 1, 1, 0);
  std::thread other([&] {
    EXPECT_EQ(core::CurrentContextId(), 0u);  // each thread its own
    SetThreadContext("optimizer.step");
  });
  other.join();
  const std::uint32_t forward = core::CurrentContextId();
  SetThreadContext("forward");  // the same text: the same id
  EXPECT_EQ(core::CurrentContextId(), forward);
  SetThreadContext("");
  h.Record(HistoryAction::kFreeRequested, 1, 1, 0);
  Snapshot s;
  h.AppendTo(&s);
  ASSERT_EQ(s.history.size(), 2u);
  EXPECT_EQ(s.history[0].context, "forward");
  EXPECT_EQ(s.history[1].context, "");
  EXPECT_EQ(core::ContextString(0), "");
  EXPECT_EQ(core::ContextString(UINT32_MAX), "");
}

TEST(HistoryActionNames, ArePyTorchs) {
  EXPECT_EQ(HistoryActionName(HistoryAction::kAlloc), "alloc");
  EXPECT_EQ(HistoryActionName(HistoryAction::kFreeRequested), "free_requested");
  EXPECT_EQ(HistoryActionName(HistoryAction::kFreeCompleted), "free_completed");
  EXPECT_EQ(HistoryActionName(HistoryAction::kSegmentAlloc), "segment_alloc");
  EXPECT_EQ(HistoryActionName(HistoryAction::kSegmentFree), "segment_free");
  EXPECT_EQ(HistoryActionName(HistoryAction::kSegmentMap), "segment_map");
  EXPECT_EQ(HistoryActionName(HistoryAction::kSegmentUnmap), "segment_unmap");
  EXPECT_EQ(HistoryActionName(HistoryAction::kOom), "oom");
}

Options Bfc(std::uint64_t history, Tristate expandable) {
  Options o;
  o.preallocate = false;
  o.expandable = expandable;
  o.memory_limit = std::uint64_t{64} << 20;
  o.history = history;
  return o;
}

TEST(AllocatorHistory, OffByDefaultAndEmpty) {
  auto a = MakeAllocator(Options(), MakeSim(std::uint64_t{1} << 30));
  ASSERT_NE(a, nullptr);
  void* p = *a->Allocate(1000);
  ASSERT_TRUE(a->Deallocate(p).ok());
  const Snapshot s = a->GetSnapshot();
  EXPECT_TRUE(s.history.empty());
  EXPECT_EQ(s.history_recorded, 0u);
}

TEST(AllocatorHistory, SeparateRegions) {
  auto a =
      MakeAllocator(Bfc(64, Tristate::kOff), MakeSim(std::uint64_t{1} << 30));
  ASSERT_NE(a, nullptr);
  SetThreadContext("layer1");
  void* p = *a->Allocate(1000, Stream(7));
  SetThreadContext("");
  ASSERT_TRUE(a->Deallocate(p, Stream(7)).ok());
  EXPECT_FALSE(a->Deallocate(p).ok());  // a second free records nothing
  ASSERT_TRUE(a->Trim().ok());
  const Snapshot s = a->GetSnapshot();
  EXPECT_THAT(
      Actions(s),
      ElementsAre(HistoryAction::kSegmentAlloc, HistoryAction::kAlloc,
                  HistoryAction::kFreeRequested, HistoryAction::kFreeCompleted,
                  HistoryAction::kSegmentFree));
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  EXPECT_EQ(s.history[1].address, address);
  EXPECT_EQ(s.history[1].size, 1000u);  // as asked
  EXPECT_EQ(s.history[1].stream, 7u);
  EXPECT_EQ(s.history[1].context, "layer1");
  EXPECT_EQ(s.history[2].address, address);
  EXPECT_EQ(s.history[2].size, 1024u);  // the chunk
  EXPECT_EQ(s.history[0].address, s.history[4].address);
  EXPECT_EQ(s.history[0].size, s.history[4].size);
}

TEST(AllocatorHistory, ExpandableRegionsMapAndUnmap) {
  auto a =
      MakeAllocator(Bfc(64, Tristate::kOn), MakeSim(std::uint64_t{1} << 30));
  ASSERT_NE(a, nullptr);
  void* p = *a->Allocate(3 << 20);
  ASSERT_TRUE(a->Deallocate(p).ok());
  ASSERT_TRUE(a->Trim().ok());
  const Snapshot s = a->GetSnapshot();
  ASSERT_GE(s.history.size(), 5u);
  EXPECT_EQ(s.history.front().action, HistoryAction::kSegmentMap);
  EXPECT_EQ(s.history.back().action, HistoryAction::kSegmentUnmap);
}

TEST(AllocatorHistory, OutOfMemoryAndPools) {
  auto a =
      MakeAllocator(Bfc(64, Tristate::kOff), MakeSim(std::uint64_t{1} << 30));
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->Allocate(std::uint64_t{1} << 29).ok());
  absl::StatusOr<PoolId> pool = a->CreatePool();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(a->BeginAllocateToPool(*pool, Stream(3)).ok());
  void* p = *a->Allocate(4096, Stream(3));
  ASSERT_TRUE(a->EndAllocateToPool(*pool).ok());
  ASSERT_TRUE(a->Deallocate(p, Stream(3)).ok());
  const Snapshot s = a->GetSnapshot();
  ASSERT_GE(s.history.size(), 4u);
  EXPECT_EQ(s.history[0].action, HistoryAction::kOom);
  EXPECT_EQ(s.history[0].size, std::uint64_t{1} << 29);
  EXPECT_EQ(s.history[0].address, std::uint64_t{64} << 20);  // all free
  const HistoryEvent& alloc = s.history[s.history.size() - 3];
  EXPECT_EQ(alloc.action, HistoryAction::kAlloc);
  EXPECT_EQ(alloc.address, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(s.history.back().action, HistoryAction::kFreeCompleted);
  EXPECT_EQ(s.history.back().size, 4096u);
}

TEST(AllocatorHistory, WrapsAtItsCapacity) {
  auto a =
      MakeAllocator(Bfc(4, Tristate::kOff), MakeSim(std::uint64_t{1} << 30));
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 10; ++i) {
    void* p = *a->Allocate(512);
    ASSERT_TRUE(a->Deallocate(p).ok());
  }
  const Snapshot s = a->GetSnapshot();
  EXPECT_EQ(s.history.size(), 4u);
  EXPECT_EQ(s.history_recorded, 31u);  // a segment, 10 allocs, 20 frees
  EXPECT_EQ(s.history_dropped, 27u);
}

TEST(AllocatorHistory, BoundedAndBfcOnly) {
  Options o = Bfc(kMaxHistory + 1, Tristate::kOff);
  auto c = CreateAllocator(o, MakeSim(std::uint64_t{1} << 30));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("Options.history"));
  for (AllocatorMode mode : {AllocatorMode::kPlatform, AllocatorMode::kAsync}) {
    o = Bfc(16, Tristate::kAuto);
    o.mode = mode;
    auto m = CreateAllocator(o, MakeSim(std::uint64_t{1} << 30));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr("Options.history"));
    EXPECT_THAT(m.status().message(),
                HasSubstr(std::string(AllocatorModeName(mode))));
  }
}

// Sleep gives a tag's mappings back (segment_unmap, as PyTorch's expandable
// segments record an unmap) and Wake maps them again (segment_map), so a
// trace shows the memory leaving and coming back.
TEST(AllocatorHistory, SleepUnmapsAndWakeMaps) {
  auto sim = MakeSim(std::uint64_t{1} << 30);
  auto a = MakeAllocator(Bfc(64, Tristate::kOn), sim);
  ASSERT_NE(a, nullptr);
  void* p = *a->Allocate(8 << 20, Stream(), 0, /*tag=*/5);
  const Snapshot before = a->GetSnapshot();
  ASSERT_TRUE(a->Sleep(5).ok());
  const Snapshot asleep = a->GetSnapshot();
  ASSERT_EQ(asleep.history.size(), before.history.size() + 1);
  const HistoryEvent& unmap = asleep.history.back();
  EXPECT_EQ(unmap.action, HistoryAction::kSegmentUnmap);
  EXPECT_EQ(unmap.address, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(unmap.size, std::uint64_t{8} << 20);
  ASSERT_TRUE(a->Wake(5).ok());
  const Snapshot awake = a->GetSnapshot();
  ASSERT_EQ(awake.history.size(), asleep.history.size() + 1);
  const HistoryEvent& map = awake.history.back();
  EXPECT_EQ(map.action, HistoryAction::kSegmentMap);
  EXPECT_EQ(map.address, unmap.address);
  EXPECT_EQ(map.size, unmap.size);

  // A sleep that fails half way and maps the first slab back records both.
  void* q = *a->Allocate(8 << 20, Stream(), 0, /*tag=*/5);
  sim->FailNthCall(SimOp::kUnmap, 2, absl::InternalError("injected unmap"));
  EXPECT_FALSE(a->Sleep(5).ok());
  const Snapshot failed = a->GetSnapshot();
  ASSERT_GE(failed.history.size(), 3u);
  const HistoryEvent* last = &failed.history[failed.history.size() - 2];
  EXPECT_EQ(last[0].action, HistoryAction::kSegmentUnmap);
  EXPECT_EQ(last[1].action, HistoryAction::kSegmentMap);
  EXPECT_EQ(last[0].address, last[1].address);
  EXPECT_EQ(last[0].size, last[1].size);
  EXPECT_EQ(a->GetStats().bytes_sleeping, 0u);
  ASSERT_TRUE(a->Deallocate(p).ok());
  ASSERT_TRUE(a->Deallocate(q).ok());
}

}  // namespace
}  // namespace gpualloc
