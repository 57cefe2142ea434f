// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc.cc: best-fit with coalescing over regions: the allocate and free
// paths (stream conditions, their resolution and the merges they allow:
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

void BfcCore::CopyCondition(ChunkId from, ChunkId to) {
  Chunk& t = chunks_[to];
  const Chunk& f = chunks_[from];
  t.fence = f.fence;
  t.stream = f.stream;
  t.free_stamp = f.free_stamp;
  if (f.fence == Fence::kSet) {
    t.fence_set = fences_.New();
    for (const StreamStamp& pair : fences_.Get(f.fence_set)) {
      fences_.Add(t.fence_set, pair.stream, pair.stamp);
    }
  }
  if (multi_stream_ && t.fence != Fence::kClean) QueuePending(to);
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

ChunkId BfcCore::SplitFront(ChunkId id, std::uint64_t size, bool copy_fence) {
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
  if (copy_fence) CopyCondition(id, front);
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
  if (ABSL_PREDICT_FALSE(!UsableOn(chunks_[id], stream))) {
    id = FindUsable(id, stream, oracle, search);
    if (id == kNoChunk) return std::nullopt;
  }

  alignment = PlacementAlignment(chunks_[id], size, alignment);
  const std::uint64_t misalignment = chunks_[id].address & (alignment - 1);
  if (misalignment != 0) {
    // Rare: the front padding becomes a free chunk of its own; `id` keeps the
    // aligned rest, still in the bins. The padding's predecessor is in use
    // (I4) and its successor is about to be, so it has nothing to merge with.
    InsertFree(SplitFront(id, alignment - misalignment, /*copy_fence=*/true));
  }
  const std::uint64_t surplus = chunks_[id].size - size;
  if (surplus >= min_block && surplus > config_.max_internal_fragmentation) {
    // The front becomes the allocation; the free chunk keeps the rest and,
    // usually, its place in the bins.
    id = SplitFront(id, size, /*copy_fence=*/false);
  } else {
    RemoveFree(id);
    ReleaseFenceSet(chunks_[id]);
  }

  TakeChunk(id, requested, stream);
  return chunks_[id].address;
}

std::optional<DeviceAddress> BfcCore::AllocateAcross(
    std::uint64_t size, std::uint64_t requested, std::uint64_t alignment,
    std::uintptr_t stream, ReuseOracle* oracle, bool ask) {
  if (oracle == nullptr) ask = false;
  auto usable = [&](const Chunk& c) {
    return !c.in_use &&
           (ask || UsableOn(c, stream) ||
            (oracle != nullptr && KnownUsable(c, stream, *oracle)));
  };
  // The best window: its first chunk, and the span from that chunk's start
  // to the end of the chunk where the aligned allocation ends.
  ChunkId best = kNoChunk;
  std::uint64_t best_span = UINT64_MAX;
  for (const auto& [base, rid] : region_index_) {
    // Two pointers over each run of usable chunks: `first` is the latest
    // chunk an allocation ending in `id` can start in.
    ChunkId first = kNoChunk;
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      const Chunk& c = chunks_[id];
      if (!usable(c)) {
        first = kNoChunk;
        continue;
      }
      if (first == kNoChunk) first = id;
      const DeviceAddress end = c.address + c.size;
      auto fits_from = [&](ChunkId from) {
        return RoundUp(chunks_[from].address, alignment) + size <= end;
      };
      if (!fits_from(first)) continue;
      while (first != id && fits_from(chunks_[first].next)) {
        first = chunks_[first].next;
      }
      // One chunk alone is the ordinary path's business.
      if (first == id) continue;
      const std::uint64_t span = end - chunks_[first].address;
      if (span < best_span) {
        best_span = span;
        best = first;
      }
    }
  }
  if (best == kNoChunk) return std::nullopt;

  // Cut [start, start + size) out of the window.
  const DeviceAddress start = RoundUp(chunks_[best].address, alignment);
  const DeviceAddress end = start + size;
  ChunkId id = best;
  // What the oracle was asked about may have changed its condition; those
  // chunks merge where they may (I4) once the allocation is cut out.
  std::vector<ChunkId> touched;
  if (ask) {
    // Every chunk the allocation touches must be made usable first; nothing
    // is handed out when one cannot be.
    bool all = true;
    for (ChunkId k = best; all && k != kNoChunk && chunks_[k].address < end;
         k = chunks_[k].next) {
      const Chunk& c = chunks_[k];
      if (c.address + c.size <= start || UsableOn(c, stream) ||
          KnownUsable(c, stream, *oracle)) {
        continue;
      }
      all = MakeUsable(k, stream, *oracle, /*may_wait=*/true) == Usable::kYes;
      touched.push_back(k);
    }
    if (!all) {
      for (ChunkId k : touched) {
        if (chunks_.IsLive(k) && !chunks_[k].in_use) MergeNeighbours(k);
      }
      return std::nullopt;
    }
  }
  while (chunks_[id].address + chunks_[id].size <= start) {
    id = chunks_[id].next;
  }
  if (chunks_[id].address < start) {
    // The front stays free with its condition.
    const ChunkId front =
        SplitFront(id, start - chunks_[id].address, /*copy_fence=*/true);
    InsertFree(front);
    touched.push_back(front);
  }
  if (chunks_[id].address + chunks_[id].size > end) {
    // One chunk holds it after all: its back stays free.
    const ChunkId front = SplitFront(id, size, /*copy_fence=*/false);
    touched.push_back(id);
    id = front;
  } else {
    RemoveFree(id);
    ReleaseFenceSet(chunks_[id]);
    std::uint64_t taken = chunks_[id].size;
    while (chunks_[id].address + taken < end) {
      ChunkId next = chunks_[id].next;
      GPUALLOC_DCHECK(next != kNoChunk && !chunks_[next].in_use);
      if (chunks_[next].address + chunks_[next].size > end) {
        // The back stays free with its condition; its front joins.
        touched.push_back(next);
        next = SplitFront(next, end - chunks_[next].address,
                          /*copy_fence=*/false);
      } else {
        RemoveFree(next);
        ReleaseFenceSet(chunks_[next]);
      }
      taken += chunks_[next].size;
      Unlink(next);
    }
    chunks_[id].size = taken;
  }
  GPUALLOC_DCHECK(chunks_[id].size == size);
  TakeChunk(id, requested, stream);
  for (ChunkId k : touched) {
    if (chunks_.IsLive(k) && !chunks_[k].in_use) MergeNeighbours(k);
  }
  return start;
}

absl::Status BfcCore::RecordStream(DeviceAddress address,
                                   std::uintptr_t stream) {
  const ChunkId id = in_use_.Find(address);
  if (id == kNoChunk) return DiagnoseBadAddress("RecordStream", address);
  NoteStream(stream);
  Chunk& c = chunks_[id];
  if (c.fence_set == kNoFenceSet) c.fence_set = fences_.New();
  fences_.Add(c.fence_set, stream, 0);
  return absl::OkStatus();
}

// Merges freed chunk `id` (not in use, not in the bins) with its free
// neighbours, or puts it in the bins. With several streams, only neighbours
// under the same condition merge (I4).
template <bool kSeveralStreams>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void BfcCore::MergeFreed(
    ChunkId id, const ReuseOracle* oracle) {
  Chunk& c = chunks_[id];
  const DeviceAddress address = c.address;
  const ChunkId prev = c.prev;
  const ChunkId next = c.next;
  bool prev_free = prev != kNoChunk && !chunks_[prev].in_use;
  bool next_free = next != kNoChunk && !chunks_[next].in_use;
  if constexpr (kSeveralStreams) {
    prev_free = prev_free && SameCondition(chunks_[prev], c);
    next_free = next_free && SameCondition(chunks_[next], c);
  }
  if (prev_free) {
    // The free predecessor absorbs the chunk (and a free successor): its
    // address stays, its size grows, its condition becomes the union.
    Chunk& p = chunks_[prev];
    std::uint64_t merged = p.size + c.size;
    AbsorbFence(p, c, oracle);
    if (next_free) {
      Chunk& n = chunks_[next];
      merged += n.size;
      AbsorbFence(p, n, oracle);
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
    AbsorbFence(n, c, oracle);
    Unlink(id);
    bins_.Rekey(next, merged, address);
  } else {
    InsertFree(id);
    return;
  }
  if constexpr (kSeveralStreams) {
    // The merge dropped what the oracle knows complete: the condition may
    // now equal the next chunk out's (I4).
    MergeNeighbours(prev_free ? prev : next);
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
    FreeAmongStreams(id, stream, stamp, oracle);
    return absl::OkStatus();
  }
  // One stream so far: the block was allocated on it and is freed on it.
  c.stream = stream;
  c.free_stamp = stamp;
  if (ABSL_PREDICT_TRUE(c.fence_set == kNoFenceSet)) {
    c.fence = Fence::kStream;
  } else {
    FenceFreed(c, stream, stream, stamp);
  }
  c.in_use = false;
  MergeFreed</*kSeveralStreams=*/false>(id, oracle);
  return absl::OkStatus();
}

void BfcCore::FenceFreed(Chunk& c, std::uintptr_t stream,
                         std::uintptr_t allocated_on, std::uint64_t stamp) {
  // The freeing stream, the stream the block was allocated on (work queued
  // there may still use it too) and the streams RecordStream added, all at
  // this free's stamp.
  if (c.fence_set == kNoFenceSet) c.fence_set = fences_.New();
  fences_.Restamp(c.fence_set, stamp);
  fences_.Add(c.fence_set, stream, stamp);
  fences_.Add(c.fence_set, allocated_on, stamp);
  c.fence = Fence::kSet;
  c.stream = 0;
  c.free_stamp = 0;
  NormalizeFence(c);
}

void BfcCore::FreeAmongStreams(ChunkId id, std::uintptr_t stream,
                               std::uint64_t stamp, const ReuseOracle* oracle) {
  Chunk& c = chunks_[id];
  const std::uintptr_t allocated_on = c.stream;
  c.stream = stream;
  c.free_stamp = stamp;
  last_free_others_.clear();
  if (c.fence_set == kNoFenceSet && allocated_on == stream) {
    c.fence = Fence::kStream;
  } else {
    FenceFreed(c, stream, allocated_on, stamp);
    if (c.fence == Fence::kSet) {
      for (const StreamStamp& p : fences_.Get(c.fence_set)) {
        if (p.stream != stream) last_free_others_.push_back(p.stream);
      }
    }
  }
  // Neighbours whose work is known complete may merge now.
  if (oracle != nullptr) ResolveNeighbours(id, *oracle);
  chunks_[id].in_use = false;
  QueuePending(id);
  MergeFreed</*kSeveralStreams=*/true>(id, oracle);
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
