// SPDX-License-Identifier: Apache-2.0
// tests/backends/sim_capture_test.cc: the simulated device's graph capture:
// IsCapturing and ExchangeCaptureMode, captures replayed as graphs, and the
// capture rules whose violations invalidate every capture underway.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::testing {
namespace {

constexpr Stream kA(1);
constexpr Stream kB(2);
constexpr std::uint64_t kGranule = 2 * kMiB;  // h100's granularity

std::shared_ptr<SimBackend> MakeCaptureSim(
    SimMemory memory = SimMemory::kFake) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = kGiB;
  o.memory = memory;
  return MakeSim(o);
}

CaptureMode Exchange(SimBackend& sim, CaptureMode mode) {
  absl::StatusOr<CaptureMode> previous = sim.ExchangeCaptureMode(mode);
  EXPECT_TRUE(previous.ok()) << previous.status();
  return previous.ok() ? *previous : CaptureMode::kGlobal;
}

bool Capturing(SimBackend& sim, Stream stream) {
  absl::StatusOr<bool> capturing = sim.IsCapturing(stream);
  EXPECT_TRUE(capturing.ok()) << capturing.status();
  return capturing.ok() && *capturing;
}

template <typename T>
T ValueOr0(absl::StatusOr<T> value) {
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : T{};
}

// What a failing call must leave as it was.
struct Snapshot {
  std::uint64_t bytes_allocated, live_allocations, mapped, physical, reserved,
      pool_reserved, pool_used, pending, live_events;
  bool operator==(const Snapshot&) const = default;
};

Snapshot Take(SimBackend& sim) {
  const PoolUsage usage = ValueOr0(sim.GetPoolUsage());
  return {sim.bytes_allocated(),
          sim.live_allocations(),
          sim.mapped_bytes(),
          sim.physical_bytes(),
          sim.reserved_address_bytes(),
          usage.reserved,
          usage.used,
          sim.pending_work(),
          sim.live_events()};
}

// A device with something of every kind for the calls to act on: a plain
// allocation, an event recorded on kB, a reservation of two granules whose
// first granule is mapped with access set, a handle not mapped, an empty
// reservation and a pool block on kA.
class CaptureRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim_ = MakeCaptureSim();
    ASSERT_NE(sim_, nullptr);
    plain_ = ValueOr0(sim_->Allocate(kMiB));
    event_ = ValueOr0(sim_->CreateEvent());
    GPUALLOC_ASSERT_OK(sim_->RecordEvent(event_, kB));
    reservation_ = ValueOr0(sim_->ReserveAddress(2 * kGranule, 0));
    const PhysicalHandle mapped = ValueOr0(sim_->CreatePhysical(kGranule));
    GPUALLOC_ASSERT_OK(sim_->Map(reservation_, kGranule, mapped));
    GPUALLOC_ASSERT_OK(sim_->SetAccess(reservation_, kGranule));
    spare_ = ValueOr0(sim_->CreatePhysical(kGranule));
    empty_reservation_ = ValueOr0(sim_->ReserveAddress(kGranule, 0));
    pool_block_ = ValueOr0(sim_->PoolAllocate(kMiB, kA));
  }

  struct Case {
    const char* call;
    SimOp op;
    std::function<absl::Status(CaptureRulesTest&)> run;
  };

  // The calls that allocate, map or free device memory.
  static std::vector<Case> MemoryCalls() {
    return {
        {"Allocate", SimOp::kAllocate,
         [](CaptureRulesTest& t) { return t.sim_->Allocate(kMiB).status(); }},
        {"ReserveAddress", SimOp::kReserveAddress,
         [](CaptureRulesTest& t) {
           return t.sim_->ReserveAddress(kGranule, 0).status();
         }},
        {"CreatePhysical", SimOp::kCreatePhysical,
         [](CaptureRulesTest& t) {
           return t.sim_->CreatePhysical(kGranule).status();
         }},
        {"Map", SimOp::kMap,
         [](CaptureRulesTest& t) {
           return t.sim_->Map(t.reservation_ + kGranule, kGranule, t.spare_);
         }},
        {"SetAccess", SimOp::kSetAccess,
         [](CaptureRulesTest& t) {
           return t.sim_->SetAccess(t.reservation_, kGranule);
         }},
        {"Unmap", SimOp::kUnmap,
         [](CaptureRulesTest& t) {
           return t.sim_->Unmap(t.reservation_, kGranule);
         }},
        {"ReleasePhysical", SimOp::kReleasePhysical,
         [](CaptureRulesTest& t) { return t.sim_->ReleasePhysical(t.spare_); }},
        {"FreeAddress", SimOp::kFreeAddress,
         [](CaptureRulesTest& t) {
           return t.sim_->FreeAddress(t.empty_reservation_, kGranule);
         }},
        {"PoolAllocate", SimOp::kPoolAllocate,
         [](CaptureRulesTest& t) {
           return t.sim_->PoolAllocate(kMiB, kA).status();
         }},
        {"PoolFree", SimOp::kPoolFree,
         [](CaptureRulesTest& t) {
           return t.sim_->PoolFree(t.pool_block_, kA);
         }},
        {"PoolTrim", SimOp::kPoolTrim,
         [](CaptureRulesTest& t) { return t.sim_->PoolTrim(0); }},
    };
  }

  // The calls that break a rule whatever the thread's mode.
  static std::vector<Case> StreamAndHostWaitCalls() {
    return {
        {"RecordEvent", SimOp::kRecordEvent,
         [](CaptureRulesTest& t) { return t.sim_->RecordEvent(t.event_, kA); }},
        {"StreamWaitEvent", SimOp::kStreamWaitEvent,
         [](CaptureRulesTest& t) {
           return t.sim_->StreamWaitEvent(kA, t.event_);
         }},
        {"SynchronizeEvent", SimOp::kSynchronizeEvent,
         [](CaptureRulesTest& t) {
           return t.sim_->SynchronizeEvent(t.event_);
         }},
        {"Free", SimOp::kFree,
         [](CaptureRulesTest& t) { return t.sim_->Free(t.plain_); }},
    };
  }

  // Runs `c` while kA captures and checks that it is a violation: counted,
  // logged, failed with FailedPrecondition naming the call and the stream,
  // nothing changed, and the capture invalidated.
  void ExpectViolation(const Case& c) {
    SCOPED_TRACE(c.call);
    GPUALLOC_ASSERT_OK(sim_->BeginCapture(kA));
    const Snapshot before = Take(*sim_);
    const std::uint64_t failed = sim_->failed_calls(c.op);
    const std::uint64_t violations = sim_->capture_violations();
    const absl::Status status = c.run(*this);
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), c.call)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "0x1")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "capture")) << status;
    EXPECT_EQ(sim_->failed_calls(c.op), failed + 1);
    EXPECT_EQ(sim_->capture_violations(), violations + 1);
    const std::vector<std::string> log = sim_->capture_violation_log();
    ASSERT_EQ(log.size(), violations + 1);
    EXPECT_TRUE(absl::StrContains(log.back(), c.call)) << log.back();
    EXPECT_TRUE(absl::StrContains(log.back(), "0x1")) << log.back();
    EXPECT_EQ(Take(*sim_), before);
    EXPECT_TRUE(Capturing(*sim_, kA));  // invalidated, still capturing
    const absl::StatusOr<SimGraph> graph = sim_->EndCapture(kA);
    EXPECT_TRUE(absl::IsFailedPrecondition(graph.status())) << graph.status();
    EXPECT_TRUE(absl::StrContains(graph.status().message(), "invalidated"))
        << graph.status();
    EXPECT_TRUE(absl::StrContains(graph.status().message(), c.call))
        << graph.status();
    EXPECT_FALSE(Capturing(*sim_, kA));
  }

  std::shared_ptr<SimBackend> sim_;
  DeviceAddress plain_ = 0;
  EventHandle event_ = 0;
  DeviceAddress reservation_ = 0;
  PhysicalHandle spare_ = 0;
  DeviceAddress empty_reservation_ = 0;
  DeviceAddress pool_block_ = 0;
};

TEST_F(CaptureRulesTest, EveryMemoryCallInGlobalModeIsAViolation) {
  for (const Case& c : MemoryCalls()) ExpectViolation(c);
  EXPECT_EQ(sim_->capture_violations(), MemoryCalls().size());
}

TEST_F(CaptureRulesTest, ThreadLocalModeIsNotEnoughForMemoryCalls) {
  EXPECT_EQ(Exchange(*sim_, CaptureMode::kThreadLocal), CaptureMode::kGlobal);
  ExpectViolation(MemoryCalls().front());
  EXPECT_TRUE(
      absl::StrContains(sim_->capture_violation_log().back(), "kThreadLocal"));
}

TEST_F(CaptureRulesTest,
       EventCallsOnTheCapturingStreamAndHostWaitsAreViolations) {
  // Relaxed mode does not allow them.
  Exchange(*sim_, CaptureMode::kRelaxed);
  for (const Case& c : StreamAndHostWaitCalls()) ExpectViolation(c);
  EXPECT_EQ(sim_->capture_violations(), StreamAndHostWaitCalls().size());
}

TEST_F(CaptureRulesTest, RelaxedModeAllowsTheMemoryCalls) {
  EXPECT_EQ(Exchange(*sim_, CaptureMode::kRelaxed), CaptureMode::kGlobal);
  GPUALLOC_ASSERT_OK(sim_->BeginCapture(kA));
  // The list's order is one that succeeds: map, set access, unmap, release,
  // free.
  for (const Case& c : MemoryCalls()) EXPECT_TRUE(c.run(*this).ok()) << c.call;
  EXPECT_EQ(sim_->capture_violations(), 0u);
  EXPECT_TRUE(sim_->capture_violation_log().empty());
  GPUALLOC_EXPECT_OK(sim_->EndCapture(kA));
}

TEST_F(CaptureRulesTest, CallsOffTheCapturingStreamAreAllowed) {
  GPUALLOC_ASSERT_OK(sim_->BeginCapture(kA));
  GPUALLOC_EXPECT_OK(sim_->RecordEvent(event_, kB));
  GPUALLOC_EXPECT_OK(sim_->StreamWaitEvent(kB, event_));
  // QueryEvent never is a violation.
  GPUALLOC_EXPECT_OK(sim_->QueryEvent(event_));
  GPUALLOC_EXPECT_OK(sim_->IsCapturing(kA));
  GPUALLOC_EXPECT_OK(sim_->GetPoolUsage());
  GPUALLOC_EXPECT_OK(sim_->FreeBytes());
  EXPECT_EQ(sim_->capture_violations(), 0u);
  GPUALLOC_EXPECT_OK(sim_->EndCapture(kA));
}

TEST_F(CaptureRulesTest, WithoutACaptureNothingIsChecked) {
  GPUALLOC_EXPECT_OK(sim_->RecordEvent(event_, kA));
  GPUALLOC_EXPECT_OK(sim_->StreamWaitEvent(kA, event_));
  GPUALLOC_EXPECT_OK(sim_->SynchronizeEvent(event_));
  for (const Case& c : MemoryCalls()) EXPECT_TRUE(c.run(*this).ok()) << c.call;
  GPUALLOC_EXPECT_OK(sim_->Free(plain_));
  EXPECT_EQ(sim_->capture_violations(), 0u);
}

TEST_F(CaptureRulesTest, AViolationInvalidatesEveryCaptureUnderway) {
  GPUALLOC_ASSERT_OK(sim_->BeginCapture(kA));
  GPUALLOC_ASSERT_OK(sim_->BeginCapture(kB));
  const absl::Status status = sim_->SynchronizeEvent(event_);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "streams 0x1, 0x2"))
      << status;
  EXPECT_TRUE(absl::IsFailedPrecondition(sim_->EndCapture(kA).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(sim_->EndCapture(kB).status()));
  // A new capture starts valid.
  GPUALLOC_ASSERT_OK(sim_->BeginCapture(kA));
  GPUALLOC_EXPECT_OK(sim_->EndCapture(kA));
}

TEST_F(CaptureRulesTest, TheLogKeepsTheFirst64) {
  GPUALLOC_ASSERT_OK(sim_->BeginCapture(kA));
  for (int i = 0; i < 70; ++i) {
    EXPECT_FALSE(sim_->Allocate(kMiB).ok());
  }
  EXPECT_EQ(sim_->capture_violations(), 70u);
  EXPECT_EQ(sim_->capture_violation_log().size(), 64u);
  EXPECT_EQ(sim_->failed_calls(SimOp::kAllocate), 70u);
}

TEST_F(CaptureRulesTest, TheModeIsPerThread) {
  EXPECT_EQ(Exchange(*sim_, CaptureMode::kRelaxed), CaptureMode::kGlobal);
  GPUALLOC_ASSERT_OK(sim_->BeginCapture(kA));
  absl::Status other_thread;
  CaptureMode other_mode = CaptureMode::kRelaxed;
  std::thread([&] {
    other_mode = Exchange(*sim_, CaptureMode::kGlobal);
    other_thread = sim_->Allocate(kMiB).status();
  }).join();
  EXPECT_EQ(other_mode, CaptureMode::kGlobal);
  EXPECT_TRUE(absl::IsFailedPrecondition(other_thread)) << other_thread;
  EXPECT_TRUE(absl::StrContains(other_thread.message(), "kGlobal"))
      << other_thread;
  // This thread is still relaxed (the capture is invalidated all the same).
  GPUALLOC_EXPECT_OK(sim_->Allocate(kMiB));
  EXPECT_EQ(sim_->capture_violations(), 1u);
  // The exchange restores, and answers the mode it replaced.
  EXPECT_EQ(Exchange(*sim_, CaptureMode::kGlobal), CaptureMode::kRelaxed);
  EXPECT_EQ(Exchange(*sim_, CaptureMode::kGlobal), CaptureMode::kGlobal);
}

TEST(SimCaptureTest, TheModeIsPerBackend) {
  auto first = MakeCaptureSim();
  auto second = MakeCaptureSim();
  EXPECT_EQ(Exchange(*first, CaptureMode::kRelaxed), CaptureMode::kGlobal);
  EXPECT_EQ(Exchange(*second, CaptureMode::kThreadLocal), CaptureMode::kGlobal);
  EXPECT_EQ(Exchange(*first, CaptureMode::kGlobal), CaptureMode::kRelaxed);
  EXPECT_EQ(Exchange(*second, CaptureMode::kGlobal), CaptureMode::kThreadLocal);
}

TEST(SimCaptureTest, IsCapturingAndExchangeAreCountedCalls) {
  auto sim = MakeCaptureSim();
  EXPECT_TRUE(sim->info().capabilities.graph_capture);
  EXPECT_FALSE(Capturing(*sim, kA));
  GPUALLOC_ASSERT_OK(sim->BeginCapture(kA));
  EXPECT_TRUE(Capturing(*sim, kA));
  EXPECT_FALSE(Capturing(*sim, kB));
  EXPECT_FALSE(Capturing(*sim, Stream()));
  GPUALLOC_ASSERT_OK(sim->EndCapture(kA));
  EXPECT_FALSE(Capturing(*sim, kA));
  Exchange(*sim, CaptureMode::kRelaxed);
  EXPECT_EQ(sim->calls(SimOp::kIsCapturing), 5u);
  EXPECT_EQ(sim->calls(SimOp::kExchangeCaptureMode), 1u);
  EXPECT_EQ(sim->modeled_ns(),
            5 * sim->CallCostNs(SimOp::kIsCapturing, 0) +
                sim->CallCostNs(SimOp::kExchangeCaptureMode, 0));
  EXPECT_EQ(sim->CallCostNs(SimOp::kIsCapturing, kGiB), 100u);

  sim->FailNthCall(SimOp::kIsCapturing, 1);
  EXPECT_TRUE(absl::IsResourceExhausted(sim->IsCapturing(kA).status()));
  EXPECT_EQ(sim->failed_calls(SimOp::kIsCapturing), 1u);
  sim->FailNthCall(SimOp::kExchangeCaptureMode, 1);
  EXPECT_FALSE(sim->ExchangeCaptureMode(CaptureMode::kGlobal).ok());
  // The failed exchange changed nothing.
  EXPECT_EQ(Exchange(*sim, CaptureMode::kGlobal), CaptureMode::kRelaxed);
}

TEST(SimCaptureTest, WithoutTheCapabilityEverythingIsUnimplemented) {
  SimOptions off;
  off.profile = "h100";
  off.graph_capture = false;
  SimOptions no_streams;
  no_streams.profile = "h100";
  no_streams.streams = false;
  for (const SimOptions& o : {off, no_streams}) {
    auto sim = MakeSim(o);
    ASSERT_NE(sim, nullptr);
    EXPECT_FALSE(sim->info().capabilities.graph_capture);
    EXPECT_TRUE(absl::IsUnimplemented(sim->IsCapturing(kA).status()));
    EXPECT_TRUE(absl::IsUnimplemented(
        sim->ExchangeCaptureMode(CaptureMode::kRelaxed).status()));
    EXPECT_EQ(sim->failed_calls(SimOp::kIsCapturing), 1u);
    EXPECT_EQ(sim->failed_calls(SimOp::kExchangeCaptureMode), 1u);
    EXPECT_TRUE(absl::IsUnimplemented(sim->BeginCapture(kA)));
    EXPECT_TRUE(absl::IsUnimplemented(sim->EndCapture(kA).status()));
    EXPECT_TRUE(absl::IsUnimplemented(sim->LaunchGraph(1, kA)));
    EXPECT_TRUE(absl::IsUnimplemented(sim->DestroyGraph(1)));
  }
}

TEST(SimCaptureTest, AReplayedCaptureQueuesItsWorkEachTime) {
  for (SimMemory memory : {SimMemory::kFake, SimMemory::kHostBacked}) {
    auto sim = MakeCaptureSim(memory);
    const DeviceAddress a = ValueOr0(sim->Allocate(kMiB));
    const DeviceAddress b = ValueOr0(sim->Allocate(kMiB));
    GPUALLOC_ASSERT_OK(sim->BeginCapture(kA));
    sim->Use(kA, a, kMiB);
    sim->Use(kA, b, kMiB);
    // Captured, not queued.
    EXPECT_EQ(sim->pending_work(), 0u);
    const SimGraph graph = ValueOr0(sim->EndCapture(kA));
    EXPECT_NE(graph, 0u);
    for (int i = 1; i <= 3; ++i) {
      GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kA));
      EXPECT_EQ(sim->pending_work(), 2u * i);
    }
    // Another stream can launch it too.
    GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kB));
    EXPECT_EQ(sim->pending_work(), 8u);
    sim->CompleteAll();
    EXPECT_EQ(sim->pending_work(), 0u);
    EXPECT_EQ(sim->access_violations(), 0u);
    // kB's launch was ordered after nothing on kA: the program's hazards
    // (one per piece), which the detector sees.
    EXPECT_EQ(sim->hazards(), 2u);
  }
}

TEST(SimCaptureTest, AReplayOnModeledClockTakesTheCapturedDurations) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = kGiB;
  o.clock = SimClock::kModeled;
  auto sim = MakeSim(o);
  const DeviceAddress a = ValueOr0(sim->Allocate(kMiB));
  GPUALLOC_ASSERT_OK(sim->BeginCapture(kA));
  sim->Use(kA, a, kMiB, 1'000);
  sim->Use(kA, a, kMiB, 2'000);
  const SimGraph graph = ValueOr0(sim->EndCapture(kA));
  GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kA));
  sim->AdvanceClock(2'999);
  EXPECT_EQ(sim->pending_work(), 1u);
  sim->AdvanceClock(1);
  EXPECT_EQ(sim->pending_work(), 0u);
}

TEST(SimCaptureTest, HazardsAreJudgedAtLaunch) {
  auto sim = MakeCaptureSim();
  const DeviceAddress a = ValueOr0(sim->Allocate(kMiB));
  GPUALLOC_ASSERT_OK(sim->BeginCapture(kA));
  sim->Use(kB, a, kMiB);  // kB is not capturing: queued
  sim->Use(kA, a, kMiB);  // captured: no hazard now
  EXPECT_EQ(sim->hazards(), 0u);
  const SimGraph graph = ValueOr0(sim->EndCapture(kA));
  // kB's work is pending and kA was not ordered after it.
  GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kA));
  EXPECT_EQ(sim->hazards(), 1u);
  ASSERT_EQ(sim->hazard_log().size(), 1u);
  EXPECT_EQ(sim->hazard_log()[0].stream, kA);
  EXPECT_EQ(sim->hazard_log()[0].other, kB);
  // Ordered, the next launch is fine.
  sim->CompleteAll();
  sim->Use(kB, a, kMiB);
  sim->OrderStreams(kA, kB);
  GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kA));
  EXPECT_EQ(sim->hazards(), 1u);
}

TEST(SimCaptureTest, MemoryFreedAfterTheCaptureIsAnAccessViolationAtLaunch) {
  auto sim = MakeCaptureSim();
  const DeviceAddress a = ValueOr0(sim->Allocate(kMiB));
  GPUALLOC_ASSERT_OK(sim->BeginCapture(kA));
  sim->Use(kA, a, kMiB);
  const SimGraph graph = ValueOr0(sim->EndCapture(kA));
  GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kA));
  EXPECT_EQ(sim->access_violations(), 0u);
  GPUALLOC_ASSERT_OK(sim->Free(a));
  GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kA));
  EXPECT_EQ(sim->access_violations(), 1u);
  ASSERT_EQ(sim->access_violation_log().size(), 1u);
  EXPECT_EQ(sim->access_violation_log()[0].kind, SimHazardKind::kInaccessible);
  EXPECT_EQ(sim->access_violation_log()[0].address, a);
}

TEST(SimCaptureTest, MemoryUnmappedAfterTheCaptureIsAnAccessViolationAtLaunch) {
  auto sim = MakeCaptureSim(SimMemory::kHostBacked);
  const DeviceAddress r = ValueOr0(sim->ReserveAddress(kGranule, 0));
  const PhysicalHandle h = ValueOr0(sim->CreatePhysical(kGranule));
  GPUALLOC_ASSERT_OK(sim->Map(r, kGranule, h));
  GPUALLOC_ASSERT_OK(sim->SetAccess(r, kGranule));
  GPUALLOC_ASSERT_OK(sim->BeginCapture(kA));
  sim->Use(kA, r, kGranule);
  const SimGraph graph = ValueOr0(sim->EndCapture(kA));
  GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kA));
  sim->CompleteAll();
  EXPECT_EQ(sim->access_violations(), 0u);
  GPUALLOC_ASSERT_OK(sim->Unmap(r, kGranule));
  EXPECT_EQ(sim->hazards(), 0u);  // the launched work had completed
  GPUALLOC_ASSERT_OK(sim->LaunchGraph(graph, kA));
  EXPECT_EQ(sim->access_violations(), 1u);
}

TEST(SimCaptureTest, ProgramSideErrors) {
  auto sim = MakeCaptureSim();
  GPUALLOC_ASSERT_OK(sim->BeginCapture(kA));
  absl::Status twice = sim->BeginCapture(kA);
  EXPECT_TRUE(absl::IsFailedPrecondition(twice)) << twice;
  EXPECT_TRUE(absl::StrContains(twice.message(), "already capturing"));
  const absl::StatusOr<SimGraph> not_capturing = sim->EndCapture(kB);
  EXPECT_TRUE(absl::IsFailedPrecondition(not_capturing.status()))
      << not_capturing.status();
  EXPECT_TRUE(
      absl::StrContains(not_capturing.status().message(), "not capturing"));
  const SimGraph graph = ValueOr0(sim->EndCapture(kA));
  // An empty capture is a graph too; launching it queues nothing.
  GPUALLOC_EXPECT_OK(sim->LaunchGraph(graph, kA));
  EXPECT_EQ(sim->pending_work(), 0u);

  EXPECT_TRUE(absl::IsInvalidArgument(sim->LaunchGraph(graph + 1, kA)));
  EXPECT_TRUE(absl::IsInvalidArgument(sim->LaunchGraph(0, kA)));
  GPUALLOC_ASSERT_OK(sim->BeginCapture(kB));
  const absl::Status onto_capturing = sim->LaunchGraph(graph, kB);
  EXPECT_TRUE(absl::IsFailedPrecondition(onto_capturing)) << onto_capturing;
  GPUALLOC_ASSERT_OK(sim->EndCapture(kB));

  GPUALLOC_EXPECT_OK(sim->DestroyGraph(graph));
  EXPECT_TRUE(absl::IsInvalidArgument(sim->LaunchGraph(graph, kA)));
  EXPECT_TRUE(absl::IsInvalidArgument(sim->DestroyGraph(graph)));
  // None of these were backend calls or violations.
  EXPECT_EQ(sim->capture_violations(), 0u);
  for (int i = 0; i < kNumSimOps; ++i) {
    EXPECT_EQ(sim->calls(static_cast<SimOp>(i)), 0u)
        << SimOpName(static_cast<SimOp>(i));
  }
}

}  // namespace
}  // namespace gpualloc::testing
