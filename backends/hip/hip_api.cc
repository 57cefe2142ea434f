// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_api.cc: loading the HIP runtime at run time (dlopen).

#include "backends/hip/hip_api.h"

#include <dlfcn.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpualloc::hip {
namespace {

// Looks `name` up in `library` into `slot`; false when it is missing.
template <typename Fn>
bool Bind(void* library, const char* name, Fn& slot) {
  slot = reinterpret_cast<Fn>(dlsym(library, name));
  return slot != nullptr;
}

// The symbol whose hipDeviceProp_t layout matches the compiled headers.
// ROCm 6 changed the layout and named the new entry point
// hipGetDevicePropertiesR0600 (its headers map the plain name onto it); the
// plain hipGetDeviceProperties symbol keeps the old layout in every runtime.
constexpr const char* kGetDevicePropertiesSymbol =
#if HIP_VERSION_MAJOR >= 6
    "hipGetDevicePropertiesR0600";
#else
    "hipGetDeviceProperties";
#endif

}  // namespace

absl::StatusOr<std::shared_ptr<const HipApi>> LoadHipApi() {
  void* library = nullptr;
  std::string soname;
  std::vector<std::string> failures;
  for (const char* name : kHipLibraries) {
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      soname = name;
      break;
    }
    const char* why = dlerror();
    failures.push_back(why != nullptr ? std::string(why)
                                      : absl::StrCat(name, ": not found"));
  }
  if (library == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "the HIP runtime is not installed or not on the library path (tried ",
        absl::StrJoin(kHipLibraries, ", "),
        "): ", absl::StrJoin(failures, "; ")));
  }

  auto api = std::make_shared<HipApi>();
  api->library = soname;
  std::vector<std::string> missing;
  const auto need = [&](const char* name, auto& slot) {
    if (!Bind(library, name, slot)) missing.push_back(name);
  };
  need("hipInit", api->Init);
  need("hipGetDeviceCount", api->GetDeviceCount);
  need("hipSetDevice", api->SetDevice);
  need("hipGetDevice", api->GetDevice);
  need("hipRuntimeGetVersion", api->RuntimeGetVersion);
  need("hipDriverGetVersion", api->DriverGetVersion);
  need("hipDeviceGetAttribute", api->DeviceGetAttribute);
  (void)Bind(library, kGetDevicePropertiesSymbol, api->GetDeviceProperties);
  need("hipDeviceGetName", api->DeviceGetName);
  need("hipDeviceTotalMem", api->DeviceTotalMem);
  need("hipGetErrorName", api->GetErrorName);
  need("hipMemGetInfo", api->MemGetInfo);
  need("hipMalloc", api->Malloc);
  need("hipExtMallocWithFlags", api->ExtMallocWithFlags);
  need("hipFree", api->Free);
  need("hipEventCreateWithFlags", api->EventCreateWithFlags);
  need("hipEventDestroy", api->EventDestroy);
  need("hipEventRecord", api->EventRecord);
  need("hipEventQuery", api->EventQuery);
  need("hipEventSynchronize", api->EventSynchronize);
  need("hipStreamWaitEvent", api->StreamWaitEvent);
  (void)Bind(library, "hipStreamIsCapturing", api->StreamIsCapturing);
  (void)Bind(library, "hipThreadExchangeStreamCaptureMode",
             api->ThreadExchangeStreamCaptureMode);
  (void)Bind(library, "hipMemcpy", api->Memcpy);
  need("hipMemPoolCreate", api->MemPoolCreate);
  need("hipMemPoolDestroy", api->MemPoolDestroy);
  need("hipMallocFromPoolAsync", api->MallocFromPoolAsync);
  need("hipFreeAsync", api->FreeAsync);
  need("hipMemPoolTrimTo", api->MemPoolTrimTo);
  need("hipMemPoolSetAttribute", api->MemPoolSetAttribute);
  need("hipMemPoolGetAttribute", api->MemPoolGetAttribute);
  need("hipMemGetAllocationGranularity", api->MemGetAllocationGranularity);
  need("hipMemAddressReserve", api->MemAddressReserve);
  need("hipMemAddressFree", api->MemAddressFree);
  need("hipMemCreate", api->MemCreate);
  need("hipMemRelease", api->MemRelease);
  need("hipMemMap", api->MemMap);
  need("hipMemUnmap", api->MemUnmap);
  need("hipMemSetAccess", api->MemSetAccess);
  (void)Bind(library, "hipIpcGetMemHandle", api->IpcGetMemHandle);
  (void)Bind(library, "hipIpcOpenMemHandle", api->IpcOpenMemHandle);
  (void)Bind(library, "hipIpcCloseMemHandle", api->IpcCloseMemHandle);
  (void)Bind(library, "hipMemGetAddressRange", api->MemGetAddressRange);
  (void)Bind(library, "hipMemRetainAllocationHandle",
             api->MemRetainAllocationHandle);
  (void)Bind(library, "hipMemExportToShareableHandle",
             api->MemExportToShareableHandle);
  (void)Bind(library, "hipMemImportFromShareableHandle",
             api->MemImportFromShareableHandle);
  (void)Bind(library, "hipHostMalloc", api->HostMalloc);
  (void)Bind(library, "hipHostFree", api->HostFree);
  (void)Bind(library, "hipHostGetDevicePointer", api->HostGetDevicePointer);
  (void)Bind(library, "hipStreamWriteValue64", api->StreamWriteValue64);
  (void)Bind(library, "hipStreamWaitValue64", api->StreamWaitValue64);
  if (!missing.empty()) {
    // Leave the library loaded: unloading a HIP runtime is not safe once its
    // constructors ran, and the process may load it again anyway.
    return absl::UnavailableError(absl::StrCat(
        soname, " lacks entry points gpualloc needs: ",
        absl::StrJoin(missing, ", "), " (a HIP runtime older than ROCm 5.2?)"));
  }
  return std::shared_ptr<const HipApi>(std::move(api));
}

absl::StatusOr<std::shared_ptr<const HipApi>> SharedHipApi() {
  static const absl::StatusOr<std::shared_ptr<const HipApi>>* const api =
      new absl::StatusOr<std::shared_ptr<const HipApi>>(LoadHipApi());
  return *api;
}

std::string HipVersionText(int version) {
  if (version <= 0) return absl::StrCat("unknown (", version, ")");
  return absl::StrCat(version / 10000000, ".", (version / 100000) % 100, ".",
                      version % 100000);
}

}  // namespace gpualloc::hip
