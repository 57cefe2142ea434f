// SPDX-License-Identifier: Apache-2.0
// backends/cuda/cuda_pool.cc: the CUDA backend's stream-ordered pool
// (cuMemPool*, cuMemAllocFromPoolAsync, cuMemFreeAsync): its own pool, made on
// first use, rather than the device's default one.
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_internal.h"
#include "core/status_macros.h"

namespace gpualloc::cuda {

using internal::Hex;
using internal::ToCuStream;

absl::StatusOr<CUmemoryPool> CudaBackend::Impl::Pool() {
  absl::MutexLock lock(&mu_);
  if (pool_ != nullptr) return pool_;
  return InContext<absl::StatusOr<CUmemoryPool>>(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<CUmemoryPool> {
        CUmemPoolProps props = {};
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = device_;
        CUmemoryPool pool = nullptr;
        const CUresult r = api_->cuMemPoolCreate(&pool, &props);
        if (r != CUDA_SUCCESS) return CudaError(*api_, "cuMemPoolCreate", r);
        pool_ = pool;
        return pool_;
      });
}

absl::Status CudaBackend::Impl::ConfigurePool(const PoolOptions& options) {
  GPUALLOC_ASSIGN_OR_RETURN(const CUmemoryPool pool, Pool());
  cuuint64_t threshold = options.release_threshold;
  CUresult r = api_->cuMemPoolSetAttribute(
      pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
  if (r != CUDA_SUCCESS) {
    return CudaError(*api_,
                     absl::StrCat("cuMemPoolSetAttribute(RELEASE_THRESHOLD, ",
                                  threshold, ")"),
                     r);
  }
  const struct {
    CUmemPool_attribute attribute;
    bool on;
    absl::string_view name;
  } reuse[] = {
      {CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
       options.reuse.follow_event_dependencies,
       "REUSE_FOLLOW_EVENT_DEPENDENCIES"},
      {CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, options.reuse.opportunistic,
       "REUSE_ALLOW_OPPORTUNISTIC"},
      {CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
       options.reuse.internal_dependencies,
       "REUSE_ALLOW_INTERNAL_DEPENDENCIES"},
  };
  for (const auto& rule : reuse) {
    int value = rule.on ? 1 : 0;
    r = api_->cuMemPoolSetAttribute(pool, rule.attribute, &value);
    if (r != CUDA_SUCCESS) {
      return CudaError(
          *api_,
          absl::StrCat("cuMemPoolSetAttribute(", rule.name, ", ", value, ")"),
          r);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceAddress> CudaBackend::Impl::PoolAllocate(
    std::uint64_t bytes, Stream stream) {
  if (bytes == 0) return absl::InvalidArgumentError("PoolAllocate(0 bytes)");
  if (bytes > info_.total_bytes) return TooBig("PoolAllocate", bytes);
  GPUALLOC_ASSIGN_OR_RETURN(const CUmemoryPool pool, Pool());
  return InContext<absl::StatusOr<DeviceAddress>>(
      [&]() -> absl::StatusOr<DeviceAddress> {
        CUdeviceptr ptr = 0;
        const CUresult r = api_->cuMemAllocFromPoolAsync(&ptr, bytes, pool,
                                                         ToCuStream(stream));
        if (r != CUDA_SUCCESS) {
          return Explain(CudaError(
              *api_,
              absl::StrCat("cuMemAllocFromPoolAsync(", bytes, " bytes, stream ",
                           Hex(stream.handle), ")"),
              r));
        }
        books_.AddPoolBlock(ptr);
        return static_cast<DeviceAddress>(ptr);
      });
}

absl::Status CudaBackend::Impl::PoolFree(DeviceAddress address, Stream stream) {
  return books_.ReleasePoolBlock(address, [&] {
    return InContext<absl::Status>([&] {
      return CudaError(*api_,
                       absl::StrCat("cuMemFreeAsync(", Hex(address),
                                    ", stream ", Hex(stream.handle), ")"),
                       api_->cuMemFreeAsync(static_cast<CUdeviceptr>(address),
                                            ToCuStream(stream)));
    });
  });
}

absl::Status CudaBackend::Impl::PoolTrim(std::uint64_t keep_bytes) {
  GPUALLOC_ASSIGN_OR_RETURN(const CUmemoryPool pool, Pool());
  return InContext<absl::Status>([&]() -> absl::Status {
    return CudaError(*api_,
                     absl::StrCat("cuMemPoolTrimTo(", keep_bytes, " bytes)"),
                     api_->cuMemPoolTrimTo(pool, keep_bytes));
  });
}

absl::StatusOr<PoolUsage> CudaBackend::Impl::GetPoolUsage() {
  GPUALLOC_ASSIGN_OR_RETURN(const CUmemoryPool pool, Pool());
  PoolUsage usage;
  const struct {
    CUmemPool_attribute attribute;
    std::uint64_t* value;
    absl::string_view name;
  } fields[] = {
      {CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &usage.reserved,
       "RESERVED_MEM_CURRENT"},
      {CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &usage.used, "USED_MEM_CURRENT"},
      {CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &usage.peak_reserved,
       "RESERVED_MEM_HIGH"},
      {CU_MEMPOOL_ATTR_USED_MEM_HIGH, &usage.peak_used, "USED_MEM_HIGH"},
  };
  for (const auto& f : fields) {
    cuuint64_t value = 0;
    const CUresult r = api_->cuMemPoolGetAttribute(pool, f.attribute, &value);
    if (r != CUDA_SUCCESS) {
      return CudaError(*api_,
                       absl::StrCat("cuMemPoolGetAttribute(", f.name, ")"), r);
    }
    *f.value = value;
  }
  return usage;
}

absl::Status CudaBackend::ConfigurePool(const PoolOptions& options) {
  if (!info().capabilities.stream_ordered_pools)
    return Backend::ConfigurePool(options);
  return impl_->ConfigurePool(options);
}
absl::StatusOr<DeviceAddress> CudaBackend::PoolAllocate(std::uint64_t bytes,
                                                        Stream stream) {
  if (!info().capabilities.stream_ordered_pools)
    return Backend::PoolAllocate(bytes, stream);
  return impl_->PoolAllocate(bytes, stream);
}
absl::Status CudaBackend::PoolFree(DeviceAddress address, Stream stream) {
  if (!info().capabilities.stream_ordered_pools)
    return Backend::PoolFree(address, stream);
  return impl_->PoolFree(address, stream);
}
absl::Status CudaBackend::PoolTrim(std::uint64_t keep_bytes) {
  if (!info().capabilities.stream_ordered_pools)
    return Backend::PoolTrim(keep_bytes);
  return impl_->PoolTrim(keep_bytes);
}
absl::StatusOr<PoolUsage> CudaBackend::GetPoolUsage() {
  if (!info().capabilities.stream_ordered_pools) return Backend::GetPoolUsage();
  return impl_->GetPoolUsage();
}

}  // namespace gpualloc::cuda
