// SPDX-License-Identifier: Apache-2.0
// tests/core/allocator_modes.h: the ways an Allocator serves memory (BFC
// over separate or expandable regions, growing or preallocated, with or
// without front caches; platform; async), one list that the conformance
// suite (tests/core/allocator_conformance.h), the random-operation test
// (tests/core/random_ops_test.cc) and the fuzz target
// (tests/core/allocator_fuzz.h) all run.
//
// The simulator has virtual memory on by default, so Options' expandable=kAuto
// would silently pick expandable regions: every mode here names it.
#ifndef GPUALLOC_TESTS_ALLOCATOR_MODES_H_
#define GPUALLOC_TESTS_ALLOCATOR_MODES_H_

#include <cstdint>
#include <ostream>

#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::testing {

struct AllocatorModeSpec {
  const char* name;  // test-name suffix
  AllocatorMode mode;
  bool preallocate;
  bool expandable;
  std::uint64_t front_cache = 0;  // Options::front_cache, per stream
};

inline constexpr std::uint64_t kModeFrontCache = std::uint64_t{4} << 20;

inline constexpr AllocatorModeSpec kBfcSeparate{
    "BfcSeparate", AllocatorMode::kBfc, false, false};
inline constexpr AllocatorModeSpec kBfcExpandable{
    "BfcExpandable", AllocatorMode::kBfc, false, true};
inline constexpr AllocatorModeSpec kBfcPreallocated{
    "BfcPreallocated", AllocatorMode::kBfc, true, false};
inline constexpr AllocatorModeSpec kBfcExpandablePreallocated{
    "BfcExpandablePreallocated", AllocatorMode::kBfc, true, true};
inline constexpr AllocatorModeSpec kBfcSeparateFrontCache{
    "BfcSeparateFrontCache", AllocatorMode::kBfc, false, false,
    kModeFrontCache};
inline constexpr AllocatorModeSpec kBfcExpandableFrontCache{
    "BfcExpandableFrontCache", AllocatorMode::kBfc, false, true,
    kModeFrontCache};
inline constexpr AllocatorModeSpec kBfcPreallocatedFrontCache{
    "BfcPreallocatedFrontCache", AllocatorMode::kBfc, true, false,
    kModeFrontCache};
inline constexpr AllocatorModeSpec kBfcExpandablePreallocatedFrontCache{
    "BfcExpandablePreallocatedFrontCache", AllocatorMode::kBfc, true, true,
    kModeFrontCache};
inline constexpr AllocatorModeSpec kPlatform{
    "Platform", AllocatorMode::kPlatform, false, false};
inline constexpr AllocatorModeSpec kAsync{"Async", AllocatorMode::kAsync, false,
                                          false};

// Every mode: the list the conformance suite, the random-operation test and
// the fuzz target all draw from.
inline constexpr AllocatorModeSpec kAllModes[] = {
    kBfcSeparate,
    kBfcExpandable,
    kBfcPreallocated,
    kBfcExpandablePreallocated,
    kBfcSeparateFrontCache,
    kBfcExpandableFrontCache,
    kBfcPreallocatedFrontCache,
    kBfcExpandablePreallocatedFrontCache,
    kPlatform,
    kAsync};

inline void PrintTo(const AllocatorModeSpec& spec, std::ostream* os) {
  *os << spec.name;
}

// Options for `spec` with `limit` bytes (0: the default fraction).
inline Options ModeOptions(const AllocatorModeSpec& spec, std::uint64_t limit) {
  Options o;
  o.mode = spec.mode;
  o.preallocate = spec.preallocate;
  o.expandable = spec.expandable ? Tristate::kOn : Tristate::kOff;
  o.front_cache = spec.front_cache;
  o.memory_limit = limit;
  return o;
}

// The simulator call that takes memory from the device in this mode: the
// one to make fail to see the mode cope with a refusal.
inline SimOp GrowthOp(const Options& o) {
  switch (o.mode) {
    case AllocatorMode::kPlatform:
      return SimOp::kAllocate;
    case AllocatorMode::kAsync:
      return SimOp::kPoolAllocate;
    case AllocatorMode::kBfc:
      break;
  }
  return o.expandable == Tristate::kOff ? SimOp::kAllocate
                                        : SimOp::kCreatePhysical;
}

}  // namespace gpualloc::testing

#endif  // GPUALLOC_TESTS_ALLOCATOR_MODES_H_
