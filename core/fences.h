// SPDX-License-Identifier: Apache-2.0
// core/fences.h: when a free chunk may be handed to a stream.
//
// docs/DESIGN.md, "Stream-ordered frees": Deallocate(p, S) says that all
// work using p is queued on S (and on the streams RecordStream named). The
// memory may be reused on S at once, and on another stream T only once that
// work has completed, or after T was made to wait for it.
//
// Stamps. The allocator counts the events it has recorded (a stamp counter).
// A free is stamped with the counter's value; an event recorded later gets a
// larger number, so "an event on S numbered above the free's stamp" is exactly
// "an event recorded on S after the free", which captures the freeing work.
// The condition of a free chunk is therefore a set of (stream, stamp) pairs,
// one per stream whose work may still use it; Chunk::fence says how it is
// stored (core/bfc/chunk_table.h): none (kClean), one pair in the chunk itself
// (kStream), or several in FenceSets (kSet). A workload on one stream only
// ever has kClean and kStream chunks of its own stream: no event is recorded
// and no set is made.
//
// Merging free neighbours keeps the strictest condition: the union of the
// pairs, the larger stamp where both name one stream, minus pairs already
// known to be complete.
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_FENCES_H_
#define GPUALLOC_CORE_FENCES_H_

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "core/bfc/chunk_table.h"
#include "core/layer.h"
#include "core/status_macros.h"

namespace gpualloc::core {

struct StreamStamp {
  std::uintptr_t stream = 0;
  std::uint64_t stamp = 0;
};

// Sets of (stream, stamp) pairs, one entry per stream, referred to by id and
// recycled through a free list like chunk records.
class FenceSets {
 public:
  FenceSetId New() {
    FenceSetId id;
    if (!free_ids_.empty()) {
      id = free_ids_.back();
      free_ids_.pop_back();
    } else {
      id = static_cast<FenceSetId>(sets_.size());
      GPUALLOC_DCHECK(id != kNoFenceSet);
      sets_.emplace_back();
      live_.push_back(false);
    }
    live_[id] = true;
    ++live_count_;
    return id;
  }

  void Delete(FenceSetId id) {
    GPUALLOC_DCHECK(IsLive(id));
    sets_[id].clear();
    live_[id] = false;
    free_ids_.push_back(id);
    --live_count_;
  }

  // Adds (stream, stamp); an entry for the same stream keeps the larger stamp.
  void Add(FenceSetId id, std::uintptr_t stream, std::uint64_t stamp) {
    for (StreamStamp& s : sets_[id]) {
      if (s.stream == stream) {
        if (stamp > s.stamp) s.stamp = stamp;
        return;
      }
    }
    sets_[id].push_back(StreamStamp{stream, stamp});
  }

  // Gives every pair the stamp `stamp`.
  void Restamp(FenceSetId id, std::uint64_t stamp) {
    for (StreamStamp& s : sets_[id]) s.stamp = stamp;
  }

  // Keeps only the pairs for which keep(pair) is true.
  template <typename Pred>
  void Filter(FenceSetId id, Pred keep) {
    auto& set = sets_[id];
    std::size_t out = 0;
    for (const StreamStamp& s : set) {
      if (keep(s)) set[out++] = s;
    }
    set.resize(out);
  }

  // Calls visit(std::uintptr_t&) on each pair's stream.
  template <typename Visit>
  void ForEachStream(FenceSetId id, Visit&& visit) {
    for (StreamStamp& s : sets_[id]) visit(s.stream);
  }

  absl::Span<const StreamStamp> Get(FenceSetId id) const {
    GPUALLOC_DCHECK(IsLive(id));
    return sets_[id];
  }

  bool IsLive(FenceSetId id) const { return id < sets_.size() && live_[id]; }
  std::size_t live_count() const { return live_count_; }
  std::size_t MemoryBytes() const {
    return sets_.capacity() * sizeof(sets_[0]) + live_.capacity() / 8 +
           free_ids_.capacity() * sizeof(FenceSetId);
  }

 private:
  std::vector<absl::InlinedVector<StreamStamp, 2>> sets_;
  std::vector<bool> live_;
  std::vector<FenceSetId> free_ids_;
  std::size_t live_count_ = 0;
};

// What the core asks about streams: the allocator facade answers, with the
// backend's events (core/stream_order.h); tests answer with fakes.
class ReuseOracle {
 public:
  enum class Verdict {
    kReady,    // the work has completed: usable on any stream
    kWaited,   // the new stream was made to wait for the work: usable on it
    kBlocked,  // neither: look elsewhere
    kError,    // the device could not be asked: stop looking (the oracle
               // keeps the error for the caller to report)
  };

  virtual ~ReuseOracle() = default;

  // Whether the work queued on `stream` before the free stamped `stamp` is
  // already known to have completed. No device call.
  virtual bool KnownComplete(std::uintptr_t stream,
                             std::uint64_t stamp) const = 0;
  // Makes memory freed on `from` at `stamp` usable on `to` (to != from), by
  // asking the device whether the work completed or, when `may_wait` and as
  // policy allows, making `to` wait for it.
  virtual Verdict Prepare(std::uintptr_t from, std::uint64_t stamp,
                          std::uintptr_t to, bool may_wait) = 0;
};

// An oracle to which all work is complete: a backend without streams (its
// work runs in call order), or conditions that no longer matter.
class AllCompleteOracle final : public ReuseOracle {
 public:
  bool KnownComplete(std::uintptr_t, std::uint64_t) const override {
    return true;
  }
  Verdict Prepare(std::uintptr_t, std::uint64_t, std::uintptr_t,
                  bool) override {
    return Verdict::kReady;
  }
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_FENCES_H_
