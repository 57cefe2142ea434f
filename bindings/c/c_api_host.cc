// SPDX-License-Identifier: Apache-2.0
// bindings/c/c_api_host.cc: the C API's pinned host memory pool
// (gpualloc_host_*): the handle's registry creates it on first use over
// device 0's backend (DeviceRegistry::GetHost). Each entry point runs through
// Boundary (bindings/c/c_api_internal.h), as in c_api.cc.
#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "bindings/c/c_api_internal.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/gpualloc.h"

namespace gpualloc {
namespace {

absl::StatusOr<Allocator*> HostPoolOf(gpualloc_t* handle) {
  if (handle == nullptr) return NullArgument("the allocator handle");
  return handle->registry->GetHost();
}

}  // namespace
}  // namespace gpualloc

using gpualloc::Boundary;

extern "C" {

gpualloc_status_t gpualloc_host_alloc(gpualloc_t* allocator, size_t bytes,
                                      void** out) {
  return Boundary("gpualloc_host_alloc", [&]() -> absl::Status {
    if (out == nullptr) return gpualloc::NullArgument("out");
    *out = nullptr;
    absl::StatusOr<gpualloc::Allocator*> a = gpualloc::HostPoolOf(allocator);
    if (!a.ok()) return a.status();
    absl::StatusOr<void*> p = (*a)->Allocate(bytes);
    if (!p.ok()) return p.status();
    *out = *p;
    return absl::OkStatus();
  });
}

gpualloc_status_t gpualloc_host_free(gpualloc_t* allocator, void* ptr) {
  return Boundary("gpualloc_host_free", [&]() -> absl::Status {
    if (allocator == nullptr) {
      return gpualloc::NullArgument("the allocator handle");
    }
    if (ptr == nullptr) return absl::OkStatus();
    absl::StatusOr<gpualloc::Allocator*> a = gpualloc::HostPoolOf(allocator);
    if (!a.ok()) return a.status();
    return (*a)->Deallocate(ptr);
  });
}

gpualloc_status_t gpualloc_host_record_stream(gpualloc_t* allocator, void* ptr,
                                              void* stream) {
  return Boundary("gpualloc_host_record_stream", [&]() -> absl::Status {
    absl::StatusOr<gpualloc::Allocator*> a = gpualloc::HostPoolOf(allocator);
    if (!a.ok()) return a.status();
    return (*a)->RecordStream(ptr, gpualloc::StreamOf(stream));
  });
}

gpualloc_status_t gpualloc_host_trim(gpualloc_t* allocator) {
  return Boundary("gpualloc_host_trim", [&]() -> absl::Status {
    absl::StatusOr<gpualloc::Allocator*> a = gpualloc::HostPoolOf(allocator);
    if (!a.ok()) return a.status();
    return (*a)->Trim();
  });
}

gpualloc_status_t gpualloc_host_get_stats(gpualloc_t* allocator,
                                          gpualloc_stats_t* out) {
  return Boundary("gpualloc_host_get_stats", [&]() -> absl::Status {
    if (out == nullptr) return gpualloc::NullArgument("out");
    if (out->struct_size < sizeof(out->struct_size)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "out->struct_size is %d: set it to sizeof(gpualloc_stats_t) (%d in "
          "this library)",
          out->struct_size, sizeof(gpualloc_stats_t)));
    }
    absl::StatusOr<gpualloc::Allocator*> a = gpualloc::HostPoolOf(allocator);
    if (!a.ok()) return a.status();
    gpualloc::CopyStats((*a)->GetStats(), out);
    return absl::OkStatus();
  });
}

}  // extern "C"
