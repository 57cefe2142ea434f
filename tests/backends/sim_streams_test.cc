// SPDX-License-Identifier: Apache-2.0
// tests/backends/sim_streams_test.cc: the simulated device's streams, events,
// hazard detector and stream-ordered pool, on both clocks.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/sim/call_ledger.h"
#include "backends/sim/streams.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::testing {
namespace {

constexpr Stream kA(1);
constexpr Stream kB(2);
constexpr Stream kC(3);

// A simulated H100 (2 MiB granules, 256 B alignment) with `total` bytes.
std::shared_ptr<SimBackend> MakeStreamsSim(SimClock clock = SimClock::kManual,
                                           std::uint64_t total = kGiB) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = total;
  o.clock = clock;
  return MakeSim(o);
}

EventHandle NewEvent(SimBackend& sim) {
  absl::StatusOr<EventHandle> event = sim.CreateEvent();
  EXPECT_TRUE(event.ok()) << event.status();
  return event.ok() ? *event : 0;
}

// An event recorded on `stream` now.
EventHandle RecordedOn(SimBackend& sim, Stream stream) {
  const EventHandle event = NewEvent(sim);
  const absl::Status status = sim.RecordEvent(event, stream);
  EXPECT_TRUE(status.ok()) << status;
  return event;
}

bool Query(SimBackend& sim, EventHandle event) {
  absl::StatusOr<bool> done = sim.QueryEvent(event);
  EXPECT_TRUE(done.ok()) << done.status();
  return done.ok() && *done;
}

// Makes `waiter` wait for the work queued on `stream` so far.
void MakeWait(SimBackend& sim, Stream waiter, Stream stream) {
  const EventHandle event = RecordedOn(sim, stream);
  GPUALLOC_EXPECT_OK(sim.StreamWaitEvent(waiter, event));
}

PoolUsage Usage(SimBackend& sim) {
  absl::StatusOr<PoolUsage> usage = sim.GetPoolUsage();
  EXPECT_TRUE(usage.ok()) << usage.status();
  return usage.ok() ? *usage : PoolUsage{};
}

DeviceAddress PoolAlloc(SimBackend& sim, std::uint64_t bytes, Stream stream) {
  absl::StatusOr<DeviceAddress> address = sim.PoolAllocate(bytes, stream);
  EXPECT_TRUE(address.ok())
      << "PoolAllocate(" << bytes << "): " << address.status();
  return address.ok() ? *address : 0;
}

PoolOptions Rules(bool follow, bool opportunistic, bool internal,
                  std::uint64_t threshold = 0) {
  PoolOptions o;
  o.release_threshold = threshold;
  o.reuse.follow_event_dependencies = follow;
  o.reuse.opportunistic = opportunistic;
  o.reuse.internal_dependencies = internal;
  return o;
}

// --- Events ------------------------------------------------------------------

TEST(SimEventTest, HandlesAreFreshAndNonZero) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  std::vector<EventHandle> events;
  for (int i = 0; i < 8; ++i) {
    events.push_back(NewEvent(*sim));
    EXPECT_NE(events.back(), 0u);
    for (int j = 0; j < i; ++j) EXPECT_NE(events[j], events.back());
  }
  EXPECT_EQ(sim->live_events(), 8u);
  GPUALLOC_ASSERT_OK(sim->DestroyEvent(events[3]));
  EXPECT_EQ(sim->live_events(), 7u);
  // A destroyed handle is not handed out again.
  const EventHandle next = NewEvent(*sim);
  for (EventHandle e : events) EXPECT_NE(e, next);
}

TEST(SimEventTest, NeverRecordedEventIsCompleteAndWaitingOnItIsANoOp) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  const EventHandle event = NewEvent(*sim);
  EXPECT_TRUE(Query(*sim, event));
  sim->Use(kA, 0x1000, 256);
  GPUALLOC_ASSERT_OK(sim->StreamWaitEvent(kB, event));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(event));
  EXPECT_EQ(sim->pending_work(), 1u) << "nothing to wait for";
  sim->Use(kB, 0x1000, 256);
  EXPECT_EQ(sim->hazards(), 1u) << "B waits for nothing on A";
}

TEST(SimEventTest, RecordQueryAndReRecordOnTheManualClock) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  const EventHandle event = NewEvent(*sim);
  sim->Use(kA, 0x1000, 256);
  GPUALLOC_ASSERT_OK(sim->RecordEvent(event, kA));
  EXPECT_FALSE(Query(*sim, event));
  // Work queued after the record is not captured.
  sim->Use(kA, 0x2000, 256);
  EXPECT_EQ(sim->pending_work(), 2u);
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(event));
  EXPECT_TRUE(Query(*sim, event));
  EXPECT_EQ(sim->pending_work(), 1u);
  // Re-recording replaces what the event captures.
  GPUALLOC_ASSERT_OK(sim->RecordEvent(event, kA));
  EXPECT_FALSE(Query(*sim, event));
  sim->CompleteStream(kA);
  EXPECT_TRUE(Query(*sim, event));
  EXPECT_EQ(sim->pending_work(), 0u);
  // Recorded on an idle stream: complete at once.
  GPUALLOC_ASSERT_OK(sim->RecordEvent(event, kC));
  EXPECT_TRUE(Query(*sim, event));
  // Manual time does not move.
  EXPECT_EQ(sim->now_ns(), 0u);
}

TEST(SimEventTest, SynchronizeCompletesWhatTheEventWaitsForTransitively) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  sim->Use(kA, 0x1000, 256);
  MakeWait(*sim, kB, kA);
  sim->Use(kB, 0x2000, 256);
  MakeWait(*sim, kC, kB);
  sim->Use(kC, 0x3000, 256);
  sim->Use(Stream(9), 0x4000, 256);  // unrelated
  const EventHandle on_c = RecordedOn(*sim, kC);
  EXPECT_EQ(sim->pending_work(), 4u);
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(on_c));
  EXPECT_EQ(sim->pending_work(), 1u) << "only the unrelated stream is left";
}

TEST(SimEventTest, CompleteStreamCompletesWhatItWaitsForFirst) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  sim->Use(kA, 0x1000, 256);
  const EventHandle before = RecordedOn(*sim, kA);
  sim->Use(kA, 0x2000, 256);  // queued after the event: B does not wait
  GPUALLOC_ASSERT_OK(sim->StreamWaitEvent(kB, before));
  sim->Use(kB, 0x3000, 256);
  const EventHandle all_of_a = RecordedOn(*sim, kA);
  sim->CompleteStream(kB);
  EXPECT_TRUE(Query(*sim, before));
  EXPECT_FALSE(Query(*sim, all_of_a));
  EXPECT_EQ(sim->pending_work(), 1u);
  sim->CompleteStream(Stream(77));  // never used: nothing happens
  sim->CompleteAll();
  EXPECT_EQ(sim->pending_work(), 0u);
  EXPECT_TRUE(Query(*sim, all_of_a));
}

TEST(SimEventTest, DefaultStreamIsAnOrdinaryStream) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  const Stream default_stream;
  sim->Use(default_stream, 0x1000, 256);
  sim->Use(kA, 0x1000, 256);
  EXPECT_EQ(sim->hazards(), 1u) << "stream 0 does not synchronize with A";
  const EventHandle event = RecordedOn(*sim, default_stream);
  EXPECT_FALSE(Query(*sim, event));
  sim->CompleteStream(default_stream);
  EXPECT_TRUE(Query(*sim, event));
  EXPECT_EQ(sim->pending_work(), 1u);
}

TEST(SimEventTest, UnknownAndDestroyedHandlesAreInvalidArgumentNamingThem) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  const EventHandle destroyed = NewEvent(*sim);
  GPUALLOC_ASSERT_OK(sim->DestroyEvent(destroyed));
  EXPECT_EQ(sim->live_events(), 0u);
  for (EventHandle bad : {destroyed, EventHandle{0}, EventHandle{123456}}) {
    const std::string name = absl::StrCat(bad);
    std::vector<absl::Status> results = {
        sim->DestroyEvent(bad), sim->RecordEvent(bad, kA),
        sim->QueryEvent(bad).status(), sim->StreamWaitEvent(kA, bad),
        sim->SynchronizeEvent(bad)};
    for (const absl::Status& status : results) {
      EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), name)) << status;
    }
  }
  EXPECT_EQ(sim->failed_calls(SimOp::kDestroyEvent), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kRecordEvent), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kQueryEvent), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kStreamWaitEvent), 3u);
  EXPECT_EQ(sim->failed_calls(SimOp::kSynchronizeEvent), 3u);
}

TEST(SimEventTest, WithoutStreamsEveryEventAndPoolCallIsUnimplemented) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = kGiB;
  o.streams = false;
  auto sim = MakeSim(o);
  ASSERT_NE(sim, nullptr);
  EXPECT_FALSE(sim->info().capabilities.streams);
  EXPECT_FALSE(sim->info().capabilities.stream_ordered_pools)
      << "a pool needs streams";
  std::vector<absl::Status> events = {
      sim->CreateEvent().status(), sim->DestroyEvent(1),
      sim->RecordEvent(1, kA),     sim->QueryEvent(1).status(),
      sim->StreamWaitEvent(kA, 1), sim->SynchronizeEvent(1)};
  for (const absl::Status& status : events) {
    EXPECT_TRUE(absl::IsUnimplemented(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "streams")) << status;
  }
  std::vector<absl::Status> pool = {sim->ConfigurePool(PoolOptions{}),
                                    sim->PoolAllocate(256, kA).status(),
                                    sim->PoolFree(0x1000, kA), sim->PoolTrim(0),
                                    sim->GetPoolUsage().status()};
  for (const absl::Status& status : pool) {
    EXPECT_TRUE(absl::IsUnimplemented(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "stream_ordered_pools"))
        << status;
  }
  EXPECT_EQ(sim->calls(SimOp::kCreateEvent), 1u);
  EXPECT_EQ(sim->failed_calls(SimOp::kCreateEvent), 1u);
  EXPECT_EQ(sim->failed_calls(SimOp::kPoolAllocate), 1u);
  EXPECT_EQ(sim->modeled_ns(), 0u);
}

TEST(SimEventTest, PoolsCanBeOffWithStreamsOn) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = kGiB;
  o.stream_ordered_pools = false;
  auto sim = MakeSim(o);
  ASSERT_NE(sim, nullptr);
  EXPECT_TRUE(sim->info().capabilities.streams);
  EXPECT_FALSE(sim->info().capabilities.stream_ordered_pools);
  EXPECT_TRUE(absl::IsUnimplemented(sim->PoolAllocate(256, kA).status()));
  GPUALLOC_EXPECT_OK(sim->CreateEvent());
}

// --- The modeled clock -------------------------------------------------------

TEST(SimModeledClockTest, PiecesRunInOrderOnTheirStream) {
  auto sim = MakeStreamsSim(SimClock::kModeled);
  ASSERT_NE(sim, nullptr);
  sim->Use(kA, 0x1000, 256, 100);
  sim->Use(kA, 0x2000, 256, 100);
  const EventHandle event = RecordedOn(*sim, kA);
  EXPECT_EQ(sim->pending_work(), 2u);
  sim->AdvanceClock(99);
  EXPECT_EQ(sim->pending_work(), 2u);
  sim->AdvanceClock(1);
  EXPECT_EQ(sim->pending_work(), 1u);
  EXPECT_FALSE(Query(*sim, event));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(event));
  EXPECT_EQ(sim->now_ns(), 200u) << "the host waits for the second piece";
  EXPECT_TRUE(Query(*sim, event));
  EXPECT_EQ(sim->pending_work(), 0u);
  // Work queued on an idle stream starts now, not when the stream went idle.
  sim->AdvanceClock(1000);
  sim->Use(kA, 0x1000, 256, 50);
  GPUALLOC_ASSERT_OK(sim->RecordEvent(event, kA));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(event));
  EXPECT_EQ(sim->now_ns(), 1250u);
  // A host wait never moves time backwards.
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(event));
  EXPECT_EQ(sim->now_ns(), 1250u);
}

TEST(SimModeledClockTest, DefaultDurationIsWorkNs) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = kGiB;
  o.clock = SimClock::kModeled;
  o.work_ns = 700;
  auto sim = MakeSim(o);
  ASSERT_NE(sim, nullptr);
  sim->Use(kA, 0x1000, 256);
  sim->CompleteStream(kA);
  EXPECT_EQ(sim->now_ns(), 700u);
}

TEST(SimModeledClockTest, AWaitDelaysTheWaitersWorkAndStreamsRunInParallel) {
  auto sim = MakeStreamsSim(SimClock::kModeled);
  ASSERT_NE(sim, nullptr);
  sim->Use(kA, 0x1000, 256, 1000);
  MakeWait(*sim, kB, kA);
  sim->Use(kB, 0x2000, 256, 10);
  sim->Use(kC, 0x3000, 256, 10);  // independent: runs at once
  const EventHandle on_b = RecordedOn(*sim, kB);
  const EventHandle on_c = RecordedOn(*sim, kC);
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(on_c));
  EXPECT_EQ(sim->now_ns(), 10u);
  EXPECT_FALSE(Query(*sim, on_b));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(on_b));
  EXPECT_EQ(sim->now_ns(), 1010u);
  EXPECT_EQ(sim->pending_work(), 0u);
}

TEST(SimModeledClockTest, AnEventAfterAWaitCompletesWithTheAwaitedWork) {
  auto sim = MakeStreamsSim(SimClock::kModeled);
  ASSERT_NE(sim, nullptr);
  sim->Use(kA, 0x1000, 256, 500);
  MakeWait(*sim, kB, kA);
  // No work on B after the wait: the event still waits for A.
  const EventHandle on_b = RecordedOn(*sim, kB);
  EXPECT_FALSE(Query(*sim, on_b));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(on_b));
  EXPECT_EQ(sim->now_ns(), 500u);
}

TEST(SimModeledClockTest, FreeSynchronizesTheDevice) {
  for (SimClock clock : {SimClock::kManual, SimClock::kModeled}) {
    auto sim = MakeStreamsSim(clock);
    ASSERT_NE(sim, nullptr);
    absl::StatusOr<DeviceAddress> a = sim->Allocate(kMiB);
    ASSERT_TRUE(a.ok());
    sim->Use(kA, *a, kMiB, 3000);
    sim->Use(kB, 0x1000, 256, 5000);
    // A failed Free synchronizes nothing.
    EXPECT_FALSE(sim->Free(*a + 256).ok());
    EXPECT_EQ(sim->pending_work(), 2u);
    GPUALLOC_ASSERT_OK(sim->Free(*a));
    EXPECT_EQ(sim->pending_work(), 0u);
    EXPECT_EQ(sim->now_ns(), clock == SimClock::kModeled ? 5000u : 0u);
  }
}

TEST(SimModeledClockTest, LongRunsStayFastAndBounded) {
  // The replay tool's pattern: every allocation used on one of a few streams,
  // the clock moving on. Pruning keeps the pending work (and the detector's
  // scan) short; a quadratic detector would take minutes here.
  auto sim = MakeStreamsSim(SimClock::kModeled);
  ASSERT_NE(sim, nullptr);
  constexpr int kOps = 400'000;
  std::uint64_t most_pending = 0;
  for (int i = 0; i < kOps; ++i) {
    const Stream stream(1 + i % 4);
    const DeviceAddress address = 0x10000 + (i % 1000) * 4096;
    sim->Use(stream, address, 4096, 100);
    sim->AdvanceClock(100);
    if (i % 1000 == 0) {
      most_pending = std::max(most_pending, sim->pending_work());
    }
  }
  EXPECT_LE(most_pending, 8u);
  EXPECT_EQ(sim->hazards(), 0u)
      << "each address is reused 1000 ops later, long after it completed";
}

TEST(SimModeledClockTest, ManualReuseOfOneAddressStaysFast) {
  // Nothing completes; one stream reuses the same block over and over while
  // another that waits for it checks it. The detector keeps only the latest
  // piece per start address, so this stays linear.
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  constexpr int kOps = 200'000;
  for (int i = 0; i < kOps; ++i) sim->Use(kA, 0x1000, 4096);
  MakeWait(*sim, kB, kA);
  for (int i = 0; i < kOps; ++i) sim->Use(kB, 0x1000, 4096);
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_EQ(sim->pending_work(), 2u * kOps);
  sim->CompleteAll();
  EXPECT_EQ(sim->pending_work(), 0u);
}

// --- Destroyed streams, on both clocks --------------------------------------

class SimDestroyedStreamTest : public ::testing::TestWithParam<SimClock> {
 protected:
  void SetUp() override {
    sim_ = MakeStreamsSim(GetParam());
    ASSERT_NE(sim_, nullptr);
    absl::StatusOr<DeviceAddress> block = sim_->Allocate(kMiB);
    ASSERT_TRUE(block.ok()) << block.status();
    block_ = *block;
  }
  bool Manual() const { return GetParam() == SimClock::kManual; }

  std::shared_ptr<SimBackend> sim_;
  DeviceAddress block_ = 0;
};

TEST_P(SimDestroyedStreamTest, AStreamPerRequestKeepsFewStreams) {
  // A server's pattern: each request on a stream of its own, destroyed when
  // the request is done. The simulator forgets them, so its state (and what
  // CompleteAll walks) does not grow with the requests.
  for (int i = 0; i < 1000; ++i) {
    const Stream s(100 + i);
    sim_->Use(s, block_ + (i % 16) * 4096, 4096);
    sim_->CompleteAll();
    sim_->DestroyStream(s);
    ASSERT_LE(sim_->tracked_streams(), 1u) << "request " << i;
  }
  EXPECT_EQ(sim_->tracked_streams(), 0u);
  EXPECT_EQ(sim_->hazards(), 0u);
  EXPECT_EQ(sim_->access_violations(), 0u);
}

TEST_P(SimDestroyedStreamTest, ADestroyedStreamIsKeptUntilItsWorkCompletes) {
  sim_->Use(kA, block_, 4096);
  sim_->DestroyStream(kA);
  EXPECT_EQ(sim_->tracked_streams(), 1u);
  // Its queued work goes on: B touching the same memory unordered is a
  // hazard.
  sim_->Use(kB, block_, 4096);
  EXPECT_EQ(sim_->hazards(), 1u);
  sim_->CompleteAll();
  EXPECT_EQ(sim_->pending_work(), 0u);
  EXPECT_EQ(sim_->tracked_streams(), 1u) << "B only";
}

TEST_P(SimDestroyedStreamTest, EventsKeepTheirMeaningAndAReusedHandleIsNew) {
  sim_->Use(kA, block_, 4096);
  const EventHandle before = RecordedOn(*sim_, kA);
  sim_->CompleteAll();
  EXPECT_TRUE(Query(*sim_, before));
  sim_->DestroyStream(kA);
  EXPECT_EQ(sim_->tracked_streams(), 0u);
  EXPECT_TRUE(Query(*sim_, before));
  // A new stream with A's handle: the old event does not cover its work.
  sim_->Use(kA, block_, 4096);
  EXPECT_TRUE(Query(*sim_, before));
  const EventHandle after = RecordedOn(*sim_, kA);
  if (Manual()) {
    EXPECT_FALSE(Query(*sim_, after));
  }
  GPUALLOC_ASSERT_OK(sim_->StreamWaitEvent(kB, before));
  sim_->Use(kB, block_, 4096);
  EXPECT_EQ(sim_->hazards(), 1u)
      << "B waited for the old stream's work, not for the new one's";
  sim_->CompleteAll();
  EXPECT_TRUE(Query(*sim_, after));
  EXPECT_EQ(sim_->tracked_streams(), 2u);
}

TEST_P(SimDestroyedStreamTest, WhatNoSynchronizationSawStaysUnseen) {
  // Pool reuse across streams off: only what a host synchronization saw
  // freed goes to another stream, also after the freeing stream is
  // forgotten.
  GPUALLOC_ASSERT_OK(sim_->ConfigurePool(Rules(false, false, false, kGiB)));
  const DeviceAddress a = PoolAlloc(*sim_, 2 * kMiB, kA);
  sim_->Use(kA, a, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim_->PoolFree(a, kA));
  const EventHandle after_free = RecordedOn(*sim_, kA);
  sim_->CompleteAll();
  sim_->DestroyStream(kA);
  EXPECT_EQ(sim_->tracked_streams(), 0u);
  EXPECT_NE(PoolAlloc(*sim_, 2 * kMiB, kB), a);
  GPUALLOC_ASSERT_OK(sim_->SynchronizeEvent(after_free));
  EXPECT_EQ(PoolAlloc(*sim_, 2 * kMiB, kB), a);
  EXPECT_EQ(sim_->hazards(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Clocks, SimDestroyedStreamTest,
                         ::testing::Values(SimClock::kManual,
                                           SimClock::kModeled),
                         [](const ::testing::TestParamInfo<SimClock>& info) {
                           return info.param == SimClock::kManual ? "manual"
                                                                  : "modeled";
                         });

// --- The hazard detector, on both clocks -------------------------------------

class SimHazardTest : public ::testing::TestWithParam<SimClock> {
 protected:
  void SetUp() override {
    sim_ = MakeStreamsSim(GetParam());
    ASSERT_NE(sim_, nullptr);
  }
  std::shared_ptr<SimBackend> sim_;
};

TEST_P(SimHazardTest, SameStreamReuseIsNeverAHazard) {
  sim_->Use(kA, 0x1000, 4096);
  sim_->Use(kA, 0x1000, 4096);
  sim_->Use(kA, 0x1800, 4096);
  EXPECT_EQ(sim_->hazards(), 0u);
  EXPECT_TRUE(sim_->hazard_log().empty());
}

TEST_P(SimHazardTest, OtherStreamWithoutAWaitIsAHazardWithTheOverlap) {
  sim_->Use(kA, 0x1000, 0x1000);
  sim_->Use(kB, 0x1800, 0x1000);
  ASSERT_EQ(sim_->hazards(), 1u);
  const std::vector<SimHazard> log = sim_->hazard_log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].stream, kB);
  EXPECT_EQ(log[0].other, kA);
  EXPECT_EQ(log[0].address, 0x1800u);
  EXPECT_EQ(log[0].bytes, 0x800u);
  const std::string text = log[0].ToString();
  EXPECT_TRUE(absl::StrContains(text, "0x1800")) << text;
  EXPECT_TRUE(absl::StrContains(text, "stream 0x2")) << text;
  EXPECT_TRUE(absl::StrContains(text, "stream 0x1")) << text;
  // Touching ranges do not overlap.
  sim_->Use(kC, 0x0, 0x1000);
  sim_->Use(kC, 0x2000, 0x1000);
  EXPECT_EQ(sim_->hazards(), 2u) << "[0x2000, 0x3000) overlaps B's piece";
  // Overlapping B's and C's pieces: one hazard per other stream.
  sim_->Use(Stream(4), 0x27f0, 0x20);
  EXPECT_EQ(sim_->hazards(), 4u);
  sim_->Use(Stream(5), 0x3000, 0x10);
  EXPECT_EQ(sim_->hazards(), 4u);
}

TEST_P(SimHazardTest, AWaitOnAnEventRecordedAfterTheWorkPreventsIt) {
  sim_->Use(kA, 0x1000, 4096);
  MakeWait(*sim_, kB, kA);
  sim_->Use(kB, 0x1000, 4096);
  EXPECT_EQ(sim_->hazards(), 0u);
}

TEST_P(SimHazardTest, AWaitOnAnEventRecordedBeforeTheWorkDoesNot) {
  const EventHandle early = RecordedOn(*sim_, kA);
  sim_->Use(kA, 0x1000, 4096);
  GPUALLOC_ASSERT_OK(sim_->StreamWaitEvent(kB, early));
  sim_->Use(kB, 0x1000, 4096);
  EXPECT_EQ(sim_->hazards(), 1u);
}

TEST_P(SimHazardTest, ATransitiveWaitThroughAThirdStreamPreventsIt) {
  sim_->Use(kA, 0x1000, 4096);
  MakeWait(*sim_, kC, kA);
  sim_->Use(kC, 0x9000, 4096);
  MakeWait(*sim_, kB, kC);
  sim_->Use(kB, 0x1000, 4096);
  sim_->Use(kB, 0x9000, 4096);
  EXPECT_EQ(sim_->hazards(), 0u);
}

TEST_P(SimHazardTest, WorkCompletedBeforeReuseIsNoHazard) {
  sim_->Use(kA, 0x1000, 4096);
  sim_->CompleteStream(kA);
  sim_->Use(kB, 0x1000, 4096);
  EXPECT_EQ(sim_->hazards(), 0u);
  // And through a host wait.
  sim_->Use(kA, 0x5000, 4096);
  const EventHandle event = RecordedOn(*sim_, kA);
  GPUALLOC_ASSERT_OK(sim_->SynchronizeEvent(event));
  sim_->Use(kC, 0x5000, 4096);
  EXPECT_EQ(sim_->hazards(), 0u);
}

TEST_P(SimHazardTest, CountedOncePerUseAndOtherStream) {
  sim_->Use(kA, 0x1000, 4096);
  sim_->Use(kA, 0x3000, 4096);
  sim_->Use(kC, 0x2000, 4096);
  sim_->Use(kB, 0x0, 0x10000);  // overlaps both of A's pieces and C's
  EXPECT_EQ(sim_->hazards(), 2u);
  EXPECT_EQ(sim_->hazard_log().size(), 2u);
}

TEST_P(SimHazardTest, TheLogKeepsTheFirst64) {
  for (int i = 0; i < 100; ++i) {
    sim_->Use(kA, 0x1000 + i * 0x1000, 0x1000);
    sim_->Use(kB, 0x1000 + i * 0x1000, 0x1000);
  }
  EXPECT_EQ(sim_->hazards(), 100u);
  const std::vector<SimHazard> log = sim_->hazard_log();
  ASSERT_EQ(log.size(), 64u);
  EXPECT_EQ(log[0].address, 0x1000u);
  EXPECT_EQ(log[63].address, 0x1000u + 63 * 0x1000);
}

TEST_P(SimHazardTest, EmptyUseQueuesWorkButTouchesNothing) {
  sim_->Use(kA, 0x1000, 4096);
  sim_->Use(kB, 0x1000, 0);
  EXPECT_EQ(sim_->hazards(), 0u);
  EXPECT_EQ(sim_->pending_work(), 2u);
}

TEST_P(SimHazardTest, ManyStreamsEachWithItsOwnPendingWork) {
  // 10^5 streams, each with pending work on its own 4 KiB: a Use looks only
  // at the streams whose work is near its range (a detector that visits
  // every stream on every Use is quadratic here: minutes).
  constexpr std::uint64_t kStreams = 100'000;
  constexpr DeviceAddress kBase = 0x10'0000;
  for (std::uint64_t i = 0; i < kStreams; ++i) {
    sim_->Use(Stream(100 + i), kBase + i * 4096, 4096, 1'000'000);
  }
  EXPECT_EQ(sim_->hazards(), 0u);
  EXPECT_EQ(sim_->pending_work(), kStreams);
  // A range over the work of streams 100 + 10, 11 and 12 (one byte of the
  // last): one hazard per stream, in stream order.
  sim_->Use(kA, kBase + 10 * 4096, 2 * 4096 + 1);
  ASSERT_EQ(sim_->hazards(), 3u);
  const std::vector<SimHazard> log = sim_->hazard_log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].other.handle, 110u);
  EXPECT_EQ(log[2].other.handle, 112u);
  EXPECT_EQ(log[2].address, kBase + 12 * 4096);
  EXPECT_EQ(log[2].bytes, 1u);
  // A piece as long as all of them together overlaps every stream's.
  sim_->Use(kB, kBase, kStreams * 4096);
  EXPECT_EQ(sim_->hazards(), 3u + kStreams + 1);  // and kA's
  // Once the work completed, nothing is left to collide with, and the
  // completed pieces are forgotten.
  if (GetParam() == SimClock::kModeled) {
    sim_->AdvanceClock(10'000'000);
  } else {
    sim_->CompleteAll();
  }
  sim_->Use(kC, kBase, kStreams * 4096);
  EXPECT_EQ(sim_->hazards(), 3u + kStreams + 1);
  EXPECT_EQ(sim_->pending_work(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Clocks, SimHazardTest,
                         ::testing::Values(SimClock::kManual,
                                           SimClock::kModeled),
                         [](const ::testing::TestParamInfo<SimClock>& info) {
                           return info.param == SimClock::kManual ? "manual"
                                                                  : "modeled";
                         });

// --- The stream-ordered pool -------------------------------------------------

TEST(SimPoolTest, StartsEmptyAndGrowsByGranulesFromTheDeviceCapacity) {
  auto sim = MakeStreamsSim(SimClock::kManual, 64 * kMiB);
  ASSERT_NE(sim, nullptr);
  EXPECT_EQ(Usage(*sim).reserved, 0u);
  const DeviceAddress a = PoolAlloc(*sim, 100, kA);
  ASSERT_NE(a, 0u);
  EXPECT_EQ(a % sim->info().allocation_alignment, 0u);
  PoolUsage usage = Usage(*sim);
  EXPECT_EQ(usage.reserved, 2 * kMiB);
  EXPECT_EQ(usage.used, 256u) << "rounded up to the alignment";
  EXPECT_EQ(*sim->FreeBytes(), 62 * kMiB) << "segments take device capacity";
  EXPECT_EQ(sim->bytes_allocated(), 0u) << "plain allocations only";
  EXPECT_EQ(sim->live_allocations(), 0u);
  // The next block comes from the same segment, right after the first.
  const DeviceAddress b = PoolAlloc(*sim, 256, kA);
  EXPECT_EQ(b, a + 256);
  // A request above a granule takes a segment of whole granules.
  const DeviceAddress c = PoolAlloc(*sim, 5 * kMiB, kA);
  ASSERT_NE(c, 0u);
  usage = Usage(*sim);
  EXPECT_EQ(usage.reserved, 8 * kMiB);
  EXPECT_EQ(usage.used, 512 + 5 * kMiB);
  EXPECT_FALSE(c >= a && c < a + 2 * kMiB);
  // Plain allocations see the pool's share.
  EXPECT_TRUE(absl::IsResourceExhausted(sim->Allocate(57 * kMiB).status()));
  GPUALLOC_EXPECT_OK(sim->Allocate(56 * kMiB));
}

TEST(SimPoolTest, SameStreamReuseIsImmediateWhateverTheRules) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(false, false, false)));
  const DeviceAddress a = PoolAlloc(*sim, kMiB, kA);
  sim->Use(kA, a, kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(a, kA));
  EXPECT_EQ(Usage(*sim).used, 0u);
  EXPECT_EQ(PoolAlloc(*sim, kMiB, kA), a);
  sim->Use(kA, a, kMiB);
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_EQ(Usage(*sim).reserved, 2 * kMiB);
}

// The reuse matrix: a block freed on A while A's work on it is pending, asked
// for on B.
struct ReuseCase {
  std::string name;
  PoolOptions options;
  bool b_waits;           // B waits on an event recorded on A after the free
  bool a_completes;       // A's work completes (no host sync) before
  bool expect_reuse;      // B gets the freed block
  bool expect_b_ordered;  // and B then waits for A's work
};

void PrintTo(const ReuseCase& c, std::ostream* os) { *os << c.name; }

class SimPoolReuseTest : public ::testing::TestWithParam<ReuseCase> {};

TEST_P(SimPoolReuseTest, HandsOutTheFreedBlockExactlyWhenARuleAllows) {
  const ReuseCase& c = GetParam();
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  PoolOptions options = c.options;
  options.release_threshold = kGiB;  // keep what is freed
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(options));
  const DeviceAddress a = PoolAlloc(*sim, 2 * kMiB, kA);
  sim->Use(kA, a, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(a, kA));
  if (c.b_waits) MakeWait(*sim, kB, kA);
  if (c.a_completes) sim->CompleteStream(kA);

  const DeviceAddress b = PoolAlloc(*sim, 2 * kMiB, kB);
  ASSERT_NE(b, 0u);
  EXPECT_EQ(b == a, c.expect_reuse) << std::hex << a << " " << b;
  EXPECT_EQ(Usage(*sim).reserved, c.expect_reuse ? 2 * kMiB : 4 * kMiB);
  // Whatever the rule, using what the pool handed out is never a hazard.
  sim->Use(kB, b, 2 * kMiB);
  EXPECT_EQ(sim->hazards(), 0u);
  // An inserted dependency orders B after A's work.
  sim->CompleteStream(kB);
  EXPECT_EQ(sim->pending_work() == 0, c.expect_b_ordered || c.a_completes)
      << sim->pending_work();
}

INSTANTIATE_TEST_SUITE_P(
    Rules, SimPoolReuseTest,
    ::testing::Values(
        ReuseCase{"all_off", Rules(false, false, false), false, false, false,
                  false},
        ReuseCase{"all_off_even_when_waiting", Rules(false, false, false), true,
                  false, false, true},
        ReuseCase{"all_off_even_when_complete", Rules(false, false, false),
                  false, true, false, false},
        ReuseCase{"follow_with_wait", Rules(true, false, false), true, false,
                  true, true},
        ReuseCase{"follow_without_wait", Rules(true, false, false), false,
                  false, false, false},
        ReuseCase{"opportunistic_complete", Rules(false, true, false), false,
                  true, true, false},
        ReuseCase{"opportunistic_pending", Rules(false, true, false), false,
                  false, false, false},
        ReuseCase{"internal_pending", Rules(false, false, true), false, false,
                  true, true},
        ReuseCase{"defaults_pending", PoolOptions{}, false, false, true, true}),
    [](const ::testing::TestParamInfo<ReuseCase>& info) {
      return info.param.name;
    });

TEST(SimPoolTest, WhatASynchronizationPointSawFreedGoesToAnyStream) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(false, false, false, kGiB)));
  const DeviceAddress a = PoolAlloc(*sim, 2 * kMiB, kA);
  sim->Use(kA, a, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(a, kA));
  const EventHandle after_free = RecordedOn(*sim, kA);
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(after_free));
  EXPECT_EQ(PoolAlloc(*sim, 2 * kMiB, kB), a);
  EXPECT_EQ(sim->hazards(), 0u);
}

TEST(SimPoolTest, InternalDependencyOrdersTheModeledClock) {
  auto sim = MakeStreamsSim(SimClock::kModeled);
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(false, false, true, kGiB)));
  const DeviceAddress a = PoolAlloc(*sim, kMiB, kA);
  sim->Use(kA, a, kMiB, 1000);
  GPUALLOC_ASSERT_OK(sim->PoolFree(a, kA));
  EXPECT_EQ(PoolAlloc(*sim, kMiB, kB), a);
  sim->Use(kB, a, kMiB, 10);
  const EventHandle on_b = RecordedOn(*sim, kB);
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(on_b));
  EXPECT_EQ(sim->now_ns(), 1010u);
  EXPECT_EQ(sim->hazards(), 0u);
}

TEST(SimPoolTest, PrefersABlockThatNeedsNoNewWait) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(PoolOptions{}));
  const DeviceAddress small = PoolAlloc(*sim, 2 * kMiB, kA);
  const DeviceAddress large = PoolAlloc(*sim, 4 * kMiB, kB);
  sim->Use(kA, small, 2 * kMiB);
  sim->Use(kB, large, 4 * kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(small, kA));
  GPUALLOC_ASSERT_OK(sim->PoolFree(large, kB));
  // Best fit would be A's block, which B could only have after a wait.
  EXPECT_EQ(PoolAlloc(*sim, 2 * kMiB, kB), large);
  EXPECT_EQ(PoolAlloc(*sim, 2 * kMiB, kB), large + 2 * kMiB);
  // Now only A's block is left: B takes it and waits.
  EXPECT_EQ(PoolAlloc(*sim, 2 * kMiB, kB), small);
  sim->Use(kB, small, 2 * kMiB);
  EXPECT_EQ(sim->hazards(), 0u);
  EXPECT_EQ(Usage(*sim).reserved, 6 * kMiB);
}

TEST(SimPoolTest, BestFitLowestAddressSplitAndMerge) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  const DeviceAddress x = PoolAlloc(*sim, kMiB / 2, kA);
  const DeviceAddress y = PoolAlloc(*sim, kMiB / 2, kA);
  const DeviceAddress z = PoolAlloc(*sim, kMiB / 2, kA);
  EXPECT_EQ(y, x + kMiB / 2);
  EXPECT_EQ(z, y + kMiB / 2);
  // Free x and z: two holes of 512 KiB plus the 512 KiB tail after z merged
  // with z into 1 MiB.
  GPUALLOC_ASSERT_OK(sim->PoolFree(x, kA));
  GPUALLOC_ASSERT_OK(sim->PoolFree(z, kA));
  // Best fit for 256 KiB is x's hole (512 KiB), not z's (1 MiB).
  EXPECT_EQ(PoolAlloc(*sim, kMiB / 4, kA), x);
  // 1 MiB fits only after z.
  EXPECT_EQ(PoolAlloc(*sim, kMiB, kA), z);
  EXPECT_EQ(Usage(*sim).reserved, 2 * kMiB);
  // Freeing everything merges the segment into one block again.
  GPUALLOC_ASSERT_OK(sim->PoolFree(x, kA));
  GPUALLOC_ASSERT_OK(sim->PoolFree(z, kA));
  GPUALLOC_ASSERT_OK(sim->PoolFree(y, kA));
  EXPECT_EQ(PoolAlloc(*sim, 2 * kMiB, kA), x);
  EXPECT_EQ(Usage(*sim).reserved, 2 * kMiB);
}

TEST(SimPoolTest, BlocksOfSeparateSegmentsNeverMerge) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(true, true, true, kGiB)));
  const DeviceAddress a = PoolAlloc(*sim, 2 * kMiB, kA);
  const DeviceAddress b = PoolAlloc(*sim, 2 * kMiB, kA);
  GPUALLOC_ASSERT_OK(sim->PoolFree(a, kA));
  GPUALLOC_ASSERT_OK(sim->PoolFree(b, kA));
  const DeviceAddress c = PoolAlloc(*sim, 4 * kMiB, kA);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(Usage(*sim).reserved, 8 * kMiB);
}

TEST(SimPoolTest, MergingFreesOfTwoStreamsKeepsTheStrictestCondition) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(false, false, false, kGiB)));
  const DeviceAddress p = PoolAlloc(*sim, kMiB, kA);
  const DeviceAddress q = PoolAlloc(*sim, kMiB, kB);
  ASSERT_EQ(q, p + kMiB);
  sim->Use(kA, p, kMiB);
  sim->Use(kB, q, kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(p, kA));
  GPUALLOC_ASSERT_OK(sim->PoolFree(q, kB));
  // Merged, the block is "same stream" for neither A nor B.
  const DeviceAddress on_a = PoolAlloc(*sim, 2 * kMiB, kA);
  EXPECT_NE(on_a, p);
  sim->Use(kA, on_a, 2 * kMiB);
  EXPECT_EQ(sim->hazards(), 0u);
  // Once the work is complete, opportunistic reuse may take it.
  sim->CompleteAll();
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(false, true, false, kGiB)));
  EXPECT_EQ(PoolAlloc(*sim, 2 * kMiB, kC), p);
  sim->Use(kC, p, 2 * kMiB);
  EXPECT_EQ(sim->hazards(), 0u);
}

TEST(SimPoolTest, AFreeTheHostSawAddsNoConditionToAMerge) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(false, false, false, kGiB)));
  const DeviceAddress p = PoolAlloc(*sim, kMiB, kA);
  const DeviceAddress q = PoolAlloc(*sim, kMiB, kB);
  sim->Use(kB, q, kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(q, kB));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(RecordedOn(*sim, kB)));
  sim->Use(kA, p, kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(p, kA));
  // Merged with B's observed free, the block is still A's own.
  EXPECT_EQ(PoolAlloc(*sim, 2 * kMiB, kA), p);
  EXPECT_EQ(sim->hazards(), 0u);
}

TEST(SimPoolTest, OutOfMemoryIsResourceExhaustedAndChangesNothing) {
  auto sim = MakeStreamsSim(SimClock::kManual, 64 * kMiB);
  ASSERT_NE(sim, nullptr);
  ASSERT_TRUE(sim->Allocate(56 * kMiB).ok());
  const DeviceAddress a = PoolAlloc(*sim, 3 * kMiB, kA);
  ASSERT_NE(a, 0u);
  const PoolUsage before = Usage(*sim);
  for (std::uint64_t bytes :
       {6 * kMiB, 64 * kMiB + 1, std::numeric_limits<std::uint64_t>::max(),
        std::numeric_limits<std::uint64_t>::max() - 100}) {
    absl::StatusOr<DeviceAddress> more = sim->PoolAllocate(bytes, kA);
    ASSERT_TRUE(absl::IsResourceExhausted(more.status()))
        << bytes << ": " << more.status();
    EXPECT_TRUE(absl::StrContains(more.status().message(), absl::StrCat(bytes)))
        << more.status();
    const PoolUsage after = Usage(*sim);
    EXPECT_EQ(after.reserved, before.reserved);
    EXPECT_EQ(after.used, before.used);
  }
  absl::StatusOr<DeviceAddress> more = sim->PoolAllocate(6 * kMiB, kA);
  EXPECT_TRUE(
      absl::StrContains(more.status().message(), absl::StrCat(4 * kMiB, " of")))
      << "what is free: " << more.status();
  // What is left still fits.
  EXPECT_NE(PoolAlloc(*sim, 4 * kMiB, kA), 0u);
  EXPECT_EQ(*sim->FreeBytes(), 0u);
  const absl::StatusOr<DeviceAddress> zero = sim->PoolAllocate(0, kA);
  EXPECT_TRUE(absl::IsInvalidArgument(zero.status())) << zero.status();
  EXPECT_EQ(sim->failed_calls(SimOp::kPoolAllocate), 6u);
}

TEST(SimPoolTest, GrowthReturnsCompletedFreeSegmentsBeforeFailing) {
  auto sim = MakeStreamsSim(SimClock::kManual, 16 * kMiB);
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(true, true, true, kGiB)));
  ASSERT_TRUE(sim->Allocate(8 * kMiB).ok());
  std::vector<DeviceAddress> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(PoolAlloc(*sim, 2 * kMiB, kA));
  EXPECT_EQ(*sim->FreeBytes(), 0u);
  // Two blocks' frees are complete, two pending (a free waits for all the
  // work queued on its stream before it).
  for (int i = 0; i < 4; ++i) {
    sim->Use(kA, blocks[i], 2 * kMiB);
    GPUALLOC_ASSERT_OK(sim->PoolFree(blocks[i], kA));
    if (i == 1) sim->CompleteStream(kA);
  }
  // 4 MiB fits no free block; the two completed segments make room.
  const DeviceAddress big = PoolAlloc(*sim, 4 * kMiB, kA);
  ASSERT_NE(big, 0u);
  EXPECT_EQ(Usage(*sim).reserved, 8 * kMiB);
  // The pending ones cannot go back.
  const absl::StatusOr<DeviceAddress> more = sim->PoolAllocate(4 * kMiB, kA);
  EXPECT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  EXPECT_EQ(Usage(*sim).reserved, 8 * kMiB);
  // Completed, they would make room for 4 MiB but not for 6: a request that
  // fails anyway releases nothing.
  sim->CompleteStream(kA);
  const absl::StatusOr<DeviceAddress> huge = sim->PoolAllocate(6 * kMiB, kA);
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status())) << huge.status();
  EXPECT_EQ(Usage(*sim).reserved, 8 * kMiB);
  EXPECT_NE(PoolAlloc(*sim, 4 * kMiB, kA), 0u);
  EXPECT_EQ(Usage(*sim).reserved, 8 * kMiB);
}

TEST(SimPoolTest, TrimReturnsOnlyFullyFreeCompletedSegments) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(true, true, true, kGiB)));
  const std::uint64_t device_free = *sim->FreeBytes();
  const DeviceAddress busy = PoolAlloc(*sim, kMiB, kA);  // segment 1, in use
  const DeviceAddress pending = PoolAlloc(*sim, 2 * kMiB, kA);  // segment 2
  const DeviceAddress done1 = PoolAlloc(*sim, 2 * kMiB, kA);    // segment 3
  const DeviceAddress done2 = PoolAlloc(*sim, 2 * kMiB, kA);    // segment 4
  sim->Use(kA, done1, 2 * kMiB);
  sim->Use(kA, done2, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(done1, kA));
  GPUALLOC_ASSERT_OK(sim->PoolFree(done2, kA));
  sim->CompleteStream(kA);
  sim->Use(kA, pending, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(pending, kA));
  EXPECT_EQ(Usage(*sim).reserved, 8 * kMiB);
  // keep_bytes: stops once the pool is down to it.
  GPUALLOC_ASSERT_OK(sim->PoolTrim(6 * kMiB));
  EXPECT_EQ(Usage(*sim).reserved, 6 * kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolTrim(0));
  EXPECT_EQ(Usage(*sim).reserved, 4 * kMiB) << "busy and pending stay";
  EXPECT_EQ(*sim->FreeBytes(), device_free - 4 * kMiB);
  sim->CompleteStream(kA);
  GPUALLOC_ASSERT_OK(sim->PoolTrim(0));
  EXPECT_EQ(Usage(*sim).reserved, 2 * kMiB);
  GPUALLOC_ASSERT_OK(sim->PoolFree(busy, kA));
  GPUALLOC_ASSERT_OK(sim->PoolTrim(0));
  const PoolUsage usage = Usage(*sim);
  EXPECT_EQ(usage.reserved, 0u);
  EXPECT_EQ(usage.used, 0u);
  EXPECT_EQ(usage.peak_reserved, 8 * kMiB);
  EXPECT_EQ(usage.peak_used, 7 * kMiB);
  EXPECT_EQ(*sim->FreeBytes(), device_free);
  // Addresses of released segments are not the pool's any more.
  EXPECT_TRUE(absl::IsInvalidArgument(sim->PoolFree(done1, kA)));
}

TEST(SimPoolTest, ReleaseThresholdAppliesAtSynchronizationPoints) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(true, true, true, 4 * kMiB)));
  std::vector<DeviceAddress> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(PoolAlloc(*sim, 2 * kMiB, kA));
    sim->Use(kA, blocks.back(), 2 * kMiB);
  }
  for (DeviceAddress block : blocks) {
    GPUALLOC_ASSERT_OK(sim->PoolFree(block, kA));
  }
  sim->CompleteAll();
  EXPECT_EQ(Usage(*sim).reserved, 8 * kMiB) << "not a synchronization point";
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(RecordedOn(*sim, kA)));
  EXPECT_EQ(Usage(*sim).reserved, 4 * kMiB);
  // Threshold 0 (the default): a plain Free, which synchronizes the device,
  // returns the rest.
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(PoolOptions{}));
  EXPECT_EQ(Usage(*sim).reserved, 4 * kMiB) << "ConfigurePool trims nothing";
  absl::StatusOr<DeviceAddress> plain = sim->Allocate(kMiB);
  ASSERT_TRUE(plain.ok());
  GPUALLOC_ASSERT_OK(sim->Free(*plain));
  EXPECT_EQ(Usage(*sim).reserved, 0u);
}

TEST(SimPoolTest, FreeErrorsNameTheAddress) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(true, true, true, kGiB)));
  const DeviceAddress a = PoolAlloc(*sim, kMiB, kA);
  const DeviceAddress b = PoolAlloc(*sim, kMiB / 2, kA);
  for (DeviceAddress bad :
       {a + 256, DeviceAddress{0}, DeviceAddress{0x1000}, b + kMiB / 2}) {
    const absl::Status status = sim->PoolFree(bad, kA);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_TRUE(
        absl::StrContains(status.message(), absl::StrFormat("%#x", bad)))
        << status;
  }
  GPUALLOC_ASSERT_OK(sim->PoolFree(a, kA));
  absl::Status twice = sim->PoolFree(a, kB);
  EXPECT_TRUE(absl::IsFailedPrecondition(twice)) << twice;
  EXPECT_TRUE(absl::StrContains(twice.message(), absl::StrFormat("%#x", a)))
      << twice;
  // Also once merged into a neighbour.
  GPUALLOC_ASSERT_OK(sim->PoolFree(b, kA));
  twice = sim->PoolFree(b, kA);
  EXPECT_TRUE(absl::IsFailedPrecondition(twice)) << twice;
  EXPECT_EQ(Usage(*sim).used, 0u);
  // Handed out again, the address frees normally.
  EXPECT_EQ(PoolAlloc(*sim, kMiB, kA), a);
  GPUALLOC_ASSERT_OK(sim->PoolFree(a, kA));
  // Plain Free does not take pool addresses, nor PoolFree plain ones.
  const DeviceAddress c = PoolAlloc(*sim, kMiB, kA);
  EXPECT_TRUE(absl::IsInvalidArgument(sim->Free(c)));
  absl::StatusOr<DeviceAddress> plain = sim->Allocate(kMiB);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(sim->PoolFree(*plain, kA)));
}

TEST(SimPoolTest, HostBackedPoolMemoryHoldsAPattern) {
  SimOptions o;
  o.profile = "mi300x";
  o.total_bytes = 64 * kMiB;
  o.memory = SimMemory::kHostBacked;
  auto sim = MakeSim(o);
  ASSERT_NE(sim, nullptr);
  EXPECT_TRUE(sim->info().capabilities.host_accessible);
  std::vector<std::pair<DeviceAddress, std::uint64_t>> blocks;
  for (std::uint64_t size :
       {std::uint64_t{100}, 5000 * std::uint64_t{1}, kMiB, 3 * kMiB}) {
    blocks.push_back({PoolAlloc(*sim, size, kA), size});
    ASSERT_NE(blocks.back().first, 0u);
    EXPECT_EQ(blocks.back().first % 4096, 0u);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    std::memset(reinterpret_cast<void*>(blocks[i].first),
                static_cast<int>(0x40 + i), blocks[i].second);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(blocks[i].first);
    std::uint64_t wrong = 0;
    for (std::uint64_t j = 0; j < blocks[i].second; ++j) {
      wrong += bytes[j] != static_cast<unsigned char>(0x40 + i);
    }
    EXPECT_EQ(wrong, 0u) << "block " << i;
  }
  for (const auto& [address, size] : blocks) {
    GPUALLOC_ASSERT_OK(sim->PoolFree(address, kA));
  }
  GPUALLOC_ASSERT_OK(sim->PoolTrim(0));
  EXPECT_EQ(Usage(*sim).reserved, 0u);
  // Segments left in the pool are unmapped by the destructor (checked under
  // ASan/LSan builds).
  PoolAlloc(*sim, kMiB, kA);
}

// --- Fault injection and cost ------------------------------------------------

TEST(SimStreamsFaultTest, EveryNewOpCanFailAndAFailureChangesNothing) {
  auto sim = MakeStreamsSim();
  ASSERT_NE(sim, nullptr);
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(true, true, true, kGiB)));
  const EventHandle event = NewEvent(*sim);
  const DeviceAddress block = PoolAlloc(*sim, kMiB, kA);
  sim->Use(kA, block, kMiB);
  const absl::Status injected = absl::UnavailableError("injected");
  const std::uint64_t ns = sim->modeled_ns();

  sim->FailNthCall(SimOp::kCreateEvent, 1, injected);
  EXPECT_EQ(sim->CreateEvent().status(), injected);
  EXPECT_EQ(sim->live_events(), 1u);

  sim->FailNthCall(SimOp::kRecordEvent, 1, injected);
  EXPECT_EQ(sim->RecordEvent(event, kA), injected);
  EXPECT_TRUE(Query(*sim, event)) << "still never recorded";

  GPUALLOC_ASSERT_OK(sim->RecordEvent(event, kA));
  sim->FailNthCall(SimOp::kQueryEvent, 1, injected);
  EXPECT_EQ(sim->QueryEvent(event).status(), injected);

  sim->FailNthCall(SimOp::kStreamWaitEvent, 1, injected);
  EXPECT_EQ(sim->StreamWaitEvent(kB, event), injected);
  sim->Use(kB, block, kMiB);
  EXPECT_EQ(sim->hazards(), 1u) << "B was not made to wait";

  sim->FailNthCall(SimOp::kSynchronizeEvent, 1, injected);
  EXPECT_EQ(sim->SynchronizeEvent(event), injected);
  EXPECT_EQ(sim->pending_work(), 2u);

  sim->FailNthCall(SimOp::kDestroyEvent, 1, injected);
  EXPECT_EQ(sim->DestroyEvent(event), injected);
  EXPECT_EQ(sim->live_events(), 1u);

  const PoolUsage usage = Usage(*sim);
  sim->FailNthCall(SimOp::kPoolAllocate, 1, injected);
  EXPECT_EQ(sim->PoolAllocate(kMiB, kA).status(), injected);
  sim->FailNthCall(SimOp::kPoolFree, 1, injected);
  EXPECT_EQ(sim->PoolFree(block, kA), injected);
  sim->FailNthCall(SimOp::kPoolTrim, 1, injected);
  EXPECT_EQ(sim->PoolTrim(0), injected);
  sim->FailNthCall(SimOp::kConfigurePool, 1, injected);
  EXPECT_EQ(sim->ConfigurePool(PoolOptions{}), injected);
  sim->FailNthCall(SimOp::kGetPoolUsage, 1, injected);
  EXPECT_EQ(sim->GetPoolUsage().status(), injected);
  const PoolUsage after = Usage(*sim);
  EXPECT_EQ(after.used, usage.used);
  EXPECT_EQ(after.reserved, usage.reserved);
  // The block is still live and frees once.
  GPUALLOC_ASSERT_OK(sim->PoolFree(block, kA));

  for (SimOp op :
       {SimOp::kCreateEvent, SimOp::kDestroyEvent, SimOp::kRecordEvent,
        SimOp::kQueryEvent, SimOp::kStreamWaitEvent, SimOp::kSynchronizeEvent,
        SimOp::kPoolAllocate, SimOp::kPoolFree, SimOp::kPoolTrim,
        SimOp::kConfigurePool, SimOp::kGetPoolUsage}) {
    EXPECT_EQ(sim->failed_calls(op), 1u) << SimOpName(op);
  }
  // Failed calls cost nothing; the successful ones since cost their share.
  const SimOptions defaults;
  EXPECT_EQ(sim->modeled_ns(),
            ns + defaults.cost_ns[static_cast<int>(SimOp::kRecordEvent)] +
                defaults.cost_ns[static_cast<int>(SimOp::kQueryEvent)] +
                2 * defaults.cost_ns[static_cast<int>(SimOp::kGetPoolUsage)] +
                defaults.cost_ns[static_cast<int>(SimOp::kPoolFree)]);
}

TEST(SimStreamsFaultTest, EachCallIsCountedAndCosted) {
  SimOptions o;
  o.profile = "h100";
  o.total_bytes = kGiB;
  for (int i = 0; i < kNumSimOps; ++i) o.cost_ns[i] = std::uint64_t{1} << i;
  o.cost_ns_per_mib = {};  // per call only
  auto sim = MakeSim(o);
  ASSERT_NE(sim, nullptr);
  const auto cost = [&](SimOp op) { return o.cost_ns[static_cast<int>(op)]; };
  GPUALLOC_ASSERT_OK(sim->ConfigurePool(Rules(true, true, true, kGiB)));
  const EventHandle event = NewEvent(*sim);
  GPUALLOC_ASSERT_OK(sim->RecordEvent(event, kA));
  GPUALLOC_ASSERT_OK(sim->QueryEvent(event));
  GPUALLOC_ASSERT_OK(sim->StreamWaitEvent(kB, event));
  GPUALLOC_ASSERT_OK(sim->SynchronizeEvent(event));
  GPUALLOC_ASSERT_OK(sim->DestroyEvent(event));
  EXPECT_EQ(sim->modeled_ns(),
            cost(SimOp::kConfigurePool) + cost(SimOp::kCreateEvent) +
                cost(SimOp::kRecordEvent) + cost(SimOp::kQueryEvent) +
                cost(SimOp::kStreamWaitEvent) + cost(SimOp::kSynchronizeEvent) +
                cost(SimOp::kDestroyEvent));
  sim->ResetCounters();
  // Growing the pool costs a device allocation; a release a device free.
  const DeviceAddress a = PoolAlloc(*sim, kMiB, kA);
  EXPECT_EQ(sim->modeled_ns(),
            cost(SimOp::kPoolAllocate) + cost(SimOp::kAllocate));
  const DeviceAddress b = PoolAlloc(*sim, kMiB, kA);
  GPUALLOC_ASSERT_OK(sim->PoolFree(a, kA));
  GPUALLOC_ASSERT_OK(sim->PoolFree(b, kA));
  GPUALLOC_ASSERT_OK(sim->PoolTrim(0));
  GPUALLOC_ASSERT_OK(sim->GetPoolUsage());
  EXPECT_EQ(sim->modeled_ns(),
            2 * cost(SimOp::kPoolAllocate) + cost(SimOp::kAllocate) +
                2 * cost(SimOp::kPoolFree) + cost(SimOp::kPoolTrim) +
                cost(SimOp::kFree) + cost(SimOp::kGetPoolUsage));
  EXPECT_EQ(sim->calls(SimOp::kPoolAllocate), 2u);
  EXPECT_EQ(sim->calls(SimOp::kPoolFree), 2u);
  EXPECT_EQ(sim->calls(SimOp::kAllocate), 0u) << "growth is not a call";
}

// --- Threads -----------------------------------------------------------------

TEST(SimStreamsThreadTest, ThreadsOnTheirOwnStreamsShareOneDevice) {
  for (SimClock clock : {SimClock::kManual, SimClock::kModeled}) {
    auto sim = MakeStreamsSim(clock, 4 * kGiB);
    ASSERT_NE(sim, nullptr);
    constexpr int kThreads = 4;
    constexpr int kRounds = 2000;
    std::vector<std::vector<std::string>> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const Stream stream(100 + t);
        auto check = [&](const absl::Status& status) {
          if (!status.ok()) errors[t].push_back(status.ToString());
        };
        absl::StatusOr<EventHandle> event = sim->CreateEvent();
        check(event.status());
        if (!event.ok()) return;
        for (int round = 0; round < kRounds; ++round) {
          const std::uint64_t bytes = 4096 * (1 + (round * 7 + t) % 300);
          absl::StatusOr<DeviceAddress> block =
              sim->PoolAllocate(bytes, stream);
          check(block.status());
          if (!block.ok()) continue;
          sim->Use(stream, *block, bytes, 1000);
          check(sim->RecordEvent(*event, stream));
          check(sim->QueryEvent(*event).status());
          check(sim->PoolFree(*block, stream));
          if (round % 64 == 0) check(sim->SynchronizeEvent(*event));
          if (round % 16 == 0) sim->AdvanceClock(5000);
          if (round % 100 == 0) check(sim->PoolTrim(0));
        }
        check(sim->DestroyEvent(*event));
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_TRUE(errors[t].empty())
          << "thread " << t << ": " << errors[t].size() << " errors, first "
          << errors[t].front();
    }
    EXPECT_EQ(sim->hazards(), 0u)
        << "the pool must never hand out memory another stream still uses";
    EXPECT_EQ(Usage(*sim).used, 0u);
    EXPECT_EQ(sim->live_events(), 0u);
    EXPECT_EQ(sim->calls(SimOp::kPoolAllocate),
              std::uint64_t{kThreads} * kRounds);
  }
}

// Thousands of streams, each ordered after the one 8 before it (a handover
// chain): the clocks stay short (their completed entries dropped), so each
// ordering costs the same however many streams came before; what no host
// synchronization saw stays unseen until one does.
TEST(SimStreamsScale, AChainAcrossThousandsOfStreamsKeepsClocksShort) {
  DeviceInfo info;
  info.name = "scale test";
  sim::Streams streams(info, SimClock::kManual, 1000);
  constexpr int kStreams = 20000;
  for (int i = 1; i <= kStreams; ++i) {
    const Stream s(static_cast<std::uintptr_t>(i));
    streams.Use(s, 0x100000 + std::uint64_t{4096} * i, 4096, 0, true);
    if (i > 8) streams.OrderStreams(s, Stream(i - 8));
    if (i % 16 == 0) streams.CompleteAll();
  }
  std::size_t longest = 0;
  for (int i = 1; i <= kStreams; ++i) {
    longest = std::max(
        longest,
        streams.GetStream(static_cast<std::uintptr_t>(i)).clock.size());
  }
  EXPECT_LE(longest, sim::Streams::kCompactAbove + 2);
  // Complete, but no synchronization saw it: a captured clock of the last
  // stream is not observed until the device synchronizes.
  const sim::Event e = streams.Capture(kStreams);
  streams.CompleteAll();
  EXPECT_TRUE(streams.Completed(e.clock));
  EXPECT_FALSE(streams.Observed(e.clock));
  const sim::CallLedger ledger{sim::CostModel{}};
  (void)streams.SynchronizeDevice(ledger);
  EXPECT_TRUE(streams.Observed(e.clock));
  EXPECT_EQ(streams.pending_work(), 0u);
}

}  // namespace
}  // namespace gpualloc::testing
