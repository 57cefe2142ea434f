// SPDX-License-Identifier: Apache-2.0
// bindings/torch/torch_hook.cc: libgpualloc_torch.so, the entry points of
// torch.cuda.memory.CUDAPluggableAllocator(path, "gpualloc_torch_malloc",
// "gpualloc_torch_free").
//
// One process-wide gpualloc handle, created on the first call from the
// environment (GPUALLOC_* variables and their JAX/XLA/TF aliases;
// GPUALLOC_BACKEND=sim runs without a GPU). It is never destroyed: PyTorch
// frees tensors during interpreter shutdown, after static destructors would
// have run.
//
// Failures: malloc returns NULL (PyTorch then raises its out-of-memory
// error); free cannot report, so both print the first failure's reason to
// stderr and keep the latest for gpualloc_torch_last_error().
//
// PyTorch passes free the size it allocated. The hook keeps each live
// block's requested size and checks it: a free with another size is
// reported and the block is not freed (a mismatch means the caller's
// bookkeeping is wrong, and freeing could release memory still in use). A
// pointer the hook does not know goes to the allocator, whose message says
// what it is (unknown, freed, or interior: "interior pointer, 256 bytes into
// the allocation at ...").
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "gpualloc/gpualloc.h"

namespace {

struct Hook {
  gpualloc_t* handle = nullptr;
  gpualloc_status_t create_status = GPUALLOC_OK;
  std::string create_error;
  int num_devices = 0;
  // Devices malloc was called for (the first 64), for record_stream, which
  // is not told the device.
  std::atomic<std::uint64_t> used_devices{0};
};

Hook& Instance() {
  static Hook* const hook = [] {
    Hook* h = new Hook;
    h->create_status = gpualloc_create(nullptr, &h->handle);
    if (h->create_status != GPUALLOC_OK) {
      h->create_error = gpualloc_last_error();
    } else if (gpualloc_device_count(h->handle, &h->num_devices) !=
               GPUALLOC_OK) {
      h->num_devices = 0;
    }
    return h;
  }();
  return *hook;
}

// The requested size of every live block gpualloc_torch_malloc returned, by
// (device, pointer).
std::mutex sizes_mu;
absl::flat_hash_map<std::pair<int, void*>, std::size_t>& Sizes() {
  static auto* const sizes =
      new absl::flat_hash_map<std::pair<int, void*>, std::size_t>;
  return *sizes;
}

std::mutex error_mu;
std::string& LatestError() {
  static std::string* const error = new std::string;
  return *error;
}
std::atomic<bool> printed{false};

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
           ": gpualloc could not be set up from the "
           "environment: " +
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

// A pool call of the hook: 0 or the status, the reason kept.
template <typename Call>
int PoolCall(const char* name, Call call) {
  gpualloc_t* handle = Handle(name);
  if (handle == nullptr) return Instance().create_status;
  const gpualloc_status_t s = call(handle);
  if (s != GPUALLOC_OK) FailWithLastError();
  return s;
}

// The tag gpualloc_torch_malloc gives this thread's allocations.
thread_local std::uint32_t current_tag = 0;

}  // namespace

extern "C" {

GPUALLOC_API void* gpualloc_torch_malloc(size_t size, int device,
                                         void* stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_malloc");
  if (handle == nullptr) return nullptr;
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
    gpualloc_free(handle, device, p, stream);
    Fail("gpualloc_torch_malloc: out of host memory");
    return nullptr;
  }
  if (device >= 0 && device < 64) {
    Instance().used_devices.fetch_or(std::uint64_t{1} << device,
                                     std::memory_order_relaxed);
  }
  return p;
}

// PyTorch's C++ side passes (ptr, size, device, stream).
GPUALLOC_API void gpualloc_torch_free(void* ptr, size_t size, int device,
                                      void* stream) {
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

// torch.cuda.empty_cache(): every fully free region goes back to the device.
GPUALLOC_API void gpualloc_torch_empty_cache(void) {
  gpualloc_t* handle = Handle("gpualloc_torch_empty_cache");
  if (handle == nullptr) return;
  if (gpualloc_trim(handle, GPUALLOC_ALL_DEVICES) != GPUALLOC_OK) {
    FailWithLastError();
  }
}

// Tensor.record_stream(stream). The device is not given: the devices used so
// far are asked in turn until one knows the pointer.
GPUALLOC_API void gpualloc_torch_record_stream(void* ptr, void* stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_record_stream");
  if (handle == nullptr) return;
  Hook& h = Instance();
  const std::uint64_t used = h.used_devices.load(std::memory_order_relaxed);
  for (int d = 0; d < h.num_devices; ++d) {
    if (d < 64 && (used & (std::uint64_t{1} << d)) == 0) continue;
    if (gpualloc_record_stream(handle, d, ptr, stream) == GPUALLOC_OK) return;
  }
  char message[160];
  std::snprintf(message, sizeof(message),
                "gpualloc_torch_record_stream: %p is not a live allocation "
                "on any device gpualloc_torch_malloc served",
                ptr);
  Fail(message);
}

// Before the runtime destroys `stream`: the allocator never touches it
// again on any device (the work queued on it still guards its memory).
GPUALLOC_API void gpualloc_torch_release_stream(void* stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_release_stream");
  if (handle == nullptr) return;
  if (gpualloc_release_stream(handle, GPUALLOC_ALL_DEVICES, stream) !=
      GPUALLOC_OK) {
    FailWithLastError();
  }
}

// The latest failure's message ("" if none), from any thread. The pointer
// stays valid until the calling thread calls this again.
GPUALLOC_API const char* gpualloc_torch_last_error(void) {
  thread_local std::string copy;
  try {
    std::lock_guard<std::mutex> lock(error_mu);
    copy = LatestError();
  } catch (...) {
    copy.clear();
  }
  return copy.c_str();
}

// For scripts through ctypes: 0 and *out filled (set out->struct_size), or a
// gpualloc_status_t with the reason in gpualloc_torch_last_error().
GPUALLOC_API int gpualloc_torch_get_stats(int device, gpualloc_stats_t* out) {
  gpualloc_t* handle = Handle("gpualloc_torch_get_stats");
  if (handle == nullptr) return Instance().create_status;
  const gpualloc_status_t s = gpualloc_get_stats(handle, device, out);
  if (s != GPUALLOC_OK) FailWithLastError();
  return s;
}

// An out-of-memory handler on every device (gpualloc_set_oom_handler with
// GPUALLOC_ALL_DEVICES; NULL removes it), e.g. from Python:
//   HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
//   cb = HANDLER(lambda info, data: free_my_cache())  # keep cb alive
//   lib.gpualloc_torch_set_oom_handler(cb, None)
// It is called before malloc returns NULL; nonzero retries the request once.
// 0 or a gpualloc_status_t with the reason in gpualloc_torch_last_error().
GPUALLOC_API int gpualloc_torch_set_oom_handler(gpualloc_oom_handler_t handler,
                                                void* user_data) {
  gpualloc_t* handle = Handle("gpualloc_torch_set_oom_handler");
  if (handle == nullptr) return Instance().create_status;
  const gpualloc_status_t s = gpualloc_set_oom_handler(
      handle, GPUALLOC_ALL_DEVICES, handler, user_data);
  if (s != GPUALLOC_OK) FailWithLastError();
  return s;
}

// Private pools for graph capture (PyTorch's graph_pool_handle and
// beginAllocateToPool / endAllocateToPool / releasePool; gpualloc.h's
// gpualloc_create_pool says how they behave). Through ctypes:
//   pool = ctypes.c_uint64()
//   lib.gpualloc_torch_create_pool(device, ctypes.byref(pool))
//   lib.gpualloc_torch_begin_allocate_to_pool(device, pool, stream_ptr)
//   ... capture the graph ...
//   lib.gpualloc_torch_end_allocate_to_pool(device, pool)
//   ... when the graph is destroyed:
//   lib.gpualloc_torch_release_pool(device, pool, stream_ptr)
// Each returns 0 or a gpualloc_status_t with the reason in
// gpualloc_torch_last_error().
GPUALLOC_API int gpualloc_torch_create_pool(int device, uint64_t* pool) {
  return PoolCall("gpualloc_torch_create_pool", [&](gpualloc_t* h) {
    return gpualloc_create_pool(h, device, pool);
  });
}
GPUALLOC_API int gpualloc_torch_retain_pool(int device, uint64_t pool) {
  return PoolCall("gpualloc_torch_retain_pool", [&](gpualloc_t* h) {
    return gpualloc_retain_pool(h, device, pool);
  });
}
GPUALLOC_API int gpualloc_torch_release_pool(int device, uint64_t pool,
                                             void* last_use) {
  return PoolCall("gpualloc_torch_release_pool", [&](gpualloc_t* h) {
    return gpualloc_release_pool(h, device, pool, last_use);
  });
}
GPUALLOC_API int gpualloc_torch_begin_allocate_to_pool(int device,
                                                       uint64_t pool,
                                                       void* stream) {
  return PoolCall("gpualloc_torch_begin_allocate_to_pool", [&](gpualloc_t* h) {
    return gpualloc_begin_allocate_to_pool(h, device, pool, stream);
  });
}
GPUALLOC_API int gpualloc_torch_end_allocate_to_pool(int device,
                                                     uint64_t pool) {
  return PoolCall("gpualloc_torch_end_allocate_to_pool", [&](gpualloc_t* h) {
    return gpualloc_end_allocate_to_pool(h, device, pool);
  });
}

// Sleep and wake (gpualloc.h's gpualloc_sleep says how they behave): the
// calling thread's allocations from now on carry `tag` (0: none), e.g. the
// weights or the KV cache; later the tag's memory is given back and mapped
// again at the same addresses. Through ctypes:
//   lib.gpualloc_torch_set_tag(1); load the weights;
//   lib.gpualloc_torch_set_tag(0) lib.gpualloc_torch_sleep(device, 1, 1)   #
//   backup=1 keeps the content
//   ... another phase uses the memory ...
//   lib.gpualloc_torch_wake(device, 1)
// Each returns 0 or a gpualloc_status_t with the reason in
// gpualloc_torch_last_error().
GPUALLOC_API void gpualloc_torch_set_tag(uint32_t tag) { current_tag = tag; }
GPUALLOC_API int gpualloc_torch_sleep(int device, uint32_t tag, int backup) {
  return PoolCall("gpualloc_torch_sleep", [&](gpualloc_t* h) {
    return gpualloc_sleep(h, device, tag, backup, nullptr);
  });
}
GPUALLOC_API int gpualloc_torch_wake(int device, uint32_t tag) {
  return PoolCall("gpualloc_torch_wake",
                  [&](gpualloc_t* h) { return gpualloc_wake(h, device, tag); });
}

// The device's snapshot as JSON (docs/ARCHITECTURE.md, "Snapshot JSON"), to be
// released with gpualloc_torch_string_free; NULL on failure.
GPUALLOC_API char* gpualloc_torch_snapshot_json(int device) {
  gpualloc_t* handle = Handle("gpualloc_torch_snapshot_json");
  if (handle == nullptr) return nullptr;
  char* json = nullptr;
  if (gpualloc_snapshot_json(handle, device, &json, nullptr) != GPUALLOC_OK) {
    FailWithLastError();
    return nullptr;
  }
  return json;
}

GPUALLOC_API void gpualloc_torch_string_free(char* text) {
  gpualloc_string_free(text);
}

// The device's snapshot with its allocation history (GPUALLOC_HISTORY=N) as
// the pickle torch.cuda.memory._dump_snapshot writes, for
// https://pytorch.org/memory_viz, written to `path`. 0, or a
// gpualloc_status_t with the reason in gpualloc_torch_last_error().
GPUALLOC_API int gpualloc_torch_snapshot_pickle(int device, const char* path) {
  gpualloc_t* handle = Handle("gpualloc_torch_snapshot_pickle");
  if (handle == nullptr) return Instance().create_status;
  const gpualloc_status_t s =
      gpualloc_snapshot_torch_pickle(handle, device, path);
  if (s != GPUALLOC_OK) FailWithLastError();
  return s;
}

// The calling thread's context for the history's events (an op name, a
// Python stack); NULL or "" clears it. Each distinct text is kept for the
// life of the process.
GPUALLOC_API void gpualloc_torch_set_context(const char* context) {
  gpualloc_set_context(context);
}

}  // extern "C"
