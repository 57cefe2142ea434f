// SPDX-License-Identifier: Apache-2.0
// tests/backends/hip_fake_runtime.h: a fake HIP runtime behind the entry-point
// table.
//
// This machine has no AMD GPU, so the HIP backend's logic is driven through a
// fake: an in-process model of one or more devices that records every call,
// keeps device memory, events, pools, reservations and mappings minimally
// (fake addresses, never dereferenced; the bytes hipMemcpy writes behind them
// are kept per allocation, pool block or physical handle, fake_device_bytes.h),
// reports the runtime version it is told
// to, and reproduces what each ROCm release really does:
//   - ROCm 5.2: hipMemAddressReserve returns success and leaves the pointer
//     untouched (a no-op); the virtual-memory attribute is unknown;
//   - ROCm 5.3-6.0: the attribute says 1 but hipMemAddressReserve returns
//     success with a null pointer;
//   - ROCm 6.1: reservations are real;
//   - before 6.0: hipMallocFromPoolAsync reports out of memory as success with
//     a null pointer;
//   - hipMemCreate and hipMemGetAllocationGranularity read hipMemAllocationProp
//     in the layout of the runtime version (5.2's, or 5.3's and later), and
//     answer hipErrorInvalidValue when the type or location is not set;
//   - hipMemImportFromShareableHandle reads the descriptor through the
//     pointer before ROCm 7.1 and as the pointer's value from 7.1.
// Sharing: IPC handles carry the fake process that made them (SetProcess
// switches the calling "process"; opening a handle in the process that made
// it is refused, as CUDA does), exported memory is a real memfd descriptor
// (importing it gives a handle sharing the exporter's memory and bytes), and
// hipHostMalloc returns real, page-aligned host memory (filled with 0xa5, as
// real memory is not zeroed). Completion counters: a block made with
// hipHostMallocMapped has a device address of its own
// (hipHostGetDevicePointer); hipStreamWriteValue64 stores into the host
// memory behind it at once (the fake's streams finish their work at once),
// hipStreamWaitValue64 checks its arguments.
// The current device is per thread, as in HIP: every thread starts on device
// 0, hipSetDevice moves only the calling thread, and each call is recorded
// with the device current on its thread when it was made (DevicesOf), so tests
// can see that null-stream calls ran on the backend's device and that the
// caller's device was put back (CurrentDevice).
// One fake is active at a time (the entry points are plain C function
// pointers, so they find it through a global); it is thread-safe.
#ifndef GPUALLOC_TESTS_HIP_FAKE_RUNTIME_H_
#define GPUALLOC_TESTS_HIP_FAKE_RUNTIME_H_

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/hip/hip_api.h"
#include "tests/backends/fake_device_bytes.h"

namespace gpualloc::hip::testing {

using gpualloc::testing::FakeDeviceBytes;
using gpualloc::testing::FakeRegion;
using gpualloc::testing::FakeRegionKind;

inline constexpr std::uint64_t kFakeKiB = std::uint64_t{1} << 10;
inline constexpr std::uint64_t kFakeMiB = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kFakeGiB = std::uint64_t{1} << 30;

struct FakeHipConfig {
  std::string library = "fake HIP runtime";
  int runtime_version = 60140091;  // HIP_VERSION encoding: 6.1.40091
  int driver_version = 60140091;
  hipError_t init_error = hipSuccess;
  int device_count = 1;
  std::string name = "AMD Instinct MI300X";
  std::string gcn_arch_name = "gfx942:sramecc+:xnack-";
  std::uint64_t total_bytes = 192 * kFakeGiB;
  // hipGetDeviceProperties present in the compiled headers' layout.
  bool has_device_properties = true;
  // hipDeviceGetAttribute answers.
  int pools_attribute = 1;
  hipError_t vmm_attribute_error = hipSuccess;
  int vmm_attribute = 1;
  enum class Reserve { kReal, kNoOp, kNullResult };
  Reserve reserve = Reserve::kReal;
  bool pool_null_on_oom = false;
  // Where plain allocations land: 4 KiB pages; with misalign_large, blocks of
  // 2 MiB or more start 4 KiB past a 2 MiB boundary (the runtime does not
  // promise fragment alignment).
  bool misalign_large = false;
  std::uint64_t min_granularity = 4 * kFakeKiB;
  std::uint64_t recommended_granularity = 2 * kFakeMiB;
  // hipStreamIsCapturing and hipThreadExchangeStreamCaptureMode present.
  bool has_capture = true;
  // hipMemcpy present.
  bool has_memcpy = true;
  // The IPC, shareable-handle and host-memory entry points present.
  bool has_ipc = true;
  bool has_shareable = true;
  bool has_host_memory = true;
  // hipHostMalloc answers out of memory above this many bytes.
  std::uint64_t host_bytes = 64 * kFakeGiB;
  // hipHostGetDevicePointer, hipStreamWriteValue64 and hipStreamWaitValue64
  // present; hipDeviceAttributeCanMapHostMemory and
  // hipDeviceAttributeCanUseStreamWaitValue (or the error reading the
  // latter answers).
  bool has_counters = true;
  int can_map_host_memory = 1;
  int stream_wait_value = 1;
  hipError_t stream_wait_value_error = hipSuccess;
};

// The three ROCm behaviours, on an MI300X.
inline FakeHipConfig Rocm52() {
  FakeHipConfig c;
  c.runtime_version = 50221153;
  c.driver_version = 50221153;
  c.vmm_attribute_error = hipErrorInvalidValue;  // no such attribute yet
  c.reserve = FakeHipConfig::Reserve::kNoOp;
  c.pool_null_on_oom = true;
  return c;
}
inline FakeHipConfig Rocm57() {
  FakeHipConfig c;
  c.runtime_version = 50731921;
  c.driver_version = 50731921;
  c.reserve = FakeHipConfig::Reserve::kNullResult;
  c.pool_null_on_oom = true;
  return c;
}
inline FakeHipConfig Rocm60() {
  FakeHipConfig c = Rocm57();
  c.runtime_version = 60032830;
  c.driver_version = 60032830;
  c.pool_null_on_oom = false;
  return c;
}
inline FakeHipConfig Rocm61() { return FakeHipConfig(); }

class FakeHipRuntime {
 public:
  explicit FakeHipRuntime(FakeHipConfig config) : config_(std::move(config)) {
    Current() = this;
  }
  ~FakeHipRuntime() {
    if (Current() == this) Current() = nullptr;
    for (const auto& [pointer, bytes] : host_blocks_) std::free(pointer);
  }
  FakeHipRuntime(const FakeHipRuntime&) = delete;
  FakeHipRuntime& operator=(const FakeHipRuntime&) = delete;

  // The entry-point table over this fake.
  std::shared_ptr<const HipApi> api() const {
    auto api = std::make_shared<HipApi>();
    api->library = config_.library;
    api->Init = &Init_;
    api->GetDeviceCount = &GetDeviceCount_;
    api->SetDevice = &SetDevice_;
    api->GetDevice = &GetDevice_;
    api->RuntimeGetVersion = &RuntimeGetVersion_;
    api->DriverGetVersion = &DriverGetVersion_;
    api->DeviceGetAttribute = &DeviceGetAttribute_;
    api->GetDeviceProperties =
        config_.has_device_properties ? &GetDeviceProperties_ : nullptr;
    api->DeviceGetName = &DeviceGetName_;
    api->DeviceTotalMem = &DeviceTotalMem_;
    api->GetErrorName = &GetErrorName_;
    api->MemGetInfo = &MemGetInfo_;
    api->Malloc = &Malloc_;
    api->ExtMallocWithFlags = &ExtMallocWithFlags_;
    api->Free = &Free_;
    api->EventCreateWithFlags = &EventCreateWithFlags_;
    api->EventDestroy = &EventDestroy_;
    api->EventRecord = &EventRecord_;
    api->EventQuery = &EventQuery_;
    api->EventSynchronize = &EventSynchronize_;
    api->StreamWaitEvent = &StreamWaitEvent_;
    api->StreamIsCapturing =
        config_.has_capture ? &StreamIsCapturing_ : nullptr;
    api->ThreadExchangeStreamCaptureMode =
        config_.has_capture ? &ThreadExchangeStreamCaptureMode_ : nullptr;
    api->Memcpy = config_.has_memcpy ? &Memcpy_ : nullptr;
    api->MemPoolCreate = &MemPoolCreate_;
    api->MemPoolDestroy = &MemPoolDestroy_;
    api->MallocFromPoolAsync = &MallocFromPoolAsync_;
    api->FreeAsync = &FreeAsync_;
    api->MemPoolTrimTo = &MemPoolTrimTo_;
    api->MemPoolSetAttribute = &MemPoolSetAttribute_;
    api->MemPoolGetAttribute = &MemPoolGetAttribute_;
    api->MemGetAllocationGranularity = &MemGetAllocationGranularity_;
    api->MemAddressReserve = &MemAddressReserve_;
    api->MemAddressFree = &MemAddressFree_;
    api->MemCreate = &MemCreate_;
    api->MemRelease = &MemRelease_;
    api->MemMap = &MemMap_;
    api->MemUnmap = &MemUnmap_;
    api->MemSetAccess = &MemSetAccess_;
    if (config_.has_ipc) {
      api->IpcGetMemHandle = &IpcGetMemHandle_;
      api->IpcOpenMemHandle = &IpcOpenMemHandle_;
      api->IpcCloseMemHandle = &IpcCloseMemHandle_;
      api->MemGetAddressRange = &MemGetAddressRange_;
    }
    if (config_.has_shareable) {
      api->MemRetainAllocationHandle = &MemRetainAllocationHandle_;
      api->MemExportToShareableHandle = &MemExportToShareableHandle_;
      api->MemImportFromShareableHandle = &MemImportFromShareableHandle_;
    }
    if (config_.has_host_memory) {
      api->HostMalloc = &HostMalloc_;
      api->HostFree = &HostFree_;
    }
    if (config_.has_counters) {
      api->HostGetDevicePointer = &HostGetDevicePointer_;
      api->StreamWriteValue64 = &StreamWriteValue64_;
      api->StreamWaitValue64 = &StreamWaitValue64_;
    }
    return api;
  }

  // Every call so far, by HIP name ("hipMalloc"), in order.
  std::vector<std::string> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  int CountCalls(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(std::count(calls_.begin(), calls_.end(), name));
  }
  // The device current on the calling thread at each call of `name`, in
  // order.
  std::vector<int> DevicesOf(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int> out;
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if (calls_[i] == name) out.push_back(call_devices_[i]);
    }
    return out;
  }
  // The calling thread's current device (not recorded as a call).
  int CurrentDevice() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ThreadDevice();
  }
  // Moves the calling thread to `device` (not recorded as a call), as code
  // outside gpualloc would with hipSetDevice.
  void SetCurrentDevice(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    thread_devices_[std::this_thread::get_id()] = device;
  }
  // The next call of `name` fails with `error` (once).
  void FailNext(const std::string& name, hipError_t error) {
    std::lock_guard<std::mutex> lock(mu_);
    failures_[name] = error;
  }
  // Device memory in use (plain, pool, physical).
  std::uint64_t used_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return used_;
  }
  // Flags of the plain allocation at `pointer` (hipExtMallocWithFlags), or -1.
  int plain_flags(std::uint64_t pointer) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plain_.find(pointer);
    return it == plain_.end() ? -1 : static_cast<int>(it->second.flags);
  }
  std::size_t live_plain() const {
    std::lock_guard<std::mutex> lock(mu_);
    return plain_.size();
  }
  std::size_t live_mappings() const {
    std::lock_guard<std::mutex> lock(mu_);
    return mappings_.size();
  }
  int set_access_calls() const { return CountCalls("hipMemSetAccess"); }
  // The last value set for a pool attribute (as uint64), or -1.
  std::int64_t pool_attribute(hipMemPoolAttr attribute) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pool_attributes_.find(static_cast<int>(attribute));
    return it == pool_attributes_.end() ? -1
                                        : static_cast<std::int64_t>(it->second);
  }

  // The fake process the following calls come from (0 until set).
  void SetProcess(int process) {
    std::lock_guard<std::mutex> lock(mu_);
    process_ = process;
  }
  std::size_t live_handles() const {
    std::lock_guard<std::mutex> lock(mu_);
    return handles_.size();
  }
  // Whether the last hipMemCreate asked for POSIX file descriptors.
  bool last_create_exportable() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_create_exportable_;
  }
  std::size_t live_opened() const {
    std::lock_guard<std::mutex> lock(mu_);
    return opened_.size();
  }
  std::size_t live_host_blocks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return host_blocks_.size();
  }
  unsigned last_host_flags() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_host_flags_;
  }
  // hipHostMalloc blocks mapped for the device and not freed.
  std::size_t live_mapped_host_blocks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return mapped_host_.size();
  }
  // The flags and mask of the last hipStreamWaitValue64 (~0u / 0 before
  // one).
  unsigned last_wait_flags() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_wait_flags_;
  }
  std::uint64_t last_wait_mask() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_wait_mask_;
  }

  // What hipStreamIsCapturing answers for `stream` (None until set).
  // The raw value (any int: a newer runtime may answer values the headers
  // do not name).
  void SetCaptureStatus(std::uintptr_t stream, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    capture_status_[stream] = status;
  }

 private:
  struct Plain {
    std::uint64_t bytes;
    unsigned flags;
  };
  struct Physical {
    std::uint64_t bytes;
    bool released = false;
    int mappings = 0;
    int retains = 0;           // hipMemRetainAllocationHandle, not released
    std::uint64_t memory = 0;  // the memory's id (the creating handle's)
    bool exportable = false;   // requestedHandleType was a descriptor
  };

  static FakeHipRuntime*& Current() {
    static FakeHipRuntime* current = nullptr;
    return current;
  }
  static FakeHipRuntime& F() { return *Current(); }

  // The calling thread's current device (0 until it sets one). mu_ held.
  int ThreadDevice() const {
    auto it = thread_devices_.find(std::this_thread::get_id());
    return it == thread_devices_.end() ? 0 : it->second;
  }
  // Records the call; returns the injected failure, if any.
  hipError_t Enter(const char* name) {
    calls_.push_back(name);
    call_devices_.push_back(ThreadDevice());
    auto it = failures_.find(name);
    if (it == failures_.end()) return hipSuccess;
    const hipError_t e = it->second;
    failures_.erase(it);
    return e;
  }
  bool Initialised() const { return initialised_; }
  std::uint64_t Free() const { return config_.total_bytes - used_; }
  std::uint64_t NextAddress(std::uint64_t bytes, std::uint64_t alignment) {
    next_ = (next_ + alignment - 1) / alignment * alignment;
    const std::uint64_t at = next_;
    next_ += bytes + 64 * kFakeKiB;  // a gap, so neighbours never touch
    return at;
  }
  // Whether `prop` describes pinned memory on a device, read in the layout
  // this runtime version uses.
  bool PropOk(const hipMemAllocationProp* prop) const {
    if (prop == nullptr) return false;
    const bool new_layout =
        config_.runtime_version >= kAllocationPropLayoutChangedIn;
    if (new_layout && !kHeadersHaveNewAllocationPropLayout) {
      const auto* p = reinterpret_cast<const HipAllocationPropV53*>(prop);
      return p->type == hipMemAllocationTypePinned &&
             p->location.type == hipMemLocationTypeDevice &&
             p->location.id >= 0 && p->location.id < config_.device_count;
    }
    return prop->type == hipMemAllocationTypePinned &&
           prop->location.type == hipMemLocationTypeDevice &&
           prop->location.id >= 0 && prop->location.id < config_.device_count;
  }

#define GPUALLOC_FAKE_ENTER(name)                                     \
  FakeHipRuntime& f = F();                                            \
  std::lock_guard<std::mutex> lock(f.mu_);                            \
  if (hipError_t injected = f.Enter(name); injected) return injected; \
  if (!f.Initialised() && std::strcmp(name, "hipInit") != 0 &&        \
      std::strcmp(name, "hipGetErrorName") != 0)                      \
  return hipErrorNotInitialized

  static hipError_t Init_(unsigned int) {
    GPUALLOC_FAKE_ENTER("hipInit");
    if (f.config_.init_error != hipSuccess) return f.config_.init_error;
    f.initialised_ = true;
    return hipSuccess;
  }
  static hipError_t GetDeviceCount_(int* count) {
    GPUALLOC_FAKE_ENTER("hipGetDeviceCount");
    *count = f.config_.device_count;
    return f.config_.device_count == 0 ? hipErrorNoDevice : hipSuccess;
  }
  static hipError_t SetDevice_(int device) {
    GPUALLOC_FAKE_ENTER("hipSetDevice");
    if (device < 0 || device >= f.config_.device_count)
      return hipErrorInvalidDevice;
    f.thread_devices_[std::this_thread::get_id()] = device;
    return hipSuccess;
  }
  static hipError_t GetDevice_(int* device) {
    GPUALLOC_FAKE_ENTER("hipGetDevice");
    *device = f.ThreadDevice();
    return hipSuccess;
  }
  static hipError_t RuntimeGetVersion_(int* v) {
    GPUALLOC_FAKE_ENTER("hipRuntimeGetVersion");
    *v = f.config_.runtime_version;
    return hipSuccess;
  }
  static hipError_t DriverGetVersion_(int* v) {
    GPUALLOC_FAKE_ENTER("hipDriverGetVersion");
    *v = f.config_.driver_version;
    return hipSuccess;
  }
  static hipError_t DeviceGetAttribute_(int* value, hipDeviceAttribute_t a,
                                        int) {
    GPUALLOC_FAKE_ENTER("hipDeviceGetAttribute");
    if (a == hipDeviceAttributeMemoryPoolsSupported) {
      *value = f.config_.pools_attribute;
      return hipSuccess;
    }
    if (a == kVirtualMemoryAttribute) {
      if (f.config_.vmm_attribute_error != hipSuccess)
        return f.config_.vmm_attribute_error;
      *value = f.config_.vmm_attribute;
      return hipSuccess;
    }
    if (a == hipDeviceAttributeCanMapHostMemory) {
      *value = f.config_.can_map_host_memory;
      return hipSuccess;
    }
    if (a == hipDeviceAttributeCanUseStreamWaitValue) {
      if (f.config_.stream_wait_value_error != hipSuccess)
        return f.config_.stream_wait_value_error;
      *value = f.config_.stream_wait_value;
      return hipSuccess;
    }
    return hipErrorInvalidValue;
  }
  static hipError_t GetDeviceProperties_(hipDeviceProp_t* p, int) {
    GPUALLOC_FAKE_ENTER("hipGetDeviceProperties");
    std::snprintf(p->name, sizeof(p->name), "%s", f.config_.name.c_str());
    std::snprintf(p->gcnArchName, sizeof(p->gcnArchName), "%s",
                  f.config_.gcn_arch_name.c_str());
    p->totalGlobalMem = f.config_.total_bytes;
    return hipSuccess;
  }
  static hipError_t DeviceGetName_(char* name, int length, hipDevice_t) {
    GPUALLOC_FAKE_ENTER("hipDeviceGetName");
    std::snprintf(name, static_cast<std::size_t>(length), "%s",
                  f.config_.name.c_str());
    return hipSuccess;
  }
  static hipError_t DeviceTotalMem_(size_t* bytes, hipDevice_t) {
    GPUALLOC_FAKE_ENTER("hipDeviceTotalMem");
    *bytes = f.config_.total_bytes;
    return hipSuccess;
  }
  static const char* GetErrorName_(hipError_t e) {
    switch (e) {
      case hipSuccess:
        return "hipSuccess";
      case hipErrorInvalidValue:
        return "hipErrorInvalidValue";
      case hipErrorOutOfMemory:
        return "hipErrorOutOfMemory";
      case hipErrorNotInitialized:
        return "hipErrorNotInitialized";
      case hipErrorInsufficientDriver:
        return "hipErrorInsufficientDriver";
      case hipErrorNoDevice:
        return "hipErrorNoDevice";
      case hipErrorInvalidDevice:
        return "hipErrorInvalidDevice";
      case hipErrorNotReady:
        return "hipErrorNotReady";
      case hipErrorNotSupported:
        return "hipErrorNotSupported";
      case hipErrorLaunchFailure:
        return "hipErrorLaunchFailure";
      case hipErrorInvalidContext:
        return "hipErrorInvalidContext";
      default:
        return "hipErrorUnknown";
    }
  }
  static hipError_t MemGetInfo_(size_t* free, size_t* total) {
    GPUALLOC_FAKE_ENTER("hipMemGetInfo");
    *free = f.Free();
    *total = f.config_.total_bytes;
    return hipSuccess;
  }
  hipError_t AllocatePlain(void** out, size_t bytes, unsigned flags) {
    if (bytes > Free()) return hipErrorOutOfMemory;
    const std::uint64_t pages = (bytes + 4 * kFakeKiB - 1) / (4 * kFakeKiB);
    const std::uint64_t size = pages * 4 * kFakeKiB;
    std::uint64_t at = NextAddress(size + 2 * kFakeMiB, 2 * kFakeMiB);
    if (config_.misalign_large && bytes >= 2 * kFakeMiB) at += 4 * kFakeKiB;
    used_ += size;
    plain_[at] = Plain{size, flags};
    *out = reinterpret_cast<void*>(at);
    return hipSuccess;
  }
  static hipError_t Malloc_(void** out, size_t bytes) {
    GPUALLOC_FAKE_ENTER("hipMalloc");
    return f.AllocatePlain(out, bytes, 0);
  }
  static hipError_t ExtMallocWithFlags_(void** out, size_t bytes,
                                        unsigned flags) {
    GPUALLOC_FAKE_ENTER("hipExtMallocWithFlags");
    return f.AllocatePlain(out, bytes, flags);
  }
  static hipError_t Free_(void* p) {
    GPUALLOC_FAKE_ENTER("hipFree");
    auto it = f.plain_.find(reinterpret_cast<std::uint64_t>(p));
    if (it == f.plain_.end()) return hipErrorInvalidValue;
    f.used_ -= it->second.bytes;
    f.plain_.erase(it);
    f.bytes_.Drop({FakeRegionKind::kAllocation, AddressOf(p)});
    return hipSuccess;
  }
  static std::uint64_t AddressOf(const void* p) {
    return reinterpret_cast<std::uint64_t>(p);
  }
  static hipError_t EventCreateWithFlags_(hipEvent_t* e, unsigned) {
    GPUALLOC_FAKE_ENTER("hipEventCreateWithFlags");
    const std::uint64_t id = 0xe0000000 + 16 * ++f.last_event_;
    f.events_.push_back(id);
    *e = reinterpret_cast<hipEvent_t>(id);
    return hipSuccess;
  }
  bool LiveEvent(hipEvent_t e) const {
    return std::find(events_.begin(), events_.end(),
                     reinterpret_cast<std::uint64_t>(e)) != events_.end();
  }
  static hipError_t EventDestroy_(hipEvent_t e) {
    GPUALLOC_FAKE_ENTER("hipEventDestroy");
    if (!f.LiveEvent(e)) return hipErrorInvalidHandle;
    f.events_.erase(std::find(f.events_.begin(), f.events_.end(),
                              reinterpret_cast<std::uint64_t>(e)));
    return hipSuccess;
  }
  // The fake's streams finish their work at once.
  static hipError_t EventRecord_(hipEvent_t e, hipStream_t) {
    GPUALLOC_FAKE_ENTER("hipEventRecord");
    return f.LiveEvent(e) ? hipSuccess : hipErrorInvalidHandle;
  }
  static hipError_t EventQuery_(hipEvent_t e) {
    GPUALLOC_FAKE_ENTER("hipEventQuery");
    return f.LiveEvent(e) ? hipSuccess : hipErrorInvalidHandle;
  }
  static hipError_t EventSynchronize_(hipEvent_t e) {
    GPUALLOC_FAKE_ENTER("hipEventSynchronize");
    return f.LiveEvent(e) ? hipSuccess : hipErrorInvalidHandle;
  }
  static hipError_t StreamWaitEvent_(hipStream_t, hipEvent_t e, unsigned) {
    GPUALLOC_FAKE_ENTER("hipStreamWaitEvent");
    return f.LiveEvent(e) ? hipSuccess : hipErrorInvalidHandle;
  }
  static hipError_t StreamIsCapturing_(hipStream_t stream,
                                       hipStreamCaptureStatus* status) {
    GPUALLOC_FAKE_ENTER("hipStreamIsCapturing");
    if (status == nullptr) return hipErrorInvalidValue;
    auto it = f.capture_status_.find(reinterpret_cast<std::uintptr_t>(stream));
    const int raw = it == f.capture_status_.end()
                        ? static_cast<int>(hipStreamCaptureStatusNone)
                        : it->second;
    static_assert(sizeof(*status) == sizeof(raw));
    std::memcpy(status, &raw, sizeof(raw));  // even a value the enum lacks
    return hipSuccess;
  }
  // The mode is per thread, as in the runtime.
  static hipError_t ThreadExchangeStreamCaptureMode_(
      hipStreamCaptureMode* mode) {
    GPUALLOC_FAKE_ENTER("hipThreadExchangeStreamCaptureMode");
    if (mode == nullptr) return hipErrorInvalidValue;
    auto [it, added] = f.capture_modes_.try_emplace(std::this_thread::get_id(),
                                                    hipStreamCaptureModeGlobal);
    std::swap(*mode, it->second);
    return hipSuccess;
  }
  static hipError_t MemPoolCreate_(hipMemPool_t* pool,
                                   const hipMemPoolProps* props) {
    GPUALLOC_FAKE_ENTER("hipMemPoolCreate");
    if (props == nullptr || props->allocType != hipMemAllocationTypePinned ||
        props->location.type != hipMemLocationTypeDevice)
      return hipErrorInvalidValue;
    f.pool_live_ = true;
    *pool = reinterpret_cast<hipMemPool_t>(std::uint64_t{0x9001});
    return hipSuccess;
  }
  static hipError_t MemPoolDestroy_(hipMemPool_t) {
    GPUALLOC_FAKE_ENTER("hipMemPoolDestroy");
    f.used_ -= f.pool_used_ + f.pool_cached_;
    f.pool_used_ = f.pool_cached_ = 0;
    f.pool_live_ = false;
    return hipSuccess;
  }
  static hipError_t MallocFromPoolAsync_(void** out, size_t bytes, hipMemPool_t,
                                         hipStream_t) {
    GPUALLOC_FAKE_ENTER("hipMallocFromPoolAsync");
    if (!f.pool_live_) return hipErrorInvalidValue;
    const std::uint64_t size = (bytes + 255) / 256 * 256;
    if (size > f.pool_cached_ && size - f.pool_cached_ > f.Free()) {
      if (f.config_.pool_null_on_oom) {
        *out = nullptr;
        return hipSuccess;
      }
      return hipErrorOutOfMemory;
    }
    if (size <= f.pool_cached_) {
      f.pool_cached_ -= size;
    } else {
      f.used_ += size - f.pool_cached_;
      f.pool_cached_ = 0;
    }
    f.pool_used_ += size;
    const std::uint64_t at = f.NextAddress(size, 256);
    f.pool_blocks_[at] = size;
    f.pool_peak_used_ = std::max(f.pool_peak_used_, f.pool_used_);
    f.pool_peak_reserved_ =
        std::max(f.pool_peak_reserved_, f.pool_used_ + f.pool_cached_);
    *out = reinterpret_cast<void*>(at);
    return hipSuccess;
  }
  static hipError_t FreeAsync_(void* p, hipStream_t) {
    GPUALLOC_FAKE_ENTER("hipFreeAsync");
    auto it = f.pool_blocks_.find(reinterpret_cast<std::uint64_t>(p));
    if (it == f.pool_blocks_.end()) return hipErrorInvalidValue;
    f.pool_used_ -= it->second;
    f.pool_cached_ += it->second;
    f.pool_blocks_.erase(it);
    f.bytes_.Drop({FakeRegionKind::kAllocation, AddressOf(p)});
    return hipSuccess;
  }
  static hipError_t MemPoolTrimTo_(hipMemPool_t, size_t keep) {
    GPUALLOC_FAKE_ENTER("hipMemPoolTrimTo");
    const std::uint64_t reserved = f.pool_used_ + f.pool_cached_;
    if (reserved > keep) {
      const std::uint64_t release =
          std::min<std::uint64_t>(f.pool_cached_, reserved - keep);
      f.pool_cached_ -= release;
      f.used_ -= release;
    }
    return hipSuccess;
  }
  static hipError_t MemPoolSetAttribute_(hipMemPool_t, hipMemPoolAttr a,
                                         void* value) {
    GPUALLOC_FAKE_ENTER("hipMemPoolSetAttribute");
    f.pool_attributes_[static_cast<int>(a)] =
        a == hipMemPoolAttrReleaseThreshold
            ? *static_cast<std::uint64_t*>(value)
            : static_cast<std::uint64_t>(*static_cast<int*>(value));
    return hipSuccess;
  }
  static hipError_t MemPoolGetAttribute_(hipMemPool_t, hipMemPoolAttr a,
                                         void* value) {
    GPUALLOC_FAKE_ENTER("hipMemPoolGetAttribute");
    std::uint64_t v = 0;
    switch (a) {
      case hipMemPoolAttrReservedMemCurrent:
        v = f.pool_used_ + f.pool_cached_;
        break;
      case hipMemPoolAttrUsedMemCurrent:
        v = f.pool_used_;
        break;
      case hipMemPoolAttrReservedMemHigh:
        v = f.pool_peak_reserved_;
        break;
      case hipMemPoolAttrUsedMemHigh:
        v = f.pool_peak_used_;
        break;
      default:
        return hipErrorInvalidValue;
    }
    *static_cast<std::uint64_t*>(value) = v;
    return hipSuccess;
  }
  static hipError_t MemGetAllocationGranularity_(
      size_t* g, const hipMemAllocationProp* prop,
      hipMemAllocationGranularity_flags option) {
    GPUALLOC_FAKE_ENTER("hipMemGetAllocationGranularity");
    if (!f.PropOk(prop)) return hipErrorInvalidValue;
    *g = option == hipMemAllocationGranularityMinimum
             ? f.config_.min_granularity
             : f.config_.recommended_granularity;
    return hipSuccess;
  }
  static hipError_t MemAddressReserve_(void** out, size_t bytes,
                                       size_t alignment, void*,
                                       unsigned long long) {
    GPUALLOC_FAKE_ENTER("hipMemAddressReserve");
    switch (f.config_.reserve) {
      case FakeHipConfig::Reserve::kNoOp:
        return hipSuccess;  // *out untouched
      case FakeHipConfig::Reserve::kNullResult:
        *out = nullptr;
        return hipSuccess;
      case FakeHipConfig::Reserve::kReal:
        break;
    }
    if (bytes == 0 || bytes % f.config_.min_granularity != 0)
      return hipErrorInvalidValue;
    const std::uint64_t at =
        f.NextAddress(bytes, std::max<std::uint64_t>(alignment, 2 * kFakeMiB));
    f.reservations_[at] = bytes;
    *out = reinterpret_cast<void*>(at);
    return hipSuccess;
  }
  static hipError_t MemAddressFree_(void* p, size_t bytes) {
    GPUALLOC_FAKE_ENTER("hipMemAddressFree");
    auto it = f.reservations_.find(reinterpret_cast<std::uint64_t>(p));
    if (it == f.reservations_.end() || it->second != bytes)
      return hipErrorInvalidValue;
    f.reservations_.erase(it);
    return hipSuccess;
  }
  static hipError_t MemCreate_(hipMemGenericAllocationHandle_t* h, size_t bytes,
                               const hipMemAllocationProp* prop,
                               unsigned long long) {
    GPUALLOC_FAKE_ENTER("hipMemCreate");
    if (!f.PropOk(prop) || bytes == 0 || bytes % f.config_.min_granularity != 0)
      return hipErrorInvalidValue;
    if (bytes > f.Free()) return hipErrorOutOfMemory;
    const bool exportable = f.PropWantsFd(prop);
    f.last_create_exportable_ = exportable;
    const std::uint64_t id = 0x4000000 + 16 * ++f.last_handle_;
    f.used_ += bytes;
    f.handles_[id] = Physical{bytes, false, 0, 0, id, exportable};
    f.memories_[id] = {bytes, 1};
    *h = reinterpret_cast<hipMemGenericAllocationHandle_t>(id);
    return hipSuccess;
  }
  // Forgets a handle released (retains included) and unmapped; its memory
  // goes once no handle refers to it.
  void MaybeDropHandle(std::uint64_t id) {
    auto it = handles_.find(id);
    if (it != handles_.end() && it->second.released &&
        it->second.retains == 0 && it->second.mappings == 0) {
      const std::uint64_t memory = it->second.memory;
      handles_.erase(it);
      auto m = memories_.find(memory);
      if (m != memories_.end() && --m->second.second == 0) {
        used_ -= m->second.first;
        memories_.erase(m);
        bytes_.Drop({FakeRegionKind::kPhysical, memory});
      }
    }
  }
  static hipError_t MemRelease_(hipMemGenericAllocationHandle_t h) {
    GPUALLOC_FAKE_ENTER("hipMemRelease");
    const auto id = reinterpret_cast<std::uint64_t>(h);
    auto it = f.handles_.find(id);
    if (it == f.handles_.end() ||
        (it->second.released && it->second.retains == 0))
      return hipErrorInvalidValue;
    if (it->second.retains > 0) {
      --it->second.retains;
    } else {
      it->second.released = true;
    }
    f.MaybeDropHandle(id);
    return hipSuccess;
  }
  static hipError_t MemMap_(void* p, size_t bytes, size_t offset,
                            hipMemGenericAllocationHandle_t h,
                            unsigned long long) {
    GPUALLOC_FAKE_ENTER("hipMemMap");
    const auto id = reinterpret_cast<std::uint64_t>(h);
    auto it = f.handles_.find(id);
    if (it == f.handles_.end() || offset != 0 || it->second.bytes != bytes)
      return hipErrorInvalidValue;
    it->second.mappings++;
    f.mappings_[reinterpret_cast<std::uint64_t>(p)] = {bytes, id};
    return hipSuccess;
  }
  static hipError_t MemUnmap_(void* p, size_t bytes) {
    GPUALLOC_FAKE_ENTER("hipMemUnmap");
    auto it = f.mappings_.find(reinterpret_cast<std::uint64_t>(p));
    if (it == f.mappings_.end() || it->second.first != bytes)
      return hipErrorInvalidValue;
    const std::uint64_t id = it->second.second;
    f.mappings_.erase(it);
    f.handles_[id].mappings--;
    f.MaybeDropHandle(id);
    return hipSuccess;
  }
  static hipError_t MemSetAccess_(void* p, size_t bytes,
                                  const hipMemAccessDesc* desc, size_t count) {
    GPUALLOC_FAKE_ENTER("hipMemSetAccess");
    if (count != 1 || desc->location.type != hipMemLocationTypeDevice ||
        desc->flags != hipMemAccessFlagsProtReadWrite)
      return hipErrorInvalidValue;
    const auto at = reinterpret_cast<std::uint64_t>(p);
    auto it = f.mappings_.upper_bound(at);
    if (it == f.mappings_.begin()) return hipErrorInvalidValue;
    --it;
    if (at + bytes > it->first + it->second.first) return hipErrorInvalidValue;
    return hipSuccess;
  }
  // Where a copy may touch `address`: a plain allocation, a pool block, or
  // a mapping (its handle's bytes). mu_ held.
  std::optional<FakeRegion> CopyRegion(std::uint64_t address) const {
    if (auto r = FakeDeviceBytes::In(plain_, address,
                                     [](const Plain& p) { return p.bytes; })) {
      return r;
    }
    const auto size = [](std::uint64_t n) { return n; };
    if (auto r = FakeDeviceBytes::In(pool_blocks_, address, size)) return r;
    auto r = FakeDeviceBytes::In(
        mappings_, address,
        [](const std::pair<std::uint64_t, std::uint64_t>& m) {
          return m.first;
        });
    if (r) {
      const std::uint64_t h = mappings_.at(r->key.second).second;
      r->key = {FakeRegionKind::kPhysical, handles_.at(h).memory};
      return r;
    }
    // An allocation of another (fake) process, opened here.
    r = FakeDeviceBytes::In(opened_, address,
                            [](const Opened& o) { return o.bytes; });
    if (r) {
      const Opened& o = opened_.at(r->key.second);
      r->key = {FakeRegionKind::kAllocation, o.source};
      r->offset += o.source_offset;
    }
    return r;
  }
#include "tests/backends/hip_fake_sharing.inc"
  static hipError_t Memcpy_(void* destination, const void* source, size_t bytes,
                            hipMemcpyKind kind) {
    GPUALLOC_FAKE_ENTER("hipMemcpy");
    if ((destination == nullptr || source == nullptr) && bytes != 0) {
      return hipErrorInvalidValue;
    }
    const auto region = [&](std::uint64_t at) { return f.CopyRegion(at); };
    bool copied = false;
    if (kind == hipMemcpyDeviceToHost) {
      copied =
          f.bytes_.Copy(AddressOf(source), bytes, destination, nullptr, region);
    } else if (kind == hipMemcpyHostToDevice) {
      copied =
          f.bytes_.Copy(AddressOf(destination), bytes, nullptr, source, region);
    }
    return copied ? hipSuccess : hipErrorInvalidValue;
  }
#undef GPUALLOC_FAKE_ENTER

  const FakeHipConfig config_;
  mutable std::mutex mu_;
  std::vector<std::string> calls_;
  std::vector<int> call_devices_;  // the caller's device at each call
  std::map<std::thread::id, int> thread_devices_;
  std::map<std::uintptr_t, int> capture_status_;  // raw values
  std::map<std::thread::id, hipStreamCaptureMode> capture_modes_;
  std::map<std::string, hipError_t> failures_;
  bool initialised_ = false;
  std::uint64_t used_ = 0;
  std::uint64_t next_ = std::uint64_t{0x7f0000000000};
  std::map<std::uint64_t, Plain> plain_;
  std::vector<std::uint64_t> events_;
  std::uint64_t last_event_ = 0;
  bool pool_live_ = false;
  std::uint64_t pool_used_ = 0;
  std::uint64_t pool_cached_ = 0;
  std::uint64_t pool_peak_used_ = 0;
  std::uint64_t pool_peak_reserved_ = 0;
  std::map<std::uint64_t, std::uint64_t> pool_blocks_;
  std::map<int, std::uint64_t> pool_attributes_;
  std::map<std::uint64_t, std::uint64_t> reservations_;
  std::uint64_t last_handle_ = 0;
  std::map<std::uint64_t, Physical> handles_;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> mappings_;
  // Sharing and host memory (hip_fake_sharing.inc).
  std::map<std::uint64_t, std::pair<std::uint64_t, int>>
      memories_;  // bytes, refs
  bool last_create_exportable_ = false;
  int process_ = 0;
  // An allocation opened through an IPC handle; opened again by the same
  // process it gives the same address and counts the open, as the runtime
  // does (each close counts one down).
  struct Opened {
    std::uint64_t bytes = 0;
    std::uint64_t source = 0;
    std::uint64_t source_offset = 0;
    int process = 0;
    int opens = 1;
  };
  std::map<std::uint64_t, Opened> opened_;
  std::map<std::uint64_t, std::uint64_t> exports_;  // memfd inode -> memory
  std::map<void*, std::uint64_t> host_blocks_;
  unsigned last_host_flags_ = 0;
  // Blocks made with hipHostMallocMapped: their device address, and back.
  std::map<void*, std::uint64_t> mapped_host_;
  std::map<std::uint64_t, void*> mapped_device_;
  std::uint64_t next_mapped_ = std::uint64_t{0x600000000000};
  unsigned last_wait_flags_ = ~0u;
  std::uint64_t last_wait_mask_ = 0;
  // The bytes behind the addresses, for hipMemcpy.
  FakeDeviceBytes bytes_;
};

// An entry-point table that owns a fresh fake: the fake lives as long as
// whoever holds the table (a backend), and becomes the active one now.
inline std::shared_ptr<const HipApi> OwningFakeApi(FakeHipConfig config) {
  struct Owner {
    explicit Owner(FakeHipConfig c) : fake(std::move(c)), api(fake.api()) {}
    FakeHipRuntime fake;
    std::shared_ptr<const HipApi> api;
  };
  auto owner = std::make_shared<Owner>(std::move(config));
  return std::shared_ptr<const HipApi>(owner, owner->api.get());
}

}  // namespace gpualloc::hip::testing

#endif  // GPUALLOC_TESTS_HIP_FAKE_RUNTIME_H_
