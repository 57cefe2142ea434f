// SPDX-License-Identifier: Apache-2.0
// backends/sim/host_copy.cc: the checks of the simulator's copies.
#include "backends/sim/host_copy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/common/host_copy.h"

namespace gpualloc::sim {

absl::Status CheckCopy(const DeviceInfo& info, SimOp op, DeviceAddress device,
                       const void* host, std::uint64_t bytes, CopyRange range) {
  if (bytes == 0) return absl::OkStatus();
  const char* call = op == SimOp::kCopyToHost ? "CopyToHost" : "CopyFromHost";
  if (absl::Status s = common::CheckHostPointer(
          absl::StrCat("sim: ", call, " on ", info.name), device, host, bytes);
      !s.ok()) {
    return s;
  }
  const std::string what = absl::StrFormat("sim: %s of %d bytes at %#x on %s",
                                           call, bytes, device, info.name);
  switch (range) {
    case CopyRange::kUsable:
      return absl::OkStatus();
    case CopyRange::kReserved:
      return absl::FailedPreconditionError(absl::StrCat(
          what,
          ": the range is reserved address space that is not all mapped with "
          "access set (Map, then SetAccess)"));
    case CopyRange::kElsewhere:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what,
      ": the range is not inside one live allocation, one pool segment, or "
      "mapped memory with access set"));
}

absl::Status FakeMemoryCopy(const DeviceInfo& info, absl::string_view call) {
  return absl::UnimplementedError(absl::StrFormat(
      "sim: %s on device %d (%s): its memory is fake (SimMemory::kFake, "
      "addresses with no bytes behind them), so it lacks the host_copy "
      "capability; copies need SimMemory::kHostBacked",
      call, info.ordinal, info.name));
}

}  // namespace gpualloc::sim
