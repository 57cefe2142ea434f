// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_conformance_test.cc: the allocator conformance suite
// over every mode on the simulator: BFC with separate regions, with expandable
// regions and preallocated, platform and async.
#include "tests/core/allocator_conformance.h"

#include "gtest/gtest.h"
#include "tests/core/allocator_modes.h"

namespace gpualloc::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Sim, AllocatorConformanceTest,
                         ::testing::ValuesIn(kAllModes), AllocatorModeName);

}  // namespace
}  // namespace gpualloc::testing
