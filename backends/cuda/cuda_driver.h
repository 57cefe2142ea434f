// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_driver.h: the CUDA driver's entry points, loaded at run
// time, and CUresult -> absl::Status.
//
// gpualloc never links against libcuda: LoadCudaDriver dlopens libcuda.so.1,
// finds the driver's resolver (cuGetProcAddress_v2, or the CUDA 11.x
// cuGetProcAddress) and resolves every entry point the backend uses, by its
// base name, for the CUDA version this file was compiled against (or the
// driver's own version when that is older). The result is one table of
// function pointers, CudaDriverApi. CudaBackend takes the table by injection,
// so tests hand it a fake driver's table.
//
// The entry points come in groups: the core ones (without any of them there
// is no backend), the virtual-memory ones, the stream-ordered pool ones, the
// graph-capture ones, the copies between device and host memory, the IPC
// handles of plain allocations, the shareable handles of physical memory,
// page-locked host memory and the stream memory operations of completion
// counters (a driver without one of these gives a backend without that
// capability).
//
// Only backends/cuda and its tests include this header: it needs the toolkit's
// cuda.h (types and enums only; no cuda* function is called directly).
#ifndef GPUALLOC_BACKENDS_CUDA_CUDA_DRIVER_H_
#define GPUALLOC_BACKENDS_CUDA_CUDA_DRIVER_H_

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"

namespace gpualloc::cuda {

// The library LoadCudaDriver opens by default.
inline constexpr absl::string_view kCudaDriverLibrary = "libcuda.so.1";

// X-macro lists of entry points by base name. cuda.h maps some names to
// versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the table's member types
// are those of the versioned declarations, which is the ABI the resolver
// returns for the requested CUDA version.
#define GPUALLOC_CUDA_CORE_ENTRY_POINTS(X) \
  X(cuGetErrorName)                        \
  X(cuInit)                                \
  X(cuDriverGetVersion)                    \
  X(cuDeviceGetCount)                      \
  X(cuDeviceGet)                           \
  X(cuDeviceGetName)                       \
  X(cuDeviceGetAttribute)                  \
  X(cuDeviceTotalMem)                      \
  X(cuDevicePrimaryCtxRetain)              \
  X(cuDevicePrimaryCtxRelease)             \
  X(cuCtxGetCurrent)                       \
  X(cuCtxSetCurrent)                       \
  X(cuMemGetInfo)                          \
  X(cuMemAlloc)                            \
  X(cuMemFree)                             \
  X(cuEventCreate)                         \
  X(cuEventDestroy)                        \
  X(cuEventRecord)                         \
  X(cuEventQuery)                          \
  X(cuEventSynchronize)                    \
  X(cuStreamWaitEvent)

#define GPUALLOC_CUDA_VMM_ENTRY_POINTS(X) \
  X(cuMemGetAllocationGranularity)        \
  X(cuMemAddressReserve)                  \
  X(cuMemAddressFree)                     \
  X(cuMemCreate)                          \
  X(cuMemRelease)                         \
  X(cuMemMap)                             \
  X(cuMemUnmap)                           \
  X(cuMemSetAccess)

#define GPUALLOC_CUDA_POOL_ENTRY_POINTS(X) \
  X(cuMemPoolCreate)                       \
  X(cuMemPoolDestroy)                      \
  X(cuMemPoolSetAttribute)                 \
  X(cuMemPoolGetAttribute)                 \
  X(cuMemPoolTrimTo)                       \
  X(cuMemAllocFromPoolAsync)               \
  X(cuMemFreeAsync)

// Stream capture (CUDA 10.0+; cuStreamIsCapturing resolves to its legacy
// default-stream flavour, not _ptsz, like every entry point here).
#define GPUALLOC_CUDA_CAPTURE_ENTRY_POINTS(X) \
  X(cuStreamIsCapturing)                      \
  X(cuThreadExchangeStreamCaptureMode)

// Synchronous copies between device and host memory (cuMemcpyDtoH_v2,
// cuMemcpyHtoD_v2: the legacy default-stream flavour).
#define GPUALLOC_CUDA_COPY_ENTRY_POINTS(X) \
  X(cuMemcpyDtoH)                          \
  X(cuMemcpyHtoD)

// IPC handles of plain allocations (cuIpcOpenMemHandle resolves to _v2),
// and the address range of what one opened (cuMemGetAddressRange_v2: the
// importer checks a block's bounds with it).
#define GPUALLOC_CUDA_IPC_ENTRY_POINTS(X) \
  X(cuIpcGetMemHandle)                    \
  X(cuIpcOpenMemHandle)                   \
  X(cuIpcCloseMemHandle)                  \
  X(cuMemGetAddressRange)

// Physical memory as a POSIX file descriptor (CUDA 10.2+).
#define GPUALLOC_CUDA_SHARE_ENTRY_POINTS(X) \
  X(cuMemRetainAllocationHandle)            \
  X(cuMemExportToShareableHandle)           \
  X(cuMemImportFromShareableHandle)

// Page-locked host memory.
#define GPUALLOC_CUDA_HOST_ENTRY_POINTS(X) \
  X(cuMemHostAlloc)                        \
  X(cuMemFreeHost)

// Completion counters, besides the host-memory group: mapped page-locked
// memory's device address and the 64-bit stream memory operations. The
// driver resolves the base names to cuMemHostGetDevicePointer_v2 and, from
// CUDA 11.7 on, cuStreamWriteValue64_v2 / cuStreamWaitValue64_v2 (the same
// signatures as the 9.0 versions older drivers give).
#define GPUALLOC_CUDA_COUNTER_ENTRY_POINTS(X) \
  X(cuMemHostGetDevicePointer)                \
  X(cuStreamWriteValue64)                     \
  X(cuStreamWaitValue64)

// The entry-point table. Null members were not resolved.
struct CudaDriverApi {
#define GPUALLOC_CUDA_DECLARE_MEMBER_(name) decltype(&::name) name = nullptr;
  GPUALLOC_CUDA_CORE_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
  GPUALLOC_CUDA_VMM_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
  GPUALLOC_CUDA_POOL_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
  GPUALLOC_CUDA_CAPTURE_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
  GPUALLOC_CUDA_COPY_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
  GPUALLOC_CUDA_IPC_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
  GPUALLOC_CUDA_SHARE_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
  GPUALLOC_CUDA_HOST_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
  GPUALLOC_CUDA_COUNTER_ENTRY_POINTS(GPUALLOC_CUDA_DECLARE_MEMBER_)
#undef GPUALLOC_CUDA_DECLARE_MEMBER_

  // Where the table came from, for messages ("libcuda.so.1", "fake driver").
  std::string source;
  // cuDriverGetVersion, and the CUDA version the entry points were requested
  // for (1000 * major + 10 * minor).
  int driver_version = 0;
  int requested_version = 0;
  // Group entry points that did not resolve ("cuMemCreate (not found)").
  std::vector<std::string> missing;

  bool has_virtual_memory() const;
  bool has_pools() const;
  bool has_capture() const;
  bool has_host_copy() const;
  bool has_ipc() const;
  bool has_shareable_handles() const;
  bool has_host_memory() const;
  // The counter group (completion counters also need host memory).
  bool has_counters() const;
};

// cuGetProcAddress as the loader calls it: base name, out pointer, CUDA
// version, flags. Returns the driver's CUresult; a missing symbol is success
// with a null pointer (the driver's convention).
using ProcAddressResolver = std::function<CUresult(
    const char* symbol, void** pfn, int cuda_version, cuuint64_t flags)>;

// Fills `api` through `resolve`: cuDriverGetVersion first (with the version it
// appeared in), then every listed entry point for min(CUDA_VERSION, driver
// version), legacy default-stream flavour. A missing core entry point is
// Unavailable naming it; a missing group entry point clears the whole group
// and is listed in api->missing. `api->source` is kept.
absl::Status ResolveEntryPoints(const ProcAddressResolver& resolve,
                                CudaDriverApi* api);

// dlopen(`library`) + the resolver + ResolveEntryPoints. Without the library
// (no driver installed) or its resolver, Unavailable with the reason
// (dlerror's text). A library that has the resolver stays loaded for the life
// of the process.
absl::StatusOr<std::shared_ptr<const CudaDriverApi>> LoadCudaDriver(
    absl::string_view library = kCudaDriverLibrary);

// LoadCudaDriver(kCudaDriverLibrary) once per process; the same answer (table
// or error) every call.
absl::StatusOr<std::shared_ptr<const CudaDriverApi>> SharedCudaDriver();

// The status code a CUresult maps to: out of memory -> ResourceExhausted;
// invalid value/handle/device/context -> InvalidArgument; no device, a stub or
// mismatched driver, not (or no longer) initialized, device unavailable ->
// Unavailable; not supported -> Unimplemented; anything else -> Internal.
absl::StatusCode CudaStatusCode(CUresult result);

// "CUDA_ERROR_OUT_OF_MEMORY", from the table's cuGetErrorName, or "CUresult
// 2" when there is none or it does not know the code.
std::string CudaErrorName(const CudaDriverApi& api, CUresult result);

// The status for a failed call: "<call> failed: CUDA_ERROR_INVALID_VALUE (1)"
// ("<call> failed: CUresult 1" without a name) with CudaStatusCode's code.
// `call` names the call and its arguments, e.g. "cuMemMap(0x7f0000000000,
// 2097152 bytes)". OK for CUDA_SUCCESS.
absl::Status CudaError(const CudaDriverApi& api, absl::string_view call,
                       CUresult result);

// "12.4" from 12040.
std::string CudaVersionString(int version);

}  // namespace gpualloc::cuda

#endif  // GPUALLOC_BACKENDS_CUDA_CUDA_DRIVER_H_
