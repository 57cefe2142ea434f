// SPDX-License-Identifier: Apache-2.0
// backends/hip/hip_pool.cc: the HIP backend's stream-ordered pool
// (hipMemPool*, hipMallocFromPoolAsync, hipFreeAsync), its own pool rather
// than the device's default one.
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/hip/hip_backend.h"
#include "backends/hip/hip_internal.h"
#include "core/lock.h"
#include "core/status_macros.h"

namespace gpualloc::hip {

using internal::Hex;
using internal::ToAddress;
using internal::ToPointer;
using internal::ToStream;

absl::Status HipBackend::ConfigurePool(const PoolOptions& options) {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("ConfigurePool", "stream_ordered_pools");
  }
  return OnDevice<absl::Status>([&] { return ConfigurePoolOnDevice(options); });
}

absl::Status HipBackend::ConfigurePoolOnDevice(const PoolOptions& options) {
  core::LockGuard guard(&state_->mu);
  hipError_t e = hipSuccess;
  if (state_->pool == nullptr) {
    // Our own pool, so that its attributes and trimming do not touch the
    // device's default pool other code in the process may use.
    hipMemPoolProps props{};
    props.allocType = hipMemAllocationTypePinned;
    props.location.type = hipMemLocationTypeDevice;
    props.location.id = ordinal_;
    hipMemPool_t pool = nullptr;
    e = api_->MemPoolCreate(&pool, &props);
    if (e != hipSuccess) return HipErrorStatus(*api_, e, "hipMemPoolCreate");
    state_->pool = pool;
  }
  std::uint64_t threshold = options.release_threshold;
  e = api_->MemPoolSetAttribute(state_->pool, hipMemPoolAttrReleaseThreshold,
                                &threshold);
  if (e != hipSuccess) {
    return HipErrorStatus(*api_, e, "hipMemPoolSetAttribute(ReleaseThreshold)");
  }
  const std::pair<hipMemPoolAttr, bool> reuse[] = {
      {hipMemPoolReuseFollowEventDependencies,
       options.reuse.follow_event_dependencies},
      {hipMemPoolReuseAllowOpportunistic, options.reuse.opportunistic},
      {hipMemPoolReuseAllowInternalDependencies,
       options.reuse.internal_dependencies},
  };
  for (const auto& [attribute, on] : reuse) {
    int value = on ? 1 : 0;
    e = api_->MemPoolSetAttribute(state_->pool, attribute, &value);
    if (e != hipSuccess) {
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipMemPoolSetAttribute(",
                                         static_cast<int>(attribute), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceAddress> HipBackend::PoolAllocate(std::uint64_t bytes,
                                                       Stream stream) {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("PoolAllocate", "stream_ordered_pools");
  }
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        "HIP PoolAllocate(0): a pool allocation needs at least one byte");
  }
  hipMemPool_t pool = nullptr;
  {
    core::LockGuard guard(&state_->mu);
    pool = state_->pool;
  }
  if (pool == nullptr) {
    return absl::FailedPreconditionError(
        "HIP PoolAllocate before ConfigurePool: configure the pool first");
  }
  if (bytes > info_.total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HIP PoolAllocate(", bytes, "): more than device ",
                     ordinal_, "'s ", info_.total_bytes, " bytes"));
  }
  return OnDevice<absl::StatusOr<DeviceAddress>>(
      [&] { return PoolAllocateOnDevice(bytes, pool, stream); });
}

absl::StatusOr<DeviceAddress> HipBackend::PoolAllocateOnDevice(
    std::uint64_t bytes, hipMemPool_t pool, Stream stream) {
  void* pointer = nullptr;
  const hipError_t e =
      api_->MallocFromPoolAsync(&pointer, bytes, pool, ToStream(stream));
  if (e != hipSuccess) {
    absl::Status s = HipErrorStatus(
        *api_, e, absl::StrCat("hipMallocFromPoolAsync(", bytes, ")"));
    if (absl::IsResourceExhausted(s)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("HIP device ", ordinal_, " pool is out of memory for ",
                       bytes, " bytes: ", s.message()));
    }
    return s;
  }
  if (pointer == nullptr) {
    // ROCm before 6.0 says out of memory this way.
    return absl::ResourceExhaustedError(absl::StrCat(
        "HIP device ", ordinal_, " pool is out of memory for ", bytes,
        " bytes: hipMallocFromPoolAsync returned success with a null pointer "
        "(runtime ",
        HipVersionText(runtime_version_), ")"));
  }
  state_->books.AddPoolBlock(ToAddress(pointer));
  return ToAddress(pointer);
}

absl::Status HipBackend::PoolFree(DeviceAddress address, Stream stream) {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("PoolFree", "stream_ordered_pools");
  }
  return state_->books.ReleasePoolBlock(address, [&] {
    // A null stream is the current device's: this device's.
    return OnDevice<absl::Status>([&] {
      const hipError_t e =
          api_->FreeAsync(ToPointer(address), ToStream(stream));
      if (e == hipSuccess) return absl::OkStatus();
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipFreeAsync(", Hex(address),
                                         ", stream ", Hex(stream.handle), ")"));
    });
  });
}

absl::Status HipBackend::PoolTrim(std::uint64_t keep_bytes) {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("PoolTrim", "stream_ordered_pools");
  }
  return OnDevice<absl::Status>([&] {
    core::LockGuard guard(&state_->mu);
    if (state_->pool == nullptr) return absl::OkStatus();  // nothing held
    const hipError_t e = api_->MemPoolTrimTo(state_->pool, keep_bytes);
    if (e != hipSuccess) return HipErrorStatus(*api_, e, "hipMemPoolTrimTo");
    return absl::OkStatus();
  });
}

absl::StatusOr<PoolUsage> HipBackend::GetPoolUsage() {
  if (!info_.capabilities.stream_ordered_pools) {
    return NotSupported("GetPoolUsage", "stream_ordered_pools");
  }
  return OnDevice<absl::StatusOr<PoolUsage>>(
      [&] { return PoolUsageOnDevice(); });
}

absl::StatusOr<PoolUsage> HipBackend::PoolUsageOnDevice() {
  core::LockGuard guard(&state_->mu);
  PoolUsage usage;
  if (state_->pool == nullptr) return usage;
  const std::pair<hipMemPoolAttr, std::uint64_t*> attributes[] = {
      {hipMemPoolAttrReservedMemCurrent, &usage.reserved},
      {hipMemPoolAttrUsedMemCurrent, &usage.used},
      {hipMemPoolAttrReservedMemHigh, &usage.peak_reserved},
      {hipMemPoolAttrUsedMemHigh, &usage.peak_used},
  };
  for (const auto& [attribute, out] : attributes) {
    std::uint64_t value = 0;
    const hipError_t e =
        api_->MemPoolGetAttribute(state_->pool, attribute, &value);
    if (e != hipSuccess) {
      return HipErrorStatus(*api_, e,
                            absl::StrCat("hipMemPoolGetAttribute(",
                                         static_cast<int>(attribute), ")"));
    }
    *out = value;
  }
  return usage;
}

}  // namespace gpualloc::hip