// core/oom_message.cc: see oom_message.h.
#include "core/oom_message.h"

#include <string>
#include <utility>

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

namespace {

// Whether this thread is running an out-of-memory handler (of any
// allocator): failures inside it are final, so handlers never nest.
thread_local bool in_handler = false;

}  // namespace

std::shared_ptr<const OutOfMemoryHandler> ShareHandler(
    OutOfMemoryHandler handler) {
  if (!handler) return nullptr;
  return std::make_shared<const OutOfMemoryHandler>(std::move(handler));
}

absl::Status NoteOutOfMemory(
    absl::Status error,
    const std::shared_ptr<const OutOfMemoryHandler>& handler,
    const Stats& stats, PendingOutOfMemory* pending, std::uint64_t* num_ooms) {
  if (pending == nullptr || handler == nullptr || in_handler) {
    ++*num_ooms;
    return error;
  }
  *pending = new OutOfMemoryCall();
  OutOfMemoryCall& call = **pending;
  call.handler = handler;
  call.info.bytes_limit = stats.bytes_limit;
  call.info.bytes_in_use = stats.bytes_in_use;
  call.info.bytes_reserved = stats.bytes_reserved;
  call.info.largest_free_block_bytes = stats.largest_free_block_bytes;
  return error;
}

absl::StatusOr<void*> CallOutOfMemoryHandler(
    OutOfMemoryCall& call, absl::Status error, std::size_t bytes, Stream stream,
    std::size_t alignment, absl::FunctionRef<absl::StatusOr<void*>()> retry,
    absl::FunctionRef<void()> count_failure) {
  call.info.bytes = bytes;
  call.info.alignment = alignment;
  call.info.stream = stream;
  call.info.message = error.message();
  OutOfMemoryAction action;
  {
    // Restored on the way out, even if the handler throws.
    struct InHandler {
      InHandler() { in_handler = true; }
      ~InHandler() { in_handler = false; }
    } mark;
    action = (*call.handler)(call.info);
  }
  if (action == OutOfMemoryAction::kRetry) return retry();
  count_failure();
  return error;
}

}  // namespace gpualloc::core
