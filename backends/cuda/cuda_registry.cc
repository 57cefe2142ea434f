// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_registry.cc: the CUDA backend as the registry reaches it
// (backends/vendor_backends.h): the process's driver, loaded once.
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/vendor_backends.h"

namespace gpualloc::backends {

absl::StatusOr<std::shared_ptr<Backend>> CreateCudaBackend(const Config&,
                                                           int ordinal) {
  absl::StatusOr<std::shared_ptr<const cuda::CudaDriverApi>> api =
      cuda::SharedCudaDriver();
  if (!api.ok()) return api.status();
  absl::StatusOr<std::shared_ptr<cuda::CudaBackend>> backend =
      cuda::CudaBackend::Create(*api, ordinal);
  if (!backend.ok()) return backend.status();
  return std::shared_ptr<Backend>(*std::move(backend));
}

absl::StatusOr<int> CudaDeviceCount(const Config&) {
  absl::StatusOr<std::shared_ptr<const cuda::CudaDriverApi>> api =
      cuda::SharedCudaDriver();
  if (!api.ok()) return api.status();
  const cuda::CudaDriverApi& d = **api;
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) return cuda::CudaError(d, "cuInit(0)", r);
  int count = 0;
  r = d.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) return cuda::CudaError(d, "cuDeviceGetCount", r);
  if (count == 0) {
    return absl::UnavailableError(
        absl::StrCat(d.source, " loaded but the driver sees no CUDA device"));
  }
  return count;
}

}  // namespace gpualloc::backends
