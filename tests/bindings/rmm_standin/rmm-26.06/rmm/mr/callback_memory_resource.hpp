// SPDX-License-Identifier: Apache-2.0
// Stand-in for RMM 26.06's include/rmm/mr/callback_memory_resource.hpp (and
// detail/callback_memory_resource_impl.hpp): device_memory_resource is gone;
// a resource is a class of CCCL's resource concepts, here one built from the
// same two callbacks as before (their types did not change), shared between
// copies (RMM derives it from cuda::mr::shared_resource<impl>).
#ifndef GPUALLOC_STANDIN_RMM_CALLBACK_MEMORY_RESOURCE_HPP_
#define GPUALLOC_STANDIN_RMM_CALLBACK_MEMORY_RESOURCE_HPP_

#include <cstddef>
#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <functional>
#include <memory>
#include <rmm/cuda_stream_view.hpp>
#include <utility>

namespace rmm {
namespace mr {

using allocate_callback_t =
    std::function<void*(std::size_t, cuda_stream_view, void*)>;
using deallocate_callback_t =
    std::function<void(void*, std::size_t, cuda_stream_view, void*)>;

class callback_memory_resource {
 public:
  friend void get_property(callback_memory_resource const&,
                           cuda::mr::device_accessible) noexcept {}
  callback_memory_resource(allocate_callback_t allocate_callback,
                           deallocate_callback_t deallocate_callback,
                           void* allocate_callback_arg = nullptr,
                           void* deallocate_callback_arg = nullptr)
      : impl_(std::make_shared<impl>(
            impl{std::move(allocate_callback), std::move(deallocate_callback),
                 allocate_callback_arg, deallocate_callback_arg})) {}
  callback_memory_resource() = delete;

  void* allocate(cuda::stream_ref stream, std::size_t bytes,
                 std::size_t alignment = alignof(std::max_align_t)) {
    (void)alignment;
    return impl_->allocate(bytes, stream, impl_->allocate_arg);
  }
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment = alignof(std::max_align_t)) noexcept {
    (void)alignment;
    impl_->deallocate(ptr, bytes, stream, impl_->deallocate_arg);
  }
  void* allocate_sync(std::size_t bytes,
                      std::size_t alignment = alignof(std::max_align_t)) {
    return allocate(cudaStream_t{nullptr}, bytes, alignment);
  }
  void deallocate_sync(
      void* ptr, std::size_t bytes,
      std::size_t alignment = alignof(std::max_align_t)) noexcept {
    deallocate(cudaStream_t{nullptr}, ptr, bytes, alignment);
  }
  bool operator==(callback_memory_resource const& other) const noexcept {
    return impl_ == other.impl_;
  }
  bool operator!=(callback_memory_resource const& other) const noexcept {
    return impl_ != other.impl_;
  }

 private:
  struct impl {
    allocate_callback_t allocate;
    deallocate_callback_t deallocate;
    void* allocate_arg;
    void* deallocate_arg;
  };
  std::shared_ptr<impl> impl_;
};

static_assert(cuda::mr::resource_with<callback_memory_resource,
                                      cuda::mr::device_accessible>);

}  // namespace mr
}  // namespace rmm

#endif  // GPUALLOC_STANDIN_RMM_CALLBACK_MEMORY_RESOURCE_HPP_
