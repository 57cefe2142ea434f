// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_backend.h: the CUDA driver-API backend.
//
// One CudaBackend drives one device through an entry-point table
// (cuda_driver.h): plain allocations (cuMemAlloc / cuMemFree), virtual memory
// (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess and their
// inverses), events on the caller's streams, the stream-capture queries
// (cuStreamIsCapturing, cuThreadExchangeStreamCaptureMode: graph_capture when
// the driver has both), synchronous copies between device and host memory
// (cuMemcpyDtoH / cuMemcpyHtoD: host_copy when the driver has both), IPC
// handles of plain allocations (cuIpcGetMemHandle, cuIpcOpenMemHandle_v2,
// cuIpcCloseMemHandle), physical memory as POSIX file descriptors
// (cuMemRetainAllocationHandle, cuMemExportToShareableHandle,
// cuMemImportFromShareableHandle), page-locked host memory (cuMemHostAlloc
// with CU_MEMHOSTALLOC_PORTABLE, cuMemFreeHost), completion counters in
// mapped page-locked memory (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP,
// cuMemHostGetDevicePointer, cuStreamWriteValue64, cuStreamWaitValue64 with
// CU_STREAM_WAIT_VALUE_GEQ, cuMemFreeHost), and one
// stream-ordered pool of its own (cuMemPoolCreate; cuMemAllocFromPoolAsync /
// cuMemFreeAsync). It
// works in the device's primary context, retained at creation, made current on
// the calling thread for each call that needs it and the thread's previous
// context put back when the call returns (a thread working on another device
// stays on it), released at destruction.
//
// Every handle the backend gives out (addresses, events, physical handles,
// pool blocks, reservations, mappings, counter blocks) is recorded on the
// host, and a call
// naming something the backend did not give out, or breaking a virtual-memory
// rule, is InvalidArgument before any driver call: the driver's own answer to
// a stale handle is undefined behaviour. Driver errors become a status naming
// the call, the error and its code (CudaError).
//
// The pool is created on first use with CUDA's defaults (release threshold 0,
// every reuse rule on); ConfigurePool sets the release threshold and the
// three reuse attributes. Unmap makes one cuMemUnmap per mapping in the range.
//
// Thread safety: all methods are thread-safe. Host waits (SynchronizeEvent)
// and stream calls run without the backend's lock.
#ifndef GPUALLOC_BACKENDS_CUDA_CUDA_BACKEND_H_
#define GPUALLOC_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/layer.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::cuda {

// "sm_90" for compute capability 9.0, "sm_120" for 12.0.
std::string ArchIdFor(int major, int minor);

// The architecture profile for a device and why it was chosen.
struct ProfileChoice {
  const ArchProfile* profile = nullptr;  // never null for an NVIDIA device
  std::string reason;
};

// By the device's name first (A100, H100, H200, when the compute capability
// agrees), else by architecture id and memory size (FindArchProfile), which
// ends at generic-nvidia for an architecture without a row.
ProfileChoice ChooseNvidiaProfile(absl::string_view device_name, int major,
                                  int minor, std::uint64_t total_bytes);

class CudaBackend final : public Backend {
 public:
  // The backend of device `ordinal` over `api`: cuInit, the device's facts,
  // its primary context. A driver without devices, or an ordinal the driver
  // does not have, is Unavailable; other driver errors as CudaError.
  static absl::StatusOr<std::shared_ptr<CudaBackend>> Create(
      std::shared_ptr<const CudaDriverApi> api, int ordinal);
  // Returns whatever is still allocated, mapped or reserved, destroys the
  // pool, the remaining events and counter blocks, and releases the primary
  // context.
  ~CudaBackend() override;

  const DeviceInfo& info() const override;
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

  // --- Address ranges (cuMemGetAddressRange; with ipc_handles) -------------
  absl::StatusOr<AddressRange> GetAddressRange(DeviceAddress address) override;

  // Completion counters (cuda_counters.cc). On when the driver has the
  // host-memory and counter entry points and the device can map host memory
  // (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) and use 64-bit stream memory
  // operations (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS; its _V1
  // attribute on a driver older than CUDA 11.7, whose entry points are the
  // version 1 ones); notes() says which. A block is one cuMemHostAlloc
  // (DEVICEMAP | PORTABLE) of 8 bytes per counter, zeroed by the host, whose
  // device address the stream calls name; the handle is a number of the
  // backend's own, never reused. DestroyCounters is cuMemFreeHost.
  absl::StatusOr<CounterBlock> CreateCounters(std::size_t count) override;
  absl::Status DestroyCounters(CounterHandle handle) override;
  absl::Status WriteCounter(CounterHandle handle, std::size_t index,
                            std::uint64_t value, Stream stream) override;
  absl::Status WaitCounter(CounterHandle handle, std::size_t index,
                           std::uint64_t value, Stream stream) override;

  // Why the sharing, host-memory and counter capabilities are on or off, in
  // the order they were decided ("ipc_handles off: ...").
  const std::vector<std::string>& notes() const;

  // The profile this device matches and why (gpualloc-info shows it).
  const ProfileChoice& profile_choice() const;
  const CudaDriverApi& api() const;

 private:
  class Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpualloc::cuda

#endif  // GPUALLOC_BACKENDS_CUDA_CUDA_BACKEND_H_
