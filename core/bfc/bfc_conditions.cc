// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_conditions.cc: BfcCore and the streams: what another stream
// may use (the search past a best fit it may not use at once), merged
// conditions, settling, the switch to several streams and stream renames
// (the allocate and free paths: core/bfc/bfc.cc; the algebra of conditions:
// core/streams/condition.h).
#include <algorithm>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/bfc/bfc.h"

namespace gpualloc::core {

void BfcCore::ReleaseCondSlow(Chunk& c) {
  if (c.in_use) {
    // RecordStream's set of streams.
    ChunkCond set{Cond::kSet, c.cond_id, 0, 0};
    conds_.Release(set);
  } else {
    ChunkCond cond = CondOf(c);
    conds_.Release(cond);
    c.stream = 0;
    c.free_stamp = 0;
  }
  c.cond_id = kNoCond;
}

void BfcCore::JoinCondSlow(Chunk& into, std::uint64_t into_bytes, Chunk& from,
                           bool into_left) {
  const ChunkCond a = CondOf(into);
  const ChunkCond b = CondOf(from);
  const ChunkCond joined =
      into_left ? conds_.Join(a, into_bytes, b, from.size, !multi_stream_)
                : conds_.Join(b, from.size, a, into_bytes, !multi_stream_);
  SetCond(into, joined);
  from.cond = Cond::kClean;
  from.cond_id = kNoCond;
}

BfcCore::Placement BfcCore::UsableWithoutAsking(ChunkId id, std::uint64_t size,
                                                std::uint64_t alignment,
                                                std::uintptr_t stream,
                                                const ReuseOracle& oracle,
                                                std::uint64_t* run) {
  Chunk& c = chunks_[id];
  SettleChunk(c, oracle);
  if (c.cond != Cond::kMap) {
    if (!UsableOn(c, stream) &&
        !conds_.UsableNow(CondOf(c), 0, c.size, stream, oracle)) {
      return Placement{};
    }
    *run = c.size;
    return PlaceAtStart(id, size, alignment);
  }
  // A map: the tightest run of parts the stream may use (its own frees,
  // clean memory, memory whose work is known complete), as if those runs
  // were chunks of their own.
  const std::uint64_t a = PlacementAlignment(c, size, alignment);
  const std::optional<ConditionTable::Window> w = conds_.BestUsableWindow(
      CondOf(c), c.address, c.size, size, a, stream, oracle);
  if (!w.has_value()) return Placement{};
  *run = w->run;
  return Placement{id, c.address + w->offset};
}

BfcCore::Usable BfcCore::MakeUsable(const Placement& p, std::uint64_t size,
                                    std::uintptr_t stream, ReuseOracle& oracle,
                                    ReuseOracle::Ask ask) {
  const Chunk& c = chunks_[p.id];
  // The pairs the placement's bytes overlap that are not known ordered
  // before `stream`'s next work, each stream once (its largest stamp).
  absl::InlinedVector<StreamStamp, 4> pairs;
  conds_.ForEachPair(CondOf(c), p.start - c.address, size,
                     [&](std::uintptr_t s, std::uint64_t stamp) {
                       if (oracle.KnownOrdered(stream, s, stamp)) return;
                       for (StreamStamp& q : pairs) {
                         if (q.stream == s) {
                           q.stamp = std::max(q.stamp, stamp);
                           return;
                         }
                       }
                       pairs.push_back(StreamStamp{s, stamp});
                     });
  for (const StreamStamp& q : pairs) {
    switch (oracle.Prepare(q.stream, q.stamp, stream, ask)) {
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
  if (!pairs.empty()) SettleChunk(chunks_[p.id], oracle);
  return Usable::kYes;
}

BfcCore::Placement BfcCore::FindUsable(ChunkId first, std::uint64_t size,
                                       std::uint64_t alignment,
                                       std::uintptr_t stream,
                                       ReuseOracle* oracle, Search search) {
  if (oracle == nullptr) {
    // Nobody can vouch for other streams' work: only memory the stream may
    // use by its condition alone.
    for (ChunkId id = first, n = 0;
         id != kNoChunk &&
         (search != Search::kFast || n < kMaxCrossStreamCandidates);
         id = bins_.NextFit(id), ++n) {
      if (UsableOn(chunks_[id], stream)) {
        return PlaceAtStart(id, size, alignment);
      }
    }
    return Placement{};
  }
  if (search == Search::kBestFit) {
    // The best fit whichever stream freed it, made usable by a wait where
    // its freeing work is not known complete.
    const Placement p = PlaceAtStart(first, size, alignment);
    switch (MakeUsable(p, size, stream, *oracle, ReuseOracle::Ask::kWait)) {
      case Usable::kYes:
        return p;
      case Usable::kStop:
        return Placement{};
      case Usable::kNo:
        break;  // the oracle may not wait now: as kFast
    }
    search = Search::kFast;
  }
  const bool search_all = search != Search::kFast;
  // First a placement `stream` may use without a device call: the best fit
  // among the free memory it may use (whole chunks, or runs of parts of
  // merged ones), and nothing recorded, queried or waited for while one
  // exists. Candidates come in size order: once a chunk is no smaller than
  // the best run found, none after it holds a tighter one.
  Placement best;
  std::uint64_t best_run = UINT64_MAX;
  for (ChunkId id = first, n = 0;
       id != kNoChunk && (search_all || n < kMaxCrossStreamCandidates) &&
       chunks_[id].size < best_run;
       id = bins_.NextFit(id), ++n) {
    std::uint64_t run = 0;
    const Placement p =
        UsableWithoutAsking(id, size, alignment, stream, *oracle, &run);
    if (p.id != kNoChunk && run < best_run) {
      best = p;
      best_run = run;
    }
  }
  if (best.id != kNoChunk) return best;
  // Then ask about the candidates' placements in best-fit order: questions
  // (on the oracle's budget in the hot path), except with kMayWait, when
  // the best fit the oracle can make usable is taken (a wait where its work
  // is still running).
  const ReuseOracle::Ask ask =
      search == Search::kFast  ? ReuseOracle::Ask::kIfCheap
      : search == Search::kAll ? ReuseOracle::Ask::kQuery
                               : ReuseOracle::Ask::kWait;
  for (ChunkId id = first, n = 0;
       id != kNoChunk && n < kMaxCrossStreamCandidates;
       id = bins_.NextFit(id), ++n) {
    const Placement p = PlaceAtStart(id, size, alignment);
    switch (MakeUsable(p, size, stream, *oracle, ask)) {
      case Usable::kYes:
        return p;
      case Usable::kNo:
        break;
      case Usable::kStop:
        return Placement{};
    }
  }
  return Placement{};
}

void BfcCore::NoteNewStream(std::uintptr_t stream) {
  if (multi_stream_) return;
  if (solo_stream_ == kNoStreamYet) {
    solo_stream_ = stream;
    return;
  }
  multi_stream_ = true;
  CleanAboveHighWater();
}

void BfcCore::CleanAboveHighWater() {
  for (const auto& [base, rid] : region_index_) {
    if (base + regions_[rid].size <= high_water_) continue;
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      Chunk& c = chunks_[id];
      if (c.in_use || c.cond == Cond::kClean ||
          c.address + c.size <= high_water_) {
        continue;
      }
      if (c.address >= high_water_) {
        ReleaseCond(c);
        continue;
      }
      // The part below keeps the condition, the part above is clean.
      const std::uint64_t below = high_water_ - c.address;
      auto [front, back] = conds_.Split(CondOf(c), c.size, below);
      conds_.Release(back);
      SetCond(c, conds_.Join(front, below, ChunkCond(), c.size - below,
                             /*solo=*/false));
    }
  }
}

ChunkId BfcCore::MergeNeighbours(ChunkId id) {
  // Free `right` into free `left` (its left neighbour); left survives.
  auto merge = [this](ChunkId left, ChunkId right) {
    const std::uint64_t size = chunks_[left].size + chunks_[right].size;
    JoinCond(chunks_[left], chunks_[left].size, chunks_[right],
             /*into_left=*/true);
    RemoveFree(right);
    Unlink(right);
    // Out of the bins and back rather than Rekey (see JoinRegions).
    RemoveFree(left);
    chunks_[left].size = size;
    InsertFree(left);
  };
  auto free_pair = [this](ChunkId left, ChunkId right) {
    return left != kNoChunk && right != kNoChunk && !chunks_[left].in_use &&
           !chunks_[right].in_use;
  };
  if (free_pair(id, chunks_[id].next)) merge(id, chunks_[id].next);
  const ChunkId prev = chunks_[id].prev;
  if (free_pair(prev, id)) {
    merge(prev, id);
    id = prev;
  }
  return id;
}

std::size_t BfcCore::Settle(const ReuseOracle& oracle) {
  std::size_t changed = 0;
  for (const auto& [base, rid] : region_index_) {
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      Chunk& c = chunks_[id];
      if (!c.in_use) changed += SettleChunk(c, oracle);
    }
  }
  return changed;
}

bool BfcCore::RegionUsableBy(RegionId id, std::uintptr_t stream,
                             const ReuseOracle& oracle) const {
  GPUALLOC_DCHECK(IsRegionFree(id));
  const Chunk& c = chunks_[regions_[id].first];
  return UsableOn(c, stream) ||
         conds_.UsableNow(CondOf(c), 0, c.size, stream, oracle);
}

template <typename Visit>
void BfcCore::ForEachStreamField(Visit visit) {
  for (const auto& [base, rid] : region_index_) {
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      Chunk& c = chunks_[id];
      if (c.in_use) {
        // The allocation stream, and the RecordStream streams.
        visit(c.stream);
        if (c.cond_id != kNoCond) {
          ChunkCond set{Cond::kSet, c.cond_id, 0, 0};
          conds_.ForEachStreamField(set, visit);
        }
        continue;
      }
      ChunkCond cond = CondOf(c);
      conds_.RenameStreams(cond, visit);
      SetCond(c, cond);
    }
  }
}

std::uint64_t BfcCore::StreamReferences(std::uintptr_t stream) const {
  std::uint64_t n = 0;
  for (const auto& [base, rid] : region_index_) {
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      const Chunk& c = chunks_[id];
      if (c.in_use) {
        n += c.stream == stream;
        if (c.cond_id != kNoCond) {
          for (const StreamStamp& p : conds_.Pairs(c.cond_id)) {
            n += p.stream == stream;
          }
        }
        continue;
      }
      conds_.ForEachPair(
          CondOf(c), 0, UINT64_MAX,
          [&](std::uintptr_t s, std::uint64_t) { n += s == stream; });
    }
  }
  return n;
}

void BfcCore::RenameStream(std::uintptr_t stream, std::uintptr_t key) {
  // The one-stream rules take every condition for the solo stream's.
  NoteStream(key);
  ForEachStreamField([&](std::uintptr_t& s) {
    if (s == stream) s = key;
  });
}

}  // namespace gpualloc::core
