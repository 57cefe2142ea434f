// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_share.cc: the CUDA backend's IPC handles of plain
// allocations (cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle)
// and page-locked host memory (cuMemHostAlloc, cuMemFreeHost). Mappings as
// POSIX file descriptors are in cuda_vmm.cc, with the rest of virtual memory.
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_internal.h"

namespace gpualloc::cuda {

using internal::Hex;

static_assert(sizeof(CUipcMemHandle) == IpcHandle::kBytes,
              "IpcHandle carries a CUipcMemHandle byte for byte");

absl::StatusOr<IpcHandle> CudaBackend::Impl::GetIpcHandle(DeviceAddress base) {
  if (absl::Status s = books_.CheckBlock("GetIpcHandle", base); !s.ok()) {
    return s;
  }
  return InContext<absl::StatusOr<IpcHandle>>(
      [&]() -> absl::StatusOr<IpcHandle> {
        CUipcMemHandle handle = {};
        const CUresult r =
            api_->cuIpcGetMemHandle(&handle, static_cast<CUdeviceptr>(base));
        if (r != CUDA_SUCCESS) {
          return CudaError(
              *api_, absl::StrCat("cuIpcGetMemHandle(", Hex(base), ")"), r);
        }
        IpcHandle out;
        std::memcpy(out.bytes, &handle, IpcHandle::kBytes);
        return out;
      });
}

absl::StatusOr<DeviceAddress> CudaBackend::Impl::OpenIpcHandle(
    const IpcHandle& handle) {
  return InContext<absl::StatusOr<DeviceAddress>>(
      [&]() -> absl::StatusOr<DeviceAddress> {
        CUipcMemHandle cu = {};
        std::memcpy(&cu, handle.bytes, IpcHandle::kBytes);
        CUdeviceptr ptr = 0;
        const CUresult r = api_->cuIpcOpenMemHandle(
            &ptr, cu, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r != CUDA_SUCCESS) {
          // The driver refuses a handle made in this process with an invalid
          // context; say so, since the code alone misleads.
          absl::Status s =
              CudaError(*api_, "cuIpcOpenMemHandle(lazy peer access)", r);
          if (r == CUDA_ERROR_INVALID_CONTEXT) {
            s = absl::Status(s.code(),
                             absl::StrCat(s.message(),
                                          " (a handle made by this process "
                                          "cannot be opened in it)"));
          }
          return s;
        }
        books_.AddOpened(ptr);
        return static_cast<DeviceAddress>(ptr);
      });
}

absl::Status CudaBackend::Impl::CloseIpcHandle(DeviceAddress address) {
  return books_.ReleaseOpened(address, [&] {
    return InContext<absl::Status>([&] {
      return CudaError(
          *api_, absl::StrCat("cuIpcCloseMemHandle(", Hex(address), ")"),
          api_->cuIpcCloseMemHandle(static_cast<CUdeviceptr>(address)));
    });
  });
}

absl::StatusOr<void*> CudaBackend::Impl::HostAllocate(std::uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("HostAllocate(0 bytes)");
  return InContext<absl::StatusOr<void*>>([&]() -> absl::StatusOr<void*> {
    void* pointer = nullptr;
    const CUresult r =
        api_->cuMemHostAlloc(&pointer, bytes, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS) {
      return CudaError(
          *api_,
          absl::StrCat("cuMemHostAlloc(", bytes, " bytes, portable) on device ",
                       info_.ordinal),
          r);
    }
    if (pointer == nullptr) {
      return absl::InternalError(absl::StrCat(
          "cuMemHostAlloc(", bytes, " bytes) returned success and no memory"));
    }
    books_.AddHostBlock(pointer, bytes);
    return pointer;
  });
}

absl::Status CudaBackend::Impl::HostFree(void* pointer) {
  return books_.ReleaseHostBlock(pointer, [&] {
    return InContext<absl::Status>([&] {
      return CudaError(*api_,
                       absl::StrFormat("cuMemFreeHost(%p) on device %d",
                                       pointer, info_.ordinal),
                       api_->cuMemFreeHost(pointer));
    });
  });
}

// --- Address ranges
// ------------------------------------------------------------

absl::StatusOr<Backend::AddressRange> CudaBackend::Impl::GetAddressRange(
    DeviceAddress address) {
  return InContext<absl::StatusOr<Backend::AddressRange>>(
      [&]() -> absl::StatusOr<Backend::AddressRange> {
        CUdeviceptr base = 0;
        size_t size = 0;
        const CUresult r = api_->cuMemGetAddressRange(
            &base, &size, static_cast<CUdeviceptr>(address));
        if (r != CUDA_SUCCESS) {
          return CudaError(
              *api_, absl::StrCat("cuMemGetAddressRange(", Hex(address), ")"),
              r);
        }
        return Backend::AddressRange{static_cast<DeviceAddress>(base),
                                     static_cast<std::uint64_t>(size)};
      });
}

// --- CudaBackend's calls
// ------------------------------------------------------

absl::StatusOr<IpcHandle> CudaBackend::GetIpcHandle(DeviceAddress base) {
  if (!info().capabilities.ipc_handles) return Backend::GetIpcHandle(base);
  return impl_->GetIpcHandle(base);
}
absl::StatusOr<DeviceAddress> CudaBackend::OpenIpcHandle(
    const IpcHandle& handle) {
  if (!info().capabilities.ipc_handles) return Backend::OpenIpcHandle(handle);
  return impl_->OpenIpcHandle(handle);
}
absl::Status CudaBackend::CloseIpcHandle(DeviceAddress address) {
  if (!info().capabilities.ipc_handles) {
    return Backend::CloseIpcHandle(address);
  }
  return impl_->CloseIpcHandle(address);
}
absl::StatusOr<int> CudaBackend::ExportMapping(DeviceAddress address) {
  if (!info().capabilities.shareable_handles) {
    return Backend::ExportMapping(address);
  }
  return impl_->vmm().ExportMapping(address);
}
absl::StatusOr<PhysicalHandle> CudaBackend::ImportPhysical(
    int fd, std::uint64_t bytes) {
  if (!info().capabilities.shareable_handles) {
    return Backend::ImportPhysical(fd, bytes);
  }
  return impl_->vmm().ImportPhysical(fd, bytes);
}
absl::StatusOr<void*> CudaBackend::HostAllocate(std::uint64_t bytes) {
  if (!info().capabilities.host_memory) return Backend::HostAllocate(bytes);
  return impl_->HostAllocate(bytes);
}
absl::Status CudaBackend::HostFree(void* ptr) {
  if (!info().capabilities.host_memory) return Backend::HostFree(ptr);
  return impl_->HostFree(ptr);
}
absl::StatusOr<Backend::AddressRange> CudaBackend::GetAddressRange(
    DeviceAddress address) {
  if (!info().capabilities.ipc_handles) {
    return Backend::GetAddressRange(address);
  }
  return impl_->GetAddressRange(address);
}
const std::vector<std::string>& CudaBackend::notes() const {
  return impl_->notes();
}

}  // namespace gpualloc::cuda
