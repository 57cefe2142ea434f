// SPDX-License-Identifier: Apache-2.0
// core/bfc/chunk_table.h: chunk records, referred to by 32-bit handles.
//
// A chunk is a contiguous piece of a region, either handed out (in use) or
// free. Records live in one vector and are recycled through a free list of ids,
// so creating or deleting a chunk on the hot path allocates no heap memory once
// the vector has grown to the workload's high-water mark. Ids stay valid while
// the chunk lives; references do not survive New() (the vector may move).
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_CHUNK_TABLE_H_
#define GPUALLOC_CORE_CHUNK_TABLE_H_

#include <cstdint>
#include <vector>

#include "core/layer.h"
#include "core/status_macros.h"
#include "core/streams/condition.h"

namespace gpualloc::core {

using ChunkId = std::uint32_t;
using RegionId = std::uint32_t;
inline constexpr ChunkId kNoChunk = UINT32_MAX;

// One 64-byte cache line per record: a chunk is read whole (its key, links
// and state), and an unaligned 56-byte record straddles two lines 7 times in 8
// (tools/bench/instructions.sh: 10.8 -> 7.8 L1 misses per random pair at 1000
// live allocations).
struct alignas(64) Chunk {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  union {
    std::uint64_t requested = 0;  // in use: bytes as asked
    std::uint64_t free_stamp;     // free under Cond::kStream: its stamp
  };
  // In use: the stream Allocate named. Free under Cond::kStream: the
  // condition's stream, else 0.
  std::uintptr_t stream = 0;
  ChunkId prev = kNoChunk;  // neighbours in address order within the region
  ChunkId next = kNoChunk;
  ChunkId left = kNoChunk;  // free chunks: links in their size class's treap
  ChunkId right = kNoChunk;
  ChunkId parent = kNoChunk;
  RegionId region = 0;
  bool in_use = false;
  bool live = false;         // false while the record sits on the free list
  Cond cond = Cond::kClean;  // free chunks only (core/streams/condition.h)
  // Free under Cond::kSet or kMap: the table's set or map. In use: the set of
  // streams RecordStream added (their stamps unused), or kNoCond.
  CondId cond_id = kNoCond;
};
static_assert(sizeof(Chunk) == 64, "a chunk record is one cache line");

class ChunkTable {
 public:
  ChunkId New() {
    ChunkId id;
    if (!free_ids_.empty()) {
      id = free_ids_.back();
      free_ids_.pop_back();
      chunks_[id] = Chunk();
    } else {
      id = static_cast<ChunkId>(chunks_.size());
      GPUALLOC_DCHECK(id != kNoChunk);
      chunks_.emplace_back();
    }
    chunks_[id].live = true;
    ++live_;
    return id;
  }

  void Delete(ChunkId id) {
    GPUALLOC_DCHECK(id < chunks_.size() && chunks_[id].live);
    chunks_[id].live = false;
    free_ids_.push_back(id);
    --live_;
  }

  Chunk& operator[](ChunkId id) { return chunks_[id]; }
  const Chunk& operator[](ChunkId id) const { return chunks_[id]; }

  bool IsLive(ChunkId id) const {
    return id < chunks_.size() && chunks_[id].live;
  }
  std::size_t live_count() const { return live_; }
  // Records ever created: live ones plus recycled ones.
  std::size_t capacity() const { return chunks_.size(); }
  std::size_t MemoryBytes() const {
    return chunks_.capacity() * sizeof(Chunk) +
           free_ids_.capacity() * sizeof(ChunkId);
  }

 private:
  std::vector<Chunk> chunks_;
  std::vector<ChunkId> free_ids_;
  std::size_t live_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_CHUNK_TABLE_H_
