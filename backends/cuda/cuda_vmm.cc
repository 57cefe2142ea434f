// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_vmm.cc: the CUDA backend's virtual memory.
#include "backends/cuda/cuda_vmm.h"

#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_internal.h"
#include "core/status_macros.h"

namespace gpualloc::cuda {

using common::VmmLedger;
using internal::Explain;
using internal::Hex;
using internal::PinnedOn;
using internal::TooBig;

template <typename T, typename Body>
T CudaVmm::InContext(Body&& body) const {
  return internal::InContext<T>(*api_, context_, ordinal_,
                                std::forward<Body>(body));
}

void CudaVmm::ReturnEverything() {
  absl::MutexLock lock(&mu_);
  for (const VmmLedger::Mapping& m : ledger_.mappings()) {
    api_->cuMemUnmap(static_cast<CUdeviceptr>(m.address), m.bytes);
  }
  for (PhysicalHandle h : ledger_.handles()) {
    api_->cuMemRelease(static_cast<CUmemGenericAllocationHandle>(h));
  }
  for (const VmmLedger::Reservation& r : ledger_.reservations()) {
    api_->cuMemAddressFree(static_cast<CUdeviceptr>(r.address), r.bytes);
  }
}

absl::StatusOr<DeviceAddress> CudaVmm::ReserveAddress(std::uint64_t bytes,
                                                      std::uint64_t alignment) {
  absl::MutexLock lock(&mu_);
  GPUALLOC_ASSIGN_OR_RETURN(const std::uint64_t align,
                            ledger_.CheckReserve(bytes, alignment));
  return InContext<absl::StatusOr<DeviceAddress>>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<DeviceAddress> {
        CUdeviceptr ptr = 0;
        const CUresult r = api_->cuMemAddressReserve(&ptr, bytes, align, 0, 0);
        if (r != CUDA_SUCCESS) {
          return CudaError(*api_,
                           absl::StrCat("cuMemAddressReserve(", bytes,
                                        " bytes, alignment ", align, ")"),
                           r);
        }
        ledger_.AddReservation(ptr, bytes);
        return static_cast<DeviceAddress>(ptr);
      });
}

absl::Status CudaVmm::FreeAddress(DeviceAddress address, std::uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(ledger_.CheckFreeAddress(address, bytes));
  return InContext<absl::Status>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        const CUresult r =
            api_->cuMemAddressFree(static_cast<CUdeviceptr>(address), bytes);
        if (r != CUDA_SUCCESS) {
          return CudaError(*api_,
                           absl::StrCat("cuMemAddressFree(", Hex(address), ", ",
                                        bytes, " bytes)"),
                           r);
        }
        ledger_.RemoveReservation(address);
        return absl::OkStatus();
      });
}

absl::StatusOr<PhysicalHandle> CudaVmm::CreatePhysical(std::uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(ledger_.CheckCreate(bytes));
  if (bytes > total_bytes_)
    return TooBig("CreatePhysical", bytes, total_bytes_);
  return InContext<absl::StatusOr<PhysicalHandle>>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<PhysicalHandle> {
        CUmemAllocationProp prop = PinnedOn(device_);
        // Without it cuMemExportToShareableHandle refuses the memory later.
        if (shareable_) {
          prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        CUmemGenericAllocationHandle handle = 0;
        const CUresult r = api_->cuMemCreate(&handle, bytes, &prop, 0);
        if (r != CUDA_SUCCESS) {
          return Explain(
              *api_,
              CudaError(*api_, absl::StrCat("cuMemCreate(", bytes, " bytes)"),
                        r));
        }
        ledger_.AddHandle(handle, bytes);
        return static_cast<PhysicalHandle>(handle);
      });
}

absl::Status CudaVmm::ReleasePhysical(PhysicalHandle handle) {
  absl::MutexLock lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(ledger_.CheckRelease(handle));
  return InContext<absl::Status>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        const CUresult r = api_->cuMemRelease(
            static_cast<CUmemGenericAllocationHandle>(handle));
        if (r != CUDA_SUCCESS) {
          return CudaError(*api_,
                           absl::StrCat("cuMemRelease(", Hex(handle), ")"), r);
        }
        ledger_.RemoveHandle(handle);
        return absl::OkStatus();
      });
}

absl::Status CudaVmm::Map(DeviceAddress address, std::uint64_t bytes,
                          PhysicalHandle handle) {
  absl::MutexLock lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(ledger_.CheckMap(address, bytes, handle));
  return InContext<absl::Status>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        const CUresult r = api_->cuMemMap(
            static_cast<CUdeviceptr>(address), bytes, 0,
            static_cast<CUmemGenericAllocationHandle>(handle), 0);
        if (r != CUDA_SUCCESS) {
          return Explain(
              *api_,
              CudaError(*api_,
                        absl::StrCat("cuMemMap(", Hex(address), ", ", bytes,
                                     " bytes, handle ", Hex(handle), ")"),
                        r));
        }
        ledger_.AddMapping(address, bytes, handle);
        return absl::OkStatus();
      });
}

absl::Status CudaVmm::Unmap(DeviceAddress address, std::uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  GPUALLOC_ASSIGN_OR_RETURN(const std::vector<VmmLedger::Mapping> mappings,
                            ledger_.CheckUnmap(address, bytes));
  return InContext<absl::Status>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        // One call per mapping, as cuMemUnmap's contract is stated per
        // mapping. A failure leaves the mappings before it unmapped (and
        // recorded so).
        for (const VmmLedger::Mapping& m : mappings) {
          const CUresult r =
              api_->cuMemUnmap(static_cast<CUdeviceptr>(m.address), m.bytes);
          if (r != CUDA_SUCCESS) {
            return CudaError(*api_,
                             absl::StrCat("cuMemUnmap(", Hex(m.address), ", ",
                                          m.bytes, " bytes)"),
                             r);
          }
          ledger_.RemoveMapping(m.address);
        }
        return absl::OkStatus();
      });
}

absl::Status CudaVmm::SetAccess(DeviceAddress address, std::uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(ledger_.CheckSetAccess(address, bytes));
  return InContext<absl::Status>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        CUmemAccessDesc access = {};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = device_;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        const CUresult r = api_->cuMemSetAccess(
            static_cast<CUdeviceptr>(address), bytes, &access, 1);
        return CudaError(*api_,
                         absl::StrCat("cuMemSetAccess(", Hex(address), ", ",
                                      bytes, " bytes, read-write)"),
                         r);
      });
}

absl::StatusOr<int> CudaVmm::ExportMapping(DeviceAddress address) {
  absl::MutexLock lock(&mu_);
  const std::vector<VmmLedger::Mapping> at =
      ledger_.MappingsIn(address, ledger_.granularity());
  if (at.empty() || at.front().address != address) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExportMapping(", Hex(address),
                     "): not the start of a mapping Map made on device ",
                     ordinal_, ", or unmapped already"));
  }
  return InContext<absl::StatusOr<int>>([&]() -> absl::StatusOr<int> {
    // The handle may have been released already: the mapping keeps the
    // memory, and retaining it gives a handle to export (released again
    // below).
    CUmemGenericAllocationHandle handle = 0;
    CUresult r = api_->cuMemRetainAllocationHandle(
        &handle, reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)));
    if (r != CUDA_SUCCESS) {
      return CudaError(
          *api_,
          absl::StrCat("cuMemRetainAllocationHandle(", Hex(address), ")"), r);
    }
    int fd = -1;
    r = api_->cuMemExportToShareableHandle(
        &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    absl::Status status =
        CudaError(*api_,
                  absl::StrCat("cuMemExportToShareableHandle(", Hex(address),
                               ", POSIX file descriptor)"),
                  r);
    const CUresult released = api_->cuMemRelease(handle);
    if (status.ok() && released != CUDA_SUCCESS) {
      close(fd);  // the caller gets an error, not the descriptor
      status =
          CudaError(*api_,
                    absl::StrCat("cuMemRelease(", Hex(handle),
                                 ") of the handle retained at ", Hex(address)),
                    released);
    }
    if (!status.ok()) return status;
    return fd;
  });
}

absl::StatusOr<PhysicalHandle> CudaVmm::ImportPhysical(int fd,
                                                       std::uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(ledger_.CheckImport(bytes));
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportPhysical(fd ", fd, ", ", bytes,
                     " bytes): not a file descriptor"));
  }
  return InContext<absl::StatusOr<PhysicalHandle>>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<PhysicalHandle> {
        CUmemGenericAllocationHandle handle = 0;
        const CUresult r = api_->cuMemImportFromShareableHandle(
            &handle, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS) {
          return CudaError(*api_,
                           absl::StrCat("cuMemImportFromShareableHandle(fd ",
                                        fd, ", ", bytes, " bytes)"),
                           r);
        }
        // Not checked against total_bytes_: the exporter's device holds it.
        ledger_.AddHandle(handle, bytes);
        return static_cast<PhysicalHandle>(handle);
      });
}

}  // namespace gpualloc::cuda
