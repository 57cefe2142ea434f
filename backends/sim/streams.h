// SPDX-License-Identifier: Apache-2.0
// backends/sim/streams.h: the simulator's streams, events and clock.
//
// A stream is its count of queued pieces (positions 1, 2, ...), how many of
// them completed, and a vector clock: per other stream, the position its
// future work is ordered after. An event captures the recording stream's
// position plus its clock, so clocks are transitively closed and "is X's
// piece p ordered before this stream's work" is one lookup. Completion is a
// prefix of each queue (pieces of one stream end in order on the modeled
// clock too), so completing is moving a counter, and completed pieces are
// dropped from the hazard detector. Modeled clock: streams are kept in order
// of their first pending end, so the pieces whose end has passed are dropped
// as the clock moves, without visiting the other streams. A destroyed stream
// is forgotten once its work, and what that work waits for, has completed:
// clocks may still name it, and every position they name for it is then
// complete; a stream tracked later (its handle reused, too) starts at the
// largest position a forgotten stream reached, so those clocks cover none of
// its work.
//
// Cost with many streams: a clock that grows past kCompactAbove entries
// drops those whose work has completed (a handover chain across thousands of
// streams would otherwise give each clock an entry per stream before it: a
// replay quadratic in the streams, in time and memory); an entry dropped
// before a host synchronization saw its work leaves a marker (the handle
// kSyncMarker, at the number of the next SynchronizeDevice) that Observed
// honours, conservatively. CompleteAll and SynchronizeDevice visit only the
// streams with work not yet complete or not yet seen, and the latest time a
// stream is ready is kept as it changes: their cost follows the work
// pending, not the streams ever named.
//
// Not thread-safe: the backend holds its lock around every use.
#ifndef GPUALLOC_BACKENDS_SIM_STREAMS_H_
#define GPUALLOC_BACKENDS_SIM_STREAMS_H_

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "backends/sim/call_ledger.h"
#include "backends/sim/hazards.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// The work a stream, an event or a pool free is ordered after: (stream
// handle, position) pairs sorted by handle, where position p stands for the
// first p pieces queued on that stream; a stream not listed is at 0. Few
// streams wait on each other, so a sorted vector beats a map.
using VectorClock = std::vector<std::pair<std::uintptr_t, std::uint64_t>>;

std::uint64_t ClockAt(const VectorClock& clock, std::uintptr_t stream);
void ClockRaise(VectorClock* clock, std::uintptr_t stream,
                std::uint64_t position);

// One stream. Piece i (1-based) of its queue has position i; a position p
// in a clock stands for the first p pieces.
struct StreamState {
  std::uintptr_t handle = 0;        // the stream's own handle
  std::uint64_t next_position = 0;  // pieces ever queued
  // Pieces at or below are complete (manual: as the test said; modeled:
  // updated by Prune from `ends`).
  std::uint64_t completed_position = 0;
  // Pieces at or below are complete AND a host synchronization point has
  // seen it; the pool then lets any stream reuse what they freed.
  std::uint64_t observed_position = 0;
  // Work on other streams that this stream's future work is ordered after;
  // transitively closed, since events carry their recorder's clock.
  VectorClock clock;
  // Modeled: when everything queued so far, waits included, is done.
  std::uint64_t ready_ns = 0;
  // Modeled: end times of the pieces after completed_position, in order
  // (nondecreasing, since a stream runs its pieces one after the other).
  std::deque<std::uint64_t> ends;
  StreamPieces pieces;  // pending pieces that touch memory
};

// Work captured at a moment: what an event records, what a pool free waits
// for. A never-recorded event has an empty clock: complete, and a no-op to
// wait for, as in CUDA.
struct Event {
  // The recording stream's own position and everything it waited for.
  VectorClock clock;
  std::uint64_t done_ns = 0;  // modeled: when the captured work is done
};

class Streams {
 public:
  // Clocks with at most this many entries are never compacted (exact for up
  // to that many streams).
  static constexpr std::size_t kCompactAbove = 64;
  // The marker entry of a compacted clock (no stream has this handle).
  static constexpr std::uintptr_t kSyncMarker = ~std::uintptr_t{0};

  Streams(const DeviceInfo& info, SimClock clock, std::uint64_t work_ns)
      : info_(info),
        modeled_clock_(clock == SimClock::kModeled),
        work_ns_(work_ns) {}

  // --- Events (the call's checks and effects; the backend counts it) ---
  EventHandle CreateEvent();
  absl::Status DestroyEvent(EventHandle event);
  absl::Status RecordEvent(EventHandle event, Stream stream);
  absl::StatusOr<bool> QueryEvent(EventHandle event);
  absl::Status StreamWaitEvent(Stream stream, EventHandle event);
  // The host waits for the event's work; `wait_ns` is what that costs.
  absl::Status SynchronizeEvent(EventHandle event, const CallLedger& ledger,
                                std::uint64_t* wait_ns);
  std::uint64_t live_events() const { return events_.size(); }

  // --- Device work ---
  // `usable`: whether the range may be touched (an access violation
  // otherwise).
  void Use(Stream stream, DeviceAddress address, std::uint64_t bytes,
           std::uint64_t duration_ns, bool usable);
  void CompleteStream(Stream stream);
  void CompleteAll();
  void OrderStreams(Stream waiter, Stream other);
  void DestroyStream(Stream stream);
  // FailedPrecondition for a call naming a destroyed stream.
  absl::Status CheckNotDestroyed(Stream stream, absl::string_view call);
  std::uint64_t calls_on_destroyed_streams() const {
    return calls_on_destroyed_;
  }
  std::uint64_t tracked_streams() const { return streams_.size(); }
  void AdvanceClock(std::uint64_t ns);
  std::uint64_t now_ns() const { return now_ns_; }
  std::uint64_t pending_work();
  // A host synchronization of the whole device (cudaFree): everything queued
  // completes and the host has seen it. Returns what the wait costs.
  std::uint64_t SynchronizeDevice(const CallLedger& ledger);
  // Flags each stream whose incomplete work uses part of [start, end).
  void FlagUnmapInUse(DeviceAddress start, DeviceAddress end);
  const HazardDetector& detector() const { return detector_; }

  // --- What the pool asks ---
  // The stream's state, tracked from now on if it was not (call it for a
  // stream that is not destroyed).
  StreamState& GetStream(std::uintptr_t handle);
  // The work queued on `handle` so far and what it waits for (none for a
  // forgotten stream: all of it completed).
  Event Capture(std::uintptr_t handle);
  // Whether all the work `clock` covers has completed.
  bool Completed(const VectorClock& clock);
  // Whether a host synchronization point has seen all of it complete.
  bool Observed(const VectorClock& clock);
  // Orders the future work of `stream` after the work `clock` covers.
  void Wait(std::uintptr_t stream, const VectorClock& clock,
            std::uint64_t done_ns);

 private:
  // Modeled: marks the pieces whose end has passed as complete. Both: drops
  // completed pieces from the hazard index.
  void Prune(StreamState& s);
  // Modeled: prunes every stream whose first pending piece has ended, in
  // order of those ends, leaving the others alone.
  void PruneEnded();
  // Manual clock: how many of the first `position` pieces of `s` are still
  // pending.
  static std::uint64_t PendingUpTo(const StreamState& s,
                                   std::uint64_t position);
  // Manual clock: completes the first `position` pieces of `s`. The caller
  // completes what they wait for.
  void CompleteUpTo(StreamState& s, std::uint64_t position);
  // Manual clock: completes the work `clock` covers (and, clocks being
  // transitively closed, everything that work waits for).
  void CompleteClock(const VectorClock& clock);
  // A host synchronization point that saw the work `clock` covers complete.
  void Observe(const VectorClock& clock);
  // Past kCompactAbove entries: drops the entries whose work has completed
  // (and marks what no synchronization has seen of it).
  void Compact(VectorClock* clock);
  // Keeps incomplete_ and unseen_ right after `s`'s positions changed.
  void NoteProgress(const StreamState& s);
  absl::Status UnknownEvent(absl::string_view operation,
                            EventHandle event) const;
  // The stream's state when tracked, else nullptr (never mentioned, or
  // destroyed and forgotten).
  StreamState* Find(std::uintptr_t handle);
  // Forgets the destroyed stream `handle` if its work, and the work it waits
  // for, has completed; whether it is forgotten (or was not tracked). Call it
  // for destroyed streams only; the caller keeps destroyed_tracked_.
  bool ForgetIfDone(std::uintptr_t handle);
  // ForgetIfDone for every destroyed stream still tracked.
  void ForgetDoneDestroyed();
  // ForgetIfDone for the destroyed streams `clock` names.
  void ForgetDoneIn(const VectorClock& clock);

  const DeviceInfo& info_;
  const bool modeled_clock_;
  const std::uint64_t work_ns_;
  std::unordered_map<std::uintptr_t, StreamState> streams_;  // stable refs
  // Modeled clock: (first pending end, stream) of each stream with pending
  // pieces, so that PruneEnded visits only streams with ended work.
  absl::btree_set<std::pair<std::uint64_t, std::uintptr_t>> first_ends_;
  absl::btree_map<EventHandle, Event> events_;
  EventHandle next_event_ = 1;
  std::uint64_t now_ns_ = 0;
  absl::flat_hash_set<std::uintptr_t> destroyed_;
  // The destroyed streams still tracked (in streams_): their work pending.
  absl::flat_hash_set<std::uintptr_t> destroyed_tracked_;
  // Forgotten streams part of whose work no host synchronization has seen:
  // handle -> (observed position, final position). Cleared by
  // SynchronizeDevice.
  absl::flat_hash_map<std::uintptr_t, std::pair<std::uint64_t, std::uint64_t>>
      unobserved_;
  // The largest position a forgotten stream reached: where a stream tracked
  // from now on starts.
  std::uint64_t first_position_ = 0;
  // Tracked streams with work not yet complete, and with work no host
  // synchronization has seen (CompleteAll and SynchronizeDevice visit only
  // these); the latest ready_ns of any stream (modeled); SynchronizeDevice
  // calls so far (what a compacted clock's marker counts).
  absl::flat_hash_set<std::uintptr_t> incomplete_;
  absl::flat_hash_set<std::uintptr_t> unseen_;
  std::uint64_t latest_ready_ns_ = 0;
  std::uint64_t device_syncs_ = 0;
  std::uint64_t calls_on_destroyed_ = 0;
  HazardDetector detector_;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_STREAMS_H_
