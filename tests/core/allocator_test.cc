// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_test.cc: the BFC allocator over separate regions on the
// simulated backend: growth, preallocation, TensorFlow's BFC behaviour, fault
// injection, garbage collection and Trim. What every mode promises (bad
// input, out-of-memory reports, statistics, threads...) is the conformance
// suite's (tests/core/allocator_conformance.h).
#include "gpualloc/core/allocator.h"

#include <malloc.h>

#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

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

// size_divisions=4 (PyTorch's roundup_power2_divisions:4) gives each chunk
// the size PyTorch's caching allocator would; `requested` stays as asked.
TEST(AllocatorTest, SizeDivisionsRoundChunksAsPytorchDoes) {
  struct Case {
    std::uint64_t bytes;
    std::uint64_t chunk;
  };
  const Case cases[] = {
      {1200 * kKiB, 1280 * kKiB},
      {5 * kMiB + 1, 6 * kMiB},
      {6 * kMiB, 6 * kMiB},
      {kGiB + 1, kGiB + kGiB / 4},
      {4 * kMiB, 4 * kMiB},
      {4600, 5120},
      {1000, 1024},  // at most min_block * 4: min_block rounding only
      {0, 512},
  };
  auto sim = MakeSim(80 * kGiB);
  Options o = Growth();
  o.min_block_size = 512;  // PyTorch's
  o.size_divisions = 4;
  auto a = MakeAllocator(o, sim);
  std::uint64_t in_use = 0;
  std::uint64_t requested = 0;
  std::map<std::uint64_t, std::uint64_t> chunk_of;  // address -> chunk
  for (const Case& t : cases) {
    auto p = a->Allocate(t.bytes);
    GPUALLOC_ASSERT_OK(p);
    chunk_of[testing::Addr(*p)] = t.chunk;
    in_use += t.chunk;
    requested += t.bytes;
  }
  const Snapshot snapshot = a->GetSnapshot();
  EXPECT_EQ(snapshot.stats.bytes_in_use, in_use);
  EXPECT_EQ(snapshot.stats.bytes_requested, requested);
  std::size_t seen = 0;
  for (const RegionSnapshot& r : snapshot.regions) {
    for (const ChunkSnapshot& c : r.chunks) {
      if (!c.in_use) continue;
      ++seen;
      EXPECT_EQ(c.size, chunk_of[c.address]) << c.requested;
    }
  }
  EXPECT_EQ(seen, std::size(cases));
  GPUALLOC_EXPECT_OK(a->Validate());

  // Off (the default): min_block rounding only.
  o.size_divisions = 0;
  auto b = MakeAllocator(o, MakeSim(80 * kGiB));
  GPUALLOC_ASSERT_OK(b->Allocate(1200 * kKiB));
  EXPECT_EQ(b->GetStats().bytes_in_use, 1200 * kKiB);

  // Platform and async modes have no chunks to round: refused at creation.
  for (AllocatorMode mode : {AllocatorMode::kPlatform, AllocatorMode::kAsync}) {
    o.mode = mode;
    o.size_divisions = 4;
    auto c = CreateAllocator(o, MakeSim(80 * kGiB));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("Options.size_divisions"),
              std::string::npos)
        << c.status();
    EXPECT_NE(c.status().message().find(AllocatorModeName(mode)),
              std::string::npos)
        << c.status();
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
  // (Without trimming before growth, which returns just enough of them.)
  Options o = Growth(64 * kMiB);
  o.trim_before_growth = false;
  auto a = MakeAllocator(o, sim);
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

TEST(AllocatorTest, GrowthBelowTheLimitReturnsNothing) {
  // A free region that cannot serve a request stays while the growth fits
  // under the limit: a repeated step finds it again, and freeing it would
  // cost a device call now and another when it is needed next.
  Options o = Growth(256 * kMiB);
  auto a = MakeAllocator(o, MakeSim(kGiB));
  void* keep = *a->Allocate(2 * kMiB);
  void* p = *a->Allocate(8 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(p));
  GPUALLOC_ASSERT_OK(a->Allocate(16 * kMiB));
  const Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 26 * kMiB);
  EXPECT_EQ(s.backend_frees, 0u);
  EXPECT_EQ(s.num_ooms, 0u);
  GPUALLOC_EXPECT_OK(a->Validate());
  (void)keep;
}

TEST(AllocatorTest, GrowthPastTheLimitReturnsFreeRegionsFirst) {
  // 16 MiB more would pass the 24 MiB limit with the free 8 MiB region
  // kept: that region goes back first (trim_before_growth), or the
  // allocation fails over to garbage collection when trimming is off.
  for (bool trim : {true, false}) {
    SCOPED_TRACE(trim);
    Options o = Growth(24 * kMiB);
    o.trim_before_growth = trim;
    o.garbage_collection = false;
    auto a = MakeAllocator(o, MakeSim(kGiB));
    void* keep = *a->Allocate(2 * kMiB);
    void* p = *a->Allocate(8 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(p));
    absl::StatusOr<void*> big = a->Allocate(16 * kMiB);
    const Stats s = a->GetStats();
    if (trim) {
      GPUALLOC_EXPECT_OK(big);
      EXPECT_EQ(s.bytes_reserved, 18 * kMiB);
      EXPECT_EQ(s.peak_bytes_reserved, 18 * kMiB);
      EXPECT_EQ(s.backend_frees, 1u);
    } else {
      EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_EQ(s.backend_frees, 0u);
    }
    GPUALLOC_EXPECT_OK(a->Validate());
    (void)keep;
  }
}

// PyTorch's garbage_collection_threshold (Options::gc_threshold): the
// give-back before growth starts at T x the limit instead of the limit. Below
// T x the limit nothing goes back; past it, just enough free regions go back
// first. Without a threshold the same growth returns nothing (it stays below
// the limit).
TEST(AllocatorTest, GrowthPastTheGcThresholdReturnsFreeRegionsFirst) {
  for (double threshold : {0.5, 0.0}) {
    SCOPED_TRACE(threshold);
    Options o = Growth(100 * kMiB);
    o.gc_threshold = threshold;
    o.garbage_collection = false;
    auto a = MakeAllocator(o, MakeSim(kGiB));
    void* keep = *a->Allocate(2 * kMiB);
    void* p = *a->Allocate(20 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(p));
    // 24 MiB does not fit the free 20 MiB region: growth to 46 MiB, below
    // 0.5 x 100 MiB, returns nothing.
    void* below = *a->Allocate(24 * kMiB);
    Stats s = a->GetStats();
    EXPECT_EQ(s.bytes_reserved, 46 * kMiB);
    EXPECT_EQ(s.backend_frees, 0u);
    // 30 MiB more would make 76 MiB, past 50 MiB: with the threshold the
    // free 20 MiB region goes back first (all there is to give).
    void* past = *a->Allocate(30 * kMiB);
    s = a->GetStats();
    if (threshold > 0) {
      EXPECT_EQ(s.backend_frees, 1u);
      EXPECT_EQ(s.bytes_reserved, 56 * kMiB);
      EXPECT_EQ(s.peak_bytes_reserved, 56 * kMiB);
    } else {
      EXPECT_EQ(s.backend_frees, 0u);
      EXPECT_EQ(s.bytes_reserved, 76 * kMiB);
    }
    GPUALLOC_EXPECT_OK(a->Validate());
    for (void* q : {keep, below, past}) GPUALLOC_EXPECT_OK(a->Deallocate(q));
  }
}

TEST(AllocatorTest, GcThresholdGivesBackJustEnough) {
  // Two free regions, 8 and 16 MiB; a growth of 10 MiB past 0.5 x 64 MiB by
  // 6 MiB returns the larger one only (largest first, until it fits).
  Options o = Growth(64 * kMiB);
  o.gc_threshold = 0.5;
  auto a = MakeAllocator(o, MakeSim(kGiB));
  void* keep = *a->Allocate(4 * kMiB);
  void* x = *a->Allocate(8 * kMiB);
  void* y = *a->Allocate(16 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(x));
  GPUALLOC_ASSERT_OK(a->Deallocate(y));
  void* z = *a->Allocate(18 * kMiB);  // 28 + 18 = 46 > 32
  const Stats s = a->GetStats();
  EXPECT_EQ(s.backend_frees, 1u);
  EXPECT_EQ(s.bytes_reserved, 30 * kMiB);  // 4 + 8 + 18
  GPUALLOC_EXPECT_OK(a->Validate());
  for (void* q : {keep, z}) GPUALLOC_EXPECT_OK(a->Deallocate(q));
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

// Destruction frees every region; a free the device refuses there is tried
// once more, since nothing could free the region later.
TEST(AllocatorTest, DestructionTriesARefusedFreeOnceMore) {
  auto sim = MakeSim(kGiB);
  {
    auto a = MakeAllocator(Growth(), sim);
    GPUALLOC_ASSERT_OK(a->Allocate(kMiB).status());
    sim->FailNthCall(SimOp::kFree, 1,
                     absl::InternalError("simulated driver error"));
  }
  EXPECT_EQ(sim->bytes_allocated(), 0u);
  EXPECT_EQ(sim->live_allocations(), 0u);
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

}  // namespace
}  // namespace gpualloc
