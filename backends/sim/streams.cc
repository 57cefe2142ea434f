// SPDX-License-Identifier: Apache-2.0
// backends/sim/streams.cc: streams, events, the clocks and completion.
#include "backends/sim/streams.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_format.h"
#include "backends/sim/sim_util.h"

namespace gpualloc::sim {
namespace {

VectorClock::const_iterator ClockFind(const VectorClock& clock,
                                      std::uintptr_t stream) {
  return std::lower_bound(
      clock.begin(), clock.end(), stream,
      [](const auto& entry, std::uintptr_t s) { return entry.first < s; });
}

}  // namespace

std::uint64_t ClockAt(const VectorClock& clock, std::uintptr_t stream) {
  const auto it = ClockFind(clock, stream);
  return it != clock.end() && it->first == stream ? it->second : 0;
}

void ClockRaise(VectorClock* clock, std::uintptr_t stream,
                std::uint64_t position) {
  if (position == 0) return;
  const auto found = ClockFind(*clock, stream);
  const auto it = clock->begin() + (found - clock->cbegin());
  if (it != clock->end() && it->first == stream) {
    it->second = std::max(it->second, position);
  } else {
    clock->insert(it, {stream, position});
  }
}

// --- Events ------------------------------------------------------------------

absl::Status Streams::UnknownEvent(absl::string_view operation,
                                   EventHandle event) const {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s of event %d on %s: no such event (never created, or destroyed)",
      operation, event, info_.name));
}

EventHandle Streams::CreateEvent() {
  const EventHandle handle = next_event_++;
  events_.emplace(handle, Event{});
  return handle;
}

absl::Status Streams::DestroyEvent(EventHandle event) {
  auto it = events_.find(event);
  if (it == events_.end()) return UnknownEvent("DestroyEvent", event);
  // Like cuEventDestroy, destroying an event whose work is pending is fine:
  // the work goes on, only the handle goes away.
  events_.erase(it);
  return absl::OkStatus();
}

absl::Status Streams::RecordEvent(EventHandle event, Stream stream) {
  auto it = events_.find(event);
  if (it == events_.end()) return UnknownEvent("RecordEvent", event);
  if (absl::Status s = CheckNotDestroyed(stream, "RecordEvent"); !s.ok()) {
    return s;
  }
  it->second = Capture(stream.handle);
  return absl::OkStatus();
}

absl::StatusOr<bool> Streams::QueryEvent(EventHandle event) {
  auto it = events_.find(event);
  if (it == events_.end()) return UnknownEvent("QueryEvent", event);
  return Completed(it->second.clock);
}

absl::Status Streams::StreamWaitEvent(Stream stream, EventHandle event) {
  auto it = events_.find(event);
  if (it == events_.end()) return UnknownEvent("StreamWaitEvent", event);
  if (absl::Status s = CheckNotDestroyed(stream, "StreamWaitEvent"); !s.ok()) {
    return s;
  }
  Wait(stream.handle, it->second.clock, it->second.done_ns);
  return absl::OkStatus();
}

absl::Status Streams::SynchronizeEvent(EventHandle event,
                                       const CallLedger& ledger,
                                       std::uint64_t* wait_ns) {
  auto it = events_.find(event);
  if (it == events_.end()) return UnknownEvent("SynchronizeEvent", event);
  const Event& e = it->second;
  // The host waits for the captured work: that is the call's cost too.
  if (modeled_clock_) {
    *wait_ns = e.done_ns > now_ns_ ? e.done_ns - now_ns_ : 0;
    now_ns_ = std::max(now_ns_, e.done_ns);
  } else {
    std::uint64_t most = 0;
    for (const auto& [handle, position] : e.clock) {
      if (const StreamState* s = Find(handle); s != nullptr) {
        most = std::max(most, PendingUpTo(*s, position));
      }
    }
    *wait_ns = ledger.WaitCostNs(most);
    CompleteClock(e.clock);
  }
  Observe(e.clock);
  ForgetDoneIn(e.clock);
  return absl::OkStatus();
}

// --- Device work -------------------------------------------------------------

void Streams::Use(Stream stream, DeviceAddress address, std::uint64_t bytes,
                  std::uint64_t duration_ns, bool usable) {
  if (duration_ns == 0) duration_ns = work_ns_;
  // A new stream with the handle (the destroyed one's state, if still
  // tracked, goes on as its).
  destroyed_.erase(stream.handle);
  destroyed_tracked_.erase(stream.handle);
  const DeviceAddress end = SaturatingEnd(address, bytes);
  StreamState& s = GetStream(stream.handle);
  if (end > address && !usable) {
    detector_.FlagInaccessible(stream, address, end);
  }
  if (end > address) {
    PruneEnded();
    for (const std::uintptr_t handle : detector_.StreamsNear(address, end)) {
      if (handle == stream.handle) continue;
      StreamState& other = GetStream(handle);
      Prune(other);
      const std::optional<Overlap> overlap = HazardDetector::FindUnordered(
          other.pieces, address, end, ClockAt(s.clock, handle));
      if (!overlap.has_value()) continue;
      detector_.Flag(SimHazardKind::kStreamOrder, stream, Stream(handle),
                     *overlap);
    }
  }
  const std::uint64_t position = ++s.next_position;
  NoteProgress(s);
  if (modeled_clock_) {
    const std::uint64_t start = std::max(now_ns_, s.ready_ns);
    s.ready_ns = SaturatingAdd(start, duration_ns);
    latest_ready_ns_ = std::max(latest_ready_ns_, s.ready_ns);
    s.ends.push_back(s.ready_ns);
    if (s.ends.size() == 1) first_ends_.emplace(s.ends.front(), s.handle);
  }
  if (end > address) {
    detector_.Index(s.handle, s.pieces, address, end, position);
  }
}

void Streams::CompleteStream(Stream stream) {
  StreamState* s = Find(stream.handle);
  if (s == nullptr) return;
  if (modeled_clock_) {
    now_ns_ = std::max(now_ns_, s->ready_ns);
  } else {
    CompleteClock(s->clock);
    CompleteUpTo(*s, s->next_position);
  }
  VectorClock named = s->clock;
  ClockRaise(&named, stream.handle, s->next_position);
  ForgetDoneIn(named);  // the stream itself too, when destroyed
}

void Streams::CompleteAll() {
  // (Only the streams with work pending have anything to complete; no
  // forgotten stream is ready later than now.)
  if (modeled_clock_) {
    now_ns_ = std::max(now_ns_, latest_ready_ns_);
  } else {
    const std::vector<std::uintptr_t> pending(incomplete_.begin(),
                                              incomplete_.end());
    for (const std::uintptr_t handle : pending) {
      StreamState& s = streams_.at(handle);
      CompleteUpTo(s, s.next_position);
    }
  }
  ForgetDoneDestroyed();
}

void Streams::DestroyStream(Stream stream) {
  destroyed_.insert(stream.handle);
  if (streams_.contains(stream.handle) && !ForgetIfDone(stream.handle)) {
    destroyed_tracked_.insert(stream.handle);
  }
}

void Streams::OrderStreams(Stream waiter, Stream other) {
  // A new stream with the handle.
  destroyed_.erase(waiter.handle);
  destroyed_tracked_.erase(waiter.handle);
  if (waiter.handle == other.handle) return;
  const Event done = Capture(other.handle);
  Wait(waiter.handle, done.clock, done.done_ns);
}

absl::Status Streams::CheckNotDestroyed(Stream stream, absl::string_view call) {
  if (!destroyed_.contains(stream.handle)) return absl::OkStatus();
  ++calls_on_destroyed_;
  return absl::FailedPreconditionError(
      absl::StrFormat("sim: %s on stream %#x, which the program destroyed",
                      call, stream.handle));
}

void Streams::AdvanceClock(std::uint64_t ns) {
  now_ns_ = SaturatingAdd(now_ns_, ns);
}

std::uint64_t Streams::pending_work() {
  std::uint64_t pending = 0;
  const std::vector<std::uintptr_t> streams(incomplete_.begin(),
                                            incomplete_.end());
  for (const std::uintptr_t handle : streams) {
    StreamState& s = streams_.at(handle);
    Prune(s);
    pending += s.next_position - s.completed_position;
  }
  ForgetDoneDestroyed();
  return pending;
}

std::uint64_t Streams::SynchronizeDevice(const CallLedger& ledger) {
  std::uint64_t wait_ns = 0;
  if (modeled_clock_) {
    if (latest_ready_ns_ > now_ns_) wait_ns = latest_ready_ns_ - now_ns_;
  } else {
    std::uint64_t most = 0;
    for (const std::uintptr_t handle : incomplete_) {
      const StreamState& s = streams_.at(handle);
      most = std::max(most, PendingUpTo(s, s.next_position));
    }
    wait_ns = ledger.WaitCostNs(most);
  }
  CompleteAll();
  ++device_syncs_;
  // Everything is complete now, and seen: the streams with work not yet
  // seen catch up (the others have nothing to prune or see).
  const std::vector<std::uintptr_t> unseen(unseen_.begin(), unseen_.end());
  for (const std::uintptr_t handle : unseen) {
    StreamState& s = streams_.at(handle);
    Prune(s);
    s.observed_position = s.completed_position;
    NoteProgress(s);
  }
  unobserved_.clear();  // forgotten streams: all of their work complete
  return wait_ns;
}

void Streams::FlagUnmapInUse(DeviceAddress start, DeviceAddress end) {
  PruneEnded();
  for (const std::uintptr_t handle : detector_.StreamsNear(start, end)) {
    StreamState& s = GetStream(handle);
    Prune(s);
    const std::optional<Overlap> overlap =
        HazardDetector::FindUnordered(s.pieces, start, end, 0);
    if (!overlap.has_value()) continue;
    detector_.Flag(SimHazardKind::kUnmapInUse, Stream(handle), Stream(handle),
                   *overlap);
  }
}

// --- Completion
// ----------------------------------------------------------------

StreamState& Streams::GetStream(std::uintptr_t handle) {
  auto [it, inserted] = streams_.try_emplace(handle);
  if (inserted) {
    StreamState& s = it->second;
    s.handle = handle;
    // Past every position a forgotten stream reached: clocks that name one
    // with this handle cover none of this stream's work.
    s.next_position = first_position_;
    s.completed_position = first_position_;
    s.observed_position = first_position_;
    // What no synchronization saw of a forgotten stream with the handle
    // stays unseen.
    if (auto u = unobserved_.find(handle); u != unobserved_.end()) {
      s.observed_position = u->second.first;
      unobserved_.erase(u);
    }
    NoteProgress(s);
  }
  return it->second;
}

void Streams::NoteProgress(const StreamState& s) {
  if (s.completed_position < s.next_position) {
    incomplete_.insert(s.handle);
  } else {
    incomplete_.erase(s.handle);
  }
  if (s.observed_position < s.next_position) {
    unseen_.insert(s.handle);
  } else {
    unseen_.erase(s.handle);
  }
}

StreamState* Streams::Find(std::uintptr_t handle) {
  auto it = streams_.find(handle);
  return it == streams_.end() ? nullptr : &it->second;
}

bool Streams::ForgetIfDone(std::uintptr_t handle) {
  auto it = streams_.find(handle);
  if (it == streams_.end()) return true;
  StreamState& s = it->second;
  Prune(s);
  // Its own work, then what it waits for (an event it could still capture
  // would cover that too; a destroyed stream captures none, but the program
  // may order another stream after it).
  if (s.completed_position < s.next_position || !Completed(s.clock)) {
    return false;
  }
  if (s.observed_position < s.next_position) {
    unobserved_[handle] = {s.observed_position, s.next_position};
  }
  first_position_ = std::max(first_position_, s.next_position);
  incomplete_.erase(handle);
  unseen_.erase(handle);
  streams_.erase(it);
  return true;
}

void Streams::ForgetDoneDestroyed() {
  for (auto it = destroyed_tracked_.begin(); it != destroyed_tracked_.end();) {
    if (ForgetIfDone(*it)) {
      destroyed_tracked_.erase(it++);
    } else {
      ++it;
    }
  }
}

void Streams::ForgetDoneIn(const VectorClock& clock) {
  for (const auto& [handle, position] : clock) {
    if (destroyed_tracked_.contains(handle) && ForgetIfDone(handle)) {
      destroyed_tracked_.erase(handle);
    }
  }
}

Event Streams::Capture(std::uintptr_t handle) {
  const StreamState* s = Find(handle);
  Event captured;
  if (s == nullptr) return captured;  // forgotten, or never given work
  captured.clock = s->clock;
  ClockRaise(&captured.clock, handle, s->next_position);
  captured.done_ns = s->ready_ns;
  return captured;
}

void Streams::Prune(StreamState& s) {
  if (modeled_clock_ && !s.ends.empty() && s.ends.front() <= now_ns_) {
    first_ends_.erase({s.ends.front(), s.handle});
    while (!s.ends.empty() && s.ends.front() <= now_ns_) {
      s.ends.pop_front();
      ++s.completed_position;
    }
    if (!s.ends.empty()) first_ends_.emplace(s.ends.front(), s.handle);
    NoteProgress(s);
  }
  detector_.DropCompleted(s.handle, s.pieces, s.completed_position);
}

void Streams::PruneEnded() {
  while (!first_ends_.empty() && first_ends_.begin()->first <= now_ns_) {
    Prune(GetStream(first_ends_.begin()->second));
  }
}

std::uint64_t Streams::PendingUpTo(const StreamState& s,
                                   std::uint64_t position) {
  position = std::min(position, s.next_position);
  return position > s.completed_position ? position - s.completed_position : 0;
}

void Streams::CompleteUpTo(StreamState& s, std::uint64_t position) {
  position = std::min(position, s.next_position);
  if (position <= s.completed_position) return;
  s.completed_position = position;
  NoteProgress(s);
  Prune(s);
}

// A stream a clock names that is no longer tracked was forgotten: all of its
// work completed.

void Streams::CompleteClock(const VectorClock& clock) {
  for (const auto& [handle, position] : clock) {
    if (StreamState* s = Find(handle); s != nullptr) {
      CompleteUpTo(*s, position);
    }
  }
}

bool Streams::Completed(const VectorClock& clock) {
  for (const auto& [handle, position] : clock) {
    StreamState* s = Find(handle);
    if (s == nullptr) continue;
    Prune(*s);
    if (s->completed_position < position) return false;
  }
  return true;
}

bool Streams::Observed(const VectorClock& clock) {
  for (const auto& [handle, position] : clock) {
    if (handle == kSyncMarker) {
      // Compacted: seen once that SynchronizeDevice has happened.
      if (device_syncs_ < position) return false;
      continue;
    }
    if (const StreamState* s = Find(handle); s != nullptr) {
      if (s->observed_position < position) return false;
    } else if (auto u = unobserved_.find(handle);
               u != unobserved_.end() && u->second.first < position) {
      return false;
    }
  }
  return true;
}

void Streams::Observe(const VectorClock& clock) {
  for (const auto& [handle, position] : clock) {
    if (StreamState* s = Find(handle); s != nullptr) {
      Prune(*s);
      s->observed_position = std::max(
          s->observed_position, std::min(position, s->completed_position));
      NoteProgress(*s);
    } else if (auto u = unobserved_.find(handle); u != unobserved_.end()) {
      auto& [observed, final_position] = u->second;
      observed = std::max(observed, std::min(position, final_position));
      if (observed >= final_position) unobserved_.erase(u);
    }
  }
}

void Streams::Wait(std::uintptr_t stream, const VectorClock& clock,
                   std::uint64_t done_ns) {
  StreamState& s = GetStream(stream);
  for (const auto& [handle, position] : clock) {
    // A stream is always ordered after its own earlier work.
    if (handle != stream) ClockRaise(&s.clock, handle, position);
  }
  Compact(&s.clock);
  s.ready_ns = std::max(s.ready_ns, done_ns);
  latest_ready_ns_ = std::max(latest_ready_ns_, s.ready_ns);
}

void Streams::Compact(VectorClock* clock) {
  if (clock->size() <= kCompactAbove) return;
  std::uint64_t marker = 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < clock->size(); ++i) {
    const auto [handle, position] = (*clock)[i];
    bool drop = false;
    if (handle == kSyncMarker) {
      marker = std::max(marker, position);
      drop = true;
    } else if (!destroyed_tracked_.contains(handle)) {
      // (A destroyed stream's entries stay: they may let it be forgotten.)
      bool seen = true;
      if (StreamState* s = Find(handle); s != nullptr) {
        Prune(*s);
        drop = s->completed_position >= position;
        seen = s->observed_position >= position;
      } else {
        drop = true;  // forgotten: complete
        const auto u = unobserved_.find(handle);
        seen = u == unobserved_.end() || u->second.first >= position;
      }
      if (drop && !seen) marker = std::max(marker, device_syncs_ + 1);
    }
    if (!drop) (*clock)[kept++] = (*clock)[i];
  }
  clock->resize(kept);
  // The largest handle: the clock stays sorted.
  if (marker != 0) clock->emplace_back(kSyncMarker, marker);
}

}  // namespace gpualloc::sim
