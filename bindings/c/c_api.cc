// SPDX-License-Identifier: Apache-2.0
// bindings/c/c_api.cc: the C API (gpualloc/gpualloc.h) over a
// DeviceRegistry.
//
// Every entry point runs its body through Boundary(), which turns an
// absl::Status into the matching gpualloc_status_t, stores the message in the
// calling thread's last error, and catches any C++ exception (the library
// does not throw by design; std::bad_alloc from a container can) so that
// none crosses into C. Nothing after the catch may throw: the handlers use
// fixed messages (no absl::Status, no string building), and storing the last
// error falls back to a fixed message when its copy cannot be allocated.
//
// The handle and what the files share: bindings/c/c_api_internal.h; the
// statistics, snapshots and history context: bindings/c/c_api_report.cc.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "bindings/c/c_api_internal.h"
#include "bindings/c/gpualloc_version.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/config.h"
#include "gpualloc/gpualloc.h"
#include "gpualloc/runtime/registry.h"

namespace gpualloc {
namespace {

// The C enum mirrors absl::StatusCode value for value.
static_assert(GPUALLOC_OK == static_cast<int>(absl::StatusCode::kOk));
static_assert(GPUALLOC_INVALID_ARGUMENT ==
              static_cast<int>(absl::StatusCode::kInvalidArgument));
static_assert(GPUALLOC_RESOURCE_EXHAUSTED ==
              static_cast<int>(absl::StatusCode::kResourceExhausted));
static_assert(GPUALLOC_FAILED_PRECONDITION ==
              static_cast<int>(absl::StatusCode::kFailedPrecondition));
static_assert(GPUALLOC_UNIMPLEMENTED ==
              static_cast<int>(absl::StatusCode::kUnimplemented));
static_assert(GPUALLOC_INTERNAL ==
              static_cast<int>(absl::StatusCode::kInternal));
static_assert(GPUALLOC_UNAVAILABLE ==
              static_cast<int>(absl::StatusCode::kUnavailable));
static_assert(GPUALLOC_UNAUTHENTICATED ==
              static_cast<int>(absl::StatusCode::kUnauthenticated));

}  // namespace

LastErrorSlot& LastError() {
  thread_local LastErrorSlot slot;
  return slot;
}

void ReportToStderrOnce() noexcept {
  static std::atomic<bool> reported{false};
  if (reported.exchange(true)) return;
  std::fprintf(stderr,
               "%s\ngpualloc: (reported once; later failures of this kind "
               "are in gpualloc_last_error())\n",
               LastError().c_str());
}

void SetLastError(const char* function, absl::string_view message,
                  const char* detail, const char* fallback) noexcept {
  LastErrorSlot& slot = LastError();
  try {
    slot.text.clear();  // keeps the capacity
    slot.text.append(function).append(": ");
    slot.text.append(message.data(), message.size());
    if (detail != nullptr) slot.text.append(detail);
    slot.fixed = nullptr;
  } catch (...) {
    slot.fixed = fallback;
  }
}

gpualloc_status_t Report(const char* function,
                         const absl::Status& status) noexcept {
  if (status.ok()) return GPUALLOC_OK;
  SetLastError(function, status.message(), nullptr,
               "gpualloc: out of host memory for the error message");
  const int code = static_cast<int>(status.code());
  return code >= 0 && code <= GPUALLOC_UNAUTHENTICATED
             ? static_cast<gpualloc_status_t>(code)
             : GPUALLOC_UNKNOWN;
}

absl::Status NullArgument(absl::string_view name) {
  return absl::InvalidArgumentError(absl::StrCat(name, " is NULL"));
}

Stream StreamOf(void* stream) { return Stream::FromHandle(stream); }

namespace {

// The C handler as the allocator of `device` calls it (null for null).
OutOfMemoryHandler WrapOomHandler(int device, gpualloc_oom_handler_t handler,
                                  void* user_data) {
  if (handler == nullptr) return nullptr;
  return [device, handler, user_data](const OutOfMemoryInfo& info) {
    try {
      const std::string message(info.message);  // NUL-terminated
      gpualloc_oom_info_t c;
      std::memset(&c, 0, sizeof(c));
      c.device = device;
      c.size = info.bytes;
      c.alignment = info.alignment;
      c.stream = reinterpret_cast<void*>(info.stream.handle);
      c.bytes_limit = info.bytes_limit;
      c.bytes_in_use = info.bytes_in_use;
      c.bytes_reserved = info.bytes_reserved;
      c.largest_free_block_bytes = info.largest_free_block_bytes;
      c.message = message.c_str();
      return handler(&c, user_data) != 0 ? OutOfMemoryAction::kRetry
                                         : OutOfMemoryAction::kFail;
    } catch (...) {
      return OutOfMemoryAction::kFail;  // out of host memory for the copy
    }
  };
}

// A device's first use: it gets the handler set for every device.
void FirstUse(gpualloc_t* handle, int device, Allocator* a) {
  std::lock_guard<std::mutex> lock(handle->oom_mu);
  std::atomic<Allocator*>& used =
      handle->used[static_cast<std::size_t>(device)];
  if (used.load(std::memory_order_relaxed) != nullptr) return;  // raced
  if (handle->all_devices_handler != nullptr) {
    a->SetOutOfMemoryHandler(WrapOomHandler(device, handle->all_devices_handler,
                                            handle->all_devices_user_data));
  }
  used.store(a, std::memory_order_release);
}

}  // namespace

absl::StatusOr<Allocator*> AllocatorOf(gpualloc_t* handle, int device) {
  if (handle == nullptr) return NullArgument("the allocator handle");
  absl::StatusOr<Allocator*> a = handle->registry->Get(device);
  if (!a.ok()) return a.status();
  // Get checked the ordinal; remember the device as used.
  if (ABSL_PREDICT_FALSE(handle->used[static_cast<std::size_t>(device)].load(
                             std::memory_order_acquire) == nullptr)) {
    FirstUse(handle, device, *a);
  }
  return a;
}

namespace {

// Settings that could never work on any device (one that belongs to
// allocator=bfc with another mode) fail here, in DeviceRegistry::Create,
// whatever the backend; the simulator's are all checked there; a GPU's
// others at its first gpualloc_malloc. Each error names the key or variable
// the user set.
absl::Status Create(const char* config, const EnvLookup& env,
                    Conventions conventions, gpualloc_t** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  absl::StatusOr<Config> resolved =
      ResolveConfig(config == nullptr ? "" : config, env, conventions);
  if (!resolved.ok()) return resolved.status();
  absl::StatusOr<std::unique_ptr<DeviceRegistry>> registry =
      DeviceRegistry::Create(*resolved);
  if (!registry.ok()) return registry.status();
  auto handle = std::make_unique<gpualloc_t>();
  const int n = (*registry)->num_devices();
  handle->used.reset(
      new std::atomic<Allocator*>[static_cast<std::size_t>(n)]());
  for (int i = 0; i < n; ++i) handle->used[i].store(nullptr);
  handle->registry = std::move(*registry);
  *out = handle.release();
  return absl::OkStatus();
}

absl::Status Malloc(gpualloc_t* handle, int device, size_t size,
                    size_t alignment, void* stream, void** out, Tag tag = 0) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  absl::StatusOr<Allocator*> a = AllocatorOf(handle, device);
  if (!a.ok()) return a.status();
  absl::StatusOr<void*> p =
      (*a)->Allocate(size, StreamOf(stream), alignment, tag);
  if (!p.ok()) return p.status();
  *out = *p;
  return absl::OkStatus();
}

void CopyReport(const SleepReport& r, gpualloc_sleep_report_t* out) {
  gpualloc_sleep_report_t full;
  std::memset(&full, 0, sizeof(full));
  full.struct_size = sizeof(full);
  full.allocations = r.allocations;
  full.bytes_in_use = r.bytes_in_use;
  full.bytes_released = r.bytes_released;
  full.bytes_kept = r.bytes_kept;
  full.bytes_backed_up = r.bytes_backed_up;
  constexpr std::size_t kFieldEnds[] = {
#define GPUALLOC_FIELD_END(f) \
  offsetof(gpualloc_sleep_report_t, f) + sizeof(gpualloc_sleep_report_t::f)
      GPUALLOC_FIELD_END(struct_size),  GPUALLOC_FIELD_END(allocations),
      GPUALLOC_FIELD_END(bytes_in_use), GPUALLOC_FIELD_END(bytes_released),
      GPUALLOC_FIELD_END(bytes_kept),   GPUALLOC_FIELD_END(bytes_backed_up),
#undef GPUALLOC_FIELD_END
  };
  static_assert(
      kFieldEnds[std::size(kFieldEnds) - 1] == sizeof(gpualloc_sleep_report_t),
      "every gpualloc_sleep_report_t field must be listed in kFieldEnds");
  CopyFieldsThatFit(&full, out, out->struct_size, kFieldEnds);
}

}  // namespace
}  // namespace gpualloc

using gpualloc::Boundary;

namespace gpualloc {
namespace {
// `f` on the device's allocator, or with GPUALLOC_ALL_DEVICES on every device
// used so far (creating none); then the first error after all were tried.
template <typename F>
absl::Status OnDevices(gpualloc_t* allocator, int device, F f) {
  if (allocator == nullptr) return NullArgument("the allocator handle");
  if (device != GPUALLOC_ALL_DEVICES) {
    absl::StatusOr<Allocator*> a = AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    return f(**a);
  }
  absl::Status first;
  for (int d = 0; d < allocator->registry->num_devices(); ++d) {
    Allocator* a = allocator->used[static_cast<std::size_t>(d)].load(
        std::memory_order_acquire);
    if (a == nullptr) continue;
    absl::Status s = f(*a);
    if (!s.ok() && first.ok()) {
      first =
          absl::Status(s.code(), absl::StrCat("device ", d, ": ", s.message()));
    }
  }
  return first;
}

// The pool calls: one allocator, one call.
template <typename Call>
gpualloc_status_t OnPool(const char* name, gpualloc_t* allocator, int device,
                         Call call) {
  return Boundary(name, [&]() -> absl::Status {
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    return call(**a);
  });
}
}  // namespace
}  // namespace gpualloc

extern "C" {

gpualloc_status_t gpualloc_create(const char* config, gpualloc_t** out) {
  return Boundary("gpualloc_create", [&] {
    if (out != nullptr) *out = nullptr;  // also when the environment throws
    return gpualloc::Create(config, gpualloc::ProcessEnvironment(),
                            gpualloc::Conventions::kJax, out);
  });
}

gpualloc_status_t gpualloc_create_pytorch(const char* config,
                                          gpualloc_t** out) {
  return Boundary("gpualloc_create_pytorch", [&] {
    if (out != nullptr) *out = nullptr;  // also when the environment throws
    return gpualloc::Create(config, gpualloc::ProcessEnvironment(),
                            gpualloc::Conventions::kPytorch, out);
  });
}

gpualloc_status_t gpualloc_create_isolated(const char* config,
                                           gpualloc_t** out) {
  return Boundary("gpualloc_create_isolated", [&] {
    if (out != nullptr) *out = nullptr;  // also when the environment throws
    return gpualloc::Create(config, gpualloc::MapEnvironment({}),
                            gpualloc::Conventions::kJax, out);
  });
}

void gpualloc_destroy(gpualloc_t* allocator) {
  // Destructors do not throw; nothing to report.
  delete allocator;
}

gpualloc_status_t gpualloc_device_count(gpualloc_t* allocator, int* out) {
  return Boundary("gpualloc_device_count", [&]() -> absl::Status {
    if (allocator == nullptr) {
      return gpualloc::NullArgument("the allocator handle");
    }
    if (out == nullptr) return gpualloc::NullArgument("out");
    *out = allocator->registry->num_devices();
    return absl::OkStatus();
  });
}

gpualloc_status_t gpualloc_malloc(gpualloc_t* allocator, int device,
                                  size_t size, void* stream, void** out) {
  return Boundary("gpualloc_malloc", [&] {
    return gpualloc::Malloc(allocator, device, size, 0, stream, out);
  });
}

gpualloc_status_t gpualloc_malloc_aligned(gpualloc_t* allocator, int device,
                                          size_t size, size_t alignment,
                                          void* stream, void** out) {
  return Boundary("gpualloc_malloc_aligned", [&] {
    return gpualloc::Malloc(allocator, device, size, alignment, stream, out);
  });
}

gpualloc_status_t gpualloc_malloc_tagged(gpualloc_t* allocator, int device,
                                         size_t size, size_t alignment,
                                         void* stream, uint32_t tag,
                                         void** out) {
  return Boundary("gpualloc_malloc_tagged", [&] {
    return gpualloc::Malloc(allocator, device, size, alignment, stream, out,
                            tag);
  });
}

gpualloc_status_t gpualloc_free(gpualloc_t* allocator, int device, void* ptr,
                                void* stream) {
  return Boundary("gpualloc_free", [&]() -> absl::Status {
    if (allocator == nullptr) {
      return gpualloc::NullArgument("the allocator handle");
    }
    if (ptr == nullptr) return absl::OkStatus();
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    return (*a)->Deallocate(ptr, gpualloc::StreamOf(stream));
  });
}

gpualloc_status_t gpualloc_record_stream(gpualloc_t* allocator, int device,
                                         void* ptr, void* stream) {
  return Boundary("gpualloc_record_stream", [&]() -> absl::Status {
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    return (*a)->RecordStream(ptr, gpualloc::StreamOf(stream));
  });
}

gpualloc_status_t gpualloc_trim(gpualloc_t* allocator, int device) {
  return Boundary("gpualloc_trim", [&]() -> absl::Status {
    return gpualloc::OnDevices(allocator, device,
                               [](gpualloc::Allocator& a) { return a.Trim(); });
  });
}

gpualloc_status_t gpualloc_set_memory_limit(gpualloc_t* allocator, int device,
                                            uint64_t bytes) {
  return Boundary("gpualloc_set_memory_limit", [&]() -> absl::Status {
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    return (*a)->SetLimit(bytes);
  });
}

gpualloc_status_t gpualloc_set_memory_fraction(gpualloc_t* allocator,
                                               int device, double fraction) {
  return Boundary("gpualloc_set_memory_fraction", [&]() -> absl::Status {
    // Written so that NaN fails too.
    if (!(fraction > 0 && fraction <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("memory fraction %g is not in (0, 1]", fraction));
    }
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    const double total = static_cast<double>((*a)->device().total_bytes);
    return (*a)->SetLimit(static_cast<std::uint64_t>(fraction * total));
  });
}

gpualloc_status_t gpualloc_release_stream(gpualloc_t* allocator, int device,
                                          void* stream) {
  return Boundary("gpualloc_release_stream", [&]() -> absl::Status {
    return gpualloc::OnDevices(
        allocator, device, [stream](gpualloc::Allocator& a) {
          return a.ReleaseStream(gpualloc::StreamOf(stream));
        });
  });
}

gpualloc_status_t gpualloc_sleep(gpualloc_t* allocator, int device,
                                 uint32_t tag, int backup,
                                 gpualloc_sleep_report_t* report) {
  return gpualloc::OnPool(
      "gpualloc_sleep", allocator, device,
      [&](gpualloc::Allocator& a) -> absl::Status {
        if (report != nullptr && report->struct_size < sizeof(uint64_t)) {
          return absl::InvalidArgumentError(
              "report->struct_size is smaller than the struct_size field; "
              "set it to sizeof(gpualloc_sleep_report_t)");
        }
        absl::StatusOr<gpualloc::SleepReport> r = a.Sleep(tag, backup != 0);
        if (!r.ok()) return r.status();
        if (report != nullptr) gpualloc::CopyReport(*r, report);
        return absl::OkStatus();
      });
}

gpualloc_status_t gpualloc_wake(gpualloc_t* allocator, int device,
                                uint32_t tag) {
  return gpualloc::OnPool("gpualloc_wake", allocator, device,
                          [&](gpualloc::Allocator& a) { return a.Wake(tag); });
}

gpualloc_status_t gpualloc_create_pool(gpualloc_t* allocator, int device,
                                       uint64_t* out) {
  return Boundary("gpualloc_create_pool", [&]() -> absl::Status {
    if (out == nullptr) return gpualloc::NullArgument("out");
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    absl::StatusOr<gpualloc::PoolId> pool = (*a)->CreatePool();
    if (!pool.ok()) return pool.status();
    *out = *pool;
    return absl::OkStatus();
  });
}

gpualloc_status_t gpualloc_retain_pool(gpualloc_t* allocator, int device,
                                       uint64_t pool) {
  return gpualloc::OnPool(
      "gpualloc_retain_pool", allocator, device,
      [&](gpualloc::Allocator& a) { return a.RetainPool(pool); });
}

gpualloc_status_t gpualloc_release_pool(gpualloc_t* allocator, int device,
                                        uint64_t pool, void* last_use) {
  return gpualloc::OnPool(
      "gpualloc_release_pool", allocator, device, [&](gpualloc::Allocator& a) {
        return a.ReleasePool(pool, gpualloc::StreamOf(last_use));
      });
}

gpualloc_status_t gpualloc_begin_allocate_to_pool(gpualloc_t* allocator,
                                                  int device, uint64_t pool,
                                                  void* stream) {
  return gpualloc::OnPool("gpualloc_begin_allocate_to_pool", allocator, device,
                          [&](gpualloc::Allocator& a) {
                            return a.BeginAllocateToPool(
                                pool, gpualloc::StreamOf(stream));
                          });
}

gpualloc_status_t gpualloc_end_allocate_to_pool(gpualloc_t* allocator,
                                                int device, uint64_t pool) {
  return gpualloc::OnPool(
      "gpualloc_end_allocate_to_pool", allocator, device,
      [&](gpualloc::Allocator& a) { return a.EndAllocateToPool(pool); });
}

gpualloc_status_t gpualloc_set_oom_handler(gpualloc_t* allocator, int device,
                                           gpualloc_oom_handler_t handler,
                                           void* user_data) {
  return Boundary("gpualloc_set_oom_handler", [&]() -> absl::Status {
    if (allocator == nullptr) {
      return gpualloc::NullArgument("the allocator handle");
    }
    if (device != GPUALLOC_ALL_DEVICES) {
      absl::StatusOr<gpualloc::Allocator*> a =
          gpualloc::AllocatorOf(allocator, device);
      if (!a.ok()) return a.status();
      std::lock_guard<std::mutex> lock(allocator->oom_mu);
      (*a)->SetOutOfMemoryHandler(
          gpualloc::WrapOomHandler(device, handler, user_data));
      return absl::OkStatus();
    }
    // Devices used later get it at their first use (FirstUse).
    std::lock_guard<std::mutex> lock(allocator->oom_mu);
    allocator->all_devices_handler = handler;
    allocator->all_devices_user_data = user_data;
    for (int d = 0; d < allocator->registry->num_devices(); ++d) {
      gpualloc::Allocator* a =
          allocator->used[static_cast<std::size_t>(d)].load(
              std::memory_order_acquire);
      if (a != nullptr) {
        a->SetOutOfMemoryHandler(
            gpualloc::WrapOomHandler(d, handler, user_data));
      }
    }
    return absl::OkStatus();
  });
}

gpualloc_status_t gpualloc_validate(gpualloc_t* allocator, int device) {
  return Boundary("gpualloc_validate", [&]() -> absl::Status {
    absl::StatusOr<gpualloc::Allocator*> a =
        gpualloc::AllocatorOf(allocator, device);
    if (!a.ok()) return a.status();
    return (*a)->Validate();
  });
}

const char* gpualloc_last_error(void) { return gpualloc::LastError().c_str(); }

const char* gpualloc_status_name(gpualloc_status_t status) {
  switch (status) {
    case GPUALLOC_OK:
      return "OK";
    case GPUALLOC_CANCELLED:
      return "CANCELLED";
    case GPUALLOC_UNKNOWN:
      return "UNKNOWN";
    case GPUALLOC_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case GPUALLOC_DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case GPUALLOC_NOT_FOUND:
      return "NOT_FOUND";
    case GPUALLOC_ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case GPUALLOC_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case GPUALLOC_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case GPUALLOC_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case GPUALLOC_ABORTED:
      return "ABORTED";
    case GPUALLOC_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case GPUALLOC_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case GPUALLOC_INTERNAL:
      return "INTERNAL";
    case GPUALLOC_UNAVAILABLE:
      return "UNAVAILABLE";
    case GPUALLOC_DATA_LOSS:
      return "DATA_LOSS";
    case GPUALLOC_UNAUTHENTICATED:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN_STATUS";
}

const char* gpualloc_version(void) { return GPUALLOC_VERSION_STRING; }

}  // extern "C"
