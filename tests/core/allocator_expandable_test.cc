// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_expandable_test.cc: the BFC allocator with expandable
// regions on the simulated device's virtual memory: TensorFlow's
// virtual-memory case, granule accounting (mapped bytes = reserved bytes,
// nothing mapped twice, nothing unmapped while in use or while work on it is
// pending), faults, defaults, and no out-of-memory on the bundled traces when
// the device holds their peak with 2% to spare.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using testing::kGiB;
using testing::kMiB;
using testing::MakeAllocator;
using testing::MakeSim;

Options Expandable(std::uint64_t limit, bool preallocate = false) {
  Options o;
  o.preallocate = preallocate;
  o.memory_limit = limit;
  o.expandable = Tristate::kOn;
  return o;
}

// Mapped bytes equal reserved bytes, physical memory is exactly what is
// mapped (handles are released once mapped), and the core is valid.
void ExpectAccounting(const Allocator& a, const SimBackend& sim) {
  const Stats s = a.GetStats();
  EXPECT_EQ(sim.mapped_bytes(), s.bytes_reserved);
  EXPECT_EQ(sim.physical_bytes(), s.bytes_reserved);
  EXPECT_EQ(sim.bytes_allocated(), 0u);  // no plain allocation at all
  GPUALLOC_EXPECT_OK(a.Validate());
}

// TensorFlow's virtual-memory case: 128 blocks of 4 MiB under a 512 MiB
// limit, 127 freed, then 508 MiB. The block kept sits in the middle of the
// largest region, so separate regions cannot make room; expandable regions
// unmap the free granules and map 508 MiB next to the kept block.
bool LargeRequestAfterFragmentation(Options o) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(o, sim);
  std::vector<void*> blocks;
  for (int i = 0; i < 128; ++i) {
    auto p = a->Allocate(4 * kMiB);
    EXPECT_TRUE(p.ok()) << i << ": " << p.status();
    if (!p.ok()) return false;
    blocks.push_back(*p);
  }
  for (int i = 0; i < 128; ++i) {
    if (i != 100) GPUALLOC_EXPECT_OK(a->Deallocate(blocks[i]));
  }
  auto big = a->Allocate(508 * kMiB);
  GPUALLOC_EXPECT_OK(a->Validate());
  if (!big.ok()) {
    EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
    return false;
  }
  if (o.expandable == Tristate::kOn) ExpectAccounting(*a, *sim);
  EXPECT_LE(a->GetStats().bytes_reserved, 512 * kMiB);
  GPUALLOC_EXPECT_OK(a->Deallocate(*big));
  GPUALLOC_EXPECT_OK(a->Deallocate(blocks[100]));
  return true;
}

TEST(AllocatorExpandableTest, TensorFlowVirtualMemoryCaseWithGrowth) {
  Options o = Expandable(512 * kMiB);
  o.growth_policy = GrowthPolicy::kDoubling;  // TF's growth
  EXPECT_TRUE(LargeRequestAfterFragmentation(o));
  o.expandable = Tristate::kOff;  // regions of 4, 8, ..., 256 MiB
  EXPECT_FALSE(LargeRequestAfterFragmentation(o));
}

TEST(AllocatorExpandableTest, TensorFlowVirtualMemoryCasePreallocated) {
  Options o = Expandable(512 * kMiB, /*preallocate=*/true);
  EXPECT_TRUE(LargeRequestAfterFragmentation(o));
  o.expandable = Tristate::kOff;  // one 512 MiB region
  EXPECT_FALSE(LargeRequestAfterFragmentation(o));
}

TEST(AllocatorExpandableTest, GrowthJoinsTheFreeTail) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(256 * kMiB), sim);
  // A small growth maps three 2 MiB granules at once (one handle).
  void* x = *a->Allocate(kMiB);
  EXPECT_EQ(a->GetStats().bytes_reserved, 6 * kMiB);
  // 3 MiB more fits the free 5 MiB tail: no growth.
  void* y = *a->Allocate(3 * kMiB);
  EXPECT_EQ(testing::Addr(y), testing::Addr(x) + kMiB);
  EXPECT_EQ(a->GetStats().backend_allocs, 1u);
  // 20 MiB more: the free 2 MiB tail plus 18 MiB mapped right after it.
  void* z = *a->Allocate(20 * kMiB);
  EXPECT_EQ(testing::Addr(z), testing::Addr(x) + 4 * kMiB);
  const Stats s = a->GetStats();
  EXPECT_EQ(s.bytes_reserved, 24 * kMiB);
  EXPECT_EQ(s.backend_allocs, 2u);
  EXPECT_EQ(a->GetSnapshot().regions.size(), 1u);
  ExpectAccounting(*a, *sim);
  for (void* p : {x, y, z}) GPUALLOC_EXPECT_OK(a->Deallocate(p));
  EXPECT_EQ(a->GetStats().largest_free_block_bytes, 24 * kMiB);
}

TEST(AllocatorExpandableTest, TrimUnmapsFreeGranulesAndGrowthRefillsTheHole) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(256 * kMiB), sim);
  // Each growth maps exactly what it needs (6 MiB and more is no small
  // growth).
  void* x = *a->Allocate(6 * kMiB);
  void* y = *a->Allocate(12 * kMiB);
  void* z = *a->Allocate(6 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(y));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().bytes_reserved, 12 * kMiB);
  EXPECT_EQ(a->GetSnapshot().regions.size(), 2u);  // the hole splits it
  ExpectAccounting(*a, *sim);
  // 10 MiB fits the 12 MiB hole (mapping 10 MiB) better than the end.
  void* w = *a->Allocate(10 * kMiB);
  EXPECT_EQ(testing::Addr(w), testing::Addr(x) + 6 * kMiB);
  EXPECT_EQ(a->GetStats().bytes_reserved, 22 * kMiB);
  ExpectAccounting(*a, *sim);
  for (void* p : {x, z, w}) GPUALLOC_EXPECT_OK(a->Deallocate(p));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().bytes_reserved, 0u);
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  ExpectAccounting(*a, *sim);
}

TEST(AllocatorExpandableTest, NothingIsUnmappedWhileWorkOnItIsPending) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(256 * kMiB), sim);
  const Stream s1(1), s2(2);
  void* x = *a->Allocate(8 * kMiB, s1);
  void* y = *a->Allocate(2 * kMiB, s2);
  sim->Use(s1, testing::Addr(x), 8 * kMiB);
  sim->Use(s2, testing::Addr(y), 2 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(x, s1));  // s1's work still runs
  GPUALLOC_ASSERT_OK(a->Deallocate(y, s2));
  GPUALLOC_ASSERT_OK(a->Trim());
  // The host waited for both streams before unmapping their memory.
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_GE(a->GetStats().host_waits, 2u);
  EXPECT_EQ(a->GetStats().bytes_reserved, 0u);
  EXPECT_EQ(sim->access_violations(), 0u);
  ExpectAccounting(*a, *sim);
}

// Growth below the limit unmaps nothing: free granules the request cannot
// use stay mapped for the next step (no device call now, none later).
TEST(AllocatorExpandableTest, GrowthBelowTheLimitUnmapsNothing) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(256 * kMiB), sim);
  const Stream s(1);
  void* x = *a->Allocate(8 * kMiB, s);
  void* guard = *a->Allocate(2 * kMiB, s);
  GPUALLOC_ASSERT_OK(a->Deallocate(x, s));
  void* y = *a->Allocate(16 * kMiB, s);
  const Stats st = a->GetStats();
  EXPECT_EQ(st.bytes_reserved, 26 * kMiB);
  EXPECT_EQ(st.backend_frees, 0u);
  EXPECT_EQ(sim->calls(SimOp::kUnmap), 0u);
  // The step repeats: the free 8 MiB serves it, nothing is mapped.
  void* again = *a->Allocate(8 * kMiB, s);
  EXPECT_EQ(again, x);
  EXPECT_EQ(a->GetStats().backend_allocs, st.backend_allocs);
  ExpectAccounting(*a, *sim);
  for (void* p : {guard, y, again}) GPUALLOC_EXPECT_OK(a->Deallocate(p, s));
}

// Growth that would pass the limit unmaps free granules the request cannot
// use first, but never waits on the host for that: memory whose work is
// still pending stays mapped, and a later growth, once an event query says
// the work completed, unmaps it.
TEST(AllocatorExpandableTest,
     GrowthPastTheLimitUnmapsOnlyWhatNoPendingWorkUses) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(50 * kMiB), sim);
  const Stream s(1);
  void* x = *a->Allocate(8 * kMiB, s);
  void* guard = *a->Allocate(2 * kMiB, s);
  sim->Use(s, testing::Addr(x), 8 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(x, s));  // s's work on x still runs
  // 16 MiB does not fit the free 8 MiB: growth at the end, under the limit,
  // so nothing is unmapped and nobody waited.
  void* y = *a->Allocate(16 * kMiB, s);
  Stats st = a->GetStats();
  EXPECT_EQ(st.host_waits, 0u);
  EXPECT_EQ(st.bytes_reserved, 26 * kMiB);
  EXPECT_EQ(st.backend_frees, 0u);
  // 32 MiB more would pass the limit with x's 8 MiB kept. The work
  // completes; the growth finds out by a query and unmaps x's granules.
  sim->CompleteAll();
  void* z = *a->Allocate(32 * kMiB, s);
  st = a->GetStats();
  EXPECT_EQ(st.host_waits, 0u);
  EXPECT_EQ(st.bytes_reserved, 50 * kMiB);
  EXPECT_EQ(st.backend_frees, 1u);
  EXPECT_EQ(sim->calls(SimOp::kSynchronizeEvent), 0u);
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_EQ(sim->access_violations(), 0u);
  ExpectAccounting(*a, *sim);
  for (void* p : {guard, y, z}) GPUALLOC_EXPECT_OK(a->Deallocate(p, s));
}

// Growth past the limit moves physical memory instead of giving it back and
// creating more: the handle it unmaps is mapped again where it grows, so the
// device sees an unmap and a map, with no release and one create fewer.
TEST(AllocatorExpandableTest, GrowthPastTheLimitMapsTheHandleItUnmapsAgain) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(50 * kMiB), sim);
  void* x = *a->Allocate(8 * kMiB);  // one handle of 8 MiB
  void* guard = *a->Allocate(2 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(x));
  void* y = *a->Allocate(16 * kMiB);  // at the end: 26 MiB mapped
  ASSERT_EQ(a->GetStats().bytes_reserved, 26 * kMiB);
  const std::uint64_t creates = sim->calls(SimOp::kCreatePhysical);
  const std::uint64_t releases = sim->calls(SimOp::kReleasePhysical);
  const std::uint64_t maps = sim->calls(SimOp::kMap);
  // 32 MiB more would pass the limit: x's free 8 MiB is unmapped and its
  // handle mapped again at the end, with 12 new handles of 2 MiB (the upper
  // half of the limit maps a handle per granule).
  void* z = *a->Allocate(32 * kMiB);
  const Stats st = a->GetStats();
  EXPECT_EQ(st.bytes_reserved, 50 * kMiB);
  EXPECT_LE(st.peak_bytes_reserved, 50 * kMiB);
  EXPECT_EQ(st.backend_frees, 1u);
  EXPECT_EQ(sim->calls(SimOp::kReleasePhysical) - releases, 0u);
  EXPECT_EQ(sim->calls(SimOp::kCreatePhysical) - creates, 12u);
  EXPECT_EQ(sim->calls(SimOp::kMap) - maps, 13u);
  ExpectAccounting(*a, *sim);
  // The moved handle goes back like any other.
  for (void* p : {guard, y, z}) GPUALLOC_EXPECT_OK(a->Deallocate(p));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(a->GetStats().bytes_reserved, 0u);
  EXPECT_EQ(sim->physical_bytes(), 0u);
}

// PyTorch's garbage_collection_threshold with expandable regions: free
// granules are unmapped before a growth would pass T x the limit; below it
// nothing is unmapped. Without a threshold the same growth unmaps nothing.
TEST(AllocatorExpandableTest, GrowthPastTheGcThresholdUnmapsFreeGranulesFirst) {
  for (double threshold : {0.5, 0.0}) {
    SCOPED_TRACE(threshold);
    auto sim = MakeSim(kGiB);
    Options o = Expandable(128 * kMiB);
    o.gc_threshold = threshold;
    auto a = MakeAllocator(o, sim);
    void* x = *a->Allocate(20 * kMiB);
    void* guard = *a->Allocate(6 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(x));
    // The free 20 MiB cannot take 24 MiB: mapped at the end, 50 MiB in all,
    // below 0.5 x 128 MiB: nothing unmapped.
    void* below = *a->Allocate(24 * kMiB);
    Stats st = a->GetStats();
    EXPECT_EQ(st.bytes_reserved, 50 * kMiB);
    EXPECT_EQ(st.backend_frees, 0u);
    // 30 MiB more would make 80 MiB, past 64 MiB: x's granules go first.
    void* past = *a->Allocate(30 * kMiB);
    st = a->GetStats();
    if (threshold > 0) {
      EXPECT_GE(st.backend_frees, 1u);
      EXPECT_LE(st.bytes_reserved, 64 * kMiB);
      EXPECT_LE(st.peak_bytes_reserved, 64 * kMiB);
    } else {
      EXPECT_EQ(st.backend_frees, 0u);
      EXPECT_EQ(st.bytes_reserved, 80 * kMiB);
    }
    EXPECT_EQ(st.host_waits, 0u);
    ExpectAccounting(*a, *sim);
    for (void* p : {guard, below, past}) GPUALLOC_EXPECT_OK(a->Deallocate(p));
  }
}

TEST(AllocatorExpandableTest, RandomOperationsKeepTheGranulesAccounted) {
  SimOptions so;
  so.profile = "h100";
  so.total_bytes = 256 * kMiB;
  so.memory = SimMemory::kHostBacked;
  auto sim = testing::MakeSim(so);
  Options o = Expandable(128 * kMiB);
  auto a = MakeAllocator(o, sim);
  std::mt19937_64 rng(7);
  struct Live {
    void* p;
    std::uint64_t size;
    std::uint8_t fill;
  };
  std::vector<Live> live;
  for (int op = 0; op < 3000; ++op) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 5 || live.empty()) {
      // Mostly small, sometimes a few granules.
      const std::uint64_t size =
          rng() % 4 == 0 ? 1 + rng() % (12 * kMiB) : 1 + rng() % (64 * 1024);
      auto p = a->Allocate(size);
      if (!p.ok()) {
        ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted)
            << p.status();
        continue;
      }
      const std::uint8_t fill = static_cast<std::uint8_t>(rng());
      std::memset(*p, fill, size);
      live.push_back(Live{*p, size, fill});
    } else if (what < 9) {
      const std::size_t i = rng() % live.size();
      const Live l = live[i];
      const auto* bytes = static_cast<const std::uint8_t*>(l.p);
      for (std::uint64_t k = 0; k < l.size; k += 4093) {
        ASSERT_EQ(bytes[k], l.fill) << "block corrupted at op " << op;
      }
      ASSERT_EQ(bytes[l.size - 1], l.fill);
      GPUALLOC_ASSERT_OK(a->Deallocate(l.p));
      live[i] = live.back();
      live.pop_back();
    } else {
      GPUALLOC_ASSERT_OK(a->Trim());
    }
    ExpectAccounting(*a, *sim);
    if (::testing::Test::HasFailure()) return;
  }
  for (const Live& l : live) GPUALLOC_EXPECT_OK(a->Deallocate(l.p));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  EXPECT_GT(sim->calls(SimOp::kUnmap), 0u);
}

TEST(AllocatorExpandableTest, FailedMappingLeavesNothingBehind) {
  auto sim = MakeSim(kGiB);
  // Preallocating 8 MiB maps four 2 MiB handles; the third cannot be mapped.
  auto a = MakeAllocator(Expandable(8 * kMiB, /*preallocate=*/true), sim);
  sim->FailNthCall(SimOp::kMap, 3, absl::InternalError("injected map fault"));
  auto p = a->Allocate(2 * kMiB);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal) << p.status();
  EXPECT_NE(p.status().message().find("injected map fault"), std::string::npos)
      << p.status();
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  ExpectAccounting(*a, *sim);
  // Out of physical memory is out of memory, with the device's reason.
  sim->FailNthCall(SimOp::kCreatePhysical, 1);
  auto q = a->Allocate(2 * kMiB);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kResourceExhausted)
      << q.status();
  ExpectAccounting(*a, *sim);
  // The next attempt works.
  auto r = a->Allocate(8 * kMiB);
  GPUALLOC_ASSERT_OK(r.status());
  ExpectAccounting(*a, *sim);
  GPUALLOC_EXPECT_OK(a->Deallocate(*r));
}

TEST(AllocatorExpandableTest, DestructionUnmapsAndFreesTheRange) {
  auto sim = MakeSim(kGiB);
  {
    auto a = MakeAllocator(Expandable(256 * kMiB), sim);
    GPUALLOC_ASSERT_OK(a->Allocate(10 * kMiB).status());
    EXPECT_GT(sim->reserved_address_bytes(), 0u);
  }
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  EXPECT_EQ(sim->physical_bytes(), 0u);
  EXPECT_EQ(sim->reserved_address_bytes(), 0u);
}

TEST(AllocatorExpandableTest, DestructionWaitsForPendingWorkBeforeUnmapping) {
  auto sim = MakeSim(kGiB);
  const Stream s1(1), s2(2);
  {
    auto a = MakeAllocator(Expandable(256 * kMiB), sim);
    void* freed = *a->Allocate(4 * kMiB, s1);
    void* live = *a->Allocate(4 * kMiB, s2);
    sim->Use(s1, testing::Addr(freed), 4 * kMiB);
    sim->Use(s2, testing::Addr(live), 4 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(freed, s1));
    // `live` dies with the allocator, its kernel still running.
  }
  EXPECT_EQ(sim->hazards(), 0u);  // no unmap under pending work
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  EXPECT_EQ(sim->physical_bytes(), 0u);
}

TEST(AllocatorExpandableTest, HandlesAreReleasedOnlyAfterTheirUnmap) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(256 * kMiB), sim);
  // Growth maps one handle of its whole size: one create, one map.
  void* p = *a->Allocate(6 * kMiB);
  EXPECT_EQ(sim->calls(SimOp::kCreatePhysical), 1u);
  EXPECT_EQ(sim->calls(SimOp::kMap), 1u);
  EXPECT_EQ(sim->calls(SimOp::kReleasePhysical), 0u);
  GPUALLOC_ASSERT_OK(a->Deallocate(p));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(sim->calls(SimOp::kUnmap), 1u);
  EXPECT_EQ(sim->calls(SimOp::kReleasePhysical), 1u);
  ExpectAccounting(*a, *sim);
  EXPECT_EQ(sim->physical_bytes(), 0u);
}

// What the device holds is what the allocator counts: bytes_reserved equals
// the simulator's physical memory, and nothing is mapped outside a region.
void ExpectDeviceMatches(const Allocator& a, const SimBackend& sim) {
  EXPECT_EQ(sim.physical_bytes(), a.GetStats().bytes_reserved);
  GPUALLOC_EXPECT_OK(a.Validate());
}

// A handle whose release the device refuses after its unmap stays the
// allocator's: counted in bytes_reserved (the device still holds it) and
// released by the next Trim.
TEST(AllocatorExpandableTest, RefusedReleaseKeepsTheHandleForTheNextTrim) {
  for (bool preallocate : {false, true}) {
    SCOPED_TRACE(preallocate ? "preallocated" : "growing");
    auto sim = MakeSim(kGiB);
    auto a = MakeAllocator(Expandable(64 * kMiB, preallocate), sim);
    void* p = *a->Allocate(6 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(p));
    sim->FailNthCall(SimOp::kReleasePhysical, 1,
                     absl::InternalError("injected release fault"));
    const absl::Status trimmed = a->Trim();
    EXPECT_EQ(trimmed.code(), absl::StatusCode::kInternal) << trimmed;
    EXPECT_NE(trimmed.message().find("injected release fault"),
              std::string::npos)
        << trimmed;
    EXPECT_GT(sim->physical_bytes(), 0u);
    ExpectDeviceMatches(*a, *sim);
    GPUALLOC_ASSERT_OK(a->Trim());
    EXPECT_EQ(sim->physical_bytes(), 0u);
    EXPECT_EQ(sim->mapped_bytes(), 0u);
    ExpectDeviceMatches(*a, *sim);
  }
}

// The destructor releases what the device refused before.
TEST(AllocatorExpandableTest, RefusedReleaseIsRetriedAtDestruction) {
  auto sim = MakeSim(kGiB);
  {
    auto a = MakeAllocator(Expandable(64 * kMiB), sim);
    void* p = *a->Allocate(6 * kMiB);
    GPUALLOC_ASSERT_OK(a->Deallocate(p));
    sim->FailNthCall(SimOp::kReleasePhysical, 1,
                     absl::InternalError("injected release fault"));
    EXPECT_FALSE(a->Trim().ok());
  }
  EXPECT_EQ(sim->physical_bytes(), 0u);
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  EXPECT_EQ(sim->reserved_address_bytes(), 0u);
}

// At destruction, a release or address free the device refuses is tried
// once more: nothing could give the memory back later.
TEST(AllocatorExpandableTest, DestructionTriesRefusedCallsOnceMore) {
  auto sim = MakeSim(kGiB);
  {
    auto a = MakeAllocator(Expandable(64 * kMiB), sim);
    GPUALLOC_ASSERT_OK(a->Allocate(6 * kMiB).status());
    sim->FailNthCall(SimOp::kReleasePhysical, 1,
                     absl::InternalError("injected release fault"));
    sim->FailNthCall(SimOp::kFreeAddress, 1,
                     absl::InternalError("injected free-address fault"));
  }
  EXPECT_EQ(sim->physical_bytes(), 0u);
  EXPECT_EQ(sim->mapped_bytes(), 0u);
  EXPECT_EQ(sim->reserved_address_bytes(), 0u);
}

// Memory the device refused to take back counts against the limit until it
// goes: growth first retries the release, and passes the limit never.
TEST(AllocatorExpandableTest, RefusedReleaseCountsAgainstTheLimit) {
  auto sim = MakeSim(kGiB);
  auto a = MakeAllocator(Expandable(8 * kMiB), sim);
  void* p = *a->Allocate(8 * kMiB);
  GPUALLOC_ASSERT_OK(a->Deallocate(p));
  sim->FailNthCall(SimOp::kReleasePhysical, 1,
                   absl::InternalError("injected release fault"));
  EXPECT_FALSE(a->Trim().ok());
  ExpectDeviceMatches(*a, *sim);
  // The retry at growth is refused too: no room under the limit.
  sim->FailNthCall(SimOp::kReleasePhysical, 1,
                   absl::InternalError("injected release fault"));
  auto q = a->Allocate(8 * kMiB);
  EXPECT_LE(sim->physical_bytes(), 8 * kMiB);
  ExpectDeviceMatches(*a, *sim);
  if (q.ok()) GPUALLOC_ASSERT_OK(a->Deallocate(*q));
  // Once the device takes it back, the limit has room again.
  auto r = a->Allocate(8 * kMiB);
  GPUALLOC_ASSERT_OK(r.status());
  EXPECT_LE(sim->physical_bytes(), 8 * kMiB);
  ExpectDeviceMatches(*a, *sim);
  GPUALLOC_ASSERT_OK(a->Deallocate(*r));
}

// A failed set-access whose rollback unmap fails too: the refused growth
// changes nothing visible and loses nothing; the range stays the
// allocator's (counted, never handed out) until the device unmaps it.
TEST(AllocatorExpandableTest,
     RefusedSetAccessWithARefusedRollbackLosesNothing) {
  for (bool preallocate : {false, true}) {
    SCOPED_TRACE(preallocate ? "preallocated" : "growing");
    auto sim = MakeSim(kGiB);
    auto a = MakeAllocator(Expandable(256 * kMiB, preallocate), sim);
    sim->FailNthCall(SimOp::kSetAccess, 1,
                     absl::InternalError("injected set-access fault"));
    sim->FailNthCall(SimOp::kUnmap, 1,
                     absl::InternalError("injected unmap fault"));
    auto p = a->Allocate(64 * kMiB);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal) << p.status();
    ExpectDeviceMatches(*a, *sim);
    EXPECT_LE(sim->physical_bytes(), 256 * kMiB);
    // The same request again works, and stays under the limit.
    auto q = a->Allocate(64 * kMiB);
    GPUALLOC_ASSERT_OK(q.status());
    EXPECT_TRUE(sim->IsAccessible(testing::Addr(*q), 64 * kMiB));
    EXPECT_LE(sim->physical_bytes(), 256 * kMiB);
    ExpectDeviceMatches(*a, *sim);
    GPUALLOC_ASSERT_OK(a->Deallocate(*q));
    GPUALLOC_ASSERT_OK(a->Trim());
    EXPECT_EQ(sim->physical_bytes(), 0u);
    EXPECT_EQ(sim->mapped_bytes(), 0u);
    ExpectDeviceMatches(*a, *sim);
  }
}

// A refused map whose handle's release is refused too keeps the handle.
TEST(AllocatorExpandableTest, RefusedMapWithARefusedReleaseLosesNothing) {
  auto sim = MakeSim(kGiB);
  {
    auto a = MakeAllocator(Expandable(256 * kMiB), sim);
    sim->FailNthCall(SimOp::kMap, 1, absl::InternalError("injected map"));
    sim->FailNthCall(SimOp::kReleasePhysical, 1,
                     absl::InternalError("injected release fault"));
    auto p = a->Allocate(64 * kMiB);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal) << p.status();
    ExpectDeviceMatches(*a, *sim);
    GPUALLOC_ASSERT_OK(a->Trim());
    EXPECT_EQ(sim->physical_bytes(), 0u);
    ExpectDeviceMatches(*a, *sim);
  }
  EXPECT_EQ(sim->physical_bytes(), 0u);
}

TEST(AllocatorExpandableTest, AGranuleThatIsNoPowerOfTwoWorks) {
  auto sim = MakeSim(kGiB);
  Options o = Expandable(240 * kMiB);
  o.growth_granularity = 6 * kMiB;
  auto a = MakeAllocator(o, sim);
  void* p = *a->Allocate(kMiB);  // a small growth: three 6 MiB units
  void* q = *a->Allocate(7 * kMiB);
  EXPECT_EQ(a->GetStats().bytes_reserved, 18 * kMiB);
  // 10 MiB free at the end: 12 MiB more would do, a small growth again.
  void* r = *a->Allocate(20 * kMiB);
  EXPECT_EQ(a->GetStats().bytes_reserved, 36 * kMiB);
  GPUALLOC_EXPECT_OK(a->Deallocate(r));
  EXPECT_EQ(testing::Addr(p) % (2 * kMiB), 0u);
  ExpectAccounting(*a, *sim);
  GPUALLOC_EXPECT_OK(a->Deallocate(p));
  GPUALLOC_EXPECT_OK(a->Deallocate(q));
  GPUALLOC_ASSERT_OK(a->Trim());
  EXPECT_EQ(sim->mapped_bytes(), 0u);
}

TEST(AllocatorExpandableTest, TheDefaultFollowsTheBackend) {
  Options o;
  o.preallocate = false;
  auto with_vmm = MakeSim(kGiB);
  auto a = MakeAllocator(o, with_vmm);
  GPUALLOC_ASSERT_OK(a->Allocate(kMiB).status());
  EXPECT_EQ(with_vmm->calls(SimOp::kAllocate), 0u);
  EXPECT_EQ(with_vmm->calls(SimOp::kMap), 1u);

  SimOptions so;
  so.profile = "h100";
  so.total_bytes = kGiB;
  so.virtual_memory = false;
  auto without = testing::MakeSim(so);
  auto b = MakeAllocator(o, without);
  GPUALLOC_ASSERT_OK(b->Allocate(kMiB).status());
  EXPECT_EQ(without->calls(SimOp::kAllocate), 1u);

  o.expandable = Tristate::kOn;
  auto refused = CreateAllocator(o, without);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  o.mode = AllocatorMode::kPlatform;
  auto platform = CreateAllocator(o, with_vmm);
  EXPECT_EQ(platform.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(platform.status().message().find("expandable"), std::string::npos);
}

// The goal: no out-of-memory on a trace whose peak live bytes are at
// most 98% of the device.
TEST(AllocatorExpandableTest, BundledTracesFitADeviceWith2PercentToSpare) {
#if GPUALLOC_DEBUG_CHECKS >= 2
  // 52k operations with the whole validator after each: minutes under the
  // sanitizers' build; the main test run replays them.
  GTEST_SKIP() << "debug_checks=2 build: covered by the main test run";
#endif
  const std::string dir = GPUALLOC_TRACE_DIR;
  int replayed = 0;
  for (const char* name : {"torch-cs336-medium_1024_inference.csv",
                           "torch-cs336-medium_1024_training.csv",
                           "torch-cs336-medium_128_training.csv",
                           "torch-opt125m-zo-finetune.csv"}) {
    std::ifstream in(dir + "/" + name);
    if (!in) continue;
    struct Op {
      bool alloc;
      std::uint64_t id, size;
    };
    std::vector<Op> ops;
    std::string line;
    std::getline(in, line);  // header
    std::uint64_t live = 0, peak = 0;
    std::map<std::uint64_t, std::uint64_t> sizes;
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ',');
      ASSERT_EQ(f.size(), 5u) << line;
      Op op{f[1] == "alloc", std::stoull(f[2]), std::stoull(f[3])};
      if (op.alloc) {
        live += op.size;
        sizes[op.id] = op.size;
        peak = std::max(peak, live);
      } else {
        live -= sizes[op.id];
      }
      ops.push_back(op);
    }
    SimOptions so;
    so.profile = "h100";
    // Peak / 0.98, in whole 256-byte blocks (the device's alignment).
    so.total_bytes =
        (static_cast<std::uint64_t>(static_cast<double>(peak) / 0.98) / 256 +
         1) *
        256;
    auto sim = testing::MakeSim(so);
    Options o;
    o.preallocate = false;
    o.memory_fraction = 1.0;
    o.expandable = Tristate::kOn;
    auto a = MakeAllocator(o, sim);
    std::map<std::uint64_t, void*> ptrs;
    for (const Op& op : ops) {
      if (op.alloc) {
        auto p = a->Allocate(op.size);
        ASSERT_TRUE(p.ok()) << name << ": peak live " << peak << " bytes on a "
                            << so.total_bytes << "-byte device: " << p.status();
        ptrs[op.id] = *p;
      } else {
        GPUALLOC_ASSERT_OK(a->Deallocate(ptrs.at(op.id)));
        ptrs.erase(op.id);
      }
    }
    ExpectAccounting(*a, *sim);
    ++replayed;
  }
  EXPECT_EQ(replayed, 4) << "traces missing from " << dir;
}

}  // namespace
}  // namespace gpualloc
