// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_internal.h: what the CUDA backend's sources share:
// handle conversions, the primary-context switch and the per-call wrapper,
// and the wording of out-of-memory answers.
#ifndef GPUALLOC_BACKENDS_CUDA_CUDA_INTERNAL_H_
#define GPUALLOC_BACKENDS_CUDA_CUDA_INTERNAL_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "backends/common/scoped_current.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::cuda::internal {

inline std::string Hex(std::uint64_t value) {
  return absl::StrFormat("%#x", value);
}

inline CUmemAllocationProp PinnedOn(CUdevice device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Makes `context` current on the calling thread for one backend call and puts
// the thread's previous context back when it goes out of scope, so that a
// thread working on another device (or with no context) is left as it was.
class ScopedContext : public common::ScopedCurrent<CUcontext> {
 public:
  ScopedContext(const CudaDriverApi& api, CUcontext context, int ordinal);
};

// The per-call wrapper: runs `body` with `context` current, or answers why it
// could not be made current.
template <typename T, typename Body>
T InContext(const CudaDriverApi& api, CUcontext context, int ordinal,
            Body&& body) {
  return common::OnCurrent<T>(ScopedContext(api, context, ordinal),
                              std::forward<Body>(body));
}

// Adds what the device has free to an out-of-memory status.
absl::Status Explain(const CudaDriverApi& api, absl::Status status);

// ResourceExhausted: `bytes` are more than the device's `total_bytes`.
absl::Status TooBig(absl::string_view call, std::uint64_t bytes,
                    std::uint64_t total_bytes);

}  // namespace gpualloc::cuda::internal

#endif  // GPUALLOC_BACKENDS_CUDA_CUDA_INTERNAL_H_
