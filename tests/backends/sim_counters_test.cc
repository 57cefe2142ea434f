// SPDX-License-Identifier: Apache-2.0
// tests/backends/sim_counters_test.cc: the simulated device's completion
// counters (CreateCounters, DestroyCounters, WriteCounter, WaitCounter) on
// both clocks: when a write lands, what a wait orders, bad input, capture
// rules, faults, costs, and a reader on another thread.

#include <atomic>
#include <cstdint>
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
constexpr Stream kC(3);

std::shared_ptr<SimBackend> MakeCounterSim(
    SimClock clock = SimClock::kManual, SimMemory memory = SimMemory::kFake,
    const std::string& profile = "h100") {
  SimOptions o;
  o.profile = profile;
  o.total_bytes = kGiB;
  o.clock = clock;
  o.memory = memory;
  return MakeSim(o);
}

CounterBlock NewBlock(SimBackend& sim, std::size_t count) {
  absl::StatusOr<CounterBlock> block = sim.CreateCounters(count);
  EXPECT_TRUE(block.ok()) << block.status();
  return block.ok() ? *block : CounterBlock{};
}

// What the caller reads: an acquire load, no call.
std::uint64_t Read(const CounterBlock& block, std::size_t index) {
  return __atomic_load_n(&block.values[index], __ATOMIC_ACQUIRE);
}

EventHandle RecordedOn(SimBackend& sim, Stream stream) {
  absl::StatusOr<EventHandle> event = sim.CreateEvent();
  EXPECT_TRUE(event.ok()) << event.status();
  if (!event.ok()) return 0;
  GPUALLOC_EXPECT_OK(sim.RecordEvent(*event, stream));
  return *event;
}

bool Query(SimBackend& sim, EventHandle event) {
  absl::StatusOr<bool> done = sim.QueryEvent(event);
  EXPECT_TRUE(done.ok()) << done.status();
  return done.ok() && *done;
}

bool Mentions(const absl::Status& s, absl::string_view text) {
  return absl::StrContains(s.message(), text);
}

TEST(SimCountersTest, OnByDefaultOffBySwitchOrWithoutStreams) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  EXPECT_TRUE(sim->info().capabilities.completion_counters);

  for (bool streams : {true, false}) {
    SimOptions o;
    o.profile = "h100";
    o.streams = streams;
    o.completion_counters = !streams;  // off one way or the other
    auto off = MakeSim(o);
    ASSERT_NE(off, nullptr);
    EXPECT_FALSE(off->info().capabilities.completion_counters);
    const absl::Status created = off->CreateCounters(1).status();
    EXPECT_TRUE(absl::IsUnimplemented(created)) << created;
    EXPECT_TRUE(Mentions(created, "completion_counters")) << created;
    EXPECT_TRUE(absl::IsUnimplemented(off->DestroyCounters(1)));
    EXPECT_TRUE(absl::IsUnimplemented(off->WriteCounter(1, 0, 1, kA)));
    EXPECT_TRUE(absl::IsUnimplemented(off->WaitCounter(1, 0, 1, kA)));
    for (SimOp op : {SimOp::kCreateCounters, SimOp::kDestroyCounters,
                     SimOp::kWriteCounter, SimOp::kWaitCounter}) {
      EXPECT_EQ(off->calls(op), 1u) << SimOpName(op);
      EXPECT_EQ(off->failed_calls(op), 1u) << SimOpName(op);
    }
  }
}

TEST(SimCountersTest, BlocksAreZeroedHostMemoryWithFreshHandles) {
  for (SimMemory memory : {SimMemory::kFake, SimMemory::kHostBacked}) {
    auto sim = MakeCounterSim(SimClock::kManual, memory);
    ASSERT_NE(sim, nullptr);
    const CounterBlock a = NewBlock(*sim, 4);
    const CounterBlock b = NewBlock(*sim, 1);
    ASSERT_NE(a.values, nullptr);
    ASSERT_NE(b.values, nullptr);
    EXPECT_NE(a.handle, 0u);
    EXPECT_NE(b.handle, 0u);
    EXPECT_NE(a.handle, b.handle);
    EXPECT_EQ(a.count, 4u);
    EXPECT_EQ(b.count, 1u);
    for (std::size_t i = 0; i < a.count; ++i) EXPECT_EQ(Read(a, i), 0u);
    EXPECT_EQ(Read(b, 0), 0u);
    EXPECT_EQ(sim->live_counter_blocks(), 2u);
    GPUALLOC_EXPECT_OK(sim->DestroyCounters(a.handle));
    // A destroyed handle is never handed out again.
    const CounterBlock c = NewBlock(*sim, 2);
    EXPECT_NE(c.handle, a.handle);
    EXPECT_EQ(sim->live_counter_blocks(), 2u);
    GPUALLOC_EXPECT_OK(sim->DestroyCounters(b.handle));
    GPUALLOC_EXPECT_OK(sim->DestroyCounters(c.handle));
    EXPECT_EQ(sim->live_counter_blocks(), 0u);
    EXPECT_EQ(sim->calls(SimOp::kCreateCounters), 3u);
    EXPECT_EQ(sim->calls(SimOp::kDestroyCounters), 3u);
  }
}

TEST(SimCountersTest, BadInputIsInvalidArgumentNamingItAndChangesNothing) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  for (std::size_t count : {std::size_t{0}, std::size_t{65537}}) {
    const absl::Status s = sim->CreateCounters(count).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(Mentions(s, "1 to 65536 counters")) << s;
  }
  EXPECT_EQ(sim->live_counter_blocks(), 0u);
  GPUALLOC_ASSERT_OK(sim->CreateCounters(65536));
  const CounterBlock block = NewBlock(*sim, 2);
  sim->Use(kA, 0, 0);  // pending work on A
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 1, 3, kA));
  const std::uint64_t ns = sim->modeled_ns();

  const CounterHandle unknown = block.handle + 100;
  for (const absl::Status& s :
       {sim->WriteCounter(unknown, 0, 1, kB),
        sim->WaitCounter(unknown, 0, 1, kB), sim->DestroyCounters(unknown)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(Mentions(s, "not a block CreateCounters returned")) << s;
  }
  for (const absl::Status& s : {sim->WriteCounter(block.handle, 2, 1, kB),
                                sim->WaitCounter(block.handle, 2, 1, kB)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(Mentions(s, "index out of range: the block holds 2")) << s;
  }
  const std::uint64_t too_big = std::uint64_t{1} << 63;
  for (const absl::Status& s :
       {sim->WriteCounter(block.handle, 0, too_big, kB),
        sim->WaitCounter(block.handle, 0, too_big, kB)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(Mentions(s, "below 2^63")) << s;
  }
  // Nothing changed: the values, the queued write, the blocks, the cost.
  EXPECT_EQ(Read(block, 0), 0u);
  EXPECT_EQ(Read(block, 1), 0u);
  EXPECT_EQ(sim->pending_counter_writes(), 1u);
  EXPECT_EQ(sim->live_counter_blocks(), 2u);
  EXPECT_EQ(sim->pending_work(), 1u) << "no bad call synchronized the device";
  EXPECT_EQ(sim->modeled_ns(), ns);
  EXPECT_EQ(sim->failed_calls(SimOp::kWriteCounter), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kWaitCounter), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kDestroyCounters), 1u);
  // The largest value is fine.
  GPUALLOC_EXPECT_OK(sim->WriteCounter(block.handle, 0, too_big - 1, kB));
  EXPECT_EQ(Read(block, 0), too_big - 1);
}

TEST(SimCountersTest, AWriteOnAStreamWithNoPendingWorkLandsAtOnce) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 3);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 1, 7, kA));
  EXPECT_EQ(Read(block, 1), 7u);
  EXPECT_EQ(Read(block, 0), 0u);
  EXPECT_EQ(Read(block, 2), 0u);
  EXPECT_EQ(sim->pending_counter_writes(), 0u);
  // The values are the caller's: a smaller one replaces a larger one.
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 1, 2, kB));
  EXPECT_EQ(Read(block, 1), 2u);
}

TEST(SimCountersTest, AWriteLandsOnlyOnceTheStreamsEarlierWorkCompletes) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  sim->Use(kA, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));
  sim->Use(kA, 0, 0);  // work after the write does not hold it back
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 2, kA));
  EXPECT_EQ(Read(block, 0), 0u);
  EXPECT_EQ(sim->pending_counter_writes(), 2u);
  sim->CompleteStream(kB);  // another stream's completion changes nothing
  EXPECT_EQ(Read(block, 0), 0u);
  sim->CompleteStream(kA);
  EXPECT_EQ(Read(block, 0), 2u) << "both landed, in their order";
  EXPECT_EQ(sim->pending_counter_writes(), 0u);
}

TEST(SimCountersTest, AWriteWaitsForWhatItsStreamWaitsFor) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  sim->Use(kB, 0, 0);
  GPUALLOC_ASSERT_OK(sim->StreamWaitEvent(kA, RecordedOn(*sim, kB)));
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 4, kA));
  EXPECT_EQ(Read(block, 0), 0u) << "A has no work of its own, but waits for B";
  sim->CompleteStream(kB);
  EXPECT_EQ(Read(block, 0), 4u);
}

TEST(SimCountersTest, HostWaitsLandTheWritesTheyComplete) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 3);
  // SynchronizeEvent of an event recorded after the write.
  sim->Use(kA, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(RecordedOn(*sim, kA)));
  EXPECT_EQ(Read(block, 0), 1u);
  // Free synchronizes the device.
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  sim->Use(kB, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 1, 2, kB));
  GPUALLOC_ASSERT_OK(sim->Free(*a));
  EXPECT_EQ(Read(block, 1), 2u);
  // So does HostFree; and CompleteAll completes everything.
  absl::StatusOr<void*> host = sim->HostAllocate(4096);
  ASSERT_TRUE(host.ok()) << host.status();
  sim->Use(kC, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 2, 3, kC));
  GPUALLOC_ASSERT_OK(sim->HostFree(*host));
  EXPECT_EQ(Read(block, 2), 3u);
  sim->Use(kC, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 2, 5, kC));
  sim->CompleteAll();
  EXPECT_EQ(Read(block, 2), 5u);
}

TEST(SimCountersTest, WritesOfSeveralStreamsLandAsTheirWorkCompletes) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  sim->Use(kA, 0, 0);
  sim->Use(kB, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 5, kA));
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 3, kB));
  sim->CompleteStream(kB);
  EXPECT_EQ(Read(block, 0), 3u);
  sim->CompleteStream(kA);
  EXPECT_EQ(Read(block, 0), 5u);
  // Due together on the manual clock: queue order, the last one shows.
  sim->Use(kA, 0, 0);
  sim->Use(kB, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 8, kB));
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 6, kA));
  sim->CompleteAll();
  EXPECT_EQ(Read(block, 0), 6u);
}

TEST(SimCountersTest, ModeledClockLandsAWriteWhenTheClockPassesItsWork) {
  auto sim = MakeCounterSim(SimClock::kModeled);
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  sim->Use(kA, 0, 0, 1'000);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 7, kA));
  EXPECT_EQ(Read(block, 0), 0u);
  sim->AdvanceClock(999);
  EXPECT_EQ(Read(block, 0), 0u);
  sim->AdvanceClock(1);
  EXPECT_EQ(Read(block, 0), 7u);
  // Due at the same AdvanceClock: in the order their work ends, whatever the
  // order they were queued in.
  sim->Use(kA, 0, 0, 100);
  sim->Use(kB, 0, 0, 50);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));  // ends 100
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 2, kB));  // ends 50
  sim->AdvanceClock(200);
  EXPECT_EQ(Read(block, 0), 1u);
  // CompleteStream moves the clock to the stream's end.
  sim->Use(kC, 0, 0, 500);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 9, kC));
  sim->CompleteStream(kC);
  EXPECT_EQ(Read(block, 0), 9u);
}

TEST(SimCountersTest, AWaitOrdersTheWaiterAfterTheWriteSoNoHazard) {
  for (bool wait : {false, true}) {
    SCOPED_TRACE(wait ? "with the wait" : "without it");
    auto sim = MakeCounterSim();
    ASSERT_NE(sim, nullptr);
    const CounterBlock block = NewBlock(*sim, 1);
    absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
    ASSERT_TRUE(a.ok()) << a.status();
    sim->Use(kA, *a, kMiB);
    GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));
    if (wait) GPUALLOC_ASSERT_OK(sim->WaitCounter(block.handle, 0, 1, kB));
    sim->Use(kB, *a, kMiB);
    EXPECT_EQ(sim->hazards(), wait ? 0u : 1u);
  }
}

TEST(SimCountersTest, AWaitNoQueuedWriteSatisfiesIsRefusedAndChangesNothing) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  sim->Use(kA, *a, kMiB);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));
  const absl::Status s = sim->WaitCounter(block.handle, 0, 2, kB);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(Mentions(s, "no write of a value >= 2")) << s;
  EXPECT_EQ(sim->failed_calls(SimOp::kWaitCounter), 1u);
  sim->Use(kB, *a, kMiB);
  EXPECT_EQ(sim->hazards(), 1u) << "B was not made to wait";
}

TEST(SimCountersTest, AWaitFollowsTheFirstQueuedWriteOfAnEnoughValue) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  sim->Use(kA, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));  // too small
  sim->Use(kB, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 2, kB));
  sim->Use(kA, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 3, kA));  // later
  GPUALLOC_ASSERT_OK(sim->WaitCounter(block.handle, 0, 2, kC));
  // C waits for B's work only: completing C completes B's first.
  sim->CompleteStream(kC);
  EXPECT_EQ(Read(block, 0), 2u);
  EXPECT_EQ(sim->pending_counter_writes(), 2u) << "A's two writes";
  EXPECT_EQ(sim->pending_work(), 2u) << "A's two pieces";
}

TEST(SimCountersTest, AWaitOnAValueTheCounterHoldsOrdersNothing) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  GPUALLOC_ASSERT_OK(sim->WaitCounter(block.handle, 0, 0, kB));
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 5, kA));  // idle: lands
  sim->Use(kA, 0, 0);  // A's later work
  GPUALLOC_ASSERT_OK(sim->WaitCounter(block.handle, 0, 5, kB));
  sim->CompleteStream(kB);
  EXPECT_EQ(sim->pending_work(), 1u) << "B was not made to wait for A's work";
}

TEST(SimCountersTest, ModeledClockAWaitDelaysTheWaitersWork) {
  auto sim = MakeCounterSim(SimClock::kModeled);
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  sim->Use(kA, 0, 0, 1'000);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));
  GPUALLOC_ASSERT_OK(sim->WaitCounter(block.handle, 0, 1, kB));
  sim->Use(kB, 0, 0, 10);
  const EventHandle after = RecordedOn(*sim, kB);
  sim->AdvanceClock(1'005);
  EXPECT_FALSE(Query(*sim, after));
  EXPECT_EQ(Read(block, 0), 1u);
  sim->AdvanceClock(5);
  EXPECT_TRUE(Query(*sim, after));
}

TEST(SimCountersTest, DestroyCountersSynchronizesTheDeviceFirst) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  sim->Use(kA, 0, 0);
  sim->Use(kA, 0, 0);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));
  const std::uint64_t ns = sim->modeled_ns();
  GPUALLOC_ASSERT_OK(sim->DestroyCounters(block.handle));
  EXPECT_EQ(sim->pending_work(), 0u);
  EXPECT_EQ(sim->pending_counter_writes(), 0u);
  EXPECT_EQ(sim->live_counter_blocks(), 0u);
  // The call plus the host wait for two pieces.
  const SimOptions defaults;
  EXPECT_EQ(sim->modeled_ns() - ns,
            sim->CallCostNs(SimOp::kDestroyCounters, sizeof(std::uint64_t)) +
                2 * defaults.work_ns);
  const absl::Status again = sim->WriteCounter(block.handle, 0, 2, kA);
  EXPECT_TRUE(absl::IsInvalidArgument(again)) << again;
}

TEST(SimCountersTest, ADestroyedStreamIsFailedPrecondition) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  sim->DestroyStream(kA);
  const absl::Status write = sim->WriteCounter(block.handle, 0, 1, kA);
  EXPECT_TRUE(absl::IsFailedPrecondition(write)) << write;
  const absl::Status wait = sim->WaitCounter(block.handle, 0, 0, kA);
  EXPECT_TRUE(absl::IsFailedPrecondition(wait)) << wait;
  EXPECT_EQ(sim->calls_on_destroyed_streams(), 2u);
  EXPECT_EQ(Read(block, 0), 0u);
}

TEST(SimCountersTest, CaptureRules) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kB));
  GPUALLOC_ASSERT_OK(sim->BeginCapture(kA));
  // Other streams are fine.
  GPUALLOC_EXPECT_OK(sim->WriteCounter(block.handle, 0, 2, kB));
  GPUALLOC_EXPECT_OK(sim->WaitCounter(block.handle, 0, 1, kB));
  EXPECT_EQ(sim->capture_violations(), 0u);
  const absl::Status write = sim->WriteCounter(block.handle, 0, 3, kA);
  EXPECT_TRUE(absl::IsFailedPrecondition(write)) << write;
  EXPECT_TRUE(Mentions(write, "WriteCounter on stream 0x1")) << write;
  const absl::Status wait = sim->WaitCounter(block.handle, 0, 1, kA);
  EXPECT_TRUE(absl::IsFailedPrecondition(wait)) << wait;
  const absl::Status destroy = sim->DestroyCounters(block.handle);
  EXPECT_TRUE(absl::IsFailedPrecondition(destroy)) << destroy;
  const absl::Status create = sim->CreateCounters(1).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(create)) << create;
  EXPECT_EQ(sim->capture_violations(), 4u);
  EXPECT_EQ(sim->live_counter_blocks(), 1u);
  EXPECT_EQ(Read(block, 0), 2u);
  // kRelaxed lets a block be made.
  absl::StatusOr<CaptureMode> previous =
      sim->ExchangeCaptureMode(CaptureMode::kRelaxed);
  ASSERT_TRUE(previous.ok());
  GPUALLOC_EXPECT_OK(sim->CreateCounters(1));
  GPUALLOC_ASSERT_OK(sim->ExchangeCaptureMode(*previous));
  EXPECT_FALSE(sim->EndCapture(kA).ok()) << "the violations invalidated it";
}

TEST(SimCountersTest, EveryCallCanFailAndAFailureChangesNothing) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  sim->Use(kA, *a, kMiB);
  const absl::Status injected = absl::UnavailableError("injected");
  const std::uint64_t ns = sim->modeled_ns();

  sim->FailNthCall(SimOp::kCreateCounters, 1, injected);
  EXPECT_EQ(sim->CreateCounters(1).status(), injected);
  EXPECT_EQ(sim->live_counter_blocks(), 1u);
  sim->FailNthCall(SimOp::kWriteCounter, 1, injected);
  EXPECT_EQ(sim->WriteCounter(block.handle, 0, 1, kA), injected);
  EXPECT_EQ(sim->pending_counter_writes(), 0u);
  GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));
  sim->FailNthCall(SimOp::kWaitCounter, 1, injected);
  EXPECT_EQ(sim->WaitCounter(block.handle, 0, 1, kB), injected);
  sim->FailNthCall(SimOp::kDestroyCounters, 1, injected);
  EXPECT_EQ(sim->DestroyCounters(block.handle), injected);
  EXPECT_EQ(sim->live_counter_blocks(), 1u);
  EXPECT_EQ(sim->pending_work(), 1u)
      << "the failed destroy did not synchronize";
  sim->Use(kB, *a, kMiB);
  EXPECT_EQ(sim->hazards(), 1u) << "the failed wait ordered nothing";
  for (SimOp op : {SimOp::kCreateCounters, SimOp::kWriteCounter,
                   SimOp::kWaitCounter, SimOp::kDestroyCounters}) {
    EXPECT_EQ(sim->failed_calls(op), 1u) << SimOpName(op);
  }
  // Failed calls cost nothing.
  EXPECT_EQ(sim->modeled_ns(), ns + sim->CallCostNs(SimOp::kWriteCounter, 0));
}

TEST(SimCountersTest, CostsComeFromTheProfile) {
  for (const char* profile : {"h100", "h200", "a100", "mi300x", "mi250x"}) {
    SCOPED_TRACE(profile);
    auto sim = MakeCounterSim(SimClock::kManual, SimMemory::kFake, profile);
    ASSERT_NE(sim, nullptr);
    // A write and a wait cost what an event record and a stream wait do.
    EXPECT_EQ(sim->CallCostNs(SimOp::kWriteCounter, 0),
              sim->CallCostNs(SimOp::kRecordEvent, 0));
    EXPECT_EQ(sim->CallCostNs(SimOp::kWaitCounter, 0),
              sim->CallCostNs(SimOp::kStreamWaitEvent, 0));
    // A block costs what pinned host memory does.
    EXPECT_EQ(sim->CallCostNs(SimOp::kCreateCounters, 64),
              sim->CallCostNs(SimOp::kHostAllocate, 64));
    EXPECT_EQ(sim->CallCostNs(SimOp::kDestroyCounters, 64),
              sim->CallCostNs(SimOp::kHostFree, 64));
    const std::uint64_t ns = sim->modeled_ns();
    const CounterBlock block = NewBlock(*sim, 8);
    GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, 1, kA));
    GPUALLOC_ASSERT_OK(sim->WaitCounter(block.handle, 0, 1, kB));
    GPUALLOC_ASSERT_OK(sim->DestroyCounters(block.handle));
    EXPECT_EQ(sim->modeled_ns() - ns,
              sim->CallCostNs(SimOp::kCreateCounters, 64) +
                  sim->CallCostNs(SimOp::kWriteCounter, 0) +
                  sim->CallCostNs(SimOp::kWaitCounter, 0) +
                  sim->CallCostNs(SimOp::kDestroyCounters, 64));
  }
  // The options override the profile like any other figure.
  SimOptions o;
  o.profile = "h100";
  o.cost_ns[static_cast<int>(SimOp::kWriteCounter)] = 123;
  auto sim = MakeSim(o);
  ASSERT_NE(sim, nullptr);
  EXPECT_EQ(sim->CallCostNs(SimOp::kWriteCounter, 0), 123u);
}

// A reader polls with acquire loads on its own thread while the writer's
// stream completes: it sees the value only after it landed, and the data the
// host wrote before the completion with it (ThreadSanitizer checks the
// release/acquire pair).
TEST(SimCountersTest, AReaderOnAnotherThreadSeesTheLandedValue) {
  auto sim = MakeCounterSim();
  ASSERT_NE(sim, nullptr);
  const CounterBlock block = NewBlock(*sim, 1);
  constexpr std::uint64_t kRounds = 200;
  std::atomic<bool> stop{false};
  std::uint64_t last_seen = 0;
  bool went_back = false;
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed) && last_seen < kRounds) {
      const std::uint64_t v = Read(block, 0);
      if (v < last_seen) went_back = true;
      last_seen = v;
    }
  });
  for (std::uint64_t i = 1; i <= kRounds; ++i) {
    sim->Use(kA, 0, 0);
    GPUALLOC_ASSERT_OK(sim->WriteCounter(block.handle, 0, i, kA));
    sim->CompleteStream(kA);
  }
  while (Read(block, 0) != kRounds) {
  }
  stop.store(true, std::memory_order_relaxed);
  reader.join();
  EXPECT_FALSE(went_back);
  GPUALLOC_EXPECT_OK(sim->DestroyCounters(block.handle));
}

}  // namespace
}  // namespace gpualloc::testing
