// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_vmm.h: the CUDA backend's virtual memory (cuMemAddress*,
// cuMemCreate, cuMemMap, cuMemSetAccess and their inverses) and its physical
// memory as POSIX file descriptors (cuMemRetainAllocationHandle,
// cuMemExportToShareableHandle, cuMemImportFromShareableHandle). The rules are
// checked by the shared ledger (backends/common/vmm_ledger.h) before any
// driver call, and the ledger records what succeeded.
//
// Thread safety: all methods are thread-safe (one lock, held across check,
// call and record).
#ifndef GPUALLOC_BACKENDS_CUDA_CUDA_VMM_H_
#define GPUALLOC_BACKENDS_CUDA_CUDA_VMM_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/common/vmm_ledger.h"
#include "backends/cuda/cuda_driver.h"
#include "backends/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::cuda {

class CudaVmm {
 public:
  // Device `device` (ordinal `ordinal`, `total_bytes` of memory) in its
  // primary context `context`, at the device's minimum `granularity`. With
  // `shareable` (capabilities.shareable_handles), CreatePhysical asks for
  // memory that can be exported as a POSIX file descriptor.
  CudaVmm(std::shared_ptr<const CudaDriverApi> api, CUdevice device,
          CUcontext context, int ordinal, std::uint64_t total_bytes,
          std::uint64_t granularity, bool shareable)
      : api_(std::move(api)),
        device_(device),
        context_(context),
        ordinal_(ordinal),
        total_bytes_(total_bytes),
        shareable_(shareable),
        ledger_(granularity) {}

  absl::StatusOr<DeviceAddress> ReserveAddress(std::uint64_t bytes,
                                               std::uint64_t alignment);
  absl::Status FreeAddress(DeviceAddress address, std::uint64_t bytes);
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::uint64_t bytes);
  absl::Status ReleasePhysical(PhysicalHandle handle);
  absl::Status Map(DeviceAddress address, std::uint64_t bytes,
                   PhysicalHandle handle);
  // One cuMemUnmap per mapping in the range.
  absl::Status Unmap(DeviceAddress address, std::uint64_t bytes);
  absl::Status SetAccess(DeviceAddress address, std::uint64_t bytes);

  // Backend::ExportMapping / ImportPhysical (shareable only; the caller
  // checks). An imported handle is kept like a created one, without the
  // device-capacity check.
  absl::StatusOr<int> ExportMapping(DeviceAddress address);
  absl::StatusOr<PhysicalHandle> ImportPhysical(int fd, std::uint64_t bytes);

  // Unmaps, releases and frees whatever is still recorded (the backend's
  // destructor, with the context current; errors are ignored).
  void ReturnEverything();

 private:
  template <typename T, typename Body>
  T InContext(Body&& body) const;

  const std::shared_ptr<const CudaDriverApi> api_;
  const CUdevice device_;
  const CUcontext context_;
  const int ordinal_;
  const std::uint64_t total_bytes_;
  const bool shareable_;
  absl::Mutex mu_;
  common::VmmLedger ledger_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpualloc::cuda

#endif  // GPUALLOC_BACKENDS_CUDA_CUDA_VMM_H_
