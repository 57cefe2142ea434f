// SPDX-License-Identifier: Apache-2.0
// backends/sim/call_ledger.h: the simulator's record of its calls: how many
// of each operation, how many failed, the pending injected faults, and the
// modeled cost of the successful ones (per call plus per MiB, by
// architecture profile unless the options say otherwise, and the host waits).
//
// Not thread-safe: the backend holds its lock around every use.
#ifndef GPUALLOC_BACKENDS_SIM_CALL_LEDGER_H_
#define GPUALLOC_BACKENDS_SIM_CALL_LEDGER_H_

#include <array>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "backends/layer.h"
#include "backends/sim/sim_util.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/backends/sim_backend.h"

namespace gpualloc::sim {

// The cost model after SimOptions' kProfileCost entries took the profile's
// figures.
struct CostModel {
  std::array<std::uint64_t, kNumSimOps> call_ns = {};
  std::array<std::uint64_t, kNumSimOps> per_mib_ns = {};
  std::uint64_t wait_ns_per_piece = 0;
};

CostModel ResolveCosts(const SimOptions& options, const ArchProfile& profile);

class CallLedger {
 public:
  explicit CallLedger(const CostModel& costs) : costs_(costs) {}

  // Counts a call of `op` and fires its pending fault when it is due (the
  // call then counts as failed).
  absl::Status Begin(SimOp op);
  // Counts the outcome of a call of `op` that handled `bytes` and passes
  // `result` through: a success adds its cost, a failure counts as failed.
  template <typename T>
  T End(SimOp op, T result, std::uint64_t bytes) {
    if (result.ok()) {
      Charge(op, bytes);
    } else {
      ++failed_calls_[OpIndex(op)];
    }
    return result;
  }
  // A call the device lacks the capability for: counted as a failed call.
  void CountUnsupported(SimOp op);

  // Adds what the device pays for `op` handling `bytes` (a pool segment taken
  // or returned), or `ns` of host waiting, to the modeled cost.
  void Charge(SimOp op, std::uint64_t bytes) { AddNs(CostNs(op, bytes)); }
  void AddNs(std::uint64_t ns) { modeled_ns_ = SaturatingAdd(modeled_ns_, ns); }
  // What one successful call of `op` handling `bytes` costs.
  std::uint64_t CostNs(SimOp op, std::uint64_t bytes) const;
  // Manual clock: the modeled cost of a host wait that completes `pieces`
  // pending pieces on one stream (the stream where it completes the most).
  std::uint64_t WaitCostNs(std::uint64_t pieces) const;

  void FailNthCall(SimOp op, std::uint64_t k, absl::Status status);
  void ClearFaults() { faults_ = {}; }
  std::uint64_t calls(SimOp op) const;
  std::uint64_t failed_calls(SimOp op) const;
  std::uint64_t modeled_ns() const { return modeled_ns_; }
  void ResetCounters();

 private:
  // A pending fault: the `countdown`-th call fails with `status`; 0 is none.
  struct Fault {
    std::uint64_t countdown = 0;
    absl::Status status;
  };

  const CostModel costs_;
  std::array<Fault, kNumSimOps> faults_;
  std::array<std::uint64_t, kNumSimOps> calls_ = {};
  std::array<std::uint64_t, kNumSimOps> failed_calls_ = {};
  std::uint64_t modeled_ns_ = 0;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_CALL_LEDGER_H_
