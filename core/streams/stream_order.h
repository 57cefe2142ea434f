// SPDX-License-Identifier: Apache-2.0
// core/streams/stream_order.h: the device's answer to "may another stream use
// this free memory": markers recorded on streams, what is known of their
// completion, stream waits and host waits.
//
// Markers. A marker is a point recorded in a stream's work: a write of the
// marker's number into the stream's completion counter, a 64-bit word of
// host memory the device writes once the stream's earlier work completed
// (Backend::WriteCounter, where the backend has completion counters), or
// else an event (RecordEvent). Markers are numbered in the order they are
// recorded, across streams; a free is stamped with the number recorded so
// far (stamp()), so a marker on S numbered above a free's stamp covers that
// free (core/streams/condition.h). Per stream the order keeps the markers
// not yet known complete (oldest first: a stream's markers complete in
// order) and the number of the newest known complete.
//
// What is known. With counters, a plain load of the stream's counter says
// which of its markers completed: no call. With events, completion is asked
// (QueryEvent): the oldest pending marker of each other stream before an
// allocation, on the budget below, and whenever memory is wanted (Prepare);
// within one search (NewSearch, called by the facade before each
// allocation's search) a marker seen running is not asked about again.
//
// When markers are recorded. Once several streams are in use, a stream that
// freed memory since its last marker is dirty; when another stream then
// allocates (BeforeAllocate), each dirty stream gets a marker, on the
// budget: the marker lands right after the burst of frees, so that memory is
// known complete soon after its work is, rather than only after the work
// queued by the time another stream wants it. A marker is also recorded
// when memory is wanted and none covers its free yet (Prepare).
//
// The budget. Calls that exist to learn completion (marker records and
// event queries) are paid from a credit that every free earns
// (kCallsPer100Frees calls per 100 frees, plus a burst of kBurstCalls).
// Markers and queries made because memory is wanted now are made even
// without credit (they are counted against it), so the budget bounds what is
// done ahead of need.
//
// Waits. Prepare may make the wanting stream wait on the device for the
// marker that covers the free (WaitCounter, or StreamWaitEvent), when the
// caller allows it and the policy is not when_complete; from then on the
// order knows that stream is ordered after the other's work up to that
// marker (KnownOrdered), so memory freed there before it needs no second
// wait. The host waits (WaitForAll: an event recorded and synchronized) only
// out of memory, and for Trim.
//
// Released streams (ReleaseStream) keep their markers, and their counter,
// under a key with the top bit set, never recorded on again, until all are
// seen complete; the counter then serves another stream.
//
// Errors from the backend's calls are kept and Prepare answers kError: the
// allocator stops and reports the error (TakeError), never handing out
// memory that may still be in use and never hiding a failing driver.
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_STREAMS_STREAM_ORDER_H_
#define GPUALLOC_CORE_STREAMS_STREAM_ORDER_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "core/layer.h"
#include "core/streams/oracle.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

class StreamOrder final : public ReuseOracle {
 public:
  // How markers are recorded and known complete.
  enum class Markers : std::uint8_t {
    kNone,      // the backend has no streams: every stream is one
    kEvents,    // RecordEvent, QueryEvent, StreamWaitEvent
    kCounters,  // WriteCounter, a load, WaitCounter
  };
  // The one place that decides whether the backend has streams (and how
  // markers work): from its capabilities.
  static Markers MarkersOf(const Capabilities& caps) {
    if (!caps.streams) return Markers::kNone;
    return caps.completion_counters ? Markers::kCounters : Markers::kEvents;
  }

  StreamOrder(Backend* backend, CrossStreamReuse policy)
      : backend_(*backend),
        policy_(policy),
        markers_kind_(MarkersOf(backend->info().capabilities)) {}
  ~StreamOrder() override;

  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  // Whether the backend has streams.
  bool streams() const { return markers_kind_ != Markers::kNone; }
  Markers markers_kind() const { return markers_kind_; }
  CrossStreamReuse policy() const { return policy_; }
  // Whether a stream may wait for free memory now rather than grow:
  // best_fit always; before_growth within its budget of waits (see
  // kWaitsPer100Frees).
  bool MayWaitBeforeGrowth() const {
    return policy_ == CrossStreamReuse::kBestFit ||
           (policy_ == CrossStreamReuse::kBeforeGrowth &&
            wait_credit_ >= kCreditPerCall);
  }

  // The stamp for a free happening now.
  std::uint64_t stamp() const { return markers_; }

  // A new search: the facade calls it before each allocation's search, so
  // that an event the device said was running is asked about again.
  void NewSearch() { ++search_; }

  // ReuseOracle.
  bool KnownComplete(std::uintptr_t stream, std::uint64_t stamp) const override;
  bool KnownOrdered(std::uintptr_t to, std::uintptr_t from,
                    std::uint64_t stamp) const override;
  Verdict Prepare(std::uintptr_t from, std::uint64_t stamp, std::uintptr_t to,
                  Ask ask) override;

  // Asks whether the work queued on `stream` before the free stamped `stamp`
  // has completed (recording a marker when none covers it: on an idle
  // stream it completes at once), without waiting. False on error (kept).
  bool Poll(std::uintptr_t stream, std::uint64_t stamp);

  // A free of `bytes` on `stream` while several streams are in use, with
  // `reserved` bytes reserved: the stream is dirty until its next marker,
  // and gets one at once when what it freed since its last reaches
  // 1/kBurstFraction of what is reserved (a large burst of frees is known
  // complete soon after its work even if no other stream allocates for a
  // while). `earns`: the free earns credit (a block handed over is noted on
  // its other streams too, earning once).
  void NoteFree(std::uintptr_t stream, std::uint64_t bytes,
                std::uint64_t reserved, bool earns) {
    if (earns && credit_ < kBurstCalls * kCreditPerCall) {
      credit_ += kCreditPerFree;
    }
    if (earns && wait_credit_ < kWaitBurst * kCreditPerCall) {
      wait_credit_ += kWaitsPer100Frees;
    }
    StreamState& state = State(stream);
    state.dirty = true;
    state.freed_since_marker += bytes;
    if (!state.in_dirty_list) {
      state.in_dirty_list = true;
      dirty_.push_back(stream);
    }
    if (state.freed_since_marker >= reserved / kBurstFraction && Afford()) {
      MarkBurst(stream, state);
    }
  }
  static constexpr std::uint64_t kBurstFraction = 8;
  // An allocation on `stream` is about to search: markers on the other
  // dirty streams, and (with events) questions about pending markers, as
  // credit allows.
  void BeforeAllocate(std::uintptr_t stream) {
    if (ABSL_PREDICT_TRUE(
            dirty_.empty() &&
            (markers_kind_ != Markers::kEvents || with_pending_.empty()))) {
      return;
    }
    BeforeAllocateSlow(stream);
  }

  // A stream is going away: records one last marker on it (the only call on
  // `stream` this makes, and the last one ever) and keeps the stream's
  // markers under `key`, a stream that is never recorded on, so conditions
  // renamed to `key` are answered by them: a stamp after the last marker
  // means the last marker. Once they are all seen complete `key` is
  // forgotten, and conditions naming a forgotten key are complete. Nothing
  // changes on error (returned, not kept).
  // REQUIRES: IsReleasedKey(key), and no state is kept under it yet.
  absl::Status ReleaseStream(std::uintptr_t stream, std::uintptr_t key);
  // Keys stand for released streams: no stream handle has the top bit set
  // (it would be a kernel address; the simulator's handles are small).
  static constexpr std::uintptr_t kReleasedBit = ~(~std::uintptr_t{0} >> 1);
  static bool IsReleasedKey(std::uintptr_t stream) {
    return (stream & kReleasedBit) != 0;
  }
  // Whether a marker was recorded on `stream` or its conditions asked about.
  bool Knows(std::uintptr_t stream) const { return states_.contains(stream); }
  std::size_t released_streams_kept() const;

  // Host-waits until the work queued so far on each of `streams` has
  // completed (out of memory, Trim): a marker and an event per stream.
  absl::Status WaitForAll(const std::vector<std::uintptr_t>& streams);

  // The first backend error met since the last call, then cleared.
  absl::Status TakeError();
  bool has_error() const { return !error_.ok(); }

  std::uint64_t markers_recorded() const { return markers_; }
  std::uint64_t queries() const { return queries_; }
  std::uint64_t stream_waits() const { return stream_waits_; }
  std::uint64_t host_waits() const { return host_waits_; }
  std::uint64_t events_created() const { return all_events_.size(); }
  std::size_t counters_created() const {
    return blocks_.size() * kCountersPerBlock;
  }

  // The budget: calls to learn completion ahead of need per 100 frees, and
  // the burst a quiet period saves up.
  static constexpr std::int64_t kCallsPer100Frees = 20;
  static constexpr std::int64_t kBurstCalls = 32;
  // Dirty streams waiting for a marker beyond which the oldest get one
  // without credit (BeforeAllocate).
  static constexpr std::size_t kMaxDirtyStreams = 64;
  // before_growth's budget of waits instead of growth: per 100 frees, and
  // the burst a quiet period saves up. Measured on the generated
  // multi-stream traces (docs/MEASUREMENTS.md): without it the default
  // waited up to 7 times per 100 frees and its layout, tight after pass 1,
  // grew again in later passes when the device's progress differed; at 3
  // it waits less than the driver's pool and grows in pass 1 instead.
  static constexpr std::int64_t kWaitsPer100Frees = 3;
  static constexpr std::int64_t kWaitBurst = 32;
  // Counters per block (Backend::CreateCounters): one per stream in use.
  static constexpr std::size_t kCountersPerBlock = 64;

 private:
  // Credit in units: a free earns kCreditPerFree, a call costs
  // kCreditPerCall.
  static constexpr std::int64_t kCreditPerFree = kCallsPer100Frees;
  static constexpr std::int64_t kCreditPerCall = 100;
  static constexpr std::uint32_t kNoCounter = UINT32_MAX;

  struct Marker {
    std::uint64_t number = 0;  // > the stamps of the frees it covers
    // With events; with counters, an event recorded beside the write where
    // the host may wait for it (ReleaseStream, WaitForAll), else 0.
    EventHandle event = 0;
  };
  struct StreamState {
    std::deque<Marker> pending;   // recorded, not known complete; oldest first
    std::uint64_t completed = 0;  // number of the newest known complete
    // Events: the search during which the oldest pending marker was seen
    // running.
    std::uint64_t seen_running = 0;
    // A released stream's key: the number of its last marker, else 0.
    std::uint64_t last_marker = 0;
    // Counters: the stream's counter (a slot), or kNoCounter.
    std::uint32_t counter = kNoCounter;
    std::uint64_t counter_base = 0;  // what the counter held when assigned
    // Bytes freed since the last marker (NoteFree).
    std::uint64_t freed_since_marker = 0;
    // Freed memory since the last marker (NoteFree), and listed in dirty_.
    bool dirty = false;
    bool in_dirty_list = false;
    // In with_pending_ (events).
    bool listed = false;
  };

  StreamState& State(std::uintptr_t stream) { return states_[stream]; }
  // states_.find through a small cache: the conditions of free memory name
  // a few streams, asked about again and again (node_hash_map: the states
  // stay where they are until erased, and EraseState empties the cache).
  const StreamState* Find(std::uintptr_t stream) const {
    CacheEntry& e = cache_[(stream * 0x9E3779B97F4A7C15u) >> 61];
    if (e.state != nullptr && e.stream == stream) return e.state;
    auto it = states_.find(stream);
    if (it == states_.end()) return nullptr;
    e = CacheEntry{stream, &it->second};
    return e.state;
  }
  void EraseState(std::uintptr_t stream) {
    states_.erase(stream);
    cache_ = {};
  }
  ABSL_ATTRIBUTE_NOINLINE void BeforeAllocateSlow(std::uintptr_t stream);
  // NoteFree's marker after a large burst (an error is a missed hint).
  ABSL_ATTRIBUTE_NOINLINE void MarkBurst(std::uintptr_t stream,
                                         StreamState& state);
  bool Afford() const { return credit_ >= kCreditPerCall; }
  void Spend() { credit_ -= kCreditPerCall; }
  // The number of the newest marker of `state` known complete: with
  // counters, what its counter holds now.
  std::uint64_t Completed(const StreamState& state) const {
    if (state.counter == kNoCounter) return state.completed;
    // A recycled counter holds its earlier stream's last number until this
    // stream's first write lands: only a larger value is this stream's.
    const std::uint64_t value =
        __atomic_load_n(CounterWord(state.counter), __ATOMIC_ACQUIRE);
    return value > state.counter_base ? std::max(state.completed, value)
                                      : state.completed;
  }
  const std::uint64_t* CounterWord(std::uint32_t slot) const {
    return blocks_[slot / kCountersPerBlock].values + slot % kCountersPerBlock;
  }
  // A free counter for a stream (a new block when none is left); false on
  // error (kept).
  bool AssignCounter(StreamState& state);
  void FreeCounter(StreamState& state);
  // An event ready to record: a recycled one or a new one; 0 on error.
  EventHandle TakeEvent();
  // Records a new marker on `stream`; with counters and `with_event`, an
  // event too (what the host can wait for). nullptr on error (kept).
  const Marker* RecordOn(std::uintptr_t stream, StreamState& state,
                         bool with_event = false);
  // Drops `state`'s pending markers known complete (with events, asking the
  // device about those up to number `up_to`, oldest first, stopping at the
  // first still running; with `fresh`, even if this search saw it running).
  void Retire(StreamState& state, std::uint64_t up_to, bool fresh = false);
  // Whether the work before `stamp` on `from` has completed, asking the
  // device: kReady, kBlocked (with *cover: the marker that covers it, which
  // is recorded when none does, if `record` or the budget allows; else
  // cover->number 0) or kError.
  Verdict Query(std::uintptr_t from, std::uint64_t stamp, Marker* cover,
                bool record);
  // A released stream's state: whether every marker it kept has completed
  // (asking the device, no wait), so that its key is forgotten.
  bool RetireReleased(StreamState& state) {
    Retire(state, state.last_marker);
    return state.pending.empty();
  }
  // Forgets released key `key` (its markers all completed).
  void Forget(std::uintptr_t key);
  void Fail(const absl::Status& status) {
    if (error_.ok()) error_ = status;
  }

  Backend& backend_;
  const CrossStreamReuse policy_;
  const Markers markers_kind_;
  absl::node_hash_map<std::uintptr_t, StreamState> states_;
  struct CacheEntry {
    std::uintptr_t stream = 0;
    const StreamState* state = nullptr;
  };
  mutable std::array<CacheEntry, 8> cache_{};
  // (to, from) -> the number of the newest marker on `from` that `to` was
  // made to wait for.
  absl::flat_hash_map<std::pair<std::uintptr_t, std::uintptr_t>, std::uint64_t>
      waited_;
  std::deque<std::uintptr_t> dirty_;  // oldest first
  // Events: the streams with markers not known complete (and some whose
  // markers completed since: dropped at the next look).
  std::vector<std::uintptr_t> with_pending_;
  std::vector<EventHandle> spare_events_;
  std::vector<EventHandle> all_events_;
  std::vector<CounterBlock> blocks_;
  std::vector<std::uint32_t> free_counters_;
  std::uint64_t markers_ = 0;
  std::uint64_t search_ = 1;
  std::int64_t credit_ = 0;
  std::int64_t wait_credit_ = 0;
  std::uint64_t queries_ = 0;
  std::uint64_t stream_waits_ = 0;
  std::uint64_t host_waits_ = 0;
  absl::Status error_;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_STREAMS_STREAM_ORDER_H_
