// SPDX-License-Identifier: Apache-2.0
// backends/sim/host_copy.h: the checks of the simulator's copies between
// device and host memory (CopyToHost, CopyFromHost) and their messages.
// The backend finds where the device range lies; the memcpy is its own.
#ifndef GPUALLOC_BACKENDS_SIM_HOST_COPY_H_
#define GPUALLOC_BACKENDS_SIM_HOST_COPY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// Where the device range of a copy lies.
enum class CopyRange {
  kUsable,    // one live allocation, one pool segment, or accessible memory
  kReserved,  // inside one reservation, but not all mapped with access set
  kElsewhere,
};

// The outcome of the checks of a copy (`op`: kCopyToHost or kCopyFromHost)
// of `bytes` at `device`: OK when the copy may go ahead (0 bytes always may),
// InvalidArgument for a null `host` or a range elsewhere, FailedPrecondition
// for a reserved range, each naming the call and the address.
absl::Status CheckCopy(const DeviceInfo& info, SimOp op, DeviceAddress device,
                       const void* host, std::uint64_t bytes, CopyRange range);

// `call` on a device with fake memory: Unimplemented naming the mode.
absl::Status FakeMemoryCopy(const DeviceInfo& info, absl::string_view call);

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_HOST_COPY_H_
