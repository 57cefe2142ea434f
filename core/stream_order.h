// SPDX-License-Identifier: Apache-2.0
// core/stream_order.h: the events behind stream-ordered frees.
//
// The BFC facade stamps every free with stamp() (core/fences.h) and hands the
// core this object as its ReuseOracle. One event on stream S covers every free
// on S before it. Events are recorded when a chunk freed on S is wanted on
// another stream and none covers its free yet, and, once several streams are
// in use, eagerly on a budget (NoteFree), so that frees are known complete
// soon after their work is. A workload on one stream never reaches this code,
// so it records no event at all. Every stream learned complete further is
// noted (TakeAdvanced), so that the core merges what that freed.
//
// Per stream S the object keeps the events recorded on S that are not yet
// known complete (oldest first; a stream's events complete in order) and the
// number of the newest event known complete. A condition (S, q) holds once an
// event numbered above q has completed.
//
// Errors from the backend's event calls are kept and Prepare answers kError:
// the allocator stops and reports the error (TakeError), never handing out
// memory that may still be in use and never hiding a failing driver.
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_STREAM_ORDER_H_
#define GPUALLOC_CORE_STREAM_ORDER_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "core/fences.h"
#include "core/layer.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

class StreamOrder final : public ReuseOracle {
 public:
  StreamOrder(Backend* backend, CrossStreamReuse policy)
      : backend_(*backend), policy_(policy) {}
  ~StreamOrder() override;

  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  // The stamp for a free happening now.
  std::uint64_t stamp() const { return events_recorded_; }

  // Searches: within one, an event the device said was still running is not
  // asked about again (one search can look at many chunks freed on one
  // stream; the answer would hardly change in between but each question is a
  // driver call). A search ends when the counter BindSearches names changes
  // (the core's allocation count: every successful Allocate ends one, at no
  // cost to the fast path) or at NewSearch (a failed Allocate, a released
  // stream).
  void BindSearches(const std::uint64_t* counter) { search_counter_ = counter; }
  void NewSearch() { ++searches_; }

  bool KnownComplete(std::uintptr_t stream, std::uint64_t stamp) const override;
  Verdict Prepare(std::uintptr_t from, std::uint64_t stamp, std::uintptr_t to,
                  bool may_wait) override;
  // Asks the device whether the work queued on `stream` before the free
  // stamped `stamp` has completed (recording an event only when none
  // recorded since covers it), without waiting. False on error (kept, as
  // for Prepare).
  bool Poll(std::uintptr_t stream, std::uint64_t stamp);

  // A stream is going away: records one last event on it (the only call on
  // `stream` this makes, and the last one ever) and keeps the stream's
  // events under `key`, a stream that is never recorded on, so conditions
  // renamed to `key` (BfcCore::RenameStream) are answered by them: a stamp
  // after the last event means the last event. Once they are all seen
  // complete `key` is forgotten, and conditions naming a forgotten key are
  // complete. Nothing changes on error (returned, not kept).
  // REQUIRES: IsReleasedKey(key), and no state is kept under it yet.
  absl::Status ReleaseStream(std::uintptr_t stream, std::uintptr_t key);
  // Keys stand for released streams: no stream handle has the top bit set
  // (it would be a kernel address; the simulator's handles are small).
  static constexpr std::uintptr_t kReleasedBit = ~(~std::uintptr_t{0} >> 1);
  static bool IsReleasedKey(std::uintptr_t stream) {
    return (stream & kReleasedBit) != 0;
  }
  // Whether any event was recorded on `stream` or its conditions queried.
  bool Knows(std::uintptr_t stream) const { return streams_.contains(stream); }
  std::size_t released_streams_kept() const;

  // A free of `bytes` on `stream` while several streams are in use, with
  // `reserved` bytes reserved; `earns`: the free earns budget (a handed-over
  // block counts on its other streams too, but earns once). The stream gets
  // an event now (and its earlier events are asked about, no wait) when the
  // bytes freed there since its last event reach a threshold (below) and
  // the event budget allows: memory freed there is then known complete soon
  // after its work is, not only after the work queued when another stream
  // first wants it (an event recorded only then covers everything queued up
  // to then). The budget: every free earns 1 / kFreesPerEvent of an event,
  // and every event recorded (here or when a search asks) spends one, so
  // events stay below 1 per kFreesPerEvent frees plus a burst of
  // kBurstEvents. Errors are kept, as for Prepare.
  void NoteFree(std::uintptr_t stream, std::uint64_t bytes,
                std::uint64_t reserved, bool earns) {
    if (earns && credit_ < kBurstEvents * kFreesPerEvent) ++credit_;
    StreamState& state = streams_[stream];
    state.freed_since_event += bytes;
    if (credit_ < kFreesPerEvent) return;
    // The threshold: a quarter of what is reserved when the budget has
    // room for one event, halving with each further event it has room for,
    // down to 1/2^kMaxShift of it: with a full budget, smaller frees get
    // events too; with a thin one, only the frees that matter most.
    const std::int64_t shift =
        1 + std::min<std::int64_t>(credit_ / kFreesPerEvent, kMaxShift - 1);
    if (state.freed_since_event >= (reserved >> shift)) {
      RecordEager(stream, state);
    }
  }
  static constexpr std::int64_t kFreesPerEvent = 20;
  static constexpr std::int64_t kMaxShift = 7;
  static constexpr std::int64_t kBurstEvents = 16;

  // Streams whose work was learned complete further (an event query or a
  // host wait) since the last TakeAdvanced, each once: the core settles the
  // memory freed there (BfcCore::ResolveCompleted).
  bool has_advanced() const { return !advanced_.empty(); }
  std::vector<std::uintptr_t> TakeAdvanced() {
    return std::exchange(advanced_, {});
  }
  // Host-waits until the work queued so far on each of `streams` has
  // completed (the out-of-memory path): one event recorded and waited for
  // per stream.
  absl::Status WaitForAll(const std::vector<std::uintptr_t>& streams);

  // The first backend error met since the last call, then cleared.
  absl::Status TakeError();
  bool has_error() const { return !error_.ok(); }

  std::uint64_t events_recorded() const { return events_recorded_; }
  std::uint64_t stream_waits() const { return stream_waits_; }
  std::uint64_t host_waits() const { return host_waits_; }
  std::uint64_t events_created() const { return all_events_.size(); }

 private:
  struct Recorded {
    std::uint64_t number = 0;  // > the stamps of the frees it covers
    EventHandle event = 0;
  };
  struct StreamState {
    std::deque<Recorded> pending;  // oldest first
    std::uint64_t completed = 0;   // number of the newest completed event
    // The search during which the oldest pending event was seen running
    // (SeenInThisSearch), or none.
    std::uint64_t seen_running_count = UINT64_MAX;
    std::uint64_t seen_running_search = 0;
    // A released stream's key: the number of its last event (no work was
    // queued on it after that), else 0.
    std::uint64_t last_event = 0;
    // Bytes freed on the stream since its last event (NoteFree).
    std::uint64_t freed_since_event = 0;
  };
  // NoteFree's event: asks about the stream's events so far, then records.
  void RecordEager(std::uintptr_t stream, StreamState& state);
  void NoteAdvanced(std::uintptr_t stream) {
    if (std::find(advanced_.begin(), advanced_.end(), stream) ==
        advanced_.end()) {
      advanced_.push_back(stream);
    }
  }

  // An event ready to record: a recycled one or a new one; 0 on error.
  EventHandle TakeEvent();
  // Records a new event on `stream`; nullptr on error.
  const Recorded* RecordOn(std::uintptr_t stream, StreamState& state);
  // Whether the work before `stamp` on `from` has completed, asking the
  // device: kReady, kBlocked (with *fence: the event that captures it) or
  // kError.
  Verdict Query(std::uintptr_t from, std::uint64_t stamp, EventHandle* fence);
  // Drops the completed events at the front of `stream`'s queue (asking
  // the device about at most `up_to` and everything before it). With
  // `fresh`, asks even if this search saw the stream's work running.
  void Retire(std::uintptr_t stream, StreamState& state, std::uint64_t up_to,
              bool fresh = false);
  // A released stream's state: whether every event it kept has completed
  // (asking the device about them, no wait), so that its key is forgotten.
  bool RetireReleased(std::uintptr_t key, StreamState& state) {
    Retire(key, state, state.last_event);
    if (state.pending.empty()) NoteAdvanced(key);  // forgotten: complete
    return state.pending.empty();
  }
  void Fail(const absl::Status& status);

  Backend& backend_;
  const CrossStreamReuse policy_;
  absl::flat_hash_map<std::uintptr_t, StreamState> streams_;
  std::vector<EventHandle> spare_events_;
  std::vector<EventHandle> all_events_;
  std::uint64_t events_recorded_ = 0;
  const std::uint64_t* search_counter_ = nullptr;
  std::uint64_t searches_ = 0;
  bool SeenInThisSearch(const StreamState& state) const {
    return state.seen_running_search == searches_ &&
           state.seen_running_count ==
               (search_counter_ != nullptr ? *search_counter_ : 0);
  }
  void MarkSeen(StreamState& state) const {
    state.seen_running_search = searches_;
    state.seen_running_count =
        search_counter_ != nullptr ? *search_counter_ : 0;
  }
  std::vector<std::uintptr_t> advanced_;
  // NoteFree's budget, in frees (an event costs kFreesPerEvent).
  std::int64_t credit_ = 0;
  std::uint64_t stream_waits_ = 0;
  std::uint64_t host_waits_ = 0;
  absl::Status error_;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_STREAM_ORDER_H_
