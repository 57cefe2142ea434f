// SPDX-License-Identifier: Apache-2.0
// core/bfc_front.cc: the BFC facade's per-stream front caches
// (core/front_cache.h): their slow paths, statistics and checks. The hot
// paths (a hit, the free of a block a front handed out) are inline in
// core/bfc_allocator.h.
#include "absl/strings/str_format.h"
#include "core/bfc_allocator.h"

namespace gpualloc::core {

std::uint64_t BfcAllocator::FrontBudget() const {
  const std::uint64_t total = kFrontTotalFactor * resolved_.front_cache;
  return std::min<std::uint64_t>(
      resolved_.front_cache,
      total / static_cast<std::uint64_t>(std::max(live_fronts_, 1)));
}

void BfcAllocator::ShareFrontBudget() {
  const std::uint64_t budget = FrontBudget();
  const int n = num_fronts_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    StreamFront& f = *fronts_[i];
    if (f.stream.load(std::memory_order_relaxed) == kFreeFront) continue;
    LockGuard front_lock(&f.mu);
    f.cache.set_budget(budget);
  }
}

BfcAllocator::StreamFront* BfcAllocator::MakeFront(std::uintptr_t stream) {
  if (StreamFront* f = FrontFor(stream)) return f;
  const int n = num_fronts_.load(std::memory_order_relaxed);
  int slot = 0;
  while (slot < n &&
         fronts_[slot]->stream.load(std::memory_order_relaxed) != kFreeFront) {
    ++slot;
  }
  if (slot == kMaxFronts) return nullptr;
  ++live_fronts_;
  if (slot == n) {
    fronts_[n] = std::make_unique<StreamFront>(kFreeFront, 0);
  }
  StreamFront& f = *fronts_[slot];
  // The slot is free (empty since FreeFront): it serves `stream` from the
  // store on; a thread on another stream scanning it meanwhile looks for
  // neither key.
  f.stream.store(stream, std::memory_order_release);
  if (slot == n) num_fronts_.store(n + 1, std::memory_order_release);
  ShareFrontBudget();
  return &f;
}

void BfcAllocator::FreeFront(StreamFront& f) {
  // The figures the front changed are 0 again once ClearFront gave every
  // block back: folded now, the slot starts from 0 for its next stream.
  FoldFigures();
  {
    LockGuard front_lock(&f.mu);
    f.cache.Recycle();
  }
  f.stream.store(kFreeFront, std::memory_order_release);
  --live_fronts_;
  ShareFrontBudget();
}

absl::Status BfcAllocator::DeallocateToFront(DeviceAddress address,
                                             std::uintptr_t stream) {
  FoldFigures();
  const std::optional<BfcCore::InUseChunk> chunk = core_.FindInUse(address);
  bool adopted = false;
  if (chunk.has_value()) {
    if (StreamFront* owner = FrontFor(chunk->stream)) {
      LockGuard front_lock(&owner->mu);
      if (owner->cache.IsCached(address)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "Deallocate(%#x): the block is already free (it waits in the "
            "front cache of stream %#x)",
            address, owner->stream.load(std::memory_order_relaxed)));
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
        adopted = true;
      }
    } else if (chunk->stream == stream) {
      // The stream's first free: its front from now on (the next
      // allocations of this size will want the blocks).
      MakeFront(stream);
    }
  }
  if (adopted) {
    MaybeValidate();  // (it locks every front: after owner->mu is released)
    return absl::OkStatus();
  }
  absl::Status status =
      core_.Deallocate(address, stream, stream_order_.stamp(), oracle_);
  MaybeValidate();
  return status;
}

void BfcAllocator::TakeBack(StreamFront& f, const FrontCache::Forgotten& gone) {
  core_.SetRequested(gone.address, gone.requested);
  f.Shift(0, static_cast<std::int64_t>(gone.core_requested) -
                 static_cast<std::int64_t>(gone.requested));
}

void BfcAllocator::EvictLocked(StreamFront& f, bool all) {
  while (std::optional<FrontCache::Evicted> e = f.cache.Evict(all)) {
    // The core's in-use bytes drop by what D gains: the figures stay.
    f.Shift(static_cast<std::int64_t>(e->size),
            static_cast<std::int64_t>(e->core_requested));
    // Freed on its stream now: a later stamp than the free's, which only
    // makes other streams wait longer for it.
    (void)core_.Deallocate(e->address, f.stream.load(std::memory_order_relaxed),
                           stream_order_.stamp(), oracle_);
  }
}

void BfcAllocator::EvictFromFront(StreamFront& f) {
  LockGuard lock(&mu_);
  FoldFigures();
  {
    LockGuard front_lock(&f.mu);
    EvictLocked(f, /*all=*/false);
  }
  MaybeValidate();
}

absl::Status BfcAllocator::FreedTwice(DeviceAddress address, StreamFront& f) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "Deallocate(%#x): the block is already free (it waits in the front "
      "cache of stream %#x)",
      address, f.stream.load(std::memory_order_relaxed)));
}

bool BfcAllocator::FlushFronts() {
  bool any = false;
  const int n = num_fronts_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    StreamFront& f = *fronts_[i];
    LockGuard front_lock(&f.mu);
    if (f.cache.empty()) continue;
    any = true;
    EvictLocked(f, /*all=*/true);
  }
  return any;
}

void BfcAllocator::ClearFront(StreamFront& f) {
  LockGuard front_lock(&f.mu);
  EvictLocked(f, /*all=*/true);
  for (const FrontCache::Forgotten& gone : f.cache.ForgetAllLive()) {
    TakeBack(f, gone);
  }
}

void BfcAllocator::LeaveFront(DeviceAddress address) {
  const std::optional<BfcCore::InUseChunk> chunk = core_.FindInUse(address);
  if (!chunk.has_value()) return;
  StreamFront* owner = FrontFor(chunk->stream);
  if (owner == nullptr) return;
  LockGuard front_lock(&owner->mu);
  if (std::optional<FrontCache::Forgotten> gone =
          owner->cache.Forget(address)) {
    TakeBack(*owner, *gone);
  }
}

void BfcAllocator::DisableFronts() {
  if (!fronts_on_.load(std::memory_order_relaxed)) return;
  FoldFigures();
  fronts_on_.store(false, std::memory_order_relaxed);
  const int n = num_fronts_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) ClearFront(*fronts_[i]);
}

void BfcAllocator::AddFrontStats(Stats* s) const {
  if (!fronts_on_.load(std::memory_order_relaxed)) return;
  FoldFigures();
  const CoreCounters& k = core_.counters();
  s->bytes_in_use = Plus(k.bytes_in_use, folded_.in_use);
  s->bytes_requested = Plus(k.bytes_requested, folded_.requested);
  // What a front holds may go up until the next operation under the lock;
  // the peaks include the present.
  s->peak_bytes_in_use = std::max(folded_.peak_in_use, s->bytes_in_use);
  s->peak_bytes_requested =
      std::max(folded_.peak_requested, s->bytes_requested);
  const int n = num_fronts_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    StreamFront& f = *fronts_[i];
    LockGuard front_lock(&f.mu);
    s->front_cache_bytes += f.cache.cached_bytes();
    s->front_cache_hits += f.cache.hits();
    s->front_cache_misses += f.cache.misses();
  }
  s->num_allocs += s->front_cache_hits;
}

absl::Status BfcAllocator::ValidateFronts() const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // every front's lock, in index order
  const int n = num_fronts_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) fronts_[i]->mu.lock();
  absl::Status status;
  std::int64_t in_use = 0, requested = 0;
  int live = 0;
  const std::uint64_t budget = FrontBudget();
  for (int i = 0; i < n && status.ok(); ++i) {
    const StreamFront& f = *fronts_[i];
    const std::uintptr_t stream = f.stream.load(std::memory_order_relaxed);
    status = f.cache.Validate();
    if (!status.ok()) break;
    if (stream == kFreeFront) {
      if (f.cache.owned_blocks() != 0 || f.figures.in_use != 0 ||
          f.figures.requested != 0) {
        status = absl::InternalError(absl::StrFormat(
            "front cache invariant FC6 broken: free slot %d holds %d blocks "
            "and changes in-use bytes by %d, requested bytes by %d",
            i, f.cache.owned_blocks(), f.figures.in_use, f.figures.requested));
      }
      continue;
    }
    ++live;
    if (f.cache.budget() != budget) {
      status = absl::InternalError(absl::StrFormat(
          "front cache invariant FC6 broken: stream %#x's front has a budget "
          "of %d bytes, not the %d bytes each of the %d live fronts gets",
          stream, f.cache.budget(), budget, live_fronts_));
    }
    in_use -= static_cast<std::int64_t>(f.cache.cached_bytes());
    requested += f.cache.requested_adjust() -
                 static_cast<std::int64_t>(f.cache.cached_requested());
    const BfcCore* core = &core_;  // (the lambda is analyzed on its own)
    f.cache.ForEachOwned([&](std::uint64_t address, std::uint64_t size,
                             bool cached) {
      if (!status.ok()) return;
      const std::optional<BfcCore::InUseChunk> chunk = core->FindInUse(address);
      if (!chunk.has_value() || chunk->size != size ||
          chunk->stream != stream) {
        status = absl::InternalError(absl::StrFormat(
            "front cache invariant FC4 broken: %s block %#x of %d bytes of "
            "stream %#x's front is not an in-use chunk of that size "
            "allocated on that stream",
            cached ? "cached" : "live", address, size, stream));
      }
    });
  }
  if (status.ok() && live != live_fronts_) {
    status = absl::InternalError(absl::StrFormat(
        "front cache invariant FC6 broken: %d slots serve a stream, %d "
        "counted",
        live, live_fronts_));
  }
  std::int64_t said_in_use = 0, said_requested = 0;
  for (int i = 0; i < n; ++i) {
    said_in_use += fronts_[i]->figures.in_use;
    said_requested += fronts_[i]->figures.requested;
  }
  if (status.ok() && fronts_on_.load(std::memory_order_relaxed) &&
      (in_use != said_in_use || requested != said_requested)) {
    status = absl::InternalError(absl::StrFormat(
        "front cache invariant FC5 broken: the fronts change in-use bytes by "
        "%d and requested bytes by %d, their figures say %d and %d",
        in_use, requested, said_in_use, said_requested));
  }
  for (int i = n - 1; i >= 0; --i) fronts_[i]->mu.unlock();
  return status;
}

}  // namespace gpualloc::core
