// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_driver.cc: loading libcuda.so.1 and resolving its entry
// points; CUresult -> absl::Status.
#include "backends/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpualloc::cuda {
namespace {

// cuDriverGetVersion exists since CUDA 2.2: ask for that ABI so the request is
// valid on every driver, before the driver's version is known.
constexpr int kDriverGetVersionSince = 2020;

// The resolver's two published signatures (CUDA 12+, and 11.3 - 11.8).
using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);
using GetProcAddressV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

// Resolves one entry point into `*out`. A symbol the driver does not have for
// `version` leaves `*out` null and is appended to `missing`; a failing
// resolver is Unavailable.
template <typename Fn>
absl::Status ResolveOne(const ProcAddressResolver& resolve, const char* name,
                        int version, Fn* out,
                        std::vector<std::string>* missing) {
  void* pfn = nullptr;
  const CUresult result =
      resolve(name, &pfn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  if (result != CUDA_SUCCESS) {
    return absl::UnavailableError(absl::StrCat(
        "cuGetProcAddress(\"", name, "\", CUDA ", CudaVersionString(version),
        ") failed: CUresult ", static_cast<int>(result)));
  }
  *out = reinterpret_cast<Fn>(pfn);
  if (pfn == nullptr) {
    missing->push_back(absl::StrCat(name, " (not provided for CUDA ",
                                    CudaVersionString(version), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

// Whether every entry point of a group resolved.
#define GPUALLOC_CUDA_RESOLVED_(name) &&name != nullptr
bool CudaDriverApi::has_virtual_memory() const {
  return true GPUALLOC_CUDA_VMM_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVED_);
}
bool CudaDriverApi::has_pools() const {
  return true GPUALLOC_CUDA_POOL_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVED_);
}
bool CudaDriverApi::has_capture() const {
  return true GPUALLOC_CUDA_CAPTURE_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVED_);
}
bool CudaDriverApi::has_host_copy() const {
  return true GPUALLOC_CUDA_COPY_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVED_);
}
bool CudaDriverApi::has_ipc() const {
  return true GPUALLOC_CUDA_IPC_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVED_);
}
bool CudaDriverApi::has_shareable_handles() const {
  return true GPUALLOC_CUDA_SHARE_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVED_);
}
bool CudaDriverApi::has_host_memory() const {
  return true GPUALLOC_CUDA_HOST_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVED_);
}
bool CudaDriverApi::has_counters() const {
  return true GPUALLOC_CUDA_COUNTER_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVED_);
}
#undef GPUALLOC_CUDA_RESOLVED_

std::string CudaVersionString(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

absl::Status ResolveEntryPoints(const ProcAddressResolver& resolve,
                                CudaDriverApi* api) {
  std::string source = std::move(api->source);
  *api = CudaDriverApi();
  api->source = std::move(source);

  std::vector<std::string> core_missing;
  absl::Status status =
      ResolveOne(resolve, "cuDriverGetVersion", kDriverGetVersionSince,
                 &api->cuDriverGetVersion, &core_missing);
  if (!status.ok()) return status;
  if (api->cuDriverGetVersion == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(api->source, " does not provide cuDriverGetVersion"));
  }
  int driver_version = 0;
  const CUresult version_result = api->cuDriverGetVersion(&driver_version);
  if (version_result != CUDA_SUCCESS) {
    return absl::UnavailableError(
        absl::StrCat("cuDriverGetVersion failed: CUresult ",
                     static_cast<int>(version_result)));
  }
  api->driver_version = driver_version;
  // Asking for a version newer than the driver is CUDA_ERROR_INVALID_VALUE;
  // an older driver's entry points have the ABI the header gives for them.
  api->requested_version = std::min(CUDA_VERSION, driver_version);
  const int version = api->requested_version;

  // The names are spelled out (#name is not macro-expanded): the resolver
  // wants base names, "cuMemAlloc" rather than "cuMemAlloc_v2".
#define GPUALLOC_CUDA_RESOLVE_(name)                                 \
  status = ResolveOne(resolve, #name, version, &api->name, missing); \
  if (!status.ok()) return status;
  {
    std::vector<std::string>* missing = &core_missing;
    GPUALLOC_CUDA_CORE_ENTRY_POINTS(GPUALLOC_CUDA_RESOLVE_)
  }
  if (!core_missing.empty()) {
    return absl::UnavailableError(absl::StrCat(
        api->source, " (CUDA driver ", CudaVersionString(driver_version),
        ") lacks entry points gpualloc needs: ",
        absl::StrJoin(core_missing, ", ")));
  }
  // A group works whole or not at all: one that does not resolve whole is
  // cleared, and what it lacks listed in api->missing.
#define GPUALLOC_CUDA_CLEAR_(name) api->name = nullptr;
// clang-format off
#define GPUALLOC_CUDA_OPTIONAL_GROUP_(group)                              \
  {                                                                       \
    std::vector<std::string> group_missing;                               \
    std::vector<std::string>* missing = &group_missing;                   \
    group(GPUALLOC_CUDA_RESOLVE_)                                         \
    if (!group_missing.empty()) {                                         \
      group(GPUALLOC_CUDA_CLEAR_)                                         \
      api->missing.insert(api->missing.end(), group_missing.begin(),      \
                          group_missing.end());                           \
    }                                                                     \
  }
  // clang-format on
  GPUALLOC_CUDA_OPTIONAL_GROUP_(GPUALLOC_CUDA_VMM_ENTRY_POINTS)
  GPUALLOC_CUDA_OPTIONAL_GROUP_(GPUALLOC_CUDA_POOL_ENTRY_POINTS)
  GPUALLOC_CUDA_OPTIONAL_GROUP_(GPUALLOC_CUDA_CAPTURE_ENTRY_POINTS)
  GPUALLOC_CUDA_OPTIONAL_GROUP_(GPUALLOC_CUDA_COPY_ENTRY_POINTS)
  GPUALLOC_CUDA_OPTIONAL_GROUP_(GPUALLOC_CUDA_IPC_ENTRY_POINTS)
  GPUALLOC_CUDA_OPTIONAL_GROUP_(GPUALLOC_CUDA_SHARE_ENTRY_POINTS)
  GPUALLOC_CUDA_OPTIONAL_GROUP_(GPUALLOC_CUDA_HOST_ENTRY_POINTS)
  GPUALLOC_CUDA_OPTIONAL_GROUP_(GPUALLOC_CUDA_COUNTER_ENTRY_POINTS)
#undef GPUALLOC_CUDA_OPTIONAL_GROUP_
#undef GPUALLOC_CUDA_CLEAR_
#undef GPUALLOC_CUDA_RESOLVE_
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const CudaDriverApi>> LoadCudaDriver(
    absl::string_view library) {
  const std::string name(library);
  dlerror();  // clear
  // Never closed once loaded successfully: drivers do not support being
  // unloaded while in use, and the table's pointers point into it.
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("the CUDA driver is not loadable: dlopen(\"", name,
                     "\") failed: ", why != nullptr ? why : "no reason given",
                     " (no NVIDIA driver on this machine?)"));
  }
  auto api = std::make_shared<CudaDriverApi>();
  api->source = name;
  ProcAddressResolver resolve;
  if (void* v2 = dlsym(handle, "cuGetProcAddress_v2")) {
    auto fn = reinterpret_cast<GetProcAddressV2>(v2);
    resolve = [fn](const char* symbol, void** pfn, int version,
                   cuuint64_t flags) {
      CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
      const CUresult r = fn(symbol, pfn, version, flags, &found);
      if (r == CUDA_SUCCESS && found != CU_GET_PROC_ADDRESS_SUCCESS) {
        *pfn = nullptr;
      }
      return r;
    };
  } else if (void* v1 = dlsym(handle, "cuGetProcAddress")) {
    auto fn = reinterpret_cast<GetProcAddressV1>(v1);
    resolve = [fn](const char* symbol, void** pfn, int version,
                   cuuint64_t flags) {
      return fn(symbol, pfn, version, flags);
    };
  } else {
    dlclose(handle);  // nothing in it was called
    return absl::UnavailableError(absl::StrCat(
        name,
        " exports neither cuGetProcAddress_v2 nor cuGetProcAddress: the "
        "driver is older than CUDA 11.3, which gpualloc needs"));
  }
  absl::Status status = ResolveEntryPoints(resolve, api.get());
  // Once called into, the library stays loaded even when the table is
  // incomplete: a driver is not made to be unloaded.
  if (!status.ok()) return status;
  return std::shared_ptr<const CudaDriverApi>(std::move(api));
}

absl::StatusOr<std::shared_ptr<const CudaDriverApi>> SharedCudaDriver() {
  static const auto* const kDriver =
      new absl::StatusOr<std::shared_ptr<const CudaDriverApi>>(
          LoadCudaDriver(kCudaDriverLibrary));
  return *kDriver;
}

absl::StatusCode CudaStatusCode(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return absl::StatusCode::kOk;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
      return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
      return absl::StatusCode::kUnavailable;
    case CUDA_ERROR_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

std::string CudaErrorName(const CudaDriverApi& api, CUresult result) {
  if (api.cuGetErrorName != nullptr) {
    const char* name = nullptr;
    if (api.cuGetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr) {
      return name;
    }
  }
  return absl::StrCat("CUresult ", static_cast<int>(result));
}

absl::Status CudaError(const CudaDriverApi& api, absl::string_view call,
                       CUresult result) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const std::string name = CudaErrorName(api, result);
  // The fallback name is the number already.
  const bool numbered = absl::StartsWith(name, "CUresult ");
  return absl::Status(
      CudaStatusCode(result),
      absl::StrCat(
          call, " failed: ", name,
          numbered ? "" : absl::StrCat(" (", static_cast<int>(result), ")")));
}

}  // namespace gpualloc::cuda
