// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_registry.cc: the HIP backend's entry into the registry
// (backends/vendor_backends.h): the process-wide runtime, loaded once.

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/hip/hip_api.h"
#include "backends/hip/hip_backend.h"
#include "backends/vendor_backends.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"

namespace gpualloc::backends {

absl::StatusOr<std::shared_ptr<Backend>> CreateHipBackend(const Config& config,
                                                          int ordinal) {
  absl::StatusOr<std::shared_ptr<const hip::HipApi>> api = hip::SharedHipApi();
  if (!api.ok()) return api.status();
  hip::HipBackendOptions options;
  options.ordinal = ordinal;
  options.memory_kind = config.memory_kind;
  absl::StatusOr<std::shared_ptr<hip::HipBackend>> backend =
      hip::HipBackend::Create(*std::move(api), options);
  if (!backend.ok()) return backend.status();
  return std::shared_ptr<Backend>(*std::move(backend));
}

absl::StatusOr<int> HipDeviceCount(const Config&) {
  absl::StatusOr<std::shared_ptr<const hip::HipApi>> api = hip::SharedHipApi();
  if (!api.ok()) return api.status();
  return hip::HipDeviceCountWith(**api);
}

}  // namespace gpualloc::backends
