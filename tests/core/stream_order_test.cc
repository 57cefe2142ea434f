// SPDX-License-Identifier: Apache-2.0
// tests/core/stream_order_test.cc: the markers behind stream-ordered frees
// (core/streams/stream_order.h), with events and with completion counters,
// against a scripted backend whose work completes when the test says.
#include "core/streams/stream_order.h"

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

// Events and counters whose completion the test decides: work queued on a
// stream completes when Finish(stream) says; an event is complete once its
// stream's work up to it is, and a counter write lands then.
class ScriptedBackend final : public Backend {
 public:
  explicit ScriptedBackend(bool counters) {
    info_.backend = "scripted";
    info_.name = "scripted streams";
    info_.total_bytes = 1 << 30;
    info_.capabilities.streams = true;
    info_.capabilities.completion_counters = counters;
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
    Finish(c.stream, c.position);
    return absl::OkStatus();
  }

  absl::StatusOr<CounterBlock> CreateCounters(std::size_t count) override {
    ++blocks_created;
    const CounterHandle handle = next_block_++;
    blocks_[handle].assign(count, 0);
    return CounterBlock{handle, blocks_[handle].data(), count};
  }
  absl::Status DestroyCounters(CounterHandle handle) override {
    ++blocks_destroyed;
    return blocks_.erase(handle) == 1
               ? absl::OkStatus()
               : absl::InvalidArgumentError("unknown counters");
  }
  absl::Status WriteCounter(CounterHandle handle, std::size_t index,
                            std::uint64_t value, Stream s) override {
    ++written;
    if (fail_writes)
      return absl::InternalError("scripted WriteCounter failure");
    writes_.push_back({handle, index, value, s.handle, ++queued_[s.handle]});
    return absl::OkStatus();
  }
  absl::Status WaitCounter(CounterHandle handle, std::size_t index,
                           std::uint64_t value, Stream s) override {
    counter_waits.push_back({s.handle, value});
    (void)handle;
    (void)index;
    return absl::OkStatus();
  }

  // Completes every piece of work queued on `stream` so far (or up to
  // `position`): its events complete and its counter writes land.
  void Finish(std::uintptr_t stream, std::uint64_t position = UINT64_MAX) {
    done_[stream] = std::min(position, queued_[stream]);
    for (auto it = writes_.begin(); it != writes_.end();) {
      if (it->stream == stream && it->position <= done_[stream]) {
        blocks_.at(it->handle)[it->index] = it->value;
        it = writes_.erase(it);
      } else {
        ++it;
      }
    }
  }

  int created = 0, destroyed = 0, recorded = 0, queried = 0, synchronized = 0;
  int blocks_created = 0, blocks_destroyed = 0, written = 0;
  bool fail_next_create = false;
  bool fail_queries = false;
  bool fail_writes = false;
  std::vector<std::pair<std::uintptr_t, EventHandle>> waits;
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> counter_waits;

 private:
  struct Captured {
    std::uintptr_t stream = 0;
    std::uint64_t position = 0;
  };
  struct Write {
    CounterHandle handle;
    std::size_t index;
    std::uint64_t value;
    std::uintptr_t stream;
    std::uint64_t position;
  };
  DeviceInfo info_;
  EventHandle next_ = 1;
  CounterHandle next_block_ = 1;
  std::map<EventHandle, Captured> events_;
  std::map<CounterHandle, std::vector<std::uint64_t>> blocks_;
  std::vector<Write> writes_;
  std::map<std::uintptr_t, std::uint64_t> queued_, done_;
};

using Verdict = ReuseOracle::Verdict;
using Ask = ReuseOracle::Ask;

// A small free (far below a burst) on `stream`, earning credit.
void NoteSmallFree(StreamOrder& order, std::uintptr_t stream) {
  order.NoteFree(stream, /*bytes=*/256, /*reserved=*/std::uint64_t{1} << 30,
                 /*earns=*/true);
}

// Each case runs with events and with counters.
class StreamOrderTest : public ::testing::TestWithParam<bool> {
 protected:
  bool counters() const { return GetParam(); }
  // Markers recorded, however: events recorded or counter writes.
  int markers() const {
    return counters() ? backend_.written : backend_.recorded;
  }
  int waits() const {
    return static_cast<int>(counters() ? backend_.counter_waits.size()
                                       : backend_.waits.size());
  }
  ScriptedBackend backend_{GetParam()};
};

INSTANTIATE_TEST_SUITE_P(Markers, StreamOrderTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Counters" : "Events";
                         });

TEST_P(StreamOrderTest, TheMarkersFollowTheBackendsCapabilities) {
  StreamOrder order(&backend_, CrossStreamReuse::kBeforeGrowth);
  EXPECT_TRUE(order.streams());
  EXPECT_EQ(order.markers_kind(), counters() ? StreamOrder::Markers::kCounters
                                             : StreamOrder::Markers::kEvents);
  Capabilities none;
  EXPECT_EQ(StreamOrder::MarkersOf(none), StreamOrder::Markers::kNone);
}

TEST_P(StreamOrderTest, NothingIsRecordedUntilAnotherStreamAsks) {
  {
    StreamOrder order(&backend_, CrossStreamReuse::kWhenComplete);
    EXPECT_EQ(order.stamp(), 0u);
    EXPECT_FALSE(order.KnownComplete(kS1, 0));
    EXPECT_EQ(backend_.created + markers() + backend_.queried +
                  backend_.blocks_created,
              0);
  }
  EXPECT_EQ(backend_.destroyed + backend_.blocks_destroyed, 0);
}

TEST_P(StreamOrderTest, OneMarkerCoversEveryEarlierFreeOnItsStream) {
  StreamOrder order(&backend_, CrossStreamReuse::kWhenComplete);
  for (int i = 0; i < 100; ++i) NoteSmallFree(order, kS1);
  const std::uint64_t free1 = order.stamp();
  order.BeforeAllocate(kS2);  // s1 is dirty: a marker
  EXPECT_EQ(markers(), 1);
  EXPECT_EQ(order.stamp(), 1u);  // later frees need a later marker
  EXPECT_EQ(order.Prepare(kS1, free1, kS2, Ask::kWait), Verdict::kBlocked);
  EXPECT_EQ(order.Prepare(kS1, free1, kS3, Ask::kWait), Verdict::kBlocked);
  EXPECT_EQ(markers(), 1);  // the marker covers it: none recorded
  backend_.Finish(kS1);
  order.NewSearch();  // the next Allocate
  EXPECT_EQ(order.Prepare(kS1, free1, kS2, Ask::kWait), Verdict::kReady);
  EXPECT_TRUE(order.KnownComplete(kS1, free1));
  // A free after the marker is not covered by it.
  NoteSmallFree(order, kS1);
  const std::uint64_t free2 = order.stamp();
  EXPECT_FALSE(order.KnownComplete(kS1, free2));
  order.BeforeAllocate(kS2);
  EXPECT_EQ(markers(), 2);
  EXPECT_EQ(order.markers_recorded(), 2u);
  EXPECT_EQ(order.stream_waits(), 0u);
  if (counters()) {
    // Counters: one block, and nothing asked of the device.
    EXPECT_EQ(backend_.blocks_created, 1);
    EXPECT_EQ(backend_.queried, 0);
    EXPECT_EQ(backend_.created, 0);
  } else {
    // The completed event was recycled, not a new one created.
    EXPECT_EQ(backend_.created, 1);
  }
}

// A question that may not wait records a marker only as the budget allows:
// a marker recorded now covers everything queued so far, and says the work
// completed only if the stream is idle.
TEST_P(StreamOrderTest, AQuestionThatMayNotWaitRecordsNothingWithoutCredit) {
  StreamOrder order(&backend_, CrossStreamReuse::kBeforeGrowth);
  EXPECT_EQ(order.Prepare(kS1, order.stamp(), kS2, Ask::kIfCheap),
            Verdict::kBlocked);
  EXPECT_EQ(markers(), 0);
  EXPECT_EQ(waits(), 0);
  // One that may wait records the marker it waits for.
  EXPECT_EQ(order.Prepare(kS1, order.stamp(), kS2, Ask::kWait),
            Verdict::kWaited);
  EXPECT_EQ(markers(), 1);
  EXPECT_EQ(waits(), 1);
}

TEST_P(StreamOrderTest, WaitsMakeTheNewStreamWaitOnTheDevice) {
  StreamOrder order(&backend_, CrossStreamReuse::kStreamWait);
  const std::uint64_t freed = order.stamp();
  EXPECT_EQ(order.Prepare(kS1, freed, kS2, Ask::kWait), Verdict::kWaited);
  EXPECT_EQ(waits(), 1);
  EXPECT_EQ(order.stream_waits(), 1u);
  if (counters()) {
    EXPECT_EQ(backend_.counter_waits[0], std::make_pair(kS2, std::uint64_t{1}));
  } else {
    EXPECT_EQ(backend_.waits[0].first, kS2);
  }
  // s2 now waits for s1's work up to that marker: memory freed there before
  // it needs no second wait, for s2 only.
  EXPECT_TRUE(order.KnownOrdered(kS2, kS1, freed));
  EXPECT_FALSE(order.KnownOrdered(kS3, kS1, freed));
  EXPECT_EQ(order.Prepare(kS1, freed, kS2, Ask::kWait), Verdict::kWaited);
  EXPECT_EQ(waits(), 1);
  // Completed work needs no wait.
  backend_.Finish(kS1);
  order.NewSearch();
  EXPECT_EQ(order.Prepare(kS1, freed, kS3, Ask::kWait), Verdict::kReady);
  EXPECT_EQ(waits(), 1);
}

TEST_P(StreamOrderTest, WhenCompleteNeverWaits) {
  StreamOrder order(&backend_, CrossStreamReuse::kWhenComplete);
  EXPECT_EQ(order.Prepare(kS1, order.stamp(), kS2, Ask::kWait),
            Verdict::kBlocked);
  EXPECT_EQ(waits(), 0);
}

TEST_P(StreamOrderTest, ADirtyStreamGetsAMarkerWhenAnotherAllocates) {
  StreamOrder order(&backend_, CrossStreamReuse::kBeforeGrowth);
  // Enough frees to afford markers.
  for (int i = 0; i < 100; ++i) NoteSmallFree(order, kS1);
  const std::uint64_t freed = order.stamp();
  // The freeing stream allocating itself needs no marker.
  order.BeforeAllocate(kS1);
  EXPECT_EQ(markers(), 0);
  order.BeforeAllocate(kS2);
  EXPECT_EQ(markers(), 1);
  // Not dirty any more: no second marker.
  order.BeforeAllocate(kS2);
  EXPECT_EQ(markers(), 1);
  // Once its work completes, the free is known complete.
  backend_.Finish(kS1);
  order.NewSearch();
  order.BeforeAllocate(kS2);  // (events: the question, on the budget)
  EXPECT_TRUE(order.KnownComplete(kS1, freed));
  if (counters()) {
    EXPECT_EQ(backend_.queried, 0);
  }
}

// A large burst of frees gets its marker at once, without waiting for
// another stream to allocate: its memory is known complete soon after its
// work even if the freeing stream queues more work in between.
TEST_P(StreamOrderTest, ALargeBurstOfFreesGetsItsMarkerAtOnce) {
  StreamOrder order(&backend_, CrossStreamReuse::kBeforeGrowth);
  for (int i = 0; i < 100; ++i) NoteSmallFree(order, kS2);  // credit
  const std::uint64_t reserved = 800;
  order.NoteFree(kS1, 50, reserved, /*earns=*/true);
  EXPECT_EQ(markers(), 0);  // 50 < 800 / 8
  const std::uint64_t freed = order.stamp();
  order.NoteFree(kS1, 50, reserved, /*earns=*/true);
  EXPECT_EQ(markers(), 1);  // 100 >= 800 / 8
  backend_.Finish(kS1);
  order.NewSearch();
  order.BeforeAllocate(kS2);
  EXPECT_TRUE(order.KnownComplete(kS1, freed));
}

TEST_P(StreamOrderTest, MarkersAheadOfNeedStayWithinTheBudget) {
  StreamOrder order(&backend_, CrossStreamReuse::kBeforeGrowth);
  // Streams taking turns, each freeing once before the other allocates:
  // without a budget, a marker per free.
  const int frees = 1000;
  for (int i = 0; i < frees; ++i) {
    const std::uintptr_t s = i % 2 == 0 ? kS1 : kS2;
    NoteSmallFree(order, s);
    order.BeforeAllocate(s == kS1 ? kS2 : kS1);
    order.NewSearch();
  }
  const int calls = markers() + backend_.queried;
  EXPECT_LE(calls, frees * StreamOrder::kCallsPer100Frees / 100 +
                       StreamOrder::kBurstCalls);
  EXPECT_GT(calls, 0);
}

TEST_P(StreamOrderTest, QueriesStopAtTheFirstRunningEvent) {
  if (counters()) GTEST_SKIP() << "counters are read, not queried";
  StreamOrder order(&backend_, CrossStreamReuse::kWhenComplete);
  for (int i = 0; i < 100; ++i) NoteSmallFree(order, kS1);
  const std::uint64_t a = order.stamp();
  order.BeforeAllocate(kS2);  // event 1
  NoteSmallFree(order, kS1);
  const std::uint64_t b = order.stamp();
  order.BeforeAllocate(kS2);  // event 2
  ASSERT_EQ(backend_.recorded, 2);
  backend_.queried = 0;
  // Event 1 still runs: asking about event 2's free queries only event 1.
  order.NewSearch();
  EXPECT_EQ(order.Prepare(kS1, b, kS2, Ask::kWait), Verdict::kBlocked);
  EXPECT_EQ(backend_.queried, 1);
  // Within one search, what the device said is still running is not asked
  // about again.
  EXPECT_EQ(order.Prepare(kS1, a, kS3, Ask::kWait), Verdict::kBlocked);
  EXPECT_EQ(order.Prepare(kS1, b, kS2, Ask::kWait), Verdict::kBlocked);
  EXPECT_EQ(backend_.queried, 1);
}

TEST_P(StreamOrderTest, WaitForAllBlocksOncePerStream) {
  StreamOrder order(&backend_, CrossStreamReuse::kWhenComplete);
  const std::uint64_t s = order.stamp();
  GPUALLOC_ASSERT_OK(order.WaitForAll({kS1, kS2}));
  EXPECT_EQ(backend_.synchronized, 2);
  EXPECT_EQ(order.host_waits(), 2u);
  EXPECT_TRUE(order.KnownComplete(kS1, s));
  EXPECT_TRUE(order.KnownComplete(kS2, s));
  EXPECT_EQ(order.Prepare(kS1, s, kS3, Ask::kWait), Verdict::kReady);
}

TEST_P(StreamOrderTest, BackendErrorsBlockAndAreKept) {
  StreamOrder order(&backend_, CrossStreamReuse::kStreamWait);
  if (counters()) {
    backend_.fail_writes = true;
  } else {
    backend_.fail_next_create = true;
  }
  EXPECT_EQ(order.Prepare(kS1, 0, kS2, Ask::kWait), Verdict::kError);
  EXPECT_TRUE(order.has_error());
  absl::Status error = order.TakeError();
  EXPECT_TRUE(absl::IsInternal(error)) << error;
  EXPECT_TRUE(order.TakeError().ok());  // taken once
  EXPECT_FALSE(order.has_error());
  if (counters()) return;
  backend_.fail_queries = true;
  EXPECT_EQ(order.Prepare(kS1, 0, kS2, Ask::kWait), Verdict::kError);
  EXPECT_FALSE(order.TakeError().ok());
}

TEST_P(StreamOrderTest, DestroysEveryEventAndCounterBlockItCreated) {
  {
    StreamOrder order(&backend_, CrossStreamReuse::kStreamWait);
    (void)order.Prepare(kS1, 0, kS2, Ask::kWait);
    (void)order.Prepare(kS2, order.stamp(), kS1, Ask::kWait);
    GPUALLOC_ASSERT_OK(order.WaitForAll({kS3}));  // an event either way
    EXPECT_GE(order.events_created(), 1u);
  }
  EXPECT_EQ(backend_.destroyed, backend_.created);
  EXPECT_EQ(backend_.blocks_destroyed, backend_.blocks_created);
}

// Released streams: a stamp on the old handle is answered by the last
// marker recorded at the release, never by recording on the handle again;
// once that marker completes the key is forgotten (complete); keys nobody
// asks about are dropped at later releases, so a stream per request stays
// bounded; and with counters the released stream's counter serves another
// stream once its last write landed.
TEST_P(StreamOrderTest, ReleasedStreamsAreAnsweredByTheirLastMarker) {
  StreamOrder order(&backend_, CrossStreamReuse::kWhenComplete);
  const std::uint64_t freed = order.stamp();
  const std::uintptr_t key = StreamOrder::kReleasedBit | 1;
  GPUALLOC_ASSERT_OK(order.ReleaseStream(kS1, key));
  EXPECT_EQ(markers(), 1);
  EXPECT_FALSE(order.KnownComplete(key, freed));
  order.NewSearch();
  EXPECT_EQ(order.Prepare(key, freed, kS2, Ask::kWait), Verdict::kBlocked);
  EXPECT_EQ(markers(), 1);  // nothing recorded on the old stream
  backend_.Finish(kS1);
  order.NewSearch();
  EXPECT_EQ(order.Prepare(key, freed, kS2, Ask::kWait), Verdict::kReady);
  EXPECT_TRUE(order.KnownComplete(key, freed + 100));  // forgotten: done
  EXPECT_EQ(order.released_streams_kept(), 0u);

  // A hundred streams released with work still queued, then all done: the
  // next release drops them all.
  for (std::uintptr_t s = 0x1000; s < 0x1000 + 100; ++s) {
    NoteSmallFree(order, s);
    GPUALLOC_ASSERT_OK(order.ReleaseStream(s, StreamOrder::kReleasedBit | s));
  }
  EXPECT_EQ(order.released_streams_kept(), 100u);
  for (std::uintptr_t s = 0x1000; s < 0x1000 + 100; ++s) backend_.Finish(s);
  GPUALLOC_ASSERT_OK(order.ReleaseStream(kS3, StreamOrder::kReleasedBit | 2));
  EXPECT_LE(order.released_streams_kept(), 1u);
  if (counters()) {
    // Counters came back for reuse: two blocks of 64 served 102 streams.
    EXPECT_LE(backend_.blocks_created, 2);
  }
}

// Streams that free once and go quiet (a stream per request, never
// released): past kMaxDirtyStreams the oldest get their marker without
// credit, so that what they freed becomes known complete and the number of
// streams whose frees nobody can vouch for stays bounded.
TEST_P(StreamOrderTest, QuietStreamsBeyondTheCapGetMarkersWithoutCredit) {
  StreamOrder order(&backend_, CrossStreamReuse::kWhenComplete);
  const std::size_t cap = StreamOrder::kMaxDirtyStreams;
  for (std::uintptr_t s = 0x1000; s < 0x1000 + cap + 36; ++s) {
    order.NoteFree(s, 256, std::uint64_t{1} << 30, /*earns=*/false);
  }
  order.BeforeAllocate(kS1);
  EXPECT_EQ(markers(), 36);  // the oldest 36; no credit was earned
  order.BeforeAllocate(kS1);
  EXPECT_EQ(markers(), 36);  // at the cap: nothing more without credit
  for (std::uintptr_t s = 0x1000; s < 0x1000 + 36; ++s) backend_.Finish(s);
  if (counters()) {
    EXPECT_TRUE(order.KnownComplete(0x1000, 0));
    EXPECT_FALSE(order.KnownComplete(0x1000 + 36, 0));
  }
}

// A counter that served a released stream holds that stream's last number,
// above the stamps of frees the next stream makes before its first marker
// lands: that stale value says nothing about the new stream's work.
TEST_P(StreamOrderTest, ARecycledCounterSaysNothingBeforeItsNewStreamWrites) {
  StreamOrder order(&backend_, CrossStreamReuse::kWhenComplete);
  // Stream 1 gets a counter, records markers 1-3, is released (marker 4)
  // and forgotten once done: its counter (or event) is free again, holding
  // 4.
  for (int i = 0; i < 3; ++i) {
    NoteSmallFree(order, kS1);
    order.NewSearch();
    EXPECT_EQ(order.Prepare(kS1, order.stamp(), kS2, Ask::kQuery),
              Verdict::kBlocked);
  }
  GPUALLOC_ASSERT_OK(order.ReleaseStream(kS1, StreamOrder::kReleasedBit | 1));
  backend_.Finish(kS1);
  GPUALLOC_ASSERT_OK(order.ReleaseStream(kS3, StreamOrder::kReleasedBit | 3));
  EXPECT_EQ(order.released_streams_kept(), 1u);  // stream 3's only
  // Stream 2 frees at stamp 0 (work queued, not done), then gets the spare
  // counter with its first marker.
  const std::uint64_t early = 0;
  NoteSmallFree(order, kS2);
  order.NewSearch();
  EXPECT_EQ(order.Prepare(kS2, early, kS1, Ask::kQuery), Verdict::kBlocked);
  EXPECT_FALSE(order.KnownComplete(kS2, early));
  backend_.Finish(kS2);
  order.NewSearch();
  EXPECT_EQ(order.Prepare(kS2, early, kS1, Ask::kQuery), Verdict::kReady);
  EXPECT_TRUE(order.KnownComplete(kS2, early));
}

}  // namespace
}  // namespace gpualloc::core
