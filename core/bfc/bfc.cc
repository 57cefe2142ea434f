// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc.cc: best-fit with coalescing over regions: the allocate and free
// paths (what another stream may use, and the switch to several streams:
// core/bfc/bfc_conditions.cc; regions: core/bfc/bfc_regions.cc; Validate,
// diagnosis and snapshot: core/bfc/bfc_check.cc).
#include "core/bfc/bfc.h"

#include <bit>
#include <vector>

namespace gpualloc::core {

BfcCore::BfcCore(const BfcConfig& config)
    : config_(config),
      large_page_threshold_(config.large_page != 0 ? config.large_page
                                                   : UINT64_MAX),
      bins_(&chunks_) {
  GPUALLOC_DCHECK(std::has_single_bit(config_.min_block_size));
}

void BfcCore::InsertFree(ChunkId id) { bins_.Insert(id); }

void BfcCore::RemoveFree(ChunkId id) { bins_.Remove(id); }

ChunkId BfcCore::NewFree(DeviceAddress address, std::uint64_t size,
                         RegionId region, ChunkCond cond) {
  const ChunkId id = chunks_.New();
  Chunk& c = chunks_[id];
  c.address = address;
  c.size = size;
  c.region = region;
  SetCond(c, cond);
  return id;
}

bool BfcCore::LargePageFits(const Chunk& c, std::uint64_t size) const {
  // Only sizes of whole big pages: aligning those saves a page (and TLB
  // reach) for sure, while aligning a ragged size mostly leaves a padding
  // fragment (measured on the bundled traces: the OPT-125m trace's
  // utilization with expandable regions fell from 99.6% to 93.6% when every
  // large allocation was aligned, and is 99.6% with this rule).
  if (size % config_.large_page != 0) return false;
  const DeviceAddress start = RoundUp(c.address, config_.large_page);
  return start + size <= c.address + c.size;
}

ChunkId BfcCore::SplitFront(ChunkId id, std::uint64_t size, bool keep_free) {
  const ChunkId front =
      chunks_.New();  // may move the table: index afresh below
  Chunk& f = chunks_[front];
  Chunk& c = chunks_[id];
  GPUALLOC_DCHECK(size > 0 && size < c.size);
  f.address = c.address;
  f.size = size;
  f.region = c.region;
  f.prev = c.prev;
  f.next = id;
  if (ABSL_PREDICT_FALSE(c.cond != Cond::kClean)) {
    if (keep_free) {
      auto [front_cond, back_cond] = conds_.Split(CondOf(c), c.size, size);
      SetCond(f, front_cond);
      SetCond(c, back_cond);
    } else if (c.cond == Cond::kMap) {
      SetCond(c, conds_.DropFront(CondOf(c), size));
    }
  }
  if (c.prev != kNoChunk) {
    chunks_[c.prev].next = front;
  } else {
    regions_[c.region].first = front;
  }
  c.prev = front;
  bins_.Rekey(id, c.size - size, c.address + size);
  return front;
}

void BfcCore::Unlink(ChunkId id) {
  const Chunk& c = chunks_[id];
  if (c.prev != kNoChunk) {
    chunks_[c.prev].next = c.next;
  } else {
    regions_[c.region].first = c.next;
  }
  if (c.next != kNoChunk) {
    chunks_[c.next].prev = c.prev;
  } else {
    regions_[c.region].last = c.prev;
  }
  chunks_.Delete(id);
}

std::optional<DeviceAddress> BfcCore::Allocate(
    std::uint64_t size, std::uint64_t requested, std::uint64_t alignment,
    std::uintptr_t stream, ReuseOracle* oracle, Search search) {
  NoteStream(stream);
  const std::uint64_t min_block = config_.min_block_size;
  // With a stricter alignment, any chunk of size + (alignment - min_block)
  // holds an aligned start followed by `size` bytes.
  const std::uint64_t fits = size + (alignment - min_block);
  ChunkId id = bins_.FindBestFit(fits);
  if (id == kNoChunk) return std::nullopt;
  DeviceAddress start;
  if (ABSL_PREDICT_TRUE(UsableOn(chunks_[id], stream))) {
    const Chunk& c = chunks_[id];
    const std::uint64_t a = PlacementAlignment(c, size, alignment);
    start = (c.address + a - 1) & ~(a - 1);
  } else {
    const Placement p = FindUsable(id, size, alignment, stream, oracle, search);
    if (p.id == kNoChunk) return std::nullopt;
    id = p.id;
    start = p.start;
  }

  if (start != chunks_[id].address) {
    // Rare: the front (alignment padding, or bytes the stream may not use
    // yet) becomes a free chunk of its own with its part of the condition;
    // `id` keeps the rest, still in the bins. The front's predecessor is in
    // use (I4) and its successor is about to be.
    InsertFree(SplitFront(id, start - chunks_[id].address, /*keep_free=*/true));
  }
  const std::uint64_t surplus = chunks_[id].size - size;
  // A map's surplus always splits off: only the placement's bytes were
  // made usable, and the rest keeps its parts' conditions.
  if (surplus >= min_block && (surplus > config_.max_internal_fragmentation ||
                               chunks_[id].cond == Cond::kMap)) {
    // The front becomes the allocation; the free chunk keeps the rest and,
    // usually, its place in the bins.
    id = SplitFront(id, size, /*keep_free=*/false);
  } else {
    RemoveFree(id);
    ReleaseCond(chunks_[id]);
  }

  TakeChunk(id, requested, stream);
  return chunks_[id].address;
}

absl::Status BfcCore::RecordStream(DeviceAddress address,
                                   std::uintptr_t stream) {
  const ChunkId id = in_use_.Find(address);
  if (id == kNoChunk) return DiagnoseBadAddress("RecordStream", address);
  NoteStream(stream);
  Chunk& c = chunks_[id];
  if (c.cond_id == kNoCond) c.cond_id = conds_.NewSet();
  conds_.AddPair(c.cond_id, stream, 0);
  return absl::OkStatus();
}

// Merges freed chunk `id` (not in use, not in the bins) with its free
// neighbours, or puts it in the bins. With several streams the merged
// condition keeps each part's (I4: free neighbours always merge).
template <bool kSeveralStreams>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void BfcCore::MergeFreed(ChunkId id) {
  Chunk& c = chunks_[id];
  const DeviceAddress address = c.address;
  const ChunkId prev = c.prev;
  const ChunkId next = c.next;
  const bool prev_free = prev != kNoChunk && !chunks_[prev].in_use;
  const bool next_free = next != kNoChunk && !chunks_[next].in_use;
  if (prev_free) {
    // The free predecessor absorbs the chunk (and a free successor): its
    // address stays, its size grows.
    Chunk& p = chunks_[prev];
    std::uint64_t merged = p.size + c.size;
    JoinCond(p, p.size, c, /*into_left=*/true);
    if (next_free) {
      Chunk& n = chunks_[next];
      JoinCond(p, merged, n, /*into_left=*/true);
      merged += n.size;
      RemoveFree(next);
      Unlink(next);
    }
    const DeviceAddress base = p.address;
    Unlink(id);
    bins_.Rekey(prev, merged, base);
  } else if (next_free) {
    // The free successor absorbs the chunk: it now starts at its address.
    Chunk& n = chunks_[next];
    const std::uint64_t merged = n.size + c.size;
    JoinCond(n, n.size, c, /*into_left=*/false);
    Unlink(id);
    bins_.Rekey(next, merged, address);
  } else {
    InsertFree(id);
  }
}

absl::Status BfcCore::Deallocate(DeviceAddress address, std::uintptr_t stream,
                                 std::uint64_t stamp,
                                 const ReuseOracle* oracle) {
  const ChunkId id = in_use_.Erase(address);
  if (id == kNoChunk) return DiagnoseBadAddress("Deallocate", address);
  NoteStream(stream);

  Chunk& c = chunks_[id];
  counters_.bytes_in_use -= c.size;
  counters_.bytes_requested -= c.requested;
  --counters_.num_chunks_in_use;
  if (ABSL_PREDICT_FALSE(multi_stream_)) {
    (void)oracle;
    FreeAmongStreams(id, stream, stamp);
    return absl::OkStatus();
  }
  // One stream so far: the block was allocated on it and is freed on it.
  c.stream = stream;
  c.free_stamp = stamp;
  if (ABSL_PREDICT_TRUE(c.cond_id == kNoCond)) {
    c.cond = Cond::kStream;
  } else {
    ConditionOfFree(c, stream, stream, stamp);
  }
  c.in_use = false;
  MergeFreed</*kSeveralStreams=*/false>(id);
  return absl::OkStatus();
}

void BfcCore::ConditionOfFree(Chunk& c, std::uintptr_t stream,
                              std::uintptr_t allocated_on,
                              std::uint64_t stamp) {
  // The freeing stream, the stream the block was allocated on (work queued
  // there may still use it too) and the streams RecordStream added, all at
  // this free's stamp.
  if (c.cond_id == kNoCond) c.cond_id = conds_.NewSet();
  conds_.Restamp(c.cond_id, stamp);
  conds_.AddPair(c.cond_id, stream, stamp);
  conds_.AddPair(c.cond_id, allocated_on, stamp);
  const absl::Span<const StreamStamp> pairs = conds_.Pairs(c.cond_id);
  if (pairs.size() == 1) {
    const StreamStamp only = pairs.front();
    ChunkCond set{Cond::kSet, c.cond_id, 0, 0};
    conds_.Release(set);
    SetCond(c, ChunkCond{Cond::kStream, kNoCond, only.stream, only.stamp});
    return;
  }
  c.cond = Cond::kSet;
  c.stream = 0;
  c.free_stamp = 0;
}

void BfcCore::FreeAmongStreams(ChunkId id, std::uintptr_t stream,
                               std::uint64_t stamp) {
  Chunk& c = chunks_[id];
  const std::uintptr_t allocated_on = c.stream;
  c.stream = stream;
  c.free_stamp = stamp;
  last_free_others_.clear();
  if (c.cond_id == kNoCond && allocated_on == stream) {
    c.cond = Cond::kStream;
  } else {
    ConditionOfFree(c, stream, allocated_on, stamp);
    if (c.cond == Cond::kSet) {
      for (const StreamStamp& p : conds_.Pairs(c.cond_id)) {
        if (p.stream != stream) last_free_others_.push_back(p.stream);
      }
    }
  }
  c.in_use = false;
  MergeFreed</*kSeveralStreams=*/true>(id);
}

std::uint64_t BfcCore::AllocatedSize(DeviceAddress address) const {
  const ChunkId id = in_use_.Find(address);
  return id == kNoChunk ? 0 : chunks_[id].size;
}

void BfcCore::ResetPeaks() {
  counters_.peak_bytes_in_use = counters_.bytes_in_use;
  counters_.peak_bytes_requested = counters_.bytes_requested;
  counters_.peak_bytes_reserved = counters_.bytes_reserved;
  counters_.largest_alloc_size = 0;
}

std::uint64_t BfcCore::LargestFreeBlock() const {
  const ChunkId id = bins_.Largest();
  return id == kNoChunk ? 0 : chunks_[id].size;
}

}  // namespace gpualloc::core
