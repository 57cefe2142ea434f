// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_backend.h: the HIP/ROCm backend over an entry-point table.
//
// The backend takes its HIP runtime as a table of function pointers (HipApi):
// the real one from LoadHipApi(), or a fake in the tests. Everything ROCm does
// differently from CUDA is handled here, explicitly:
//  - capabilities as ROCm really behaves: virtual memory only when the device
//    attribute says so AND a probe reservation returns a non-null address
//    (ROCm 5.2's hipMemAddressReserve does nothing, 5.3-6.0 return a null
//    reservation, 6.1 works); pools only when
//    hipDeviceAttributeMemoryPoolsSupported says so; a pool allocation that
//    returns success with a null pointer (ROCm < 6.0 on out of memory) is
//    ResourceExhausted;
//  - plain allocations of at least one fragment (2 MiB) are rounded up to
//    whole fragments and start on a fragment boundary (over-allocating when
//    the runtime does not place them so), so that the driver can map them with
//    2 MiB fragments;
//  - coarse-grained memory by default, fine-grained (hipExtMallocWithFlags
//    with hipDeviceMallocFinegrained) when the configuration asks for it;
//  - synchronous copies between device and host memory with hipMemcpy
//    (host_copy when the runtime has it);
//  - IPC handles of plain allocations (hipIpcGetMemHandle,
//    hipIpcOpenMemHandle, hipIpcCloseMemHandle), physical memory as POSIX
//    file descriptors (hipMemRetainAllocationHandle,
//    hipMemExportToShareableHandle, hipMemImportFromShareableHandle: the
//    descriptor passed by address before ROCm 7.1, by value from 7.1) and
//    page-locked host memory (hipHostMalloc with hipHostMallocPortable,
//    hipHostFree), each when the runtime has its entry points;
//  - completion counters in mapped, coherent page-locked memory
//    (hipHostMalloc with hipHostMallocMapped | hipHostMallocPortable |
//    hipHostMallocCoherent, hipHostGetDevicePointer, hipStreamWriteValue64,
//    hipStreamWaitValue64 with hipStreamWaitValueGte, hipHostFree) when the
//    runtime has the entry points and the device attributes
//    hipDeviceAttributeCanMapHostMemory and
//    hipDeviceAttributeCanUseStreamWaitValue say so;
//  - the profile (gfx90a, gfx942, generic) chosen from gcnArchName with its
//    target features stripped, and every such decision written down in
//    notes() for reports.
//
// The current device: every method that calls the runtime makes the backend's
// device current on the calling thread first (a null stream then means this
// device's) and puts the thread's previous device back when it returns, so a
// thread working on another device stays on it.
//
// Thread safety: every method may be called from any thread.
#ifndef GPUALLOC_BACKENDS_HIP_HIP_BACKEND_H_
#define GPUALLOC_BACKENDS_HIP_HIP_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/hip/hip_api.h"
#include "backends/layer.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/core/backend.h"
#include "gpualloc/core/config.h"

namespace gpualloc::hip {

struct HipBackendOptions {
  int ordinal = 0;
  MemoryKind memory_kind = MemoryKind::kCoarse;
};

// Maps a HIP error to a Status: hipErrorOutOfMemory is ResourceExhausted,
// hipErrorInvalidValue and hipErrorInvalidContext InvalidArgument,
// hipErrorNoDevice / hipErrorInsufficientDriver / hipErrorNotInitialized
// Unavailable, hipErrorNotSupported Unimplemented, anything else Internal. The
// message is
// "`call` failed: hipErrorInvalidValue (1)", the name from the table's
// hipGetErrorName.
absl::Status HipErrorStatus(const HipApi& api, hipError_t error,
                            absl::string_view call);

// The profile for a device reporting `gcn_arch_name` (e.g.
// "gfx90a:sramecc+:xnack-") and `total_bytes`; `why` says how it was chosen.
// Target features after ':' are ignored; an unknown processor gets
// generic-amd.
const ArchProfile& ChooseAmdProfile(absl::string_view gcn_arch_name,
                                    std::uint64_t total_bytes,
                                    std::string* why);

// hipInit, then hipGetDeviceCount. Unavailable when the runtime finds no
// device, with the reason.
absl::StatusOr<int> HipDeviceCountWith(const HipApi& api);

class HipBackend final : public Backend {
 public:
  // Initialises the runtime and probes device `options.ordinal`. Unavailable
  // when hipInit fails or there is no such device (naming the library and the
  // error); InvalidArgument for a negative ordinal.
  static absl::StatusOr<std::shared_ptr<HipBackend>> Create(
      std::shared_ptr<const HipApi> api, const HipBackendOptions& options);

  ~HipBackend() override;
  HipBackend(const HipBackend&) = delete;
  HipBackend& operator=(const HipBackend&) = delete;

  const DeviceInfo& info() const override { return info_; }
  // Backend's calls (gpualloc/core/backend.h).
  absl::StatusOr<std::uint64_t> FreeBytes() override;
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) override;
  absl::Status Free(DeviceAddress address) override;

  absl::StatusOr<EventHandle> CreateEvent() override;
  absl::Status DestroyEvent(EventHandle event) override;
  absl::Status RecordEvent(EventHandle event, Stream stream) override;
  absl::StatusOr<bool> QueryEvent(EventHandle event) override;
  absl::Status StreamWaitEvent(Stream stream, EventHandle event) override;
  absl::Status SynchronizeEvent(EventHandle event) override;

  absl::StatusOr<bool> IsCapturing(Stream stream) override;
  absl::StatusOr<CaptureMode> ExchangeCaptureMode(CaptureMode mode) override;

  absl::Status ConfigurePool(const PoolOptions& options) override;
  absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,
                                             Stream stream) override;
  absl::Status PoolFree(DeviceAddress address, Stream stream) override;
  absl::Status PoolTrim(std::uint64_t keep_bytes) override;
  absl::StatusOr<PoolUsage> GetPoolUsage() override;

  absl::StatusOr<DeviceAddress> ReserveAddress(
      std::uint64_t bytes, std::uint64_t alignment) override;
  absl::Status FreeAddress(DeviceAddress address, std::uint64_t bytes) override;
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::uint64_t bytes) override;
  absl::Status ReleasePhysical(PhysicalHandle handle) override;
  absl::Status Map(DeviceAddress address, std::uint64_t bytes,
                   PhysicalHandle handle) override;
  absl::Status Unmap(DeviceAddress address, std::uint64_t bytes) override;
  absl::Status SetAccess(DeviceAddress address, std::uint64_t bytes) override;

  absl::Status CopyToHost(void* host, DeviceAddress source,
                          std::uint64_t bytes) override;
  absl::Status CopyFromHost(DeviceAddress destination, const void* host,
                            std::uint64_t bytes) override;

  absl::StatusOr<IpcHandle> GetIpcHandle(DeviceAddress base) override;
  absl::StatusOr<DeviceAddress> OpenIpcHandle(const IpcHandle& handle) override;
  absl::Status CloseIpcHandle(DeviceAddress address) override;
  absl::StatusOr<int> ExportMapping(DeviceAddress address) override;
  absl::StatusOr<PhysicalHandle> ImportPhysical(int fd,
                                                std::uint64_t bytes) override;
  absl::StatusOr<void*> HostAllocate(std::uint64_t bytes) override;
  absl::Status HostFree(void* ptr) override;

  // Completion counters (hip_counters.cc): a block is one hipHostMalloc of 8
  // bytes per counter, zeroed by the host, whose device address the stream
  // calls name; the handle is a number of the backend's own, never reused.
  absl::StatusOr<CounterBlock> CreateCounters(std::size_t count) override;
  absl::Status DestroyCounters(CounterHandle handle) override;
  absl::Status WriteCounter(CounterHandle handle, std::size_t index,
                            std::uint64_t value, Stream stream) override;
  absl::Status WaitCounter(CounterHandle handle, std::size_t index,
                           std::uint64_t value, Stream stream) override;

  // --- Address ranges (hipMemGetAddressRange; with ipc_handles) ------------
  absl::StatusOr<AddressRange> GetAddressRange(DeviceAddress address) override;

  // The profile the device's numbers came from.
  const ArchProfile& profile() const { return *profile_; }
  // Why the profile, each capability and the granularity are what they are,
  // in the order they were decided.
  const std::vector<std::string>& notes() const { return notes_; }
  // hipRuntimeGetVersion's answer (HIP_VERSION encoding).
  int runtime_version() const { return runtime_version_; }
  MemoryKind memory_kind() const { return memory_kind_; }
  // Plain allocations of at least this many bytes start on its boundary.
  std::uint64_t fragment_bytes() const { return fragment_; }

 private:
  class State;  // bookkeeping behind one lock (hip_internal.h)

  // What the runtime says of the device before a profile is chosen.
  struct DeviceFacts {
    std::string name;
    std::string gcn_arch_name;  // empty when the runtime does not say
    std::uint64_t total_bytes = 0;
  };

  HipBackend(std::shared_ptr<const HipApi> api, const HipBackendOptions& o);
  // Create's probe, with the device current: the versions, ReadDeviceFacts,
  // DescribeDevice, ProbePools, ProbeVirtualMemory, then the virtual-memory
  // books at the granularity decided.
  absl::Status Probe();
  // Name, architecture and memory; InternalError for a device of 0 bytes.
  absl::StatusOr<DeviceFacts> ReadDeviceFacts();
  // The profile, info() apart from pools and virtual memory, and the notes
  // on them; `driver` is hipDriverGetVersion's answer.
  void DescribeDevice(const DeviceFacts& facts, int driver);
  // stream_ordered_pools: only when the device attribute says so.
  void ProbePools();
  // virtual_memory: the attribute and a real reservation; then
  // AdoptRuntimeGranularity.
  void ProbeVirtualMemory();
  // hipMemGetAllocationGranularity's answer when sane, else the profile's.
  void AdoptRuntimeGranularity();
  // ipc_handles, shareable_handles (after virtual memory) and host_memory,
  // from the entry points the runtime has (hip_share.cc).
  void ProbeSharing();
  // completion_counters: the entry points and two device attributes
  // (hip_counters.cc).
  void ProbeCounters();
  // hipMemRetainAllocationHandle + hipMemExportToShareableHandle +
  // hipMemRelease, with the device current (hip_share.cc). The caller holds
  // the state's lock (State is defined in hip_internal.h, hence no
  // annotation naming it).
  absl::StatusOr<int> ExportOnDevice(DeviceAddress address)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // The per-call wrapper: runs `body` with this backend's device current on
  // the calling thread (the thread's own device back afterwards), or answers
  // why the device could not be made current (hip_internal.h).
  template <typename T, typename Body>
  T OnDevice(Body&& body) const;
  // The parts of calls that run with the device current.
  absl::StatusOr<DeviceAddress> AllocateOnDevice(std::uint64_t bytes);
  absl::Status ConfigurePoolOnDevice(const PoolOptions& options);
  absl::StatusOr<DeviceAddress> PoolAllocateOnDevice(std::uint64_t bytes,
                                                     hipMemPool_t pool,
                                                     Stream stream);
  absl::StatusOr<PoolUsage> PoolUsageOnDevice();
  // hipMemcpy of `bytes` from `source` to `destination` in direction `kind`;
  // `device` is the device side, for messages (hip_copy.cc).
  absl::Status HostCopy(DeviceAddress device, void* destination,
                        const void* source, std::uint64_t bytes,
                        hipMemcpyKind kind);

  const std::shared_ptr<const HipApi> api_;
  const int ordinal_;
  const MemoryKind memory_kind_;
  DeviceInfo info_;
  const ArchProfile* profile_ = nullptr;
  std::vector<std::string> notes_;
  int runtime_version_ = 0;
  std::uint64_t fragment_ = 0;
  std::unique_ptr<State> state_;
};

}  // namespace gpualloc::hip

#endif  // GPUALLOC_BACKENDS_HIP_HIP_BACKEND_H_
