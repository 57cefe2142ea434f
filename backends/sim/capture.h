// SPDX-License-Identifier: Apache-2.0
// backends/sim/capture.h: the simulator's graph capture (cudaStreamBeginCapture
// and its rules).
//
// A capturing stream keeps the pieces of work Use names (address, bytes,
// duration) instead of queuing them; EndCapture turns them into a graph that
// LaunchGraph queues on a stream, in order, each time (so hazards and access
// are judged at each launch, against the device as it is then).
//
// While at least one stream captures, the backend calls that CUDA refuses
// during a capture (cudaErrorStreamCaptureUnsupported, and the capture becomes
// cudaErrorStreamCaptureInvalidated) are capture violations: recording an
// event on a capturing stream, making a capturing stream wait for an event, a
// host wait (SynchronizeEvent, Free), and a call that allocates, maps or frees
// device memory from a thread whose capture mode is not kRelaxed. Writing a
// completion counter from a capturing stream, or making one wait for a
// counter, is refused the same way: CUDA would capture the write into the
// graph, so it would not say when the work queued so far completed. Each one is
// counted and logged, the call fails with FailedPrecondition, and every
// capture underway is invalidated: its EndCapture fails, naming the first
// violation.
//
// The capture mode belongs to the calling thread (thread_local, as in CUDA);
// the simulator keeps one per thread and backend, so that separate simulated
// devices, and the tests using them, do not see each other's mode.
//
// Not thread-safe (the mode aside): the backend holds its lock around every
// use.
#ifndef GPUALLOC_BACKENDS_SIM_CAPTURE_H_
#define GPUALLOC_BACKENDS_SIM_CAPTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/layer.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// One piece of work a capture recorded: what Use was given.
struct CapturedWork {
  DeviceAddress address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t duration_ns = 0;
};

class Capture {
 public:
  Capture();

  // --- The backend calls (counted by the backend) ---
  bool IsCapturing(Stream stream) const {
    return capturing_.contains(stream.handle);
  }
  // The calling thread's mode for this backend, and the exchange.
  CaptureMode Mode() const;
  CaptureMode ExchangeMode(CaptureMode mode);

  // The capture rule a call of `op` on `stream` (the stream it names, if
  // any) breaks now: OK when it breaks none, else the violation, counted,
  // logged, every capture invalidated, as FailedPrecondition.
  absl::Status Check(SimOp op, Stream stream);

  // --- The program's side ---
  absl::Status Begin(Stream stream);
  absl::StatusOr<SimGraph> End(Stream stream);
  // Records the piece when `stream` captures (true), else false.
  bool Record(Stream stream, DeviceAddress address, std::uint64_t bytes,
              std::uint64_t duration_ns);
  // The graph's work; InvalidArgument naming `call` for an unknown graph.
  absl::StatusOr<std::vector<CapturedWork>> Graph(SimGraph graph,
                                                  const char* call) const;
  absl::Status Destroy(SimGraph graph);

  std::uint64_t violations() const { return violations_; }
  const std::vector<std::string>& violation_log() const { return log_; }

 private:
  struct Underway {
    std::vector<CapturedWork> work;
    std::string invalidated_by;  // the first violation; empty: valid
  };

  // Counts, logs and returns the violation `why` of `call`, invalidating
  // every capture underway.
  absl::Status Violation(const char* call, const std::string& why);
  // "stream 0x1" or "streams 0x1, 0x2": the streams capturing now.
  std::string CapturingStreams() const;

  const std::uint64_t id_;  // this backend's key in the threads' modes
  absl::btree_map<std::uintptr_t, Underway> capturing_;
  absl::btree_map<SimGraph, std::vector<CapturedWork>> graphs_;
  SimGraph next_graph_ = 1;
  std::uint64_t violations_ = 0;
  std::vector<std::string> log_;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_CAPTURE_H_
