// SPDX-License-Identifier: Apache-2.0
// core/bfc/stream_fronts.h: the BFC facade's per-stream front caches: one
// FrontCache (core/bfc/front_cache.h) per stream alive, each under a lock of
// its own, their slots, budgets and statistics, and the blocks they give back
// to the BFC core (docs/DESIGN.md, "Front caches").
//
// Slots. One per stream in use (at most kMaxFronts at once). A slot is made
// under the facade's lock and published by num_; it is never destroyed
// before the allocator: Release empties its front and frees the slot (its
// key becomes kFreeFront), and the next stream's front reuses it. When every
// slot serves a stream, a new stream takes the slot of one whose front saw
// no operation since the last sweep of the slots looked at it (a clock
// sweep: least recently used, roughly), which gives its blocks back as
// Release does; when every front was used since, the new stream goes to the
// core directly until one is idle. A slot's key changes only under the
// front's lock, and Take and Put check it once they hold that lock: a
// thread that found the slot just before it changed hands goes to the core.
// Lock order: the facade's lock, then a front's mu.
//
// Figures. The core counts a cached block as in use; each front keeps, under
// its own lock, what it changes on top of the core's counters C (minus its
// cached blocks, plus what the blocks it handed out again were asked for,
// less what the core recorded for them) and the largest such change since the
// last fold, so that a hit writes nothing but its own front. C changes only
// under the facade's lock: Fold (before C changes) adds C and every front's
// largest change into the peaks and starts each front's largest again from
// where it stands; Sample (after C grew) adds C and the fronts' changes read
// at the fold. The present figures are exact. With one front (one stream) the
// peaks are exact too; with several they may run above the true peak, by at
// most what the fronts held, because their largest changes may come at
// different moments.
//
// Invariants (Validate), besides each cache's FC1-FC3:
//   FC4. Every block a front owns (cached or live) is an in-use chunk of the
//        core of that size, allocated on the front's stream.
//   FC5. The fronts' figures are what their caches change: minus the cached
//        bytes in use, plus the requested adjustment less the cached
//        requested bytes.
//   FC6. A free slot holds no block and changes no figure; each live front's
//        budget is its even share (Budget), and the live slots are counted.
//
// Thread safety: For, Take, Put and the per-front state run under each
// front's own lock (or none, for the atomic slot keys); every other method
// requires the facade's lock, which also guards the core given at
// construction.
#ifndef GPUALLOC_CORE_STREAM_FRONTS_H_
#define GPUALLOC_CORE_STREAM_FRONTS_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "core/bfc/bfc.h"
#include "core/bfc/front_cache.h"
#include "core/layer.h"
#include "core/lock.h"
#include "core/streams/stream_order.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::core {

// What a front changes on top of the core's counters (StreamFronts::Fold).
struct FrontFigures {
  std::int64_t in_use = 0;
  std::int64_t requested = 0;
  // The largest in_use / requested since the last fold.
  std::int64_t in_use_max = 0;
  std::int64_t requested_max = 0;
  void Shift(std::int64_t in_use_by, std::int64_t requested_by) {
    in_use += in_use_by;
    requested += requested_by;
  }
  void Raise(std::int64_t in_use_by, std::int64_t requested_by) {
    Shift(in_use_by, requested_by);
    in_use_max = std::max(in_use_max, in_use);
    requested_max = std::max(requested_max, requested);
  }
};

// One stream's front. `stream` is read by every thread's StreamFronts::For;
// the lock and everything it guards start on the next cache line, which only
// the front's own users write (sharing one line with the key cost 2 threads
// on 2 streams all their scaling: 1.0x against 1.95x apart).
struct alignas(64) StreamFront {
  StreamFront(std::uintptr_t s, std::uint64_t budget, std::uint64_t max_age)
      : stream(s), cache(budget, max_age) {}
  // The stream served, or kFreeFront while the slot is free. Changed only
  // under the facade's lock, with the front empty (Make, Free); read without
  // any lock by For, so that a thread on another stream may scan the slot
  // while it changes hands (the key it looks for is neither).
  std::atomic<std::uintptr_t> stream;
  alignas(64) Lock mu;
  FrontCache cache ABSL_GUARDED_BY(mu);
  FrontFigures figures ABSL_GUARDED_BY(mu);
  // Set by every change of `figures`, cleared by the fold that reads them: a
  // fold locks only the fronts that changed, so that a stream whose cache
  // takes no hits costs the global path nothing. Read unlocked.
  std::atomic<bool> changed{false};
  void Shift(std::int64_t in_use_by, std::int64_t requested_by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    figures.Shift(in_use_by, requested_by);
    NoteChange();
  }
  void Raise(std::int64_t in_use_by, std::int64_t requested_by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    figures.Raise(in_use_by, requested_by);
    NoteChange();
  }
  void NoteChange() {
    if (!changed.load(std::memory_order_relaxed)) {
      changed.store(true, std::memory_order_relaxed);
    }
  }
};

class StreamFronts {
 public:
  static constexpr int kMaxFronts = 16;
  // The key of a free slot: no stream's (live keys have the top bit clear,
  // released ones count up from 1 below it).
  static constexpr std::uintptr_t kFreeFront = ~std::uintptr_t{0};
  // Front operations a block may wait in its cache before it is evicted.
  static constexpr std::uint64_t kMaxAge = std::uint64_t{1} << 16;
  // All streams' front caches together hold at most this many times
  // Options::front_cache.
  static constexpr std::uint64_t kTotalFactor = 4;

  // `front_cache`: the most bytes one front holds (Options::front_cache; 0:
  // off for good). Blocks leave the fronts into `core`, freed on their
  // front's stream at `order`'s stamp, with `oracle`.
  StreamFronts(std::uint64_t front_cache, BfcCore& core,
               const StreamOrder& order, ReuseOracle* oracle)
      : front_cache_(front_cache),
        core_(core),
        order_(order),
        oracle_(oracle),
        on_(front_cache != 0) {}

  StreamFronts(const StreamFronts&) = delete;
  StreamFronts& operator=(const StreamFronts&) = delete;

  // Whether the fronts serve (read without any lock).
  bool on() const { return on_.load(std::memory_order_relaxed); }

  // The stream's front, or null (no lock).
  StreamFront* For(std::uintptr_t stream) const {
    const int n = num_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      if (slots_[i]->stream.load(std::memory_order_acquire) == stream) {
        return slots_[i].get();
      }
    }
    return nullptr;
  }

  // A hit on `stream`'s front: a cached block of exactly `size` bytes, now
  // live with `requested` bytes asked, under the front's lock alone; or
  // nullopt (no front, or no such block).
  ABSL_ATTRIBUTE_ALWAYS_INLINE std::optional<std::uint64_t> Take(
      std::uintptr_t stream, std::uint64_t size,
      std::uint64_t requested) const {
    StreamFront* f = For(stream);
    if (f == nullptr) return std::nullopt;
    LockGuard front_lock(&f->mu);
    // (The slot may have gone to another stream since For.)
    if (ABSL_PREDICT_FALSE(f->stream.load(std::memory_order_relaxed) !=
                           stream)) {
      return std::nullopt;
    }
    std::optional<std::uint64_t> hit = f->cache.Take(size, requested);
    if (hit.has_value()) {
      f->Raise(static_cast<std::int64_t>(size),
               static_cast<std::int64_t>(requested));
    }
    return hit;
  }
  // The free of a block on `stream`, under its front's lock alone: kCached
  // (and whether the front must now evict, EvictOver), or why not.
  struct Freed {
    FrontCache::PutResult put = FrontCache::PutResult::kNotOwned;
    bool evict = false;
    StreamFront* front = nullptr;  // the stream's, if any
  };
  ABSL_ATTRIBUTE_ALWAYS_INLINE Freed Put(std::uintptr_t stream,
                                         DeviceAddress address) const {
    Freed freed;
    freed.front = For(stream);
    if (freed.front == nullptr) return freed;
    StreamFront& f = *freed.front;
    LockGuard front_lock(&f.mu);
    if (ABSL_PREDICT_FALSE(f.stream.load(std::memory_order_relaxed) !=
                           stream)) {
      freed.front = nullptr;  // the slot went to another stream since For
      return freed;
    }
    const FrontCache::Put_ p = f.cache.Put(address);
    freed.put = p.result;
    if (freed.put == FrontCache::PutResult::kCached) {
      f.Shift(-static_cast<std::int64_t>(p.size),
              -static_cast<std::int64_t>(p.requested));
      freed.evict = f.cache.NeedsEviction();
    }
    return freed;
  }
  // The error for a second free of a block cached in `f`.
  ABSL_ATTRIBUTE_NOINLINE static absl::Status FreedTwice(DeviceAddress address,
                                                         const StreamFront& f);

  // --- Under the facade's lock ----------------------------------------------
  // The stream's front, made if a slot is free or a stream's front is idle
  // (its slot is taken over), else null.
  StreamFront* Make(std::uintptr_t stream);
  // The stream is released: its front gives up every block (cached ones to
  // the core, live ones to the core's bookkeeping) and its slot is freed.
  void Release(StreamFront& f);
  // The global path of a free while fronts are on: a second free of a cached
  // block is refused; a block a front handed out that another stream frees
  // leaves that front; a block freed on the stream it was allocated on joins
  // that stream's front when its size is in demand there; the rest (and the
  // front's evictions) go to the core. *changed: whether anything changed
  // (false only for the refused second free).
  absl::Status Deallocate(DeviceAddress address, std::uintptr_t stream,
                          bool* changed);
  // Frees in the core the blocks `f` must give up (over budget, or past the
  // age bound). `f`'s lock must not be held.
  void EvictOver(StreamFront& f);
  // Every front's cached blocks back to the core; whether there were any.
  bool Flush();
  // A block a front handed out is no longer the front's (RecordStream).
  void Leave(DeviceAddress address);
  // Fronts off for good (a private pool or tag was made).
  void Disable();
  // The fronts' figures, added into `s` (the facade's statistics).
  void AddStats(Stats* s) const;
  // The peaks start again from the present (ResetPeakStats).
  void ResetPeaks() {
    Fold();  // starts every front's largest change from its present
    folded_.peak_in_use = Plus(core_.counters().bytes_in_use, folded_.in_use);
    folded_.peak_requested =
        Plus(core_.counters().bytes_requested, folded_.requested);
  }
  // The peaks as of the last Fold or Sample.
  std::uint64_t peak_in_use() const { return folded_.peak_in_use; }
  std::uint64_t peak_requested() const { return folded_.peak_requested; }
  // FC4-FC6 and each cache's FC1-FC3.
  absl::Status Validate() const;

  // Before the core's counters change: every front's largest change since
  // the last fold, added to the core's counters, into the peaks.
  void Fold() const {
    std::int64_t in_use = 0, requested = 0, in_use_max = 0, requested_max = 0;
    const int n = num_.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      StreamFront& f = *slots_[i];
      std::int64_t& u = folded_.front_in_use[i];
      std::int64_t& r = folded_.front_requested[i];
      std::int64_t u_max = u, r_max = r;
      // (A change racing with this load is read by the next fold.)
      if (f.changed.load(std::memory_order_relaxed)) {
        LockGuard front_lock(&f.mu);
        FrontFigures& g = f.figures;
        f.changed.store(false, std::memory_order_relaxed);
        u = g.in_use;
        r = g.requested;
        u_max = std::max(g.in_use_max, u);
        r_max = std::max(g.requested_max, r);
        g.in_use_max = u;
        g.requested_max = r;
      }
      in_use += u;
      requested += r;
      in_use_max += u_max;
      requested_max += r_max;
    }
    const CoreCounters& k = core_.counters();
    folded_.in_use = in_use;
    folded_.requested = requested;
    folded_.peak_in_use =
        std::max(folded_.peak_in_use, Plus(k.bytes_in_use, in_use_max));
    folded_.peak_requested = std::max(folded_.peak_requested,
                                      Plus(k.bytes_requested, requested_max));
  }
  // After the core's counters grew: they and the fronts' changes read at the
  // last fold, into the peaks.
  void Sample() const {
    const CoreCounters& k = core_.counters();
    folded_.peak_in_use =
        std::max(folded_.peak_in_use, Plus(k.bytes_in_use, folded_.in_use));
    folded_.peak_requested = std::max(
        folded_.peak_requested, Plus(k.bytes_requested, folded_.requested));
  }

 private:
  // The fronts' changes as the last fold read them, and the peaks.
  struct Folded {
    std::int64_t in_use = 0;  // the fronts' changes at the last fold
    std::int64_t requested = 0;
    std::uint64_t peak_in_use = 0;
    std::uint64_t peak_requested = 0;
    // Each front's changes as the last fold that locked it read them.
    std::array<std::int64_t, kMaxFronts> front_in_use{};
    std::array<std::int64_t, kMaxFronts> front_requested{};
  };
  // The core's counter plus the fronts' change, never below 0: a change read
  // at an earlier fold may exceed what the core holds now (the fronts gave
  // their blocks back since), and wrapping would make a peak of ~2^64.
  static std::uint64_t Plus(std::uint64_t core, std::int64_t d) {
    const std::int64_t sum = static_cast<std::int64_t>(core) + d;
    return sum < 0 ? 0 : static_cast<std::uint64_t>(sum);
  }
  // Per live front at most front_cache_ bytes; all together at most
  // kTotalFactor times that, shared evenly among the live fronts.
  std::uint64_t Budget() const;
  void ShareBudget();
  // Frees the slot of `f`, emptied by Clear (its stream is released).
  void Free(StreamFront& f);
  // The slot of a front idle since the sweep last looked at it, or -1
  // (at most one sweep of the slots per call).
  int IdleSlot();
  // `f` gives up every block: cached ones to the core, live ones to the
  // core's bookkeeping (their frees go there).
  void Clear(StreamFront& f);
  // A block a front forgot: the core's requested figure becomes the block's.
  void TakeBack(StreamFront& f, const FrontCache::Forgotten& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(f.mu);
  void EvictLocked(StreamFront& f, bool all)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(f.mu);
  absl::Status ValidateFront(int i, const StreamFront& f, std::int64_t* in_use,
                             std::int64_t* requested, int* live) const
      ABSL_NO_THREAD_SAFETY_ANALYSIS;  // Validate holds every front's lock

  const std::uint64_t front_cache_;
  BfcCore& core_;
  const StreamOrder& order_;
  ReuseOracle* const oracle_;
  std::atomic<bool> on_;
  std::array<std::unique_ptr<StreamFront>, kMaxFronts> slots_;
  // The sweep: each slot's front clock when it last looked, and where it
  // looks next.
  std::array<std::uint64_t, kMaxFronts> seen_clock_{};
  int hand_ = 0;
  // Slots made (free ones included), and of them those serving a stream.
  std::atomic<int> num_{0};
  int live_ = 0;
  mutable Folded folded_;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_STREAM_FRONTS_H_
