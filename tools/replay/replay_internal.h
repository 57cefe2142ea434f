// SPDX-License-Identifier: Apache-2.0
// tools/replay/replay_internal.h: what Replay (replay.cc) and its two passes
// (replay_passes.cc) share: the device a pass runs on, the state both passes
// fill in, the timestamp model's host clock, and the passes themselves.
// Internal to tools/replay.
#ifndef GPUALLOC_TOOLS_REPLAY_REPLAY_INTERNAL_H_
#define GPUALLOC_TOOLS_REPLAY_REPLAY_INTERNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/layer.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay::replay_internal {

struct Device {
  std::shared_ptr<Backend> backend;
  std::shared_ptr<SimBackend> sim;  // null for a vendor backend
  std::unique_ptr<Allocator> allocator;
};

// What both passes share: the trace, the model of device progress, and per
// allocation id the pointers and answers (pass k's allocation ids are the
// trace's plus k * na).
struct ReplayState {
  const std::vector<TraceOp>* ops = nullptr;
  std::uint64_t n = 0;
  std::uint64_t na = 0;
  std::uint64_t reps = 0;
  // Repeating, every pass ends by freeing what the trace left live, so the
  // next one starts from nothing, as the first did.
  bool drain = false;
  bool multi_stream = false;
  // Device progress on multi-stream traces, one of two models. Ops: the
  // clock is manual (CreateBackend's default), so queued work completes only
  // when told, and everything queued completes after every `every` ops
  // (ReplayOptions::complete_every, 64 by default; drain frees included;
  // 0 = never). That models streams that keep up with the host a short way
  // behind it: a chunk freed on one stream becomes reusable on another a few
  // ops later, as on a real device, and the pending work stays bounded.
  // Timestamps: see HostClock.
  std::uint64_t every = 0;
  std::uint64_t work_ns = 0;
  std::vector<void*> ptrs;
  std::vector<std::uint8_t> failed;
  std::vector<std::uint64_t> alloc_size, alloc_stream;
  // Per allocation id, from the untimed pass: 0 not attempted (yet), 1
  // served, 2 failed.
  std::vector<std::uint8_t> outcome;
};

ReplayState MakeReplayState(const Trace& trace, const ReplayOptions& options,
                            bool multi_stream, bool timed_model);

// The timestamp model's host: it makes each call at the call's trace time
// plus how far its waits have held it up so far (the modeled clock moves
// to the awaited completion when it waits), never earlier. One per device.
struct HostClock {
  std::uint64_t lag_ns = 0;
  void Before(SimBackend* s, const TraceOp& op, bool on) {
    if (!on) return;
    const std::uint64_t now = s->now_ns();
    const std::uint64_t at = op.time_ns + lag_ns;
    if (at >= now) {
      s->AdvanceClock(at - now);
    } else {
      lag_ns = now - op.time_ns;
    }
  }
};

// --- Pass 1: untimed: fragmentation at the peak, and the timeline --------
// It makes the calls the measured pass will make, in the same order (the
// simulator's fake addresses are deterministic, so both see the same
// layout), and notes what each allocation answered; the measured pass must
// answer the same, or the picture would be a lie. It reads the
// fragmentation at the step after which the live requested bytes first
// reached their peak: it stops right after the step where they peak when
// every allocation succeeds (found from the trace alone), unless an
// allocation failed before it (then it runs to the end, watching for the
// peak as it goes) or a timeline is recorded (then it runs to the end,
// recording blocks, regions and samples).
class UntimedPass {
 public:
  UntimedPass(ReplayState& st, Device& device, const ReplayOptions& options,
              ReplayResult& result)
      : st_(st),
        a1_(*device.allocator),
        sim1_(device.sim.get()),
        options_(options),
        result_(result),
        tl_(result.timeline),
        record_(options.record_timeline) {}

  // The run's steps, or 0 when it stopped at the peak.
  absl::StatusOr<std::uint64_t> Run();

 private:
  void SetTimelineMode();
  absl::Status Pass(std::uint64_t k, bool* done);
  absl::Status Allocate(const TraceOp& op, std::uint64_t gid);
  absl::Status Deallocate(const TraceOp& op, std::uint64_t gid,
                          std::uint64_t trace_id);
  absl::Status AfterStep(bool new_peak);
  void TrackRegions();
  void Sample(const Stats& s, std::uint64_t step);
  void Finish(bool done);

  ReplayState& st_;
  Allocator& a1_;
  SimBackend* const sim1_;
  const ReplayOptions& options_;
  ReplayResult& result_;
  Timeline& tl_;
  const bool record_;
  // Steps after `stop_` are not made; no stop when recording.
  std::uint64_t stop_ = UINT64_MAX;
  std::uint64_t total_steps_ = 0;  // steps of the whole run (pass 1 knows)
  std::vector<std::uint64_t> block_of_;
  // Regions by base: the index in tl.regions of the open one.
  std::map<std::uint64_t, std::size_t> open_regions_;
  std::uint64_t seen_backend_allocs_ = 0, seen_backend_frees_ = 0;
  std::uint64_t sample_every_ = 1;
  HostClock host1_;
  std::uint64_t live_ = 0, peak_ = 0;
  bool any_alloc_ = false;
  std::uint64_t g_ = 0;
};

// Whole-run counters, read after each pass; a pass's figures are the
// difference from the previous reading.
struct Counters {
  std::uint64_t backend_calls = 0, modeled_ns = 0, hazards = 0;
  std::uint64_t completion_calls = 0;
  Stats stats;
};

// --- Pass 2: measured ---------------------------------------------------
// A fresh device and allocator: the same configuration replays the same
// way, so this pass's state at every step is pass 1's.
class MeasuredPass {
 public:
  MeasuredPass(ReplayState& st, Device& device, const ReplayOptions& options,
               ReplayResult& result);

  absl::Status Run();
  // After Run: the last reading, calls made, steps and the timed loop's
  // nanoseconds (the simulator's work taken out).
  const Counters& last() const { return before_; }
  std::uint64_t calls() const { return calls_; }
  std::uint64_t frees() const { return frees_; }
  std::uint64_t steps() const { return steps_; }
  double elapsed_ns() const { return elapsed_ns_; }

 private:
  Counters ReadCounters();
  template <typename Work>
  void SimWork(Work&& work);
  absl::Status Ops(std::uint64_t k, std::uint64_t* pass_calls,
                   std::uint64_t* pass_ooms);
  absl::Status Drain(std::uint64_t k, std::uint64_t* pass_calls);
  void Record(std::uint64_t pass_calls, std::uint64_t pass_ooms);

  ReplayState& st_;
  Allocator& allocator_;
  SimBackend* const sim_;
  const ReplayOptions& options_;
  ReplayResult& result_;
  HostClock host_;
  Counters before_;
  std::uint64_t calls_ = 0;
  std::uint64_t frees_ = 0;
  std::uint64_t pass_frees_ = 0;  // Deallocate calls of the pass underway
  std::uint64_t steps_ = 0;       // ops and drain frees so far, for `every`
  double elapsed_ns_ = 0;
  // On multi-stream traces the simulator's own work inside the timed loop
  // (its uses, handovers and completions, with its race detector) is timed
  // apart and taken out of ns_per_op, which is the allocator's alone; so is
  // the clock read each such timing leaves in the loop (one read, measured
  // here). Single-stream replays make no simulator call in the loop.
  const bool time_sim_;
  double sim_ns_ = 0;
  std::uint64_t sim_segments_ = 0;
  double clock_read_ns_ = 0;
  // The progress callback is called from inside the timed loop (there is no
  // other place during a long replay), but only every 1% of the ops: one
  // compare per op, and nothing at all when it is null (the default).
  const std::uint64_t progress_total_;
  const std::uint64_t progress_every_;
};

}  // namespace gpualloc::replay::replay_internal

#endif  // GPUALLOC_TOOLS_REPLAY_REPLAY_INTERNAL_H_
