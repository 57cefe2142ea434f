// SPDX-License-Identifier: Apache-2.0
// core/bfc/free_bins.h: the free chunks, indexed for best fit.
//
// Model: one treap per size class (core/bfc/size_class.h), ordered by
// (size, address), plus a bitmap of the non-empty classes. Best fit for a
// request of n bytes is the first chunk >= (n, 0) in n's own class, or else the
// smallest chunk of the first non-empty class above it: the smallest chunk that
// fits, lowest address among equal sizes. Cost: expected O(log k) in the chunks
// of one class plus a scan of at most kNumSizeClasses / 64 bitmap words.
//
// The treaps are intrusive: their links live in the chunk records (Chunk::left,
// Chunk::right, Chunk::parent) and a node's priority is a hash of its record
// id, so inserting or removing a free chunk never touches the heap, removing
// one (the parent link locates it) takes expected O(1) steps, and a chunk that
// grows or shrinks without passing a neighbour in its treap is re-keyed in
// place (TryRekey): the common case when a split leaves a remainder or a free
// merges into a free neighbour.
//
// Invariants (checked by Validate):
//   B1. A chunk sits in the treap of its size's class.
//   B2. Each treap is ordered by (size, address), heap-ordered by priority,
//       and every node's parent link names the node above it.
//   B3. A class's bitmap bit is set iff its treap is non-empty.
//   B4. size() equals the total number of chunks in the treaps.
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_FREE_BINS_H_
#define GPUALLOC_CORE_FREE_BINS_H_

#include <array>
#include <bit>
#include <cstdint>

#include "absl/status/status.h"
#include "core/bfc/chunk_table.h"
#include "core/bfc/size_class.h"
#include "core/layer.h"

namespace gpualloc::core {

class FreeBins {
 public:
  // `chunks` holds the nodes and must outlive this index.
  explicit FreeBins(ChunkTable* chunks) : chunks_(*chunks) {
    roots_.fill(kNoChunk);
  }

  FreeBins(const FreeBins&) = delete;
  FreeBins& operator=(const FreeBins&) = delete;

  // REQUIRES: `id` is live, not in the bins, and no chunk in the bins has the
  // same (size, address). Its size and address must not change while in.
  void Insert(ChunkId id);
  // REQUIRES: `id` is in the bins.
  void Remove(ChunkId id);

  // Changes the key of `id` (in the bins) to (size, address) in place when the
  // new key keeps its size class and its order among its treap neighbours:
  // expected O(1), no restructuring. Returns false, changing nothing, when it
  // would not; the caller then removes, re-keys and inserts.
  bool TryRekey(ChunkId id, std::uint64_t size, std::uint64_t address);

  // Remove(id), set the key, Insert(id), unless TryRekey does it in place.
  void Rekey(ChunkId id, std::uint64_t size, std::uint64_t address) {
    if (TryRekey(id, size, address)) return;
    Remove(id);
    chunks_[id].size = size;
    chunks_[id].address = address;
    Insert(id);
  }

  // The smallest chunk with size >= min_size (lowest address on ties), or
  // kNoChunk when none fits.
  ChunkId FindBestFit(std::uint64_t min_size) const;
  // The chunk after `id` (in the bins) in best-fit order: the next larger
  // (size, address) in its class, else the smallest of the next non-empty
  // class; kNoChunk after the largest.
  ChunkId NextFit(ChunkId id) const {
    const ChunkId s = Successor(id);
    if (s != kNoChunk) return s;
    const int found = NextNonEmpty(SizeClass(chunks_[id].size) + 1);
    if (found < 0) return kNoChunk;
    ChunkId t = roots_[found];
    while (chunks_[t].left != kNoChunk) t = chunks_[t].left;
    return t;
  }
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
  // A hash of the record id: independent of the key, and unchanged when a
  // chunk's size or address changes (which TryRekey relies on).
  static std::uint32_t Priority(ChunkId id) {
    std::uint32_t h = id * 0x9E3779B9u;
    h ^= h >> 16;
    return h * 0x85EBCA6Bu;
  }
  static bool KeyLess(std::uint64_t size_a, std::uint64_t address_a,
                      std::uint64_t size_b, std::uint64_t address_b) {
    return size_a != size_b ? size_a < size_b : address_a < address_b;
  }
  // In-order neighbours within the node's treap, or kNoChunk.
  ChunkId Predecessor(ChunkId t) const;
  ChunkId Successor(ChunkId t) const;
  // First non-empty class >= `size_class`, or -1.
  int NextNonEmpty(int size_class) const;
  // Splits treap `t` into keys < `key` (to *left) and > `key` (to *right),
  // where *left and *right are `key`'s own child links.
  void Split(ChunkId t, ChunkId key, ChunkId* left, ChunkId* right);
  // Joins treaps whose keys are all ordered a < b; the result's root gets
  // `parent` as its parent.
  ChunkId Merge(ChunkId a, ChunkId b, ChunkId parent);

  ChunkTable& chunks_;
  std::array<ChunkId, kNumSizeClasses> roots_;
  std::array<std::uint64_t, kWords> nonempty_{};
  std::uint64_t count_ = 0;
};

// Hot path, inline: called once or twice per Allocate and Deallocate.

inline void FreeBins::Split(ChunkId t, ChunkId key, ChunkId* left,
                            ChunkId* right) {
  // Pieces hang below `key`: its left and right links are the first targets.
  ChunkId left_parent = key;
  ChunkId right_parent = key;
  while (t != kNoChunk) {
    Chunk& node = chunks_[t];
    if (Less(t, key)) {
      *left = t;
      node.parent = left_parent;
      left_parent = t;
      left = &node.right;
      t = node.right;
    } else {
      *right = t;
      node.parent = right_parent;
      right_parent = t;
      right = &node.left;
      t = node.left;
    }
  }
  *left = kNoChunk;
  *right = kNoChunk;
}

inline ChunkId FreeBins::Merge(ChunkId a, ChunkId b, ChunkId parent) {
  ChunkId result = kNoChunk;
  ChunkId* link = &result;
  while (a != kNoChunk && b != kNoChunk) {
    if (Priority(a) > Priority(b)) {
      *link = a;
      chunks_[a].parent = parent;
      parent = a;
      link = &chunks_[a].right;
      a = chunks_[a].right;
    } else {
      *link = b;
      chunks_[b].parent = parent;
      parent = b;
      link = &chunks_[b].left;
      b = chunks_[b].left;
    }
  }
  const ChunkId rest = a != kNoChunk ? a : b;
  *link = rest;
  if (rest != kNoChunk) chunks_[rest].parent = parent;
  return result;
}

inline void FreeBins::Insert(ChunkId id) {
  const int c = SizeClass(chunks_[id].size);
  const std::uint32_t priority = Priority(id);
  ChunkId parent = kNoChunk;
  ChunkId* link = &roots_[c];
  while (*link != kNoChunk && Priority(*link) >= priority) {
    parent = *link;
    link = Less(id, parent) ? &chunks_[parent].left : &chunks_[parent].right;
  }
  Chunk& node = chunks_[id];
  Split(*link, id, &node.left, &node.right);
  node.parent = parent;
  *link = id;
  nonempty_[c / 64] |= std::uint64_t{1} << (c % 64);
  ++count_;
}

// Expected O(1): the parent link finds the node's slot, and merging a treap
// node's two subtrees walks only the spines between them.
inline void FreeBins::Remove(ChunkId id) {
  Chunk& node = chunks_[id];
  const int c = SizeClass(node.size);
  const ChunkId parent = node.parent;
  ChunkId* link;
  if (parent == kNoChunk) {
    GPUALLOC_DCHECK(roots_[c] == id);
    link = &roots_[c];
  } else {
    Chunk& p = chunks_[parent];
    link = p.left == id ? &p.left : &p.right;
  }
  GPUALLOC_DCHECK(*link == id);
  *link = Merge(node.left, node.right, parent);
  node.left = node.right = node.parent = kNoChunk;
  if (roots_[c] == kNoChunk) {
    nonempty_[c / 64] &= ~(std::uint64_t{1} << (c % 64));
  }
  --count_;
}

inline ChunkId FreeBins::Predecessor(ChunkId t) const {
  if (chunks_[t].left != kNoChunk) {
    t = chunks_[t].left;
    while (chunks_[t].right != kNoChunk) t = chunks_[t].right;
    return t;
  }
  ChunkId p = chunks_[t].parent;
  while (p != kNoChunk && chunks_[p].left == t) {
    t = p;
    p = chunks_[p].parent;
  }
  return p;
}

inline ChunkId FreeBins::Successor(ChunkId t) const {
  if (chunks_[t].right != kNoChunk) {
    t = chunks_[t].right;
    while (chunks_[t].left != kNoChunk) t = chunks_[t].left;
    return t;
  }
  ChunkId p = chunks_[t].parent;
  while (p != kNoChunk && chunks_[p].right == t) {
    t = p;
    p = chunks_[p].parent;
  }
  return p;
}

inline bool FreeBins::TryRekey(ChunkId id, std::uint64_t size,
                               std::uint64_t address) {
  Chunk& node = chunks_[id];
  if (SizeClass(size) != SizeClass(node.size)) return false;
  if (KeyLess(size, address, node.size, node.address)) {
    const ChunkId p = Predecessor(id);
    if (p != kNoChunk &&
        !KeyLess(chunks_[p].size, chunks_[p].address, size, address)) {
      return false;
    }
  } else {
    const ChunkId s = Successor(id);
    if (s != kNoChunk &&
        !KeyLess(size, address, chunks_[s].size, chunks_[s].address)) {
      return false;
    }
  }
  node.size = size;
  node.address = address;
  return true;
}

inline int FreeBins::NextNonEmpty(int size_class) const {
  if (size_class >= kNumSizeClasses) return -1;
  int word = size_class / 64;
  std::uint64_t bits =
      nonempty_[word] & (~std::uint64_t{0} << (size_class % 64));
  while (bits == 0) {
    if (++word == kWords) return -1;
    bits = nonempty_[word];
  }
  return word * 64 + std::countr_zero(bits);
}

inline ChunkId FreeBins::FindBestFit(std::uint64_t min_size) const {
  const int c = SizeClass(min_size);
  int found = NextNonEmpty(c);
  if (found < 0) return kNoChunk;
  if (found == c) {
    // Lower bound of (min_size, 0) inside the request's own class.
    ChunkId best = kNoChunk;
    for (ChunkId t = roots_[c]; t != kNoChunk;) {
      if (chunks_[t].size >= min_size) {
        best = t;
        t = chunks_[t].left;
      } else {
        t = chunks_[t].right;
      }
    }
    if (best != kNoChunk) return best;
    found = NextNonEmpty(c + 1);
    if (found < 0) return kNoChunk;
  }
  ChunkId t = roots_[found];
  while (chunks_[t].left != kNoChunk) t = chunks_[t].left;
  return t;
}

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_FREE_BINS_H_
