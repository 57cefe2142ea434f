// SPDX-License-Identifier: Apache-2.0
// core/modes/non_caching_allocator.cc: NonCachingAllocator, the part the
// platform and async modes share (core/modes/non_caching_allocator.h).
#include "core/modes/non_caching_allocator.h"

#include <utility>

namespace gpualloc::core {

NonCachingAllocator::NonCachingAllocator(ResolvedOptions resolved,
                                         std::shared_ptr<Backend> backend)
    : resolved_(std::move(resolved)),
      backend_(std::move(backend)),
      live_(resolved_.min_block_size) {}

void NonCachingAllocator::CountOutOfMemory() {
  LockGuard lock(&mu_);
  ++num_ooms_;
}

void NonCachingAllocator::SetOutOfMemoryHandler(OutOfMemoryHandler handler) {
  std::shared_ptr<const OutOfMemoryHandler> next =
      ShareHandler(std::move(handler));
  LockGuard lock(&mu_);
  oom_handler_.swap(next);
}

absl::Status NonCachingAllocator::Validate() const {
  LockGuard lock(&mu_);
  return ValidateLocked();
}

Stats NonCachingAllocator::CommonStatsLocked() const {
  Stats s = StatsFromCounters(live_.counters(), Limit());
  s.num_ooms = num_ooms_;
  s.backend_allocs = backend_allocs_;
  s.backend_frees = backend_frees_;
  return s;
}

absl::Status NonCachingAllocator::RejectTooLarge(const OutOfMemoryFacts& facts,
                                                 PendingOutOfMemory* pending) {
  LockGuard lock(&mu_);
  return NoteOutOfMemory(TooLargeError(backend_->info(), resolved_, facts),
                         oom_handler_, StatsLocked(), pending, &num_ooms_);
}

absl::Status NonCachingAllocator::OutOfMemory(OutOfMemoryFacts facts,
                                              PendingOutOfMemory* pending,
                                              absl::string_view why,
                                              absl::string_view hint) {
  facts.reserved = ReservedLocked();
  facts.in_use = live_.counters().bytes_in_use;
  return NoteOutOfMemory(
      OutOfMemoryError(backend_->info(), resolved_.options, facts, why, hint),
      oom_handler_, StatsLocked(), pending, &num_ooms_);
}

}  // namespace gpualloc::core
