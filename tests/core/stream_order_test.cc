// SPDX-License-Identifier: Apache-2.0
// tests/core/stream_order_test.cc: the lazily recorded events behind
// stream-ordered frees (core/stream_order.h), against a scripted event backend.
#include "core/stream_order.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

constexpr std::uintptr_t kS1 = 0x100;
constexpr std::uintptr_t kS2 = 0x200;
constexpr std::uintptr_t kS3 = 0x300;

// Events whose completion the test decides: an event is complete when its
// stream's "done" count reached the position it captured.
class ScriptedEvents final : public Backend {
 public:
  ScriptedEvents() {
    info_.backend = "scripted";
    info_.name = "scripted events";
    info_.total_bytes = 1 << 30;
    info_.capabilities.streams = true;
  }
  const DeviceInfo& info() const override { return info_; }
  absl::StatusOr<std::uint64_t> FreeBytes() override { return 0; }
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t) override {
    return absl::UnimplementedError("no memory here");
  }
  absl::Status Free(DeviceAddress) override { return absl::OkStatus(); }

  absl::StatusOr<EventHandle> CreateEvent() override {
    ++created;
    if (fail_next_create) {
      fail_next_create = false;
      return absl::InternalError("scripted CreateEvent failure");
    }
    events_[next_] = {};
    return next_++;
  }
  absl::Status DestroyEvent(EventHandle e) override {
    ++destroyed;
    return events_.erase(e) == 1 ? absl::OkStatus()
                                 : absl::InvalidArgumentError("unknown event");
  }
  absl::Status RecordEvent(EventHandle e, Stream s) override {
    ++recorded;
    events_.at(e) = {s.handle, ++queued_[s.handle]};
    return absl::OkStatus();
  }
  absl::StatusOr<bool> QueryEvent(EventHandle e) override {
    ++queried;
    if (fail_queries) return absl::InternalError("scripted QueryEvent failure");
    const Captured& c = events_.at(e);
    return done_[c.stream] >= c.position;
  }
  absl::Status StreamWaitEvent(Stream s, EventHandle e) override {
    waits.push_back({s.handle, e});
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(EventHandle e) override {
    ++synchronized;
    const Captured& c = events_.at(e);
    if (done_[c.stream] < c.position) done_[c.stream] = c.position;
    return absl::OkStatus();
  }

  // Completes every event recorded on `stream` so far.
  void Finish(std::uintptr_t stream) { done_[stream] = queued_[stream]; }

  int created = 0, destroyed = 0, recorded = 0, queried = 0, synchronized = 0;
  bool fail_next_create = false;
  bool fail_queries = false;
  std::vector<std::pair<std::uintptr_t, EventHandle>> waits;

 private:
  struct Captured {
    std::uintptr_t stream = 0;
    std::uint64_t position = 0;
  };
  DeviceInfo info_;
  EventHandle next_ = 1;
  std::map<EventHandle, Captured> events_;
  std::map<std::uintptr_t, std::uint64_t> queued_, done_;
};

using Verdict = ReuseOracle::Verdict;

TEST(StreamOrderTest, NothingIsRecordedUntilAnotherStreamAsks) {
  ScriptedEvents events;
  {
    StreamOrder order(&events, CrossStreamReuse::kWhenComplete);
    EXPECT_EQ(order.stamp(), 0u);
    EXPECT_FALSE(order.KnownComplete(kS1, 0));
    EXPECT_EQ(events.created + events.recorded + events.queried, 0);
  }
  EXPECT_EQ(events.destroyed, 0);
}

TEST(StreamOrderTest, OneEventCoversEveryEarlierFreeOnItsStream) {
  ScriptedEvents events;
  StreamOrder order(&events, CrossStreamReuse::kWhenComplete);
  const std::uint64_t free1 = order.stamp();
  EXPECT_EQ(order.Prepare(kS1, free1, kS2, /*may_wait=*/true),
            Verdict::kBlocked);
  EXPECT_EQ(events.recorded, 1);
  EXPECT_EQ(order.stamp(), 1u);  // later frees need a later event
  // Asking again about the same free reuses the event.
  EXPECT_EQ(order.Prepare(kS1, free1, kS3, /*may_wait=*/true),
            Verdict::kBlocked);
  EXPECT_EQ(events.recorded, 1);
  events.Finish(kS1);
  order.NewSearch();  // the next Allocate
  EXPECT_EQ(order.Prepare(kS1, free1, kS2, /*may_wait=*/true), Verdict::kReady);
  EXPECT_TRUE(order.KnownComplete(kS1, free1));
  // A free after the event is not covered by it.
  const std::uint64_t free2 = order.stamp();
  EXPECT_FALSE(order.KnownComplete(kS1, free2));
  EXPECT_EQ(order.Prepare(kS1, free2, kS2, /*may_wait=*/true),
            Verdict::kBlocked);
  EXPECT_EQ(events.recorded, 2);
  // The completed event was recycled, not a new one created.
  EXPECT_EQ(events.created, 1);
  EXPECT_EQ(order.events_recorded(), 2u);
  EXPECT_EQ(order.stream_waits(), 0u);
}

TEST(StreamOrderTest, StreamWaitPolicyMakesTheNewStreamWait) {
  ScriptedEvents events;
  StreamOrder order(&events, CrossStreamReuse::kStreamWait);
  EXPECT_EQ(order.Prepare(kS1, order.stamp(), kS2, /*may_wait=*/true),
            Verdict::kWaited);
  ASSERT_EQ(events.waits.size(), 1u);
  EXPECT_EQ(events.waits[0].first, kS2);
  EXPECT_EQ(order.stream_waits(), 1u);
  // Completed work needs no wait.
  events.Finish(kS1);
  order.NewSearch();
  EXPECT_EQ(order.Prepare(kS1, 0, kS3, /*may_wait=*/true), Verdict::kReady);
  EXPECT_EQ(events.waits.size(), 1u);
}

TEST(StreamOrderTest, QueriesStopAtTheFirstRunningEvent) {
  ScriptedEvents events;
  StreamOrder order(&events, CrossStreamReuse::kWhenComplete);
  const std::uint64_t a = order.stamp();
  EXPECT_EQ(order.Prepare(kS1, a, kS2, /*may_wait=*/true),
            Verdict::kBlocked);  // event 1
  const std::uint64_t b = order.stamp();
  EXPECT_EQ(order.Prepare(kS1, b, kS2, /*may_wait=*/true),
            Verdict::kBlocked);  // event 2
  events.queried = 0;
  // Event 1 still runs: asking about event 2's free queries only event 1.
  order.NewSearch();
  EXPECT_EQ(order.Prepare(kS1, b, kS2, /*may_wait=*/true), Verdict::kBlocked);
  EXPECT_EQ(events.queried, 1);
  // Within one search, what the device said is still running is not asked
  // about again.
  EXPECT_EQ(order.Prepare(kS1, a, kS3, /*may_wait=*/true), Verdict::kBlocked);
  EXPECT_EQ(order.Prepare(kS1, b, kS2, /*may_wait=*/true), Verdict::kBlocked);
  EXPECT_EQ(events.queried, 1);
}

TEST(StreamOrderTest, WaitForAllBlocksOncePerStream) {
  ScriptedEvents events;
  StreamOrder order(&events, CrossStreamReuse::kWhenComplete);
  const std::uint64_t s = order.stamp();
  EXPECT_EQ(order.Prepare(kS1, s, kS3, /*may_wait=*/true), Verdict::kBlocked);
  GPUALLOC_ASSERT_OK(order.WaitForAll({kS1, kS2}));
  EXPECT_EQ(events.synchronized, 2);
  EXPECT_EQ(order.host_waits(), 2u);
  EXPECT_TRUE(order.KnownComplete(kS1, s));
  EXPECT_TRUE(order.KnownComplete(kS2, s));
  EXPECT_EQ(order.Prepare(kS1, s, kS3, /*may_wait=*/true), Verdict::kReady);
}

TEST(StreamOrderTest, BackendErrorsBlockAndAreKept) {
  ScriptedEvents events;
  StreamOrder order(&events, CrossStreamReuse::kStreamWait);
  events.fail_next_create = true;
  EXPECT_EQ(order.Prepare(kS1, 0, kS2, /*may_wait=*/true), Verdict::kError);
  EXPECT_TRUE(order.has_error());
  absl::Status error = order.TakeError();
  EXPECT_TRUE(absl::IsInternal(error)) << error;
  EXPECT_TRUE(order.TakeError().ok());  // taken once
  EXPECT_FALSE(order.has_error());
  events.fail_queries = true;
  EXPECT_EQ(order.Prepare(kS1, 0, kS2, /*may_wait=*/true), Verdict::kError);
  EXPECT_FALSE(order.TakeError().ok());
}

TEST(StreamOrderTest, DestroysEveryEventItCreated) {
  ScriptedEvents events;
  {
    StreamOrder order(&events, CrossStreamReuse::kWhenComplete);
    (void)order.Prepare(kS1, 0, kS2, /*may_wait=*/true);
    (void)order.Prepare(kS2, order.stamp(), kS1, /*may_wait=*/true);
    EXPECT_EQ(order.events_created(), 2u);
  }
  EXPECT_EQ(events.destroyed, events.created);
}

// Released streams: a stamp on the old handle is answered by the last event
// recorded at the release, never by recording on the handle again; once that
// event completes the key is forgotten (complete); and keys nobody asks
// about are dropped at later releases, so a stream per request stays bounded.
TEST(StreamOrderTest, ReleasedStreamsAreAnsweredByTheirLastEventAndForgotten) {
  ScriptedEvents events;
  StreamOrder order(&events, CrossStreamReuse::kWhenComplete);
  const std::uint64_t freed = order.stamp();
  const std::uintptr_t key = StreamOrder::kReleasedBit | 1;
  GPUALLOC_ASSERT_OK(order.ReleaseStream(kS1, key));
  EXPECT_EQ(events.recorded, 1);
  EXPECT_FALSE(order.KnownComplete(key, freed));
  order.NewSearch();
  EXPECT_EQ(order.Prepare(key, freed, kS2, /*may_wait=*/true),
            Verdict::kBlocked);
  EXPECT_EQ(events.recorded, 1);  // nothing recorded on the old stream
  events.Finish(kS1);
  order.NewSearch();
  EXPECT_EQ(order.Prepare(key, freed, kS2, /*may_wait=*/true), Verdict::kReady);
  EXPECT_TRUE(order.KnownComplete(key, freed + 100));  // forgotten: done
  EXPECT_EQ(order.released_streams_kept(), 0u);

  // A hundred streams released with work still queued, then all done: the
  // next release drops them all.
  for (std::uintptr_t s = 0x100; s < 0x100 + 100; ++s) {
    (void)order.Prepare(s, order.stamp(), kS2, /*may_wait=*/true);
    GPUALLOC_ASSERT_OK(order.ReleaseStream(s, StreamOrder::kReleasedBit | s));
  }
  EXPECT_EQ(order.released_streams_kept(), 100u);
  for (std::uintptr_t s = 0x100; s < 0x100 + 100; ++s) events.Finish(s);
  (void)order.Prepare(kS3, order.stamp(), kS2, /*may_wait=*/true);
  GPUALLOC_ASSERT_OK(order.ReleaseStream(kS3, StreamOrder::kReleasedBit | 2));
  EXPECT_LE(order.released_streams_kept(), 1u);
}

}  // namespace
}  // namespace gpualloc::core
