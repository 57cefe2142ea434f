// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_allocator_conformance_test.cc: the allocator
// conformance suite (tests/core/allocator_conformance.h) over every mode on
// the CUDA backend: over the fake driver, and on the real device (skipped
// with the reason when libcuda.so.1 or a device is missing).
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/backends/cuda_fake_driver.h"
#include "tests/core/allocator_conformance.h"
#include "tests/core/allocator_modes.h"

namespace gpualloc::testing {
namespace {

using cuda::CudaBackend;
using cuda::CudaDriverApi;
using cuda::testing::FakeCudaDriver;
using cuda::testing::FakeCudaOptions;

absl::StatusOr<std::shared_ptr<Backend>> Over(
    absl::StatusOr<std::shared_ptr<const CudaDriverApi>> api) {
  if (!api.ok()) return api.status();
  absl::StatusOr<std::shared_ptr<CudaBackend>> backend =
      CudaBackend::Create(*std::move(api), 0);
  if (!backend.ok()) return backend.status();
  return std::shared_ptr<Backend>(*std::move(backend));
}

// The pool's cache of freed blocks (0 without a pool).
std::uint64_t PoolCache(Backend& backend) {
  if (!backend.info().capabilities.stream_ordered_pools) return 0;
  absl::StatusOr<PoolUsage> usage = backend.GetPoolUsage();
  return usage.ok() ? usage->reserved - usage->used : 0;
}

// The driver call that SimOp `op` stands for.
const char* DriverCall(SimOp op) {
  switch (op) {
    case SimOp::kAllocate:
      return "cuMemAlloc";
    case SimOp::kPoolAllocate:
      return "cuMemAllocFromPoolAsync";
    case SimOp::kCreatePhysical:
      return "cuMemCreate";
    case SimOp::kRecordEvent:
      return "cuEventRecord";
    default:
      return "unknown";
  }
}

// An H100 of `total_bytes` over the fake driver, with a granularity of
// 64 KiB.
AllocatorDevice FakeH100() {
  return AllocatorDevice{
      "cuda_fake_h100",
      [](std::uint64_t total_bytes, bool) -> absl::StatusOr<MadeDevice> {
        FakeCudaOptions o;
        o.name = "NVIDIA H100 80GB HBM3";
        o.total_bytes = total_bytes;
        // The fake rounds plain allocations up to the minimum granularity
        // and pool blocks to the recommended one: at 2 MiB, the suite's 1023
        // small blocks in the platform and async modes would not fit in the
        // device's 256 MiB.
        o.min_granularity = std::uint64_t{64} << 10;
        o.recommended_granularity = std::uint64_t{64} << 10;
        std::shared_ptr<FakeCudaDriver> fake = FakeCudaDriver::Create(o);
        absl::StatusOr<std::shared_ptr<Backend>> backend = Over(fake->Api());
        if (!backend.ok()) return backend.status();
        const std::shared_ptr<Backend> made = *std::move(backend);
        return MadeDevice{
            made,
            [fake](SimOp op, bool out_of_memory) {
              fake->FailNext(DriverCall(op), out_of_memory
                                                 ? CUDA_ERROR_OUT_OF_MEMORY
                                                 : CUDA_ERROR_UNKNOWN);
            },
            [fake, made] { return fake->used_bytes() - PoolCache(*made); }};
      }};
}

AllocatorDevice RealDevice() {
  return AllocatorDevice{
      "cuda_device0",
      [](std::uint64_t, bool) -> absl::StatusOr<MadeDevice> {
        absl::StatusOr<std::shared_ptr<Backend>> backend =
            Over(cuda::SharedCudaDriver());
        if (!backend.ok()) return backend.status();
        return MadeDevice{*std::move(backend), nullptr, nullptr};
      },
      /*any_stream=*/false};
}

INSTANTIATE_TEST_SUITE_P(CudaFakeDriver, AllocatorConformanceTest,
                         ::testing::Combine(::testing::Values(FakeH100()),
                                            ::testing::ValuesIn(kAllModes)),
                         AllocatorConformanceName);

INSTANTIATE_TEST_SUITE_P(CudaDevice, AllocatorConformanceTest,
                         ::testing::Combine(::testing::Values(RealDevice()),
                                            ::testing::ValuesIn(kAllModes)),
                         AllocatorConformanceName);

}  // namespace
}  // namespace gpualloc::testing
