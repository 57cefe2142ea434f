// SPDX-License-Identifier: Apache-2.0
// core/modes/non_caching_allocator.h: what the modes that keep no chunks of
// their own (allocator=platform, core/modes/platform_allocator.cc;
// allocator=async, core/modes/async_allocator.cc) share: each live allocation
// is one backend (or pool) allocation, kept in LiveAllocations under one lock,
// with the limit, the out-of-memory answers and handler, the counts of backend
// calls and the statistics built from them.
//
// A mode derives from NonCachingAllocator, keeps its Allocate as
// AllocateHandlingOutOfMemory(*this, ...) over its own AllocateOnce (which
// answers out of memory with RejectTooLarge or OutOfMemory), and supplies
// ValidateLocked (its invariants), StatsLocked (CommonStatsLocked plus what
// it reserves) and ReservedLocked (what an out-of-memory message reports as
// reserved).
#ifndef GPUALLOC_CORE_NON_CACHING_ALLOCATOR_H_
#define GPUALLOC_CORE_NON_CACHING_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/config/options.h"
#include "core/layer.h"
#include "core/live_allocations.h"
#include "core/lock.h"
#include "core/report/oom_message.h"
#include "core/status_macros.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

class NonCachingAllocator : public Allocator {
 public:
  // For AllocateHandlingOutOfMemory: a failure final after the handler.
  void CountOutOfMemory();

  void SetOutOfMemoryHandler(OutOfMemoryHandler handler) override;
  absl::Status Validate() const override;
  const DeviceInfo& device() const override { return backend_->info(); }
  const Options& options() const override { return resolved_.options; }

 protected:
  NonCachingAllocator(ResolvedOptions resolved,
                      std::shared_ptr<Backend> backend);

  // The mode's invariants (LiveAllocations' among them).
  virtual absl::Status ValidateLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // The statistics: CommonStatsLocked and what the mode reserves.
  virtual Stats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // The bytes reserved, as an out-of-memory message reports them.
  virtual std::uint64_t ReservedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // ValidateLocked after each operation in builds that check every one.
  void MaybeValidate() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_VALIDATE_EACH_OP(ValidateLocked());
  }

  // The statistics the live allocations and the counts below give: in use,
  // requested, their peaks, the limit, out-of-memory answers and backend
  // allocations and frees.
  Stats CommonStatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A request larger than the limit (`facts.device` bytes): out of memory,
  // through NoteOutOfMemory. Takes the lock.
  absl::Status RejectTooLarge(const OutOfMemoryFacts& facts,
                              PendingOutOfMemory* pending);

  // Out of memory for `why`, with `hint`, through NoteOutOfMemory.
  absl::Status OutOfMemory(OutOfMemoryFacts facts, PendingOutOfMemory* pending,
                           absl::string_view why, absl::string_view hint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::uint64_t Limit() const { return limit_.load(std::memory_order_relaxed); }

  const ResolvedOptions resolved_;
  // resolved_.limit, then what SetLimit set (written under mu_).
  std::atomic<std::uint64_t> limit_{resolved_.limit};
  const std::shared_ptr<Backend> backend_;

  mutable Lock mu_;
  LiveAllocations live_ ABSL_GUARDED_BY(mu_);
  std::uint64_t num_ooms_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const OutOfMemoryHandler> oom_handler_ ABSL_GUARDED_BY(mu_);
  std::uint64_t backend_allocs_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t backend_frees_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_NON_CACHING_ALLOCATOR_H_
