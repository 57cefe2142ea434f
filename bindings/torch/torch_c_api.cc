// SPDX-License-Identifier: Apache-2.0
// bindings/torch/torch_c_api.cc: libgpualloc_torch.so's functions for ctypes
// and C callers, which never throw: statuses and gpualloc_torch_last_error(),
// setup, malloc, statistics, snapshots, tags, sleep and wake (torch_hook.cc
// says how the hook works).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

#include "bindings/torch/torch_hook_internal.h"
#include "gpualloc/gpualloc.h"

using gpualloc::torch_internal::Checked;
using gpualloc::torch_internal::create_mu;
using gpualloc::torch_internal::created;
using gpualloc::torch_internal::CreateLocked;
using gpualloc::torch_internal::current_tag;
using gpualloc::torch_internal::error_mu;
using gpualloc::torch_internal::Fail;
using gpualloc::torch_internal::FailWithLastError;
using gpualloc::torch_internal::Handle;
using gpualloc::torch_internal::Hook;
using gpualloc::torch_internal::Instance;
using gpualloc::torch_internal::LatestError;
using gpualloc::torch_internal::Malloc;
using gpualloc::torch_internal::RecordStream;
using gpualloc::torch_internal::Unborn;

extern "C" {

// ---------------------------------------------------------------------------
// For ctypes and C: statuses, never exceptions.

// Sets gpualloc up now with `config` ("key=value,...", the configuration
// string; NULL or "" for none) over the environment, instead of at the first
// call. 0, or a gpualloc_status_t with the reason (naming the variable or
// key) in gpualloc_torch_last_error(). Once set up, another call with the
// same string is 0 and with another is GPUALLOC_FAILED_PRECONDITION.
GPUALLOC_API int gpualloc_torch_configure(const char* config) {
  const std::string text = config == nullptr ? "" : config;
  Hook* h = nullptr;
  {
    std::lock_guard<std::mutex> lock(create_mu);
    h = created.load(std::memory_order_relaxed);
    if (h == nullptr) {
      Unborn().config = text;
      CreateLocked(Unborn());
      h = &Unborn();
    } else if (h->config != text) {
      Fail("gpualloc_torch_configure(\"" + text +
           "\"): gpualloc is set up already (configuration \"" + h->config +
           "\"); configure before PyTorch's first CUDA allocation");
      return GPUALLOC_FAILED_PRECONDITION;
    }
  }
  if (h->handle == nullptr) {
    Fail(h->create_error);
    return h->create_status;
  }
  return GPUALLOC_OK;
}

// malloc for C callers: NULL on failure, with the reason in
// gpualloc_torch_last_error().
GPUALLOC_API void* gpualloc_torch_try_malloc(size_t size, int device,
                                             void* stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_try_malloc");
  if (handle == nullptr) return nullptr;
  try {
    return Malloc(handle, size, device, stream);
  } catch (const std::exception& e) {  // a filter that threw
    Fail(e.what());
    return nullptr;
  }
}

// empty_cache for C callers: 0 or a gpualloc_status_t.
GPUALLOC_API int gpualloc_torch_empty_cache(void) {
  return Checked("gpualloc_torch_empty_cache", [](gpualloc_t* h) {
    return gpualloc_trim(h, GPUALLOC_ALL_DEVICES);
  });
}

// record_stream for C callers: 0 or a gpualloc_status_t.
GPUALLOC_API int gpualloc_torch_try_record_stream(void* ptr, void* stream) {
  gpualloc_t* handle = Handle("gpualloc_torch_try_record_stream");
  if (handle == nullptr) return Instance().create_status;
  return RecordStream(handle, ptr, stream) ? GPUALLOC_OK : GPUALLOC_NOT_FOUND;
}

// Before the runtime destroys `stream`: the allocator never touches it
// again on any device (the work queued on it still guards its memory).
// 0 or a gpualloc_status_t.
GPUALLOC_API int gpualloc_torch_release_stream(void* stream) {
  return Checked("gpualloc_torch_release_stream", [&](gpualloc_t* h) {
    return gpualloc_release_stream(h, GPUALLOC_ALL_DEVICES, stream);
  });
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

// 0 and *out filled (set out->struct_size), or a gpualloc_status_t.
GPUALLOC_API int gpualloc_torch_get_stats(int device, gpualloc_stats_t* out) {
  return Checked("gpualloc_torch_get_stats", [&](gpualloc_t* h) {
    return gpualloc_get_stats(h, device, out);
  });
}

// torch.cuda.reset_peak_memory_stats's replacement. 0 or a status.
GPUALLOC_API int gpualloc_torch_reset_peak_stats(int device) {
  return Checked("gpualloc_torch_reset_peak_stats", [&](gpualloc_t* h) {
    return gpualloc_reset_peak_stats(h, device);
  });
}

// The number of devices the configured backend sees, or -1 (reason in
// gpualloc_torch_last_error()).
GPUALLOC_API int gpualloc_torch_device_count(void) {
  if (Handle("gpualloc_torch_device_count") == nullptr) return -1;
  return Instance().num_devices;
}

// An out-of-memory handler on every device (gpualloc_set_oom_handler with
// GPUALLOC_ALL_DEVICES; NULL removes it). It is called before the
// allocation fails; nonzero retries the request once. 0 or a status.
GPUALLOC_API int gpualloc_torch_set_oom_handler(gpualloc_oom_handler_t handler,
                                                void* user_data) {
  return Checked("gpualloc_torch_set_oom_handler", [&](gpualloc_t* h) {
    return gpualloc_set_oom_handler(h, GPUALLOC_ALL_DEVICES, handler,
                                    user_data);
  });
}

// Sleep and wake (gpualloc.h's gpualloc_sleep says how they behave): the
// calling thread's allocations from now on carry `tag` (0: none), e.g. the
// weights or the KV cache; later the tag's memory is given back and mapped
// again at the same addresses. 0 or a status.
GPUALLOC_API void gpualloc_torch_set_tag(uint32_t tag) { current_tag = tag; }
GPUALLOC_API int gpualloc_torch_sleep(int device, uint32_t tag, int backup) {
  return Checked("gpualloc_torch_sleep", [&](gpualloc_t* h) {
    return gpualloc_sleep(h, device, tag, backup, nullptr);
  });
}
GPUALLOC_API int gpualloc_torch_wake(int device, uint32_t tag) {
  return Checked("gpualloc_torch_wake",
                 [&](gpualloc_t* h) { return gpualloc_wake(h, device, tag); });
}

// Sharing a block with another process (gpualloc_export, gpualloc_import,
// gpualloc_close_import): torch's CUDAPluggableAllocator refuses its own
// IPC, so gpualloc.torch shares tensors through these.
GPUALLOC_API int gpualloc_torch_export(int device, void* ptr, void* buffer,
                                       size_t capacity, size_t* length) {
  return Checked("gpualloc_torch_export", [&](gpualloc_t* h) {
    return gpualloc_export(h, device, ptr, buffer, capacity, length);
  });
}
GPUALLOC_API int gpualloc_torch_import(int device, const void* description,
                                       size_t length, void** ptr,
                                       size_t* bytes) {
  return Checked("gpualloc_torch_import", [&](gpualloc_t* h) {
    return gpualloc_import(h, device, description, length, ptr, bytes);
  });
}
GPUALLOC_API int gpualloc_torch_close_import(int device, void* ptr) {
  return Checked("gpualloc_torch_close_import", [&](gpualloc_t* h) {
    return gpualloc_close_import(h, device, ptr);
  });
}

// The device's snapshot as JSON (docs/REFERENCE.md, "Snapshot JSON"), to be
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

// The device's snapshot with its allocation history (history=N) as the
// pickle torch.cuda.memory._dump_snapshot writes, for
// https://pytorch.org/memory_viz, written to `path`. 0 or a status.
GPUALLOC_API int gpualloc_torch_snapshot_pickle(int device, const char* path) {
  return Checked("gpualloc_torch_snapshot_pickle", [&](gpualloc_t* h) {
    return gpualloc_snapshot_torch_pickle(h, device, path);
  });
}

// The calling thread's context for the history's events (an op name, a
// Python stack); NULL or "" clears it. Each distinct text is kept for the
// life of the process.
GPUALLOC_API void gpualloc_torch_set_context(const char* context) {
  gpualloc_set_context(context);
}

}  // extern "C"
