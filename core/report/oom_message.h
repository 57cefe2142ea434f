// SPDX-License-Identifier: Apache-2.0
// core/report/oom_message.h: the out-of-memory messages of the modes that hand
// every request to the device (platform and async), and the out-of-memory
// handler call every mode makes (Allocator::SetOutOfMemoryHandler).
#ifndef GPUALLOC_CORE_OOM_MESSAGE_H_
#define GPUALLOC_CORE_OOM_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/optimization.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config/options.h"
#include "core/layer.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

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

// How to raise the limit, naming the setting the user sets and its value
// now: "raise mem_fraction (GPUALLOC_MEM_FRACTION, now 0.75) or set mem_limit
// (GPUALLOC_MEM_LIMIT)", "raise mem_limit (GPUALLOC_MEM_LIMIT, now 64.00 MiB)"
// when a limit was set, "raise host_memory_limit (...)" for the host pool.
std::string RaiseLimitHint(const ResolvedOptions& resolved);

// ResourceExhausted: "out of memory: Allocate(...) on DEVICE (NAME, MODE
// allocator): WHY. limit, in use, reserved. Hint: HINT".
absl::Status OutOfMemoryError(const DeviceInfo& device, const Options& options,
                              const OutOfMemoryFacts& facts,
                              absl::string_view why, absl::string_view hint);
// ResourceExhausted for a request larger than the limit itself.
absl::Status TooLargeError(const DeviceInfo& device,
                           const ResolvedOptions& resolved,
                           const OutOfMemoryFacts& facts);

// The BFC mode's report: "out of memory: Allocate(BYTES, rounded to SIZE) on
// DEVICE (NAME): WHY. limit, in use, reserved, largest free block,
// fragmentation. Hint: ..." with the hint chosen by what ran out (pieces,
// the device, the limit). `free_bytes`: reserved but not in use.
absl::Status BfcOutOfMemoryError(const DeviceInfo& device,
                                 const ResolvedOptions& resolved,
                                 std::uint64_t bytes, std::uint64_t size,
                                 absl::string_view why, const Stats& s,
                                 std::uint64_t free_bytes);

// The out-of-memory handler. A mode keeps the handler as a
//   std::shared_ptr<const OutOfMemoryHandler> oom_handler_
//       ABSL_GUARDED_BY(mu_);
// swapped in under the lock (ShareHandler), and its Allocate is
// AllocateHandlingOutOfMemory(*this, ...): its AllocateOnce answers every out
// of memory through NoteOutOfMemory, under its lock. The handler is copied
// there, with the failure's numbers, and called once the lock is released
// (AllocateOnce has returned).

// A handler call prepared under the lock, made after it is released.
struct OutOfMemoryCall {
  std::shared_ptr<const OutOfMemoryHandler> handler;
  OutOfMemoryInfo info;  // the numbers; the request and message come later
};
// Null until an attempt fails with a handler to call; then it owns the call
// (AllocateHandlingOutOfMemory takes it into a unique_ptr). A raw pointer so
// that the success path pays for one pointer on the stack and no destructor.
using PendingOutOfMemory = OutOfMemoryCall*;

// The handler as a mode keeps it (null for a null one). A mode swaps it in
// under its lock into a local, so that the previous handler is destroyed
// after the lock is released (its captures may call the allocator).
std::shared_ptr<const OutOfMemoryHandler> ShareHandler(
    OutOfMemoryHandler handler);

// At an out-of-memory answer, under the allocator's lock. A first attempt
// (`pending` not null) with a handler, on a thread not running a handler
// already, gets the call prepared in *pending: the failure is counted later,
// and only if it is final. Otherwise the failure is final and counted in
// *num_ooms. Returns `error`.
absl::Status NoteOutOfMemory(
    absl::Status error,
    const std::shared_ptr<const OutOfMemoryHandler>& handler,
    const Stats& stats, PendingOutOfMemory* pending, std::uint64_t* num_ooms);

// The slow path of AllocateHandlingOutOfMemory: calls the handler (no lock
// held), then either `retry` (once, on kRetry) or `count_failure` and
// `error`.
absl::StatusOr<void*> CallOutOfMemoryHandler(
    OutOfMemoryCall& call, absl::Status error, std::size_t bytes, Stream stream,
    std::size_t alignment, absl::FunctionRef<absl::StatusOr<void*>()> retry,
    absl::FunctionRef<void()> count_failure);

// A mode's Allocate: self.AllocateOnce(bytes, stream, alignment, &pending),
// then the handler when that attempt prepared a call; a failure that is
// final after the handler is counted by self.CountOutOfMemory().
// `extra` (the BFC mode's tag) is passed on to AllocateOnce.
template <typename Mode, typename... Extra>
absl::StatusOr<void*> AllocateHandlingOutOfMemory(Mode& self, std::size_t bytes,
                                                  Stream stream,
                                                  std::size_t alignment,
                                                  Extra... extra) {
  PendingOutOfMemory pending = nullptr;
  absl::StatusOr<void*> result =
      self.AllocateOnce(bytes, stream, alignment, &pending, extra...);
  if (ABSL_PREDICT_FALSE(!result.ok()) && pending != nullptr) {
    const std::unique_ptr<OutOfMemoryCall> call(pending);
    result = CallOutOfMemoryHandler(
        *call, std::move(result).status(), bytes, stream, alignment,
        [&] {
          return self.AllocateOnce(bytes, stream, alignment, nullptr, extra...);
        },
        [&] { self.CountOutOfMemory(); });
  }
  return result;  // one named result: returned in place
}

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_OOM_MESSAGE_H_
