// SPDX-License-Identifier: Apache-2.0
// Stand-in for RMM 25.08's include/rmm/mr/device/device_memory_resource.hpp:
// the base class of RMM's resources up to 25.10 (the same class at
// rmm/mr/device_memory_resource.hpp until 26.04). Its public calls forward
// to the private virtual do_allocate(bytes, stream) /
// do_deallocate(ptr, bytes, stream) / do_is_equal, as RMM's do; the
// deprecated *_async spellings and get_property are left out, and
// do_deallocate is not noexcept (it became so in 25.12).
#ifndef GPUALLOC_STANDIN_RMM_DEVICE_MEMORY_RESOURCE_HPP_
#define GPUALLOC_STANDIN_RMM_DEVICE_MEMORY_RESOURCE_HPP_

#include <cstddef>
#include <rmm/cuda_stream_view.hpp>

namespace rmm {

// rmm/aligned.hpp
static constexpr std::size_t CUDA_ALLOCATION_ALIGNMENT{256};
constexpr std::size_t align_up(std::size_t value,
                               std::size_t alignment) noexcept {
  return (value + (alignment - 1)) & ~(alignment - 1);
}

namespace mr {

class device_memory_resource {
 public:
  device_memory_resource() = default;
  virtual ~device_memory_resource() = default;
  device_memory_resource(device_memory_resource const&) = default;
  device_memory_resource(device_memory_resource&&) noexcept = default;
  device_memory_resource& operator=(device_memory_resource const&) = default;
  device_memory_resource& operator=(device_memory_resource&&) noexcept =
      default;

  void* allocate(std::size_t bytes,
                 cuda_stream_view stream = cuda_stream_view{}) {
    return do_allocate(bytes, stream);
  }
  void deallocate(void* ptr, std::size_t bytes,
                  cuda_stream_view stream = cuda_stream_view{}) {
    do_deallocate(ptr, bytes, stream);
  }
  [[nodiscard]] bool is_equal(
      device_memory_resource const& other) const noexcept {
    return do_is_equal(other);
  }
  void* allocate(std::size_t bytes, std::size_t alignment) {
    return do_allocate(rmm::align_up(bytes, alignment), cuda_stream_view{});
  }
  void deallocate(void* ptr, std::size_t bytes, std::size_t alignment) {
    do_deallocate(ptr, rmm::align_up(bytes, alignment), cuda_stream_view{});
  }
  [[nodiscard]] bool operator==(
      device_memory_resource const& other) const noexcept {
    return do_is_equal(other);
  }
  [[nodiscard]] bool operator!=(
      device_memory_resource const& other) const noexcept {
    return !do_is_equal(other);
  }

 private:
  virtual void* do_allocate(std::size_t bytes, cuda_stream_view stream) = 0;
  virtual void do_deallocate(void* ptr, std::size_t bytes,
                             cuda_stream_view stream) = 0;
  [[nodiscard]] virtual bool do_is_equal(
      device_memory_resource const& other) const noexcept {
    return this == &other;
  }
};

}  // namespace mr
}  // namespace rmm

#endif  // GPUALLOC_STANDIN_RMM_DEVICE_MEMORY_RESOURCE_HPP_
