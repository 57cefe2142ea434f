// SPDX-License-Identifier: Apache-2.0
// Stand-in for RMM's include/rmm/cuda_stream_view.hpp, the same in 25.08 and
// 26.06 (and the definitions of src/cuda_stream_view.cpp): a non-owning view of
// a cudaStream_t, from one or from a cuda::stream_ref (not from the literal 0
// or nullptr); the default is the default stream (0). No synchronize(): there
// is no device.
#ifndef GPUALLOC_STANDIN_RMM_CUDA_STREAM_VIEW_HPP_
#define GPUALLOC_STANDIN_RMM_CUDA_STREAM_VIEW_HPP_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cuda/stream_ref>

namespace rmm {

class cuda_stream_view {
 public:
  cuda_stream_view() = default;
  cuda_stream_view(int) = delete;
  cuda_stream_view(std::nullptr_t) = delete;
  cuda_stream_view(cudaStream_t stream) noexcept : stream_{stream} {}
  cuda_stream_view(cuda::stream_ref stream) noexcept : stream_{stream.get()} {}
  [[nodiscard]] cudaStream_t value() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  operator cuda::stream_ref() const noexcept { return stream_; }
  [[nodiscard]] bool is_per_thread_default() const noexcept {
    return stream_ == cudaStreamPerThread;
  }
  [[nodiscard]] bool is_default() const noexcept {
    return stream_ == cudaStreamLegacy || stream_ == nullptr;
  }

 private:
  cudaStream_t stream_{};
};

static constexpr cuda_stream_view cuda_stream_default{};

inline bool operator==(cuda_stream_view lhs, cuda_stream_view rhs) {
  return lhs.value() == rhs.value();
}
inline bool operator!=(cuda_stream_view lhs, cuda_stream_view rhs) {
  return !(lhs == rhs);
}

}  // namespace rmm

#endif  // GPUALLOC_STANDIN_RMM_CUDA_STREAM_VIEW_HPP_
