// SPDX-License-Identifier: Apache-2.0
// tests/backends/cuda_conformance_test.cc: the backend conformance suite on the
// CUDA backend, over the fake driver (here: the backend's translation of every
// call) and on the real device (skipped with the reason when libcuda.so.1 or a
// device is missing).
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_driver.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/backends/backend_conformance.h"
#include "tests/backends/cuda_fake_driver.h"

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

BackendFactory Fake(std::string name, FakeCudaOptions options) {
  // The fake the factory made last, for the hooks that hold and release its
  // work (the counter cases).
  auto made = std::make_shared<std::weak_ptr<FakeCudaDriver>>();
  return BackendFactory{std::move(name),
                        [options, made] {
                          std::shared_ptr<FakeCudaDriver> fake =
                              FakeCudaDriver::Create(options);
                          *made = fake;
                          return Over(fake->Api());
                        },
                        [made](Backend&, Stream) {
                          if (auto fake = made->lock())
                            fake->SetWorkPending(true);
                        },
                        [made](Backend&, Stream) {
                          if (auto fake = made->lock()) {
                            fake->CompletePendingWork();
                            fake->SetWorkPending(false);
                          }
                        }};
}

FakeCudaOptions SmallH100() {
  FakeCudaOptions o;
  o.name = "NVIDIA H100 80GB HBM3";
  o.total_bytes = std::uint64_t{1} << 30;
  return o;
}

// A device whose attributes deny virtual memory and pools.
FakeCudaOptions NoVmmNoPoolsA100() {
  FakeCudaOptions o;
  o.name = "NVIDIA A100-SXM4-80GB";
  o.major = 8;
  o.total_bytes = std::uint64_t{512} << 20;
  o.vmm_supported = false;
  o.pools_supported = false;
  o.stream_mem_ops_64 = false;  // no completion counters either
  return o;
}

// A CUDA 11.2 driver: the pool entry points resolve, the
// newer-than-requested ones do not matter; cuMemPoolTrimTo is missing.
FakeCudaOptions PoolSymbolMissing() {
  FakeCudaOptions o = SmallH100();
  o.driver_version = 11020;
  o.missing_symbols = {"cuMemPoolTrimTo"};
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    CudaFakeDriver, BackendConformanceTest,
    ::testing::Values(Fake("fake_h200", FakeCudaOptions()),
                      Fake("fake_small_h100", SmallH100()),
                      Fake("fake_no_vmm_no_pools_a100", NoVmmNoPoolsA100()),
                      Fake("fake_pool_symbol_missing", PoolSymbolMissing())),
    BackendFactoryName);

INSTANTIATE_TEST_SUITE_P(CudaDevice, BackendConformanceTest,
                         ::testing::Values(BackendFactory{
                             "device0",
                             [] { return Over(cuda::SharedCudaDriver()); }}),
                         BackendFactoryName);

}  // namespace
}  // namespace gpualloc::testing
