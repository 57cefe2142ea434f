// SPDX-License-Identifier: Apache-2.0
// backends/sim/call_ledger.cc: call counts, injected faults and the cost
// model.
#include "backends/sim/call_ledger.h"

#include <cstddef>
#include <limits>
#include <utility>

namespace gpualloc {

absl::string_view SimOpName(SimOp op) {
  switch (op) {
    case SimOp::kAllocate:
      return "allocate";
    case SimOp::kFree:
      return "free";
    case SimOp::kFreeBytes:
      return "free_bytes";
    case SimOp::kCreateEvent:
      return "create_event";
    case SimOp::kDestroyEvent:
      return "destroy_event";
    case SimOp::kRecordEvent:
      return "record_event";
    case SimOp::kQueryEvent:
      return "query_event";
    case SimOp::kStreamWaitEvent:
      return "stream_wait_event";
    case SimOp::kSynchronizeEvent:
      return "synchronize_event";
    case SimOp::kPoolAllocate:
      return "pool_allocate";
    case SimOp::kPoolFree:
      return "pool_free";
    case SimOp::kPoolTrim:
      return "pool_trim";
    case SimOp::kConfigurePool:
      return "configure_pool";
    case SimOp::kGetPoolUsage:
      return "get_pool_usage";
    case SimOp::kReserveAddress:
      return "reserve_address";
    case SimOp::kFreeAddress:
      return "free_address";
    case SimOp::kCreatePhysical:
      return "create_physical";
    case SimOp::kReleasePhysical:
      return "release_physical";
    case SimOp::kMap:
      return "map";
    case SimOp::kUnmap:
      return "unmap";
    case SimOp::kSetAccess:
      return "set_access";
    case SimOp::kIsCapturing:
      return "is_capturing";
    case SimOp::kExchangeCaptureMode:
      return "exchange_capture_mode";
    case SimOp::kCopyToHost:
      return "copy_to_host";
    case SimOp::kCopyFromHost:
      return "copy_from_host";
    case SimOp::kHostAllocate:
      return "host_allocate";
    case SimOp::kHostFree:
      return "host_free";
    case SimOp::kGetIpcHandle:
      return "get_ipc_handle";
    case SimOp::kOpenIpcHandle:
      return "open_ipc_handle";
    case SimOp::kCloseIpcHandle:
      return "close_ipc_handle";
    case SimOp::kExportMapping:
      return "export_mapping";
    case SimOp::kImportPhysical:
      return "import_physical";
    case SimOp::kCreateCounters:
      return "create_counters";
    case SimOp::kDestroyCounters:
      return "destroy_counters";
    case SimOp::kWriteCounter:
      return "write_counter";
    case SimOp::kWaitCounter:
      return "wait_counter";
    case SimOp::kCount:
      break;
  }
  return "invalid";
}

namespace sim {

CostModel ResolveCosts(const SimOptions& options, const ArchProfile& profile) {
  const DriverCosts& d = profile.costs;
  const std::pair<SimOp, const CallCost*> from_profile[] = {
      {SimOp::kAllocate, &d.allocate},
      {SimOp::kFree, &d.free},
      {SimOp::kReserveAddress, &d.reserve_address},
      {SimOp::kFreeAddress, &d.free_address},
      {SimOp::kCreatePhysical, &d.create_physical},
      {SimOp::kReleasePhysical, &d.release_physical},
      {SimOp::kMap, &d.map},
      {SimOp::kUnmap, &d.unmap},
      {SimOp::kSetAccess, &d.set_access},
      {SimOp::kCreateCounters, &d.create_counters},
      {SimOp::kDestroyCounters, &d.destroy_counters},
      {SimOp::kWriteCounter, &d.write_counter},
      {SimOp::kWaitCounter, &d.wait_counter}};
  CostModel model;
  model.call_ns = options.cost_ns;
  model.per_mib_ns = options.cost_ns_per_mib;
  for (const auto& [op, cost] : from_profile) {
    const auto index = static_cast<std::size_t>(op);
    if (model.call_ns[index] == SimOptions::kProfileCost) {
      model.call_ns[index] = cost->call_ns;
    }
    if (model.per_mib_ns[index] == SimOptions::kProfileCost) {
      model.per_mib_ns[index] = cost->per_mib_ns;
    }
  }
  // An op the profile has no figure for: a kProfileCost left there costs 0.
  for (std::uint64_t& ns : model.call_ns) {
    if (ns == SimOptions::kProfileCost) ns = 0;
  }
  for (std::uint64_t& ns : model.per_mib_ns) {
    if (ns == SimOptions::kProfileCost) ns = 0;
  }
  model.wait_ns_per_piece = options.host_wait_ns_per_piece != 0
                                ? options.host_wait_ns_per_piece
                                : options.work_ns;
  return model;
}

absl::Status CallLedger::Begin(SimOp op) {
  const int index = OpIndex(op);
  ++calls_[index];
  Fault& fault = faults_[index];
  if (fault.countdown == 0 || --fault.countdown != 0) return absl::OkStatus();
  ++failed_calls_[index];
  return std::exchange(fault.status, absl::OkStatus());
}

void CallLedger::CountUnsupported(SimOp op) {
  const int index = OpIndex(op);
  ++calls_[index];
  ++failed_calls_[index];
}

std::uint64_t CallLedger::CostNs(SimOp op, std::uint64_t bytes) const {
  const int index = OpIndex(op);
  if (index < 0) return 0;
  constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
  const std::uint64_t per_mib = costs_.per_mib_ns[index];
  // Whole MiB, then the rest pro rata; neither product can overflow for
  // sizes below 2^64 / per_mib MiB, and the sum saturates.
  const std::uint64_t whole = bytes / kMiB;
  const std::uint64_t bytes_ns =
      per_mib != 0 &&
              whole > std::numeric_limits<std::uint64_t>::max() / per_mib
          ? std::numeric_limits<std::uint64_t>::max()
          : SaturatingAdd(whole * per_mib, (bytes % kMiB) * per_mib / kMiB);
  return SaturatingAdd(costs_.call_ns[index], bytes_ns);
}

std::uint64_t CallLedger::WaitCostNs(std::uint64_t pieces) const {
  return pieces != 0 && costs_.wait_ns_per_piece >
                            std::numeric_limits<std::uint64_t>::max() / pieces
             ? std::numeric_limits<std::uint64_t>::max()
             : pieces * costs_.wait_ns_per_piece;
}

void CallLedger::FailNthCall(SimOp op, std::uint64_t k, absl::Status status) {
  const int index = OpIndex(op);
  if (index < 0) return;
  if (status.ok()) {
    status =
        absl::InternalError("FailNthCall was given an OK status to fail with");
  }
  faults_[index] = Fault{k, std::move(status)};
}

std::uint64_t CallLedger::calls(SimOp op) const {
  const int index = OpIndex(op);
  return index < 0 ? 0 : calls_[index];
}

std::uint64_t CallLedger::failed_calls(SimOp op) const {
  const int index = OpIndex(op);
  return index < 0 ? 0 : failed_calls_[index];
}

void CallLedger::ResetCounters() {
  calls_ = {};
  failed_calls_ = {};
  modeled_ns_ = 0;
}

}  // namespace sim
}  // namespace gpualloc
