// SPDX-License-Identifier: Apache-2.0
// backends/common/host_copy.h: the argument check every backend makes before
// a copy between device and host memory (Backend::CopyToHost, CopyFromHost),
// so that a null host pointer never reaches a vendor call.
#ifndef GPUALLOC_BACKENDS_COMMON_HOST_COPY_H_
#define GPUALLOC_BACKENDS_COMMON_HOST_COPY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::common {

// InvalidArgument naming `call`, the device address and the size when `host`
// is null and there are bytes to copy; OK otherwise (a copy of 0 bytes does
// nothing, whatever its pointers).
inline absl::Status CheckHostPointer(absl::string_view call,
                                     DeviceAddress device, const void* host,
                                     std::uint64_t bytes) {
  if (host != nullptr || bytes == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s(%#x, %d bytes): the host pointer is null", call, device, bytes));
}

}  // namespace gpualloc::common

#endif  // GPUALLOC_BACKENDS_COMMON_HOST_COPY_H_
