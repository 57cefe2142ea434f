// SPDX-License-Identifier: Apache-2.0
// bindings/c/c_api_ipc.cc: the C API's (gpualloc/gpualloc.h) sharing of
// blocks with other processes: gpualloc_export, gpualloc_import and
// gpualloc_close_import over Allocator::Export, Import and CloseImport. Each
// entry point runs through Boundary (bindings/c/c_api_internal.h), as in
// c_api.cc.
#include <cstddef>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "bindings/c/c_api_internal.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/gpualloc.h"

using gpualloc::Boundary;

extern "C" {

gpualloc_status_t gpualloc_export(gpualloc_t* allocator, int device, void* ptr,
                                  void* buffer, size_t capacity,
                                  size_t* length) {
  return Boundary("gpualloc_export", [&]() -> absl::Status {
    if (length == nullptr) return gpualloc::NullArgument("length");
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    absl::StatusOr<std::string> description = (*a)->Export(ptr);
    if (!description.ok()) return description.status();
    *length = description->size();
    if (buffer == nullptr || capacity < description->size()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the description has %d bytes and the buffer holds %d; call again "
          "with a buffer of at least *length bytes",
          description->size(), buffer == nullptr ? 0 : capacity));
    }
    std::memcpy(buffer, description->data(), description->size());
    return absl::OkStatus();
  });
}

gpualloc_status_t gpualloc_import(gpualloc_t* allocator, int device,
                                  const void* description, size_t length,
                                  void** ptr, size_t* bytes) {
  return Boundary("gpualloc_import", [&]() -> absl::Status {
    if (ptr == nullptr) return gpualloc::NullArgument("ptr");
    *ptr = nullptr;
    if (description == nullptr) return gpualloc::NullArgument("description");
    // No description is this long (2^16 mappings of 16 bytes, the most one
    // names, and the header: about 1 MiB); a longer length is refused before
    // it becomes a string_view, which one above PTRDIFF_MAX would abort.
    constexpr size_t kLongest = size_t{2} << 20;
    if (length > kLongest) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "length %d: longer than any description (at most %d bytes); pass "
          "the length gpualloc_export gave",
          length, kLongest));
    }
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    absl::StatusOr<gpualloc::ImportedBlock> block = (*a)->Import(
        absl::string_view(static_cast<const char*>(description), length));
    if (!block.ok()) return block.status();
    *ptr = block->ptr;
    if (bytes != nullptr) *bytes = block->bytes;
    return absl::OkStatus();
  });
}

gpualloc_status_t gpualloc_close_import(gpualloc_t* allocator, int device,
                                        void* ptr) {
  return Boundary("gpualloc_close_import", [&]() -> absl::Status {
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    return (*a)->CloseImport(ptr);
  });
}

}  // extern "C"
