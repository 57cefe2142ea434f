// SPDX-License-Identifier: Apache-2.0
// core/bfc/free_bins.cc: best-fit index over free chunks (intrusive treaps).
#include "core/bfc/free_bins.h"

#include <bit>
#include <vector>

#include "absl/strings/str_format.h"

namespace gpualloc::core {

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
          "invariant B3 broken: size class %d's bitmap bit is %d but its treap "
          "is %s",
          c, bit, roots_[c] == kNoChunk ? "empty" : "not empty"));
    }
    // In-order walk: keys strictly increase, children never outrank parents.
    ChunkId previous = kNoChunk;
    ChunkId t = roots_[c];
    while (t != kNoChunk || !stack.empty()) {
      while (t != kNoChunk) {
        if (!chunks_.IsLive(t) || total > chunks_.live_count()) {
          return absl::InternalError(
              absl::StrFormat("invariant B2 broken: size class %d's treap "
                              "reaches dead or repeated chunk %d",
                              c, t));
        }
        if (t == roots_[c] && chunks_[t].parent != kNoChunk) {
          return absl::InternalError(absl::StrFormat(
              "invariant B2 broken: size class %d's root %d has parent %d", c,
              t, chunks_[t].parent));
        }
        for (ChunkId child : {chunks_[t].left, chunks_[t].right}) {
          if (child != kNoChunk && chunks_[child].parent != t) {
            return absl::InternalError(absl::StrFormat(
                "invariant B2 broken: chunk %d's parent link says %d, not %d",
                child, chunks_[child].parent, t));
          }
          if (child != kNoChunk && Priority(child) > Priority(t)) {
            return absl::InternalError(
                absl::StrFormat("invariant B2 broken: chunk %d outranks its "
                                "parent %d in size class %d",
                                child, t, c));
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
            "invariant B1 broken: free chunk %d (%#x, %d bytes) sits in size "
            "class %d, belongs in %d",
            t, chunk.address, chunk.size, c, SizeClass(chunk.size)));
      }
      if (previous != kNoChunk && !Less(previous, t)) {
        return absl::InternalError(
            absl::StrFormat("invariant B2 broken: size class %d's treap is out "
                            "of order at chunk %d",
                            c, t));
      }
      previous = t;
      ++total;
      t = chunk.right;
    }
  }
  if (total != count_) {
    return absl::InternalError(absl::StrFormat(
        "invariant B4 broken: the treaps hold %d chunks, the count says %d",
        total, count_));
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core
