// SPDX-License-Identifier: Apache-2.0
// tools/replay/replay_passes.cc: Replay's two passes over a trace (see
// replay.cc): the untimed one (fragmentation at the peak, the timeline, the
// answers the measured pass must repeat) and the measured one, with the
// timed loop and everything it calls per op.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/replay/replay.h"
#include "tools/replay/replay_internal.h"

namespace gpualloc::replay::replay_internal {
namespace {

// Timeline samples of reserved/in-use bytes.
constexpr std::uint64_t kTimelineSamples = 2000;

// The process's minor page faults so far (memory touched for the first
// time); 0 where getrusage fails.
std::uint64_t MinorFaults() {
  struct rusage usage;
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_minflt);
}

// A block freed on another stream than the one that allocated it was
// handed over: the program made the freeing stream wait for the allocating
// one and used the block there. The simulator is told so (the freeing
// stream ordered after the allocating one, as an event would, whose work
// may still run; then a use on the freeing stream), or its detector would
// count the program's own handover as the allocator's hazard.
void HandOver(const ReplayState& st, SimBackend* s, const TraceOp& op,
              std::uint64_t trace_id, void* p) {
  if (!st.multi_stream || op.stream == st.alloc_stream[trace_id]) return;
  s->OrderStreams(Stream(op.stream), Stream(st.alloc_stream[trace_id]));
  s->Use(Stream(op.stream), reinterpret_cast<std::uintptr_t>(p), op.size,
         st.work_ns);
}

// From the trace alone (every allocation succeeding): the step after which
// the live requested bytes first peak, and the run's steps.
struct PeakPrediction {
  std::uint64_t peak_step = 0;
  std::uint64_t steps = 0;
};

PeakPrediction PredictPeak(const ReplayState& st) {
  PeakPrediction predicted;
  bool predicted_any = false;
  std::uint64_t live = 0, peak = 0, g = 0;
  std::vector<std::uint8_t> is_live(st.na, 0);
  for (std::uint64_t k = 0; k < st.reps; ++k) {
    for (const TraceOp& op : *st.ops) {
      if (op.kind == TraceOp::Kind::kAlloc) {
        live += op.size;
        is_live[op.id] = 1;
        if (live > peak || !predicted_any) {
          peak = live;
          predicted.peak_step = g;
          predicted_any = true;
        }
      } else {
        live -= op.size;
        is_live[op.id] = 0;
      }
      ++g;
    }
    if (st.drain) {
      // Drain frees only lower the live bytes; they count as steps.
      for (std::uint64_t id = 0; id < st.na; ++id) {
        if (!is_live[id]) continue;
        is_live[id] = 0;
        live -= st.alloc_size[id];
        ++g;
      }
    }
  }
  predicted.steps = g;
  return predicted;
}

// The cost of one steady_clock read, measured.
double ClockReadNs() {
  constexpr int kReads = 4096;
  const auto c0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReads; ++i) (void)std::chrono::steady_clock::now();
  const auto c1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(c1 - c0).count() / kReads;
}

}  // namespace

ReplayState MakeReplayState(const Trace& trace, const ReplayOptions& options,
                            bool multi_stream, bool timed_model) {
  ReplayState st;
  st.ops = &trace.ops;
  st.n = trace.ops.size();
  st.na = trace.num_allocs;
  st.reps = options.repeat;
  st.drain = st.reps > 1;
  st.multi_stream = multi_stream;
  st.every = multi_stream && !timed_model ? options.complete_every : 0;
  st.work_ns = multi_stream && timed_model ? options.work_us * 1000 : 0;
  st.ptrs.assign(st.na * st.reps, nullptr);
  st.failed.assign(st.na * st.reps, 0);
  st.alloc_size.assign(st.na, 0);
  st.alloc_stream.assign(st.na, 0);
  for (const TraceOp& op : trace.ops) {
    if (op.kind != TraceOp::Kind::kAlloc) continue;
    st.alloc_size[op.id] = op.size;
    st.alloc_stream[op.id] = op.stream;
  }
  st.outcome.assign(st.na * st.reps, 0);
  return st;
}

void UntimedPass::SetTimelineMode() {
  tl_.mode = std::string(AllocatorModeName(a1_.options().mode));
  // As the allocator decides (core/config/options.cc): in bfc mode, unless
  // turned off, where the device has virtual memory.
  tl_.expandable = a1_.options().mode == AllocatorMode::kBfc &&
                   a1_.options().expandable != Tristate::kOff &&
                   a1_.device().capabilities.virtual_memory;
  // A reference model's regions are separate device allocations (the
  // async model's are the device's pool).
  if (!options_.reference.empty()) {
    tl_.mode = options_.reference == "async" ? "async" : "bfc";
    tl_.expandable = false;
  }
}

absl::StatusOr<std::uint64_t> UntimedPass::Run() {
  const PeakPrediction predicted = PredictPeak(st_);
  stop_ = record_ ? UINT64_MAX : predicted.peak_step;
  SetTimelineMode();
  block_of_.assign(record_ ? st_.na * st_.reps : 0, 0);
  // Samples every sample_every steps, from the run's steps when every
  // allocation succeeds (an allocation that fails leaves fewer drain
  // frees, so that is at most a few too many samples).
  sample_every_ =
      std::max<std::uint64_t>(1, predicted.steps / kTimelineSamples);
  bool done = false;
  for (std::uint64_t k = 0; k < st_.reps && !done; ++k) {
    // The measured pass resets the peaks at every pass but the first:
    // so does this one.
    if (k > 0) a1_.ResetPeakStats();
    absl::Status s = Pass(k, &done);
    if (!s.ok()) return s;
  }
  Finish(done);
  return total_steps_;
}

// Pass k of the trace, then (repeating) its drain frees.
absl::Status UntimedPass::Pass(std::uint64_t k, bool* done) {
  const std::uint64_t na = st_.na;
  for (std::uint64_t i = 0; i < st_.n; ++i, ++g_) {
    if (g_ > stop_) {
      *done = true;
      break;
    }
    const TraceOp& op = (*st_.ops)[i];
    host1_.Before(sim1_, op, st_.work_ns != 0);
    const std::uint64_t gid = k * na + op.id;
    absl::Status s = op.kind == TraceOp::Kind::kAlloc
                         ? Allocate(op, gid)
                         : Deallocate(op, gid, op.id);
    if (!s.ok()) return s;
  }
  if (!st_.drain || *done) return absl::OkStatus();
  for (std::uint64_t id = 0; id < na; ++id) {
    const std::uint64_t gid = k * na + id;
    if (st_.ptrs[gid] == nullptr) continue;
    if (g_ > stop_) {
      *done = true;
      break;
    }
    TraceOp op;
    op.kind = TraceOp::Kind::kFree;
    op.id = id;
    op.size = st_.alloc_size[id];
    op.stream = st_.alloc_stream[id];
    absl::Status s = Deallocate(op, gid, id);
    if (!s.ok()) return s;
    ++g_;
  }
  return absl::OkStatus();
}

// One allocation (trace id `id` of pass k, renamed `gid`).
absl::Status UntimedPass::Allocate(const TraceOp& op, std::uint64_t gid) {
  const Stream stream(op.stream);
  absl::StatusOr<void*> p = a1_.Allocate(op.size, stream);
  bool new_peak = false;
  if (p.ok()) {
    st_.outcome[gid] = 1;
    st_.ptrs[gid] = *p;
    if (st_.multi_stream) {
      sim1_->Use(stream, reinterpret_cast<std::uintptr_t>(*p), op.size,
                 st_.work_ns);
    }
    live_ += op.size;
    if (live_ > peak_ || !any_alloc_) {
      peak_ = live_;
      any_alloc_ = true;
      new_peak = true;
    }
    if (record_) {
      block_of_[gid] = tl_.blocks.size();
      TimelineBlock b;
      b.id = gid;
      b.address = reinterpret_cast<std::uintptr_t>(*p);
      b.size = op.size;
      b.alloc_op = g_;
      b.free_op = UINT64_MAX;  // never freed: the run's end, set below
      b.stream = op.stream;
      tl_.blocks.push_back(b);
    }
  } else if (absl::IsResourceExhausted(p.status())) {
    st_.outcome[gid] = 2;
    // The peak may now come later than the trace alone says.
    stop_ = UINT64_MAX;
  } else {
    return p.status();
  }
  return AfterStep(new_peak);
}

absl::Status UntimedPass::Deallocate(const TraceOp& op, std::uint64_t gid,
                                     std::uint64_t trace_id) {
  if (st_.outcome[gid] == 1) {
    HandOver(st_, sim1_, op, trace_id, st_.ptrs[gid]);
    absl::Status s = a1_.Deallocate(st_.ptrs[gid], Stream(op.stream));
    if (!s.ok()) return s;
    st_.ptrs[gid] = nullptr;
    live_ -= op.size;
    if (record_) tl_.blocks[block_of_[gid]].free_op = g_;
  }
  return AfterStep(false);
}

// After step g: completions, the peak's fragmentation, the timeline.
absl::Status UntimedPass::AfterStep(bool new_peak) {
  if (st_.every != 0 && (g_ + 1) % st_.every == 0) sim1_->CompleteAll();
  if (new_peak) result_.fragmentation_at_peak = a1_.GetStats().fragmentation;
  if (!record_) return absl::OkStatus();
  const Stats s = a1_.GetStats();
  // Regions change only when the backend was called: only then is the
  // (costly) snapshot taken and compared with the open regions.
  if (s.backend_allocs != seen_backend_allocs_ ||
      s.backend_frees != seen_backend_frees_) {
    seen_backend_allocs_ = s.backend_allocs;
    seen_backend_frees_ = s.backend_frees;
    TrackRegions();
  }
  if (g_ % sample_every_ == 0) Sample(s, g_);
  return absl::OkStatus();
}

// The snapshot's regions against the open ones: those gone are closed at
// this step, new ones opened.
void UntimedPass::TrackRegions() {
  const Snapshot snap = a1_.GetSnapshot();
  std::map<std::uint64_t, std::uint64_t> now;  // base -> size
  for (const RegionSnapshot& r : snap.regions) now[r.base] = r.size;
  for (auto it = open_regions_.begin(); it != open_regions_.end();) {
    if (!now.contains(it->first)) {
      tl_.regions[it->second].to_op = g_;
      it = open_regions_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [base, size] : now) {
    auto it = open_regions_.find(base);
    // An expandable region grows and shrinks in place: each size is a
    // record of its own, so that what is drawn reserved at an op is
    // what was reserved then (never more than the peak).
    if (it != open_regions_.end() && tl_.regions[it->second].size != size) {
      tl_.regions[it->second].to_op = g_;
      open_regions_.erase(it);
      it = open_regions_.end();
    }
    if (it == open_regions_.end()) {
      TimelineRegion r;
      r.base = base;
      r.size = size;
      r.from_op = g_;
      r.to_op = UINT64_MAX;  // still open: the run's end, set below
      open_regions_.emplace(base, tl_.regions.size());
      tl_.regions.push_back(r);
    }
  }
}

void UntimedPass::Sample(const Stats& s, std::uint64_t step) {
  tl_.sample_ops.push_back(step);
  tl_.sample_reserved.push_back(s.bytes_reserved);
  tl_.sample_in_use.push_back(s.bytes_in_use);
}

void UntimedPass::Finish(bool done) {
  const std::uint64_t g = g_;
  if (!done) total_steps_ = g;
  // The last step is always sampled (the state is still the one after it).
  if (record_ && g > 0 &&
      (tl_.sample_ops.empty() || tl_.sample_ops.back() != g - 1)) {
    Sample(a1_.GetStats(), g - 1);
  }
  // What the trace left live is freed before the allocator goes, so that
  // it has nothing to report.
  for (std::uint64_t j = 0; j < st_.ptrs.size(); ++j) {
    if (st_.ptrs[j] == nullptr) continue;
    (void)a1_.Deallocate(st_.ptrs[j], Stream(st_.alloc_stream[j % st_.na]));
    st_.ptrs[j] = nullptr;
  }
  if (record_) {
    tl_.num_ops = total_steps_;
    for (TimelineBlock& b : tl_.blocks) b.free_op = std::min(b.free_op, g);
    for (TimelineRegion& r : tl_.regions) r.to_op = std::min(r.to_op, g);
  }
}

MeasuredPass::MeasuredPass(ReplayState& st, Device& device,
                           const ReplayOptions& options, ReplayResult& result)
    : st_(st),
      allocator_(*device.allocator),
      sim_(device.sim.get()),
      options_(options),
      result_(result),
      time_sim_(st.multi_stream && device.sim != nullptr),
      progress_total_(st.n * st.reps),
      progress_every_(options.progress
                          ? std::max<std::uint64_t>(1, progress_total_ / 100)
                          : 0) {}

}  // namespace gpualloc::replay::replay_internal

namespace gpualloc::replay {

const std::vector<SimOp>& CompletionOps() {
  // What exists to learn completion: one line per operation.
  static const std::vector<SimOp>* ops = new std::vector<SimOp>{
      SimOp::kRecordEvent,
      SimOp::kQueryEvent,
      SimOp::kWriteCounter,
  };
  return *ops;
}

std::uint64_t CompletionCalls(const SimBackend& sim) {
  std::uint64_t calls = 0;
  for (SimOp op : CompletionOps()) calls += sim.calls(op);
  return calls;
}

double Per100Frees(std::uint64_t n, std::uint64_t frees) {
  return frees == 0
             ? 0
             : 100.0 * static_cast<double>(n) / static_cast<double>(frees);
}

}  // namespace gpualloc::replay

namespace gpualloc::replay::replay_internal {

Counters MeasuredPass::ReadCounters() {
  Counters c;
  // GetStats first: on the async allocator it asks the device for the
  // pool's usage, a call that belongs to this pass.
  c.stats = allocator_.GetStats();
  if (sim_ != nullptr) {
    for (int op = 0; op < kNumSimOps; ++op) {
      c.backend_calls += sim_->calls(static_cast<SimOp>(op));
    }
    c.modeled_ns = sim_->modeled_ns();
    c.hazards = sim_->hazards();
    c.completion_calls = CompletionCalls(*sim_);
  }
  return c;
}

template <typename Work>
void MeasuredPass::SimWork(Work&& work) {
  if (!time_sim_) {
    work();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  work();
  const auto t1 = std::chrono::steady_clock::now();
  sim_ns_ += std::chrono::duration<double, std::nano>(t1 - t0).count();
  ++sim_segments_;
}

absl::Status MeasuredPass::Run() {
  if (time_sim_) clock_read_ns_ = ClockReadNs();
  for (std::uint64_t k = 0; k < st_.reps; ++k) {
    // A pass's peaks are its own (the whole run's are their maximum).
    if (k > 0) allocator_.ResetPeakStats();
    std::uint64_t pass_calls = 0, pass_ooms = 0;
    const std::uint64_t faults_before = MinorFaults();
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = Ops(k, &pass_calls, &pass_ooms);
    if (!s.ok()) return s;
    if (st_.drain) {
      s = Drain(k, &pass_calls);
      if (!s.ok()) return s;
    }
    const auto stop = std::chrono::steady_clock::now();
    result_.timed_page_faults += MinorFaults() - faults_before;
    elapsed_ns_ +=
        std::chrono::duration<double, std::nano>(stop - start).count();
    elapsed_ns_ -=
        sim_ns_ + static_cast<double>(sim_segments_) * clock_read_ns_;
    elapsed_ns_ = std::max(elapsed_ns_, 0.0);
    sim_ns_ = 0;
    sim_segments_ = 0;
    calls_ += pass_calls;
    result_.ooms += pass_ooms;
    Record(pass_calls, pass_ooms);
  }
  if (options_.progress) options_.progress(progress_total_, progress_total_);
  return absl::OkStatus();
}

// Pass k's ops, timed. What the loop reads on every op is copied to locals
// first, as registers.
absl::Status MeasuredPass::Ops(std::uint64_t k, std::uint64_t* pass_calls,
                               std::uint64_t* pass_ooms) {
  const std::vector<TraceOp>& ops = *st_.ops;
  const std::uint64_t n = st_.n;
  const std::uint64_t na = st_.na;
  const bool multi_stream = st_.multi_stream;
  const std::uint64_t every = st_.every;
  const std::uint64_t work_ns = st_.work_ns;
  const std::uint64_t* const alloc_stream = st_.alloc_stream.data();
  const std::uint64_t progress_every = progress_every_;
  Allocator& allocator = allocator_;
  SimBackend* const sim = sim_;
  void** const p_k = st_.ptrs.data() + k * na;
  std::uint8_t* const f_k = st_.failed.data() + k * na;
  std::uint64_t calls = 0, ooms = 0, frees = 0;
  std::uint64_t steps = steps_;
  for (std::uint64_t i = 0; i < n; ++i) {
    const TraceOp& op = ops[i];
    const Stream stream(op.stream);
    if (work_ns != 0) SimWork([&] { host_.Before(sim, op, true); });
    if (op.kind == TraceOp::Kind::kAlloc) {
      ++calls;
      absl::StatusOr<void*> p = allocator.Allocate(op.size, stream);
      if (p.ok()) {
        p_k[op.id] = *p;
        // One stream cannot race with itself, so the hazard detector is fed
        // only when there are several (and single-stream replays keep their
        // ns/op free of simulator work).
        if (multi_stream) {
          SimWork([&] {
            sim->Use(stream, reinterpret_cast<std::uintptr_t>(*p), op.size,
                     work_ns);
          });
        }
      } else if (absl::IsResourceExhausted(p.status())) {
        f_k[op.id] = 1;
        ++ooms;
      } else {
        return p.status();
      }
    } else if (!f_k[op.id]) {
      ++calls;
      ++frees;
      if (op.stream != alloc_stream[op.id]) {
        SimWork([&] { HandOver(st_, sim, op, op.id, p_k[op.id]); });
      }
      absl::Status s = allocator.Deallocate(p_k[op.id], stream);
      if (!s.ok()) return s;
      p_k[op.id] = nullptr;
    }
    ++steps;
    if (every != 0 && steps % every == 0) {
      SimWork([&] { sim->CompleteAll(); });
    }
    if (progress_every != 0 && (k * n + i) % progress_every == 0) {
      options_.progress(k * n + i, progress_total_);
    }
  }
  *pass_calls += calls;
  *pass_ooms += ooms;
  pass_frees_ += frees;
  steps_ = steps;
  return absl::OkStatus();
}

// Pass k's drain frees, timed.
absl::Status MeasuredPass::Drain(std::uint64_t k, std::uint64_t* pass_calls) {
  void** const p_k = st_.ptrs.data() + k * st_.na;
  for (std::uint64_t id = 0; id < st_.na; ++id) {
    if (p_k[id] == nullptr) continue;
    ++*pass_calls;
    ++pass_frees_;
    absl::Status s =
        allocator_.Deallocate(p_k[id], Stream(st_.alloc_stream[id]));
    if (!s.ok()) return s;
    p_k[id] = nullptr;
    ++steps_;
    if (st_.every != 0 && steps_ % st_.every == 0) {
      SimWork([&] { sim_->CompleteAll(); });
    }
  }
  return absl::OkStatus();
}

// The pass just made, from the counters' difference.
void MeasuredPass::Record(std::uint64_t pass_calls, std::uint64_t pass_ooms) {
  const Counters now = ReadCounters();
  const Counters& before = before_;
  ReplayRepetition rep;
  rep.ops = pass_calls;
  rep.frees = pass_frees_;
  frees_ += pass_frees_;
  pass_frees_ = 0;
  rep.ooms = pass_ooms;
  rep.peak_bytes_in_use = now.stats.peak_bytes_in_use;
  rep.peak_bytes_requested = now.stats.peak_bytes_requested;
  rep.peak_bytes_reserved = now.stats.peak_bytes_reserved;
  rep.backend_allocs = now.stats.backend_allocs - before.stats.backend_allocs;
  rep.backend_frees = now.stats.backend_frees - before.stats.backend_frees;
  rep.backend_calls = now.backend_calls - before.backend_calls;
  rep.modeled_backend_ns = now.modeled_ns - before.modeled_ns;
  rep.events_recorded =
      now.stats.events_recorded - before.stats.events_recorded;
  rep.host_waits = now.stats.host_waits - before.stats.host_waits;
  rep.stream_waits = now.stats.stream_waits - before.stats.stream_waits;
  rep.completion_calls = now.completion_calls - before.completion_calls;
  rep.hazards = now.hazards - before.hazards;
  result_.repetitions.push_back(rep);
  before_ = now;
}

}  // namespace gpualloc::replay::replay_internal
