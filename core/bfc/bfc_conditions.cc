// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_conditions.cc: BfcCore's stream conditions: fence sets, making a
// chunk usable on another stream, the switch to several streams, the pending
// frees and their resolution, the merges a resolved condition allows, and
// stream renames (the allocate and free paths: core/bfc/bfc.cc).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/bfc/bfc.h"

namespace gpualloc::core {

void BfcCore::DeleteFenceSet(Chunk& c) {
  fences_.Delete(c.fence_set);
  c.fence_set = kNoFenceSet;
}

void BfcCore::NormalizeFence(Chunk& c) {
  if (c.fence != Fence::kSet) return;
  const absl::Span<const StreamStamp> pairs = fences_.Get(c.fence_set);
  if (pairs.size() > 1) return;
  if (pairs.empty()) {
    c.fence = Fence::kClean;
    c.stream = 0;
    c.free_stamp = 0;
  } else {
    c.fence = Fence::kStream;
    c.stream = pairs[0].stream;
    c.free_stamp = pairs[0].stamp;
  }
  ReleaseFenceSet(c);
}

void BfcCore::AbsorbMixedFence(Chunk& into, Chunk& from,
                               const ReuseOracle* oracle) {
  // Different streams: the union of both conditions, in a set.
  if (into.fence == Fence::kStream) {
    into.fence_set = fences_.New();
    fences_.Add(into.fence_set, into.stream, into.free_stamp);
    into.fence = Fence::kSet;
    into.stream = 0;
    into.free_stamp = 0;
  }
  if (from.fence == Fence::kStream) {
    fences_.Add(into.fence_set, from.stream, from.free_stamp);
  } else {
    for (const StreamStamp& s : fences_.Get(from.fence_set)) {
      fences_.Add(into.fence_set, s.stream, s.stamp);
    }
    ReleaseFenceSet(from);
  }
  if (oracle != nullptr) {
    fences_.Filter(into.fence_set, [oracle](const StreamStamp& s) {
      return !oracle->KnownComplete(s.stream, s.stamp);
    });
  }
  NormalizeFence(into);
}

BfcCore::Usable BfcCore::MakeUsable(ChunkId id, std::uintptr_t stream,
                                    ReuseOracle& oracle, bool may_wait) {
  Chunk& c = chunks_[id];
  if (c.fence == Fence::kStream) {
    switch (oracle.Prepare(c.stream, c.free_stamp, stream, may_wait)) {
      case ReuseOracle::Verdict::kReady:
        c.fence = Fence::kClean;
        c.stream = 0;
        c.free_stamp = 0;
        return Usable::kYes;
      case ReuseOracle::Verdict::kWaited:
        return Usable::kYes;
      case ReuseOracle::Verdict::kBlocked:
        return Usable::kNo;
      case ReuseOracle::Verdict::kError:
        return Usable::kStop;
    }
  }
  GPUALLOC_DCHECK(c.fence == Fence::kSet);
  for (const StreamStamp& s : fences_.Get(c.fence_set)) {
    if (s.stream == stream) continue;
    switch (oracle.Prepare(s.stream, s.stamp, stream, may_wait)) {
      case ReuseOracle::Verdict::kReady:
      case ReuseOracle::Verdict::kWaited:
        break;
      case ReuseOracle::Verdict::kBlocked:
        return Usable::kNo;
      case ReuseOracle::Verdict::kError:
        return Usable::kStop;
    }
  }
  // What completed no longer constrains the rest of the chunk.
  fences_.Filter(c.fence_set, [&oracle](const StreamStamp& s) {
    return !oracle.KnownComplete(s.stream, s.stamp);
  });
  NormalizeFence(c);
  return Usable::kYes;
}

bool BfcCore::KnownUsable(const Chunk& c, std::uintptr_t stream,
                          const ReuseOracle& oracle) const {
  switch (c.fence) {
    case Fence::kClean:
      return true;
    case Fence::kStream:
      return c.stream == stream || oracle.KnownComplete(c.stream, c.free_stamp);
    case Fence::kSet:
      for (const StreamStamp& s : fences_.Get(c.fence_set)) {
        if (s.stream != stream && !oracle.KnownComplete(s.stream, s.stamp)) {
          return false;
        }
      }
      return true;
  }
  return false;
}

ChunkId BfcCore::FindUsable(ChunkId first, std::uintptr_t stream,
                            ReuseOracle* oracle, Search search) {
  const bool search_all = search != Search::kFast;
  // First a chunk `stream` may use without a device call: best fit among
  // those, and no event recorded or queried while one exists.
  for (ChunkId id = first, n = 0;
       id != kNoChunk && (search_all || n < kMaxCrossStreamCandidates);
       id = bins_.NextFit(id), ++n) {
    const Chunk& c = chunks_[id];
    if (UsableOn(c, stream)) return id;
    if (oracle != nullptr && KnownUsable(c, stream, *oracle)) {
      return Resolve(id, *oracle);
    }
  }
  // Without an oracle nobody can vouch for other streams' work.
  if (oracle == nullptr) return kNoChunk;
  // Then ask about the candidates in best-fit order.
  for (ChunkId id = first, n = 0;
       id != kNoChunk && n < kMaxCrossStreamCandidates;
       id = bins_.NextFit(id), ++n) {
    switch (MakeUsable(id, stream, *oracle, search == Search::kMayWait)) {
      case Usable::kYes:
        // Its condition may have shrunk: it may merge now (I4).
        return MergeNeighbours(id);
      case Usable::kNo:
        break;
      case Usable::kStop:
        return kNoChunk;
    }
  }
  return kNoChunk;
}

void BfcCore::NoteNewStream(std::uintptr_t stream) {
  if (multi_stream_) return;
  if (solo_stream_ == kNoStreamYet) {
    solo_stream_ = stream;
    return;
  }
  multi_stream_ = true;
  UnfenceAboveHighWater();
  // From now on conditions keep chunks apart: every fenced free chunk is
  // queued, so that it merges once its work is known complete.
  for (const auto& [base, rid] : region_index_) {
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      if (!chunks_[id].in_use && chunks_[id].fence != Fence::kClean) {
        QueuePending(id);
      }
    }
  }
}

void BfcCore::QueuePending(ChunkId id) {
  const Chunk& c = chunks_[id];
  auto still = [this](std::uintptr_t stream) {
    return [this, stream](const PendingFrees::Entry& e) {
      return StillPending(stream, e.id);
    };
  };
  if (c.fence == Fence::kStream) {
    pending_.Push(c.stream, id, c.free_stamp, still(c.stream));
  } else if (c.fence == Fence::kSet) {
    for (const StreamStamp& p : fences_.Get(c.fence_set)) {
      pending_.Push(p.stream, id, p.stamp, still(p.stream));
    }
  }
}

bool BfcCore::StillPending(std::uintptr_t stream, ChunkId id) const {
  if (!chunks_.IsLive(id)) return false;
  const Chunk& c = chunks_[id];
  if (c.in_use) return false;
  switch (c.fence) {
    case Fence::kClean:
      return false;
    case Fence::kStream:
      return c.stream == stream;
    case Fence::kSet:
      for (const StreamStamp& p : fences_.Get(c.fence_set)) {
        if (p.stream == stream) return true;
      }
      return false;
  }
  return false;
}

std::size_t BfcCore::ResolveCompleted(const ReuseOracle& oracle,
                                      std::uintptr_t stream) {
  return pending_.PopCompleted(
      stream,
      [&](std::uint64_t stamp) { return oracle.KnownComplete(stream, stamp); },
      [&](const PendingFrees::Entry& e) {
        if (!StillPending(stream, e.id)) return;  // a stale hint
        // Nothing completed: a later free of this record under this stream
        // queued its own entry. Otherwise what is left of the condition
        // waits on entries queued when it was made (a merge joins only equal
        // conditions, so the surviving record has them too).
        if (DropComplete(chunks_[e.id], oracle)) MergeNeighbours(e.id);
      });
}

void BfcCore::UnfenceAboveHighWater() {
  std::vector<ChunkId> above;
  for (const auto& [base, rid] : region_index_) {
    if (base + regions_[rid].size <= high_water_) continue;
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      const Chunk& c = chunks_[id];
      if (!c.in_use && c.fence != Fence::kClean &&
          c.address + c.size > high_water_) {
        above.push_back(id);
      }
    }
  }
  for (ChunkId id : above) {
    if (chunks_[id].address < high_water_) {
      // The part below keeps the condition (a new record, `id` keeps the
      // rest in the bins).
      InsertFree(SplitFront(id, high_water_ - chunks_[id].address,
                            /*copy_fence=*/true));
    }
    Chunk& c = chunks_[id];
    ReleaseFenceSet(c);
    c.fence = Fence::kClean;
    c.stream = 0;
    c.free_stamp = 0;
  }
}

std::string BfcCore::ConditionText(const Chunk& c) const {
  switch (c.fence) {
    case Fence::kClean:
      return "clean";
    case Fence::kStream:
      return absl::StrFormat("{stream %#x at stamp %d}", c.stream,
                             c.free_stamp);
    case Fence::kSet: {
      std::vector<std::string> pairs;
      for (const StreamStamp& p : fences_.Get(c.fence_set)) {
        pairs.push_back(
            absl::StrFormat("stream %#x at stamp %d", p.stream, p.stamp));
      }
      return absl::StrCat("{", absl::StrJoin(pairs, ", "), "}");
    }
  }
  return "?";
}

bool BfcCore::SameCondition(const Chunk& a, const Chunk& b) const {
  if (a.fence != b.fence) return false;
  switch (a.fence) {
    case Fence::kClean:
      return true;
    case Fence::kStream:
      return a.stream == b.stream && a.free_stamp == b.free_stamp;
    case Fence::kSet: {
      const absl::Span<const StreamStamp> x = fences_.Get(a.fence_set);
      const absl::Span<const StreamStamp> y = fences_.Get(b.fence_set);
      if (x.size() != y.size()) return false;
      for (const StreamStamp& p : x) {
        bool found = false;
        for (const StreamStamp& q : y)
          found |= p.stream == q.stream && p.stamp == q.stamp;
        if (!found) return false;
      }
      return true;
    }
  }
  return false;
}

ChunkId BfcCore::MergeNeighbours(ChunkId id) {
  // Free `right` into free `left` (its left neighbour); left survives.
  auto merge = [this](ChunkId left, ChunkId right) {
    const std::uint64_t size = chunks_[left].size + chunks_[right].size;
    AbsorbFence(chunks_[left], chunks_[right], nullptr);
    RemoveFree(right);
    Unlink(right);
    // Out of the bins and back rather than Rekey (see JoinRegions).
    RemoveFree(left);
    chunks_[left].size = size;
    InsertFree(left);
  };
  auto mergeable = [this](ChunkId left, ChunkId right) {
    return left != kNoChunk && right != kNoChunk && !chunks_[left].in_use &&
           !chunks_[right].in_use && Mergeable(chunks_[left], chunks_[right]);
  };
  for (;;) {
    bool merged = false;
    if (mergeable(id, chunks_[id].next)) {
      merge(id, chunks_[id].next);
      merged = true;
    }
    const ChunkId prev = chunks_[id].prev;
    if (mergeable(prev, id)) {
      merge(prev, id);
      id = prev;
      merged = true;
    }
    if (!merged) return id;
  }
}

bool BfcCore::DropComplete(Chunk& c, const ReuseOracle& oracle) {
  switch (c.fence) {
    case Fence::kClean:
      return false;
    case Fence::kStream:
      if (!oracle.KnownComplete(c.stream, c.free_stamp)) return false;
      c.fence = Fence::kClean;
      c.stream = 0;
      c.free_stamp = 0;
      return true;
    case Fence::kSet: {
      const std::size_t before = fences_.Get(c.fence_set).size();
      fences_.Filter(c.fence_set, [&oracle](const StreamStamp& s) {
        return !oracle.KnownComplete(s.stream, s.stamp);
      });
      const bool changed = fences_.Get(c.fence_set).size() != before;
      NormalizeFence(c);
      return changed;
    }
  }
  return false;
}

ChunkId BfcCore::Resolve(ChunkId id, const ReuseOracle& oracle) {
  if (!DropComplete(chunks_[id], oracle)) return id;
  return MergeNeighbours(id);
}

void BfcCore::ResolveNeighbours(ChunkId id, const ReuseOracle& oracle) {
  // `id` is still marked in use, so nothing merges into it here.
  auto resolve = [&](ChunkId n) {
    if (n != kNoChunk && !chunks_[n].in_use &&
        chunks_[n].fence != Fence::kClean &&
        !SameCondition(chunks_[n], chunks_[id])) {
      Resolve(n, oracle);
    }
  };
  resolve(chunks_[id].prev);
  resolve(chunks_[id].next);
}

std::size_t BfcCore::Settle(const ReuseOracle& oracle) {
  std::vector<ChunkId> fenced;
  for (const auto& [base, rid] : region_index_) {
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      const Chunk& c = chunks_[id];
      if (!c.in_use && c.fence != Fence::kClean) fenced.push_back(id);
    }
  }
  std::size_t changed = 0;
  for (ChunkId id : fenced) {
    // Merges only delete records (none is created here): an id merged away
    // is dead, never reused.
    if (!chunks_.IsLive(id) || chunks_[id].in_use) continue;
    if (DropComplete(chunks_[id], oracle)) {
      ++changed;
      MergeNeighbours(id);
    }
  }
  return changed;
}

bool BfcCore::RegionUsableBy(RegionId id, std::uintptr_t stream,
                             const ReuseOracle& oracle) const {
  GPUALLOC_DCHECK(IsRegionFree(id));
  const Chunk& c = chunks_[regions_[id].first];
  return UsableOn(c, stream) || KnownUsable(c, stream, oracle);
}

template <typename Visit>
void BfcCore::ForEachStreamField(Visit visit) {
  for (const auto& [base, rid] : region_index_) {
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      Chunk& c = chunks_[id];
      // In use: the allocation stream, and the RecordStream streams; free:
      // the condition's streams.
      if (c.in_use || c.fence == Fence::kStream) visit(c.stream);
      if ((c.in_use || c.fence == Fence::kSet) && c.fence_set != kNoFenceSet) {
        fences_.ForEachStream(c.fence_set, visit);
      }
    }
  }
}

std::uint64_t BfcCore::StreamReferences(std::uintptr_t stream) const {
  std::uint64_t n = 0;
  const_cast<BfcCore*>(this)->ForEachStreamField(
      [&](std::uintptr_t& s) { n += s == stream; });
  return n;
}

void BfcCore::RenameStream(std::uintptr_t stream, std::uintptr_t key) {
  // The one-stream rules take every fenced chunk for the solo stream's.
  NoteStream(key);
  pending_.Rename(stream, key);
  ForEachStreamField([&](std::uintptr_t& s) {
    if (s == stream) s = key;
  });
}

}  // namespace gpualloc::core
