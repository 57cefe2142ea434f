// SPDX-License-Identifier: Apache-2.0
// core/bfc/front_cache.h: one stream's front cache of freed blocks, by exact
// size.
//
// Model. Training and inference loops free and allocate the same sizes every
// step. A front cache keeps blocks its stream freed, keyed by their exact
// chunk size, and hands them back to the next allocation of that size on the
// same stream without touching the BFC core (no best-fit search, split or
// merge, and no global lock: the facade guards each front with a lock of its
// own). The core still counts a cached block as in use; the front knows:
//   - the blocks it owns: each one cached (free for its stream) or live
//     (handed out from the cache, so that its free comes back here);
//   - for each, the chunk size and what the core recorded as requested, so
//     that the facade can correct the core's statistics exactly.
// Blocks leave the cache oldest first (Evict) when the cache holds more than
// its budget or a block has waited longer than the age bound; the facade then
// frees them in the core. The facade flushes every front before growth, on
// Trim and at out of memory, so that a cached block never makes the device
// give more memory (docs/DESIGN.md, "Front caches").
//
// Same-stream reuse only: a block is cached only when freed on the stream it
// was allocated on with no other stream recorded on it, which is exactly when
// the core would let that stream reuse it at once.
//
// Invariants (Validate):
//   FC1. Every owned block is in the address map once; cached ones are on
//        their size's stack and on the age list, live ones on neither.
//   FC2. cached_bytes() is the sum of the cached blocks' sizes, and
//        cached_requested() of what the core recorded for them.
//   FC3. The age list runs oldest first (stamps never decrease).
//
// Thread safety: none; the facade's per-stream lock guards it.
#ifndef GPUALLOC_CORE_FRONT_CACHE_H_
#define GPUALLOC_CORE_FRONT_CACHE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "core/address_map.h"
#include "core/layer.h"

namespace gpualloc::core {

class FrontCache {
 public:
  // `budget`: the most bytes the cache holds; `max_age`: operations of this
  // front a block may wait in the cache before Evict takes it.
  FrontCache(std::uint64_t budget, std::uint64_t max_age)
      : budget_(budget), max_age_(max_age) {}

  FrontCache(const FrontCache&) = delete;
  FrontCache& operator=(const FrontCache&) = delete;

  // A cached block of exactly `size` bytes, now live with `requested` bytes
  // asked, or nullopt (nothing changes).
  ABSL_ATTRIBUTE_ALWAYS_INLINE std::optional<std::uint64_t> Take(
      std::uint64_t size, std::uint64_t requested) {
    ++clock_;
    std::uint32_t* head = stacks_.FindValue(size);
    if (head == nullptr) {
      ++misses_;
      wanted_[WantedSlot(size)] = size;
      return std::nullopt;
    }
    const std::uint32_t i = *head;
    Block& b = blocks_[i];
    if (b.next == kNone) {
      stacks_.Erase(size);
    } else {
      *head = b.next;
      blocks_[b.next].newer = kNone;
    }
    UnlinkAge(i);
    b.cached = false;
    b.requested = requested;
    cached_bytes_ -= b.size;
    cached_requested_ -= b.core_requested;
    requested_adjust_ += static_cast<std::int64_t>(requested) -
                         static_cast<std::int64_t>(b.core_requested);
    ++hits_;
    return b.address;
  }

  enum class PutResult : std::uint8_t {
    kCached,      // the block is in the cache now
    kNotOwned,    // not a block of this front (nothing changed)
    kAlreadyFree  // cached already: a second free (nothing changed)
  };
  struct Put_ {
    PutResult result = PutResult::kNotOwned;
    std::uint64_t size = 0;       // kCached: the block's size
    std::uint64_t requested = 0;  // kCached: what it was asked for
  };
  // The free of a live block of this front: it goes into the cache.
  ABSL_ATTRIBUTE_ALWAYS_INLINE Put_ Put(std::uint64_t address) {
    const std::uint32_t* found = owned_.FindValue(address);
    if (found == nullptr) return {};
    const std::uint32_t i = *found;
    Block& b = blocks_[i];
    if (ABSL_PREDICT_FALSE(b.cached)) return {PutResult::kAlreadyFree};
    requested_adjust_ -= static_cast<std::int64_t>(b.requested) -
                         static_cast<std::int64_t>(b.core_requested);
    Cache(i);
    return {PutResult::kCached, b.size, b.requested};
  }

  // Whether an allocation of `size` bytes recently found no block here:
  // the blocks worth adopting (a workload that repeats its sizes fills the
  // cache; one that never does leaves its frees to the core).
  bool Wanted(std::uint64_t size) const {
    return wanted_[WantedSlot(size)] == size;
  }
  // A block the core handed out on this front's stream, freed on it: it
  // joins the cache. REQUIRES: not owned; size > 0.
  void Adopt(std::uint64_t address, std::uint64_t size,
             std::uint64_t core_requested);

  // Whether the front owns `address`, and whether it is cached.
  bool Owns(std::uint64_t address) const {
    return owned_.FindValue(address) != nullptr;
  }
  bool IsCached(std::uint64_t address) const {
    const std::uint32_t* found = owned_.FindValue(address);
    return found != nullptr && blocks_[*found].cached;
  }
  // A live block leaves the front (another stream frees it, or RecordStream
  // names another stream): its free goes to the core. Returns its requested
  // bytes now and the core's figure for them (stale), or nullopt when the
  // front does not own it live.
  struct Forgotten {
    std::uint64_t address = 0;
    std::uint64_t requested = 0;
    std::uint64_t core_requested = 0;
  };
  std::optional<Forgotten> Forget(std::uint64_t address);
  // Every live block leaves the front (its stream is released).
  std::vector<Forgotten> ForgetAllLive();

  // The oldest cached block, when the cache is over budget or that block
  // waited longer than the age bound (or every block with `all`), out of the
  // cache and of the front: the caller frees it in the core.
  struct Evicted {
    std::uint64_t address = 0;
    std::uint64_t size = 0;
    std::uint64_t core_requested = 0;
  };
  std::optional<Evicted> Evict(bool all = false);
  // Whether Evict would return a block now (cheap: the caller tests this
  // under the front's lock before taking the global one).
  bool NeedsEviction() const {
    return age_head_ != kNone && (cached_bytes_ > budget_ ||
                                  clock_ - blocks_[age_head_].stamp > max_age_);
  }
  bool empty() const { return age_head_ == kNone; }
  // Blocks owned, cached or live.
  std::uint64_t owned_blocks() const { return owned_.size(); }
  // The front's stream is gone and its slot will serve another: the sizes
  // it wanted are forgotten (the counts of hits, misses and evictions
  // stay). REQUIRES: no block owned.
  void Recycle();

  std::uint64_t budget() const { return budget_; }
  void set_budget(std::uint64_t budget) { budget_ = budget; }
  std::uint64_t cached_bytes() const { return cached_bytes_; }
  std::uint64_t cached_blocks() const { return cached_count_; }
  // What the core recorded as requested for the cached blocks.
  std::uint64_t cached_requested() const { return cached_requested_; }
  // Requested bytes of the live blocks handed out from the cache, less what
  // the core recorded for them.
  std::int64_t requested_adjust() const { return requested_adjust_; }
  std::uint64_t hits() const { return hits_; }
  std::uint64_t misses() const { return misses_; }
  std::uint64_t evictions() const { return evictions_; }
  // Operations of this front so far (takes and puts): whether it was used
  // since an earlier reading.
  std::uint64_t clock() const { return clock_; }
  void CountMiss() { ++misses_; }
  // Visits every owned block: f(address, size, cached).
  template <typename F>
  void ForEachOwned(F f) const {
    for (const Block& b : blocks_) {
      if (b.owned) f(b.address, b.size, b.cached);
    }
  }

  absl::Status Validate() const;

  std::size_t MemoryBytes() const {
    return blocks_.capacity() * sizeof(Block) + owned_.MemoryBytes() +
           stacks_.MemoryBytes();
  }

 private:
  static constexpr std::uint32_t kNone = UINT32_MAX;
  struct Block {
    std::uint64_t address = 0;
    std::uint64_t size = 0;
    std::uint64_t core_requested = 0;
    std::uint64_t requested = 0;  // live: as asked now
    std::uint64_t stamp = 0;      // cached: clock_ when it came in
    std::uint32_t next = kNone;   // cached: next (older) on its size's
                                  // stack; spare records: the next spare
    std::uint32_t newer = kNone;  // cached: the one above it on its stack
    std::uint32_t age_prev = kNone;
    std::uint32_t age_next = kNone;
    bool cached = false;
    bool owned = false;
  };

  // Block `i` (owned, live) goes onto its size's stack and the age list.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Cache(std::uint32_t i) {
    Block& b = blocks_[i];
    ++clock_;
    b.cached = true;
    b.stamp = clock_;
    std::uint32_t* head = stacks_.FindValue(b.size);
    b.newer = kNone;
    if (head == nullptr) {
      b.next = kNone;
      stacks_.Insert(b.size, i);
    } else {
      b.next = *head;
      blocks_[*head].newer = i;
      *head = i;
    }
    b.age_prev = age_tail_;
    b.age_next = kNone;
    if (age_tail_ == kNone) {
      age_head_ = i;
    } else {
      blocks_[age_tail_].age_next = i;
    }
    age_tail_ = i;
    cached_bytes_ += b.size;
    cached_requested_ += b.core_requested;
    ++cached_count_;
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE void UnlinkAge(std::uint32_t i) {
    Block& b = blocks_[i];
    if (b.age_prev == kNone) {
      age_head_ = b.age_next;
    } else {
      blocks_[b.age_prev].age_next = b.age_next;
    }
    if (b.age_next == kNone) {
      age_tail_ = b.age_prev;
    } else {
      blocks_[b.age_next].age_prev = b.age_prev;
    }
    --cached_count_;
  }
  // Takes cached block `i` off its size's stack (any position, O(1)).
  void UnlinkStack(std::uint32_t i);
  std::uint32_t NewBlock();
  void DeleteBlock(std::uint32_t i);

  static constexpr std::size_t kWantedSlots = 1024;
  static std::size_t WantedSlot(std::uint64_t size) {
    return static_cast<std::size_t>((size * 0x9E3779B97F4A7C15ull) >> 54);
  }

  std::vector<Block> blocks_;
  // Sizes that missed, by a hash of the size (the latest one per slot).
  std::array<std::uint64_t, kWantedSlots> wanted_{};
  std::uint32_t spare_ = kNone;     // recycled records, linked through next
  AddressMap owned_;                // address -> record
  AddressMap stacks_;               // size -> the top of its stack
  std::uint32_t age_head_ = kNone;  // oldest cached
  std::uint32_t age_tail_ = kNone;
  std::uint64_t budget_;
  std::uint64_t max_age_;
  std::uint64_t clock_ = 0;
  std::uint64_t cached_bytes_ = 0;
  std::uint64_t cached_requested_ = 0;
  std::uint64_t cached_count_ = 0;
  std::int64_t requested_adjust_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_FRONT_CACHE_H_
