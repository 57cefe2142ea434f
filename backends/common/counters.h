// SPDX-License-Identifier: Apache-2.0
// backends/common/counters.h: the checks every backend makes on the arguments
// of the completion-counter calls (Backend::CreateCounters, DestroyCounters,
// WriteCounter, WaitCounter), in one wording for all of them, before anything
// changes or any vendor call is made:
//   "<prefix>CreateCounters(0): a block holds 1 to 65536 counters"
//   "<prefix>WriteCounter(counters 0x3, index 9, value 4): index out of
//    range: the block holds 8 counters"
//   "<prefix>WaitCounter(counters 0x3, index 0, value 9223372036854775808):
//    values must be below 2^63 (...)"
// (the prefix is the backend's: "HIP " for HIP, "sim " for the simulator,
// none for CUDA).
#ifndef GPUALLOC_BACKENDS_COMMON_COUNTERS_H_
#define GPUALLOC_BACKENDS_COMMON_COUNTERS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "backends/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::common {

// The most counters one block holds (512 KiB of host memory): far more than
// one per stream, which is what the allocator makes.
inline constexpr std::size_t kMaxCountersPerBlock = 65536;
// Values are below 2^63: CUDA's cuStreamWaitValue64 with
// CU_STREAM_WAIT_VALUE_GEQ waits until (int64_t)(*addr - value) >= 0, and
// ROCm's hipStreamWaitValue64 compares signed 64-bit values; below 2^63 both
// agree with an unsigned >=.
inline constexpr std::uint64_t kMaxCounterValue = (std::uint64_t{1} << 63) - 1;

// "WriteCounter(counters 0x3, index 9, value 4)": how a message names a call.
inline std::string CounterCall(absl::string_view prefix, absl::string_view call,
                               CounterHandle handle, std::size_t index,
                               std::uint64_t value) {
  return absl::StrFormat("%s%s(counters %#x, index %d, value %d)", prefix, call,
                         handle, index, value);
}

// InvalidArgument unless 1 <= count <= kMaxCountersPerBlock.
inline absl::Status CheckCounterCount(absl::string_view prefix,
                                      std::size_t count) {
  if (count >= 1 && count <= kMaxCountersPerBlock) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%sCreateCounters(%d): a block holds 1 to %d counters",
                      prefix, count, kMaxCountersPerBlock));
}

// InvalidArgument naming the call: `handle` is not a block CreateCounters
// returned on device `ordinal` (or it was destroyed already).
inline absl::Status UnknownCounters(absl::string_view prefix,
                                    absl::string_view call,
                                    CounterHandle handle, int ordinal) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s%s(counters %#x): not a block CreateCounters returned on device %d, "
      "or destroyed already",
      prefix, call, handle, ordinal));
}

// The checks of WriteCounter and WaitCounter once the block is known (it
// holds `count` counters): the index, then the value.
inline absl::Status CheckCounterAccess(absl::string_view prefix,
                                       absl::string_view call,
                                       CounterHandle handle, std::size_t index,
                                       std::uint64_t value, std::size_t count) {
  if (index >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        CounterCall(prefix, call, handle, index, value),
        ": index out of range: the block holds ", count, " counters"));
  }
  if (value > kMaxCounterValue) {
    return absl::InvalidArgumentError(absl::StrCat(
        CounterCall(prefix, call, handle, index, value),
        ": values must be below 2^63 (a device compares counters as signed "
        "64-bit numbers)"));
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::common

#endif  // GPUALLOC_BACKENDS_COMMON_COUNTERS_H_
