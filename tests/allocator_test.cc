// tests/allocator_test.cc: the public allocator on the simulated backend:
// growth, preallocation, statistics, TensorFlow's BFC behaviour, the bad-input
// table, fault injection, garbage collection, Trim and threads.
#include "gpualloc/allocator.h"

#include <malloc.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using testing::Addr;
using testing::kGiB;
using testing::kKiB;
using testing::kMiB;
using testing::MakeAllocator;
using testing::MakeSim;

// These tests are about separate regions (one backend allocation each);
// expandable regions have their own tests (allocator_expandable_test.cc).
Options Regions() {
  Options o;
  o.expandable = Tristate::kOff;
  return o;
}

Options Growth(std::uint64_t limit = 0) {
  Options o = Regions();
  o.preallocate = false;
  o.memory_limit = limit;
  return o;
}

TEST(AllocatorTest, PreallocatesTheFractionOnFirstUse) {
  auto sim = MakeSim(80 * kGiB);
  auto a = MakeAllocator(Regions(), sim);
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 0u);  // nothing before first use
  auto p = a->Allocate(1000);
  GPUALLOC_ASSERT_OK(p);
  const Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 60 * kGiB);
  EXPECT_EQ(s.bytes_limit, 60 * kGiB);
  EXPECT_EQ(s.bytes_in_use, 1024u);
  EXPECT_EQ(s.bytes_requested, 1000u);
  EXPECT_EQ(s.backend_allocs, 1u);
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 1u);
  for (int i = 0; i < 100; ++i) GPUALLOC_ASSERT_OK(a->Allocate(1 << 20));
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 1u);  // never again
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AllocatorTest, GrowsOnDemandInGranules) {
  auto sim = MakeSim(80 * kGiB);
  auto a = MakeAllocator(Growth(), sim);
  auto p = a->Allocate(1);
  GPUALLOC_ASSERT_OK(p);
  EXPECT_EQ(a->GetStats().bytes_reserved, 2 * kMiB);
  auto q = a->Allocate(5 * kMiB);
  GPUALLOC_ASSERT_OK(q);
  EXPECT_EQ(a->GetStats().bytes_reserved, 2 * kMiB + 6 * kMiB);
  EXPECT_EQ(a->GetStats().backend_allocs, 2u);
  // Small requests pack into the first region.
  for (int i = 0; i < 100; ++i) GPUALLOC_ASSERT_OK(a->Allocate(1000));
  EXPECT_EQ(a->GetStats().backend_allocs, 2u);
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AllocatorTest, DoublingPolicyGrowsGeometrically) {
  auto sim = MakeSim(80 * kGiB);
  Options o = Growth();
  o.growth_policy = GrowthPolicy::kDoubling;
  auto a = MakeAllocator(o, sim);
  GPUALLOC_ASSERT_OK(a->Allocate(2 * kMiB));  // 2 MiB region
  GPUALLOC_ASSERT_OK(a->Allocate(2 * kMiB));  // 4 MiB region
  GPUALLOC_ASSERT_OK(a->Allocate(2 * kMiB));  // fits in the 4 MiB region
  GPUALLOC_ASSERT_OK(a->Allocate(2 * kMiB));  // 8 MiB region
  EXPECT_EQ(a->GetStats().bytes_reserved, 14 * kMiB);
  EXPECT_EQ(a->GetStats().backend_allocs, 3u);
}

// TensorFlow's BFC test (bfc_allocator_test.cc, AllocationsAndDeallocations /
// "ExerciseCoalescing"-style sums): 1023 allocations of 1..1023 bytes.
TEST(AllocatorTest, TensorFlowSmallAllocationSums) {
  for (bool preallocate : {true, false}) {
    auto a =
        MakeAllocator(preallocate ? Regions() : Growth(), MakeSim(16 * kGiB));
    std::vector<void*> ptrs;
    for (int i = 1; i < 1024; ++i) {
      auto p = a->Allocate(i);
      GPUALLOC_ASSERT_OK(p);
      ptrs.push_back(*p);
    }
    const Stats s = a->GetStats();
    EXPECT_EQ(s.bytes_in_use, 654336u) << preallocate;
    EXPECT_EQ(s.largest_alloc_size, 1024u);
    EXPECT_EQ(s.num_allocs, 1023u);
    for (void* p : ptrs) GPUALLOC_ASSERT_OK(a->Deallocate(p));
    EXPECT_EQ(a->GetStats().bytes_in_use, 0u);
    GPUALLOC_EXPECT_OK(a->Validate());
  }
}

// TensorFlow's BFC test: 1024 rounds of {4 KiB, 8 MiB, 16 KiB, 40 MiB}
// allocated then freed; then a 4 KiB request gets the very first pointer back.
TEST(AllocatorTest, TensorFlowRoundsReuseTheFirstPointer) {
  for (bool preallocate : {true, false}) {
    auto a =
        MakeAllocator(preallocate ? Regions() : Growth(), MakeSim(16 * kGiB));
    void* first = nullptr;
    for (int round = 0; round < 1024; ++round) {
      std::vector<void*> ptrs;
      for (std::uint64_t size : {4 * kKiB, 8 * kMiB, 16 * kKiB, 40 * kMiB}) {
        auto p = a->Allocate(size);
        GPUALLOC_ASSERT_OK(p);
        if (first == nullptr) first = *p;
        ptrs.push_back(*p);
      }
      for (void* p : ptrs) GPUALLOC_ASSERT_OK(a->Deallocate(p));
    }
    EXPECT_EQ(a->GetStats().peak_bytes_in_use, 50352128u) << preallocate;
    auto again = a->Allocate(4 * kKiB);
    GPUALLOC_ASSERT_OK(again);
    EXPECT_EQ(*again, first) << preallocate;
    GPUALLOC_EXPECT_OK(a->Validate());
  }
}

TEST(AllocatorTest, ZeroBytesGivesAUniqueNonNullPointer) {
  auto a = MakeAllocator(Growth(), MakeSim(kGiB));
  std::set<void*> seen;
  for (int i = 0; i < 10; ++i) {
    auto p = a->Allocate(0);
    GPUALLOC_ASSERT_OK(p);
    EXPECT_NE(*p, nullptr);
    EXPECT_TRUE(seen.insert(*p).second);
  }
  EXPECT_EQ(a->GetStats().bytes_in_use, 10 * 256u);
  EXPECT_EQ(a->GetStats().bytes_requested, 0u);
  for (void* p : seen) GPUALLOC_ASSERT_OK(a->Deallocate(p));
}

TEST(AllocatorTest, AlignmentIsHonoured) {
  auto a = MakeAllocator(Growth(), MakeSim(kGiB));
  GPUALLOC_ASSERT_OK(a->Allocate(256));
  for (std::uint64_t align : {256u, 512u, 4096u, 65536u, 1u << 20, 2u << 20}) {
    auto p = a->Allocate(1000, Stream(), align);
    GPUALLOC_ASSERT_OK(p);
    EXPECT_EQ(Addr(*p) % align, 0u) << align;
  }
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AllocatorTest, NullDeallocateIsANoOp) {
  auto a = MakeAllocator(Growth(), MakeSim(kGiB));
  GPUALLOC_EXPECT_OK(a->Deallocate(nullptr));
}

// The bad-input table: each call gets a clear Status naming the problem and
// leaves the allocator and every live allocation intact.
TEST(AllocatorTest, BadInputTable) {
  for (bool preallocate : {true, false}) {
    SCOPED_TRACE(preallocate ? "preallocate" : "growth");
    auto sim = MakeSim(kGiB, /*host_backed=*/true);
    Options o = preallocate ? Regions() : Growth();
    auto a = MakeAllocator(o, sim);
    // Live allocations with a fill pattern, to check they stay intact.
    std::vector<std::pair<unsigned char*, std::size_t>> live;
    for (std::size_t size : {100u, 5000u, 300000u}) {
      auto p = a->Allocate(size);
      GPUALLOC_ASSERT_OK(p);
      auto* bytes = static_cast<unsigned char*>(*p);
      std::memset(bytes, static_cast<int>(size & 0xff), size);
      live.emplace_back(bytes, size);
    }
    auto freed = a->Allocate(4096);
    GPUALLOC_ASSERT_OK(freed);
    GPUALLOC_ASSERT_OK(a->Deallocate(*freed));
    const Stats before = a->GetStats();
    const std::uint64_t backend_calls = sim->calls(SimOp::kAllocate);

    struct Case {
      std::string name;
      absl::Status status;
      absl::StatusCode code;
      std::string must_mention;
    };
    int stack_object = 0;
    char fmt[64];
    std::snprintf(fmt, sizeof(fmt), "%p",
                  static_cast<void*>(live[1].first + 256));
    std::vector<Case> cases = {
        {"SIZE_MAX", a->Allocate(SIZE_MAX).status(),
         absl::StatusCode::kResourceExhausted, "exceeds the allocator's limit"},
        {"limit + 1", a->Allocate(before.bytes_limit + 1).status(),
         absl::StatusCode::kResourceExhausted, "out of memory"},
        {"alignment 3", a->Allocate(64, Stream(), 3).status(),
         absl::StatusCode::kInvalidArgument, "not a power of two"},
        {"alignment 48", a->Allocate(64, Stream(), 48).status(),
         absl::StatusCode::kInvalidArgument, "alignment 48"},
        {"alignment 1 TiB",
         a->Allocate(64, Stream(), std::size_t{1} << 40).status(),
         absl::StatusCode::kInvalidArgument,
         "exceeds the largest supported alignment"},
        {"foreign pointer", a->Deallocate(&stack_object),
         absl::StatusCode::kInvalidArgument, "not allocated by this allocator"},
        {"interior pointer", a->Deallocate(live[1].first + 256),
         absl::StatusCode::kInvalidArgument, "interior pointer"},
        {"double free", a->Deallocate(*freed),
         absl::StatusCode::kFailedPrecondition, "double free"},
    };
    for (const Case& c : cases) {
      EXPECT_EQ(c.status.code(), c.code) << c.name << ": " << c.status;
      EXPECT_NE(c.status.message().find(c.must_mention), std::string::npos)
          << c.name << ": " << c.status;
    }
    // Addresses are named in free errors.
    EXPECT_NE(cases[6].status.message().find(fmt), std::string::npos)
        << cases[6].status;

    const Stats after = a->GetStats();
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
    EXPECT_EQ(after.bytes_reserved, before.bytes_reserved);
    EXPECT_EQ(after.num_allocs, before.num_allocs);
    EXPECT_EQ(after.num_ooms, before.num_ooms + 2);
    EXPECT_EQ(sim->calls(SimOp::kAllocate), backend_calls);
    GPUALLOC_EXPECT_OK(a->Validate());
    for (auto [bytes, size] : live) {
      for (std::size_t i = 0; i < size; ++i) {
        ASSERT_EQ(bytes[i], static_cast<unsigned char>(size & 0xff))
            << size << " at " << i;
      }
      GPUALLOC_EXPECT_OK(a->Deallocate(bytes));
    }
  }
}

TEST(AllocatorTest, BadCreateArguments) {
  EXPECT_EQ(CreateAllocator(Options(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  Options o;
  o.memory_fraction = 2;
  auto a = CreateAllocator(o, MakeSim(kGiB));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("memory_fraction"), std::string::npos);
}

TEST(AllocatorTest, OutOfMemoryReportSaysWhy) {
  auto a = MakeAllocator(Growth(64 * kMiB), MakeSim(kGiB));
  std::vector<void*> ptrs;
  for (int i = 0; i < 8; ++i) {
    auto p = a->Allocate(8 * kMiB);
    GPUALLOC_ASSERT_OK(p);
    ptrs.push_back(*p);
  }
  auto oom = a->Allocate(kMiB);
  ASSERT_EQ(oom.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(oom.status().message());
  for (const char* part : {"out of memory", "limit 67108864", "in use 67108864",
                           "reserved 67108864", "largest free block", "Hint"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  }
  EXPECT_EQ(a->GetStats().num_ooms, 1u);
  // Freeing every other block leaves enough memory in pieces: the hint says so.
  for (int i = 0; i < 8; i += 2) GPUALLOC_ASSERT_OK(a->Deallocate(ptrs[i]));
  // Regions were exact 8 MiB: the freed ones are whole regions, so GC makes
  // room.
  GPUALLOC_ASSERT_OK(a->Allocate(16 * kMiB));
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AllocatorTest, FragmentationHintWhenPiecesAreFree) {
  Options o = Regions();
  o.memory_limit = 64 * kMiB;  // preallocated: one region
  auto a = MakeAllocator(o, MakeSim(kGiB));
  std::vector<void*> ptrs;
  for (int i = 0; i < 8; ++i) ptrs.push_back(*a->Allocate(8 * kMiB));
  for (int i = 0; i < 8; i += 2) GPUALLOC_ASSERT_OK(a->Deallocate(ptrs[i]));
  auto oom = a->Allocate(16 * kMiB);
  ASSERT_EQ(oom.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(oom.status().message().find("in pieces"), std::string::npos)
      << oom.status();
  const Stats s = a->GetStats();
  EXPECT_EQ(s.largest_free_block_bytes, 8 * kMiB);
  EXPECT_DOUBLE_EQ(s.fragmentation, 1.0 - 8.0 / 32.0);
}

TEST(AllocatorTest, GarbageCollectionReturnsFreeRegionsOnOom) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Growth(64 * kMiB), sim);
  // Fill the limit with 2 MiB regions, then free them all.
  std::vector<void*> ptrs;
  for (int i = 0; i < 32; ++i) ptrs.push_back(*a->Allocate(2 * kMiB));
  for (void* p : ptrs) GPUALLOC_ASSERT_OK(a->Deallocate(p));
  EXPECT_EQ(a->GetStats().bytes_reserved, 64 * kMiB);
  // 32 MiB fits in no 2 MiB region: GC releases them, then growth succeeds.
  GPUALLOC_ASSERT_OK(a->Allocate(32 * kMiB));
  const Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 32 * kMiB);
  EXPECT_EQ(s.backend_frees, 32u);
  EXPECT_EQ(s.num_ooms, 0u);
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AllocatorTest, TrimBeforeGrowthKeepsThePeakDown) {
  for (bool trim : {true, false}) {
    SCOPED_TRACE(trim);
    Options o = Growth(256 * kMiB);
    o.trim_before_growth = trim;
    auto a = MakeAllocator(o, MakeSim(kGiB));
    void* keep = *a->Allocate(2 * kMiB);
    void* p = *a->Allocate(8 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(p));
    // 16 MiB fits nowhere: the free 8 MiB region goes back first (or stays).
    GPUALLOC_ASSERT_OK(a->Allocate(16 * kMiB));
    const Stats s = a->GetStats();
    EXPECT_EQ(s.bytes_reserved, (trim ? 18 : 26) * kMiB);
    EXPECT_EQ(s.peak_bytes_reserved, (trim ? 18 : 26) * kMiB);
    EXPECT_EQ(s.backend_frees, trim ? 1u : 0u);
    EXPECT_EQ(s.num_ooms, 0u);
    GPUALLOC_EXPECT_OK(a->Validate());
    (void)keep;
  }
}

TEST(AllocatorTest, WithoutGarbageCollectionTheSameRequestFails) {
  Options o = Growth(64 * kMiB);
  o.garbage_collection = false;
  o.trim_before_growth = false;
  auto a = MakeAllocator(o, MakeSim(kGiB));
  std::vector<void*> ptrs;
  for (int i = 0; i < 32; ++i) ptrs.push_back(*a->Allocate(2 * kMiB));
  for (void* p : ptrs) GPUALLOC_ASSERT_OK(a->Deallocate(p));
  EXPECT_EQ(a->Allocate(32 * kMiB).status().code(),
            absl::StatusCode::kResourceExhausted);
  GPUALLOC_ASSERT_OK(a->Trim());
  GPUALLOC_ASSERT_OK(a->Allocate(32 * kMiB));
}

TEST(AllocatorTest, TrimReturnsOnlyFullyFreeRegions) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Growth(), sim);
  void* keep = *a->Allocate(kMiB);
  void* drop = *a->Allocate(10 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(drop));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().bytes_reserved, 2 * kMiB);
  EXPECT_EQ(sim->live_allocations(), 1u);
  GPUALLOC_ASSERT_OK(a->Deallocate(keep));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().bytes_reserved, 0u);
  EXPECT_EQ(sim->live_allocations(), 0u);
  EXPECT_EQ(sim->bytes_allocated(), 0u);
  GPUALLOC_EXPECT_OK(a->Validate());
}

TEST(AllocatorTest, DestructorReturnsEverything) {
  auto sim = MakeSim(kGiB);
  {
    auto a = MakeAllocator(Growth(), sim);
    GPUALLOC_ASSERT_OK(a->Allocate(kMiB));
    GPUALLOC_ASSERT_OK(a->Allocate(10 * kMiB));
  }
  EXPECT_EQ(sim->live_allocations(), 0u);
}

// Fault injection: the backend refuses the k-th allocation; no leak, no
// corruption, and the allocator keeps serving.
TEST(AllocatorTest, FaultInjectionOnGrowth) {
  for (std::uint64_t k = 1; k <= 4; ++k) {
    SCOPED_TRACE(k);
    auto sim = MakeSim(kGiB);
    auto a = MakeAllocator(Growth(), sim);
    sim->FailNthCall(SimOp::kAllocate, k);
    std::vector<void*> ptrs;
    int failures = 0;
    for (int i = 0; i < 6; ++i) {
      auto p = a->Allocate(3 * kMiB);  // each needs a new region
      if (p.ok()) {
        ptrs.push_back(*p);
      } else {
        ++failures;
        EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted)
            << p.status();
        EXPECT_NE(p.status().message().find("simulated fault"),
                  std::string::npos);
      }
      GPUALLOC_ASSERT_OK(a->Validate());
    }
    EXPECT_EQ(failures, 1);
    EXPECT_EQ(sim->live_allocations(), ptrs.size());
    for (void* p : ptrs) GPUALLOC_ASSERT_OK(a->Deallocate(p));
    GPUALLOC_ASSERT_OK(a->Trim());
    EXPECT_EQ(sim->live_allocations(), 0u);
  }
}

TEST(AllocatorTest, FaultInjectionOnPreallocationIsRetriedLater) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Regions(), sim);
  sim->FailNthCall(SimOp::kAllocate, 1);
  auto p = a->Allocate(100);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("preallocating"), std::string::npos)
      << p.status();
  EXPECT_EQ(a->GetStats().bytes_reserved, 0u);
  GPUALLOC_ASSERT_OK(a->Allocate(100));
  EXPECT_EQ(a->GetStats().bytes_reserved, 768 * kMiB);
}

TEST(AllocatorTest, FaultInjectionOnTrimKeepsTheRegionUsable) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Growth(), sim);
  void* p = *a->Allocate(kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(p));
  sim->FailNthCall(SimOp::kFree, 1,
                   absl::InternalError("simulated driver error"));
  absl::Status trimmed = a->Trim();
  EXPECT_EQ(trimmed.code(), absl::StatusCode::kInternal);
  GPUALLOC_ASSERT_OK(a->Validate());
  EXPECT_EQ(a->GetStats().bytes_reserved, 2 * kMiB);
  GPUALLOC_ASSERT_OK(a->Allocate(kMiB));
  EXPECT_EQ(a->GetStats().backend_allocs, 1u);
}

TEST(AllocatorTest, DoublingBacksOffWhenTheDeviceRefuses) {
  auto sim = MakeSim(kGiB);
  Options o = Growth();
  o.growth_policy = GrowthPolicy::kDoubling;
  auto a = MakeAllocator(o, sim);
  GPUALLOC_ASSERT_OK(a->Allocate(2 * kMiB));  // 2 MiB region; next is 4 MiB
  sim->FailNthCall(SimOp::kAllocate, 1);      // the 4 MiB try fails
  GPUALLOC_ASSERT_OK(a->Allocate(kMiB));      // the 2 MiB region is full: grow
  EXPECT_EQ(a->GetStats().bytes_reserved, 4 * kMiB);  // 2 MiB after backing off
  EXPECT_EQ(sim->failed_calls(SimOp::kAllocate), 1u);
}

TEST(AllocatorTest, SnapshotMatchesStats) {
  auto a = MakeAllocator(Growth(), MakeSim(kGiB));
  void* p = *a->Allocate(1000, Stream(7));
  GPUALLOC_ASSERT_OK(a->Allocate(5 * kMiB));
  const Snapshot s = a->GetSnapshot();
  ASSERT_EQ(s.regions.size(), 2u);
  std::uint64_t in_use = 0, reserved = 0;
  for (const RegionSnapshot& r : s.regions) {
    reserved += r.size;
    for (const ChunkSnapshot& c : r.chunks) in_use += c.in_use ? c.size : 0;
  }
  EXPECT_EQ(in_use, s.stats.bytes_in_use);
  EXPECT_EQ(reserved, s.stats.bytes_reserved);
  bool found = false;
  for (const RegionSnapshot& r : s.regions) {
    for (const ChunkSnapshot& c : r.chunks) {
      if (c.address == Addr(p)) {
        found = true;
        EXPECT_EQ(c.requested, 1000u);
        EXPECT_EQ(c.stream, 7u);
      }
    }
  }
  EXPECT_TRUE(found);
}

TEST(AllocatorTest, ResetPeakStats) {
  auto a = MakeAllocator(Growth(), MakeSim(kGiB));
  void* p = *a->Allocate(10 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(p));
  EXPECT_EQ(a->GetStats().peak_bytes_in_use, 10 * kMiB);
  a->ResetPeakStats();
  EXPECT_EQ(a->GetStats().peak_bytes_in_use, 0u);
}

// Host metadata grows with chunks, never with the pool: preallocating 75% of a
// simulated H200 costs well under 1 MiB of host memory.
TEST(AllocatorTest, PreallocatingAnH200CostsLittleHostMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "mallinfo2 does not see allocations under AddressSanitizer";
#endif
  SimOptions so;
  so.profile = "h200";
  auto sim = MakeSim(so);
  const std::size_t before = mallinfo2().uordblks;
  auto a = MakeAllocator(Regions(), sim);
  GPUALLOC_ASSERT_OK(a->Allocate(1));
  const std::size_t after = mallinfo2().uordblks;
  EXPECT_LT(after - before, 1u << 20) << "host bytes used: " << after - before;
  EXPECT_GT(a->GetStats().bytes_reserved, 100 * kGiB);
}

TEST(AllocatorTest, ThreadsAllocateAndFreeEachOthersBlocks) {
  auto sim = MakeSim(4 * kGiB, /*host_backed=*/false);
  auto a = MakeAllocator(Growth(), sim);
  constexpr int kThreads = 4;
  constexpr int kOps = 4000;
  std::vector<std::vector<void*>> handoff(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> mine;
      for (int i = 0; i < kOps; ++i) {
        auto p = a->Allocate(256 * (1 + (i * 7919 + t) % 4096), Stream(t + 1));
        ASSERT_TRUE(p.ok()) << p.status();
        mine.push_back(*p);
        if (mine.size() > 64) {
          ASSERT_TRUE(a->Deallocate(mine.front(), Stream(t + 1)).ok());
          mine.erase(mine.begin());
        }
      }
      handoff[(t + 1) % kThreads] = std::move(mine);
    });
  }
  for (auto& th : threads) th.join();
  // Each thread's survivors are freed by another thread.
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (void* p : handoff[t])
        ASSERT_TRUE(a->Deallocate(p, Stream(t + 1)).ok());
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(a->GetStats().bytes_in_use, 0u);
  GPUALLOC_EXPECT_OK(a->Validate());
}

}  // namespace
}  // namespace gpualloc
