// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_share.cc: the HIP backend's sharing with other processes
// (IPC handles of plain allocations; physical memory as POSIX file
// descriptors) and page-locked host memory, and the probe that turns them on.
//
// ROCm 5.2's headers have every entry point used here (the shareable-handle
// calls marked beta) but no device attribute saying whether a device exports
// POSIX file descriptors (CUDA's HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)
// nor one for IPC (hipDeviceAttributeUnifiedAddressing is "CUDA only"): the
// capabilities follow the entry points the runtime has, and
// shareable_handles also virtual_memory.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/hip/hip_backend.h"
#include "backends/hip/hip_internal.h"

namespace gpualloc::hip {
namespace {

using internal::Hex;
using internal::ToAddress;
using internal::ToHandle;
using internal::ToPointer;

static_assert(sizeof(hipIpcMemHandle_t) == IpcHandle::kBytes,
              "IpcHandle carries a hipIpcMemHandle_t byte for byte");

// "the runtime lacks hipX, hipY" for the null members among `entries`.
std::string Lacks(
    std::initializer_list<std::pair<const char*, const void*>> entries) {
  std::vector<std::string> missing;
  for (const auto& [name, pointer] : entries) {
    if (pointer == nullptr) missing.push_back(name);
  }
  return absl::StrCat("the runtime lacks ", absl::StrJoin(missing, ", "));
}

template <typename Fn>
const void* P(Fn* fn) {
  return reinterpret_cast<const void*>(fn);
}

}  // namespace

void HipBackend::ProbeSharing() {
  const HipApi& api = *api_;
  Capabilities& c = info_.capabilities;
  const bool ipc =
      api.IpcGetMemHandle != nullptr && api.IpcOpenMemHandle != nullptr &&
      api.IpcCloseMemHandle != nullptr && api.MemGetAddressRange != nullptr;
#ifdef __linux__
  c.ipc_handles = ipc;
  notes_.push_back(
      ipc ? "ipc_handles on (hipIpcGetMemHandle; ROCm has no device attribute "
            "for it)"
          : absl::StrCat(
                "ipc_handles off: ",
                Lacks({{"hipIpcGetMemHandle", P(api.IpcGetMemHandle)},
                       {"hipIpcOpenMemHandle", P(api.IpcOpenMemHandle)},
                       {"hipIpcCloseMemHandle", P(api.IpcCloseMemHandle)},
                       {"hipMemGetAddressRange", P(api.MemGetAddressRange)}})));
#else
  c.ipc_handles = false;
  notes_.push_back("ipc_handles off: HIP IPC handles exist on Linux only");
#endif
  const bool share = api.MemRetainAllocationHandle != nullptr &&
                     api.MemExportToShareableHandle != nullptr &&
                     api.MemImportFromShareableHandle != nullptr;
  c.shareable_handles = c.virtual_memory && share;
  if (!c.virtual_memory) {
    notes_.push_back(
        "shareable_handles off: it needs virtual_memory, which is off");
  } else if (!share) {
    notes_.push_back(absl::StrCat(
        "shareable_handles off: ",
        Lacks(
            {{"hipMemRetainAllocationHandle", P(api.MemRetainAllocationHandle)},
             {"hipMemExportToShareableHandle",
              P(api.MemExportToShareableHandle)},
             {"hipMemImportFromShareableHandle",
              P(api.MemImportFromShareableHandle)}})));
  } else {
    notes_.push_back(absl::StrCat(
        "shareable_handles on (POSIX file descriptors, requested by "
        "CreatePhysical; no device attribute says whether the device exports "
        "them; descriptors imported ",
        runtime_version_ >= kImportTakesFdValueSince ? "by value"
                                                     : "by address",
        ")"));
  }
  c.host_memory = api.HostMalloc != nullptr && api.HostFree != nullptr;
  notes_.push_back(
      c.host_memory ? "host_memory on (hipHostMalloc, hipHostMallocPortable)"
                    : absl::StrCat("host_memory off: ",
                                   Lacks({{"hipHostMalloc", P(api.HostMalloc)},
                                          {"hipHostFree", P(api.HostFree)}})));
}

// --- IPC handles -------------------------------------------------------------

absl::StatusOr<IpcHandle> HipBackend::GetIpcHandle(DeviceAddress base) {
  if (!info_.capabilities.ipc_handles) return Backend::GetIpcHandle(base);
  if (absl::Status s = state_->books.CheckBlock("GetIpcHandle", base);
      !s.ok()) {
    return s;
  }
  return OnDevice<absl::StatusOr<IpcHandle>>(
      [&]() -> absl::StatusOr<IpcHandle> {
        hipIpcMemHandle_t handle{};
        const hipError_t e = api_->IpcGetMemHandle(&handle, ToPointer(base));
        if (e != hipSuccess) {
          return HipErrorStatus(*api_, e,
                                absl::StrCat("hipIpcGetMemHandle(", Hex(base),
                                             ") on device ", ordinal_));
        }
        IpcHandle out;
        std::memcpy(out.bytes, &handle, IpcHandle::kBytes);
        return out;
      });
}

absl::StatusOr<DeviceAddress> HipBackend::OpenIpcHandle(
    const IpcHandle& handle) {
  if (!info_.capabilities.ipc_handles) return Backend::OpenIpcHandle(handle);
  return OnDevice<absl::StatusOr<DeviceAddress>>(
      [&]() -> absl::StatusOr<DeviceAddress> {
        hipIpcMemHandle_t h{};
        std::memcpy(&h, handle.bytes, IpcHandle::kBytes);
        void* pointer = nullptr;
        const hipError_t e =
            api_->IpcOpenMemHandle(&pointer, h, hipIpcMemLazyEnablePeerAccess);
        if (e != hipSuccess) {
          absl::Status s = HipErrorStatus(
              *api_, e,
              absl::StrCat("hipIpcOpenMemHandle(lazy peer access) on device ",
                           ordinal_));
          if (e == hipErrorInvalidContext) {
            s = absl::Status(s.code(),
                             absl::StrCat(s.message(),
                                          " (a handle made by this process "
                                          "cannot be opened in it)"));
          }
          return s;
        }
        if (pointer == nullptr) {
          return absl::InternalError(
              absl::StrCat("hipIpcOpenMemHandle on device ", ordinal_,
                           " returned success with a null address"));
        }
        state_->books.AddOpened(ToAddress(pointer));
        return ToAddress(pointer);
      });
}

absl::Status HipBackend::CloseIpcHandle(DeviceAddress address) {
  if (!info_.capabilities.ipc_handles) return Backend::CloseIpcHandle(address);
  return state_->books.ReleaseOpened(address, [&] {
    return OnDevice<absl::Status>([&] {
      const hipError_t e = api_->IpcCloseMemHandle(ToPointer(address));
      if (e == hipSuccess) return absl::OkStatus();
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipIpcCloseMemHandle(", Hex(address),
                                         ") on device ", ordinal_));
    });
  });
}

// --- Address ranges ----------------------------------------------------------

absl::StatusOr<Backend::AddressRange> HipBackend::GetAddressRange(
    DeviceAddress address) {
  if (!info_.capabilities.ipc_handles) {
    return Backend::GetAddressRange(address);
  }
  return OnDevice<absl::StatusOr<AddressRange>>(
      [&]() -> absl::StatusOr<AddressRange> {
        hipDeviceptr_t base = nullptr;
        size_t size = 0;
        const hipError_t e =
            api_->MemGetAddressRange(&base, &size, ToPointer(address));
        if (e != hipSuccess) {
          return HipErrorStatus(
              *api_, e,
              absl::StrCat("hipMemGetAddressRange(", Hex(address),
                           ") on device ", ordinal_));
        }
        return AddressRange{ToAddress(base), static_cast<std::uint64_t>(size)};
      });
}

// --- Physical memory as POSIX file descriptors -------------------------------

absl::StatusOr<int> HipBackend::ExportMapping(DeviceAddress address) {
  if (!info_.capabilities.shareable_handles) {
    return Backend::ExportMapping(address);
  }
  core::LockGuard guard(&state_->mu);
  return ExportOnDevice(address);
}

absl::StatusOr<int> HipBackend::ExportOnDevice(DeviceAddress address) {
  const std::vector<common::VmmLedger::Mapping> at =
      state_->vmm->MappingsIn(address, state_->vmm->granularity());
  if (at.empty() || at.front().address != address) {
    return absl::InvalidArgumentError(
        absl::StrCat("HIP ExportMapping(", Hex(address),
                     "): not the start of a mapping Map made on device ",
                     ordinal_, ", or unmapped already"));
  }
  return OnDevice<absl::StatusOr<int>>([&]() -> absl::StatusOr<int> {
    // The mapping keeps the memory even when its handle was released:
    // retain a handle to export, release it again afterwards.
    hipMemGenericAllocationHandle_t handle = nullptr;
    hipError_t e = api_->MemRetainAllocationHandle(&handle, ToPointer(address));
    if (e != hipSuccess) {
      return HipErrorStatus(
          *api_, e,
          absl::StrCat("hipMemRetainAllocationHandle(", Hex(address),
                       ") on device ", ordinal_));
    }
    int fd = -1;
    e = api_->MemExportToShareableHandle(
        &fd, handle, hipMemHandleTypePosixFileDescriptor, 0);
    absl::Status status = absl::OkStatus();
    if (e != hipSuccess) {
      status = HipErrorStatus(
          *api_, e,
          absl::StrCat("hipMemExportToShareableHandle(", Hex(address),
                       ", POSIX file descriptor) on device ", ordinal_));
    }
    const hipError_t released = api_->MemRelease(handle);
    if (status.ok() && released != hipSuccess) {
      close(fd);  // the caller gets an error, not the descriptor
      status = HipErrorStatus(
          *api_, released,
          absl::StrCat("hipMemRelease of the handle retained at ", Hex(address),
                       " on device ", ordinal_));
    }
    if (!status.ok()) return status;
    return fd;
  });
}

absl::StatusOr<PhysicalHandle> HipBackend::ImportPhysical(int fd,
                                                          std::uint64_t bytes) {
  if (!info_.capabilities.shareable_handles) {
    return Backend::ImportPhysical(fd, bytes);
  }
  core::LockGuard guard(&state_->mu);
  if (absl::Status s = state_->vmm->CheckImport(bytes); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("HIP ", s.message()));
  }
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HIP ImportPhysical(fd ", fd, ", ", bytes,
                     " bytes): not a file descriptor"));
  }
  return OnDevice<absl::StatusOr<PhysicalHandle>>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<PhysicalHandle> {
        int descriptor = fd;
        void* os_handle =
            runtime_version_ >= kImportTakesFdValueSince
                ? reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd))
                : static_cast<void*>(&descriptor);
        hipMemGenericAllocationHandle_t handle = nullptr;
        const hipError_t e = api_->MemImportFromShareableHandle(
            &handle, os_handle, hipMemHandleTypePosixFileDescriptor);
        if (e != hipSuccess) {
          return HipErrorStatus(
              *api_, e,
              absl::StrCat("hipMemImportFromShareableHandle(fd ", fd, ", ",
                           bytes, " bytes) on device ", ordinal_));
        }
        if (handle == nullptr) {
          return absl::InternalError(absl::StrCat(
              "hipMemImportFromShareableHandle(fd ", fd, ") on device ",
              ordinal_, " returned a null handle"));
        }
        // Not checked against the device's size: the exporter's holds it.
        const PhysicalHandle h = ToAddress(handle);
        state_->vmm->AddHandle(h, bytes);
        return h;
      });
}

// --- Page-locked host memory
// ---------------------------------------------------

absl::StatusOr<void*> HipBackend::HostAllocate(std::uint64_t bytes) {
  if (!info_.capabilities.host_memory) return Backend::HostAllocate(bytes);
  if (bytes == 0)
    return absl::InvalidArgumentError("HIP HostAllocate(0 bytes)");
  return OnDevice<absl::StatusOr<void*>>([&]() -> absl::StatusOr<void*> {
    void* pointer = nullptr;
    const hipError_t e =
        api_->HostMalloc(&pointer, bytes, hipHostMallocPortable);
    if (e != hipSuccess) {
      return HipErrorStatus(
          *api_, e,
          absl::StrCat("hipHostMalloc(", bytes, " bytes, portable) on device ",
                       ordinal_));
    }
    if (pointer == nullptr) {
      return absl::InternalError(absl::StrCat(
          "hipHostMalloc(", bytes, " bytes) returned success and no memory"));
    }
    state_->books.AddHostBlock(pointer, bytes);
    return pointer;
  });
}

absl::Status HipBackend::HostFree(void* ptr) {
  if (!info_.capabilities.host_memory) return Backend::HostFree(ptr);
  return state_->books.ReleaseHostBlock(ptr, [&] {
    return OnDevice<absl::Status>([&] {
      const hipError_t e = api_->HostFree(ptr);
      if (e == hipSuccess) return absl::OkStatus();
      return HipErrorStatus(
          *api_, e,
          absl::StrFormat("hipHostFree(%p) on device %d", ptr, ordinal_));
    });
  });
}

}  // namespace gpualloc::hip
