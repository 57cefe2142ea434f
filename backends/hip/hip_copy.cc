// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_copy.cc: the HIP backend's copies between device and host
// memory (hipMemcpy with hipMemcpyDeviceToHost / hipMemcpyHostToDevice),
// present when the runtime has hipMemcpy (capabilities.host_copy).
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/common/host_copy.h"
#include "backends/hip/hip_backend.h"
#include "backends/hip/hip_internal.h"

namespace gpualloc::hip {

using internal::Hex;
using internal::ToPointer;

absl::Status HipBackend::HostCopy(DeviceAddress device, void* destination,
                                  const void* source, std::uint64_t bytes,
                                  hipMemcpyKind kind) {
  const bool to_host = kind == hipMemcpyDeviceToHost;
  const char* direction =
      to_host ? "hipMemcpyDeviceToHost" : "hipMemcpyHostToDevice";
  const void* host = to_host ? destination : source;
  // A copy of 0 bytes, or one with a null host pointer, never reaches the
  // runtime.
  if (bytes == 0 || host == nullptr) {
    return common::CheckHostPointer(absl::StrCat("hipMemcpy ", direction),
                                    device, host, bytes);
  }
  return OnDevice<absl::Status>([&]() -> absl::Status {
    const hipError_t e = api_->Memcpy(destination, source, bytes, kind);
    if (e == hipSuccess) return absl::OkStatus();
    return HipErrorStatus(*api_, e,
                          absl::StrCat("hipMemcpy(", Hex(device), ", ", bytes,
                                       " bytes, ", direction, ")"));
  });
}

absl::Status HipBackend::CopyToHost(void* host, DeviceAddress source,
                                    std::uint64_t bytes) {
  if (!info_.capabilities.host_copy) {
    return NotSupported("CopyToHost", "host_copy");
  }
  return HostCopy(source, host, ToPointer(source), bytes,
                  hipMemcpyDeviceToHost);
}

absl::Status HipBackend::CopyFromHost(DeviceAddress destination,
                                      const void* host, std::uint64_t bytes) {
  if (!info_.capabilities.host_copy) {
    return NotSupported("CopyFromHost", "host_copy");
  }
  return HostCopy(destination, ToPointer(destination), host, bytes,
                  hipMemcpyHostToDevice);
}

}  // namespace gpualloc::hip
