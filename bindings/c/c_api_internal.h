// SPDX-License-Identifier: Apache-2.0
// bindings/c/c_api_internal.h: what the C API's files (c_api.cc,
// c_api_report.cc) share: the handle, the boundary every entry point runs its
// body through (Boundary, described in c_api.cc), the calling thread's last
// error, the lookup of a device's allocator and the copy into a caller's
// versioned struct. Internal to bindings/c and hidden in the shared library:
// its C symbols stay the GPUALLOC_API functions of gpualloc/gpualloc.h.
#ifndef GPUALLOC_BINDINGS_C_C_API_INTERNAL_H_
#define GPUALLOC_BINDINGS_C_C_API_INTERNAL_H_

// A file of the bindings layer (docs/DESIGN.md, "Layers").
#if defined(GPUALLOC_LAYER) && GPUALLOC_LAYER < 4
#error \
    "bindings/c/ belongs to the bindings layer; a lower layer of the library may not include it"
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/gpualloc.h"
#include "gpualloc/runtime/registry.h"

// The handle: the registry, plus which devices were used (for
// gpualloc_trim(GPUALLOC_ALL_DEVICES), which must not create allocators), and
// the out-of-memory handler set for every device, which a device gets at its
// first use.
struct gpualloc_handle {
  std::unique_ptr<gpualloc::DeviceRegistry> registry;
  std::unique_ptr<std::atomic<gpualloc::Allocator*>[]> used;
  // Guards first uses (a device's entry in `used` going from null) and
  // handler settings, so that a device never misses or overrides a setting.
  std::mutex oom_mu;
  gpualloc_oom_handler_t all_devices_handler = nullptr;
  void* all_devices_user_data = nullptr;
};

#pragma GCC visibility push(hidden)

namespace gpualloc {

// The calling thread's last error: `text`, or `fixed` (a static string) when
// the text could not be stored.
struct LastErrorSlot {
  std::string text;
  const char* fixed = nullptr;
  const char* c_str() const { return fixed != nullptr ? fixed : text.c_str(); }
};

LastErrorSlot& LastError();

// Stores "<function>: <message><detail>" as the last error; when that cannot
// be allocated, the static `fallback` instead. Never throws.
void SetLastError(const char* function, absl::string_view message,
                  const char* detail, const char* fallback) noexcept;

// `status` as a gpualloc_status_t; a failure also becomes the last error,
// "<function>: <message>".
gpualloc_status_t Report(const char* function,
                         const absl::Status& status) noexcept;

// Runs `body` (returning absl::Status) with every exception caught. The
// handlers allocate nothing that could throw again (a second exception would
// leave this noexcept function and terminate the program).
template <typename Body>
gpualloc_status_t Boundary(const char* function, Body&& body) noexcept {
  try {
    return Report(function, body());
  } catch (const std::bad_alloc&) {
    SetLastError(function, "out of host memory (std::bad_alloc)", nullptr,
                 "gpualloc: out of host memory (std::bad_alloc)");
    return GPUALLOC_RESOURCE_EXHAUSTED;
  } catch (const std::exception& e) {
    SetLastError(function, "unexpected C++ exception: ", e.what(),
                 "gpualloc: unexpected C++ exception");
    return GPUALLOC_INTERNAL;
  } catch (...) {
    SetLastError(function, "unexpected unknown C++ exception", nullptr,
                 "gpualloc: unexpected unknown C++ exception");
    return GPUALLOC_INTERNAL;
  }
}

absl::Status NullArgument(absl::string_view name);

Stream StreamOf(void* stream);

// The allocator of `device` (checked); its first use gets the out-of-memory
// handler set for every device.
absl::StatusOr<Allocator*> AllocatorOf(gpualloc_t* handle, int device);

// For an entry point whose runtime cannot be told of a failure (a free called
// from the runtime's destructor, gpualloc/adapters.h): writes the calling
// thread's last error to stderr, the first time in the process only (later
// failures are in gpualloc_last_error()).
void ReportToStderrOnce() noexcept;

// `s` into the caller's gpualloc_stats_t, as far as its struct_size says
// (c_api_report.cc).
void CopyStats(const Stats& s, gpualloc_stats_t* out);

// The caller's struct (its first field is struct_size, left as the caller
// set it) may be older (smaller): fill the whole fields that fit, never part
// of one. Or newer (larger): fill this library's fields, leave the rest.
// `field_ends`: the end offset of each field, in any order (the fields lie
// back to back after struct_size).
template <typename T, std::size_t N>
void CopyFieldsThatFit(const T* full, T* out, std::uint64_t out_size,
                       const std::size_t (&field_ends)[N]) {
  std::size_t size = sizeof(std::uint64_t);
  for (std::size_t end : field_ends) {
    if (end <= out_size) size = std::max(size, end);
  }
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(std::uint64_t),
              reinterpret_cast<const char*>(full) + sizeof(std::uint64_t),
              size - sizeof(std::uint64_t));
}

}  // namespace gpualloc

#pragma GCC visibility pop

#endif  // GPUALLOC_BINDINGS_C_C_API_INTERNAL_H_
