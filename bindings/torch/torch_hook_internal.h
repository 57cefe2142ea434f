// SPDX-License-Identifier: Apache-2.0
// bindings/torch/torch_hook_internal.h: what the files of libgpualloc_torch.so
// share (torch_hook.cc, torch_pools.cc, torch_c_api.cc): PyTorch's types, the
// process-wide handle, error reporting, and malloc and record_stream's
// bodies. Internal to bindings/torch; nothing here is exported (the version
// script keeps only gpualloc_torch_*).
#ifndef GPUALLOC_BINDINGS_TORCH_TORCH_HOOK_INTERNAL_H_
#define GPUALLOC_BINDINGS_TORCH_TORCH_HOOK_INTERNAL_H_

// A file of the bindings layer (docs/DESIGN.md, "Layers").
#if defined(GPUALLOC_LAYER) && GPUALLOC_LAYER < 4
#error \
    "bindings/torch/ belongs to the bindings layer; a lower layer of the library may not include it"
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "gpualloc/gpualloc.h"

// PyTorch's types, laid out as torch's own: cudaStream_t (hipStream_t on
// ROCm builds) is a pointer to an opaque struct; c10::cuda::MempoolId_t is
// std::pair<CaptureId_t, CaptureId_t> with CaptureId_t unsigned long long;
// the capture filter is std::function<bool(cudaStream_t)>.
struct CUstream_st;
using TorchStream = CUstream_st*;
using MempoolId = std::pair<unsigned long long, unsigned long long>;
using StreamFilter = std::function<bool(TorchStream)>;

namespace gpualloc::torch_internal {

struct Hook {
  gpualloc_t* handle = nullptr;
  gpualloc_status_t create_status = GPUALLOC_OK;
  std::string create_error;
  std::string config;  // gpualloc_torch_configure's string
  int num_devices = 0;
  // Devices malloc was called for (the first 64), for record_stream, which
  // is not told the device.
  std::atomic<std::uint64_t> used_devices{0};
};

// The handle: made once, by Instance or gpualloc_torch_configure.
extern std::mutex create_mu;  // guards the handle's creation and Hook::config
extern std::atomic<Hook*> created;
// The hook before its handle is made (created points at it afterwards).
Hook& Unborn();
// Creates the handle from `config` and the environment; create_mu held.
void CreateLocked(Hook& h);
// The hook, its handle made (or its creation failed) at the first call.
Hook& Instance();

// The latest failure's message, guarded by error_mu.
extern std::mutex error_mu;
std::string& LatestError();
// Keeps `message` as the latest error; prints the first one.
void Fail(const std::string& message) noexcept;
// The handle, or NULL after reporting why there is none.
gpualloc_t* Handle(const char* function) noexcept;
// Fail with gpualloc_last_error().
void FailWithLastError() noexcept;
// For the throwing callbacks: the latest error as an exception.
[[noreturn]] void ThrowLatest();

// A call of the C API: 0 or the status, the reason kept.
template <typename Call>
int Checked(const char* name, Call call) {
  gpualloc_t* handle = Handle(name);
  if (handle == nullptr) return Instance().create_status;
  const gpualloc_status_t s = call(handle);
  if (s != GPUALLOC_OK) FailWithLastError();
  return s;
}

// The tag malloc gives this thread's allocations.
extern thread_local std::uint32_t current_tag;

// malloc's body: the block (its size kept for free), or NULL after Fail.
void* Malloc(gpualloc_t* handle, size_t size, int device, void* stream);
// record_stream without a device: the devices used so far are asked in
// turn until one knows the pointer. False after Fail.
bool RecordStream(gpualloc_t* handle, void* ptr, void* stream);

// Graph pools (torch_pools.cc). Captures by filter underway: malloc asks
// their filters about its stream (RouteByFilter) while there are any.
extern std::atomic<int> filtered_captures;
// Before malloc on `stream` while captures by filter are underway: a stream
// a filter accepts allocates to that capture's pool.
void RouteByFilter(gpualloc_t* handle, int device, void* stream);

}  // namespace gpualloc::torch_internal

#endif  // GPUALLOC_BINDINGS_TORCH_TORCH_HOOK_INTERNAL_H_
