// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_streams_test.cc: the BFC allocator across streams on the
// simulated device, whose hazard detector flags every piece of work that
// touches memory another stream's unfinished work still uses.
//
//   the stream matrix: same stream; another stream with and without a wait;
//     RecordStream; a merge of chunks freed on different streams;
//   the out-of-memory path: wait for pending work, retry, then collect;
//   single-stream workloads record no event;
//   random multi-stream sequences: zero hazards, Validate after every step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/streams/stream_order.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using testing::Addr;
using testing::kGiB;
using testing::kMiB;

const Stream kS1(0x1000);
const Stream kS2(0x2000);
const Stream kS3(0x3000);

// The calls that exist to learn completion: markers (event records or
// counter writes), event queries, and making their objects.
bool IsCompletionOp(SimOp op) {
  return op == SimOp::kRecordEvent || op == SimOp::kQueryEvent ||
         op == SimOp::kCreateEvent || op == SimOp::kWriteCounter ||
         op == SimOp::kCreateCounters;
}
// Markers recorded, events or counter writes.
std::uint64_t Markers(const SimBackend& sim) {
  return sim.calls(SimOp::kRecordEvent) + sim.calls(SimOp::kWriteCounter);
}
// Markers ahead of need stay within the stream order's budget; a wait may
// need one more (the marker it waits for).
bool WithinMarkerBudget(std::uint64_t markers, std::uint64_t frees,
                        std::uint64_t waits = 0) {
  return markers * 100 <= frees * core::StreamOrder::kCallsPer100Frees +
                              100 * core::StreamOrder::kBurstCalls +
                              100 * waits;
}

std::string Hazards(const SimBackend& sim) {
  std::string out;
  for (const SimHazard& h : sim.hazard_log()) out += h.ToString() + "\n";
  return out;
}

struct Fixture {
  explicit Fixture(CrossStreamReuse policy, bool preallocate = true,
                   std::uint64_t limit = 64 * kMiB,
                   SimClock clock = SimClock::kManual,
                   AllocatorMode mode = AllocatorMode::kBfc,
                   Tristate expandable = Tristate::kAuto,
                   std::uint64_t split_bound = 0) {
    SimOptions so;
    so.profile = "h100";
    so.total_bytes = 1 * kGiB;
    so.clock = clock;
    sim = testing::MakeSim(so);
    Options o;
    o.preallocate = preallocate;
    o.memory_limit = limit;
    o.cross_stream_reuse = policy;
    o.mode = mode;
    o.expandable = mode == AllocatorMode::kBfc ? expandable : Tristate::kOff;
    o.max_internal_fragmentation = split_bound;
    // Returning free regions before growth would sync the device and hide
    // the order the out-of-memory path follows; these tests are about that.
    o.trim_before_growth = false;
    allocator = testing::MakeAllocator(o, sim);
  }

  // Allocates and queues work that uses the memory on `stream`.
  void* Use(std::uint64_t bytes, Stream stream) {
    absl::StatusOr<void*> p = allocator->Allocate(bytes, stream);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    sim->Use(stream, Addr(*p), bytes);
    EXPECT_TRUE(allocator->Validate().ok()) << allocator->Validate();
    return *p;
  }
  // Real code orders a second stream's use after the first's (it reads what
  // the first wrote): an event on `from`, waited for by `to`.
  void Order(Stream from, Stream to) {
    absl::StatusOr<EventHandle> e = sim->CreateEvent();
    ASSERT_TRUE(e.ok()) << e.status();
    GPUALLOC_ASSERT_OK(sim->RecordEvent(*e, from));
    GPUALLOC_ASSERT_OK(sim->StreamWaitEvent(to, *e));
    GPUALLOC_ASSERT_OK(sim->DestroyEvent(*e));
  }
  // A block kept live after `p`, so that `p` does not merge into the free
  // rest of the region when freed (with one stream seen so far, the merged
  // chunk would be p's stream's).
  void* Guard() { return Use(256, Stream(0x9000)); }
  // Takes every free byte no stream's work uses (the rest of the pool), so
  // that only freed chunks can serve what follows.
  void Fill() {
    const std::uint64_t rest = allocator->GetStats().largest_free_block_bytes;
    if (rest != 0) Use(rest, Stream(0x9000));
  }
  void Free(void* p, Stream stream) {
    GPUALLOC_EXPECT_OK(allocator->Deallocate(p, stream));
    EXPECT_TRUE(allocator->Validate().ok()) << allocator->Validate();
  }

  std::shared_ptr<SimBackend> sim;
  std::unique_ptr<Allocator> allocator;
};

class StreamMatrixTest : public ::testing::TestWithParam<CrossStreamReuse> {};

TEST_P(StreamMatrixTest, SameStreamReusesAtOnceWithoutEvents) {
  Fixture f(GetParam());
  void* p = f.Use(1 * kMiB, kS1);
  f.Free(p, kS1);
  EXPECT_EQ(f.Use(1 * kMiB, kS1), p);  // the work on s1 is still queued
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
  EXPECT_EQ(f.allocator->GetStats().events_recorded, 0u);
  EXPECT_EQ(f.sim->calls(SimOp::kRecordEvent), 0u);
}

TEST_P(StreamMatrixTest, OtherStreamTakesMemoryNoWorkUsesFirst) {
  if (GetParam() == CrossStreamReuse::kBestFit) {
    GTEST_SKIP() << "best_fit takes the best fit whatever stream freed it";
  }
  Fixture f(GetParam());
  void* p = f.Use(1 * kMiB, kS1);
  f.Guard();
  f.Free(p, kS1);
  // p is the best fit, but s1's work may still use it; the clean rest of
  // the pool serves without an event or a wait.
  void* q = f.Use(1 * kMiB, kS2);
  EXPECT_NE(q, p);
  const Stats s = f.allocator->GetStats();
  EXPECT_EQ(s.events_recorded, 0u);
  EXPECT_EQ(s.stream_waits, 0u);
  EXPECT_EQ(s.host_waits, 0u);
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

// The poisoning case: s1's block, freed next to the large free rest of the
// pool (nothing between them), fences only its own bytes. s2 then takes most
// of the rest at once: no event, no wait of any kind, no hazard.
TEST_P(StreamMatrixTest, AFreeNextToTheFreeRestFencesOnlyItsOwnBytes) {
  Fixture f(GetParam());
  f.Use(256, kS2);  // a second stream has been seen
  void* p = f.Use(1 * kMiB, kS1);
  f.Free(p, kS1);  // s1's work on p still runs
  const std::uint64_t rest = f.allocator->GetStats().largest_free_block_bytes;
  ASSERT_GT(rest, 32 * kMiB);
  void* q = f.Use(32 * kMiB, kS2);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(Addr(q) >= Addr(p) + 1 * kMiB || Addr(q) + 32 * kMiB <= Addr(p));
  const Stats s = f.allocator->GetStats();
  EXPECT_EQ(s.events_recorded, 0u);
  EXPECT_EQ(s.stream_waits, 0u);
  EXPECT_EQ(s.host_waits, 0u);
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

TEST_P(StreamMatrixTest, OtherStreamGetsTheMemoryOnlySafely) {
  Fixture f(GetParam());
  void* p = f.Use(1 * kMiB, kS1);
  f.Guard();
  f.Free(p, kS1);
  f.Fill();
  void* q = f.Use(1 * kMiB, kS2);
  EXPECT_EQ(q, p);
  const Stats s = f.allocator->GetStats();
  if (GetParam() != CrossStreamReuse::kWhenComplete) {
    // s2 was made to wait for s1's work.
    EXPECT_EQ(s.stream_waits, 1u);
    EXPECT_EQ(s.host_waits, 0u);
    EXPECT_EQ(f.sim->calls(SimOp::kStreamWaitEvent) +
                  f.sim->calls(SimOp::kWaitCounter),
              1u);
  } else {
    // Nothing else is free: the host waited for s1's work.
    EXPECT_EQ(s.stream_waits, 0u);
    EXPECT_EQ(s.host_waits, 1u);
  }
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

TEST_P(StreamMatrixTest, OtherStreamReusesOnceTheWorkCompleted) {
  Fixture f(GetParam());
  void* p = f.Use(1 * kMiB, kS1);
  f.Guard();
  f.Free(p, kS1);
  f.Fill();
  f.sim->CompleteStream(kS1);
  EXPECT_EQ(f.Use(1 * kMiB, kS2), p);  // asked: complete
  const Stats s = f.allocator->GetStats();
  EXPECT_EQ(s.stream_waits, 0u);
  EXPECT_EQ(s.host_waits, 0u);
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

TEST_P(StreamMatrixTest, RecordStreamProtectsWorkOnTheExtraStream) {
  if (GetParam() == CrossStreamReuse::kBestFit) {
    GTEST_SKIP() << "best_fit takes the best fit whatever stream freed it";
  }
  Fixture f(GetParam());
  void* p = f.Use(1 * kMiB, kS1);
  f.Guard();
  GPUALLOC_ASSERT_OK(f.allocator->RecordStream(p, kS2));
  f.Order(kS1, kS2);
  f.sim->Use(kS2, Addr(p), 1 * kMiB);
  f.Free(p, kS1);
  f.sim->CompleteStream(kS1);          // s1 is done; s2 still runs
  EXPECT_NE(f.Use(1 * kMiB, kS1), p);  // the clean rest first
  f.Fill();
  EXPECT_EQ(f.Use(1 * kMiB, kS1), p);  // s1 waited for s2 (device or host)
  const Stats s = f.allocator->GetStats();
  if (GetParam() != CrossStreamReuse::kWhenComplete) {
    EXPECT_EQ(s.stream_waits, 1u);
    EXPECT_EQ(s.host_waits, 0u);
  } else {
    EXPECT_EQ(s.host_waits, 1u);
  }
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

TEST_P(StreamMatrixTest, PiecesFreedOnDifferentStreamsKeepTheirConditions) {
  if (GetParam() == CrossStreamReuse::kBestFit) {
    GTEST_SKIP() << "best_fit takes the best fit whatever stream freed it";
  }
  Fixture f(GetParam());
  void* a = f.Use(1 * kMiB, kS1);
  void* b = f.Use(1 * kMiB, kS2);
  f.Guard();
  ASSERT_EQ(Addr(b), Addr(a) + 1 * kMiB);
  f.Fill();
  f.Free(a, kS1);
  f.Free(b, kS2);
  // Each stream reuses its own piece at once.
  EXPECT_EQ(f.Use(1 * kMiB, kS2), b);
  EXPECT_EQ(f.Use(1 * kMiB, kS1), a);
  f.Free(a, kS1);
  f.Free(b, kS2);
  f.sim->CompleteStream(kS1);  // only s2's work is pending now
  // 2 MiB on s3 spans both pieces: s1's is known complete once asked, s2's
  // needs a stream wait or, by policy, a host wait.
  void* c = f.Use(2 * kMiB, kS3);
  EXPECT_EQ(c, a);
  const Stats s = f.allocator->GetStats();
  if (GetParam() != CrossStreamReuse::kWhenComplete) {
    EXPECT_EQ(s.stream_waits, 1u);
    EXPECT_EQ(s.host_waits, 0u);
  } else {
    EXPECT_EQ(s.stream_waits, 0u);
    EXPECT_EQ(s.host_waits, 1u);
  }
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

TEST_P(StreamMatrixTest, OutOfMemoryWaitsForOtherStreamsThenRetries) {
  // Preallocated 4 MiB: once s1 frees it all, s2 can only get it by waiting.
  Fixture f(GetParam(), /*preallocate=*/true, /*limit=*/4 * kMiB);
  void* p = f.Use(4 * kMiB, kS1);
  f.Free(p, kS1);
  void* q = f.Use(4 * kMiB, kS2);
  EXPECT_EQ(q, p);
  const Stats s = f.allocator->GetStats();
  if (GetParam() != CrossStreamReuse::kWhenComplete) {
    EXPECT_EQ(s.host_waits, 0u);
    EXPECT_EQ(s.stream_waits, 1u);
  } else {
    EXPECT_EQ(s.host_waits, 1u);
    EXPECT_EQ(f.sim->calls(SimOp::kSynchronizeEvent), 1u);
  }
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

TEST_P(StreamMatrixTest, GrowthModeWaitsBeforeCollectingRegions) {
  Fixture f(GetParam(), /*preallocate=*/false, /*limit=*/8 * kMiB);
  void* p = f.Use(6 * kMiB, kS1);
  f.Free(p, kS1);
  // 6 MiB more would pass the limit: the freed region serves after a wait
  // (or a stream wait); it is not returned to the device and regrown.
  void* q = f.Use(6 * kMiB, kS2);
  EXPECT_EQ(q, p);
  EXPECT_EQ(f.allocator->GetStats().backend_frees, 0u);
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, StreamMatrixTest,
    ::testing::Values(CrossStreamReuse::kWhenComplete,
                      CrossStreamReuse::kStreamWait,
                      CrossStreamReuse::kBeforeGrowth,
                      CrossStreamReuse::kBestFit),
    [](const ::testing::TestParamInfo<CrossStreamReuse>& info) {
      switch (info.param) {
        case CrossStreamReuse::kWhenComplete:
          return std::string("WhenComplete");
        case CrossStreamReuse::kStreamWait:
          return std::string("StreamWait");
        case CrossStreamReuse::kBeforeGrowth:
          return std::string("BeforeGrowth");
        case CrossStreamReuse::kBestFit:
          return std::string("BestFit");
      }
      return std::string("?");
    });

// With several streams, frees get events soon after them (on a budget): once
// their work completed, another stream reuses the memory after a query,
// even though the freeing stream has queued more work since. An event
// recorded only when the memory is wanted would capture that later work too,
// and the allocator would have to wait for it.
TEST_P(StreamMatrixTest, FreesAreKnownCompleteSoonAfterTheirWork) {
  Fixture f(GetParam());
  f.Guard();  // a second stream: the multi-stream rules hold from here
  std::vector<void*> blocks;
  for (int i = 0; i < 40; ++i) blocks.push_back(f.Use(kMiB, kS1));
  void* keep = f.Use(kMiB, kS1);
  f.Fill();
  for (void* p : blocks) f.Free(p, kS1);
  const std::uint64_t events = f.allocator->GetStats().events_recorded;
  EXPECT_GE(events, 1u);
  EXPECT_TRUE(WithinMarkerBudget(events, 40)) << events;
  f.sim->CompleteAll();               // the freed blocks' work is done
  f.sim->Use(kS1, Addr(keep), kMiB);  // s1 goes on working
  void* p = f.Use(30 * kMiB, kS2);
  const Stats s = f.allocator->GetStats();
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(s.host_waits, 0u);
  EXPECT_EQ(s.stream_waits, 0u);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

// Memory freed on one stream whose work is still running, wanted on another
// with no other free memory: the default (before_growth) makes the new stream
// wait on the device for that work and reuses the memory, where stream_wait
// and when_complete grow (stream_wait waits only when growth cannot help).
TEST(AllocatorStreamsTest, BeforeGrowthWaitsOnTheDeviceInsteadOfGrowing) {
  for (CrossStreamReuse policy :
       {CrossStreamReuse::kBeforeGrowth, CrossStreamReuse::kStreamWait,
        CrossStreamReuse::kWhenComplete}) {
    for (Tristate expandable : {Tristate::kOn, Tristate::kOff}) {
      SCOPED_TRACE(::testing::Message()
                   << static_cast<int>(policy)
                   << (expandable == Tristate::kOn ? " expandable"
                                                   : " separate regions"));
      Fixture f(policy, /*preallocate=*/false, 256 * kMiB, SimClock::kManual,
                AllocatorMode::kBfc, expandable);
      // Once several streams are in use, frees earn the budget of waits (3
      // per 100 frees).
      f.Free(f.Use(256, kS3), kS3);
      for (int i = 0; i < 40; ++i) {
        f.Free(f.Use(256, kS1), kS1);
        f.sim->CompleteAll();
      }
      void* p = f.Use(8 * kMiB, kS1);  // its work stays queued
      f.Free(p, kS1);
      const Stats before = f.allocator->GetStats();
      absl::StatusOr<void*> q = f.allocator->Allocate(8 * kMiB, kS2);
      ASSERT_TRUE(q.ok()) << q.status();
      f.sim->Use(kS2, Addr(*q), 8 * kMiB);
      const Stats after = f.allocator->GetStats();
      EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
      EXPECT_EQ(after.host_waits, 0u);
      if (policy == CrossStreamReuse::kBeforeGrowth) {
        EXPECT_EQ(*q, p);
        EXPECT_EQ(after.stream_waits, before.stream_waits + 1);
        EXPECT_EQ(after.backend_allocs, before.backend_allocs);
        EXPECT_EQ(after.peak_bytes_reserved, before.peak_bytes_reserved);
      } else {
        EXPECT_NE(*q, p);
        EXPECT_EQ(after.stream_waits, 0u);
        EXPECT_GT(after.backend_allocs, before.backend_allocs);
      }
      f.Free(*q, kS2);
    }
  }
}

TEST(AllocatorStreamsTest, TheDetectorSeesUndeclaredUse) {
  // Using memory on a stream the allocator was not told about is the caller's
  // bug; the simulator catches it, which is what makes the zero counts above
  // meaningful.
  Fixture f(CrossStreamReuse::kWhenComplete);
  void* p = f.Use(1 * kMiB, kS1);
  f.Order(kS1, kS2);
  f.sim->Use(kS2, Addr(p), 1 * kMiB);  // no RecordStream
  EXPECT_EQ(f.sim->hazards(), 0u);
  f.Free(p, kS1);
  EXPECT_EQ(f.Use(1 * kMiB, kS1), p);
  EXPECT_EQ(f.sim->hazards(), 1u);
}

TEST(AllocatorStreamsTest, SingleStreamWorkloadRecordsNoEvent) {
  Fixture f(CrossStreamReuse::kWhenComplete, /*preallocate=*/false,
            /*limit=*/16 * kMiB);
  std::mt19937_64 rng(testing::TestSeed());
  std::vector<void*> live;
  for (int i = 0; i < 5000; ++i) {
    // More allocations than frees: the limit is reached, whatever the seed.
    if (live.empty() || rng() % 5 < 3) {
      absl::StatusOr<void*> p =
          f.allocator->Allocate(256 * (1 + rng() % 4096), kS1);
      if (p.ok()) live.push_back(*p);  // out of memory happens, on purpose
    } else {
      const std::size_t i = rng() % live.size();
      GPUALLOC_ASSERT_OK(f.allocator->Deallocate(live[i], kS1));
      live[i] = live.back();
      live.pop_back();
    }
  }
  const Stats s = f.allocator->GetStats();
  EXPECT_GT(s.num_ooms, 0u);
  EXPECT_EQ(s.events_recorded, 0u);
  EXPECT_EQ(s.stream_waits, 0u);
  EXPECT_EQ(s.host_waits, 0u);
  for (SimOp op : {SimOp::kCreateEvent, SimOp::kRecordEvent, SimOp::kQueryEvent,
                   SimOp::kStreamWaitEvent, SimOp::kSynchronizeEvent}) {
    EXPECT_EQ(f.sim->calls(op), 0u) << SimOpName(op);
  }
}

// The bundled real PyTorch traces (tests/data/traces, one stream each)
// replayed on a simulated H100: zero events per free.
TEST(AllocatorStreamsTest, RealSingleStreamTracesRecordNoEvent) {
  const std::string dir = GPUALLOC_TRACE_DIR;
  std::vector<std::string> names = {"torch-cs336-medium_1024_inference.csv",
                                    "torch-cs336-medium_1024_training.csv",
                                    "torch-cs336-medium_128_training.csv",
                                    "torch-opt125m-zo-finetune.csv"};
  // Where the validator runs after every operation (debug_checks=2, the
  // sanitizer build) the two small traces only, and no expandable replay:
  // the rest takes minutes there, and the main run replays them all.
  if (GPUALLOC_DEBUG_CHECKS >= 2) {
    names = {"torch-cs336-medium_1024_inference.csv",
             "torch-opt125m-zo-finetune.csv"};
  }
  int replayed = 0;
  for (const std::string& name : names) {
    std::ifstream in(dir + "/" + name);
    if (!in) continue;
    const int configs = GPUALLOC_DEBUG_CHECKS >= 2 ? 2 : 3;
    for (int config = 0; config < configs; ++config) {
      // Preallocated; growth by regions; growth by expandable regions.
      const bool preallocate = config == 0;
      const bool expandable = config == 2;
      SimOptions so;
      so.profile = "h100";
      auto sim = testing::MakeSim(so);
      Options o;
      o.preallocate = preallocate;
      o.expandable = expandable ? Tristate::kOn : Tristate::kOff;
      auto a = testing::MakeAllocator(o, sim);
      std::map<std::uint64_t, void*> live;
      std::uint64_t frees = 0;
      std::string line;
      in.clear();
      in.seekg(0);
      std::getline(in, line);  // header
      while (std::getline(in, line)) {
        std::vector<std::string> f = absl::StrSplit(line, ',');
        ASSERT_EQ(f.size(), 5u) << name << ": " << line;
        const std::uint64_t id = std::stoull(f[2]);
        const Stream stream(std::stoull(f[4]));
        if (f[1] == "alloc") {
          absl::StatusOr<void*> p = a->Allocate(std::stoull(f[3]), stream);
          ASSERT_TRUE(p.ok()) << name << ": " << p.status();
          live[id] = *p;
        } else {
          GPUALLOC_ASSERT_OK(a->Deallocate(live.at(id), stream));
          live.erase(id);
          ++frees;
        }
      }
      const Stats s = a->GetStats();
      std::printf(
          "%-40s preallocate=%d expandable=%d frees=%llu events_recorded=%llu "
          "unmaps=%llu\n",
          name.c_str(), preallocate, expandable,
          static_cast<unsigned long long>(frees),
          static_cast<unsigned long long>(s.events_recorded),
          static_cast<unsigned long long>(s.backend_frees));
      EXPECT_GT(frees, 0u);
      EXPECT_EQ(sim->calls(SimOp::kStreamWaitEvent), 0u) << name;
      EXPECT_EQ(sim->hazards(), 0u) << name;
      if (expandable) {
        // Events only where free granules are unmapped: the host waits for
        // the stream's work first, at most once per batch of unmaps.
        EXPECT_LE(s.events_recorded, s.backend_frees) << name;
      } else {
        EXPECT_EQ(s.events_recorded, 0u) << name;
        EXPECT_EQ(sim->calls(SimOp::kRecordEvent), 0u) << name;
      }
      ++replayed;
    }
  }
  EXPECT_EQ(replayed, GPUALLOC_DEBUG_CHECKS >= 2 ? 4 : 12)
      << "traces missing from " << dir;
}

TEST(AllocatorStreamsTest, BackendWithoutStreamsTreatsAllStreamsAsOne) {
  SimOptions so;
  so.profile = "h100";
  so.total_bytes = 1 * kGiB;
  so.streams = false;
  auto sim = testing::MakeSim(so);
  Options o;
  o.memory_limit = 64 * kMiB;
  auto a = testing::MakeAllocator(o, sim);
  void* p = *a->Allocate(kMiB, kS1);
  GPUALLOC_ASSERT_OK(a->Deallocate(p, kS1));
  EXPECT_EQ(*a->Allocate(kMiB, kS2), p);
  EXPECT_EQ(a->GetStats().events_recorded, 0u);
}

TEST(AllocatorStreamsTest, FailingEventCallsAreReportedNotHidden) {
  Fixture f(CrossStreamReuse::kWhenComplete, /*preallocate=*/true,
            /*limit=*/4 * kMiB);
  void* p = f.Use(4 * kMiB, kS1);
  f.Free(p, kS1);
  f.sim->FailNthCall(SimOp::kRecordEvent, 1,
                     absl::InternalError("simulated driver failure"));
  absl::StatusOr<void*> q = f.allocator->Allocate(4 * kMiB, kS2);
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(absl::IsInternal(q.status())) << q.status();
  EXPECT_NE(q.status().message().find("simulated driver failure"),
            std::string::npos)
      << q.status();
  // Nothing was lost: s1 still gets its memory back at once.
  EXPECT_EQ(f.Use(4 * kMiB, kS1), p);
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
}

// Async mode: a free on another stream than the allocation's needs an event
// to order it; when recording it fails, the free is accepted all the same
// (said once on stderr), the block held back and counted against the limit,
// and the free done at the next call. Nothing is handed back unordered.
TEST(AllocatorStreamsTest, AsyncFreeThatCannotBeOrderedYetIsDoneLater) {
  Fixture f(CrossStreamReuse::kWhenComplete, /*preallocate=*/false,
            /*limit=*/8 * kMiB, SimClock::kManual, AllocatorMode::kAsync);
  void* p = f.Use(4 * kMiB, kS1);
  f.sim->FailNthCall(SimOp::kRecordEvent, 1,
                     absl::InternalError("simulated driver failure"));
  ::testing::internal::CaptureStderr();
  GPUALLOC_ASSERT_OK(f.allocator->Deallocate(p, kS2));
  EXPECT_NE(
      ::testing::internal::GetCapturedStderr().find("simulated driver failure"),
      std::string::npos);
  GPUALLOC_ASSERT_OK(f.allocator->Validate());
  Stats s = f.allocator->GetStats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.backend_frees, 0u);  // held back
  // Still failing at the next call: the held-back block counts against the
  // limit, so 8 MiB do not fit.
  f.sim->FailNthCall(SimOp::kRecordEvent, 1,
                     absl::InternalError("simulated driver failure"));
  EXPECT_TRUE(
      absl::IsResourceExhausted(f.allocator->Allocate(8 * kMiB, kS1).status()));
  EXPECT_EQ(f.allocator->GetStats().backend_frees, 0u);
  // The event works again: the next call does the free first.
  void* q = f.Use(8 * kMiB, kS2);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(f.allocator->GetStats().backend_frees, 1u);
  f.Free(q, kS2);
  EXPECT_EQ(f.sim->hazards(), 0u) << Hazards(*f.sim);
  // A second free of the deferred block is still a double free.
  EXPECT_FALSE(f.allocator->Deallocate(p, kS1).ok());
}

// Streams taking turns (a compute and a copy stream, or several request
// streams): each round allocates on one stream, queues work on the blocks
// and frees them on that stream, the next round on another. Work completes
// every 64 operations, as in gpualloc-replay. Whatever the configuration,
// memory stays bounded, the device is called only while warming up, and
// nobody waits.
struct TurnsConfig {
  const char* name;
  bool preallocate;
  bool expandable;
  CrossStreamReuse policy;
};

void PrintTo(const TurnsConfig& c, std::ostream* os) { *os << c.name; }

const TurnsConfig kTurnsConfigs[] = {
    {"GrowthExpandable", false, true, CrossStreamReuse::kWhenComplete},
    {"GrowthRegions", false, false, CrossStreamReuse::kWhenComplete},
    {"PreallocatedExpandable", true, true, CrossStreamReuse::kWhenComplete},
    {"PreallocatedRegion", true, false, CrossStreamReuse::kWhenComplete},
    {"GrowthStreamWait", false, true, CrossStreamReuse::kStreamWait},
    {"GrowthBeforeGrowth", false, true, CrossStreamReuse::kBeforeGrowth},
    {"GrowthBeforeGrowthRegions", false, false,
     CrossStreamReuse::kBeforeGrowth},
    {"GrowthBestFit", false, true, CrossStreamReuse::kBestFit},
};

struct TurnsRun {
  Stats stats;
  std::uint64_t backend_allocs_at_half = 0;
  // Device calls other than event records and queries.
  std::uint64_t device_calls = 0;
  std::uint64_t device_calls_at_half = 0;
  // Event records, and frees, in the second half.
  std::uint64_t events_second_half = 0;
  std::uint64_t frees_second_half = 0;
  std::uint64_t waits_second_half = 0;
  std::uint64_t hazards = 0;
  std::uint64_t granularity = 0;
};

// `rounds[i]`: the stream and block sizes of round i.
struct Round {
  Stream stream;
  std::vector<std::uint64_t> sizes;
};

TurnsRun RunTurns(const TurnsConfig& config, const std::vector<Round>& rounds,
                  bool validate_each = false) {
  SimOptions so;
  so.profile = "h100";  // 80 GB
  auto sim = testing::MakeSim(so);
  Options o;
  o.preallocate = config.preallocate;
  o.expandable = config.expandable ? Tristate::kOn : Tristate::kOff;
  o.cross_stream_reuse = config.policy;
  auto a = testing::MakeAllocator(o, sim);
  // Event records (with the creation of an event object when none is
  // spare) and queries may go on in a steady state (once several streams are
  // in use, at most 1 record per 20 frees); nothing else may.
  // (Stream waits are counted apart, in Stats::stream_waits.)
  auto device_calls = [&] {
    std::uint64_t n = 0;
    for (int op = 0; op < kNumSimOps; ++op) {
      if (IsCompletionOp(SimOp(op)) || SimOp(op) == SimOp::kStreamWaitEvent ||
          SimOp(op) == SimOp::kWaitCounter) {
        continue;
      }
      n += sim->calls(SimOp(op));
    }
    return n;
  };
  std::uint64_t events_at_half = 0;
  std::uint64_t waits_at_half = 0;
  TurnsRun run;
  std::uint64_t ops = 0;
  auto tick = [&] {
    if (++ops % 64 == 0) sim->CompleteAll();
  };
  for (std::size_t r = 0; r < rounds.size(); ++r) {
    if (r == rounds.size() / 2) {
      run.backend_allocs_at_half = a->GetStats().backend_allocs;
      run.device_calls_at_half = device_calls();
      events_at_half = Markers(*sim);
      waits_at_half = a->GetStats().stream_waits;
    }
    if (r >= rounds.size() / 2) run.frees_second_half += rounds[r].sizes.size();
    std::vector<void*> blocks;
    for (std::uint64_t size : rounds[r].sizes) {
      absl::StatusOr<void*> p = a->Allocate(size, rounds[r].stream);
      EXPECT_TRUE(p.ok()) << p.status();
      if (!p.ok()) return run;
      sim->Use(rounds[r].stream, Addr(*p), size);
      blocks.push_back(*p);
      tick();
    }
    for (void* p : blocks) {
      EXPECT_TRUE(a->Deallocate(p, rounds[r].stream).ok());
      tick();
    }
    if (validate_each) {
      absl::Status valid = a->Validate();
      EXPECT_TRUE(valid.ok()) << "round " << r << ": " << valid;
      if (!valid.ok()) return run;
    }
  }
  run.stats = a->GetStats();
  run.device_calls = device_calls();
  run.events_second_half = Markers(*sim) - events_at_half;
  run.waits_second_half = run.stats.stream_waits - waits_at_half;
  run.hazards = sim->hazards();
  run.granularity = a->device().recommended_granularity;
  return run;
}

class TurnsTest : public ::testing::TestWithParam<TurnsConfig> {};

// The exact trace: 5000 rounds of 256 bytes on streams 1 and 2 in turn (then
// 4 and 8 streams). Before pieces kept their own conditions, the default
// configuration reserved 9.46 GiB for these 256 live bytes and waited on the
// host every round.
TEST_P(TurnsTest, StreamsTakingTurnsReuseABoundedSetOfMemory) {
  const TurnsConfig& config = GetParam();
  for (int k : {2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << k << " streams");
    std::vector<Round> rounds;
    // The exact trace; shorter where the validator runs after every
    // operation (the sanitizer stage).
    const int count = GPUALLOC_DEBUG_CHECKS >= 2 ? 1000 : 5000;
    for (int i = 0; i < count; ++i) {
      rounds.push_back({Stream(1 + i % k), {256}});
    }
    const TurnsRun run = RunTurns(config, rounds);
    const Stats& s = run.stats;
    if (!config.preallocate) {
      EXPECT_LE(s.peak_bytes_reserved,
                static_cast<std::uint64_t>(2 * k) * run.granularity);
      EXPECT_LE(s.backend_allocs, static_cast<std::uint64_t>(2 * k));
    }
    // No release-and-recreate cycle; nothing new after warming up but
    // events, within their budget.
    EXPECT_EQ(s.backend_frees, 0u);
    EXPECT_EQ(s.backend_allocs, run.backend_allocs_at_half);
    EXPECT_EQ(run.device_calls, run.device_calls_at_half);
    EXPECT_TRUE(WithinMarkerBudget(
        run.events_second_half, run.frees_second_half, run.waits_second_half))
        << run.events_second_half << " markers, " << run.frees_second_half
        << " frees, " << run.waits_second_half << " waits";
    EXPECT_EQ(s.host_waits, 0u);
    if (config.policy == CrossStreamReuse::kBestFit) {
      // The price of the best fit whatever stream freed it: streams taking
      // turns wait for each other nearly every round.
      EXPECT_GT(s.stream_waits, rounds.size() / 2);
    } else {
      EXPECT_EQ(s.stream_waits, 0u);
    }
    EXPECT_EQ(run.hazards, 0u);
  }
}

// 2 to 8 streams taking turns at random, 1 to 3 blocks of 256 B to 4 MiB a
// round, Validate after every round. Which memory a stream may take depends
// on what completed when it asks, so where the blocks land varies with the
// device's progress: after warming up, at most two more growths (layouts
// the warm-up did not meet), and waits (with a policy that waits before
// growing) within their budget.
TEST_P(TurnsTest, RandomTurnsStayBoundedAndStopCallingTheDevice) {
  if (GetParam().policy == CrossStreamReuse::kBestFit) {
    GTEST_SKIP() << "best_fit makes streams taking turns wait for each other "
                    "(StreamsTakingTurnsReuseABoundedSetOfMemory)";
  }
  const TurnsConfig& config = GetParam();
  const std::uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 3; ++trial) {
    const int k = 2 + static_cast<int>(rng() % 7);
    SCOPED_TRACE(::testing::Message() << k << " streams");
    // Each stream has its own few block sizes (a layer's buffers), drawn
    // log-uniformly; rounds repeat them, as training or serving steps do.
    std::vector<std::vector<std::uint64_t>> shapes(k);
    std::uint64_t largest_round = 0;
    for (auto& shape : shapes) {
      const int n = 1 + static_cast<int>(rng() % 3);
      std::uint64_t total = 0;
      for (int b = 0; b < n; ++b) {
        const double e = 8 + std::ldexp(static_cast<double>(rng() >> 11), -53) *
                                 (22 - 8);  // 2^8 .. 2^22 bytes
        shape.push_back(static_cast<std::uint64_t>(std::exp2(e)));
        total += (shape.back() + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
      }
      largest_round = std::max(largest_round, total);
    }
    std::vector<Round> rounds;
    const int count = GPUALLOC_DEBUG_CHECKS >= 2 ? 400 : 2000;
    for (int i = 0; i < count; ++i) {
      const int s = static_cast<int>(rng() % k);
      rounds.push_back({Stream(1 + s), shapes[s]});
    }
    const TurnsRun run = RunTurns(config, rounds, /*validate_each=*/true);
    const Stats& s = run.stats;
    if (!config.preallocate) {
      // Each stream at most its own round's blocks, each in granules, and a
      // granule of slack each.
      EXPECT_LE(s.peak_bytes_reserved, static_cast<std::uint64_t>(k) *
                                           (largest_round + run.granularity));
    }
    // At most two more growths (regions, or mappings: create, map and
    // set-access calls each); 1 seed in 60 needs the second.
    EXPECT_LE(s.backend_allocs, run.backend_allocs_at_half + 2);
    EXPECT_LE(run.device_calls, run.device_calls_at_half + 6);
    EXPECT_TRUE(WithinMarkerBudget(
        run.events_second_half, run.frees_second_half, run.waits_second_half))
        << run.events_second_half << " markers, " << run.frees_second_half
        << " frees, " << run.waits_second_half << " waits";
    EXPECT_EQ(s.host_waits, 0u);
    if (config.policy == CrossStreamReuse::kBeforeGrowth) {
      // Waits instead of growth, within their budget.
      std::uint64_t frees = 0;
      for (const Round& r : rounds) frees += r.sizes.size();
      EXPECT_LE(s.stream_waits * 100,
                frees * core::StreamOrder::kWaitsPer100Frees +
                    100 * core::StreamOrder::kWaitBurst);
    } else {
      EXPECT_EQ(s.stream_waits, 0u);
    }
    EXPECT_EQ(run.hazards, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, TurnsTest, ::testing::ValuesIn(kTurnsConfigs),
                         [](const ::testing::TestParamInfo<TurnsConfig>& i) {
                           return std::string(i.param.name);
                         });

// The free rule, in every mode: a block freed on another stream than the
// one it was allocated on is not handed out while the allocation stream's
// work may still use it (before the rule, the caching modes fenced only the
// freeing stream: the next allocation on it got the block at once).
struct ModeConfig {
  const char* name;
  AllocatorMode mode;
  bool preallocate;
  bool expandable;
};

void PrintTo(const ModeConfig& c, std::ostream* os) { *os << c.name; }

class CrossStreamFreeTest : public ::testing::TestWithParam<ModeConfig> {
 protected:
  // A 1 GiB simulated H100 with a manual clock, and Options for the mode.
  static std::shared_ptr<SimBackend> Sim() {
    SimOptions so;
    so.profile = "h100";
    so.total_bytes = 1 * kGiB;
    return testing::MakeSim(so);
  }
  static Options ModeOptions(std::uint64_t limit) {
    const ModeConfig& config = GetParam();
    Options o;
    o.mode = config.mode;
    o.preallocate = config.preallocate;
    o.expandable = config.expandable ? Tristate::kOn : Tristate::kOff;
    o.memory_limit = limit;
    return o;
  }
};

TEST_P(CrossStreamFreeTest, FreeOnAnotherStreamWaitsForTheAllocationStream) {
  for (bool tight : {false, true}) {
    SCOPED_TRACE(tight ? "nothing else free" : "memory to spare");
    auto sim = Sim();
    auto a = testing::MakeAllocator(ModeOptions(4 * kMiB), sim);
    const std::uint64_t size = tight ? 4 * kMiB : 1 * kMiB;
    absl::StatusOr<void*> p = a->Allocate(size, kS1);
    ASSERT_TRUE(p.ok()) << p.status();
    sim->Use(kS1, Addr(*p), size);  // still running on s1
    GPUALLOC_ASSERT_OK(a->Deallocate(*p, kS2));
    for (Stream s : {kS2, kS3}) {
      absl::StatusOr<void*> q = a->Allocate(size, s);
      ASSERT_TRUE(q.ok()) << q.status();
      sim->Use(s, Addr(*q), size);
      GPUALLOC_ASSERT_OK(a->Deallocate(*q, s));
    }
    GPUALLOC_ASSERT_OK(a->Validate());
    EXPECT_EQ(sim->hazards(), 0u) << Hazards(*sim);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, CrossStreamFreeTest,
    ::testing::Values(
        ModeConfig{"BfcExpandable", AllocatorMode::kBfc, false, true},
        ModeConfig{"BfcRegions", AllocatorMode::kBfc, false, false},
        ModeConfig{"BfcPreallocated", AllocatorMode::kBfc, true, false},
        ModeConfig{"Platform", AllocatorMode::kPlatform, false, false},
        ModeConfig{"Async", AllocatorMode::kAsync, false, false}),
    [](const ::testing::TestParamInfo<ModeConfig>& i) {
      return std::string(i.param.name);
    });

// ReleaseStream: the program destroys s1 while its work still uses a freed
// block, a live block allocated on it and a block of s2's it declared with
// RecordStream. Other streams then take all the memory there is, free those
// blocks and take it again: no call ever names s1 (the simulator fails and
// counts any), no hazard, in every mode. The handle then names a new stream.
TEST_P(CrossStreamFreeTest, ReleasedStreamIsNeverTouchedButItsWorkCounts) {
  for (bool tight : {false, true}) {
    SCOPED_TRACE(tight ? "nothing else free" : "memory to spare");
    auto sim = Sim();
    auto a =
        testing::MakeAllocator(ModeOptions(tight ? 6 * kMiB : 64 * kMiB), sim);
    auto use = [&](std::uint64_t bytes, Stream s) -> void* {
      absl::StatusOr<void*> p = a->Allocate(bytes, s);
      if (!p.ok()) return nullptr;
      sim->Use(s, Addr(*p), bytes);
      return *p;
    };
    void* freed = use(2 * kMiB, kS1);
    ASSERT_NE(freed, nullptr);
    GPUALLOC_ASSERT_OK(a->Deallocate(freed, kS1));
    void* live = use(2 * kMiB, kS1);
    void* recorded = use(1 * kMiB, kS2);
    ASSERT_NE(live, nullptr);
    ASSERT_NE(recorded, nullptr);
    GPUALLOC_ASSERT_OK(a->RecordStream(recorded, kS1));
    sim->OrderStreams(kS1, kS2);  // the program's own order: s2 wrote it
    sim->Use(kS1, Addr(recorded), 1 * kMiB);

    GPUALLOC_ASSERT_OK(a->ReleaseStream(kS1));
    sim->DestroyStream(kS1);
    GPUALLOC_ASSERT_OK(a->ReleaseStream(kS1));  // twice: nothing names it

    std::vector<std::pair<void*, Stream>> taken;
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 8; ++i) {
        const Stream s = i % 2 == 0 ? kS2 : kS3;
        if (void* p = use(1 * kMiB, s)) taken.emplace_back(p, s);
      }
      if (round == 0) {
        GPUALLOC_ASSERT_OK(a->Deallocate(live, kS2));
        GPUALLOC_ASSERT_OK(a->Deallocate(recorded, kS3));
      }
      for (const auto& [p, s] : taken) GPUALLOC_ASSERT_OK(a->Deallocate(p, s));
      taken.clear();
      GPUALLOC_ASSERT_OK(a->Validate());
    }
    GPUALLOC_ASSERT_OK(a->Trim());
    GPUALLOC_ASSERT_OK(a->Validate());
    EXPECT_EQ(sim->calls_on_destroyed_streams(), 0u);
    EXPECT_EQ(sim->hazards(), 0u) << Hazards(*sim);

    // A new stream with the old handle (made after s3's work, say): served,
    // still no hazard.
    sim->OrderStreams(kS1, kS3);
    void* again = use(1 * kMiB, kS1);
    ASSERT_NE(again, nullptr);
    GPUALLOC_ASSERT_OK(a->Deallocate(again, kS1));
    GPUALLOC_ASSERT_OK(a->Validate());
    EXPECT_EQ(sim->hazards(), 0u) << Hazards(*sim);
  }
}

TEST_P(CrossStreamFreeTest, ReleasingAStreamNeverSeenCostsNothing) {
  auto sim = Sim();
  auto a = testing::MakeAllocator(ModeOptions(64 * kMiB), sim);
  absl::StatusOr<void*> p = a->Allocate(1 * kMiB, kS1);
  ASSERT_TRUE(p.ok()) << p.status();
  std::uint64_t calls = 0;
  for (int op = 0; op < kNumSimOps; ++op) calls += sim->calls(SimOp(op));
  GPUALLOC_ASSERT_OK(a->ReleaseStream(kS2));
  std::uint64_t after = 0;
  for (int op = 0; op < kNumSimOps; ++op) after += sim->calls(SimOp(op));
  EXPECT_EQ(after, calls);
  GPUALLOC_ASSERT_OK(a->Deallocate(*p, kS1));
}

// Destroying an allocator with live allocations says so: a count and the
// bytes, in one line on stderr, in every mode; nothing when all was freed.
TEST_P(CrossStreamFreeTest, DestroyingWithLiveAllocationsSaysSo) {
  auto sim = Sim();
  const Options o = ModeOptions(64 * kMiB);
  {
    auto a = testing::MakeAllocator(o, sim);
    ASSERT_TRUE(a->Allocate(1000, kS1).ok());
    ASSERT_TRUE(a->Allocate(3000, kS2).ok());
    absl::StatusOr<void*> freed = a->Allocate(5000, kS1);
    ASSERT_TRUE(freed.ok());
    GPUALLOC_ASSERT_OK(a->Deallocate(*freed, kS1));
    ::testing::internal::CaptureStderr();
    a.reset();
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("destroyed with 2 live allocations (3.91 KiB "
                        "requested)"),
              std::string::npos)
        << said;
  }
  {
    auto a = testing::MakeAllocator(o, sim);
    absl::StatusOr<void*> p = a->Allocate(1000, kS1);
    ASSERT_TRUE(p.ok());
    GPUALLOC_ASSERT_OK(a->Deallocate(*p, kS1));
    ::testing::internal::CaptureStderr();
    a.reset();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
}

struct RandomConfig {
  const char* name;
  CrossStreamReuse policy;
  bool preallocate;
  SimClock clock;
  AllocatorMode mode = AllocatorMode::kBfc;
  Tristate expandable = Tristate::kAuto;
  std::uint64_t split_bound = 0;
};

void PrintTo(const RandomConfig& c, std::ostream* os) { *os << c.name; }

class RandomStreamsTest : public ::testing::TestWithParam<RandomConfig> {};

// Random allocations on four streams, extra users declared with RecordStream,
// frees on the stream of the last use, streams completing at random (or the
// modeled clock moving): no hazard, ever, and every invariant after each step.
TEST_P(RandomStreamsTest, ZeroHazards) {
  const RandomConfig& config = GetParam();
  const std::uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  Fixture f(config.policy, config.preallocate, 32 * kMiB, config.clock,
            config.mode, config.expandable, config.split_bound);
  const Stream streams[] = {Stream(0), kS1, kS2, kS3};
  struct Live {
    void* p;
    std::uint64_t bytes;
    Stream last;                // the stream Allocate named
    std::vector<Stream> users;  // every stream that used it
  };
  // Real code orders a second user after the first (it reads what the first
  // wrote): an event on each earlier user, waited for by the new one.
  auto order_after = [&](const Live& l, Stream s) {
    for (Stream u : l.users) {
      if (u == s) continue;
      absl::StatusOr<EventHandle> e = f.sim->CreateEvent();
      ASSERT_TRUE(e.ok()) << e.status();
      GPUALLOC_ASSERT_OK(f.sim->RecordEvent(*e, u));
      GPUALLOC_ASSERT_OK(f.sim->StreamWaitEvent(s, *e));
      GPUALLOC_ASSERT_OK(f.sim->DestroyEvent(*e));
    }
  };
  std::vector<Live> live;
  std::uint64_t ooms = 0, released = 0;
  for (int op = 0; op < 6000; ++op) {
    const int what = static_cast<int>(rng() % 20);
    if (what < 8 || live.empty()) {
      const std::uint64_t bytes =
          1 + rng() % (rng() % 8 == 0 ? 4 * kMiB : 64 * 1024);
      const Stream s = streams[rng() % 4];
      absl::StatusOr<void*> p = f.allocator->Allocate(bytes, s);
      if (!p.ok()) {
        ASSERT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
        ++ooms;
        continue;
      }
      f.sim->Use(s, Addr(*p), bytes);
      live.push_back({*p, bytes, s, {s}});
    } else if (what < 10) {
      // Another stream uses the block too, declared with RecordStream.
      Live& l = live[rng() % live.size()];
      const Stream s = streams[rng() % 4];
      GPUALLOC_ASSERT_OK(f.allocator->RecordStream(l.p, s));
      order_after(l, s);
      f.sim->Use(s, Addr(l.p), l.bytes);
      l.users.push_back(s);
    } else if (what == 11 && rng() % 4 == 0) {
      // The program destroys a side stream none of its live blocks uses
      // (ReleaseStream first); its frees' work may still be running. A
      // stream of the same handle appears at once, a stranger to it.
      const Stream s = streams[1 + rng() % 3];
      bool used = false;
      for (const Live& l : live) {
        used |= std::find(l.users.begin(), l.users.end(), s) != l.users.end();
      }
      if (!used) {
        GPUALLOC_ASSERT_OK(f.allocator->ReleaseStream(s));
        f.sim->DestroyStream(s);
        f.sim->OrderStreams(s, s);  // the new stream: no order implied
        ++released;
      }
    } else if (what < 12) {
      if (config.clock == SimClock::kManual) {
        f.sim->CompleteStream(streams[rng() % 4]);
      } else {
        f.sim->AdvanceClock(rng() % 40'000);
      }
    } else {
      const std::size_t i = rng() % live.size();
      const Live l = live[i];
      live[i] = live.back();
      live.pop_back();
      // Mostly on the stream it was allocated on (PyTorch's habit), now and
      // then on any stream (cudaFreeAsync's): the free rule covers both.
      const Stream free_on = rng() % 5 == 0 ? streams[rng() % 4] : l.last;
      GPUALLOC_ASSERT_OK(f.allocator->Deallocate(l.p, free_on));
    }
    ASSERT_TRUE(f.allocator->Validate().ok())
        << "op " << op << ": " << f.allocator->Validate();
    ASSERT_EQ(f.sim->hazards(), 0u) << "op " << op << "\n" << Hazards(*f.sim);
  }
  EXPECT_EQ(f.sim->calls_on_destroyed_streams(), 0u);
  RecordProperty("streams_released", static_cast<int>(released));
  const Stats s = f.allocator->GetStats();
  RecordProperty("events_recorded", static_cast<int>(s.events_recorded));
  if (config.mode == AllocatorMode::kBfc) {
    EXPECT_GT(s.events_recorded, 0u);  // the streams did cross
  }
  RecordProperty("ooms", static_cast<int>(ooms));
}

INSTANTIATE_TEST_SUITE_P(
    Configs, RandomStreamsTest,
    ::testing::Values(
        RandomConfig{"WhenCompletePrealloc", CrossStreamReuse::kWhenComplete,
                     true, SimClock::kManual},
        RandomConfig{"WhenCompleteGrowth", CrossStreamReuse::kWhenComplete,
                     false, SimClock::kManual},
        RandomConfig{"StreamWaitPrealloc", CrossStreamReuse::kStreamWait, true,
                     SimClock::kManual},
        RandomConfig{"StreamWaitGrowth", CrossStreamReuse::kStreamWait, false,
                     SimClock::kManual},
        RandomConfig{"WhenCompleteModeled", CrossStreamReuse::kWhenComplete,
                     false, SimClock::kModeled},
        RandomConfig{"StreamWaitModeled", CrossStreamReuse::kStreamWait, true,
                     SimClock::kModeled},
        RandomConfig{"WhenCompleteRegions", CrossStreamReuse::kWhenComplete,
                     false, SimClock::kManual, AllocatorMode::kBfc,
                     Tristate::kOff},
        RandomConfig{"BeforeGrowthPrealloc", CrossStreamReuse::kBeforeGrowth,
                     true, SimClock::kManual},
        RandomConfig{"BeforeGrowthGrowth", CrossStreamReuse::kBeforeGrowth,
                     false, SimClock::kManual},
        RandomConfig{"BeforeGrowthModeled", CrossStreamReuse::kBeforeGrowth,
                     false, SimClock::kModeled},
        RandomConfig{"BeforeGrowthRegions", CrossStreamReuse::kBeforeGrowth,
                     false, SimClock::kManual, AllocatorMode::kBfc,
                     Tristate::kOff},
        // A split bound: a chunk is handed out whole when the surplus is
        // small, and a surplus other streams' work may use must not be.
        RandomConfig{"BeforeGrowthSplitBound", CrossStreamReuse::kBeforeGrowth,
                     false, SimClock::kManual, AllocatorMode::kBfc,
                     Tristate::kAuto, 1 * kMiB},
        RandomConfig{"WhenCompleteSplitBound", CrossStreamReuse::kWhenComplete,
                     true, SimClock::kManual, AllocatorMode::kBfc,
                     Tristate::kOff, 1 * kMiB},
        RandomConfig{"BestFitGrowth", CrossStreamReuse::kBestFit, false,
                     SimClock::kManual},
        RandomConfig{"BestFitModeled", CrossStreamReuse::kBestFit, true,
                     SimClock::kModeled},
        RandomConfig{"Platform", CrossStreamReuse::kWhenComplete, false,
                     SimClock::kManual, AllocatorMode::kPlatform},
        RandomConfig{"Async", CrossStreamReuse::kWhenComplete, false,
                     SimClock::kManual, AllocatorMode::kAsync}),
    [](const ::testing::TestParamInfo<RandomConfig>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace gpualloc
