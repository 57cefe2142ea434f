// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_regions.cc: BfcCore's regions: adding, joining and removing
// them, carving preallocated space, and the queries over a region's chunks (the
// cold side of core/bfc/bfc.cc, which keeps the allocate and free paths).
#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/bfc/bfc.h"

namespace gpualloc::core {

RegionId BfcCore::NewRegionId() {
  if (!free_region_ids_.empty()) {
    const RegionId id = free_region_ids_.back();
    free_region_ids_.pop_back();
    return id;
  }
  regions_.emplace_back();
  return static_cast<RegionId>(regions_.size() - 1);
}

RegionId BfcCore::AddRegion(DeviceAddress base, std::uint64_t size) {
  GPUALLOC_DCHECK(size > 0 && size % config_.min_block_size == 0);
  GPUALLOC_DCHECK(base % config_.min_block_size == 0);
  const RegionId id = NewRegionId();
  const ChunkId chunk = chunks_.New();
  Chunk& c = chunks_[chunk];
  c.address = base;
  c.size = size;
  c.region = id;
  regions_[id] = Region{base, size, chunk, chunk, true};
  region_index_.emplace(base, id);
  InsertFree(chunk);
  counters_.bytes_reserved += size;
  counters_.peak_bytes_reserved =
      std::max(counters_.peak_bytes_reserved, counters_.bytes_reserved);
  return id;
}

RegionId BfcCore::JoinRegions(RegionId left, RegionId right,
                              const ReuseOracle* oracle) {
  Region& l = regions_[left];
  Region& r = regions_[right];
  GPUALLOC_DCHECK(l.live && r.live && l.base + l.size == r.base);
  for (ChunkId id = r.first; id != kNoChunk; id = chunks_[id].next) {
    chunks_[id].region = left;
  }
  const ChunkId seam_left = l.last;
  const ChunkId seam_right = r.first;
  chunks_[seam_left].next = seam_right;
  chunks_[seam_right].prev = seam_left;
  l.size += r.size;
  l.last = r.last;
  region_index_.erase(r.base);
  r = Region();
  free_region_ids_.push_back(right);

  Chunk& a = chunks_[seam_left];
  Chunk& b = chunks_[seam_right];
  if (!a.in_use && !b.in_use) {
    if (oracle != nullptr) {
      SettleChunk(a, *oracle);
      SettleChunk(b, *oracle);
    }
    const std::uint64_t merged = a.size + b.size;
    JoinCond(a, a.size, b, /*into_left=*/true);
    RemoveFree(seam_right);
    Unlink(seam_right);
    // Out of the bins and back rather than Rekey: this cold path must not
    // tip the compiler out of inlining Rekey into Deallocate (measured: 13
    // more instructions per allocate/free pair when it did).
    RemoveFree(seam_left);
    chunks_[seam_left].size = merged;
    InsertFree(seam_left);
  }
  return left;
}

ChunkId BfcCore::ChunkHolding(RegionId rid, DeviceAddress address) const {
  ChunkId id = regions_[rid].first;
  while (chunks_[id].address + chunks_[id].size <= address) {
    id = chunks_[id].next;
  }
  return id;
}

bool BfcCore::IsFreeRange(DeviceAddress address, std::uint64_t bytes) const {
  const std::optional<RegionId> found = RegionAt(address);
  if (!found.has_value()) return false;
  const Chunk& c = chunks_[ChunkHolding(*found, address)];
  return !c.in_use && address + bytes <= c.address + c.size;
}

void BfcCore::AllocateAt(DeviceAddress address, std::uint64_t size,
                         std::uint64_t requested, std::uintptr_t stream) {
  NoteStream(stream);
  const std::optional<RegionId> found = RegionAt(address);
  GPUALLOC_DCHECK(found.has_value());
  ChunkId id = ChunkHolding(*found, address);
  GPUALLOC_DCHECK(!chunks_[id].in_use && size > 0 &&
                  address + size <= chunks_[id].address + chunks_[id].size);
  if (chunks_[id].address < address) {
    // The part before stays free, with the chunk's condition.
    InsertFree(SplitFront(id, address - chunks_[id].address,
                          /*keep_free=*/true));
  }
  if (chunks_[id].size > size) {
    id = SplitFront(id, size, /*keep_free=*/false);
  } else {
    RemoveFree(id);
    ReleaseCond(chunks_[id]);
  }
  TakeChunk(id, requested, stream);
}

void BfcCore::CarveFree(DeviceAddress address, std::uint64_t bytes) {
  const std::optional<RegionId> found = RegionAt(address);
  GPUALLOC_DCHECK(found.has_value());
  const RegionId rid = *found;
  const ChunkId id = ChunkHolding(rid, address);
  const DeviceAddress end = address + bytes;
  const Chunk& c = chunks_[id];
  GPUALLOC_DCHECK(!c.in_use && c.address <= address &&
                  end <= c.address + c.size && bytes > 0);
  const Region old = regions_[rid];
  const ChunkId prev = c.prev;
  const ChunkId next = c.next;
  const DeviceAddress chunk_start = c.address;
  const DeviceAddress chunk_end = c.address + c.size;

  // The pieces of the chunk left on either side of the hole, each with its
  // part of the condition.
  ChunkCond rest = CondOf(c);
  std::uint64_t rest_bytes = c.size;
  ChunkCond front_cond, back_cond;
  if (chunk_start < address) {
    auto [f, r] = conds_.Split(rest, rest_bytes, address - chunk_start);
    front_cond = f;
    rest = r;
    rest_bytes -= address - chunk_start;
  }
  if (end < chunk_end) {
    auto [hole, b] = conds_.Split(rest, rest_bytes, bytes);
    back_cond = b;
    rest = hole;
  }
  conds_.Release(rest);
  RemoveFree(id);
  chunks_.Delete(id);
  ChunkId front = kNoChunk, back = kNoChunk;
  if (chunk_start < address) {
    front = NewFree(chunk_start, address - chunk_start, rid, front_cond);
  }
  if (end < chunk_end) back = NewFree(end, chunk_end - end, rid, back_cond);

  // The part before the hole keeps the region id; the part after gets a new
  // one unless nothing is before the hole.
  const ChunkId before_last = front != kNoChunk ? front : prev;
  const ChunkId after_first = back != kNoChunk ? back : next;
  if (before_last != kNoChunk) {
    chunks_[before_last].next = kNoChunk;
    if (front != kNoChunk) {
      chunks_[front].prev = prev;
      if (prev != kNoChunk) chunks_[prev].next = front;
    }
    Region& r = regions_[rid];
    r.first = prev != kNoChunk ? old.first : before_last;
    r.last = before_last;
    r.size = address - old.base;
  }
  if (after_first != kNoChunk) {
    chunks_[after_first].prev = kNoChunk;
    if (back != kNoChunk) {
      chunks_[back].next = next;
      if (next != kNoChunk) chunks_[next].prev = back;
    }
    RegionId after = rid;
    if (before_last != kNoChunk) {
      after = NewRegionId();
      for (ChunkId k = after_first; k != kNoChunk; k = chunks_[k].next) {
        chunks_[k].region = after;
      }
    } else {
      region_index_.erase(old.base);
    }
    regions_[after] = Region{end, old.base + old.size - end, after_first,
                             next != kNoChunk ? old.last : after_first, true};
    region_index_.emplace(end, after);
  }
  if (before_last == kNoChunk && after_first == kNoChunk) {
    region_index_.erase(old.base);
    regions_[rid] = Region();
    free_region_ids_.push_back(rid);
  }
  if (front != kNoChunk) InsertFree(front);
  if (back != kNoChunk) InsertFree(back);
  counters_.bytes_reserved -= bytes;
}

RegionEdges BfcCore::region_edges(RegionId id, std::uintptr_t stream,
                                  const ReuseOracle& oracle, bool all) const {
  const Region& r = regions_[id];
  RegionEdges e;
  const Chunk& head = chunks_[r.first];
  const Chunk& tail = chunks_[r.last];
  if (all) {
    if (!head.in_use) e.free_head = head.size;
    if (!tail.in_use) e.free_tail = tail.size;
    return e;
  }
  // Only the bytes at each end the stream may use now: fresh memory mapped
  // next to memory another stream's work may still use makes one chunk, and
  // the growth must not count on bytes the stream cannot take.
  if (!head.in_use) {
    e.free_head =
        UsableOn(head, stream)
            ? head.size
            : conds_.UsablePrefix(CondOf(head), head.size, stream, oracle);
  }
  if (!tail.in_use) {
    e.free_tail =
        UsableOn(tail, stream)
            ? tail.size
            : conds_.UsableSuffix(CondOf(tail), tail.size, stream, oracle);
  }
  return e;
}

std::optional<RegionId> BfcCore::RegionAt(DeviceAddress address) const {
  auto it = region_index_.upper_bound(address);
  if (it == region_index_.begin()) return std::nullopt;
  --it;
  const Region& r = regions_[it->second];
  if (address >= r.base + r.size) return std::nullopt;
  return it->second;
}

std::vector<BfcCore::FreeSpan> BfcCore::FreeSpans(
    std::uint64_t min_size) const {
  std::vector<FreeSpan> spans;
  for (ChunkId id = bins_.FindBestFit(std::max<std::uint64_t>(min_size, 1));
       id != kNoChunk; id = bins_.NextFit(id)) {
    spans.push_back(FreeSpan{chunks_[id].address, chunks_[id].size});
  }
  return spans;
}

template <typename OnCondition, typename OnInUse>

void BfcCore::ForEachConditionIn(DeviceAddress address, std::uint64_t bytes,
                                 OnCondition on_condition,
                                 OnInUse on_in_use) const {
  const DeviceAddress end = address + bytes;
  std::optional<RegionId> rid = RegionAt(address);
  if (!rid.has_value()) return;
  for (ChunkId id = regions_[*rid].first; id != kNoChunk;
       id = chunks_[id].next) {
    const Chunk& c = chunks_[id];
    if (c.address >= end) break;
    if (c.address + c.size <= address) continue;
    if (c.in_use) {
      on_in_use(c.stream);
      continue;
    }
    // The parts of the chunk within the range.
    const DeviceAddress from = std::max(address, c.address);
    const DeviceAddress to = std::min(end, c.address + c.size);
    conds_.ForEachPair(CondOf(c), from - c.address, to - from, on_condition);
  }
}

std::vector<std::uintptr_t> BfcCore::StreamsUsingFree(DeviceAddress address,
                                                      std::uint64_t bytes,
                                                      const ReuseOracle& oracle,
                                                      bool in_use_too) const {
  std::vector<std::uintptr_t> streams;
  auto add = [&](std::uintptr_t stream) {
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) {
      streams.push_back(stream);
    }
  };
  ForEachConditionIn(
      address, bytes,
      [&](std::uintptr_t stream, std::uint64_t stamp) {
        if (!oracle.KnownComplete(stream, stamp)) add(stream);
      },
      [&](std::uintptr_t stream) {
        if (in_use_too) add(stream);
      });
  return streams;
}

std::vector<StreamStamp> BfcCore::PendingConditionsIn(
    DeviceAddress address, std::uint64_t bytes,
    const ReuseOracle& oracle) const {
  std::vector<StreamStamp> pending;
  ForEachConditionIn(
      address, bytes,
      [&](std::uintptr_t stream, std::uint64_t stamp) {
        if (oracle.KnownComplete(stream, stamp)) return;
        for (StreamStamp& p : pending) {
          if (p.stream == stream) {
            p.stamp = std::max(p.stamp, stamp);
            return;
          }
        }
        pending.push_back(StreamStamp{stream, stamp});
      },
      [](std::uintptr_t) {});
  return pending;
}

bool BfcCore::IsRegionFree(RegionId id) const {
  const Region& r = regions_[id];
  const Chunk& c = chunks_[r.first];
  return !c.in_use && c.size == r.size;
}

std::vector<RegionId> BfcCore::FreeRegions() const {
  std::vector<RegionId> ids;
  for (const auto& [base, id] : region_index_) {
    if (IsRegionFree(id)) ids.push_back(id);
  }
  return ids;
}

std::vector<DeviceAddress> BfcCore::RegionBases() const {
  std::vector<DeviceAddress> bases;
  bases.reserve(region_index_.size());
  for (const auto& [base, id] : region_index_) bases.push_back(base);
  return bases;
}

void BfcCore::RemoveRegion(RegionId id) {
  GPUALLOC_DCHECK(id < regions_.size() && regions_[id].live &&
                  IsRegionFree(id));
  Region& r = regions_[id];
  RemoveFree(r.first);
  ReleaseCond(chunks_[r.first]);
  chunks_.Delete(r.first);
  region_index_.erase(r.base);
  counters_.bytes_reserved -= r.size;
  r = Region();
  free_region_ids_.push_back(id);
}

}  // namespace gpualloc::core
