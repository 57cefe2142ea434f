// SPDX-License-Identifier: Apache-2.0
// core/bfc/pending_frees.h: the free chunks whose stream work is not yet known
// complete, queued per stream in the order of their frees.
//
// Why. With several streams a free chunk carries a condition (core/fences.h):
// the streams whose queued work may still use it. Such a chunk stays apart
// from free neighbours under other conditions (I4 in core/bfc/bfc.h). Once the
// allocator learns that the work completed (an event query, a host wait),
// the chunk is clean and should merge with its neighbours at once: a piece
// that stays split only because nobody touched it makes large requests miss
// and the allocator grow. This index finds those chunks without a walk over
// every chunk: each free under a condition queues (chunk, stamp) on each of
// its streams; when stream S is known complete up to some stamp, the entries
// at the front of S's queue up to it are exactly the chunks to settle.
//
// Entries are hints, checked when used: a chunk may have merged away, been
// allocated, or its record reused since it was queued. A stale entry costs
// one look at a chunk record; the core decides from the chunk's own
// condition. Queues are compacted (stale entries dropped) when they
// grow past twice their size after the last compaction, so a stream whose
// work nobody asks about keeps a queue bounded by its fenced chunks.
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_PENDING_FREES_H_
#define GPUALLOC_CORE_PENDING_FREES_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "core/bfc/chunk_table.h"
#include "core/layer.h"

namespace gpualloc::core {

class PendingFrees {
 public:
  struct Entry {
    ChunkId id = kNoChunk;
    std::uint64_t stamp = 0;
  };

  // Queues chunk `id`, freed (or left) under condition (stream, stamp).
  // `still_pending(entry)` says whether an entry still names a fenced free
  // chunk of `stream`; it is asked only when the queue is compacted.
  template <typename StillPending>
  void Push(std::uintptr_t stream, ChunkId id, std::uint64_t stamp,
            StillPending still_pending) {
    Queue& q = QueueOf(stream);
    q.entries.push_back(Entry{id, stamp});
    ++size_;
    if (q.entries.size() >= 2 * q.compacted_size) {
      const std::size_t before = q.entries.size();
      std::deque<Entry> kept;
      for (const Entry& e : q.entries) {
        if (still_pending(e)) kept.push_back(e);
      }
      q.entries = std::move(kept);
      size_ -= before - q.entries.size();
      q.compacted_size = std::max<std::size_t>(kMinCompact, q.entries.size());
    }
  }

  // Pops the entries at the front of `stream`'s queue while
  // done(entry.stamp), calling settle(entry) on each after its removal
  // (settle may Push again, onto any queue). Returns the entries popped.
  template <typename Done, typename Settle>
  std::size_t PopCompleted(std::uintptr_t stream, Done done, Settle settle) {
    auto it = queues_.find(stream);
    if (it == queues_.end()) return 0;
    std::size_t popped = 0;
    // settle may add queues (rehashing the map): look the queue up afresh.
    for (;;) {
      Queue& q = queues_.find(stream)->second;
      if (q.entries.empty() || !done(q.entries.front().stamp)) break;
      const Entry e = q.entries.front();
      q.entries.pop_front();
      --size_;
      ++popped;
      settle(e);
    }
    Queue& q = queues_.find(stream)->second;
    if (q.entries.empty()) queues_.erase(stream);
    return popped;
  }

  // Entries of `stream` move to `key` (a released stream's key).
  void Rename(std::uintptr_t stream, std::uintptr_t key) {
    auto it = queues_.find(stream);
    if (it == queues_.end()) return;
    Queue moved = std::move(it->second);
    queues_.erase(it);
    Queue& q = QueueOf(key);
    for (const Entry& e : moved.entries) q.entries.push_back(e);
  }

  bool HasStream(std::uintptr_t stream) const {
    return queues_.contains(stream);
  }
  std::size_t num_streams() const { return queues_.size(); }
  std::size_t size() const { return size_; }
  std::size_t MemoryBytes() const {
    return queues_.capacity() * (sizeof(std::uintptr_t) + sizeof(Queue)) +
           size_ * sizeof(Entry);
  }

 private:
  // Below this a queue is never compacted.
  static constexpr std::size_t kMinCompact = 64;
  struct Queue {
    std::deque<Entry> entries;
    std::size_t compacted_size = kMinCompact;
  };
  Queue& QueueOf(std::uintptr_t stream) { return queues_[stream]; }

  absl::flat_hash_map<std::uintptr_t, Queue> queues_;
  std::size_t size_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_PENDING_FREES_H_
