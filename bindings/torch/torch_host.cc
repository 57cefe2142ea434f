// SPDX-License-Identifier: Apache-2.0
// bindings/torch/torch_host.cc: the pinned host memory pool through the hook
// library, for python/gpualloc/torch.py's pinned_empty and
// host_record_stream. PyTorch has no pluggable host allocator (its
// CachingHostAllocator is not replaceable from Python), so these are called
// by the helper directly: 0 or a gpualloc_status_t, the reason kept for
// gpualloc_torch_last_error(), as every gpualloc_torch_* entry point.
#include <cstddef>

#include "bindings/torch/torch_hook_internal.h"
#include "gpualloc/gpualloc.h"

using gpualloc::torch_internal::Checked;

extern "C" {

GPUALLOC_API int gpualloc_torch_host_alloc(size_t bytes, void** out) {
  return Checked("gpualloc_torch_host_alloc", [&](gpualloc_t* h) {
    return gpualloc_host_alloc(h, bytes, out);
  });
}

GPUALLOC_API int gpualloc_torch_host_free(void* ptr) {
  return Checked("gpualloc_torch_host_free",
                 [&](gpualloc_t* h) { return gpualloc_host_free(h, ptr); });
}

GPUALLOC_API int gpualloc_torch_host_record_stream(void* ptr, void* stream) {
  return Checked("gpualloc_torch_host_record_stream", [&](gpualloc_t* h) {
    return gpualloc_host_record_stream(h, ptr, stream);
  });
}

GPUALLOC_API int gpualloc_torch_host_trim(void) {
  return Checked("gpualloc_torch_host_trim",
                 [&](gpualloc_t* h) { return gpualloc_host_trim(h); });
}

GPUALLOC_API int gpualloc_torch_host_get_stats(gpualloc_stats_t* out) {
  return Checked("gpualloc_torch_host_get_stats", [&](gpualloc_t* h) {
    return gpualloc_host_get_stats(h, out);
  });
}

}  // extern "C"
