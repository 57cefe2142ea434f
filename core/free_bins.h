// core/free_bins.h: the free chunks, indexed for best fit.
//
// Model: one treap per size class (core/size_class.h), ordered by
// (size, address), plus a bitmap of the non-empty classes. Best fit for a
// request of n bytes is the first chunk >= (n, 0) in n's own class, or else the
// smallest chunk of the first non-empty class above it: the smallest chunk that
// fits, lowest address among equal sizes. Cost: expected O(log k) in the chunks
// of one class plus a scan of at most kNumSizeClasses / 64 bitmap words.
//
// The treaps are intrusive: their links live in the chunk records (Chunk::left,
// Chunk::right) and a node's priority is a hash of its address, so inserting or
// removing a free chunk never touches the heap.
//
// Invariants (checked by Validate):
//   B1. A chunk sits in the treap of its size's class.
//   B2. Each treap is ordered by (size, address) and heap-ordered by priority.
//   B3. A class's bitmap bit is set iff its treap is non-empty.
//   B4. size() equals the total number of chunks in the treaps.
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_FREE_BINS_H_
#define GPUALLOC_CORE_FREE_BINS_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "core/chunk_table.h"
#include "core/size_class.h"

namespace gpualloc::core {

class FreeBins {
 public:
  // `chunks` holds the nodes and must outlive this index.
  explicit FreeBins(ChunkTable* chunks) : chunks_(*chunks) { roots_.fill(kNoChunk); }

  FreeBins(const FreeBins&) = delete;
  FreeBins& operator=(const FreeBins&) = delete;

  // REQUIRES: `id` is live, not in the bins, and no chunk in the bins has the
  // same (size, address). Its size and address must not change while in.
  void Insert(ChunkId id);
  // REQUIRES: `id` is in the bins.
  void Remove(ChunkId id);

  // The smallest chunk with size >= min_size (lowest address on ties), or
  // kNoChunk when none fits.
  ChunkId FindBestFit(std::uint64_t min_size) const;
  // The largest chunk, or kNoChunk when empty.
  ChunkId Largest() const;

  // Whether `id` is in the bins (O(log k)).
  bool Contains(ChunkId id) const;
  std::uint64_t size() const { return count_; }
  bool empty() const { return count_ == 0; }

  absl::Status Validate() const;

  // Host bytes of the index itself (the nodes live in the chunk table).
  static constexpr std::size_t MemoryBytes() { return sizeof(FreeBins); }

 private:
  static constexpr int kWords = (kNumSizeClasses + 63) / 64;

  bool Less(ChunkId a, ChunkId b) const {
    const Chunk& x = chunks_[a];
    const Chunk& y = chunks_[b];
    return x.size != y.size ? x.size < y.size : x.address < y.address;
  }
  std::uint64_t Priority(ChunkId id) const {
    return (chunks_[id].address >> 8) * 0x9E3779B97F4A7C15ull;
  }
  // First non-empty class >= `size_class`, or -1.
  int NextNonEmpty(int size_class) const;
  // Splits treap `t` into keys < `key` (to *left) and > `key` (to *right).
  void Split(ChunkId t, ChunkId key, ChunkId* left, ChunkId* right);
  // Joins treaps whose keys are all ordered a < b.
  ChunkId Merge(ChunkId a, ChunkId b);

  ChunkTable& chunks_;
  std::array<ChunkId, kNumSizeClasses> roots_;
  std::array<std::uint64_t, kWords> nonempty_{};
  std::uint64_t count_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_FREE_BINS_H_
