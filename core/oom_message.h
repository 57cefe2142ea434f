// core/oom_message.h: the out-of-memory messages of the modes that hand every
// request to the device (platform and async).
#ifndef GPUALLOC_CORE_OOM_MESSAGE_H_
#define GPUALLOC_CORE_OOM_MESSAGE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/layer.h"
#include "gpualloc/allocator.h"
#include "gpualloc/backend.h"

namespace gpualloc::core {

// What an out-of-memory report of the platform and async modes states.
struct OutOfMemoryFacts {
  absl::string_view mode;    // "platform", "async"
  std::uint64_t bytes = 0;   // as asked
  std::uint64_t size = 0;    // rounded to the minimum block size
  std::uint64_t device = 0;  // asked of the device (with alignment padding)
  std::uint64_t limit = 0;
  std::uint64_t in_use = 0;
  std::uint64_t reserved = 0;
};

// ResourceExhausted: "out of memory: Allocate(...) on DEVICE (NAME, MODE
// allocator): WHY. limit, in use, reserved. Hint: HINT".
absl::Status OutOfMemoryError(const DeviceInfo& device, const Options& options,
                              const OutOfMemoryFacts& facts,
                              absl::string_view why, absl::string_view hint);
// ResourceExhausted for a request larger than the limit itself.
absl::Status TooLargeError(const DeviceInfo& device, const Options& options,
                           const OutOfMemoryFacts& facts);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_OOM_MESSAGE_H_
