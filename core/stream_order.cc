// SPDX-License-Identifier: Apache-2.0
// core/stream_order.cc: lazily recorded events behind stream-ordered frees.
#include "core/stream_order.h"

#include <algorithm>
#include <utility>

namespace gpualloc::core {

StreamOrder::~StreamOrder() {
  // CUDA and HIP allow destroying an event whose work is still pending: the
  // driver releases it once the work completes.
  for (EventHandle event : all_events_) (void)backend_.DestroyEvent(event);
}

void StreamOrder::Fail(const absl::Status& status) {
  if (error_.ok()) error_ = status;
}

absl::Status StreamOrder::TakeError() { return std::exchange(error_, {}); }

bool StreamOrder::KnownComplete(std::uintptr_t stream,
                                std::uint64_t stamp) const {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return IsReleasedKey(stream);  // forgotten: done
  const StreamState& state = it->second;
  if (state.last_event != 0) stamp = std::min(stamp, state.last_event - 1);
  return state.completed > stamp;
}

std::size_t StreamOrder::released_streams_kept() const {
  std::size_t n = 0;
  for (const auto& [stream, state] : streams_) n += state.last_event != 0;
  return n;
}

absl::Status StreamOrder::ReleaseStream(std::uintptr_t stream,
                                        std::uintptr_t key) {
  StreamState state;
  auto it = streams_.find(stream);
  if (it != streams_.end()) state = it->second;
  const Recorded* last = RecordOn(stream, state);
  if (last == nullptr) return TakeError();
  state.last_event = last->number;
  streams_.erase(stream);
  streams_[key] = std::move(state);
  // Forget what is done already (a query each, no wait): this one, and the
  // streams released before whose memory nobody asked about since, so that
  // a runtime making and destroying a stream per request keeps a bounded
  // set of them.
  NewSearch();
  for (auto it2 = streams_.begin(); it2 != streams_.end();) {
    StreamState& s = it2->second;
    if (s.last_event != 0) {
      const bool done = RetireReleased(it2->first, s);
      if (!error_.ok()) (void)TakeError();  // asked again later
      if (done) {
        streams_.erase(it2++);
        continue;
      }
    }
    ++it2;
  }
  return absl::OkStatus();
}

EventHandle StreamOrder::TakeEvent() {
  if (!spare_events_.empty()) {
    const EventHandle event = spare_events_.back();
    spare_events_.pop_back();
    return event;
  }
  absl::StatusOr<EventHandle> created = backend_.CreateEvent();
  if (!created.ok()) {
    Fail(created.status());
    return 0;
  }
  all_events_.push_back(*created);
  return *created;
}

const StreamOrder::Recorded* StreamOrder::RecordOn(std::uintptr_t stream,
                                                   StreamState& state) {
  const EventHandle event = TakeEvent();
  if (event == 0) return nullptr;
  absl::Status recorded = backend_.RecordEvent(event, Stream(stream));
  if (!recorded.ok()) {
    spare_events_.push_back(event);
    Fail(recorded);
    return nullptr;
  }
  state.pending.push_back(Recorded{++events_recorded_, event});
  state.freed_since_event = 0;
  credit_ -= kFreesPerEvent;
  return &state.pending.back();
}

void StreamOrder::RecordEager(std::uintptr_t stream, StreamState& state) {
  if (!state.pending.empty()) {
    Retire(stream, state, state.pending.back().number, /*fresh=*/true);
  }
  RecordOn(stream, state);
}

void StreamOrder::Retire(std::uintptr_t stream, StreamState& state,
                         std::uint64_t up_to, bool fresh) {
  while (!state.pending.empty() && state.pending.front().number <= up_to) {
    if (!fresh && SeenInThisSearch(state)) return;  // asked already
    const Recorded front = state.pending.front();
    absl::StatusOr<bool> done = backend_.QueryEvent(front.event);
    if (!done.ok()) {
      Fail(done.status());
      return;
    }
    // A stream's events complete in order: the first one still running
    // means every later one is running too.
    if (!*done) {
      // (A fresh question is no search's: the next search asks again.)
      if (!fresh) MarkSeen(state);
      return;
    }
    state.completed = front.number;
    spare_events_.push_back(front.event);
    state.pending.pop_front();
    NoteAdvanced(stream);
  }
}

ReuseOracle::Verdict StreamOrder::Query(std::uintptr_t from,
                                        std::uint64_t stamp,
                                        EventHandle* fence) {
  if (IsReleasedKey(from)) {
    auto it = streams_.find(from);
    if (it == streams_.end()) return Verdict::kReady;  // forgotten: done
    StreamState& state = it->second;
    // Its last event covers everything ever queued on it.
    const bool done = RetireReleased(from, state);
    if (!error_.ok()) return Verdict::kError;
    if (done) {
      streams_.erase(it);
      return Verdict::kReady;
    }
    *fence = state.pending.back().event;
    return Verdict::kBlocked;
  }
  StreamState& state = streams_[from];
  if (state.completed > stamp) return Verdict::kReady;
  // The oldest event recorded after the free captures the freeing work; when
  // there is none yet, record one now.
  Recorded captures;
  bool found = false;
  for (const Recorded& r : state.pending) {
    if (r.number > stamp) {
      captures = r;
      found = true;
      break;
    }
  }
  if (!found) {
    const Recorded* r = RecordOn(from, state);
    if (r == nullptr) return Verdict::kError;
    captures = *r;
  }
  Retire(from, state, captures.number);
  if (!error_.ok()) return Verdict::kError;
  if (state.completed > stamp) return Verdict::kReady;
  *fence = captures.event;
  return Verdict::kBlocked;
}

bool StreamOrder::Poll(std::uintptr_t stream, std::uint64_t stamp) {
  EventHandle fence = 0;
  return Query(stream, stamp, &fence) != Verdict::kError;
}

ReuseOracle::Verdict StreamOrder::Prepare(std::uintptr_t from,
                                          std::uint64_t stamp,
                                          std::uintptr_t to, bool may_wait) {
  EventHandle fence = 0;
  const Verdict verdict = Query(from, stamp, &fence);
  if (verdict != Verdict::kBlocked) return verdict;
  if (!may_wait || policy_ != CrossStreamReuse::kStreamWait) {
    return Verdict::kBlocked;
  }
  absl::Status waited = backend_.StreamWaitEvent(Stream(to), fence);
  if (!waited.ok()) {
    Fail(waited);
    return Verdict::kError;
  }
  ++stream_waits_;
  return Verdict::kWaited;
}

absl::Status StreamOrder::WaitForAll(
    const std::vector<std::uintptr_t>& streams) {
  for (std::uintptr_t stream : streams) {
    if (IsReleasedKey(stream)) {
      // Never recorded on again: its last event is waited for.
      auto it = streams_.find(stream);
      if (it == streams_.end()) continue;
      absl::Status synced =
          backend_.SynchronizeEvent(it->second.pending.back().event);
      if (!synced.ok()) return synced;
      ++host_waits_;
      for (const Recorded& done : it->second.pending) {
        spare_events_.push_back(done.event);
      }
      streams_.erase(it);
      NoteAdvanced(stream);
      continue;
    }
    StreamState& state = streams_[stream];
    const Recorded* r = RecordOn(stream, state);
    if (r == nullptr) return TakeError();
    const Recorded fence = *r;
    absl::Status synced = backend_.SynchronizeEvent(fence.event);
    if (!synced.ok()) return synced;
    ++host_waits_;
    state.completed = fence.number;
    for (const Recorded& done : state.pending) {
      spare_events_.push_back(done.event);
    }
    state.pending.clear();
    NoteAdvanced(stream);
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core
