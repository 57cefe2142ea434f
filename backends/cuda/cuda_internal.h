// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_internal.h: what the CUDA backend's sources share:
// handle conversions, the primary-context switch and the per-call wrapper,
// the wording of out-of-memory answers, and the backend's Impl.
#ifndef GPUALLOC_BACKENDS_CUDA_CUDA_INTERNAL_H_
#define GPUALLOC_BACKENDS_CUDA_CUDA_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "backends/common/handle_books.h"
#include "backends/common/host_copy.h"
#include "backends/common/scoped_current.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/cuda/cuda_vmm.h"
#include "backends/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::cuda::internal {

inline std::string Hex(std::uint64_t value) {
  return absl::StrFormat("%#x", value);
}

inline CUstream ToCuStream(Stream stream) {
  return reinterpret_cast<CUstream>(stream.handle);
}

inline CUevent ToCuEvent(EventHandle event) {
  return reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(event));
}

inline CUmemAllocationProp PinnedOn(CUdevice device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Makes `context` current on the calling thread for one backend call and puts
// the thread's previous context back when it goes out of scope, so that a
// thread working on another device (or with no context) is left as it was.
class ScopedContext : public common::ScopedCurrent<CUcontext> {
 public:
  ScopedContext(const CudaDriverApi& api, CUcontext context, int ordinal);
};

// The per-call wrapper: runs `body` with `context` current, or answers why it
// could not be made current.
template <typename T, typename Body>
T InContext(const CudaDriverApi& api, CUcontext context, int ordinal,
            Body&& body) {
  return common::OnCurrent<T>(ScopedContext(api, context, ordinal),
                              std::forward<Body>(body));
}

// Adds what the device has free to an out-of-memory status.
absl::Status Explain(const CudaDriverApi& api, absl::Status status);

// ResourceExhausted: `bytes` are more than the device's `total_bytes`.
absl::Status TooBig(absl::string_view call, std::uint64_t bytes,
                    std::uint64_t total_bytes);

}  // namespace gpualloc::cuda::internal

namespace gpualloc::cuda {

// The backend's state and the calls behind CudaBackend: teardown, plain
// memory, events and capture in cuda_backend.cc, the device probe in
// cuda_probe.cc, the stream-ordered pool in cuda_pool.cc.
class CudaBackend::Impl {
 public:
  Impl(std::shared_ptr<const CudaDriverApi> api, int ordinal)
      : api_(std::move(api)), ordinal_(ordinal), books_("", ordinal) {}
  ~Impl();

  // What the owner left behind goes back to the device (the destructor's
  // part that needs the context).
  void ReturnEverything();

  absl::Status Init();
  absl::Status FindDevice();
  // What the driver says of the device before a profile is chosen.
  struct DeviceFacts {
    std::string name;
    int major = 0, minor = 0, vmm = 0, pools = 0;
    std::uint64_t total_bytes = 0;
  };
  // The sharing and host-memory capabilities, each with a note saying why
  // it is on or off (the context current; after DescribeDevice).
  void ProbeSharing();
  const std::vector<std::string>& notes() const { return notes_; }
  absl::StatusOr<DeviceFacts> ReadDeviceFacts() const;
  void DescribeDevice(const DeviceFacts& facts);
  absl::Status ReadGranularity();

  const DeviceInfo& info() const { return info_; }
  const ProfileChoice& choice() const { return choice_; }
  const CudaDriverApi& api() const { return *api_; }
  // Set once by Init, before the backend is handed out.
  CudaVmm& vmm() ABSL_NO_THREAD_SAFETY_ANALYSIS { return *vmm_; }

  // The primary context, current on the calling thread until the returned
  // guard goes out of scope (check its status()).
  internal::ScopedContext MakeCurrent() const {
    return internal::ScopedContext(*api_, context_, ordinal_);
  }

  // The per-call wrapper: runs `body` with the primary context current, or
  // answers why it could not be made current.
  template <typename T, typename Body>
  T InContext(Body&& body) const {
    return internal::InContext<T>(*api_, context_, ordinal_,
                                  std::forward<Body>(body));
  }

  absl::Status Explain(absl::Status status) const {
    return internal::Explain(*api_, std::move(status));
  }
  absl::Status TooBig(absl::string_view call, std::uint64_t bytes) const {
    return internal::TooBig(call, bytes, info_.total_bytes);
  }

  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes);
  absl::Status Free(DeviceAddress address);

  absl::StatusOr<EventHandle> CreateEvent();
  absl::Status DestroyEvent(EventHandle event);
  absl::Status RecordEvent(EventHandle event, Stream stream);
  absl::StatusOr<bool> QueryEvent(EventHandle event);
  absl::Status StreamWaitEvent(Stream stream, EventHandle event);
  absl::Status SynchronizeEvent(EventHandle event);

  absl::StatusOr<bool> IsCapturing(Stream stream);
  absl::StatusOr<CaptureMode> ExchangeCaptureMode(CaptureMode mode);

  // --- Copies between device and host memory -------------------------------
  // cuMemcpyDtoH or cuMemcpyHtoD (`call`, made by `copy`) of `bytes` at
  // `device`. A copy of 0 bytes, or one with a null host pointer, never
  // reaches the driver.
  template <typename Copy>
  absl::Status HostCopy(absl::string_view call, DeviceAddress device,
                        const void* host, std::uint64_t bytes,
                        Copy copy) const {
    if (bytes == 0 || host == nullptr) {
      return common::CheckHostPointer(call, device, host, bytes);
    }
    return InContext<absl::Status>([&] {
      return CudaError(*api_,
                       absl::StrCat(call, "(", internal::Hex(device), ", ",
                                    bytes, " bytes)"),
                       copy());
    });
  }

  // --- Sharing with other processes and host memory (cuda_share.cc) -------
  absl::StatusOr<IpcHandle> GetIpcHandle(DeviceAddress base);
  absl::StatusOr<DeviceAddress> OpenIpcHandle(const IpcHandle& handle);
  absl::Status CloseIpcHandle(DeviceAddress address);
  absl::StatusOr<void*> HostAllocate(std::uint64_t bytes);
  absl::Status HostFree(void* pointer);
  // cuMemGetAddressRange (with ipc_handles).
  absl::StatusOr<Backend::AddressRange> GetAddressRange(DeviceAddress address);

  // --- Completion counters (cuda_counters.cc) -------------------------------
  // completion_counters, with a note saying why it is on or off (after
  // ProbeSharing; the context current).
  void ProbeCounters();
  absl::StatusOr<CounterBlock> CreateCounters(std::size_t count);
  absl::Status DestroyCounters(CounterHandle handle);
  absl::Status WriteCounter(CounterHandle handle, std::size_t index,
                            std::uint64_t value, Stream stream);
  absl::Status WaitCounter(CounterHandle handle, std::size_t index,
                           std::uint64_t value, Stream stream);

  absl::StatusOr<CUmemoryPool> Pool();
  absl::Status ConfigurePool(const PoolOptions& options);
  absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,
                                             Stream stream);
  absl::Status PoolFree(DeviceAddress address, Stream stream);
  absl::Status PoolTrim(std::uint64_t keep_bytes);
  absl::StatusOr<PoolUsage> GetPoolUsage();

 private:
  const std::shared_ptr<const CudaDriverApi> api_;
  const int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;  // the primary context, retained
  DeviceInfo info_;
  ProfileChoice choice_;
  std::vector<std::string> notes_;  // why each capability is what it is

  // Plain allocations (and their sizes), pool blocks, events, host blocks
  // and counter blocks handed out.
  common::HandleBooks<std::uint64_t> books_;

  absl::Mutex mu_;
  CUmemoryPool pool_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Virtual memory, once the granularity is known (Init).
  std::unique_ptr<CudaVmm> vmm_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpualloc::cuda

#endif  // GPUALLOC_BACKENDS_CUDA_CUDA_INTERNAL_H_
