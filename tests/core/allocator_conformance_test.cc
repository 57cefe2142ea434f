// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_conformance_test.cc: the allocator conformance suite
// over every mode (tests/core/allocator_modes.h) on the simulator. The CUDA
// and HIP backends run it over their fake drivers and on a real device in
// tests/backends/{cuda,hip}_allocator_conformance_test.cc.
#include "tests/core/allocator_conformance.h"

#include "gtest/gtest.h"
#include "tests/core/allocator_modes.h"

namespace gpualloc::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Sim, AllocatorConformanceTest,
                         ::testing::Combine(::testing::Values(SimDevice()),
                                            ::testing::ValuesIn(kAllModes)),
                         AllocatorConformanceName);

}  // namespace
}  // namespace gpualloc::testing
