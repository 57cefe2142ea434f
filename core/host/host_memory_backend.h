// SPDX-License-Identifier: Apache-2.0
// core/host/host_memory_backend.h: the device backend's pinned host memory
// seen as a Backend, so that the BFC allocator serves it unchanged
// (gpualloc/core/host_allocator.h).
//
// Allocate and Free are the device backend's HostAllocate and HostFree (the
// pointer is the address). Nothing else: no streams (the BFC allocator over it
// sees one stream, the host's; the pool's facade keeps the record-stream
// events itself, core/host/host_allocator.cc), no virtual memory, no
// stream-ordered pool, no graph capture, no copies.
//
// The DeviceInfo: the device's vendor, architecture and profile (the
// allocator tunes its block sizes by them), host pages as the granularity
// and alignment, regions recommended at kHostRegionBytes, and as the total
// the larger of the machine's physical memory and the limit asked for.
//
// Thread safety: every method may be called from any thread (one lock guards
// the bookkeeping; device calls are made without it).
#ifndef GPUALLOC_CORE_HOST_HOST_MEMORY_BACKEND_H_
#define GPUALLOC_CORE_HOST_HOST_MEMORY_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/layer.h"
#include "core/lock.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

class HostMemoryBackend final : public Backend {
 public:
  // `limit`: the pool's limit in bytes (the total is at least that).
  HostMemoryBackend(std::shared_ptr<Backend> device, std::uint64_t limit);

  const DeviceInfo& info() const override { return info_; }
  absl::StatusOr<std::uint64_t> FreeBytes() override;
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) override;
  absl::Status Free(DeviceAddress address) override;

  Backend& device() const { return *device_; }

 private:
  const std::shared_ptr<Backend> device_;
  const DeviceInfo info_;
  mutable Lock mu_;
  // Live regions and their sizes, for FreeBytes.
  absl::flat_hash_map<DeviceAddress, std::uint64_t> sizes_ ABSL_GUARDED_BY(mu_);
  std::uint64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_HOST_HOST_MEMORY_BACKEND_H_
