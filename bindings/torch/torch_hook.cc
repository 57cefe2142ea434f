// SPDX-License-Identifier: Apache-2.0
// bindings/torch/torch_hook.cc: libgpualloc_torch.so, gpualloc as PyTorch's
// CUDA (or ROCm) allocator through torch.cuda.memory.CUDAPluggableAllocator.
//
// Two kinds of entry points:
//
//  - The callbacks PyTorch calls, with exactly the signatures of
//    torch/csrc/cuda/CUDAPluggableAllocator.h (PyTorch 2.1 to 2.9; the
//    python/gpualloc/torch.py helper registers them): malloc, free, init,
//    reset (empty_cache), memory_fraction, record_stream and the graph-pool
//    hooks, in their 2.3+ form (begin_allocate_to_pool with a stream filter)
//    and their 2.1/2.2 form (begin_allocate_stream_to_pool). PyTorch calls
//    them through std::function objects and turns a C++ exception into a
//    Python RuntimeError, so those called from Python (malloc, init, reset,
//    memory_fraction, record_stream, begin_allocate_*) throw
//    gpualloc_torch_error on failure. PyTorch does not check malloc's result:
//    a NULL would become a tensor at address 0, so malloc throws instead.
//    Those PyTorch calls from destructors (free, end_allocate_*,
//    release_pool) never throw: they report.
//
//  - Functions for ctypes and C callers, which never throw: statuses and
//    gpualloc_torch_last_error(), gpualloc_torch_try_malloc (NULL on
//    failure), statistics, snapshots, tags, sleep and wake.
//
// One process-wide gpualloc handle, created at the first call (or by
// gpualloc_torch_configure) with PyTorch's conventions: growth on demand
// unless the environment asks for preallocation (gpualloc_create_pytorch).
// It is never destroyed: PyTorch frees tensors during interpreter shutdown,
// after static destructors would have run.
//
// Failures that cannot throw print the first reason to stderr and keep the
// latest for gpualloc_torch_last_error().
//
// PyTorch passes free the size it allocated. The hook keeps each live
// block's requested size and checks it: a free with another size is
// reported and the block is not freed (a mismatch means the caller's
// bookkeeping is wrong, and freeing could release memory still in use). A
// pointer the hook does not know goes to the allocator, whose message says
// what it is (unknown, freed, or interior: "interior pointer, 256 bytes into
// the allocation at ...").
//
// This file: the handle, error reporting and PyTorch's allocation callbacks;
// graph pools: torch_pools.cc; the functions for ctypes and C: torch_c_api.cc;
// what they share: torch_hook_internal.h.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "bindings/torch/torch_hook_internal.h"
#include "gpualloc/gpualloc.h"

// What the throwing callbacks throw; PyTorch shows what() in the
// RuntimeError it raises.
class gpualloc_torch_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace gpualloc::torch_internal {

std::mutex create_mu;  // guards the handle's creation and Hook::config
std::atomic<Hook*> created{nullptr};

Hook& Unborn() {
  static Hook* const hook = new Hook;
  return *hook;
}

// Creates the handle from `config` and the environment; create_mu held.
void CreateLocked(Hook& h) {
  h.create_status = gpualloc_create_pytorch(

      h.config.empty() ? nullptr : h.config.c_str(), &h.handle);
  if (h.create_status != GPUALLOC_OK) {
    h.create_error = gpualloc_last_error();
  } else if (gpualloc_device_count(h.handle, &h.num_devices) != GPUALLOC_OK) {
    h.num_devices = 0;
  }
  created.store(&h, std::memory_order_release);
}

Hook& Instance() {
  Hook* h = created.load(std::memory_order_acquire);
  if (h != nullptr) return *h;
  std::lock_guard<std::mutex> lock(create_mu);
  h = created.load(std::memory_order_relaxed);
  if (h != nullptr) return *h;
  CreateLocked(Unborn());
  return Unborn();
}

namespace {

// The requested size of every live block malloc returned, by (device,
// pointer).
std::mutex sizes_mu;
absl::flat_hash_map<std::pair<int, void*>, std::size_t>& Sizes() {
  static auto* const sizes =
      new absl::flat_hash_map<std::pair<int, void*>, std::size_t>;
  return *sizes;
}

std::atomic<bool> printed{false};

}  // namespace

std::mutex error_mu;
std::string& LatestError() {
  static std::string* const error = new std::string;
  return *error;
}

// Keeps `message` as the latest error; prints the first one.
void Fail(const std::string& message) noexcept {
  try {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      LatestError() = message;
    }
    if (!printed.exchange(true)) {
      std::fprintf(stderr,
                   "gpualloc_torch: %s\n(printed once; later errors: "
                   "gpualloc_torch_last_error())\n",
                   message.c_str());
    }
  } catch (...) {
    // Out of host memory while reporting: the caller's failure stands.
  }
}

// The handle, or NULL after reporting why there is none.
gpualloc_t* Handle(const char* function) noexcept {
  try {
    Hook& h = Instance();
    if (h.handle == nullptr) {
      Fail(std::string(function) +
           ": gpualloc could not be set up from the environment: " +
           h.create_error);
    }
    return h.handle;
  } catch (...) {
    return nullptr;
  }
}

void FailWithLastError() noexcept {
  try {
    Fail(gpualloc_last_error());
  } catch (...) {
  }
}

// For the throwing callbacks: the latest error as an exception.
[[noreturn]] void ThrowLatest() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(error_mu);
    message = LatestError();
  }
  throw gpualloc_torch_error("gpualloc: " + message);
}

// The tag malloc gives this thread's allocations.
thread_local std::uint32_t current_tag = 0;

void* Malloc(gpualloc_t* handle, size_t size, int device, void* stream) {
  if (filtered_captures.load(std::memory_order_acquire) != 0) {
    RouteByFilter(handle, device, stream);
  }
  void* p = nullptr;
  if (gpualloc_malloc_tagged(handle, device, size, 0, stream, current_tag,
                             &p) != GPUALLOC_OK) {
    FailWithLastError();
    return nullptr;
  }
  try {
    std::lock_guard<std::mutex> lock(sizes_mu);
    Sizes()[{device, p}] = size;
  } catch (...) {
    // Out of host memory for the bookkeeping: give the block back.
    (void)gpualloc_free(handle, device, p, stream);
    Fail("gpualloc_torch_malloc: out of host memory");
    return nullptr;
  }
  if (device >= 0 && device < 64) {
    Instance().used_devices.fetch_or(std::uint64_t{1} << device,
                                     std::memory_order_relaxed);
  }
  return p;
}

// record_stream without a device: the devices used so far are asked in
// turn until one knows the pointer. False after Fail.
bool RecordStream(gpualloc_t* handle, void* ptr, void* stream) {
  Hook& h = Instance();
  const std::uint64_t used = h.used_devices.load(std::memory_order_relaxed);
  for (int d = 0; d < h.num_devices; ++d) {
    if (d < 64 && (used & (std::uint64_t{1} << d)) == 0) continue;
    if (gpualloc_record_stream(handle, d, ptr, stream) == GPUALLOC_OK) {
      return true;
    }
  }
  char message[200];
  std::snprintf(message, sizeof(message),
                "Tensor.record_stream: %p is not a live allocation on any "
                "device gpualloc served",
                ptr);
  Fail(message);
  return false;
}

}  // namespace gpualloc::torch_internal

using gpualloc::torch_internal::Checked;
using gpualloc::torch_internal::Fail;
using gpualloc::torch_internal::FailWithLastError;
using gpualloc::torch_internal::Handle;
using gpualloc::torch_internal::Instance;
using gpualloc::torch_internal::Malloc;
using gpualloc::torch_internal::RecordStream;
using gpualloc::torch_internal::Sizes;
using gpualloc::torch_internal::sizes_mu;
using gpualloc::torch_internal::ThrowLatest;

extern "C" {

// ---------------------------------------------------------------------------
// PyTorch's callbacks (CUDAPluggableAllocator), exact signatures.

// alloc_fn: void*(size_t size, int device, cudaStream_t stream). Throws
// gpualloc_torch_error with the out-of-memory report (or the setup error).
GPUALLOC_API void* gpualloc_torch_malloc(size_t size, int device,
                                         TorchStream stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_malloc");
  if (handle == nullptr) ThrowLatest();
  void* p = Malloc(handle, size, device, stream);
  if (p == nullptr) ThrowLatest();
  return p;
}

// free_fn: void(void* ptr, size_t size, int device, cudaStream_t stream),
// the stream malloc was given. Never throws (PyTorch frees in destructors).
GPUALLOC_API void gpualloc_torch_free(void* ptr, size_t size, int device,
                                      TorchStream stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_free");
  if (handle == nullptr) return;
  if (ptr == nullptr) return;
  // A block of the right size leaves the table before it is freed (another
  // thread may be handed the same address at once), and returns to it if
  // the free fails.
  bool known = false;
  try {
    std::lock_guard<std::mutex> lock(sizes_mu);
    auto it = Sizes().find({device, ptr});
    if (it != Sizes().end()) {
      if (it->second != size) {
        char message[256];
        std::snprintf(message, sizeof(message),
                      "gpualloc_torch_free(%p, %zu bytes, device %d): the "
                      "block was allocated with %zu bytes; not freed",
                      ptr, size, device, it->second);
        Fail(message);
        return;
      }
      Sizes().erase(it);
      known = true;
    }
  } catch (...) {
    Fail("gpualloc_torch_free: out of host memory");
    return;
  }
  // An unknown pointer goes to the allocator too: its message says what the
  // pointer is (never allocated, already freed, interior).
  if (gpualloc_free(handle, device, ptr, stream) != GPUALLOC_OK) {
    FailWithLastError();
    if (known) {
      try {
        std::lock_guard<std::mutex> lock(sizes_mu);
        Sizes()[{device, ptr}] = size;
      } catch (...) {
      }
    }
  }
}

// init_fn: void(int device_count), at PyTorch's CUDA initialization. Sets
// gpualloc up, so that a bad setting raises there, naming the variable, and
// checks that gpualloc's backend sees the devices PyTorch sees (not, say,
// the simulator or another vendor's driver).
GPUALLOC_API void gpualloc_torch_init(int device_count) {
  if (Handle("gpualloc_torch_init") == nullptr) ThrowLatest();
  const int seen = Instance().num_devices;
  if (device_count > seen) {
    Fail("PyTorch sees " + std::to_string(device_count) +
         " device(s) but gpualloc's backend sees " + std::to_string(seen) +
         "; check GPUALLOC_BACKEND (auto picks the driver that loads) and "
         "that CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES are set before "
         "the process starts");
    ThrowLatest();
  }
}

// reset_fn: void(), torch.cuda.empty_cache(): every fully free region goes
// back to the device. Throws when that fails (e.g. during a capture).
GPUALLOC_API void gpualloc_torch_reset(void) {
  gpualloc_t* handle = Handle("torch.cuda.empty_cache");
  if (handle == nullptr) ThrowLatest();
  if (gpualloc_trim(handle, GPUALLOC_ALL_DEVICES) != GPUALLOC_OK) {
    FailWithLastError();
    ThrowLatest();
  }
}

// memory_fraction_fn: void(double fraction, int device),
// torch.cuda.set_per_process_memory_fraction: the device's limit becomes
// fraction x its total memory (gpualloc_set_memory_fraction).
GPUALLOC_API void gpualloc_torch_memory_fraction(double fraction, int device) {
  if (Checked("torch.cuda.set_per_process_memory_fraction", [&](gpualloc_t* h) {
        return gpualloc_set_memory_fraction(h, device, fraction);
      }) != GPUALLOC_OK) {
    ThrowLatest();
  }
}

// record_stream_fn: void(void* ptr, cudaStream_t stream),
// Tensor.record_stream: the block is reused on other streams only once the
// work queued so far on `stream` has completed too.
GPUALLOC_API void gpualloc_torch_record_stream(void* ptr, TorchStream stream) {
  gpualloc_t* handle = Handle("Tensor.record_stream");
  if (handle == nullptr) ThrowLatest();
  if (!RecordStream(handle, ptr, stream)) ThrowLatest();
}

}  // extern "C"
