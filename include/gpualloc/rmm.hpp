// SPDX-License-Identifier: Apache-2.0
// gpualloc/rmm.hpp: gpualloc as a RAPIDS RMM memory resource. Header-only,
// over the C API (gpualloc/gpualloc.h); compile it with RMM's headers.
//
//   gpualloc_t* a = nullptr;
//   gpualloc_create_pytorch("", &a);                  // grow on demand
//   gpualloc::RmmMemoryResource mr{a, /*device=*/0};
//   rmm::mr::set_current_device_resource(&mr);        // RMM up to 26.04
//   rmm::device_buffer buf{1 << 20, stream, mr};
//
// Which RMM interface it implements is read from RMM's headers:
//   - RMM up to 26.04 (rmm/mr/device/device_memory_resource.hpp until 25.10,
//     rmm/mr/device_memory_resource.hpp from 25.12): a
//     rmm::mr::device_memory_resource overriding do_allocate(bytes, stream),
//     do_deallocate(ptr, bytes, stream) (noexcept, as from 25.12) and
//     do_is_equal;
//   - RMM from 26.06 (device_memory_resource removed): a resource of CCCL's
//     cuda::mr concepts: allocate(cuda::stream_ref, bytes, alignment),
//     deallocate(stream, ptr, bytes, alignment) noexcept, allocate_sync,
//     deallocate_sync, operator== and the device_accessible property, so it
//     converts to rmm::device_async_resource_ref. Copies share one state (as
//     RMM's shared resources do).
// The free functions RmmAllocateCallback / RmmDeallocateCallback have the
// callback types of rmm::mr::callback_memory_resource (the same in every
// version), with the RmmMemoryResource as their argument.
//
// Streams: RMM's interface is stream-ordered, and gpualloc's is too: a block
// is allocated on the stream given and freed on the stream given (gpualloc
// reuses it at once on that stream, on others once the work queued there
// before the free has completed).
//
// Errors: an allocation that fails throws rmm::out_of_memory (out of
// memory, with gpualloc's report: the request, the limit, what is in use and
// reserved, and a hint) or rmm::bad_alloc (another failure, or an alignment
// that is not a power of two of at most 256 bytes, RMM's rule). A
// deallocation cannot throw: a failed one (a pointer this allocator did not
// hand out, a second free) changes nothing, is written to stderr once, and
// its message is kept in last_error().
//
// Statistics, under RMM's statistics_resource_adaptor names:
// get_bytes_counter() and get_allocations_counter() give {value, peak, total}
// of the bytes requested and of the allocations through this resource;
// gpualloc_stats() gives gpualloc's own for the device (the memory reserved
// from the device, fragmentation, ...).
#ifndef GPUALLOC_RMM_HPP_
#define GPUALLOC_RMM_HPP_

#if __has_include(<rmm/mr/device_memory_resource.hpp>)
#include <rmm/mr/device_memory_resource.hpp>
#define GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE 1
#elif __has_include(<rmm/mr/device/device_memory_resource.hpp>)
#include <rmm/mr/device/device_memory_resource.hpp>
#define GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE 1
#else
#include <cuda/memory_resource>
#include <cuda/stream_ref>
#define GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE 0
#endif
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <rmm/cuda_stream_view.hpp>
#include <rmm/error.hpp>
#include <string>

#include "gpualloc/gpualloc.h"

namespace gpualloc {

// statistics_resource_adaptor::counter's fields: the current value, its peak,
// and the sum of every value added.
struct RmmCounter {
  std::int64_t value = 0;
  std::int64_t peak = 0;
  std::int64_t total = 0;
};

class RmmMemoryResource
#if GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE
    final : public rmm::mr::device_memory_resource
#endif
{
 public:
  // Serves `device` of `allocator`, which must outlive the resource and every
  // block allocated through it. A null allocator or a negative device throws
  // rmm::logic_error naming it.
  RmmMemoryResource(gpualloc_t* allocator, int device)
      : state_(std::make_shared<State>()) {
    if (allocator == nullptr) {
      throw rmm::logic_error(
          "gpualloc::RmmMemoryResource: the allocator handle is NULL");
    }
    if (device < 0) {
      throw rmm::logic_error("gpualloc::RmmMemoryResource: device " +
                             std::to_string(device) +
                             " is not a device ordinal (0, 1, ...)");
    }
    state_->allocator = allocator;
    state_->device = device;
  }

  gpualloc_t* allocator() const noexcept { return state_->allocator; }
  int device() const noexcept { return state_->device; }

  RmmCounter get_bytes_counter() const noexcept {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->bytes;
  }
  RmmCounter get_allocations_counter() const noexcept {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->allocations;
  }
  // gpualloc's statistics of the device; throws rmm::logic_error when they
  // cannot be read.
  gpualloc_stats_t gpualloc_stats() const {
    gpualloc_stats_t s{};
    s.struct_size = sizeof(s);
    if (gpualloc_get_stats(state_->allocator, state_->device, &s) !=
        GPUALLOC_OK) {
      throw rmm::logic_error(std::string("gpualloc::RmmMemoryResource: ") +
                             gpualloc_last_error());
    }
    return s;
  }
  // The message of the latest deallocation that failed ("" if none).
  std::string last_error() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->last_error;
  }

  // What the resource's interface calls, in either RMM version.
  void* Allocate(void* stream, std::size_t bytes, std::size_t alignment) {
    if (alignment == 0 || alignment > 256 ||
        (alignment & (alignment - 1)) != 0) {
      throw rmm::bad_alloc("gpualloc::RmmMemoryResource: alignment " +
                           std::to_string(alignment) +
                           " is not a power of two of at most 256 bytes");
    }
    void* p = nullptr;
    const gpualloc_status_t status =
        gpualloc_malloc(state_->allocator, state_->device, bytes, stream, &p);
    if (status == GPUALLOC_RESOURCE_EXHAUSTED) {
      throw rmm::out_of_memory(gpualloc_last_error());
    }
    if (status != GPUALLOC_OK) throw rmm::bad_alloc(gpualloc_last_error());
    std::lock_guard<std::mutex> lock(state_->mu);
    Add(state_->bytes, static_cast<std::int64_t>(bytes));
    Add(state_->allocations, 1);
    return p;
  }
  void Deallocate(void* stream, void* ptr, std::size_t bytes) noexcept {
    const gpualloc_status_t status =
        gpualloc_free(state_->allocator, state_->device, ptr, stream);
    std::lock_guard<std::mutex> lock(state_->mu);
    if (status != GPUALLOC_OK) {
      try {
        state_->last_error = gpualloc_last_error();
      } catch (...) {  // out of host memory: the message stays in gpualloc's
      }
      if (!state_->reported) {
        state_->reported = true;
        std::fprintf(stderr,
                     "gpualloc::RmmMemoryResource: %s (reported once; later "
                     "failures: last_error())\n",
                     gpualloc_last_error());
      }
      return;
    }
    if (ptr == nullptr) return;
    state_->bytes.value -= static_cast<std::int64_t>(bytes);
    state_->allocations.value -= 1;
  }

#if GPUALLOC_RMM_DEVICE_MEMORY_RESOURCE

 private:
  void* do_allocate(std::size_t bytes, rmm::cuda_stream_view stream) override {
    return Allocate(stream.value(), bytes, 256);
  }
  void do_deallocate(void* ptr, std::size_t bytes,
                     rmm::cuda_stream_view stream) noexcept override {
    Deallocate(stream.value(), ptr, bytes);
  }
  bool do_is_equal(
      const rmm::mr::device_memory_resource& other) const noexcept override {
    const auto* o = dynamic_cast<const RmmMemoryResource*>(&other);
    return o != nullptr && o->state_ == state_;
  }

#else  // RMM 26.06 and later: CCCL's resource concepts.

  void* allocate(cuda::stream_ref stream, std::size_t bytes,
                 std::size_t alignment = 256) {
    return Allocate(stream.get(), bytes, alignment);
  }
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t /*alignment*/ = 256) noexcept {
    Deallocate(stream.get(), ptr, bytes);
  }
  // The legacy default stream, as RMM's own resources: the block is usable
  // at once by the host's next stream-0 work.
  void* allocate_sync(std::size_t bytes, std::size_t alignment = 256) {
    return Allocate(nullptr, bytes, alignment);
  }
  void deallocate_sync(void* ptr, std::size_t bytes,
                       std::size_t /*alignment*/ = 256) noexcept {
    Deallocate(nullptr, ptr, bytes);
  }
  bool operator==(const RmmMemoryResource& other) const noexcept {
    return state_ == other.state_;
  }
  bool operator!=(const RmmMemoryResource& other) const noexcept {
    return state_ != other.state_;
  }
  friend void get_property(const RmmMemoryResource&,
                           cuda::mr::device_accessible) noexcept {}

#endif

 private:
  struct State {
    gpualloc_t* allocator = nullptr;
    int device = 0;
    std::mutex mu;
    RmmCounter bytes;
    RmmCounter allocations;
    std::string last_error;
    bool reported = false;
  };
  static void Add(RmmCounter& c, std::int64_t n) {
    c.value += n;
    c.total += n;
    c.peak = std::max(c.peak, c.value);
  }
  std::shared_ptr<State> state_;
};

// rmm::mr::callback_memory_resource's callbacks over a RmmMemoryResource
// (`arg`), for a program that builds its resources from callbacks:
//   rmm::mr::callback_memory_resource mr{gpualloc::RmmAllocateCallback,
//                                        gpualloc::RmmDeallocateCallback,
//                                        &resource, &resource};
inline void* RmmAllocateCallback(std::size_t bytes,
                                 rmm::cuda_stream_view stream, void* arg) {
  return static_cast<RmmMemoryResource*>(arg)->Allocate(stream.value(), bytes,
                                                        256);
}
inline void RmmDeallocateCallback(void* ptr, std::size_t bytes,
                                  rmm::cuda_stream_view stream, void* arg) {
  static_cast<RmmMemoryResource*>(arg)->Deallocate(stream.value(), ptr, bytes);
}

}  // namespace gpualloc

#endif  // GPUALLOC_RMM_HPP_
