// core/oom_message.cc: see oom_message.h.
#include "core/oom_message.h"

#include <string>

#include "absl/strings/str_format.h"
#include "core/format_bytes.h"

namespace gpualloc::core {

namespace {

std::string Request(const OutOfMemoryFacts& f) {
  std::string s = absl::StrFormat("Allocate(%d bytes", f.bytes);
  if (f.size != f.bytes) absl::StrAppendFormat(&s, ", rounded to %d", f.size);
  if (f.device != f.size) {
    absl::StrAppendFormat(&s, ", %d with the device's alignment", f.device);
  }
  return s + ")";
}

std::string Where(const DeviceInfo& device, const Options& options,
                  absl::string_view mode) {
  return absl::StrFormat("%s (%s%s allocator)", device.name,
                         options.name.empty() ? "" : options.name + ", ", mode);
}

}  // namespace

absl::Status OutOfMemoryError(const DeviceInfo& device, const Options& options,
                              const OutOfMemoryFacts& facts,
                              absl::string_view why, absl::string_view hint) {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "out of memory: %s on %s: %s. limit %d (%s), in use %d, reserved %d. "
      "Hint: %s",
      Request(facts), Where(device, options, facts.mode), why, facts.limit,
      FormatBytes(facts.limit), facts.in_use, facts.reserved, hint));
}

absl::Status TooLargeError(const DeviceInfo& device, const Options& options,
                           const OutOfMemoryFacts& facts) {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "out of memory: %s can never succeed: it exceeds the allocator's limit "
      "of %d bytes (%s) on %s. Hint: raise memory_fraction (now %g) or set "
      "memory_limit.",
      Request(facts), facts.limit, FormatBytes(facts.limit),
      Where(device, options, facts.mode), options.memory_fraction));
}

}  // namespace gpualloc::core
