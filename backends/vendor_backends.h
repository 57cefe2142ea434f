// SPDX-License-Identifier: Apache-2.0
// backends/vendor_backends.h: how the vendor backends plug into the registry.
//
// backends/cuda and backends/hip each define their pair of functions below
// when the build contains them, and meson defines GPUALLOC_HAVE_CUDA_BACKEND /
// GPUALLOC_HAVE_HIP_BACKEND (1) for runtime/backend_factory.cc. Both functions
// load the vendor library at run time: without a driver they return Unavailable
// with the reason (which library, which error), never crash.
#ifndef GPUALLOC_BACKENDS_VENDOR_BACKENDS_H_
#define GPUALLOC_BACKENDS_VENDOR_BACKENDS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "backends/layer.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"

#ifndef GPUALLOC_HAVE_CUDA_BACKEND
#define GPUALLOC_HAVE_CUDA_BACKEND 0
#endif
#ifndef GPUALLOC_HAVE_HIP_BACKEND
#define GPUALLOC_HAVE_HIP_BACKEND 0
#endif

namespace gpualloc::backends {

#if GPUALLOC_HAVE_CUDA_BACKEND
// The CUDA driver-API backend for device `ordinal` (backends/cuda).
absl::StatusOr<std::shared_ptr<Backend>> CreateCudaBackend(const Config& config,
                                                           int ordinal);
absl::StatusOr<int> CudaDeviceCount(const Config& config);
#endif

#if GPUALLOC_HAVE_HIP_BACKEND
// The HIP/ROCm backend for device `ordinal` (backends/hip).
absl::StatusOr<std::shared_ptr<Backend>> CreateHipBackend(const Config& config,
                                                          int ordinal);
absl::StatusOr<int> HipDeviceCount(const Config& config);
#endif

}  // namespace gpualloc::backends

#endif  // GPUALLOC_BACKENDS_VENDOR_BACKENDS_H_
