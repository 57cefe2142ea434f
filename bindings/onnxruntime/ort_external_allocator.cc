// SPDX-License-Identifier: Apache-2.0
// bindings/onnxruntime/ort_external_allocator.cc: the gpu_external_alloc /
// gpu_external_free / gpu_external_empty_cache functions of ONNX Runtime's
// CUDA provider options (gpualloc/adapters.h), over the C API. They take no
// context, so what they serve is process-wide: one allocator and device,
// set by gpualloc_ort_external_set.
#include <atomic>
#include <deque>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "bindings/c/c_api_internal.h"
#include "gpualloc/adapters.h"
#include "gpualloc/gpualloc.h"

namespace {

struct Target {
  gpualloc_t* allocator = nullptr;
  int device = 0;
};

// Set rarely, read on every call: the pair is written under `set_mu` and
// published through `current`. Pairs are kept for the process (a call racing
// a change must not read a dead one; one small pair per setting).
std::mutex set_mu;
std::atomic<const Target*> current{nullptr};

std::deque<Target>& Targets() {
  static auto* targets = new std::deque<Target>;
  return *targets;
}

// The target, or null with the last error set.
const Target* TargetOf(const char* function) {
  const Target* t = current.load(std::memory_order_acquire);
  if (t == nullptr || t->allocator == nullptr) {
    gpualloc::SetLastError(function,
                           "no allocator is set for ONNX Runtime's "
                           "gpu_external_* functions (call "
                           "gpualloc_ort_external_set first)",
                           nullptr, "gpualloc: no allocator set");
    return nullptr;
  }
  return t;
}

}  // namespace

extern "C" {

gpualloc_status_t gpualloc_ort_external_set(gpualloc_t* allocator, int device) {
  return gpualloc::Boundary("gpualloc_ort_external_set", [&]() {
    std::lock_guard<std::mutex> lock(set_mu);
    const Target* now = current.load(std::memory_order_acquire);
    if (allocator == nullptr) {
      current.store(nullptr, std::memory_order_release);
      return absl::OkStatus();
    }
    if (device < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device %d: the device must be an ordinal from 0 (ONNX Runtime's "
          "device_id)",
          device));
    }
    if (now != nullptr && now->allocator != nullptr &&
        (now->allocator != allocator || now->device != device)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the gpu_external_* functions already serve allocator %p, device "
          "%d; asked for allocator %p, device %d: call "
          "gpualloc_ort_external_set(NULL, 0) first, once ONNX Runtime has "
          "freed what it holds",
          static_cast<void*>(now->allocator), now->device,
          static_cast<void*>(allocator), device));
    }
    if (now == nullptr || now->allocator != allocator) {
      Targets().push_back(Target{allocator, device});
      current.store(&Targets().back(), std::memory_order_release);
    }
    return absl::OkStatus();
  });
}

void* gpualloc_ort_external_alloc(size_t size) {
  const Target* t = TargetOf("gpualloc_ort_external_alloc");
  if (t == nullptr) return nullptr;
  void* out = nullptr;
  if (gpualloc_malloc(t->allocator, t->device, size, nullptr, &out) !=
      GPUALLOC_OK) {
    return nullptr;
  }
  return out;
}

void gpualloc_ort_external_free(void* ptr) {
  const Target* t = TargetOf("gpualloc_ort_external_free");
  if (t == nullptr ||
      gpualloc_free(t->allocator, t->device, ptr, nullptr) != GPUALLOC_OK) {
    gpualloc::ReportToStderrOnce();
  }
}

void gpualloc_ort_external_empty_cache(void) {
  const Target* t = TargetOf("gpualloc_ort_external_empty_cache");
  if (t == nullptr || gpualloc_trim(t->allocator, t->device) != GPUALLOC_OK) {
    gpualloc::ReportToStderrOnce();
  }
}

}  // extern "C"
