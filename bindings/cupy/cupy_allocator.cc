// SPDX-License-Identifier: Apache-2.0
// bindings/cupy/cupy_allocator.cc: the malloc and free CuPy's
// CFunctionAllocator calls (gpualloc/adapters.h), over the C API. The param
// CuPy passes back names the allocator and the stream: gpualloc.cupy keeps
// one per CuPy stream, since CuPy's call carries none.
#include <new>

#include "absl/status/status.h"
#include "bindings/c/c_api_internal.h"
#include "gpualloc/adapters.h"
#include "gpualloc/gpualloc.h"

struct gpualloc_cupy_param {
  gpualloc_t* allocator;
  void* stream;
};

namespace {

// The param CuPy passed, or null with the last error set.
gpualloc_cupy_param* ParamOf(void* param, const char* function) {
  if (param == nullptr ||
      static_cast<gpualloc_cupy_param*>(param)->allocator == nullptr) {
    gpualloc::SetLastError(function,
                           "the param is NULL or has no allocator (make it "
                           "with gpualloc_cupy_param_create)",
                           nullptr, "gpualloc: bad CuPy param");
    return nullptr;
  }
  return static_cast<gpualloc_cupy_param*>(param);
}

}  // namespace

extern "C" {

gpualloc_status_t gpualloc_cupy_param_create(gpualloc_t* allocator,
                                             void* stream,
                                             gpualloc_cupy_param_t** out) {
  return gpualloc::Boundary("gpualloc_cupy_param_create", [&]() {
    if (out == nullptr) return gpualloc::NullArgument("out");
    *out = nullptr;
    if (allocator == nullptr) {
      return gpualloc::NullArgument("the allocator handle");
    }
    *out = new gpualloc_cupy_param{allocator, stream};
    return absl::OkStatus();
  });
}

void gpualloc_cupy_param_destroy(gpualloc_cupy_param_t* param) { delete param; }

void* gpualloc_cupy_malloc(void* param, size_t size, int device) {
  gpualloc_cupy_param* p = ParamOf(param, "gpualloc_cupy_malloc");
  if (p == nullptr) return nullptr;
  void* out = nullptr;
  if (gpualloc_malloc(p->allocator, device, size, p->stream, &out) !=
      GPUALLOC_OK) {
    return nullptr;
  }
  return out;
}

void gpualloc_cupy_free(void* param, void* ptr, int device) {
  gpualloc_cupy_param* p = ParamOf(param, "gpualloc_cupy_free");
  if (p == nullptr ||
      gpualloc_free(p->allocator, device, ptr, p->stream) != GPUALLOC_OK) {
    gpualloc::ReportToStderrOnce();
  }
}

}  // extern "C"
