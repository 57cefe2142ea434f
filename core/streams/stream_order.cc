// SPDX-License-Identifier: Apache-2.0
// core/streams/stream_order.cc: markers on streams, what is known of their
// completion, and waits (core/streams/stream_order.h).
#include "core/streams/stream_order.h"

#include <algorithm>
#include <utility>

namespace gpualloc::core {

StreamOrder::~StreamOrder() {
  // CUDA and HIP allow destroying an event whose work is still pending: the
  // driver releases it once the work completes.
  for (EventHandle event : all_events_) (void)backend_.DestroyEvent(event);
  // A counter block is freed once the writes into it landed (the backend's
  // free of page-locked memory waits for the device).
  for (const CounterBlock& block : blocks_) {
    (void)backend_.DestroyCounters(block.handle);
  }
}

absl::Status StreamOrder::TakeError() { return std::exchange(error_, {}); }

bool StreamOrder::KnownComplete(std::uintptr_t stream,
                                std::uint64_t stamp) const {
  const StreamState* found = Find(stream);
  if (found == nullptr) return IsReleasedKey(stream);  // forgotten: done
  const StreamState& state = *found;
  if (state.last_marker != 0) stamp = std::min(stamp, state.last_marker - 1);
  return Completed(state) > stamp;
}

bool StreamOrder::KnownOrdered(std::uintptr_t to, std::uintptr_t from,
                               std::uint64_t stamp) const {
  if (to == from || KnownComplete(from, stamp)) return true;
  if (waited_.empty()) return false;
  auto it = waited_.find({to, from});
  return it != waited_.end() && it->second > stamp;
}

std::size_t StreamOrder::released_streams_kept() const {
  std::size_t n = 0;
  for (const auto& [stream, state] : states_) n += state.last_marker != 0;
  return n;
}

bool StreamOrder::AssignCounter(StreamState& state) {
  if (free_counters_.empty()) {
    absl::StatusOr<CounterBlock> block =
        backend_.CreateCounters(kCountersPerBlock);
    if (!block.ok()) {
      Fail(block.status());
      return false;
    }
    const std::uint32_t base =
        static_cast<std::uint32_t>(blocks_.size() * kCountersPerBlock);
    blocks_.push_back(*block);
    // Handed out lowest first.
    for (std::size_t i = kCountersPerBlock; i > 0; --i) {
      free_counters_.push_back(base + static_cast<std::uint32_t>(i - 1));
    }
  }
  state.counter = free_counters_.back();
  free_counters_.pop_back();
  // What the counter holds already (an earlier stream's last number, every
  // write of which landed) is below every marker this stream will record,
  // but may be above the stamps of its frees: Completed ignores it.
  state.counter_base =
      __atomic_load_n(CounterWord(state.counter), __ATOMIC_ACQUIRE);
  return true;
}

void StreamOrder::FreeCounter(StreamState& state) {
  if (state.counter == kNoCounter) return;
  // Only once every write into it landed: a late write of a smaller number
  // must never overwrite the next stream's.
  free_counters_.push_back(state.counter);
  state.counter = kNoCounter;
}

void StreamOrder::Forget(std::uintptr_t key) {
  auto it = states_.find(key);
  if (it == states_.end()) return;
  FreeCounter(it->second);
  EraseState(key);
  for (auto w = waited_.begin(); w != waited_.end();) {
    if (w->first.second == key) {
      waited_.erase(w++);
    } else {
      ++w;
    }
  }
}

absl::Status StreamOrder::ReleaseStream(std::uintptr_t stream,
                                        std::uintptr_t key) {
  StreamState state;
  auto it = states_.find(stream);
  if (it != states_.end()) state = it->second;
  const Marker* last = RecordOn(stream, state, /*with_event=*/true);
  if (last == nullptr) return TakeError();
  state.last_marker = last->number;
  state.dirty = false;
  state.in_dirty_list = false;
  state.listed = true;
  EraseState(stream);
  states_[key] = std::move(state);
  with_pending_.push_back(key);
  dirty_.erase(std::remove(dirty_.begin(), dirty_.end(), stream), dirty_.end());
  // What other streams waited for on `stream` now names `key`; what
  // `stream` waited for is forgotten (a new stream of that handle is a
  // stranger).
  std::vector<
      std::pair<std::pair<std::uintptr_t, std::uintptr_t>, std::uint64_t>>
      renamed;
  for (auto w = waited_.begin(); w != waited_.end();) {
    const auto [to, from] = w->first;
    if (to == stream || from == stream) {
      if (from == stream && to != stream) {
        renamed.push_back({{to, key}, w->second});
      }
      waited_.erase(w++);
      continue;
    }
    ++w;
  }
  for (const auto& [k, number] : renamed) waited_[k] = number;
  // Forget what is done already (a look each, no wait): this one, and the
  // streams released before whose memory nobody asked about since, so that
  // a runtime making and destroying a stream per request keeps a bounded
  // set of them.
  NewSearch();
  std::vector<std::uintptr_t> done;
  for (auto& [k, s] : states_) {
    if (s.last_marker == 0) continue;
    if (RetireReleased(s)) done.push_back(k);
    if (!error_.ok()) (void)TakeError();  // asked again later
  }
  for (std::uintptr_t k : done) Forget(k);
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

const StreamOrder::Marker* StreamOrder::RecordOn(std::uintptr_t stream,
                                                 StreamState& state,
                                                 bool with_event) {
  const std::uint64_t number = markers_ + 1;
  EventHandle event = 0;
  if (markers_kind_ == Markers::kCounters) {
    if (state.counter == kNoCounter && !AssignCounter(state)) return nullptr;
    if (with_event) {
      event = TakeEvent();
      if (event == 0) return nullptr;
    }
    const std::uint32_t slot = state.counter;
    absl::Status written =
        backend_.WriteCounter(blocks_[slot / kCountersPerBlock].handle,
                              slot % kCountersPerBlock, number, Stream(stream));
    if (written.ok() && with_event) {
      written = backend_.RecordEvent(event, Stream(stream));
    }
    if (!written.ok()) {
      if (event != 0) spare_events_.push_back(event);
      Fail(written);
      return nullptr;
    }
  } else {
    event = TakeEvent();
    if (event == 0) return nullptr;
    absl::Status recorded = backend_.RecordEvent(event, Stream(stream));
    if (!recorded.ok()) {
      spare_events_.push_back(event);
      Fail(recorded);
      return nullptr;
    }
    if (!state.listed) {
      state.listed = true;
      with_pending_.push_back(stream);
    }
  }
  markers_ = number;
  state.pending.push_back(Marker{number, event});
  state.dirty = false;
  state.freed_since_marker = 0;
  Spend();
  return &state.pending.back();
}

void StreamOrder::Retire(StreamState& state, std::uint64_t up_to, bool fresh) {
  if (markers_kind_ == Markers::kCounters) {
    state.completed = Completed(state);
    while (!state.pending.empty() &&
           state.pending.front().number <= state.completed) {
      if (state.pending.front().event != 0) {
        spare_events_.push_back(state.pending.front().event);
      }
      state.pending.pop_front();
    }
    return;
  }
  while (!state.pending.empty() && state.pending.front().number <= up_to) {
    if (!fresh && state.seen_running == search_) return;  // asked already
    const Marker front = state.pending.front();
    ++queries_;
    Spend();
    absl::StatusOr<bool> done = backend_.QueryEvent(front.event);
    if (!done.ok()) {
      Fail(done.status());
      return;
    }
    // A stream's markers complete in order: the first one still running
    // means every later one is running too.
    if (!*done) {
      state.seen_running = search_;
      return;
    }
    state.completed = front.number;
    spare_events_.push_back(front.event);
    state.pending.pop_front();
  }
}

void StreamOrder::MarkBurst(std::uintptr_t stream, StreamState& state) {
  if (IsReleasedKey(stream)) return;
  if (RecordOn(stream, state) == nullptr) (void)TakeError();
}

void StreamOrder::BeforeAllocateSlow(std::uintptr_t stream) {
  // A marker on each other stream that freed memory since its last one,
  // oldest first, as the credit allows: it covers the burst of frees just
  // made, and completes right after their work. Past kMaxDirtyStreams the
  // oldest get theirs without credit: a stream that frees once and goes
  // quiet (a stream per request) would otherwise keep its frees unknown for
  // good, and the free memory they split would grow with the streams.
  for (std::size_t n = dirty_.size(); n > 0 && !dirty_.empty(); --n) {
    const std::uintptr_t s = dirty_.front();
    auto it = states_.find(s);
    const bool dirty = it != states_.end() && it->second.dirty;
    const bool over = dirty_.size() > kMaxDirtyStreams;
    if (dirty && !over && !Afford()) break;
    dirty_.pop_front();
    if (!dirty) {
      // A marker was recorded since (or the stream was forgotten).
      if (it != states_.end()) it->second.in_dirty_list = false;
      continue;
    }
    if (s == stream && !over) {
      dirty_.push_back(s);  // its own memory needs no marker for itself
      continue;
    }
    it->second.in_dirty_list = false;
    if (RecordOn(s, it->second) == nullptr) {
      (void)TakeError();  // an eager marker is a hint: the need asks again
      it->second.dirty = true;
      it->second.in_dirty_list = true;
      dirty_.push_back(s);
      return;
    }
  }
  if (markers_kind_ != Markers::kEvents) return;
  // What completed: the oldest pending event of every other stream, as the
  // credit allows (a stream's own memory needs no answer).
  for (std::size_t i = 0; i < with_pending_.size();) {
    const std::uintptr_t s = with_pending_[i];
    auto it = states_.find(s);
    if (it == states_.end() || it->second.pending.empty()) {
      if (it != states_.end()) it->second.listed = false;
      with_pending_[i] = with_pending_.back();
      with_pending_.pop_back();
      continue;
    }
    if (!Afford()) break;
    StreamState& state = it->second;
    if (s != stream) {
      Retire(state, state.pending.front().number);
      if (!error_.ok()) {
        (void)TakeError();  // asked again when the memory is wanted
        return;
      }
    }
    ++i;
  }
}

ReuseOracle::Verdict StreamOrder::Query(std::uintptr_t from,
                                        std::uint64_t stamp, Marker* cover,
                                        bool record) {
  if (IsReleasedKey(from)) {
    auto it = states_.find(from);
    if (it == states_.end()) return Verdict::kReady;  // forgotten: done
    StreamState& state = it->second;
    // Its last marker covers everything ever queued on it.
    const bool done = RetireReleased(state);
    if (!error_.ok()) return Verdict::kError;
    if (done) {
      Forget(from);
      return Verdict::kReady;
    }
    *cover = state.pending.back();
    return Verdict::kBlocked;
  }
  StreamState& state = State(from);
  if (Completed(state) > stamp) return Verdict::kReady;
  // The oldest marker recorded after the free covers the freeing work; when
  // there is none yet, record one now.
  const Marker* covering = nullptr;
  for (const Marker& m : state.pending) {
    if (m.number > stamp) {
      covering = &m;
      break;
    }
  }
  Marker found;
  if (covering == nullptr) {
    // A marker recorded now covers everything queued so far: it says the
    // work completed only if the stream is idle. Recorded to wait for it,
    // or to ask as the budget allows.
    if (!record && !Afford()) {
      *cover = Marker();
      return Verdict::kBlocked;
    }
    const Marker* m = RecordOn(from, state);
    if (m == nullptr) return Verdict::kError;
    found = *m;
  } else {
    found = *covering;
  }
  Retire(state, found.number);
  if (!error_.ok()) return Verdict::kError;
  if (Completed(state) > stamp) return Verdict::kReady;
  *cover = found;
  return Verdict::kBlocked;
}

bool StreamOrder::Poll(std::uintptr_t stream, std::uint64_t stamp) {
  Marker cover;
  return Query(stream, stamp, &cover, /*record=*/true) != Verdict::kError;
}

ReuseOracle::Verdict StreamOrder::Prepare(std::uintptr_t from,
                                          std::uint64_t stamp,
                                          std::uintptr_t to, Ask ask) {
  // (A released key goes through Query, which forgets it once complete.)
  if (!IsReleasedKey(from) && KnownComplete(from, stamp)) {
    return Verdict::kReady;
  }
  if (KnownOrdered(to, from, stamp) && !KnownComplete(from, stamp)) {
    return Verdict::kWaited;
  }
  const bool wait =
      ask == Ask::kWait && policy_ != CrossStreamReuse::kWhenComplete;
  Marker cover;
  const Verdict verdict =
      Query(from, stamp, &cover, /*record=*/ask != Ask::kIfCheap);
  if (verdict != Verdict::kBlocked || !wait) return verdict;
  absl::Status waited;
  if (markers_kind_ == Markers::kCounters) {
    const std::uint32_t slot = states_.find(from)->second.counter;
    waited = backend_.WaitCounter(blocks_[slot / kCountersPerBlock].handle,
                                  slot % kCountersPerBlock, cover.number,
                                  Stream(to));
  } else {
    waited = backend_.StreamWaitEvent(Stream(to), cover.event);
  }
  if (!waited.ok()) {
    Fail(waited);
    return Verdict::kError;
  }
  ++stream_waits_;
  wait_credit_ = std::max<std::int64_t>(0, wait_credit_ - 100);
  std::uint64_t& w = waited_[{to, from}];
  w = std::max(w, cover.number);
  return Verdict::kWaited;
}

absl::Status StreamOrder::WaitForAll(
    const std::vector<std::uintptr_t>& streams) {
  for (std::uintptr_t stream : streams) {
    if (IsReleasedKey(stream)) {
      // Never recorded on again: its last marker (which carries an event)
      // is waited for.
      auto it = states_.find(stream);
      if (it == states_.end()) continue;
      StreamState& state = it->second;
      if (!state.pending.empty()) {
        absl::Status synced =
            backend_.SynchronizeEvent(state.pending.back().event);
        if (!synced.ok()) return synced;
        ++host_waits_;
      }
      for (const Marker& done : state.pending) {
        if (done.event != 0) spare_events_.push_back(done.event);
      }
      state.pending.clear();
      Forget(stream);
      continue;
    }
    StreamState& state = State(stream);
    const Marker* m = RecordOn(stream, state, /*with_event=*/true);
    if (m == nullptr) return TakeError();
    const Marker marker = *m;
    absl::Status synced = backend_.SynchronizeEvent(marker.event);
    if (!synced.ok()) return synced;
    ++host_waits_;
    state.completed = std::max(state.completed, marker.number);
    for (const Marker& done : state.pending) {
      if (done.event != 0) spare_events_.push_back(done.event);
    }
    state.pending.clear();
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core
