// SPDX-License-Identifier: Apache-2.0
// backends/sim/capture.cc: captures, graphs and the capture rules.
#include "backends/sim/capture.h"

#include <atomic>
#include <cstddef>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/sim/sim_util.h"

namespace gpualloc::sim {
namespace {

// How many violations the log keeps.
constexpr std::size_t kViolationLogSize = 64;

std::atomic<std::uint64_t> next_capture_id{1};

// The calling thread's capture mode per backend (absent: kGlobal, CUDA's
// default).
thread_local absl::flat_hash_map<std::uint64_t, CaptureMode> thread_modes;

const char* ModeName(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::kGlobal:
      return "kGlobal";
    case CaptureMode::kThreadLocal:
      return "kThreadLocal";
    case CaptureMode::kRelaxed:
      return "kRelaxed";
  }
  return "invalid";
}

// Which capture rule a call can break.
enum class Rule {
  kNone,
  // RecordEvent, StreamWaitEvent, WriteCounter, WaitCounter on a capturing
  // stream
  kOnCapturingStream,
  // SynchronizeEvent, Free, CopyToHost, CopyFromHost, HostFree,
  // DestroyCounters
  kHostWait,
  kDeviceMemory,  // allocates, maps or frees, unless kRelaxed
};

struct CallRule {
  Rule rule = Rule::kNone;
  const char* call = "";
};

CallRule RuleOf(SimOp op) {
  switch (op) {
    case SimOp::kRecordEvent:
      return {Rule::kOnCapturingStream, "RecordEvent"};
    case SimOp::kStreamWaitEvent:
      return {Rule::kOnCapturingStream, "StreamWaitEvent"};
    case SimOp::kWriteCounter:
      return {Rule::kOnCapturingStream, "WriteCounter"};
    case SimOp::kWaitCounter:
      return {Rule::kOnCapturingStream, "WaitCounter"};
    case SimOp::kDestroyCounters:
      return {Rule::kHostWait, "DestroyCounters"};
    case SimOp::kCreateCounters:
      return {Rule::kDeviceMemory, "CreateCounters"};
    case SimOp::kSynchronizeEvent:
      return {Rule::kHostWait, "SynchronizeEvent"};
    case SimOp::kFree:
      return {Rule::kHostWait, "Free"};
    case SimOp::kCopyToHost:
      return {Rule::kHostWait, "CopyToHost"};
    case SimOp::kCopyFromHost:
      return {Rule::kHostWait, "CopyFromHost"};
    case SimOp::kHostFree:
      return {Rule::kHostWait, "HostFree"};
    case SimOp::kHostAllocate:
      return {Rule::kDeviceMemory, "HostAllocate"};
    case SimOp::kAllocate:
      return {Rule::kDeviceMemory, "Allocate"};
    case SimOp::kReserveAddress:
      return {Rule::kDeviceMemory, "ReserveAddress"};
    case SimOp::kFreeAddress:
      return {Rule::kDeviceMemory, "FreeAddress"};
    case SimOp::kCreatePhysical:
      return {Rule::kDeviceMemory, "CreatePhysical"};
    case SimOp::kReleasePhysical:
      return {Rule::kDeviceMemory, "ReleasePhysical"};
    case SimOp::kMap:
      return {Rule::kDeviceMemory, "Map"};
    case SimOp::kUnmap:
      return {Rule::kDeviceMemory, "Unmap"};
    case SimOp::kSetAccess:
      return {Rule::kDeviceMemory, "SetAccess"};
    case SimOp::kPoolAllocate:
      return {Rule::kDeviceMemory, "PoolAllocate"};
    case SimOp::kPoolFree:
      return {Rule::kDeviceMemory, "PoolFree"};
    case SimOp::kPoolTrim:
      return {Rule::kDeviceMemory, "PoolTrim"};
    default:
      return {};
  }
}

// Why a call of `op` may not name a capturing stream.
const char* CapturingStreamRule(SimOp op) {
  switch (op) {
    case SimOp::kRecordEvent:
      return "an event may not be recorded on a capturing stream";
    case SimOp::kWriteCounter:
      // CUDA would capture the write into the graph: it would happen at each
      // launch, not after the work queued so far, which is what the caller
      // wants to learn.
      return "a counter written from a capturing stream is written by the "
             "graph's launches, not after the work queued so far";
    case SimOp::kWaitCounter:
      return "a capturing stream may not be made to wait for a counter";
    default:
      return "a capturing stream may not be made to wait for an event";
  }
}

}  // namespace

Capture::Capture() : id_(next_capture_id.fetch_add(1)) {}

CaptureMode Capture::Mode() const {
  auto it = thread_modes.find(id_);
  return it == thread_modes.end() ? CaptureMode::kGlobal : it->second;
}

CaptureMode Capture::ExchangeMode(CaptureMode mode) {
  CaptureMode& slot =
      thread_modes.try_emplace(id_, CaptureMode::kGlobal).first->second;
  return std::exchange(slot, mode);
}

absl::Status Capture::Check(SimOp op, Stream stream) {
  if (capturing_.empty()) return absl::OkStatus();
  const CallRule r = RuleOf(op);
  switch (r.rule) {
    case Rule::kNone:
      return absl::OkStatus();
    case Rule::kOnCapturingStream:
      if (!IsCapturing(stream)) return absl::OkStatus();
      return Violation(
          r.call,
          absl::StrFormat("%s on stream %#x, which is capturing a graph: %s",
                          r.call, stream.handle, CapturingStreamRule(op)));
    case Rule::kHostWait:
      return Violation(
          r.call,
          absl::StrCat(r.call, " while ", CapturingStreams(),
                       " capturing a graph: the host may not wait for device "
                       "work during a capture",
                       op == SimOp::kFree
                           ? " (Free synchronizes the device, like cudaFree)"
                           : ""));
    case Rule::kDeviceMemory: {
      const CaptureMode mode = Mode();
      if (mode == CaptureMode::kRelaxed) return absl::OkStatus();
      return Violation(
          r.call, absl::StrCat(r.call, " while ", CapturingStreams(),
                               " capturing a graph, from a thread in capture "
                               "mode ",
                               ModeName(mode),
                               ": a call that allocates, maps or frees device "
                               "memory needs kRelaxed (ExchangeCaptureMode)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Capture::Violation(const char* call, const std::string& why) {
  ++violations_;
  if (log_.size() < kViolationLogSize) log_.push_back(why);
  for (auto& [handle, underway] : capturing_) {
    if (underway.invalidated_by.empty()) underway.invalidated_by = why;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "sim: capture violation (cudaErrorStreamCaptureUnsupported): ", why, "; ",
      call, " did nothing, and every capture underway is invalidated"));
}

std::string Capture::CapturingStreams() const {
  std::vector<std::string> names;
  for (const auto& [handle, underway] : capturing_) {
    names.push_back(absl::StrFormat("%#x", handle));
  }
  return absl::StrCat(names.size() == 1 ? "stream " : "streams ",
                      absl::StrJoin(names, ", "),
                      names.size() == 1 ? " is" : " are");
}

absl::Status Capture::Begin(Stream stream) {
  if (IsCapturing(stream)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "sim: BeginCapture on stream %#x, which is already capturing",
        stream.handle));
  }
  capturing_.emplace(stream.handle, Underway{});
  return absl::OkStatus();
}

absl::StatusOr<SimGraph> Capture::End(Stream stream) {
  auto it = capturing_.find(stream.handle);
  if (it == capturing_.end()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("sim: EndCapture on stream %#x, which is not capturing",
                        stream.handle));
  }
  Underway underway = std::move(it->second);
  capturing_.erase(it);
  if (!underway.invalidated_by.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "sim: EndCapture on stream %#x: the capture was invalidated "
        "(cudaErrorStreamCaptureInvalidated) by its first violation: %s",
        stream.handle, underway.invalidated_by));
  }
  const SimGraph graph = next_graph_++;
  graphs_.emplace(graph, std::move(underway.work));
  return graph;
}

bool Capture::Record(Stream stream, DeviceAddress address, std::uint64_t bytes,
                     std::uint64_t duration_ns) {
  auto it = capturing_.find(stream.handle);
  if (it == capturing_.end()) return false;
  it->second.work.push_back({address, bytes, duration_ns});
  return true;
}

absl::StatusOr<std::vector<CapturedWork>> Capture::Graph(
    SimGraph graph, const char* call) const {
  auto it = graphs_.find(graph);
  if (it == graphs_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sim: %s of graph %d: no such graph (never made by EndCapture, or "
        "destroyed)",
        call, graph));
  }
  return it->second;
}

absl::Status Capture::Destroy(SimGraph graph) {
  if (graphs_.erase(graph) != 0) return absl::OkStatus();
  return Graph(graph, "DestroyGraph").status();
}

}  // namespace gpualloc::sim
