// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_api.h: the HIP runtime entry points the backend calls, as
// one table of function pointers (the "entry-point table").
//
// The backend never links against libamdhip64: LoadHipApi() dlopens the
// runtime (libamdhip64.so.7, .6, .5: the known majors, newest first) and looks
// up every entry point by name, so a gpualloc binary starts on machines without
// ROCm and reports Unavailable with the reason. Tests fill the table with a
// fake runtime instead (tests/backends/hip_fake_runtime.h).
//
// Only backends/hip and its tests include this header: it pulls in the HIP
// headers (hip/hip_runtime_api.h with __HIP_PLATFORM_AMD__). The types are the
// headers' own, so the code compiles against Debian's HIP 5.2 headers and
// against ROCm 6.x headers alike; what differs between them is guarded below
// by HIP_VERSION.
#ifndef GPUALLOC_BACKENDS_HIP_HIP_API_H_
#define GPUALLOC_BACKENDS_HIP_HIP_API_H_

#include "backends/layer.h"

#ifndef __HIP_PLATFORM_AMD__
#error "backends/hip is compiled with -D__HIP_PLATFORM_AMD__ (meson does this)"
#endif

#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gpualloc::hip {

// hipDeviceAttributeVirtualMemoryManagementSupported. Headers before ROCm
// 5.3 (Debian's 5.2) lack the enumerator; it follows
// hipDeviceAttributeMemoryPoolsSupported in every header that has it (the
// CUDA-compatible block keeps its numbers: removed attributes became
// hipDeviceAttributeUnusedN), so older headers name it by that position and
// meson checks the headers when they do have it.
#if GPUALLOC_HIP_HEADERS_HAVE_VMM_ATTRIBUTE
inline constexpr hipDeviceAttribute_t kVirtualMemoryAttribute =
    hipDeviceAttributeVirtualMemoryManagementSupported;
static_assert(hipDeviceAttributeVirtualMemoryManagementSupported ==
              hipDeviceAttributeMemoryPoolsSupported + 1);
#else
inline constexpr hipDeviceAttribute_t kVirtualMemoryAttribute =
    static_cast<hipDeviceAttribute_t>(hipDeviceAttributeMemoryPoolsSupported +
                                      1);
#endif

// hipMemAllocationProp was reordered in ROCm 5.3: 5.2 has {compressionType,
// location, requestedHandleType, type, usage, win32HandleMetaData}; 5.3 and
// later {type, requestedHandleType, location, win32HandleMetaData,
// allocFlags{compressionType, gpuDirectRDMACapable, usage}}. The backend sets
// fields by name, never by position, so the code is right for either header;
// and because a binary built against Debian's 5.2 headers may load a 6.x
// runtime, the layout passed is chosen at run time by the runtime's version:
// the headers' struct when the eras agree, HipAllocationPropV53 below when the
// headers are older than the runtime. (Newer headers with a 5.2 runtime need
// no mirror: 5.2's virtual memory does nothing, so the probe turns it off.)
inline constexpr int kAllocationPropLayoutChangedIn = 50300000;  // ROCm 5.3
inline constexpr bool kHeadersHaveNewAllocationPropLayout =
    HIP_VERSION >= kAllocationPropLayoutChangedIn;

// The ROCm >= 5.3 layout of hipMemAllocationProp, for headers that predate
// it. Same size as the 5.2 struct (32 bytes on LP64).
struct HipAllocationPropV53 {
  hipMemAllocationType type;
  hipMemAllocationHandleType requestedHandleType;
  hipMemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
  } allocFlags;
};
static_assert(sizeof(HipAllocationPropV53) == sizeof(hipMemAllocationProp));

// Device memory on `device`, in the layout a runtime of `runtime_version`
// reads. pointer() stays valid while the object lives.
class HipAllocationProp {
 public:
  HipAllocationProp(int device, int runtime_version) {
    if (!kHeadersHaveNewAllocationPropLayout &&
        runtime_version >= kAllocationPropLayoutChangedIn) {
      v53_.type = hipMemAllocationTypePinned;
      v53_.location.type = hipMemLocationTypeDevice;
      v53_.location.id = device;
      mirror_ = true;
    } else {
      headers_.type = hipMemAllocationTypePinned;
      headers_.location.type = hipMemLocationTypeDevice;
      headers_.location.id = device;
    }
  }
  // Memory that hipMemExportToShareableHandle may export as a POSIX file
  // descriptor (requestedHandleType, by name in either layout).
  void RequestPosixFileDescriptor() {
    v53_.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
    headers_.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
  }
  const hipMemAllocationProp* pointer() const {
    return mirror_ ? reinterpret_cast<const hipMemAllocationProp*>(&v53_)
                   : &headers_;
  }
  // Whether the ROCm >= 5.3 mirror is in use (for notes and tests).
  bool mirrored() const { return mirror_; }

 private:
  hipMemAllocationProp headers_{};
  HipAllocationPropV53 v53_{};
  bool mirror_ = false;
};

// The entry points, one member per HIP function, named after it without the
// "hip" prefix. Every member is set (LoadHipApi fails otherwise) except those
// marked optional, which may be null.
struct HipApi {
  // Where the table came from: "libamdhip64.so.6" or "fake HIP runtime".
  std::string library;

  // Initialisation, devices, versions.
  hipError_t (*Init)(unsigned int flags) = nullptr;
  hipError_t (*GetDeviceCount)(int* count) = nullptr;
  hipError_t (*SetDevice)(int device) = nullptr;
  hipError_t (*GetDevice)(int* device) = nullptr;
  hipError_t (*RuntimeGetVersion)(int* version) = nullptr;
  hipError_t (*DriverGetVersion)(int* version) = nullptr;
  hipError_t (*DeviceGetAttribute)(int* value, hipDeviceAttribute_t attribute,
                                   int device) = nullptr;
  // hipGetDeviceProperties in the layout of the compiled headers (the symbol
  // hipGetDevicePropertiesR0600 with ROCm >= 6 headers). Optional: a runtime
  // without that layout leaves it null, and the backend falls back to
  // DeviceGetName and DeviceTotalMem (and a generic profile).
  hipError_t (*GetDeviceProperties)(hipDeviceProp_t* properties,
                                    int device) = nullptr;
  hipError_t (*DeviceGetName)(char* name, int length,
                              hipDevice_t device) = nullptr;
  hipError_t (*DeviceTotalMem)(size_t* bytes, hipDevice_t device) = nullptr;
  const char* (*GetErrorName)(hipError_t error) = nullptr;

  // Plain allocations.
  hipError_t (*MemGetInfo)(size_t* free, size_t* total) = nullptr;
  hipError_t (*Malloc)(void** pointer, size_t bytes) = nullptr;
  hipError_t (*ExtMallocWithFlags)(void** pointer, size_t bytes,
                                   unsigned int flags) = nullptr;
  hipError_t (*Free)(void* pointer) = nullptr;

  // Events.
  hipError_t (*EventCreateWithFlags)(hipEvent_t* event,
                                     unsigned flags) = nullptr;
  hipError_t (*EventDestroy)(hipEvent_t event) = nullptr;
  hipError_t (*EventRecord)(hipEvent_t event, hipStream_t stream) = nullptr;
  hipError_t (*EventQuery)(hipEvent_t event) = nullptr;
  hipError_t (*EventSynchronize)(hipEvent_t event) = nullptr;
  hipError_t (*StreamWaitEvent)(hipStream_t stream, hipEvent_t event,
                                unsigned int flags) = nullptr;

  // Stream capture. Optional (both or neither make capabilities.
  // graph_capture): a runtime without them leaves them null.
  hipError_t (*StreamIsCapturing)(hipStream_t stream,
                                  hipStreamCaptureStatus* status) = nullptr;
  hipError_t (*ThreadExchangeStreamCaptureMode)(hipStreamCaptureMode* mode) =
      nullptr;

  // Synchronous copies between device and host memory. Optional (null:
  // capabilities.host_copy is off).
  hipError_t (*Memcpy)(void* destination, const void* source, size_t bytes,
                       hipMemcpyKind kind) = nullptr;

  // Stream-ordered pools.
  hipError_t (*MemPoolCreate)(hipMemPool_t* pool,
                              const hipMemPoolProps* properties) = nullptr;
  hipError_t (*MemPoolDestroy)(hipMemPool_t pool) = nullptr;
  hipError_t (*MallocFromPoolAsync)(void** pointer, size_t bytes,
                                    hipMemPool_t pool,
                                    hipStream_t stream) = nullptr;
  hipError_t (*FreeAsync)(void* pointer, hipStream_t stream) = nullptr;
  hipError_t (*MemPoolTrimTo)(hipMemPool_t pool, size_t keep) = nullptr;
  hipError_t (*MemPoolSetAttribute)(hipMemPool_t pool, hipMemPoolAttr attribute,
                                    void* value) = nullptr;
  hipError_t (*MemPoolGetAttribute)(hipMemPool_t pool, hipMemPoolAttr attribute,
                                    void* value) = nullptr;

  // Virtual memory.
  hipError_t (*MemGetAllocationGranularity)(
      size_t* granularity, const hipMemAllocationProp* properties,
      hipMemAllocationGranularity_flags option) = nullptr;
  hipError_t (*MemAddressReserve)(void** pointer, size_t bytes,
                                  size_t alignment, void* address,
                                  unsigned long long flags) = nullptr;
  hipError_t (*MemAddressFree)(void* pointer, size_t bytes) = nullptr;
  hipError_t (*MemCreate)(hipMemGenericAllocationHandle_t* handle, size_t bytes,
                          const hipMemAllocationProp* properties,
                          unsigned long long flags) = nullptr;
  hipError_t (*MemRelease)(hipMemGenericAllocationHandle_t handle) = nullptr;
  hipError_t (*MemMap)(void* pointer, size_t bytes, size_t offset,
                       hipMemGenericAllocationHandle_t handle,
                       unsigned long long flags) = nullptr;
  hipError_t (*MemUnmap)(void* pointer, size_t bytes) = nullptr;
  hipError_t (*MemSetAccess)(void* pointer, size_t bytes,
                             const hipMemAccessDesc* descriptors,
                             size_t count) = nullptr;

  // IPC handles of plain allocations. Optional (all three or
  // capabilities.ipc_handles is off).
  hipError_t (*IpcGetMemHandle)(hipIpcMemHandle_t* handle,
                                void* pointer) = nullptr;
  hipError_t (*IpcOpenMemHandle)(void** pointer, hipIpcMemHandle_t handle,
                                 unsigned int flags) = nullptr;
  hipError_t (*IpcCloseMemHandle)(void* pointer) = nullptr;
  // The address range of what a handle opened (the importer's bounds
  // check). Optional too: without it capabilities.ipc_handles is off.
  hipError_t (*MemGetAddressRange)(hipDeviceptr_t* base, size_t* size,
                                   hipDeviceptr_t pointer) = nullptr;

  // Physical memory as a POSIX file descriptor (beta in ROCm 5.2's headers).
  // Optional (all three or capabilities.shareable_handles is off).
  hipError_t (*MemRetainAllocationHandle)(
      hipMemGenericAllocationHandle_t* handle, void* address) = nullptr;
  hipError_t (*MemExportToShareableHandle)(
      void* shareable, hipMemGenericAllocationHandle_t handle,
      hipMemAllocationHandleType type, unsigned long long flags) = nullptr;
  hipError_t (*MemImportFromShareableHandle)(
      hipMemGenericAllocationHandle_t* handle, void* os_handle,
      hipMemAllocationHandleType type) = nullptr;

  // Page-locked host memory. Optional (both or capabilities.host_memory is
  // off).
  hipError_t (*HostMalloc)(void** pointer, size_t bytes,
                           unsigned int flags) = nullptr;
  hipError_t (*HostFree)(void* pointer) = nullptr;

  // Completion counters, with the two above: mapped host memory's device
  // address and the 64-bit stream memory operations (beta in ROCm 5.2's
  // headers). Optional (all three or capabilities.completion_counters is
  // off).
  hipError_t (*HostGetDevicePointer)(void** device, void* host,
                                     unsigned int flags) = nullptr;
  hipError_t (*StreamWriteValue64)(hipStream_t stream, void* pointer,
                                   uint64_t value,
                                   unsigned int flags) = nullptr;
  hipError_t (*StreamWaitValue64)(hipStream_t stream, void* pointer,
                                  uint64_t value, unsigned int flags,
                                  uint64_t mask) = nullptr;
};

// How hipMemImportFromShareableHandle takes a POSIX file descriptor: runtimes
// before ROCm 7.1 read the int `os_handle` points to, 7.1 and later take the
// descriptor's value cast to a pointer, as CUDA does.
inline constexpr int kImportTakesFdValueSince = 70100000;  // ROCm 7.1

// The sonames LoadHipApi tries, newest first.
inline constexpr const char* kHipLibraries[] = {
    "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};

// Opens the HIP runtime and fills the table. Unavailable names every library
// tried and dlerror's reason, or the library and the missing symbol. The
// library stays loaded for the life of the process.
absl::StatusOr<std::shared_ptr<const HipApi>> LoadHipApi();

// The process-wide table: LoadHipApi() once, the same answer afterwards.
absl::StatusOr<std::shared_ptr<const HipApi>> SharedHipApi();

// "5.2.21153" from hipRuntimeGetVersion's 50221153 (HIP_VERSION's encoding:
// major * 10^7 + minor * 10^5 + patch).
std::string HipVersionText(int version);

}  // namespace gpualloc::hip

#endif  // GPUALLOC_BACKENDS_HIP_HIP_API_H_
