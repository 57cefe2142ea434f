// SPDX-License-Identifier: Apache-2.0
// tests/backends/hip_conformance_test.cc: the backend conformance suite on HIP.
//
// "device" is the real runtime (libamdhip64 loaded at run time): without an
// AMD GPU it answers Unavailable and its tests skip. The "fake_*" instances
// run the same suite against the HIP backend over the fake runtime
// (tests/backends/hip_fake_runtime.h), one per ROCm behaviour the backend must
// handle.

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "backends/hip/hip_api.h"
#include "backends/hip/hip_backend.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/backends/backend_conformance.h"
#include "tests/backends/hip_fake_runtime.h"

namespace gpualloc::testing {
namespace {

using hip::HipBackend;
using hip::HipBackendOptions;
using hip::testing::FakeHipConfig;
using hip::testing::kFakeGiB;
using hip::testing::kFakeMiB;

absl::StatusOr<std::shared_ptr<Backend>> Make(
    absl::StatusOr<std::shared_ptr<const hip::HipApi>> api,
    HipBackendOptions options) {
  if (!api.ok()) return api.status();
  absl::StatusOr<std::shared_ptr<HipBackend>> backend =
      HipBackend::Create(*std::move(api), options);
  if (!backend.ok()) return backend.status();
  return std::shared_ptr<Backend>(*std::move(backend));
}

BackendFactory Device() {
  return BackendFactory{
      "device", [] { return Make(hip::SharedHipApi(), HipBackendOptions{}); }};
}

BackendFactory Fake(std::string name, FakeHipConfig config,
                    MemoryKind kind = MemoryKind::kCoarse) {
  return BackendFactory{std::move(name), [config, kind] {
                          HipBackendOptions options;
                          options.memory_kind = kind;
                          return Make(hip::testing::OwningFakeApi(config),
                                      options);
                        }};
}

FakeHipConfig SmallMi250x52() {
  FakeHipConfig c = hip::testing::Rocm52();
  c.name = "AMD Instinct MI250X";
  c.gcn_arch_name = "gfx90a:sramecc+:xnack-";
  c.total_bytes = 64 * kFakeGiB;
  return c;
}

FakeHipConfig Misaligned57() {
  FakeHipConfig c = hip::testing::Rocm57();
  c.misalign_large = true;
  c.total_bytes = 8 * kFakeGiB;
  return c;
}

FakeHipConfig NoPools61() {
  FakeHipConfig c = hip::testing::Rocm61();
  c.pools_attribute = 0;
  c.gcn_arch_name = "gfx1100";
  c.name = "AMD Radeon PRO W7900";
  c.total_bytes = 48 * kFakeGiB;
  c.stream_wait_value = 0;  // no completion counters either
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Hip, BackendConformanceTest,
    ::testing::Values(Device(),
                      Fake("fake_rocm61_mi300x", hip::testing::Rocm61()),
                      Fake("fake_rocm52_mi250x", SmallMi250x52()),
                      Fake("fake_rocm57_misaligned_fine", Misaligned57(),
                           MemoryKind::kFine),
                      Fake("fake_rocm61_no_pools", NoPools61())),
    BackendFactoryName);

}  // namespace
}  // namespace gpualloc::testing
