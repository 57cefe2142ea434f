// SPDX-License-Identifier: Apache-2.0
// core/report/oom_message.cc: see oom_message.h.
#include "core/report/oom_message.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/report/format_bytes.h"

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

std::string RaiseLimitHint(const ResolvedOptions& resolved) {
  const Options& o = resolved.options;
  if (resolved.host_pool) {
    return absl::StrFormat(
        "raise host_memory_limit (GPUALLOC_HOST_MEMORY_LIMIT, now %s)",
        FormatBytes(o.memory_limit));
  }
  if (o.memory_limit != 0) {
    return absl::StrFormat("raise mem_limit (GPUALLOC_MEM_LIMIT, now %s)",
                           FormatBytes(o.memory_limit));
  }
  return absl::StrFormat(
      "raise mem_fraction (GPUALLOC_MEM_FRACTION, now %g) or set mem_limit "
      "(GPUALLOC_MEM_LIMIT)",
      o.memory_fraction);
}

absl::Status TooLargeError(const DeviceInfo& device,
                           const ResolvedOptions& resolved,
                           const OutOfMemoryFacts& facts) {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "out of memory: %s can never succeed: it exceeds the allocator's limit "
      "of %d bytes (%s) on %s. Hint: %s.",
      Request(facts), facts.limit, FormatBytes(facts.limit),
      Where(device, resolved.options, facts.mode), RaiseLimitHint(resolved)));
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

absl::Status BfcOutOfMemoryError(const DeviceInfo& device,
                                 const ResolvedOptions& resolved,
                                 std::uint64_t bytes, std::uint64_t size,
                                 absl::string_view why, const Stats& s,
                                 std::uint64_t free_bytes) {
  const Options& options = resolved.options;
  std::string hint;
  if (free_bytes >= size) {
    hint = absl::StrFormat(
        "%s are free but in pieces (largest %s): fragmentation. %s",
        FormatBytes(free_bytes), FormatBytes(s.largest_free_block_bytes),
        options.preallocate
            ? "Growing on demand (preallocate=false) lets garbage collection "
              "return whole free regions; freeing long-lived blocks earlier, "
              "or allocating them first, keeps the pool in one piece"
            : "Free memory is split across separate regions or between live "
              "blocks; raise the limit, or free long-lived blocks earlier");
  } else if (s.bytes_reserved + size <= s.bytes_limit) {
    hint =
        "the device refused more memory (other processes may hold it); lower "
        "the limit or free device memory elsewhere";
  } else {
    hint = absl::StrFormat("the limit is reached; %s, or lower the batch size",
                           RaiseLimitHint(resolved));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "out of memory: Allocate(%d bytes, rounded to %d) on %s%s: %s. limit "
      "%d, in use %d, reserved %d, largest free block %d, fragmentation "
      "%.1f%%. Hint: %s",
      bytes, size, device.name,
      options.name.empty() ? "" : " (" + options.name + ")", why, s.bytes_limit,
      s.bytes_in_use, s.bytes_reserved, s.largest_free_block_bytes,
      100 * s.fragmentation, hint));
}

}  // namespace gpualloc::core
