// SPDX-License-Identifier: Apache-2.0
// core/bfc/stream_fronts.cc: the per-stream front caches' slow paths,
// statistics and checks (core/bfc/stream_fronts.h). The hot paths (a hit, the
// free of a block a front handed out) are inline in the header.
#include "core/bfc/stream_fronts.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace gpualloc::core {

absl::Status StreamFronts::FreedTwice(DeviceAddress address,
                                      const StreamFront& f) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "Deallocate(%#x): the block is already free (it waits in the front "
      "cache of stream %#x)",
      address, f.stream.load(std::memory_order_relaxed)));
}

std::uint64_t StreamFronts::Budget() const {
  const std::uint64_t total = kTotalFactor * front_cache_;
  return std::min<std::uint64_t>(
      front_cache_, total / static_cast<std::uint64_t>(std::max(live_, 1)));
}

void StreamFronts::ShareBudget() {
  const std::uint64_t budget = Budget();
  const int n = num_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    StreamFront& f = *slots_[i];
    if (f.stream.load(std::memory_order_relaxed) == kFreeFront) continue;
    LockGuard front_lock(&f.mu);
    f.cache.set_budget(budget);
  }
}

StreamFront* StreamFronts::Make(std::uintptr_t stream) {
  if (StreamFront* f = For(stream)) return f;
  const int n = num_.load(std::memory_order_relaxed);
  int slot = 0;
  while (slot < n &&
         slots_[slot]->stream.load(std::memory_order_relaxed) != kFreeFront) {
    ++slot;
  }
  if (slot == kMaxFronts) {
    // Every slot serves a stream: an idle one's goes to this stream.
    slot = IdleSlot();
    if (slot < 0) return nullptr;
    Release(*slots_[slot]);
  }
  ++live_;
  if (slot == n) {
    slots_[n] = std::make_unique<StreamFront>(kFreeFront, 0, kMaxAge);
  }
  StreamFront& f = *slots_[slot];
  {
    // The slot is free (empty since Free): it serves `stream` from the
    // store on; a thread on another stream scanning it meanwhile looks for
    // neither key.
    LockGuard front_lock(&f.mu);
    f.stream.store(stream, std::memory_order_release);
    seen_clock_[slot] = f.cache.clock();
  }
  if (slot == n) num_.store(n + 1, std::memory_order_release);
  ShareBudget();
  return &f;
}

int StreamFronts::IdleSlot() {
  const int n = num_.load(std::memory_order_relaxed);
  for (int step = 0; step < n; ++step) {
    const int i = hand_;
    hand_ = (hand_ + 1) % n;
    StreamFront& f = *slots_[i];
    std::uint64_t clock;
    {
      LockGuard front_lock(&f.mu);
      clock = f.cache.clock();
    }
    if (clock == seen_clock_[i]) return i;
    seen_clock_[i] = clock;
  }
  return -1;
}

void StreamFronts::Release(StreamFront& f) {
  // Its blocks back to the core, and its slot free for the next stream.
  Fold();
  Clear(f);
  Free(f);
}

void StreamFronts::Free(StreamFront& f) {
  // The figures the front changed are 0 again once Clear gave every block
  // back: folded now, the slot starts from 0 for its next stream.
  Fold();
  {
    LockGuard front_lock(&f.mu);
    f.cache.Recycle();
    f.stream.store(kFreeFront, std::memory_order_release);
  }
  --live_;
  ShareBudget();
}

absl::Status StreamFronts::Deallocate(DeviceAddress address,
                                      std::uintptr_t stream, bool* changed) {
  *changed = true;
  Fold();
  const std::optional<BfcCore::InUseChunk> chunk = core_.FindInUse(address);
  if (chunk.has_value()) {
    if (StreamFront* owner = For(chunk->stream)) {
      LockGuard front_lock(&owner->mu);
      if (owner->cache.IsCached(address)) {
        *changed = false;
        return FreedTwice(address, *owner);
      }
      if (std::optional<FrontCache::Forgotten> gone =
              owner->cache.Forget(address)) {
        // Handed out by the front, freed on another stream: the core's
        // stream rules decide when that memory may be used again.
        TakeBack(*owner, *gone);
      } else if (chunk->stream == stream && !chunk->other_streams &&
                 !chunk->free_neighbour &&
                 chunk->size <= owner->cache.budget() &&
                 owner->cache.Wanted(chunk->size)) {
        owner->cache.Adopt(address, chunk->size, chunk->requested);
        owner->Shift(-static_cast<std::int64_t>(chunk->size),
                     -static_cast<std::int64_t>(chunk->requested));
        EvictLocked(*owner, /*all=*/false);
        return absl::OkStatus();
      }
    } else if (chunk->stream == stream) {
      // The stream's first free: its front from now on (the next
      // allocations of this size will want the blocks).
      Make(stream);
    }
  }
  return core_.Deallocate(address, stream, order_.stamp(), oracle_);
}

void StreamFronts::TakeBack(StreamFront& f, const FrontCache::Forgotten& gone) {
  core_.SetRequested(gone.address, gone.requested);
  f.Shift(0, static_cast<std::int64_t>(gone.core_requested) -
                 static_cast<std::int64_t>(gone.requested));
}

void StreamFronts::EvictLocked(StreamFront& f, bool all) {
  while (std::optional<FrontCache::Evicted> e = f.cache.Evict(all)) {
    // The core's in-use bytes drop by what D gains: the figures stay.
    f.Shift(static_cast<std::int64_t>(e->size),
            static_cast<std::int64_t>(e->core_requested));
    // Freed on its stream now: a later stamp than the free's, which only
    // makes other streams wait longer for it.
    (void)core_.Deallocate(e->address, f.stream.load(std::memory_order_relaxed),
                           order_.stamp(), oracle_);
  }
}

void StreamFronts::EvictOver(StreamFront& f) {
  Fold();
  LockGuard front_lock(&f.mu);
  EvictLocked(f, /*all=*/false);
}

bool StreamFronts::Flush() {
  bool any = false;
  const int n = num_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    StreamFront& f = *slots_[i];
    LockGuard front_lock(&f.mu);
    if (f.cache.empty()) continue;
    any = true;
    EvictLocked(f, /*all=*/true);
  }
  return any;
}

void StreamFronts::Clear(StreamFront& f) {
  LockGuard front_lock(&f.mu);
  EvictLocked(f, /*all=*/true);
  for (const FrontCache::Forgotten& gone : f.cache.ForgetAllLive()) {
    TakeBack(f, gone);
  }
}

void StreamFronts::Leave(DeviceAddress address) {
  const std::optional<BfcCore::InUseChunk> chunk = core_.FindInUse(address);
  if (!chunk.has_value()) return;
  StreamFront* owner = For(chunk->stream);
  if (owner == nullptr) return;
  LockGuard front_lock(&owner->mu);
  if (std::optional<FrontCache::Forgotten> gone =
          owner->cache.Forget(address)) {
    TakeBack(*owner, *gone);
  }
}

void StreamFronts::Disable() {
  if (!on()) return;
  Fold();
  on_.store(false, std::memory_order_relaxed);
  const int n = num_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) Clear(*slots_[i]);
}

void StreamFronts::AddStats(Stats* s) const {
  if (!on()) return;
  Fold();
  const CoreCounters& k = core_.counters();
  s->bytes_in_use = Plus(k.bytes_in_use, folded_.in_use);
  s->bytes_requested = Plus(k.bytes_requested, folded_.requested);
  // What a front holds may go up until the next operation under the lock;
  // the peaks include the present.
  s->peak_bytes_in_use = std::max(folded_.peak_in_use, s->bytes_in_use);
  s->peak_bytes_requested =
      std::max(folded_.peak_requested, s->bytes_requested);
  const int n = num_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    StreamFront& f = *slots_[i];
    LockGuard front_lock(&f.mu);
    s->front_cache_bytes += f.cache.cached_bytes();
    s->front_cache_hits += f.cache.hits();
    s->front_cache_misses += f.cache.misses();
  }
  s->num_allocs += s->front_cache_hits;
}

absl::Status StreamFronts::ValidateFront(int i, const StreamFront& f,
                                         std::int64_t* in_use,
                                         std::int64_t* requested,
                                         int* live) const {
  const std::uintptr_t stream = f.stream.load(std::memory_order_relaxed);
  GPUALLOC_RETURN_IF_ERROR(f.cache.Validate());
  if (stream == kFreeFront) {
    if (f.cache.owned_blocks() != 0 || f.figures.in_use != 0 ||
        f.figures.requested != 0) {
      return absl::InternalError(absl::StrFormat(
          "front cache invariant FC6 broken: free slot %d holds %d blocks "
          "and changes in-use bytes by %d, requested bytes by %d",
          i, f.cache.owned_blocks(), f.figures.in_use, f.figures.requested));
    }
    return absl::OkStatus();
  }
  ++*live;
  const std::uint64_t budget = Budget();
  absl::Status status;
  if (f.cache.budget() != budget) {
    status = absl::InternalError(absl::StrFormat(
        "front cache invariant FC6 broken: stream %#x's front has a budget "
        "of %d bytes, not the %d bytes each of the %d live fronts gets",
        stream, f.cache.budget(), budget, live_));
  }
  *in_use -= static_cast<std::int64_t>(f.cache.cached_bytes());
  *requested += f.cache.requested_adjust() -
                static_cast<std::int64_t>(f.cache.cached_requested());
  f.cache.ForEachOwned([&](std::uint64_t address, std::uint64_t size,
                           bool cached) {
    if (!status.ok()) return;
    const std::optional<BfcCore::InUseChunk> chunk = core_.FindInUse(address);
    if (!chunk.has_value() || chunk->size != size || chunk->stream != stream) {
      status = absl::InternalError(absl::StrFormat(
          "front cache invariant FC4 broken: %s block %#x of %d bytes of "
          "stream %#x's front is not an in-use chunk of that size "
          "allocated on that stream",
          cached ? "cached" : "live", address, size, stream));
    }
  });
  return status;
}

absl::Status StreamFronts::Validate() const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // every front's lock, in index order
  const int n = num_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) slots_[i]->mu.lock();
  absl::Status status;
  std::int64_t in_use = 0, requested = 0;
  int live = 0;
  for (int i = 0; i < n && status.ok(); ++i) {
    status = ValidateFront(i, *slots_[i], &in_use, &requested, &live);
  }
  if (status.ok() && live != live_) {
    status = absl::InternalError(absl::StrFormat(
        "front cache invariant FC6 broken: %d slots serve a stream, %d "
        "counted",
        live, live_));
  }
  std::int64_t said_in_use = 0, said_requested = 0;
  for (int i = 0; i < n; ++i) {
    said_in_use += slots_[i]->figures.in_use;
    said_requested += slots_[i]->figures.requested;
  }
  if (status.ok() && on() &&
      (in_use != said_in_use || requested != said_requested)) {
    status = absl::InternalError(absl::StrFormat(
        "front cache invariant FC5 broken: the fronts change in-use bytes by "
        "%d and requested bytes by %d, their figures say %d and %d",
        in_use, requested, said_in_use, said_requested));
  }
  for (int i = n - 1; i >= 0; --i) slots_[i]->mu.unlock();
  return status;
}

}  // namespace gpualloc::core
