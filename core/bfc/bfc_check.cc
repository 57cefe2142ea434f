// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_check.cc: BfcCore's invariant check (Validate, the invariants of
// core/bfc/bfc.h by name), the diagnosis of a bad address, the pending-stream
// queries the out-of-memory path asks, and the snapshot.
#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/bfc/bfc.h"

namespace gpualloc::core {

namespace {

absl::Status Broken(absl::string_view invariant, absl::string_view detail) {
  return absl::InternalError(
      absl::StrFormat("invariant %s broken: %s", invariant, detail));
}

}  // namespace

absl::Status BfcCore::DiagnoseBadAddress(absl::string_view operation,
                                         DeviceAddress address) const {
  // Cold path: find the region, then walk its chunks.
  auto it = region_index_.upper_bound(address);
  if (it != region_index_.begin()) {
    --it;
    const Region& r = regions_[it->second];
    if (address < r.base + r.size) {
      for (ChunkId id = r.first; id != kNoChunk; id = chunks_[id].next) {
        const Chunk& c = chunks_[id];
        if (address >= c.address + c.size) continue;
        if (c.in_use) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s(%#x): interior pointer, %d bytes into the allocation "
              "at %#x of %d bytes; pass the pointer Allocate returned",
              operation, address, address - c.address, c.address, c.requested));
        }
        return absl::FailedPreconditionError(
            absl::StrFormat("%s(%#x): not a live allocation: the address "
                            "lies in free memory [%#x, %#x); %s",
                            operation, address, c.address, c.address + c.size,
                            operation == "Deallocate"
                                ? "double free, or a pointer that was never "
                                  "allocated"
                                : "freed already, or never allocated"));
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s(%#x): pointer was not allocated by this "
                      "allocator (it lies in none of its %d regions)",
                      operation, address, region_index_.size()));
}

std::vector<std::uintptr_t> BfcCore::PendingStreams(
    const ReuseOracle& oracle, std::uintptr_t for_stream) const {
  std::vector<std::uintptr_t> streams;
  for (const StreamStamp& p : PendingConditions(oracle, for_stream)) {
    streams.push_back(p.stream);
  }
  return streams;
}

std::vector<StreamStamp> BfcCore::PendingConditions(
    const ReuseOracle& oracle, std::uintptr_t for_stream) const {
  std::vector<StreamStamp> pending;
  auto note = [&](std::uintptr_t stream, std::uint64_t stamp) {
    if (stream == for_stream || oracle.KnownComplete(stream, stamp)) return;
    for (StreamStamp& p : pending) {
      if (p.stream == stream) {
        p.stamp = std::max(p.stamp, stamp);
        return;
      }
    }
    pending.push_back(StreamStamp{stream, stamp});
  };
  for (const auto& [base, rid] : region_index_) {
    for (ChunkId id = regions_[rid].first; id != kNoChunk;
         id = chunks_[id].next) {
      const Chunk& c = chunks_[id];
      if (c.in_use) continue;
      conds_.ForEachPair(CondOf(c), 0, UINT64_MAX, note);
    }
  }
  return pending;
}

// Validate's checks, one per invariant of bfc.h (mimalloc's *_is_valid):
// each answers the first breach of its invariant it finds, or OK. The
// per-chunk checks run in one walk of each region's chunk list, in the order
// Validate always reported them; the totals that walk gathers are checked
// after it.
class BfcChecker {
 public:
  explicit BfcChecker(const BfcCore& core) : core_(core) {}

  absl::Status Run() {
    GPUALLOC_RETURN_IF_ERROR(RegionsIndexed());
    for (const auto& [base, rid] : core_.region_index_) {
      GPUALLOC_RETURN_IF_ERROR(RegionDisjoint(base, rid));
      GPUALLOC_RETURN_IF_ERROR(WalkRegion(base, rid));
    }
    GPUALLOC_RETURN_IF_ERROR(BinsExact());
    GPUALLOC_RETURN_IF_ERROR(InUseMapExact());
    GPUALLOC_RETURN_IF_ERROR(CountersExact());
    GPUALLOC_RETURN_IF_ERROR(ConditionIdsExact());
    return NoChunkLeaked();
  }

 private:
  using Region = BfcCore::Region;

  // One region's chunks, each checked against I2-I6 and I9.
  absl::Status WalkRegion(DeviceAddress base, RegionId rid) {
    const Region& r = core_.regions_[rid];
    DeviceAddress expected = base;
    ChunkId prev = kNoChunk;
    bool prev_free = false;
    for (ChunkId id = r.first; id != kNoChunk; id = core_.chunks_[id].next) {
      GPUALLOC_RETURN_IF_ERROR(ChunkLinked(base, rid, id, expected, prev));
      const Chunk& c = core_.chunks_[id];
      GPUALLOC_RETURN_IF_ERROR(ChunkGranular(id, c));
      if (!c.in_use) {
        GPUALLOC_RETURN_IF_ERROR(FreeChunkMerged(prev_free, prev, id, c));
        GPUALLOC_RETURN_IF_ERROR(FreeChunkBinned(id, c));
      }
      GPUALLOC_RETURN_IF_ERROR(ChunkInUseMapAgrees(id, c));
      GPUALLOC_RETURN_IF_ERROR(ChunkConditionValid(id, c));
      Tally(c);
      prev_free = !c.in_use;
      expected = c.address + c.size;
      prev = id;
    }
    return RegionChunksEnd(base, r, prev, expected);
  }

  void Tally(const Chunk& c) {
    if (!c.in_use) {
      sets_named_ += c.cond == Cond::kSet;
      maps_named_ += c.cond == Cond::kMap;
      ++free_chunks_;
    } else {
      sets_named_ += c.cond_id != kNoCond;
      in_use_ += c.size;
      requested_ += c.requested;
      ++in_use_chunks_;
    }
  }

  // I1: disjoint regions, index == live regions.
  absl::Status RegionsIndexed() const {
    std::size_t live_regions = 0;
    for (const Region& r : core_.regions_) live_regions += r.live;
    if (live_regions != core_.region_index_.size()) {
      return Broken("I1",
                    absl::StrFormat("%d live regions but %d in the index",
                                    live_regions, core_.region_index_.size()));
    }
    return absl::OkStatus();
  }

  // I1: the index entry at `base` names a live region there, after the
  // previous one.
  absl::Status RegionDisjoint(DeviceAddress base, RegionId rid) {
    const auto& regions = core_.regions_;
    if (rid >= regions.size() || !regions[rid].live ||
        regions[rid].base != base) {
      return Broken("I1",
                    absl::StrFormat("index entry %#x names region %d, which is "
                                    "not a live region at that base",
                                    base, rid));
    }
    if (base < previous_end_) {
      return Broken("I1",
                    absl::StrFormat(
                        "region at %#x overlaps the previous one ending at %#x",
                        base, previous_end_));
    }
    previous_end_ = base + regions[rid].size;
    reserved_ += regions[rid].size;
    return absl::OkStatus();
  }

  // I2: chunk `id` is a live record, reached once, in its place in region
  // `rid` (at `expected`, after `prev`).
  absl::Status ChunkLinked(DeviceAddress base, RegionId rid, ChunkId id,
                           DeviceAddress expected, ChunkId prev) {
    if (!core_.chunks_.IsLive(id)) {
      return Broken("I2",
                    absl::StrFormat("region %#x links to dead chunk record %d",
                                    base, id));
    }
    const Chunk& c = core_.chunks_[id];
    ++reachable_;
    if (reachable_ > core_.chunks_.live_count()) {
      return Broken("I2",
                    absl::StrFormat("region %#x: chunk list loops", base));
    }
    if (c.address != expected || c.prev != prev || c.region != rid) {
      return Broken(
          "I2", absl::StrFormat("region %#x: chunk %d at %#x (prev %d, region "
                                "%d) should be at %#x (prev %d, region %d)",
                                base, id, c.address, c.prev, c.region, expected,
                                prev, rid));
    }
    return absl::OkStatus();
  }

  // I2: the walk of region `r` ended at its recorded last chunk and its end.
  static absl::Status RegionChunksEnd(DeviceAddress base, const Region& r,
                                      ChunkId last, DeviceAddress end) {
    if (last != r.last) {
      return Broken(
          "I2", absl::StrFormat("region %#x: last chunk is %d, recorded as %d",
                                base, last, r.last));
    }
    if (end != base + r.size) {
      return Broken("I2",
                    absl::StrFormat("region %#x of %d bytes: chunks end at %#x",
                                    base, r.size, end));
    }
    return absl::OkStatus();
  }

  // I3: sizes and addresses are non-zero multiples of the minimum block.
  absl::Status ChunkGranular(ChunkId id, const Chunk& c) const {
    const std::uint64_t min_block = core_.config_.min_block_size;
    if (c.size == 0 || c.size % min_block != 0 || c.address % min_block != 0) {
      return Broken(
          "I3", absl::StrFormat("chunk %d at %#x has size %d; sizes and "
                                "addresses must be non-zero multiples of %d",
                                id, c.address, c.size, min_block));
    }
    return absl::OkStatus();
  }

  // I4: no two free neighbours.
  absl::Status FreeChunkMerged(bool prev_free, ChunkId prev, ChunkId id,
                               const Chunk& c) const {
    if (prev_free) {
      return Broken("I4",
                    absl::StrFormat("free chunks %d and %d at %#x are "
                                    "neighbours and did not merge (%s, %s)",
                                    prev, id, c.address,
                                    core_.ConditionText(core_.chunks_[prev]),
                                    core_.ConditionText(c)));
    }
    return absl::OkStatus();
  }

  // I5: every free chunk is in its bin.
  absl::Status FreeChunkBinned(ChunkId id, const Chunk& c) const {
    if (!core_.bins_.Contains(id)) {
      return Broken("I5", absl::StrFormat(
                              "free chunk %d (%#x, %d bytes) is not in its bin",
                              id, c.address, c.size));
    }
    return absl::OkStatus();
  }

  // I6: in-use chunks, and only they, are in the in-use map (and out of the
  // bins, with requested <= size).
  absl::Status ChunkInUseMapAgrees(ChunkId id, const Chunk& c) const {
    if (!c.in_use) {
      if (core_.in_use_.Find(c.address) != kNoChunk) {
        return Broken(
            "I6", absl::StrFormat("free chunk %d at %#x is in the in-use map",
                                  id, c.address));
      }
      return absl::OkStatus();
    }
    if (core_.in_use_.Find(c.address) != id) {
      return Broken("I6", absl::StrFormat("in-use chunk %d at %#x is not "
                                          "in the in-use map under its id",
                                          id, c.address));
    }
    if (core_.bins_.Contains(id)) {
      return Broken("I6", absl::StrFormat("in-use chunk %d at %#x is in a bin",
                                          id, c.address));
    }
    if (c.requested > c.size) {
      return Broken(
          "I6", absl::StrFormat("chunk %d at %#x: requested %d > size %d", id,
                                c.address, c.requested, c.size));
    }
    return absl::OkStatus();
  }

  // I9: a chunk names a live set or map exactly when its condition's kind
  // says so, and a map is well formed.
  absl::Status ChunkConditionValid(ChunkId id, const Chunk& c) const {
    const ConditionTable& conds = core_.conds_;
    if (c.in_use) {
      if (c.cond_id != kNoCond && !conds.IsLiveSet(c.cond_id)) {
        return Broken("I9", absl::StrFormat("in-use chunk %d at %#x names "
                                            "dead set %d",
                                            id, c.address, c.cond_id));
      }
      return absl::OkStatus();
    }
    const bool wants_id = c.cond == Cond::kSet || c.cond == Cond::kMap;
    bool ok = wants_id == (c.cond_id != kNoCond);
    if (ok && c.cond == Cond::kSet) {
      ok = conds.IsLiveSet(c.cond_id) && conds.Pairs(c.cond_id).size() >= 2;
    }
    if (!ok) {
      return Broken("I9", absl::StrFormat("free chunk %d at %#x: condition "
                                          "kind %d with id %d",
                                          id, c.address,
                                          static_cast<int>(c.cond), c.cond_id));
    }
    if (c.cond == Cond::kMap) {
      const std::string problem = conds.CheckMap(BfcCore::CondOf(c), c.size);
      if (!problem.empty()) {
        return Broken("I9", absl::StrFormat("free chunk %d at %#x: %s", id,
                                            c.address, problem));
      }
    }
    return absl::OkStatus();
  }

  // I5: the bins hold exactly the free chunks (and are sound themselves).
  absl::Status BinsExact() const {
    if (free_chunks_ != core_.bins_.size()) {
      return Broken("I5", absl::StrFormat("%d free chunks but %d bin entries",
                                          free_chunks_, core_.bins_.size()));
    }
    return core_.bins_.Validate();
  }

  // I6: the in-use map holds exactly the in-use chunks.
  absl::Status InUseMapExact() const {
    if (in_use_chunks_ != core_.in_use_.size()) {
      return Broken(
          "I6", absl::StrFormat("%d in-use chunks but %d entries in the in-use "
                                "map",
                                in_use_chunks_, core_.in_use_.size()));
    }
    return absl::OkStatus();
  }

  // I7: the counters are the chunks' sums, and no peak is below its value.
  absl::Status CountersExact() const {
    const CoreCounters& k = core_.counters_;
    if (k.bytes_in_use != in_use_ || k.bytes_requested != requested_ ||
        k.bytes_reserved != reserved_ ||
        k.num_chunks_in_use != in_use_chunks_) {
      return Broken("I7", absl::StrFormat(
                              "counters say in use %d, requested %d, reserved "
                              "%d, chunks %d; the chunks sum to %d, %d, %d, %d",
                              k.bytes_in_use, k.bytes_requested,
                              k.bytes_reserved, k.num_chunks_in_use, in_use_,
                              requested_, reserved_, in_use_chunks_));
    }
    if (k.peak_bytes_in_use < k.bytes_in_use ||
        k.peak_bytes_requested < k.bytes_requested ||
        k.peak_bytes_reserved < k.bytes_reserved) {
      return Broken("I7", "a peak is below its current value");
    }
    return absl::OkStatus();
  }

  // I9: every live set and map is named exactly once.
  absl::Status ConditionIdsExact() const {
    const ConditionTable& conds = core_.conds_;
    std::uint64_t in_maps = 0;
    conds.ForEachIdInMaps([&](CondId) { ++in_maps; });
    if (sets_named_ + in_maps != conds.live_sets() ||
        maps_named_ != conds.live_maps()) {
      return Broken("I9",
                    absl::StrFormat("%d live sets and %d live maps, but chunks "
                                    "name %d sets and %d maps and maps %d sets",
                                    conds.live_sets(), conds.live_maps(),
                                    sets_named_, maps_named_, in_maps));
    }
    return absl::OkStatus();
  }

  // I8: no chunk record is leaked.
  absl::Status NoChunkLeaked() const {
    if (reachable_ != core_.chunks_.live_count()) {
      return Broken(
          "I8",
          absl::StrFormat("%d live chunk records but %d reachable from regions",
                          core_.chunks_.live_count(), reachable_));
    }
    return absl::OkStatus();
  }

  const BfcCore& core_;
  // What the walk has seen so far.
  DeviceAddress previous_end_ = 0;
  std::uint64_t reserved_ = 0, in_use_ = 0, requested_ = 0, free_chunks_ = 0,
                in_use_chunks_ = 0, reachable_ = 0, sets_named_ = 0,
                maps_named_ = 0;
};

absl::Status BfcCore::Validate() const { return BfcChecker(*this).Run(); }

void BfcCore::AppendSnapshot(std::vector<RegionSnapshot>* regions) const {
  for (const auto& [base, rid] : region_index_) {
    const Region& r = regions_[rid];
    RegionSnapshot rs;
    rs.base = base;
    rs.size = r.size;
    for (ChunkId id = r.first; id != kNoChunk; id = chunks_[id].next) {
      const Chunk& c = chunks_[id];
      if (c.cond == Cond::kMap) {
        // A free chunk merged from frees under different conditions: one
        // entry per part, so that a picture shows what each part waits for
        // (the stream of a one-pair part; 0 for clean parts and sets).
        DeviceAddress at = c.address;
        for (const CondPart& part : conds_.Parts(CondOf(c))) {
          rs.chunks.push_back(ChunkSnapshot{
              at, part.bytes, 0, false,
              part.cond.kind == Cond::kStream ? part.cond.stream : 0});
          at += part.bytes;
        }
        continue;
      }
      rs.chunks.push_back(
          ChunkSnapshot{c.address, c.size, c.in_use ? c.requested : 0, c.in_use,
                        c.in_use || c.cond == Cond::kStream ? c.stream : 0});
    }
    regions->push_back(std::move(rs));
  }
}

std::size_t BfcCore::MetadataBytes() const {
  const std::size_t bins =
      FreeBins::MemoryBytes();  // nodes live in the chunk table
  const std::size_t map = in_use_.MemoryBytes();
  return sizeof(*this) + chunks_.MemoryBytes() + bins + map +
         conds_.MemoryBytes() + regions_.capacity() * sizeof(Region) +
         region_index_.size() * 64;
}

}  // namespace gpualloc::core
