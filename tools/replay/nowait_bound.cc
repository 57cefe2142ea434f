// SPDX-License-Identifier: Apache-2.0
// tools/replay/nowait_bound.cc: the no-wait bound (NoWaitBound, replay.h):
// the peak a multi-stream trace would reserve if no allocation ever waited
// for another stream, from a model of the streams' pending frees.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "tools/replay/replay.h"

namespace gpualloc::replay {
namespace {

// NoWaitBound's model of the device: per stream, the bytes freed on it still
// pending, and the most bytes live plus pending so far. A completion (and,
// timed, the clock's advance) visits only the streams with something
// pending or queued since the last one: its cost follows the work, not the
// number of streams the trace names (a trace of 50,000 streams made each
// step visit them all).
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
  // Lists `stream` among the touched ones (once).
  void Touch(std::uint64_t stream) {
    if (listed_[stream]) return;
    listed_[stream] = 1;
    touched_.push_back(stream);
  }

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
  // The streams that may have pending bytes or be busy (ops model: since
  // the last completion; timed: with pending bytes), each listed once.
  std::vector<std::uint64_t> touched_;
  std::vector<std::uint8_t> listed_;
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
  listed_.assign(num_streams, 0);
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
  for (std::size_t i = 0; i < touched_.size();) {
    std::deque<Pending>& q = pending_[touched_[i]];
    while (!q.empty() && q.front().done_ns <= now_) {
      pending_bytes_ -= q.front().bytes;
      q.pop_front();
    }
    if (q.empty()) {  // nothing pending there now: off the list
      listed_[touched_[i]] = 0;
      touched_[i] = touched_.back();
      touched_.pop_back();
    } else {
      ++i;
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
  if (!timed_) Touch(stream);
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
  Touch(stream);
  pending_bytes_ += size;
}

void NoWaitModel::StepDone() {
  peak_ = std::max(peak_, live_ + pending_bytes_);
  ++steps_;
  if (every_ != 0 && steps_ % every_ == 0) {
    for (const std::uint64_t stream : touched_) {
      pending_[stream].clear();
      busy_[stream] = 0;
      listed_[stream] = 0;
    }
    touched_.clear();
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

}  // namespace gpualloc::replay
