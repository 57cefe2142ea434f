// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_backend.cc: the CUDA driver-API backend over an
// entry-point table: its teardown, plain memory, events and graph capture, and
// CudaBackend's calls. The device probe is in cuda_probe.cc, the
// stream-ordered pool in cuda_pool.cc and virtual memory in cuda_vmm.cc.
#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/common/capture_mode.h"
#include "backends/common/handle_books.h"
#include "backends/common/host_copy.h"
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_vmm.h"
#include "core/status_macros.h"

namespace gpualloc::cuda {
namespace {

using internal::Hex;
using internal::ScopedContext;
using internal::ToCuEvent;
using internal::ToCuStream;

constexpr common::VendorCaptureModes<CUstreamCaptureMode> kCaptureModes = {
    CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    CU_STREAM_CAPTURE_MODE_RELAXED};
constexpr common::VendorCaptureStatuses<CUstreamCaptureStatus>
    kCaptureStatuses = {CU_STREAM_CAPTURE_STATUS_NONE,
                        CU_STREAM_CAPTURE_STATUS_ACTIVE,
                        CU_STREAM_CAPTURE_STATUS_INVALIDATED};

EventHandle FromCuEvent(CUevent event) {
  return static_cast<EventHandle>(reinterpret_cast<std::uintptr_t>(event));
}

// cuEventCreate of an event without timing (the context current).
absl::StatusOr<EventHandle> NewEvent(const CudaDriverApi& api) {
  CUevent event = nullptr;
  const CUresult r = api.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    return CudaError(api, "cuEventCreate(CU_EVENT_DISABLE_TIMING)", r);
  }
  return FromCuEvent(event);
}

}  // namespace

namespace internal {

ScopedContext::ScopedContext(const CudaDriverApi& api, CUcontext context,
                             int ordinal)
    : ScopedCurrent(
          context,
          [&api](CUcontext* current) {
            return CudaError(api, "cuCtxGetCurrent",
                             api.cuCtxGetCurrent(current));
          },
          [&api, ordinal](CUcontext wanted) {
            return CudaError(
                api,
                absl::StrCat("cuCtxSetCurrent(primary context of device ",
                             ordinal, ")"),
                api.cuCtxSetCurrent(wanted));
          }) {}

absl::Status Explain(const CudaDriverApi& api, absl::Status status) {
  if (!absl::IsResourceExhausted(status)) return status;
  std::size_t free = 0, total = 0;
  if (api.cuMemGetInfo(&free, &total) != CUDA_SUCCESS) return status;
  return absl::ResourceExhaustedError(
      absl::StrCat(status.message(), "; the device has ", free, " of ", total,
                   " bytes free"));
}

absl::Status TooBig(absl::string_view call, std::uint64_t bytes,
                    std::uint64_t total_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      call, "(", bytes, " bytes): more than the device's total memory (",
      total_bytes, " bytes)"));
}

}  // namespace internal

CudaBackend::Impl::~Impl() {
  if (context_ == nullptr) return;  // nothing was retained
  // Best effort: errors are ignored (at process exit the driver may already
  // be shutting down). Returning memory needs the context current; the
  // retain is given back in any case (cuDevicePrimaryCtxRelease needs no
  // current context), also when Init failed after the retain.
  {
    const ScopedContext current = MakeCurrent();
    if (current.status().ok()) ReturnEverything();
  }
  api_->cuDevicePrimaryCtxRelease(device_);
}

void CudaBackend::Impl::ReturnEverything() {
  absl::MutexLock lock(&mu_);
  const common::HandleBooks<std::uint64_t>::Leftovers left = books_.TakeAll();
  for (const auto& [address, bytes] : left.blocks) {
    api_->cuMemFree(static_cast<CUdeviceptr>(address));
  }
  if (vmm_ != nullptr) vmm_->ReturnEverything();
  for (EventHandle e : left.events) api_->cuEventDestroy(ToCuEvent(e));
  for (DeviceAddress a : left.opened) {
    api_->cuIpcCloseMemHandle(static_cast<CUdeviceptr>(a));
  }
  for (void* p : left.host_blocks) api_->cuMemFreeHost(p);
  for (const auto& counters : left.counter_blocks) {
    api_->cuMemFreeHost(counters.host);
  }
  if (pool_ != nullptr) {
    // Blocks still out are freed on the default stream; cuMemPoolDestroy
    // returns the pool's memory once those frees complete.
    for (DeviceAddress address : left.pool_blocks) {
      api_->cuMemFreeAsync(static_cast<CUdeviceptr>(address), nullptr);
    }
    api_->cuMemPoolDestroy(pool_);
  }
}

absl::StatusOr<DeviceAddress> CudaBackend::Impl::Allocate(std::uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("Allocate(0 bytes)");
  if (bytes > info_.total_bytes) return TooBig("Allocate", bytes);
  return InContext<absl::StatusOr<DeviceAddress>>(
      [&]() -> absl::StatusOr<DeviceAddress> {
        CUdeviceptr ptr = 0;
        const CUresult r = api_->cuMemAlloc(&ptr, bytes);
        if (r != CUDA_SUCCESS) {
          return Explain(CudaError(
              *api_, absl::StrCat("cuMemAlloc(", bytes, " bytes)"), r));
        }
        books_.AddBlock(ptr, bytes);
        return static_cast<DeviceAddress>(ptr);
      });
}

absl::Status CudaBackend::Impl::Free(DeviceAddress address) {
  return books_.ReleaseBlock(address, [&](std::uint64_t) {
    return InContext<absl::Status>([&] {
      return CudaError(*api_, absl::StrCat("cuMemFree(", Hex(address), ")"),
                       api_->cuMemFree(static_cast<CUdeviceptr>(address)));
    });
  });
}

// --- Events ---------------------------------------------------------------

absl::StatusOr<EventHandle> CudaBackend::Impl::CreateEvent() {
  absl::StatusOr<EventHandle> event =
      InContext<absl::StatusOr<EventHandle>>([&] { return NewEvent(*api_); });
  if (event.ok()) books_.AddEvent(*event);
  return event;
}

absl::Status CudaBackend::Impl::DestroyEvent(EventHandle event) {
  return books_.ReleaseEvent(event, [&] {
    return InContext<absl::Status>([&] {
      return CudaError(*api_, absl::StrCat("cuEventDestroy(", Hex(event), ")"),
                       api_->cuEventDestroy(ToCuEvent(event)));
    });
  });
}

absl::Status CudaBackend::Impl::RecordEvent(EventHandle event, Stream stream) {
  GPUALLOC_RETURN_IF_ERROR(books_.CheckEvent("RecordEvent", event));
  return InContext<absl::Status>([&]() -> absl::Status {
    return CudaError(*api_,
                     absl::StrCat("cuEventRecord(", Hex(event), ", stream ",
                                  Hex(stream.handle), ")"),
                     api_->cuEventRecord(ToCuEvent(event), ToCuStream(stream)));
  });
}

absl::StatusOr<bool> CudaBackend::Impl::QueryEvent(EventHandle event) {
  GPUALLOC_RETURN_IF_ERROR(books_.CheckEvent("QueryEvent", event));
  return InContext<absl::StatusOr<bool>>([&]() -> absl::StatusOr<bool> {
    const CUresult r = api_->cuEventQuery(ToCuEvent(event));
    if (r == CUDA_SUCCESS) return true;
    if (r == CUDA_ERROR_NOT_READY) return false;
    return CudaError(*api_, absl::StrCat("cuEventQuery(", Hex(event), ")"), r);
  });
}

absl::Status CudaBackend::Impl::StreamWaitEvent(Stream stream,
                                                EventHandle event) {
  GPUALLOC_RETURN_IF_ERROR(books_.CheckEvent("StreamWaitEvent", event));
  return InContext<absl::Status>([&]() -> absl::Status {
    return CudaError(
        *api_,
        absl::StrCat("cuStreamWaitEvent(stream ", Hex(stream.handle), ", ",
                     Hex(event), ")"),
        api_->cuStreamWaitEvent(ToCuStream(stream), ToCuEvent(event), 0));
  });
}

absl::Status CudaBackend::Impl::SynchronizeEvent(EventHandle event) {
  GPUALLOC_RETURN_IF_ERROR(books_.CheckEvent("SynchronizeEvent", event));
  return InContext<absl::Status>([&]() -> absl::Status {
    return CudaError(*api_,
                     absl::StrCat("cuEventSynchronize(", Hex(event), ")"),
                     api_->cuEventSynchronize(ToCuEvent(event)));
  });
}

// --- Graph capture ----------------------------------------------------------

absl::StatusOr<bool> CudaBackend::Impl::IsCapturing(Stream stream) {
  return InContext<absl::StatusOr<bool>>([&]() -> absl::StatusOr<bool> {
    const std::string call =
        absl::StrCat("cuStreamIsCapturing(stream ", Hex(stream.handle), ")");
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult r = api_->cuStreamIsCapturing(ToCuStream(stream), &status);
    if (r != CUDA_SUCCESS) return CudaError(*api_, call, r);
    return common::IsCaptureUnderway(&status, kCaptureStatuses, call);
  });
}

absl::StatusOr<CaptureMode> CudaBackend::Impl::ExchangeCaptureMode(
    CaptureMode mode) {
  return InContext<absl::StatusOr<CaptureMode>>(
      [&]() -> absl::StatusOr<CaptureMode> {
        CUstreamCaptureMode exchanged =
            common::ToVendorMode(mode, kCaptureModes);
        const CUresult r = api_->cuThreadExchangeStreamCaptureMode(&exchanged);
        if (r != CUDA_SUCCESS) {
          return CudaError(*api_, "cuThreadExchangeStreamCaptureMode", r);
        }
        return common::FromVendorMode(&exchanged, kCaptureModes,
                                      "cuThreadExchangeStreamCaptureMode");
      });
}

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

const DeviceInfo& CudaBackend::info() const { return impl_->info(); }
const ProfileChoice& CudaBackend::profile_choice() const {
  return impl_->choice();
}
const CudaDriverApi& CudaBackend::api() const { return impl_->api(); }

absl::StatusOr<std::uint64_t> CudaBackend::FreeBytes() {
  const CudaDriverApi& api = impl_->api();
  return impl_->InContext<absl::StatusOr<std::uint64_t>>(
      [&]() -> absl::StatusOr<std::uint64_t> {
        std::size_t free = 0, total = 0;
        const CUresult r = api.cuMemGetInfo(&free, &total);
        if (r != CUDA_SUCCESS) return CudaError(api, "cuMemGetInfo", r);
        return free;
      });
}
absl::StatusOr<DeviceAddress> CudaBackend::Allocate(std::uint64_t bytes) {
  return impl_->Allocate(bytes);
}
absl::Status CudaBackend::Free(DeviceAddress address) {
  return impl_->Free(address);
}

absl::StatusOr<EventHandle> CudaBackend::CreateEvent() {
  return impl_->CreateEvent();
}
absl::Status CudaBackend::DestroyEvent(EventHandle event) {
  return impl_->DestroyEvent(event);
}
absl::Status CudaBackend::RecordEvent(EventHandle event, Stream stream) {
  return impl_->RecordEvent(event, stream);
}
absl::StatusOr<bool> CudaBackend::QueryEvent(EventHandle event) {
  return impl_->QueryEvent(event);
}
absl::Status CudaBackend::StreamWaitEvent(Stream stream, EventHandle event) {
  return impl_->StreamWaitEvent(stream, event);
}
absl::Status CudaBackend::SynchronizeEvent(EventHandle event) {
  return impl_->SynchronizeEvent(event);
}

absl::StatusOr<bool> CudaBackend::IsCapturing(Stream stream) {
  if (!info().capabilities.graph_capture) return Backend::IsCapturing(stream);
  return impl_->IsCapturing(stream);
}
absl::StatusOr<CaptureMode> CudaBackend::ExchangeCaptureMode(CaptureMode mode) {
  if (!info().capabilities.graph_capture) {
    return Backend::ExchangeCaptureMode(mode);
  }
  return impl_->ExchangeCaptureMode(mode);
}

absl::StatusOr<DeviceAddress> CudaBackend::ReserveAddress(
    std::uint64_t bytes, std::uint64_t alignment) {
  if (!info().capabilities.virtual_memory)
    return Backend::ReserveAddress(bytes, alignment);
  return impl_->vmm().ReserveAddress(bytes, alignment);
}
absl::Status CudaBackend::FreeAddress(DeviceAddress address,
                                      std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory)
    return Backend::FreeAddress(address, bytes);
  return impl_->vmm().FreeAddress(address, bytes);
}
absl::StatusOr<PhysicalHandle> CudaBackend::CreatePhysical(
    std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory)
    return Backend::CreatePhysical(bytes);
  return impl_->vmm().CreatePhysical(bytes);
}
absl::Status CudaBackend::ReleasePhysical(PhysicalHandle handle) {
  if (!info().capabilities.virtual_memory)
    return Backend::ReleasePhysical(handle);
  return impl_->vmm().ReleasePhysical(handle);
}
absl::Status CudaBackend::Map(DeviceAddress address, std::uint64_t bytes,
                              PhysicalHandle handle) {
  if (!info().capabilities.virtual_memory)
    return Backend::Map(address, bytes, handle);
  return impl_->vmm().Map(address, bytes, handle);
}
absl::Status CudaBackend::Unmap(DeviceAddress address, std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory)
    return Backend::Unmap(address, bytes);
  return impl_->vmm().Unmap(address, bytes);
}
absl::Status CudaBackend::SetAccess(DeviceAddress address,
                                    std::uint64_t bytes) {
  if (!info().capabilities.virtual_memory)
    return Backend::SetAccess(address, bytes);
  return impl_->vmm().SetAccess(address, bytes);
}

absl::Status CudaBackend::CopyToHost(void* host, DeviceAddress source,
                                     std::uint64_t bytes) {
  if (!info().capabilities.host_copy) {
    return Backend::CopyToHost(host, source, bytes);
  }
  return impl_->HostCopy("cuMemcpyDtoH", source, host, bytes, [&] {
    return api().cuMemcpyDtoH(host, static_cast<CUdeviceptr>(source), bytes);
  });
}
absl::Status CudaBackend::CopyFromHost(DeviceAddress destination,
                                       const void* host, std::uint64_t bytes) {
  if (!info().capabilities.host_copy) {
    return Backend::CopyFromHost(destination, host, bytes);
  }
  return impl_->HostCopy("cuMemcpyHtoD", destination, host, bytes, [&] {
    return api().cuMemcpyHtoD(static_cast<CUdeviceptr>(destination), host,
                              bytes);
  });
}

}  // namespace gpualloc::cuda