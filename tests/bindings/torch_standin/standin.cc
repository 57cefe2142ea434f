// SPDX-License-Identifier: Apache-2.0
// tests/bindings/torch_standin/standin.cc: the C++ half of a stand-in for
// PyTorch's pluggable-allocator path, so that CI checks libgpualloc_torch.so
// and python/gpualloc/torch.py the way torch drives them, without torch or a
// GPU.
//
// Written from torch's source (torch/csrc/cuda/CUDAPluggableAllocator.{h,cpp},
// the _CUDAPluggableAllocator bindings of torch/csrc/cuda/Module.cpp and
// aten/src/ATen/cuda/CUDAGraph.cpp): each set_* turns the address it is
// given into a std::function of exactly torch's type, and the allocator
// calls those functions where and as torch does (init at CUDA
// initialization, reset from empty_cache, the graph-pool hooks from
// CUDAGraph's capture_begin / capture_end / reset with a filter that accepts
// the capturing stream). A C++ exception from a callback becomes an error
// here, as torch's HANDLE_TH_ERRORS makes it a RuntimeError.
//
// Two generations of the graph-pool hooks: torch 2.3+ (begin_allocate_to_pool
// with a stream filter; generation 3) and torch 2.1/2.2
// (begin_allocate_stream_to_pool; generation 2). Python asks which through
// standin_set_generation before making an allocator.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

// torch's types: cudaStream_t and c10::cuda::MempoolId_t.
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;

namespace {

std::string last_error;
int generation = 3;

struct AllocationMetadata {
  size_t size = 0;
  int device_idx = -1;
  cudaStream_t stream{};
};

// CUDAPluggableAllocator's members and the calls it makes of them.
struct PluggableAllocator {
  std::function<void*(size_t, int, cudaStream_t)> alloc_fn_;
  std::function<void(void*, size_t, int, cudaStream_t)> free_fn_;
  std::function<void(int)> init_fn_;
  std::function<void()> reset_fn_;
  std::function<void(double, int)> memory_fraction_fn_;
  std::function<void*(void*, size_t*)> base_alloc_fn_;
  std::function<void(void* ptr, cudaStream_t stream)> record_stream_fn_;
  // Generation 3.
  std::function<void(int, MempoolId_t, std::function<bool(cudaStream_t)>)>
      begin_allocate_to_pool_fn_;
  std::function<void(int, MempoolId_t)> end_allocate_to_pool_fn_;
  // Generation 2.
  std::function<void(int, cudaStream_t, MempoolId_t)>
      begin_allocate_stream_to_pool_fn_;
  std::function<void(int, cudaStream_t)> end_allocate_stream_to_pool_fn_;
  // Both.
  std::function<void(int, MempoolId_t)> relase_pool_fn_;
  std::mutex allocator_mutex_;
  std::unordered_map<void*, AllocationMetadata> allocation_metadata_;
  bool initialized_ = false;

  void* malloc(size_t size, int device, cudaStream_t stream) {
    void* r = alloc_fn_(size, device, stream);
    {
      const std::lock_guard<std::mutex> lock(allocator_mutex_);
      allocation_metadata_.emplace(r, AllocationMetadata{size, device, stream});
    }
    return r;
  }
  void raw_delete(void* ptr) {
    cudaStream_t stream{};
    int device_idx = -1;
    size_t size = 0;
    {
      const std::lock_guard<std::mutex> lock(allocator_mutex_);
      auto it = allocation_metadata_.find(ptr);
      if (it == allocation_metadata_.end()) {
        throw std::runtime_error("Trying to free a pointer not allocated here");
      }
      size = it->second.size;
      device_idx = it->second.device_idx;
      stream = it->second.stream;
      allocation_metadata_.erase(it);
    }
    free_fn_(ptr, size, device_idx, stream);
  }
  void init(int device_count) {
    if (init_fn_) init_fn_(device_count);
    initialized_ = true;
  }
};

PluggableAllocator* current = nullptr;  // null: torch's native allocator
bool cuda_initialized = false;          // the native one's init ran

// CUDAGraph's capture state, enough for the filter torch passes: the
// capturing stream and whether its capture is active.
struct CaptureState {
  cudaStream_t stream{};
  bool active = false;
};

template <typename F>
int Guard(F f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

template <typename FuncType>
std::function<FuncType> FromAddress(std::uint64_t func_ptr) {
  // As Module.cpp: std::function<FuncType> func =
  //     reinterpret_cast<FuncType*>(func_ptr);
  std::function<FuncType> func = reinterpret_cast<FuncType*>(func_ptr);
  return func;
}

}  // namespace

extern "C" {

const char* standin_last_error() { return last_error.c_str(); }

void standin_set_generation(int g) { generation = g; }

// torch._C._cuda_customAllocator(alloc_fn, free_fn): createCustomAllocator,
// which calls init(device_count) at once with the file's device_count (0).
void* standin_custom_allocator(std::uint64_t alloc, std::uint64_t free) {
  auto* a = new PluggableAllocator;
  a->alloc_fn_ = FromAddress<void*(size_t, int, cudaStream_t)>(alloc);
  a->free_fn_ = FromAddress<void(void*, size_t, int, cudaStream_t)>(free);
  a->init(0);
  return a;
}

// The _CUDAPluggableAllocator methods (Module.cpp), each with torch's type.
void standin_set_init_fn(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->init_fn_ = FromAddress<void(int)>(f);
}
void standin_set_reset_fn(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->reset_fn_ = FromAddress<void()>(f);
}
void standin_set_memory_fraction_fn(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->memory_fraction_fn_ =
      FromAddress<void(double, int)>(f);
}
void standin_set_base_alloc_fn(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->base_alloc_fn_ =
      FromAddress<void*(void*, size_t*)>(f);
}
void standin_set_record_stream_fn(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->record_stream_fn_ =
      FromAddress<void(void*, cudaStream_t)>(f);
}
void standin_set_begin_allocate_to_pool(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->begin_allocate_to_pool_fn_ =
      FromAddress<void(int, MempoolId_t, std::function<bool(cudaStream_t)>)>(f);
}
void standin_set_end_allocate_to_pool_fn(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->end_allocate_to_pool_fn_ =
      FromAddress<void(int, MempoolId_t)>(f);
}
void standin_set_begin_allocate_stream_to_pool(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->begin_allocate_stream_to_pool_fn_ =
      FromAddress<void(int, cudaStream_t, MempoolId_t)>(f);
}
void standin_set_end_allocate_stream_to_pool_fn(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->end_allocate_stream_to_pool_fn_ =
      FromAddress<void(int, cudaStream_t)>(f);
}
void standin_set_release_pool(void* a, std::uint64_t f) {
  static_cast<PluggableAllocator*>(a)->relase_pool_fn_ =
      FromAddress<void(int, MempoolId_t)>(f);
}

// torch._C._cuda_changeCurrentAllocator.
int standin_change_current_allocator(void* a) {
  return Guard([&] {
    const bool initialized =
        current == nullptr ? cuda_initialized : current->initialized_;
    if (initialized) {
      throw std::runtime_error("Can't swap an already initialized allocator");
    }
    current = static_cast<PluggableAllocator*>(a);
  });
}

// torch.cuda's lazy initialization (once): the current allocator's
// init(device_count).
int standin_lazy_init(int device_count) {
  return Guard([&] {
    if (cuda_initialized) return;
    if (current != nullptr) current->init(device_count);
    cuda_initialized = true;
  });
}

// Tensor allocation on the current device and stream (allocate) and the
// DataPtr's deleter (raw_delete).
int standin_allocate(size_t size, int device, cudaStream_t stream, void** out) {
  return Guard([&] { *out = current->malloc(size, device, stream); });
}
int standin_raw_delete(void* ptr) {
  return Guard([&] { current->raw_delete(ptr); });
}

// CUDAPluggableAllocator::raw_alloc and raw_delete: what the caching
// allocator calls to allocate and release a segment of a MemPool whose
// allocator is `a` (alloc_block and release_block of
// c10/cuda/CUDACachingAllocator.cpp), on the current device and stream.
int standin_allocator_raw_alloc(void* a, size_t size, int device,
                                cudaStream_t stream, void** out) {
  return Guard([&] {
    *out = static_cast<PluggableAllocator*>(a)->malloc(size, device, stream);
  });
}
int standin_allocator_raw_delete(void* a, void* ptr) {
  return Guard([&] { static_cast<PluggableAllocator*>(a)->raw_delete(ptr); });
}

// torch.cuda.empty_cache -> emptyCache.
int standin_empty_cache() {
  return Guard([&] {
    if (current->reset_fn_) current->reset_fn_();
  });
}
// torch.cuda.set_per_process_memory_fraction -> setMemoryFraction.
int standin_set_memory_fraction(double fraction, int device) {
  return Guard([&] {
    if (current->memory_fraction_fn_) {
      current->memory_fraction_fn_(fraction, device);
    }
  });
}
// Tensor.record_stream -> recordStream(DataPtr, stream).
int standin_record_stream(void* ptr, cudaStream_t stream) {
  return Guard([&] {
    if (current->record_stream_fn_) current->record_stream_fn_(ptr, stream);
  });
}
// getBaseAllocation.
void* standin_base_allocation(void* ptr, size_t* size) {
  if (current->base_alloc_fn_) return current->base_alloc_fn_(ptr, size);
  return ptr;
}

// CUDAGraph::capture_begin: beginAllocateToPool (generation 3, with the
// filter torch builds) or beginAllocateStreamToPool (generation 2), then the
// stream capture begins. Returns a capture state for the calls below.
void* standin_capture_begin(int device, CaptureId_t id0, CaptureId_t id1,
                            cudaStream_t stream, int* status) {
  auto* state = new CaptureState{stream, false};
  *status = Guard([&] {
    const MempoolId_t mempool_id{id0, id1};
    if (generation == 3) {
      if (current->begin_allocate_to_pool_fn_) {
        current->begin_allocate_to_pool_fn_(
            device, mempool_id, [state](cudaStream_t s) {
              return state->active && s == state->stream;
            });
      }
    } else if (current->begin_allocate_stream_to_pool_fn_) {
      current->begin_allocate_stream_to_pool_fn_(device, stream, mempool_id);
    }
    state->active = true;  // cudaStreamBeginCapture
  });
  return state;
}

// CUDAGraph::capture_end: the capture ends, then endAllocateToPool.
int standin_capture_end(void* capture, int device, CaptureId_t id0,
                        CaptureId_t id1) {
  auto* state = static_cast<CaptureState*>(capture);
  state->active = false;  // cudaStreamEndCapture
  return Guard([&] {
    if (generation == 3) {
      if (current->end_allocate_to_pool_fn_) {
        current->end_allocate_to_pool_fn_(device, MempoolId_t{id0, id1});
      }
    } else if (current->end_allocate_stream_to_pool_fn_) {
      current->end_allocate_stream_to_pool_fn_(device, state->stream);
    }
  });
}

// CUDAGraph::reset: releasePool. The capture state goes with it.
int standin_graph_reset(void* capture, int device, CaptureId_t id0,
                        CaptureId_t id1) {
  delete static_cast<CaptureState*>(capture);
  return Guard([&] {
    if (current->relase_pool_fn_) {
      current->relase_pool_fn_(device, MempoolId_t{id0, id1});
    }
  });
}

}  // extern "C"
