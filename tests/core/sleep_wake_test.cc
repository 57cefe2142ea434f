// SPDX-License-Identifier: Apache-2.0
// tests/core/sleep_wake_test.cc: tagged allocations, Sleep and Wake on the
// simulated device's host-backed virtual memory: what is released (the
// tag's granules, nothing else), that untagged memory keeps its content,
// that addresses survive and a backup restores the content, the errors, and
// that nothing changes on a failed call.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using testing::Addr;
using testing::kGiB;
using testing::kMiB;
using testing::MakeAllocator;
using testing::MakeSim;

constexpr std::uint64_t kGranule = 2 * kMiB;  // the H100 profile's

Options Expandable(bool preallocate) {
  Options o;
  o.preallocate = preallocate;
  o.memory_limit = 512 * kMiB;
  o.expandable = Tristate::kOn;
  return o;
}

// Fills `bytes` at `p` with a pattern derived from `seed`.
void Fill(void* p, std::uint64_t bytes, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::uint64_t i = 0; i < bytes; ++i) {
    b[i] = static_cast<unsigned char>((i * 131 + seed * 7 + 1) & 0xff);
  }
}
bool Holds(const void* p, std::uint64_t bytes, unsigned seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::uint64_t i = 0; i < bytes; ++i) {
    if (b[i] != static_cast<unsigned char>((i * 131 + seed * 7 + 1) & 0xff))
      return false;
  }
  return true;
}

struct Block {
  void* p = nullptr;
  std::uint64_t bytes = 0;
  Tag tag = 0;
  unsigned seed = 0;
};

// Untagged and tagged blocks interleaved, each filled with its pattern.
std::vector<Block> MakeBlocks(Allocator& a, SimBackend& sim) {
  const std::uint64_t sizes[] = {300 * 1024,    3 * kMiB,  1000,
                                 5 * kMiB + 17, 64 * 1024, 7 * kMiB};
  std::vector<Block> blocks;
  unsigned seed = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::uint64_t bytes : sizes) {
      for (Tag tag : {Tag{0}, Tag{1}, Tag{2}}) {
        // Each tag's work on a stream of its own.
        const Stream stream(1 + tag);
        auto p = a.Allocate(bytes, stream, 0, tag);
        EXPECT_TRUE(p.ok()) << p.status();
        if (!p.ok()) continue;
        Fill(*p, bytes, ++seed);
        sim.Use(stream, Addr(*p), bytes);
        blocks.push_back(Block{*p, bytes, tag, seed});
      }
    }
  }
  return blocks;
}

std::uint64_t TagBytesReserved(const Snapshot& s, Tag tag) {
  for (const PoolSnapshot& p : s.pools) {
    if (p.tag == tag) return p.bytes_reserved;
  }
  return 0;
}

class SleepWakeTest : public ::testing::TestWithParam<bool> {};

TEST_P(SleepWakeTest, ReleasesTheTagsGranulesAndKeepsEverythingElse) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(/*preallocate=*/GetParam()), sim);
  std::vector<Block> blocks = MakeBlocks(*a, *sim);
  GPUALLOC_ASSERT_OK(a->Validate());
  const Snapshot before = a->GetSnapshot();
  const std::uint64_t tag1 = TagBytesReserved(before, 1);
  std::uint64_t tag1_live = 0;
  for (const Block& b : blocks) tag1_live += b.tag == 1 ? b.bytes : 0;
  ASSERT_GT(tag1, 0u);
  EXPECT_EQ(tag1 % kGranule, 0u);
  // Granules of the tag's own: rounded up per block at most.
  EXPECT_LE(tag1, tag1_live + 18 * kGranule);
  const std::uint64_t physical = sim->physical_bytes();
  EXPECT_EQ(physical, before.stats.bytes_reserved);

  auto report = a->Sleep(1, /*backup=*/true);
  GPUALLOC_ASSERT_OK(report.status());
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(report->allocations, 18u);
  EXPECT_EQ(report->bytes_released, tag1);
  EXPECT_EQ(report->bytes_kept, 0u);
  EXPECT_GE(report->bytes_backed_up, tag1_live);
  EXPECT_EQ(sim->physical_bytes(), physical - tag1);
  const Stats asleep = a->GetStats();
  EXPECT_EQ(asleep.bytes_sleeping, tag1);
  EXPECT_EQ(asleep.bytes_reserved, physical - tag1);
  EXPECT_EQ(sim->mapped_bytes(), physical - tag1);
  // The sleeping addresses are not accessible; everything else keeps its
  // content.
  for (const Block& b : blocks) {
    EXPECT_EQ(sim->IsAccessible(Addr(b.p), b.bytes), b.tag != 1);
    if (b.tag != 1) {
      EXPECT_TRUE(Holds(b.p, b.bytes, b.seed)) << b.tag;
    }
  }

  // Memory given back is the rest's to use, and comes back for Wake.
  auto other = a->Allocate(16 * kMiB);
  GPUALLOC_ASSERT_OK(other.status());
  GPUALLOC_ASSERT_OK(a->Deallocate(*other));
  GPUALLOC_ASSERT_OK(a->Trim());

  GPUALLOC_ASSERT_OK(a->Wake(1));
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(a->GetStats().bytes_sleeping, 0u);
  for (const Block& b : blocks) {
    EXPECT_TRUE(sim->IsAccessible(Addr(b.p), b.bytes));
    EXPECT_TRUE(Holds(b.p, b.bytes, b.seed)) << "tag " << b.tag;
  }
  // Free everything; the tags' memory goes back with Trim.
  for (const Block& b : blocks) {
    GPUALLOC_EXPECT_OK(a->Deallocate(b.p, Stream(1 + b.tag)));
  }
  sim->CompleteAll();
  GPUALLOC_EXPECT_OK(a->Trim());
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(a->GetStats().bytes_in_use, 0u);
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_EQ(sim->access_violations(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Preallocate, SleepWakeTest, ::testing::Bool());

TEST(SleepWakeTest, AsleepTagRefusesAllocateFreeAndRecordStream) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto p = a->Allocate(kMiB, Stream(), 0, 7);
  GPUALLOC_ASSERT_OK(p.status());
  GPUALLOC_ASSERT_OK(a->Sleep(7).status());
  const Stats s = a->GetStats();
  auto again = a->Allocate(kMiB, Stream(), 0, 7);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("tag 7 is asleep"), std::string::npos)
      << again.status();
  absl::Status freed = a->Deallocate(*p);
  EXPECT_EQ(freed.code(), absl::StatusCode::kFailedPrecondition) << freed;
  EXPECT_NE(freed.message().find("asleep"), std::string::npos) << freed;
  EXPECT_EQ(a->RecordStream(*p, Stream(3)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Sleep(7).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->GetStats().bytes_in_use, s.bytes_in_use);
  EXPECT_EQ(a->GetStats().num_allocs, s.num_allocs);
  GPUALLOC_EXPECT_OK(a->Validate());
  // Other tags and untagged memory are not affected.
  auto q = a->Allocate(kMiB, Stream(), 0, 8);
  GPUALLOC_ASSERT_OK(q.status());
  GPUALLOC_EXPECT_OK(a->Deallocate(*q));
  GPUALLOC_ASSERT_OK(a->Wake(7));
  EXPECT_EQ(a->Wake(7).code(), absl::StatusCode::kFailedPrecondition);
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(SleepWakeTest, SleepWaitsForTheTagsWork) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto p = a->Allocate(4 * kMiB, Stream(5), 0, 1);
  GPUALLOC_ASSERT_OK(p.status());
  sim->Use(Stream(5), Addr(*p), 4 * kMiB);
  EXPECT_GT(sim->pending_work(), 0u);
  GPUALLOC_ASSERT_OK(a->Sleep(1).status());
  EXPECT_EQ(sim->pending_work(), 0u);  // the host waited for it
  EXPECT_GE(a->GetStats().host_waits, 1u);
  GPUALLOC_ASSERT_OK(a->Wake(1));
  sim->Use(Stream(5), Addr(*p), 4 * kMiB);
  GPUALLOC_EXPECT_OK(a->Deallocate(*p, Stream(5)));
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_EQ(sim->access_violations(), 0u);
}

TEST(SleepWakeTest, WithoutBackupTheAddressesComeBack) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto p = a->Allocate(3 * kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(p.status());
  auto report = a->Sleep(1);
  GPUALLOC_ASSERT_OK(report.status());
  EXPECT_EQ(report->bytes_backed_up, 0u);
  EXPECT_EQ(report->bytes_released, 4 * kMiB);
  GPUALLOC_ASSERT_OK(a->Wake(1));
  Fill(*p, 3 * kMiB, 9);  // mapped and writable again
  EXPECT_TRUE(Holds(*p, 3 * kMiB, 9));
  // The tag grows on at the same addresses.
  auto q = a->Allocate(kMiB / 2, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(q.status());
  EXPECT_EQ(Addr(*q), Addr(*p) + 3 * kMiB);
  GPUALLOC_EXPECT_OK(a->Deallocate(*q));
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(SleepWakeTest, EmptyTagOnlyBecomesAsleep) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto report = a->Sleep(4);
  GPUALLOC_ASSERT_OK(report.status());
  EXPECT_EQ(report->bytes_released, 0u);
  EXPECT_EQ(a->Allocate(10, Stream(), 0, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
  GPUALLOC_EXPECT_OK(a->Wake(4));
  auto p = a->Allocate(10, Stream(), 0, 4);
  GPUALLOC_ASSERT_OK(p.status());
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
}

TEST(SleepWakeTest, ErrorsNameWhatIsMissingAndChangeNothing) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  EXPECT_EQ(a->Sleep(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Wake(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Wake(3).code(), absl::StatusCode::kFailedPrecondition);

  // No virtual memory: the backend is named.
  SimOptions no_vm;
  no_vm.total_bytes = kGiB;
  no_vm.virtual_memory = false;
  auto sim2 = MakeSim(no_vm);
  Options o;
  o.preallocate = false;
  auto b = MakeAllocator(o, sim2);
  auto p = b->Allocate(kMiB, Stream(), 0, 1);  // tags work, Sleep does not
  GPUALLOC_ASSERT_OK(p.status());
  auto slept = b->Sleep(1);
  EXPECT_EQ(slept.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(slept.status().message().find("backend sim"), std::string::npos)
      << slept.status();
  EXPECT_NE(slept.status().message().find("no virtual memory"),
            std::string::npos)
      << slept.status();
  EXPECT_EQ(b->Wake(1).code(), absl::StatusCode::kFailedPrecondition);
  GPUALLOC_EXPECT_OK(b->Deallocate(*p));

  // Expandable regions off.
  Options off = Expandable(false);
  off.expandable = Tristate::kOff;
  auto c = MakeAllocator(off, MakeSim(kGiB, true));
  EXPECT_NE(c->Sleep(1).status().message().find("expandable=off"),
            std::string::npos);

  // A backup needs host copies (fake memory has none).
  auto d = MakeAllocator(Expandable(false), MakeSim(kGiB, false));
  auto q = d->Allocate(kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(q.status());
  auto backed = d->Sleep(1, /*backup=*/true);
  EXPECT_EQ(backed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(backed.status().message().find("host_copy"), std::string::npos)
      << backed.status();
  GPUALLOC_EXPECT_OK(d->Sleep(1).status());  // without one it works
  GPUALLOC_EXPECT_OK(d->Wake(1));

  // Other modes.
  Options platform;
  platform.mode = AllocatorMode::kPlatform;
  auto e = MakeAllocator(platform, MakeSim(kGiB, true));
  auto r = e->Allocate(kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(r.status());
  EXPECT_NE(e->Sleep(1).status().message().find("mode platform"),
            std::string::npos);
  GPUALLOC_EXPECT_OK(e->Deallocate(*r));
}

TEST(SleepWakeTest, WakeNeedsRoomUnderTheLimit) {
  auto sim = MakeSim(kGiB, /*host_backed=*/false);
  Options o = Expandable(false);
  o.memory_limit = 64 * kMiB;
  auto a = MakeAllocator(o, sim);
  auto p = a->Allocate(40 * kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(p.status());
  GPUALLOC_ASSERT_OK(a->Sleep(1).status());
  auto big = a->Allocate(40 * kMiB);  // the released memory is usable
  GPUALLOC_ASSERT_OK(big.status());
  absl::Status woken = a->Wake(1);
  EXPECT_EQ(woken.code(), absl::StatusCode::kResourceExhausted) << woken;
  EXPECT_NE(woken.message().find("stays asleep"), std::string::npos);
  GPUALLOC_EXPECT_OK(a->Validate());
  GPUALLOC_ASSERT_OK(a->Deallocate(*big));
  // Free memory still mapped is given back to make room (no Trim needed).
  GPUALLOC_ASSERT_OK(a->Wake(1));
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(SleepWakeTest, DeviceFaultsTurnBackWhatChanged) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  std::vector<void*> ptrs;
  for (int i = 0; i < 3; ++i) {
    auto p = a->Allocate(3 * kMiB, Stream(), 0, 1);
    GPUALLOC_ASSERT_OK(p.status());
    Fill(*p, 3 * kMiB, i);
    ptrs.push_back(*p);
  }
  const std::uint64_t physical = sim->physical_bytes();
  // The second unmap fails: the first comes back, with its content (backed
  // up).
  sim->FailNthCall(SimOp::kUnmap, 2, absl::InternalError("injected"));
  absl::StatusOr<SleepReport> slept = a->Sleep(1, /*backup=*/true);
  EXPECT_EQ(slept.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(slept.status().message().find("Sleep(tag 1)"), std::string::npos)
      << slept.status();
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(sim->physical_bytes(), physical);
  EXPECT_EQ(a->GetStats().bytes_sleeping, 0u);
  // Asleep now; the second map fails: the first goes back to sleep.
  GPUALLOC_ASSERT_OK(a->Sleep(1, /*backup=*/true).status());
  sim->FailNthCall(SimOp::kMap, 2, absl::InternalError("injected"));
  absl::Status woken = a->Wake(1);
  EXPECT_EQ(woken.code(), absl::StatusCode::kInternal);
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_GT(a->GetStats().bytes_sleeping, 0u);
  GPUALLOC_ASSERT_OK(a->Wake(1));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Holds(ptrs[i], 3 * kMiB, i)) << i;
  for (void* p : ptrs) GPUALLOC_EXPECT_OK(a->Deallocate(p));
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(SleepWakeTest, SnapshotListsTagsAndSleep) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto p = a->Allocate(kMiB, Stream(), 0, 9);
  GPUALLOC_ASSERT_OK(p.status());
  GPUALLOC_ASSERT_OK(a->Sleep(9).status());
  const Snapshot s = a->GetSnapshot();
  ASSERT_EQ(s.pools.size(), 1u);
  EXPECT_EQ(s.pools[0].tag, 9u);
  EXPECT_TRUE(s.pools[0].asleep);
  EXPECT_EQ(s.pools[0].bytes_in_use, kMiB);
  int slabs = 0;
  for (const RegionSnapshot& r : s.regions) {
    for (const ChunkSnapshot& c : r.chunks) slabs += c.tag == 9 ? 1 : 0;
  }
  EXPECT_EQ(slabs, 1);
  GPUALLOC_ASSERT_OK(a->Wake(9));
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
}

// A stream allocating to a private pool, not capturing: Sleep still waits
// for the tag's streams before it unmaps.
TEST(SleepWakeTest, WaitsWhileAStreamAllocatesToAPool) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto pool = a->CreatePool();
  GPUALLOC_ASSERT_OK(pool.status());
  GPUALLOC_ASSERT_OK(a->BeginAllocateToPool(*pool, Stream(9)));
  auto p = a->Allocate(4 * kMiB, Stream(5), 0, 1);
  GPUALLOC_ASSERT_OK(p.status());
  sim->Use(Stream(5), Addr(*p), 4 * kMiB);
  GPUALLOC_ASSERT_OK(a->Sleep(1).status());
  EXPECT_EQ(sim->pending_work(), 0u);
  EXPECT_EQ(sim->hazards(), 0u);
  // A tagged allocation on the routed stream is refused.
  EXPECT_EQ(a->Allocate(kMiB, Stream(9), 0, 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  GPUALLOC_ASSERT_OK(a->Wake(1));
  GPUALLOC_ASSERT_OK(a->EndAllocateToPool(*pool));
  GPUALLOC_EXPECT_OK(a->Deallocate(*p, Stream(5)));
  GPUALLOC_EXPECT_OK(a->ReleasePool(*pool));
  GPUALLOC_EXPECT_OK(a->Validate());
}

// When turning back a failed Sleep fails too, the tag is left asleep (its
// blocks refused) and a Wake maps the rest.
TEST(SleepWakeTest, FailedRollbackLeavesTheTagAsleep) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  std::vector<void*> ptrs;
  for (int i = 0; i < 3; ++i) {
    auto p = a->Allocate(3 * kMiB, Stream(), 0, 1);
    GPUALLOC_ASSERT_OK(p.status());
    Fill(*p, 3 * kMiB, 20 + i);
    ptrs.push_back(*p);
  }
  sim->FailNthCall(SimOp::kUnmap, 2, absl::InternalError("injected unmap"));
  sim->FailNthCall(SimOp::kCreatePhysical, 1,
                   absl::ResourceExhaustedError("injected create"));
  auto slept = a->Sleep(1, /*backup=*/true);
  EXPECT_EQ(slept.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(slept.status().message().find("left asleep"), std::string::npos)
      << slept.status();
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(a->Allocate(kMiB, Stream(), 0, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  GPUALLOC_ASSERT_OK(a->Wake(1));
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(a->GetStats().bytes_sleeping, 0u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(sim->IsAccessible(Addr(ptrs[i]), 3 * kMiB));
    EXPECT_TRUE(Holds(ptrs[i], 3 * kMiB, 20 + i)) << i;
    GPUALLOC_EXPECT_OK(a->Deallocate(ptrs[i]));
  }
}

// A release that fails after its unmap maps the handle back: nothing leaks
// and the content stays.
TEST(SleepWakeTest, FailedReleaseMapsTheHandleBack) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto p = a->Allocate(3 * kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(p.status());
  Fill(*p, 3 * kMiB, 5);
  const std::uint64_t physical = sim->physical_bytes();
  sim->FailNthCall(SimOp::kReleasePhysical, 1, absl::InternalError("injected"));
  auto slept = a->Sleep(1);
  EXPECT_EQ(slept.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(slept.status().message().find("mapped back"), std::string::npos)
      << slept.status();
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(sim->physical_bytes(), physical);
  EXPECT_EQ(a->GetStats().bytes_reserved, physical);
  EXPECT_TRUE(Holds(*p, 3 * kMiB, 5));
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
}

// A failed restore whose re-sleep fails too leaves the tag asleep with its
// memory mapped; the next Wake restores the content.
TEST(SleepWakeTest, FailedRestoreThenWakeAgain) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto p = a->Allocate(3 * kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(p.status());
  Fill(*p, 3 * kMiB, 8);
  GPUALLOC_ASSERT_OK(a->Sleep(1, /*backup=*/true).status());
  sim->FailNthCall(SimOp::kCopyFromHost, 1, absl::InternalError("copy"));
  sim->FailNthCall(SimOp::kUnmap, 1, absl::InternalError("unmap"));
  absl::Status woken = a->Wake(1);
  EXPECT_EQ(woken.code(), absl::StatusCode::kInternal);
  EXPECT_NE(woken.message().find("stays asleep with part of its memory"),
            std::string::npos)
      << woken;
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(a->Deallocate(*p).code(), absl::StatusCode::kFailedPrecondition);
  GPUALLOC_ASSERT_OK(a->Wake(1));
  EXPECT_TRUE(Holds(*p, 3 * kMiB, 8));
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
}

// With preallocation, a tag's first block unmaps only what it needs.
TEST(SleepWakeTest, TagsKeepThePreallocation) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(/*preallocate=*/true), sim);
  auto u = a->Allocate(kMiB);
  GPUALLOC_ASSERT_OK(u.status());
  const Stats before = a->GetStats();
  ASSERT_EQ(before.bytes_reserved, 512 * kMiB);
  auto t = a->Allocate(kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(t.status());
  const Stats after = a->GetStats();
  // One of the 64 handles of 8 MiB made way for a 2 MiB one.
  EXPECT_EQ(after.bytes_reserved, 512 * kMiB - 8 * kMiB + 2 * kMiB);
  EXPECT_EQ(after.backend_frees - before.backend_frees, 1u);
  GPUALLOC_EXPECT_OK(a->Deallocate(*t));
  GPUALLOC_EXPECT_OK(a->Deallocate(*u));
}

// Trim and garbage collection give back a tag's free blocks, even next to a
// live one of the same tag.
TEST(SleepWakeTest, FreeTagBlocksGoBack) {
  auto sim = MakeSim(kGiB);
  Options o = Expandable(false);
  o.memory_limit = 128 * kMiB;
  auto a = MakeAllocator(o, sim);
  auto x = a->Allocate(40 * kMiB, Stream(), 0, 1);
  auto y = a->Allocate(40 * kMiB, Stream(), 0, 1);
  auto z = a->Allocate(40 * kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(z.status());
  GPUALLOC_ASSERT_OK(a->Deallocate(*y));
  GPUALLOC_ASSERT_OK(a->Deallocate(*z));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().bytes_reserved, 40 * kMiB);
  GPUALLOC_EXPECT_OK(a->Validate());
  // Garbage collection: tag 1's freed block serves untagged memory.
  auto w = a->Allocate(40 * kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(w.status());
  GPUALLOC_ASSERT_OK(a->Deallocate(*w));
  auto u = a->Allocate(80 * kMiB);
  GPUALLOC_ASSERT_OK(u.status());
  GPUALLOC_EXPECT_OK(a->Validate());
  GPUALLOC_EXPECT_OK(a->Deallocate(*u));
  GPUALLOC_EXPECT_OK(a->Deallocate(*x));
}

// Destroying the allocator with a tag asleep leaves nothing on the device.
TEST(SleepWakeTest, DestructionWithATagAsleep) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  {
    auto a = MakeAllocator(Expandable(false), sim);
    auto p = a->Allocate(3 * kMiB, Stream(), 0, 1);
    auto q = a->Allocate(3 * kMiB);
    GPUALLOC_ASSERT_OK(q.status());
    GPUALLOC_ASSERT_OK(a->Sleep(1).status());
  }
  EXPECT_EQ(sim->physical_bytes(), 0u);
  EXPECT_EQ(sim->mapped_bytes(), 0u);
}

// Figures: 1 GiB of tagged memory next to 256 MiB untagged on a simulated
// H100 (fake memory, no backup; then host-backed with a backup of 256 MiB):
// what Sleep and Wake release, the device calls they make and the modeled
// time of those calls (the simulator's cost model for the profile).
TEST(SleepWakeTest, Figures) {
  struct Case {
    const char* name;
    std::uint64_t tagged;
    bool host_backed;
    bool backup;
  };
  for (const Case& k : {Case{"1 GiB, no backup", kGiB, false, false},
                        Case{"256 MiB, backup", 256 * kMiB, true, true}}) {
    auto sim = MakeSim(4 * kGiB, k.host_backed);
    Options o = Expandable(false);
    o.memory_limit = 2 * kGiB;
    auto a = MakeAllocator(o, sim);
    auto untagged = a->Allocate(256 * kMiB);
    GPUALLOC_ASSERT_OK(untagged.status());
    std::vector<void*> tagged;
    for (std::uint64_t done = 0; done < k.tagged; done += 64 * kMiB) {
      auto p = a->Allocate(64 * kMiB - 1000, Stream(), 0, 1);
      GPUALLOC_ASSERT_OK(p.status());
      tagged.push_back(*p);
    }
    const std::uint64_t physical = sim->physical_bytes();
    sim->ResetCounters();
    auto report = a->Sleep(1, k.backup);
    GPUALLOC_ASSERT_OK(report.status());
    const std::uint64_t sleep_ns = sim->modeled_ns();
    const std::uint64_t sleep_calls = sim->calls(SimOp::kUnmap) +
                                      sim->calls(SimOp::kReleasePhysical) +
                                      sim->calls(SimOp::kCopyToHost);
    const std::uint64_t asleep = sim->physical_bytes();
    sim->ResetCounters();
    GPUALLOC_ASSERT_OK(a->Wake(1));
    const std::uint64_t wake_ns = sim->modeled_ns();
    const std::uint64_t wake_calls =
        sim->calls(SimOp::kCreatePhysical) + sim->calls(SimOp::kMap) +
        sim->calls(SimOp::kSetAccess) + sim->calls(SimOp::kCopyFromHost);
    EXPECT_EQ(physical - asleep, report->bytes_released);
    EXPECT_EQ(report->bytes_released, k.tagged);
    std::printf(
        "  sleep/wake, %s (simulated H100): physical %.0f MiB -> %.0f MiB "
        "(%.0f MiB released, %.0f MiB kept, %.0f MiB backed up); Sleep %d "
        "device calls, %.1f us modeled; Wake %d calls, %.1f us modeled\n",
        k.name, physical / double(kMiB), asleep / double(kMiB),
        report->bytes_released / double(kMiB),
        report->bytes_kept / double(kMiB),
        report->bytes_backed_up / double(kMiB), static_cast<int>(sleep_calls),
        sleep_ns / 1e3, static_cast<int>(wake_calls), wake_ns / 1e3);
    for (void* p : tagged) GPUALLOC_EXPECT_OK(a->Deallocate(p));
    GPUALLOC_EXPECT_OK(a->Deallocate(*untagged));
  }
}

// The snapshot agrees with the statistics while a tag sleeps: its chunks say
// they are asleep, the regions' chunks that are awake add up to
// bytes_reserved and the ones asleep to bytes_sleeping, and the tag's pool
// reserves nothing.
TEST(SleepWakeTest, SnapshotShowsSleepingMemoryAsNotReserved) {
  auto sim = MakeSim(kGiB, /*host_backed=*/false);
  auto a = MakeAllocator(Expandable(false), sim);
  auto untagged = a->Allocate(8 * kMiB);
  GPUALLOC_ASSERT_OK(untagged.status());
  auto tagged = a->Allocate(64 * kMiB, Stream(), 0, 3);
  GPUALLOC_ASSERT_OK(tagged.status());
  GPUALLOC_ASSERT_OK(a->Sleep(3).status());
  auto sums = [](const Snapshot& s) {
    std::uint64_t awake = 0, asleep = 0;
    for (const RegionSnapshot& r : s.regions) {
      for (const ChunkSnapshot& c : r.chunks)
        (c.asleep ? asleep : awake) += c.size;
    }
    return std::pair(awake, asleep);
  };
  const Snapshot s = a->GetSnapshot();
  ASSERT_EQ(s.stats.bytes_sleeping, 64 * kMiB);
  EXPECT_EQ(sums(s).first, s.stats.bytes_reserved);
  EXPECT_EQ(sums(s).second, s.stats.bytes_sleeping);
  EXPECT_EQ(s.stats.bytes_reserved, a->GetStats().bytes_reserved);
  for (const RegionSnapshot& r : s.regions) {
    for (const ChunkSnapshot& c : r.chunks) {
      EXPECT_EQ(c.asleep, c.tag == 3) << c.address;
      if (c.tag == 3) {
        EXPECT_TRUE(c.in_use);
        EXPECT_EQ(c.address, Addr(*tagged));
      }
    }
  }
  ASSERT_EQ(s.pools.size(), 1u);
  EXPECT_TRUE(s.pools[0].asleep);
  EXPECT_EQ(s.pools[0].bytes_reserved, 0u);
  EXPECT_EQ(s.pools[0].bytes_sleeping, 64 * kMiB);
  EXPECT_EQ(s.pools[0].bytes_in_use, 64 * kMiB);
  for (const RegionSnapshot& r : s.pools[0].regions) {
    for (const ChunkSnapshot& c : r.chunks) EXPECT_TRUE(c.asleep);
  }

  GPUALLOC_ASSERT_OK(a->Wake(3));
  const Snapshot w = a->GetSnapshot();
  EXPECT_EQ(sums(w).first, w.stats.bytes_reserved);
  EXPECT_EQ(sums(w).second, 0u);
  ASSERT_EQ(w.pools.size(), 1u);
  EXPECT_EQ(w.pools[0].bytes_reserved, 64 * kMiB);
  EXPECT_EQ(w.pools[0].bytes_sleeping, 0u);
  GPUALLOC_EXPECT_OK(a->Deallocate(*tagged));
  GPUALLOC_EXPECT_OK(a->Deallocate(*untagged));
}

// Destroying the allocator unmaps a tag's memory only after the work still
// queued on its blocks has completed, as for plain blocks.
TEST(SleepWakeTest, DestructionWaitsForTheWorkOnTaggedBlocks) {
  for (bool preallocate : {false, true}) {
    SCOPED_TRACE(preallocate ? "preallocated" : "growing");
    auto sim = MakeSim(kGiB);
    {
      auto a = MakeAllocator(Expandable(preallocate), sim);
      auto live = a->Allocate(3 * kMiB, Stream(2), 0, 1);
      auto freed = a->Allocate(3 * kMiB, Stream(2), 0, 1);
      GPUALLOC_ASSERT_OK(live.status());
      GPUALLOC_ASSERT_OK(freed.status());
      sim->Use(Stream(2), Addr(*live), 3 * kMiB);
      sim->Use(Stream(2), Addr(*freed), 3 * kMiB);
      GPUALLOC_ASSERT_OK(a->Deallocate(*freed, Stream(2)));
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

// A Wake whose set-access is refused, and whose unmap back is refused too:
// the tag stays asleep, what the device holds is counted, and the next Wake
// finishes the job.
TEST(SleepWakeTest, RefusedWakeWithARefusedRollbackLosesNothing) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto p = a->Allocate(3 * kMiB, Stream(), 0, 1);
  auto q = a->Allocate(3 * kMiB);
  GPUALLOC_ASSERT_OK(p.status());
  GPUALLOC_ASSERT_OK(q.status());
  GPUALLOC_ASSERT_OK(a->Sleep(1).status());
  sim->FailNthCall(SimOp::kSetAccess, 1, absl::InternalError("set-access"));
  sim->FailNthCall(SimOp::kUnmap, 1, absl::InternalError("unmap"));
  const absl::Status woken = a->Wake(1);
  EXPECT_EQ(woken.code(), absl::StatusCode::kInternal) << woken;
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(sim->physical_bytes(), a->GetStats().bytes_reserved);
  EXPECT_EQ(a->Deallocate(*p).code(), absl::StatusCode::kFailedPrecondition);
  GPUALLOC_ASSERT_OK(a->Wake(1));
  EXPECT_TRUE(sim->IsAccessible(Addr(*p), 3 * kMiB));
  EXPECT_EQ(sim->physical_bytes(), a->GetStats().bytes_reserved);
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
  GPUALLOC_EXPECT_OK(a->Deallocate(*q));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(sim->physical_bytes(), 0u);
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  GPUALLOC_EXPECT_OK(a->Validate());
}

// A Sleep whose release is refused maps the handle back; when the device
// refuses access to it again, it stays mapped (counted) and a Wake makes it
// accessible.
TEST(SleepWakeTest, RefusedReleaseAndRefusedAccessBackLoseNothing) {
  auto sim = MakeSim(kGiB, /*host_backed=*/true);
  auto a = MakeAllocator(Expandable(false), sim);
  auto p = a->Allocate(3 * kMiB, Stream(), 0, 1);
  GPUALLOC_ASSERT_OK(p.status());
  sim->FailNthCall(SimOp::kReleasePhysical, 1, absl::InternalError("release"));
  sim->FailNthCall(SimOp::kSetAccess, 1, absl::InternalError("set-access"));
  EXPECT_FALSE(a->Sleep(1).ok());
  GPUALLOC_EXPECT_OK(a->Validate());
  EXPECT_EQ(sim->physical_bytes(), a->GetStats().bytes_reserved);
  if (a->GetStats().bytes_sleeping != 0) GPUALLOC_ASSERT_OK(a->Wake(1));
  EXPECT_TRUE(sim->IsAccessible(Addr(*p), 3 * kMiB));
  EXPECT_EQ(sim->physical_bytes(), a->GetStats().bytes_reserved);
  GPUALLOC_EXPECT_OK(a->Deallocate(*p));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(sim->physical_bytes(), 0u);
  EXPECT_EQ(sim->mapped_bytes(), 0u);
}

}  // namespace
}  // namespace gpualloc
