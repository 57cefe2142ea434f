// SPDX-License-Identifier: Apache-2.0
// tools/replay/replay.cc: a trace replayed on a (simulated) device, the JSON
// form of the result, and the PyTorch baseline table.
//
// Two passes over the trace, each on a fresh backend and allocator:
//   1. an untimed pass, first: it runs the trace up to the step after which
//      the live requested bytes first peaked, to read the fragmentation there
//      (the step is known from the trace when every allocation succeeds;
//      after a failed allocation the pass runs to the end, watching for the
//      peak), and, when a timeline is asked for, to the end while recording
//      blocks, regions and samples. It notes what each allocation answered.
//      Run first, it is also the measured pass's warm-up: the heap the
//      simulator's and the allocator's tables grow into is touched (and its
//      page faults paid) outside the timed loop, so that the first
//      configuration replayed in a process, or the first on a larger trace,
//      is not slower than the same configuration replayed again. Its device
//      is destroyed before the measured pass, which reuses its memory;
//   2. the measured pass: only Allocate/Deallocate (plus, on multi-stream
//      traces, the simulator's Use and a periodic CompleteAll, timed apart
//      and taken out) inside the timed loop, so ns_per_op is the allocator's
//      cost and no clock is read per call on one stream. With a repeat count
//      it runs the trace that many times on the same allocator, each time
//      under fresh ids, freeing what is left live at the end of each, and
//      reads the counters after each.
// The simulator's fake addresses are deterministic, so both passes make the
// same calls and see the same layout: pass 1 makes every call pass 2 makes
// (as far as it goes), the failed allocations included (out of memory, the
// allocator collects garbage, trims and waits on the host), and every
// allocation must get the same answer in both, or the replay is an error.
#include "tools/replay/replay.h"

#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"
#include "gpualloc/core/snapshot_json.h"
#include "gpualloc/core/stats_fields.h"
#include "gpualloc/runtime/registry.h"
#include "tools/replay/reference.h"

namespace gpualloc::replay {
namespace {

// Timeline samples of reserved/in-use bytes.
constexpr std::uint64_t kTimelineSamples = 2000;

struct Device {
  std::shared_ptr<Backend> backend;
  std::shared_ptr<SimBackend> sim;  // null for a vendor backend
  std::unique_ptr<Allocator> allocator;
};

// `reference`: a reference model (reference.h) instead of gpualloc.
absl::StatusOr<Device> MakeDevice(const Config& config,
                                  SimClock clock = SimClock::kManual,
                                  const std::string& reference = "") {
  Device d;
  absl::StatusOr<std::shared_ptr<Backend>> backend =
      CreateBackend(config, 0, clock);
  if (!backend.ok()) return backend.status();
  d.backend = std::move(*backend);
  d.sim = std::dynamic_pointer_cast<SimBackend>(d.backend);
  absl::StatusOr<std::unique_ptr<Allocator>> allocator =
      reference.empty() ? CreateAllocator(config.options, d.backend)
                        : CreateReference(reference, d.backend);
  if (!allocator.ok()) return allocator.status();
  d.allocator = std::move(*allocator);
  return d;
}

std::string DeviceName(const Config& config, const DeviceInfo& info) {
  std::string model = info.name;
  if (!config.options.arch.empty() && config.options.arch != "auto") {
    model = config.options.arch;
  } else if (absl::StatusOr<const ArchProfile*> p =
                 FindArchProfile(info.vendor, info.arch_id, info.total_bytes);
             p.ok()) {
    model = std::string((*p)->name);
  }
  return absl::StrFormat("%s %s %.2f GB", info.backend, model,
                         static_cast<double>(info.total_bytes) / 1e9);
}

// The process's minor page faults so far (memory touched for the first
// time); 0 where getrusage fails.
std::uint64_t MinorFaults() {
  struct rusage usage;
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_minflt);
}

// JSON has no NaN or infinity; every ratio here is finite by construction,
// but a 0 is safer than an unparsable line.
std::string JsonDouble(double v) {
  if (!std::isfinite(v)) return "0";
  return absl::StrFormat("%.9g", v);
}

// Appends "k":v to the JSON object being built in *object ("{" and the
// fields so far).
void AppendNumberField(std::string* object, absl::string_view k,
                       std::uint64_t v) {
  if (object->size() > 1) object->push_back(',');
  AppendJsonString(object, k);
  absl::StrAppend(object, ":", v);
}

}  // namespace

void KeepFreedMemoryMapped() {
#if defined(__GLIBC__)
  // The largest threshold glibc takes (32 MiB on 64-bit); setting it also
  // turns off the dynamic threshold, which would otherwise trim again.
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

namespace {

void WarmHeapHeadroom() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  // The measured pass makes the untimed pass's allocations again, but into a
  // heap whose free lists that pass left in another order, so a table may
  // no longer fit where it was and grow the heap past what was ever touched
  // (seen: 2 MiB, 772 page faults, depending only on the heap's start).
  // Touching half the heap's size again above its top (blocks under the
  // mmap threshold, freed into the top, which KeepFreedMemoryMapped keeps)
  // leaves that growth already mapped. Costs that much resident memory.
  constexpr std::size_t kBlock = 4 << 20;
  const std::size_t headroom =
      std::max<std::size_t>(mallinfo2().arena / 2, 2 * kBlock);
  std::vector<void*> blocks;
  for (std::size_t done = 0; done < headroom; done += kBlock) {
    void* b = std::malloc(kBlock);
    if (b == nullptr) break;
    std::memset(b, 0, kBlock);
    blocks.push_back(b);
  }
  for (void* b : blocks) std::free(b);
#endif
}

}  // namespace

Trace OneStream(const Trace& trace) {
  Trace merged = trace;
  for (TraceOp& op : merged.ops) op.stream = 0;
  merged.num_streams = std::min<std::uint64_t>(trace.num_streams, 1);
  return merged;
}

namespace {

// NoWaitBound's model of the device: per stream, the bytes freed on it still
// pending, and the most bytes live plus pending so far.
class NoWaitModel {
 public:
  NoWaitModel(const Trace& trace, const ReplayOptions& options);

  // One pass of the trace, then (repeating) its drain frees.
  void Pass(const Trace& trace, bool drain);
  std::uint64_t peak() const { return peak_; }

 private:
  // Per stream: the bytes freed on it still pending, as (when they complete,
  // bytes) in the order of their frees, which is the order they complete in
  // (a stream's work runs in order). The ops model completes everything at
  // once and uses `done` 0 only.
  struct Pending {
    std::uint64_t done_ns = 0;
    std::uint64_t bytes = 0;
  };

  void Advance(const TraceOp& op);
  void Allocate(const TraceOp& op);
  void Use(std::uint64_t stream);
  void Free(std::uint64_t id, std::uint64_t stream);
  void StepDone();

  // The same choice of model as Replay's.
  const bool timed_;
  const std::uint64_t every_;
  const std::uint64_t work_ns_;
  const std::uint64_t na_;
  std::vector<std::uint64_t> alloc_size_, alloc_stream_;
  std::vector<std::deque<Pending>> pending_;
  // Ops model: whether the stream queued work since the last completion.
  std::vector<std::uint8_t> busy_;
  // Timestamp model: when each stream's queued work is done (the simulator's
  // ready time), the modeled clock, and the host's lag (HostClock's; only
  // a later pass starting over at time 0 moves it, as nothing waits).
  std::vector<std::uint64_t> ready_;
  std::uint64_t now_ = 0, lag_ = 0;
  std::uint64_t live_ = 0, pending_bytes_ = 0, peak_ = 0, steps_ = 0;
  std::vector<std::uint8_t> is_live_;
};

NoWaitModel::NoWaitModel(const Trace& trace, const ReplayOptions& options)
    : timed_(options.work_us > 0 && trace.timed),
      every_(timed_ ? 0 : options.complete_every),
      work_ns_(timed_ ? options.work_us * 1000 : 0),
      na_(trace.num_allocs),
      alloc_size_(na_, 0),
      alloc_stream_(na_, 0),
      is_live_(na_, 0) {
  std::uint64_t num_streams = 0;
  for (const TraceOp& op : trace.ops) {
    num_streams = std::max(num_streams, op.stream + 1);
    if (op.kind != TraceOp::Kind::kAlloc) continue;
    alloc_size_[op.id] = op.size;
    alloc_stream_[op.id] = op.stream;
  }
  pending_.resize(num_streams);
  busy_.assign(num_streams, 0);
  ready_.assign(num_streams, 0);
}

void NoWaitModel::Pass(const Trace& trace, bool drain) {
  for (const TraceOp& op : trace.ops) {
    if (timed_) Advance(op);
    if (op.kind == TraceOp::Kind::kAlloc) {
      Allocate(op);
    } else {
      Free(op.id, op.stream);
    }
    StepDone();
  }
  if (drain) {
    for (std::uint64_t id = 0; id < na_; ++id) {
      if (!is_live_[id]) continue;
      Free(id, alloc_stream_[id]);
      StepDone();
    }
  }
}

// HostClock::Before, then what completed by now.
void NoWaitModel::Advance(const TraceOp& op) {
  const std::uint64_t at = op.time_ns + lag_;
  if (at >= now_) {
    now_ = at;
  } else {
    lag_ = now_ - op.time_ns;
  }
  for (std::deque<Pending>& q : pending_) {
    while (!q.empty() && q.front().done_ns <= now_) {
      pending_bytes_ -= q.front().bytes;
      q.pop_front();
    }
  }
}

// What its own stream has pending first, latest to complete first.
void NoWaitModel::Allocate(const TraceOp& op) {
  std::deque<Pending>& q = pending_[op.stream];
  std::uint64_t want = op.size;
  while (want > 0 && !q.empty()) {
    const std::uint64_t take = std::min(want, q.back().bytes);
    q.back().bytes -= take;
    want -= take;
    pending_bytes_ -= take;
    if (q.back().bytes == 0) q.pop_back();
  }
  live_ += op.size;
  is_live_[op.id] = 1;
  Use(op.stream);
}

void NoWaitModel::Use(std::uint64_t stream) {
  busy_[stream] = 1;
  if (timed_) ready_[stream] = std::max(now_, ready_[stream]) + work_ns_;
}

void NoWaitModel::Free(std::uint64_t id, std::uint64_t stream) {
  const std::uint64_t from = alloc_stream_[id];
  const std::uint64_t size = alloc_size_[id];
  is_live_[id] = 0;
  live_ -= size;
  if (stream != from) {  // a handover: ordered after `from`, then a use
    if (timed_) ready_[stream] = std::max(ready_[stream], ready_[from]);
    Use(stream);
  }
  const bool is_pending = timed_ ? ready_[stream] > now_ : busy_[stream] != 0;
  if (!is_pending || size == 0) return;
  std::deque<Pending>& q = pending_[stream];
  const std::uint64_t done = timed_ ? ready_[stream] : 0;
  if (!q.empty() && q.back().done_ns == done) {
    q.back().bytes += size;
  } else {
    q.push_back({done, size});
  }
  pending_bytes_ += size;
}

void NoWaitModel::StepDone() {
  peak_ = std::max(peak_, live_ + pending_bytes_);
  ++steps_;
  if (every_ != 0 && steps_ % every_ == 0) {
    for (std::deque<Pending>& q : pending_) q.clear();
    std::fill(busy_.begin(), busy_.end(), 0);
    pending_bytes_ = 0;
  }
}

}  // namespace

std::optional<std::uint64_t> NoWaitBound(const Trace& trace,
                                         const ReplayOptions& options) {
  if (trace.num_streams <= 1 || options.one_stream) return std::nullopt;
  NoWaitModel model(trace, options);
  for (std::uint64_t k = 0; k < options.repeat; ++k) {
    model.Pass(trace, options.repeat > 1);
  }
  return model.peak();
}

namespace {

std::string LabelOf(const ConfigOverrides& overrides,
                    const std::string& config_string) {
  if (overrides.name.has_value() && !overrides.name->empty()) {
    return *overrides.name;
  }
  return config_string.empty() ? "defaults" : config_string;
}

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

// Whole-run counters, read after each pass; a pass's figures are the
// difference from the previous reading.
struct Counters {
  std::uint64_t backend_calls = 0, modeled_ns = 0, hazards = 0;
  Stats stats;
};

// The cost of one steady_clock read, measured.
double ClockReadNs() {
  constexpr int kReads = 4096;
  const auto c0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReads; ++i) (void)std::chrono::steady_clock::now();
  const auto c1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(c1 - c0).count() / kReads;
}

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
  std::uint64_t steps_ = 0;  // ops and drain frees so far, for `every`
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
  std::uint64_t calls = 0, ooms = 0;
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
  steps_ = steps;
  return absl::OkStatus();
}

// Pass k's drain frees, timed.
absl::Status MeasuredPass::Drain(std::uint64_t k, std::uint64_t* pass_calls) {
  void** const p_k = st_.ptrs.data() + k * st_.na;
  for (std::uint64_t id = 0; id < st_.na; ++id) {
    if (p_k[id] == nullptr) continue;
    ++*pass_calls;
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
  rep.hazards = now.hazards - before.hazards;
  result_.repetitions.push_back(rep);
  before_ = now;
}

// The whole run's figures: the last reading, but for the peaks, which were
// reset at every pass: their maximum over the passes.
void SetTotals(const Counters& before, ReplayResult* result) {
  Stats stats = before.stats;
  for (const ReplayRepetition& rep : result->repetitions) {
    stats.peak_bytes_in_use =
        std::max(stats.peak_bytes_in_use, rep.peak_bytes_in_use);
    stats.peak_bytes_requested =
        std::max(stats.peak_bytes_requested, rep.peak_bytes_requested);
    stats.peak_bytes_reserved =
        std::max(stats.peak_bytes_reserved, rep.peak_bytes_reserved);
  }
  result->stats = stats;
  result->peak_bytes_in_use = stats.peak_bytes_in_use;
  result->peak_bytes_requested = stats.peak_bytes_requested;
  result->peak_bytes_reserved = stats.peak_bytes_reserved;
  result->final_bytes_reserved = stats.bytes_reserved;
  result->utilization =
      stats.peak_bytes_reserved == 0
          ? 0
          : static_cast<double>(stats.peak_bytes_requested) /
                static_cast<double>(stats.peak_bytes_reserved);
  result->largest_free_block_bytes = stats.largest_free_block_bytes;
  result->backend_allocs = stats.backend_allocs;
  result->backend_frees = stats.backend_frees;
  result->events_recorded = stats.events_recorded;
  result->host_waits = stats.host_waits;
  result->stream_waits = stats.stream_waits;
  result->backend_calls = before.backend_calls;
  result->modeled_backend_ns = before.modeled_ns;
  result->hazards = before.hazards;
}

// Pass 1 must have seen what the measured pass saw, as far as it went.
absl::Status CheckSameAnswers(const Trace& trace, const ReplayState& st,
                              bool record, std::uint64_t total_steps,
                              std::uint64_t steps) {
  const std::vector<std::uint8_t>& outcome = st.outcome;
  const std::vector<std::uint8_t>& failed = st.failed;
  const std::uint64_t na = st.na;
  for (std::uint64_t id = 0; id < failed.size(); ++id) {
    if (outcome[id] == 0 || (outcome[id] == 2) == (failed[id] != 0)) continue;
    return absl::InternalError(absl::StrCat(
        "replay of ", trace.name, " is not deterministic: allocation ", id % na,
        " of pass ", id / na + 1, " ",
        failed[id] ? "failed in the measured pass but succeeded in the untimed "
                     "one"
                   : "succeeded in the measured pass but failed in the untimed "
                     "one"));
  }
  if (record && total_steps != steps) {
    return absl::InternalError(absl::StrCat(
        "replay of ", trace.name, " is not deterministic: ", steps,
        " steps in the measured pass, ", total_steps, " in the untimed one"));
  }
  return absl::OkStatus();
}

// The result's description of the run, before either pass.
ReplayResult DescribeRun(const Trace& trace, const std::string& config_string,
                         const ConfigOverrides& overrides,
                         const ReplayOptions& options) {
  ReplayResult result;
  result.trace = trace.name;
  result.config = config_string;
  result.label = LabelOf(overrides, config_string);
  if (!options.reference.empty()) {
    // The configuration gave the device only.
    result.config.clear();
    result.reference = options.reference;
    result.label = ReferenceLabel(options.reference);
  }
  result.repeat = options.repeat;
  result.complete_every = options.complete_every;
  result.nowait_bound_bytes = NoWaitBound(trace, options);
  return result;
}

}  // namespace

absl::StatusOr<std::string> ConfigLabel(const std::string& config_string) {
  absl::StatusOr<ConfigOverrides> overrides = ParseConfigString(config_string);
  if (!overrides.ok()) return overrides.status();
  return LabelOf(*overrides, config_string);
}

absl::StatusOr<ReplayResult> Replay(const Trace& trace,
                                    const std::string& config_string,
                                    const ReplayOptions& options) {
  if (options.repeat == 0) {
    return absl::InvalidArgumentError("expected a repeat count of at least 1");
  }
  if (options.one_stream) {
    ReplayOptions merged = options;
    merged.one_stream = false;
    absl::StatusOr<ReplayResult> r =
        Replay(OneStream(trace), config_string, merged);
    if (r.ok()) r->one_stream = true;
    return r;
  }
  absl::StatusOr<ConfigOverrides> overrides = ParseConfigString(config_string);
  if (!overrides.ok()) return overrides.status();
  // The simulator unless backend= says otherwise.
  if (!overrides->backend.has_value()) overrides->backend = BackendKind::kSim;
  // An empty environment: a replay must not depend on the caller's GPUALLOC_*
  // variables, or two runs of the same command could disagree.
  absl::StatusOr<Config> config = ResolveConfig(*overrides, MapEnvironment({}));
  if (!config.ok()) return config.status();

  ReplayResult result = DescribeRun(trace, config_string, *overrides, options);
  // The timestamp model needs the trace's times and more than one stream
  // (one stream never waits for another).
  const bool timed_model =
      options.work_us > 0 && trace.timed && trace.num_streams > 1;
  const SimClock clock = timed_model ? SimClock::kModeled : SimClock::kManual;

  // The untimed pass first (on its own device), then the measured one: the
  // untimed pass warms what the first replay of a process (or the first of
  // a larger trace) would otherwise pay inside the timed loop, the page
  // faults of the heap the simulator's and the allocator's tables grow into,
  // so that ns_per_op compares across configurations whatever their order.
  absl::StatusOr<Device> first = MakeDevice(*config, clock, options.reference);
  if (!first.ok()) return first.status();
  result.device = DeviceName(*config, first->backend->info());

  const bool multi_stream = trace.num_streams > 1 && first->sim != nullptr;
  if (multi_stream) {
    result.progress_model = timed_model ? "timestamps" : "ops";
    if (timed_model) result.work_us = options.work_us;
  }
  ReplayState st = MakeReplayState(trace, options, multi_stream, timed_model);
  absl::StatusOr<std::uint64_t> total_steps =
      UntimedPass(st, *first, options, result).Run();
  if (!total_steps.ok()) return total_steps.status();

  // Pass 1's device goes first: the measured pass reuses its memory.
  first->allocator.reset();
  first->sim.reset();
  first->backend.reset();
  WarmHeapHeadroom();
  absl::StatusOr<Device> device = MakeDevice(*config, clock, options.reference);
  if (!device.ok()) return device.status();
  MeasuredPass measured(st, *device, options, result);
  if (absl::Status s = measured.Run(); !s.ok()) return s;

  result.ops = measured.calls();
  result.ns_per_op =
      measured.calls() == 0
          ? 0
          : measured.elapsed_ns() / static_cast<double>(measured.calls());
  for (std::uint64_t id = 0; id < st.failed.size(); ++id) {
    if (st.failed[id]) result.failed_ids.push_back(id);
  }
  SetTotals(measured.last(), &result);
  if (absl::Status s = CheckSameAnswers(trace, st, options.record_timeline,
                                        *total_steps, measured.steps());
      !s.ok()) {
    return s;
  }
  // What the trace left live is freed before the allocator goes (untimed,
  // after every figure was read), so that it has nothing to report.
  for (std::uint64_t j = 0; j < st.ptrs.size(); ++j) {
    if (st.ptrs[j] == nullptr) continue;
    (void)device->allocator->Deallocate(st.ptrs[j],
                                        Stream(st.alloc_stream[j % st.na]));
    st.ptrs[j] = nullptr;
  }
  return result;
}

namespace {

// One pass's counts and peaks as a JSON object.
std::string RepetitionJson(const ReplayRepetition& p) {
  std::string rep = "{";
  auto rnum = [&rep](absl::string_view k, std::uint64_t v) {
    AppendNumberField(&rep, k, v);
  };
  rnum("ops", p.ops);
  rnum("ooms", p.ooms);
  rnum("peak_bytes_in_use", p.peak_bytes_in_use);
  rnum("peak_bytes_requested", p.peak_bytes_requested);
  rnum("peak_bytes_reserved", p.peak_bytes_reserved);
  rnum("backend_allocs", p.backend_allocs);
  rnum("backend_frees", p.backend_frees);
  rnum("backend_calls", p.backend_calls);
  rnum("modeled_backend_ns", p.modeled_backend_ns);
  rnum("events_recorded", p.events_recorded);
  rnum("host_waits", p.host_waits);
  rnum("stream_waits", p.stream_waits);
  rnum("hazards", p.hazards);
  rep.push_back('}');
  return rep;
}

// The statistics at the end of the trace: every Stats field (the rows of
// gpualloc/core/stats_fields.h) under its own name.
std::string StatsJson(const Stats& s) {
  std::string inner = "{";
  ForEachStatsField([&](absl::string_view name, auto member, StatsFieldAge) {
    const auto v = s.*member;
    if constexpr (std::is_same_v<decltype(v), const double>) {
      absl::StrAppend(&inner, ",\"", name, "\":", JsonDouble(v));
    } else {
      AppendNumberField(&inner, name, v);
    }
  });
  inner.push_back('}');
  return inner;
}

}  // namespace

std::string ToJson(const ReplayResult& r) {
  std::string out = "{";
  auto key = [&out](absl::string_view k) {
    if (out.size() > 1) out.push_back(',');
    AppendJsonString(&out, k);
    out.push_back(':');
  };
  auto str = [&](absl::string_view k, absl::string_view v) {
    key(k);
    AppendJsonString(&out, v);
  };
  auto num = [&](absl::string_view k, std::uint64_t v) {
    key(k);
    absl::StrAppend(&out, v);
  };
  auto dbl = [&](absl::string_view k, double v) {
    key(k);
    out += JsonDouble(v);
  };
  str("trace", r.trace);
  str("config", r.config);
  str("label", r.label);
  if (!r.reference.empty()) str("reference", r.reference);
  str("device", r.device);
  num("ops", r.ops);
  num("ooms", r.ooms);
  key("failed_ids");
  out.push_back('[');
  for (std::size_t i = 0; i < r.failed_ids.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, r.failed_ids[i]);
  }
  out.push_back(']');
  num("peak_bytes_in_use", r.peak_bytes_in_use);
  num("peak_bytes_requested", r.peak_bytes_requested);
  num("peak_bytes_reserved", r.peak_bytes_reserved);
  num("final_bytes_reserved", r.final_bytes_reserved);
  dbl("utilization", r.utilization);
  dbl("fragmentation_at_peak", r.fragmentation_at_peak);
  num("largest_free_block_bytes", r.largest_free_block_bytes);
  num("backend_allocs", r.backend_allocs);
  num("backend_frees", r.backend_frees);
  num("backend_calls", r.backend_calls);
  num("modeled_backend_ns", r.modeled_backend_ns);
  num("events_recorded", r.events_recorded);
  num("host_waits", r.host_waits);
  num("stream_waits", r.stream_waits);
  num("hazards", r.hazards);
  dbl("ns_per_op", r.ns_per_op);
  num("timed_page_faults", r.timed_page_faults);
  num("repeat", r.repeat);
  num("complete_every", r.complete_every);
  str("progress_model", r.progress_model);
  num("work_us", r.work_us);
  auto optional_num = [&](absl::string_view k,
                          const std::optional<std::uint64_t>& v) {
    key(k);
    if (v.has_value()) {
      absl::StrAppend(&out, *v);
    } else {
      out += "null";
    }
  };
  optional_num("nowait_bound_bytes", r.nowait_bound_bytes);
  key("one_stream");
  out += r.one_stream ? "true" : "false";
  optional_num("one_stream_peak_bytes_reserved",
               r.one_stream_peak_bytes_reserved);
  key("repetitions");
  out.push_back('[');
  for (std::size_t i = 0; i < r.repetitions.size(); ++i) {
    const ReplayRepetition& p = r.repetitions[i];
    if (i > 0) out.push_back(',');
    out += RepetitionJson(p);
  }
  out.push_back(']');
  key("stats");
  out += StatsJson(r.stats);
  out.push_back('}');
  return out;
}

absl::StatusOr<std::map<std::string, std::uint64_t>> LoadBaseline(
    const std::string& sources_md) {
  std::ifstream in(sources_md);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(sources_md, ": cannot open the baseline"));
  }
  std::map<std::string, std::uint64_t> baseline;
  std::string line;
  std::size_t number = 0;
  bool in_table = false;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    for (auto& c : cells) c = absl::StripAsciiWhitespace(c);
    // "| a | b |" splits into "", "a", "b", "".
    const bool is_row = cells.size() >= 4 && cells.front().empty();
    if (!in_table) {
      in_table =
          is_row && cells[1] == "trace" && cells[2] == "PyTorch peak reserved";
      continue;
    }
    if (!is_row) {
      if (!baseline.empty()) break;  // the end of the table
      continue;
    }
    if (absl::StartsWith(cells[1], "---")) continue;  // the separator row
    // "6.738 GiB": GiB is the table's unit; MiB is accepted too.
    std::vector<absl::string_view> parts =
        absl::StrSplit(cells[2], ' ', absl::SkipEmpty());
    double value = 0;
    double scale = 0;
    if (parts.size() == 2) {
      if (parts[1] == "GiB") scale = 1024.0 * 1024 * 1024;
      if (parts[1] == "MiB") scale = 1024.0 * 1024;
    }
    if (scale == 0 || !absl::SimpleAtod(parts[0], &value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          sources_md, ":", number,
          ": expected a size like \"6.738 GiB\", got \"", cells[2], "\""));
    }
    baseline[std::string(cells[1])] =
        static_cast<std::uint64_t>(std::llround(value * scale));
  }
  if (baseline.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        sources_md,
        ": expected a table \"| trace | PyTorch peak reserved | ... |\", got "
        "none"));
  }
  return baseline;
}

}  // namespace gpualloc::replay
