// core/free_bins.cc: best-fit index over free chunks (intrusive treaps).
#include "core/free_bins.h"

#include <bit>
#include <vector>

#include "absl/strings/str_format.h"

namespace gpualloc::core {

void FreeBins::Split(ChunkId t, ChunkId key, ChunkId* left, ChunkId* right) {
  while (t != kNoChunk) {
    if (Less(t, key)) {
      *left = t;
      left = &chunks_[t].right;
      t = chunks_[t].right;
    } else {
      *right = t;
      right = &chunks_[t].left;
      t = chunks_[t].left;
    }
  }
  *left = kNoChunk;
  *right = kNoChunk;
}

ChunkId FreeBins::Merge(ChunkId a, ChunkId b) {
  ChunkId result = kNoChunk;
  ChunkId* link = &result;
  while (a != kNoChunk && b != kNoChunk) {
    if (Priority(a) > Priority(b)) {
      *link = a;
      link = &chunks_[a].right;
      a = chunks_[a].right;
    } else {
      *link = b;
      link = &chunks_[b].left;
      b = chunks_[b].left;
    }
  }
  *link = a != kNoChunk ? a : b;
  return result;
}

void FreeBins::Insert(ChunkId id) {
  const int c = SizeClass(chunks_[id].size);
  const std::uint64_t priority = Priority(id);
  ChunkId* link = &roots_[c];
  while (*link != kNoChunk && Priority(*link) >= priority) {
    link = Less(id, *link) ? &chunks_[*link].left : &chunks_[*link].right;
  }
  Chunk& node = chunks_[id];
  Split(*link, id, &node.left, &node.right);
  *link = id;
  nonempty_[c / 64] |= std::uint64_t{1} << (c % 64);
  ++count_;
}

void FreeBins::Remove(ChunkId id) {
  const int c = SizeClass(chunks_[id].size);
  ChunkId* link = &roots_[c];
  while (*link != id) {
    GPUALLOC_DCHECK(*link != kNoChunk);
    link = Less(id, *link) ? &chunks_[*link].left : &chunks_[*link].right;
  }
  Chunk& node = chunks_[id];
  *link = Merge(node.left, node.right);
  node.left = node.right = kNoChunk;
  if (roots_[c] == kNoChunk) nonempty_[c / 64] &= ~(std::uint64_t{1} << (c % 64));
  --count_;
}

int FreeBins::NextNonEmpty(int size_class) const {
  if (size_class >= kNumSizeClasses) return -1;
  int word = size_class / 64;
  std::uint64_t bits = nonempty_[word] & (~std::uint64_t{0} << (size_class % 64));
  while (bits == 0) {
    if (++word == kWords) return -1;
    bits = nonempty_[word];
  }
  return word * 64 + std::countr_zero(bits);
}

ChunkId FreeBins::FindBestFit(std::uint64_t min_size) const {
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

ChunkId FreeBins::Largest() const {
  for (int word = kWords - 1; word >= 0; --word) {
    if (nonempty_[word] != 0) {
      ChunkId t = roots_[word * 64 + 63 - std::countl_zero(nonempty_[word])];
      while (chunks_[t].right != kNoChunk) t = chunks_[t].right;
      return t;
    }
  }
  return kNoChunk;
}

bool FreeBins::Contains(ChunkId id) const {
  if (!chunks_.IsLive(id)) return false;
  for (ChunkId t = roots_[SizeClass(chunks_[id].size)]; t != kNoChunk;) {
    if (t == id) return true;
    t = Less(id, t) ? chunks_[t].left : chunks_[t].right;
  }
  return false;
}

absl::Status FreeBins::Validate() const {
  std::uint64_t total = 0;
  std::vector<ChunkId> stack;
  for (int c = 0; c < kNumSizeClasses; ++c) {
    const bool bit = (nonempty_[c / 64] >> (c % 64)) & 1;
    if (bit != (roots_[c] != kNoChunk)) {
      return absl::InternalError(absl::StrFormat(
          "invariant B3 broken: size class %d's bitmap bit is %d but its treap is %s", c, bit,
          roots_[c] == kNoChunk ? "empty" : "not empty"));
    }
    // In-order walk: keys strictly increase, children never outrank parents.
    ChunkId previous = kNoChunk;
    ChunkId t = roots_[c];
    while (t != kNoChunk || !stack.empty()) {
      while (t != kNoChunk) {
        if (!chunks_.IsLive(t) || total > chunks_.live_count()) {
          return absl::InternalError(absl::StrFormat(
              "invariant B2 broken: size class %d's treap reaches dead or repeated chunk %d",
              c, t));
        }
        for (ChunkId child : {chunks_[t].left, chunks_[t].right}) {
          if (child != kNoChunk && Priority(child) > Priority(t)) {
            return absl::InternalError(absl::StrFormat(
                "invariant B2 broken: chunk %d outranks its parent %d in size class %d", child,
                t, c));
          }
        }
        stack.push_back(t);
        t = chunks_[t].left;
      }
      t = stack.back();
      stack.pop_back();
      const Chunk& chunk = chunks_[t];
      if (SizeClass(chunk.size) != c) {
        return absl::InternalError(absl::StrFormat(
            "invariant B1 broken: free chunk %d (%#x, %d bytes) sits in size class %d, "
            "belongs in %d",
            t, chunk.address, chunk.size, c, SizeClass(chunk.size)));
      }
      if (previous != kNoChunk && !Less(previous, t)) {
        return absl::InternalError(absl::StrFormat(
            "invariant B2 broken: size class %d's treap is out of order at chunk %d", c, t));
      }
      previous = t;
      ++total;
      t = chunk.right;
    }
  }
  if (total != count_) {
    return absl::InternalError(absl::StrFormat(
        "invariant B4 broken: the treaps hold %d chunks, the count says %d", total, count_));
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core
