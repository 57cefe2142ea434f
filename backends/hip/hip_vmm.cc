// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_vmm.cc: the HIP backend's virtual memory (hipMem*). The
// rules are checked by the shared ledger (backends/common/vmm_ledger.h)
// before any runtime call, and the ledger records what succeeded.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/hip/hip_backend.h"
#include "backends/hip/hip_internal.h"

namespace gpualloc::hip {
namespace {

using common::VmmLedger;
using internal::Hex;
using internal::ToAddress;
using internal::ToHandle;
using internal::ToPointer;

// A broken rule, as the ledger words it, said of HIP.
absl::Status Hip(const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("HIP ", status.message()));
}

}  // namespace

absl::StatusOr<DeviceAddress> HipBackend::ReserveAddress(
    std::uint64_t bytes, std::uint64_t alignment) {
  if (!info_.capabilities.virtual_memory) {
    return NotSupported("ReserveAddress", "virtual_memory");
  }
  core::LockGuard guard(&state_->mu);
  if (absl::StatusOr<std::uint64_t> s =
          state_->vmm->CheckReserve(bytes, alignment);
      !s.ok()) {
    return Hip(s.status());
  }
  return OnDevice<absl::StatusOr<DeviceAddress>>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<DeviceAddress> {
        void* pointer = nullptr;
        const hipError_t e =
            api_->MemAddressReserve(&pointer, bytes, alignment, nullptr, 0);
        const std::string call =
            absl::StrCat("hipMemAddressReserve(", bytes, ", ", alignment, ")");
        if (e != hipSuccess) return HipErrorStatus(*api_, e, call);
        if (pointer == nullptr) {
          return absl::ResourceExhaustedError(
              absl::StrCat(call, " returned success with a null address"));
        }
        state_->vmm->AddReservation(ToAddress(pointer), bytes);
        return ToAddress(pointer);
      });
}

absl::Status HipBackend::FreeAddress(DeviceAddress address,
                                     std::uint64_t bytes) {
  if (!info_.capabilities.virtual_memory) {
    return NotSupported("FreeAddress", "virtual_memory");
  }
  core::LockGuard guard(&state_->mu);
  if (absl::Status s = state_->vmm->CheckFreeAddress(address, bytes); !s.ok()) {
    return Hip(s);
  }
  return OnDevice<absl::Status>([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const hipError_t e = api_->MemAddressFree(ToPointer(address), bytes);
    if (e != hipSuccess) {
      return HipErrorStatus(
          *api_, e,
          absl::StrCat("hipMemAddressFree(", Hex(address), ", ", bytes, ")"));
    }
    state_->vmm->RemoveReservation(address);
    return absl::OkStatus();
  });
}

absl::StatusOr<PhysicalHandle> HipBackend::CreatePhysical(std::uint64_t bytes) {
  if (!info_.capabilities.virtual_memory) {
    return NotSupported("CreatePhysical", "virtual_memory");
  }
  core::LockGuard guard(&state_->mu);
  if (absl::Status s = state_->vmm->CheckCreate(bytes); !s.ok()) {
    return Hip(s);
  }
  if (bytes > info_.total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HIP CreatePhysical(", bytes, "): more than device ",
                     ordinal_, "'s ", info_.total_bytes, " bytes"));
  }
  return OnDevice<absl::StatusOr<PhysicalHandle>>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<PhysicalHandle> {
        HipAllocationProp prop(ordinal_, runtime_version_);
        // Without it hipMemExportToShareableHandle refuses the memory later.
        if (info_.capabilities.shareable_handles) {
          prop.RequestPosixFileDescriptor();
        }
        hipMemGenericAllocationHandle_t handle = nullptr;
        const hipError_t e = api_->MemCreate(&handle, bytes, prop.pointer(), 0);
        if (e != hipSuccess) {
          return HipErrorStatus(*api_, e,
                                absl::StrCat("hipMemCreate(", bytes, ")"));
        }
        if (handle == nullptr) {
          return absl::InternalError(
              absl::StrCat("hipMemCreate(", bytes, ") returned a null handle"));
        }
        const PhysicalHandle h = ToAddress(handle);
        state_->vmm->AddHandle(h, bytes);
        return h;
      });
}

absl::Status HipBackend::ReleasePhysical(PhysicalHandle handle) {
  if (!info_.capabilities.virtual_memory) {
    return NotSupported("ReleasePhysical", "virtual_memory");
  }
  core::LockGuard guard(&state_->mu);
  if (absl::Status s = state_->vmm->CheckRelease(handle); !s.ok()) {
    return Hip(s);
  }
  // As in CUDA, memory still mapped stays until its last mapping goes.
  return OnDevice<absl::Status>([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const hipError_t e = api_->MemRelease(ToHandle(handle));
    if (e != hipSuccess) return HipErrorStatus(*api_, e, "hipMemRelease");
    state_->vmm->RemoveHandle(handle);
    return absl::OkStatus();
  });
}

absl::Status HipBackend::Map(DeviceAddress address, std::uint64_t bytes,
                             PhysicalHandle handle) {
  if (!info_.capabilities.virtual_memory) {
    return NotSupported("Map", "virtual_memory");
  }
  core::LockGuard guard(&state_->mu);
  if (absl::Status s = state_->vmm->CheckMap(address, bytes, handle); !s.ok()) {
    return Hip(s);
  }
  return OnDevice<absl::Status>([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const hipError_t e =
        api_->MemMap(ToPointer(address), bytes, 0, ToHandle(handle), 0);
    if (e != hipSuccess) {
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipMemMap(", Hex(address), ", ",
                                         bytes, ", 0, ", Hex(handle), ")"));
    }
    state_->vmm->AddMapping(address, bytes, handle);
    return absl::OkStatus();
  });
}

absl::Status HipBackend::Unmap(DeviceAddress address, std::uint64_t bytes) {
  if (!info_.capabilities.virtual_memory) {
    return NotSupported("Unmap", "virtual_memory");
  }
  core::LockGuard guard(&state_->mu);
  absl::StatusOr<std::vector<VmmLedger::Mapping>> mappings =
      state_->vmm->CheckUnmap(address, bytes);
  if (!mappings.ok()) return Hip(mappings.status());
  return OnDevice<absl::Status>([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // One call per mapping: what every ROCm release accepts.
    for (const VmmLedger::Mapping& m : *mappings) {
      const hipError_t e = api_->MemUnmap(ToPointer(m.address), m.bytes);
      if (e != hipSuccess) {
        return HipErrorStatus(
            *api_, e,
            absl::StrCat("hipMemUnmap(", Hex(m.address), ", ", m.bytes, ")"));
      }
      state_->vmm->RemoveMapping(m.address);
    }
    return absl::OkStatus();
  });
}

absl::Status HipBackend::SetAccess(DeviceAddress address, std::uint64_t bytes) {
  if (!info_.capabilities.virtual_memory) {
    return NotSupported("SetAccess", "virtual_memory");
  }
  core::LockGuard guard(&state_->mu);
  if (absl::Status s = state_->vmm->CheckSetAccess(address, bytes); !s.ok()) {
    return Hip(s);
  }
  const std::vector<VmmLedger::Mapping> mappings =
      state_->vmm->MappingsIn(address, bytes);
  return OnDevice<absl::Status>([&] {
    hipMemAccessDesc access{};
    access.location.type = hipMemLocationTypeDevice;
    access.location.id = ordinal_;
    access.flags = hipMemAccessFlagsProtReadWrite;
    // Per mapping, clipped to the range.
    const DeviceAddress end = address + bytes;
    for (const VmmLedger::Mapping& m : mappings) {
      const DeviceAddress from = std::max(address, m.address);
      const DeviceAddress to = std::min(end, m.address + m.bytes);
      const hipError_t e =
          api_->MemSetAccess(ToPointer(from), to - from, &access, 1);
      if (e != hipSuccess) {
        return HipErrorStatus(
            *api_, e,
            absl::StrCat("hipMemSetAccess(", Hex(from), ", ", to - from, ")"));
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace gpualloc::hip
