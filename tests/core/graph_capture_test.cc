// SPDX-License-Identifier: Apache-2.0
// Graph capture with private pools, on the simulated device's capture model:
// a random allocate/free sequence captured on one stream into a pool while two
// other streams allocate, free and use memory; the graph replayed 100 times
// among more of their random work; then the pool released. The simulator
// counts capture violations (event calls on the capturing stream, host waits,
// device calls outside relaxed mode) and hazards (work on memory other
// unfinished work uses), and the test checks directly that no other stream
// or pool is handed the graph's memory before ReleasePool. Every BFC growth
// mode; and the same scenario without the pool, which must fail.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gtest/gtest.h"
#include "tests/core/allocator_modes.h"
#include "tests/test_util.h"

namespace gpualloc::testing {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
const Stream kCapture(1);
const Stream kOthers[] = {Stream(2), Stream(3)};

struct Outcome {
  std::uint64_t violations = 0;
  std::uint64_t hazards = 0;
  std::uint64_t access_violations = 0;
  // Allocations of other streams or pools that overlapped the graph's
  // memory before ReleasePool.
  std::uint64_t overlaps = 0;
  std::uint64_t failed_calls = 0;  // allocator calls that failed
  std::uint64_t relaxed_switches = 0;
  std::uint64_t graph_blocks = 0;  // allocations the capture made
  std::uint64_t events = 0;        // allocator event records, whole run
  std::uint64_t host_waits = 0;
  std::uint64_t filled_mib = 0;  // what the filling stream got
  bool graph_ok = false;
  std::string first_problem;
};

class Scenario {
 public:
  Scenario(const AllocatorModeSpec& spec, std::uint64_t seed, bool use_pool)
      : rng_(seed), use_pool_(use_pool) {
    SimOptions o;
    o.profile = "h100";
    o.total_bytes = 8 * kGiB;
    sim_ = MakeSim(o);
    alloc_ = MakeAllocator(ModeOptions(spec, 2 * kGiB), sim_);
  }

  Outcome Run() {
    Outcome out;
    // Warm-up: every stream leaves freed memory behind with work pending.
    for (int i = 0; i < 200; ++i) OtherStep(out, /*check_graph=*/false);
    for (int i = 0; i < 40; ++i) CaptureStepOutsideCapture(out);

    PoolId pool = 0;
    if (use_pool_) {
      absl::StatusOr<PoolId> made = alloc_->CreatePool();
      EXPECT_TRUE(made.ok()) << made.status();
      pool = *made;
    }
    // PyTorch's order: the stream allocates to the pool, then captures.
    if (use_pool_) {
      EXPECT_TRUE(alloc_->BeginAllocateToPool(pool, kCapture).ok());
    }
    EXPECT_TRUE(sim_->BeginCapture(kCapture).ok());
    // A second pool, allocated to by another stream, never captured.
    PoolId side_pool = 0;
    if (use_pool_) {
      side_pool = *alloc_->CreatePool();
      EXPECT_TRUE(alloc_->BeginAllocateToPool(side_pool, kOthers[1]).ok());
    }
    for (int i = 0; i < 600; ++i) {
      if (rng_() % 3 == 0) {
        CaptureStep(out);
      } else {
        OtherStep(out, /*check_graph=*/true);
      }
    }
    if (use_pool_) {
      EXPECT_TRUE(alloc_->EndAllocateToPool(pool).ok());
      EXPECT_TRUE(alloc_->EndAllocateToPool(side_pool).ok());
    }
    absl::StatusOr<SimGraph> graph = sim_->EndCapture(kCapture);
    out.graph_ok = graph.ok();
    if (!graph.ok()) Note(out, std::string(graph.status().message()));

    // Replays among the other streams' work; the graph's outputs stay live.
    // Halfway, one stream takes all the memory it can get for a while.
    std::vector<void*> filled;
    for (int replay = 0; replay < 100 && graph.ok(); ++replay) {
      EXPECT_TRUE(sim_->LaunchGraph(*graph, kCapture).ok());
      for (int i = 0; i < 20; ++i) OtherStep(out, /*check_graph=*/true);
      if (replay % 10 == 9) sim_->CompleteStream(kCapture);
      if (replay == 50) filled = Fill(out);
      if (replay == 55) {
        for (void* p : filled) Free(out, p, kOthers[0]);
        filled.clear();
        pressure_ = false;
      }
    }
    // The graph is destroyed: outputs freed, the pool released after its
    // last replay (queued on kCapture).
    for (void* p : capture_live_) Free(out, p, kCapture);
    capture_live_.clear();
    if (use_pool_) {
      EXPECT_TRUE(alloc_->ReleasePool(pool, kCapture).ok());
      EXPECT_TRUE(alloc_->ReleasePool(side_pool, kOthers[1]).ok());
    }
    graph_ranges_.clear();
    if (graph.ok()) {
      EXPECT_TRUE(sim_->DestroyGraph(*graph).ok());
    }
    // The memory is the allocator's again; the graph's last replay may
    // still run.
    for (int i = 0; i < 300; ++i) OtherStep(out, /*check_graph=*/false);
    sim_->CompleteAll();
    for (auto& [stream, live] : other_live_) {
      for (void* p : live) Free(out, p, Stream(stream));
    }
    Check(out);

    out.violations = sim_->capture_violations();
    out.hazards = sim_->hazards();
    out.access_violations = sim_->access_violations();
    out.relaxed_switches = sim_->calls(SimOp::kExchangeCaptureMode);
    out.events = alloc_->GetStats().events_recorded;
    out.host_waits = alloc_->GetStats().host_waits;
    if (out.violations != 0) Note(out, sim_->capture_violation_log()[0]);
    if (out.hazards != 0) Note(out, sim_->hazard_log()[0].ToString());
    return out;
  }

 private:
  std::uint64_t Size() {
    // 256 B to 8 MiB, log-uniform.
    const int shift = 8 + static_cast<int>(rng_() % 16);
    return (std::uint64_t{1} << shift) + rng_() % (std::uint64_t{1} << shift);
  }

  void Note(Outcome& out, const std::string& what) {
    if (out.first_problem.empty()) out.first_problem = what;
  }
  void Check(Outcome& out) {
    absl::Status valid = alloc_->Validate();
    if (!valid.ok()) {
      ++out.failed_calls;
      Note(out, std::string(valid.message()));
    }
  }

  void* Alloc(Outcome& out, std::uint64_t bytes, Stream s) {
    absl::StatusOr<void*> p = alloc_->Allocate(bytes, s);
    if (!p.ok()) {
      // While one stream holds all it could get, others may run out.
      if (pressure_ && absl::IsResourceExhausted(p.status())) return nullptr;
      ++out.failed_calls;
      Note(out, std::string(p.status().message()));
      return nullptr;
    }
    return *p;
  }
  void Free(Outcome& out, void* p, Stream s) {
    absl::Status freed = alloc_->Deallocate(p, s);
    if (!freed.ok()) {
      ++out.failed_calls;
      Note(out, std::string(freed.message()));
    }
  }

  bool OverlapsGraph(void* p, std::uint64_t bytes) const {
    const std::uint64_t a = Addr(p);
    auto it = graph_ranges_.upper_bound(a + bytes - 1);
    while (it != graph_ranges_.begin()) {
      --it;
      if (it->first + it->second > a) return true;
      if (it->first + (std::uint64_t{64} << 20) < a) break;  // far below
    }
    return false;
  }

  // Memory pressure: 8 MiB blocks on one stream, used, until the allocator
  // runs out (an expected out of memory, not a failure).
  std::vector<void*> Fill(Outcome& out) {
    std::vector<void*> taken;
    pressure_ = true;
    for (int i = 0; i < 1024; ++i) {
      absl::StatusOr<void*> p = alloc_->Allocate(8 * kMiB, kOthers[0]);
      if (!p.ok()) {
        if (!absl::IsResourceExhausted(p.status())) {
          ++out.failed_calls;
          Note(out, std::string(p.status().message()));
        }
        break;
      }
      if (OverlapsGraph(*p, 8 * kMiB)) {
        ++out.overlaps;
        Note(out, "a stream filling memory was handed memory the graph uses");
      }
      sim_->Use(kOthers[0], Addr(*p), 8 * kMiB);
      taken.push_back(*p);
      out.filled_mib += 8;
    }
    return taken;
  }

  // One step of a non-capturing stream: allocate and use, or free; now and
  // then its work completes.
  void OtherStep(Outcome& out, bool check_graph) {
    const Stream s = kOthers[rng_() % 2];
    std::vector<void*>& live = other_live_[s.handle];
    const int op = static_cast<int>(rng_() % 8);
    if (op < 4 || live.empty()) {
      const std::uint64_t bytes = Size();
      void* p = Alloc(out, bytes, s);
      if (p == nullptr) return;
      if (check_graph && OverlapsGraph(p, bytes)) {
        ++out.overlaps;
        Note(out, "stream " + std::to_string(s.handle) +
                      " was handed memory the graph uses");
      }
      sim_->Use(s, Addr(p), bytes);
      live.push_back(p);
    } else if (op < 7) {
      const std::size_t i = rng_() % live.size();
      Free(out, live[i], s);
      live[i] = live.back();
      live.pop_back();
    } else {
      sim_->CompleteStream(s);
    }
  }

  // One step of the capturing stream: recorded into the graph.
  void CaptureStep(Outcome& out) {
    if (rng_() % 5 < 3 || capture_live_.empty()) {
      const std::uint64_t bytes = Size();
      void* p = Alloc(out, bytes, kCapture);
      if (p == nullptr) return;
      sim_->Use(kCapture, Addr(p), bytes);
      graph_ranges_[Addr(p)] = std::max(graph_ranges_[Addr(p)], bytes);
      ++out.graph_blocks;
      capture_live_.push_back(p);
    } else {
      const std::size_t i = rng_() % capture_live_.size();
      Free(out, capture_live_[i], kCapture);
      capture_live_[i] = capture_live_.back();
      capture_live_.pop_back();
    }
  }
  // The capture stream's ordinary work before the capture.
  void CaptureStepOutsideCapture(Outcome& out) {
    const std::uint64_t bytes = Size();
    void* p = Alloc(out, bytes, kCapture);
    if (p == nullptr) return;
    sim_->Use(kCapture, Addr(p), bytes);
    if (rng_() % 2 == 0)
      Free(out, p, kCapture);
    else
      other_live_[kCapture.handle].push_back(p);
  }

  std::mt19937_64 rng_;
  const bool use_pool_;
  bool pressure_ = false;
  std::shared_ptr<SimBackend> sim_;
  std::unique_ptr<Allocator> alloc_;
  std::map<std::uintptr_t, std::vector<void*>> other_live_;
  std::vector<void*> capture_live_;
  std::map<std::uint64_t, std::uint64_t> graph_ranges_;  // address -> bytes
};

class GraphCaptureTest : public ::testing::TestWithParam<AllocatorModeSpec> {};

TEST_P(GraphCaptureTest, PoolKeepsTheGraphsMemoryAndCapturesCleanly) {
  const std::uint64_t seed = TestSeed();
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(::testing::Message() << "GPUALLOC_TEST_SEED=" << seed + round);
    const Outcome out = Scenario(GetParam(), seed + round, true).Run();
    EXPECT_TRUE(out.graph_ok) << out.first_problem;
    EXPECT_EQ(out.violations, 0u) << out.first_problem;
    EXPECT_EQ(out.hazards, 0u) << out.first_problem;
    EXPECT_EQ(out.access_violations, 0u) << out.first_problem;
    EXPECT_EQ(out.overlaps, 0u) << out.first_problem;
    EXPECT_EQ(out.failed_calls, 0u) << out.first_problem;
    if (!GetParam().preallocate) {
      // Growth during the capture ran in relaxed mode (a switch and back).
      EXPECT_GT(out.relaxed_switches, 0u);
    }
    std::printf(
        "%s seed %llu: %llu blocks captured, 100 replays; 0 violations, %llu "
        "hazards, %llu overlaps; %llu relaxed-mode switches, %llu events, "
        "%llu host waits (whole run); the filling stream got %llu MiB\n",
        GetParam().name, static_cast<unsigned long long>(seed + round),
        static_cast<unsigned long long>(out.graph_blocks),
        static_cast<unsigned long long>(out.hazards),
        static_cast<unsigned long long>(out.overlaps),
        static_cast<unsigned long long>(out.relaxed_switches),
        static_cast<unsigned long long>(out.events),
        static_cast<unsigned long long>(out.host_waits),
        static_cast<unsigned long long>(out.filled_mib));
  }
}

// The negative control: the same capture without a private pool breaks the
// rules the simulator checks, so the test above would fail without the pool
// logic.
TEST_P(GraphCaptureTest, WithoutThePoolTheSameCaptureFails) {
  const std::uint64_t seed = TestSeed();
  std::uint64_t failures = 0;
  std::string what;
  for (int round = 0; round < 3; ++round) {
    const Outcome out = Scenario(GetParam(), seed + round, false).Run();
    const std::uint64_t f =
        out.violations + out.hazards + out.overlaps + !out.graph_ok;
    failures += f;
    if (f != 0 && what.empty()) what = out.first_problem;
    std::printf(
        "%s without a pool, seed %llu: %llu capture violations, %llu "
        "hazards, %llu overlaps with the graph, graph %s\n",
        GetParam().name, static_cast<unsigned long long>(seed + round),
        static_cast<unsigned long long>(out.violations),
        static_cast<unsigned long long>(out.hazards),
        static_cast<unsigned long long>(out.overlaps),
        out.graph_ok ? "made" : "invalidated");
  }
  EXPECT_GT(failures, 0u);
  std::printf("  first: %s\n", what.c_str());
}

// Trim and ReleaseStream would record events or wait: refused while a routed
// stream captures, allowed while streams allocate to pools without capturing.
TEST(GraphCaptureColdPathsTest, TrimAndReleaseStreamWaitForTheCaptureToEnd) {
  std::shared_ptr<SimBackend> sim = MakeSim(8 * kGiB);
  std::unique_ptr<Allocator> alloc =
      MakeAllocator(ModeOptions(kBfcExpandable, 2 * kGiB), sim);
  // Memory another stream used and freed: something to release.
  absl::StatusOr<void*> other = alloc->Allocate(8 * kMiB, kOthers[0]);
  ASSERT_TRUE(other.ok());
  sim->Use(kOthers[0], Addr(*other), 8 * kMiB);
  ASSERT_TRUE(alloc->Deallocate(*other, kOthers[0]).ok());
  const PoolId pool = *alloc->CreatePool();
  ASSERT_TRUE(alloc->BeginAllocateToPool(pool, kCapture).ok());
  ASSERT_TRUE(sim->BeginCapture(kCapture).ok());
  absl::StatusOr<void*> p = alloc->Allocate(kMiB, kCapture);
  ASSERT_TRUE(p.ok()) << p.status();
  const absl::Status trim = alloc->Trim();
  EXPECT_TRUE(absl::IsFailedPrecondition(trim)) << trim;
  const absl::Status released = alloc->ReleaseStream(kOthers[0]);
  EXPECT_TRUE(absl::IsFailedPrecondition(released)) << released;
  EXPECT_THAT(std::string(released.message()),
              ::testing::HasSubstr("capturing a graph"));
  absl::StatusOr<SimGraph> graph = sim->EndCapture(kCapture);
  ASSERT_TRUE(graph.ok()) << graph.status();
  // Still allocating to the pool, but nothing captures: both work.
  EXPECT_TRUE(alloc->ReleaseStream(kOthers[0]).ok());
  EXPECT_TRUE(alloc->Trim().ok());
  EXPECT_EQ(sim->capture_violations(), 0u);
  EXPECT_EQ(sim->hazards(), 0u);
  ASSERT_TRUE(alloc->EndAllocateToPool(pool).ok());
  ASSERT_TRUE(alloc->Deallocate(*p, kCapture).ok());
  ASSERT_TRUE(alloc->ReleasePool(pool, kCapture).ok());
  EXPECT_TRUE(alloc->Validate().ok());
}

// Two graphs captured one after the other on one stream, each a generated
// forward pass (per layer: two temporaries freed within the layer, one
// activation kept for the next layer, the last one the graph's output).
// Sharing one pool lets the second graph reuse what the first freed; two
// pools cannot. Prints the figures with their costs.
struct SharingFigures {
  std::uint64_t pool_reserved = 0;
  std::uint64_t peak_reserved = 0;
  std::uint64_t device_calls = 0;  // allocate/create/map/set-access
  std::uint64_t events = 0;
  std::uint64_t host_waits = 0;
  std::uint64_t violations = 0;
};

SharingFigures CaptureTwoGraphs(const AllocatorModeSpec& spec, bool share) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = 16 * kGiB;
  std::shared_ptr<SimBackend> sim = MakeSim(o);
  std::unique_ptr<Allocator> alloc =
      MakeAllocator(ModeOptions(spec, 8 * kGiB), sim);
  const PoolId first = *alloc->CreatePool();
  PoolId second = first;
  if (share) {
    EXPECT_TRUE(alloc->RetainPool(first).ok());
  } else {
    second = *alloc->CreatePool();
  }
  std::vector<void*> outputs;
  std::vector<SimGraph> graphs;
  for (int g = 0; g < 2; ++g) {
    std::mt19937_64 rng(1234 + g);
    const PoolId pool = g == 0 ? first : second;
    EXPECT_TRUE(alloc->BeginAllocateToPool(pool, kCapture).ok());
    EXPECT_TRUE(sim->BeginCapture(kCapture).ok());
    auto take = [&](std::uint64_t bytes) {
      absl::StatusOr<void*> p = alloc->Allocate(bytes, kCapture);
      EXPECT_TRUE(p.ok()) << p.status();
      sim->Use(kCapture, Addr(*p), bytes);
      return *p;
    };
    void* activation = take(8 * kMiB);
    for (int layer = 0; layer < 24; ++layer) {
      void* t1 = take((4 + rng() % 60) * kMiB);
      void* t2 = take((1 + rng() % 30) * kMiB);
      EXPECT_TRUE(alloc->Deallocate(t1, kCapture).ok());
      void* next = take((4 + rng() % 12) * kMiB);
      EXPECT_TRUE(alloc->Deallocate(t2, kCapture).ok());
      EXPECT_TRUE(alloc->Deallocate(activation, kCapture).ok());
      activation = next;
    }
    outputs.push_back(activation);
    EXPECT_TRUE(alloc->EndAllocateToPool(pool).ok());
    absl::StatusOr<SimGraph> graph = sim->EndCapture(kCapture);
    EXPECT_TRUE(graph.ok()) << graph.status();
    if (graph.ok()) graphs.push_back(*graph);
  }
  // Replayed in capture order, as graphs sharing a pool must be.
  for (int replay = 0; replay < 10; ++replay) {
    for (SimGraph graph : graphs) {
      EXPECT_TRUE(sim->LaunchGraph(graph, kCapture).ok());
    }
  }
  SharingFigures f;
  const Stats s = alloc->GetStats();
  f.pool_reserved = s.pool_bytes_reserved;
  f.peak_reserved = s.peak_bytes_reserved;
  for (SimOp op : {SimOp::kAllocate, SimOp::kCreatePhysical, SimOp::kMap,
                   SimOp::kSetAccess}) {
    f.device_calls += sim->calls(op);
  }
  f.events = s.events_recorded;
  f.host_waits = s.host_waits;
  f.violations = sim->capture_violations();
  EXPECT_EQ(sim->hazards(), 0u);
  for (void* p : outputs) EXPECT_TRUE(alloc->Deallocate(p, kCapture).ok());
  EXPECT_TRUE(alloc->ReleasePool(first, kCapture).ok());
  EXPECT_TRUE(alloc->ReleasePool(second, kCapture).ok());
  EXPECT_EQ(alloc->GetStats().pool_bytes_reserved, 0u);
  EXPECT_TRUE(alloc->Validate().ok());
  return f;
}

TEST(GraphCapturePoolSharingTest, TwoGraphsSharingAPoolUseLessThanTwoPools) {
  std::printf(
      "| mode | pools | pool reserved | peak reserved | device calls | events "
      "| host waits | capture violations "
      "|\n|---|---|---|---|---|---|---|---|\n");
  for (const AllocatorModeSpec& spec : {kBfcSeparate, kBfcExpandable}) {
    const SharingFigures two = CaptureTwoGraphs(spec, /*share=*/false);
    const SharingFigures one = CaptureTwoGraphs(spec, /*share=*/true);
    for (const auto& [name, f] :
         {std::pair<const char*, const SharingFigures&>{"two", two},
          std::pair<const char*, const SharingFigures&>{"one shared", one}}) {
      std::printf(
          "| %s | %s | %.0f MiB | %.0f MiB | %llu | %llu | %llu | "
          "%llu |\n",
          spec.name, name, static_cast<double>(f.pool_reserved) / kMiB,
          static_cast<double>(f.peak_reserved) / kMiB,
          static_cast<unsigned long long>(f.device_calls),
          static_cast<unsigned long long>(f.events),
          static_cast<unsigned long long>(f.host_waits),
          static_cast<unsigned long long>(f.violations));
    }
    EXPECT_LT(one.pool_reserved, two.pool_reserved);
    EXPECT_LT(one.peak_reserved, two.peak_reserved);
    EXPECT_EQ(one.violations + two.violations, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Bfc, GraphCaptureTest,
                         ::testing::Values(kBfcSeparate, kBfcExpandable,
                                           kBfcPreallocated),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace gpualloc::testing
