// SPDX-License-Identifier: Apache-2.0
// tests/backends/hip_allocator_conformance_test.cc: the allocator conformance
// suite (tests/core/allocator_conformance.h) over every mode on the HIP
// backend: over the fake runtime, and on the real device (skipped with the
// reason when the HIP runtime or an AMD GPU is missing).
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "backends/hip/hip_api.h"
#include "backends/hip/hip_backend.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/backends/hip_fake_runtime.h"
#include "tests/core/allocator_conformance.h"
#include "tests/core/allocator_modes.h"

namespace gpualloc::testing {
namespace {

using hip::HipBackend;
using hip::HipBackendOptions;
using hip::testing::FakeHipConfig;
using hip::testing::FakeHipRuntime;

absl::StatusOr<std::shared_ptr<Backend>> Over(
    absl::StatusOr<std::shared_ptr<const hip::HipApi>> api) {
  if (!api.ok()) return api.status();
  absl::StatusOr<std::shared_ptr<HipBackend>> backend =
      HipBackend::Create(*std::move(api), HipBackendOptions{});
  if (!backend.ok()) return backend.status();
  return std::shared_ptr<Backend>(*std::move(backend));
}

// The pool's cache of freed blocks (0 without a pool).
std::uint64_t PoolCache(Backend& backend) {
  if (!backend.info().capabilities.stream_ordered_pools) return 0;
  absl::StatusOr<PoolUsage> usage = backend.GetPoolUsage();
  return usage.ok() ? usage->reserved - usage->used : 0;
}

// The runtime call that SimOp `op` stands for.
const char* RuntimeCall(SimOp op) {
  switch (op) {
    case SimOp::kAllocate:
      return "hipMalloc";
    case SimOp::kPoolAllocate:
      return "hipMallocFromPoolAsync";
    case SimOp::kCreatePhysical:
      return "hipMemCreate";
    case SimOp::kRecordEvent:
      return "hipEventRecord";
    default:
      return "unknown";
  }
}

// An MI300X (ROCm 6.1) of `total_bytes` over the fake runtime.
AllocatorDevice FakeMi300x() {
  return AllocatorDevice{
      "hip_fake_mi300x",
      [](std::uint64_t total_bytes, bool) -> absl::StatusOr<MadeDevice> {
        FakeHipConfig c = hip::testing::Rocm61();
        c.total_bytes = total_bytes;
        auto fake = std::make_shared<FakeHipRuntime>(c);
        // The table keeps the fake alive (as OwningFakeApi does).
        const std::shared_ptr<const hip::HipApi> table = fake->api();
        auto owner =
            std::make_shared<std::pair<std::shared_ptr<FakeHipRuntime>,
                                       std::shared_ptr<const hip::HipApi>>>(
                fake, table);
        absl::StatusOr<std::shared_ptr<Backend>> backend =
            Over(std::shared_ptr<const hip::HipApi>(owner, table.get()));
        if (!backend.ok()) return backend.status();
        const std::shared_ptr<Backend> made = *std::move(backend);
        return MadeDevice{
            made,
            [fake](SimOp op, bool out_of_memory) {
              fake->FailNext(RuntimeCall(op), out_of_memory
                                                  ? hipErrorOutOfMemory
                                                  : hipErrorUnknown);
            },
            [fake, made] { return fake->used_bytes() - PoolCache(*made); }};
      },
      /*any_stream=*/true, /*pool_keeps_alignment=*/false};
}

AllocatorDevice RealDevice() {
  return AllocatorDevice{
      "hip_device0",
      [](std::uint64_t, bool) -> absl::StatusOr<MadeDevice> {
        absl::StatusOr<std::shared_ptr<Backend>> backend =
            Over(hip::SharedHipApi());
        if (!backend.ok()) return backend.status();
        return MadeDevice{*std::move(backend), nullptr, nullptr};
      },
      /*any_stream=*/false};
}

INSTANTIATE_TEST_SUITE_P(HipFakeRuntime, AllocatorConformanceTest,
                         ::testing::Combine(::testing::Values(FakeMi300x()),
                                            ::testing::ValuesIn(kAllModes)),
                         AllocatorConformanceName);

INSTANTIATE_TEST_SUITE_P(HipDevice, AllocatorConformanceTest,
                         ::testing::Combine(::testing::Values(RealDevice()),
                                            ::testing::ValuesIn(kAllModes)),
                         AllocatorConformanceName);

}  // namespace
}  // namespace gpualloc::testing
