// SPDX-License-Identifier: Apache-2.0
// backends/common/backend_calls.h: the Backend calls (gpualloc/backend.h)
// every vendor backend overrides, declared once. Inside a class derived from
// Backend:
//   GPUALLOC_BACKEND_CALLS_OVERRIDE
// info() is left to each backend (some answer it inline).
#ifndef GPUALLOC_BACKENDS_COMMON_BACKEND_CALLS_H_
#define GPUALLOC_BACKENDS_COMMON_BACKEND_CALLS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/layer.h"
#include "gpualloc/backend.h"

// clang-format off
#define GPUALLOC_BACKEND_CALLS_OVERRIDE                                        \
  absl::StatusOr<std::uint64_t> FreeBytes() override;                          \
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes) override;        \
  absl::Status Free(DeviceAddress address) override;                           \
  absl::StatusOr<EventHandle> CreateEvent() override;                          \
  absl::Status DestroyEvent(EventHandle event) override;                       \
  absl::Status RecordEvent(EventHandle event, Stream stream) override;         \
  absl::StatusOr<bool> QueryEvent(EventHandle event) override;                 \
  absl::Status StreamWaitEvent(Stream stream, EventHandle event) override;     \
  absl::Status SynchronizeEvent(EventHandle event) override;                   \
  absl::StatusOr<bool> IsCapturing(Stream stream) override;                    \
  absl::StatusOr<CaptureMode> ExchangeCaptureMode(CaptureMode mode) override;  \
  absl::Status ConfigurePool(const PoolOptions& options) override;             \
  absl::StatusOr<DeviceAddress> PoolAllocate(std::uint64_t bytes,              \
                                             Stream stream) override;          \
  absl::Status PoolFree(DeviceAddress address, Stream stream) override;        \
  absl::Status PoolTrim(std::uint64_t keep_bytes) override;                    \
  absl::StatusOr<PoolUsage> GetPoolUsage() override;                           \
  absl::StatusOr<DeviceAddress> ReserveAddress(                                \
      std::uint64_t bytes, std::uint64_t alignment) override;                  \
  absl::Status FreeAddress(DeviceAddress address,                              \
                           std::uint64_t bytes) override;                      \
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::uint64_t bytes) override; \
  absl::Status ReleasePhysical(PhysicalHandle handle) override;                \
  absl::Status Map(DeviceAddress address, std::uint64_t bytes,                 \
                   PhysicalHandle handle) override;                            \
  absl::Status Unmap(DeviceAddress address, std::uint64_t bytes) override;     \
  absl::Status SetAccess(DeviceAddress address, std::uint64_t bytes) override; \
  absl::Status CopyToHost(void* host, DeviceAddress source,                    \
                          std::uint64_t bytes) override;                       \
  absl::Status CopyFromHost(DeviceAddress destination, const void* host,       \
                            std::uint64_t bytes) override;
// clang-format on

#endif  // GPUALLOC_BACKENDS_COMMON_BACKEND_CALLS_H_
