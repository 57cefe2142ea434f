// SPDX-License-Identifier: Apache-2.0
// core/bfc_check.cc: BfcCore's invariant check (Validate, the invariants of
// core/bfc.h by name), the diagnosis of a bad address, the pending-stream
// queries the out-of-memory path asks, and the snapshot.
#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/bfc.h"

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
      if (c.fence == Fence::kStream) note(c.stream, c.free_stamp);
      if (c.fence == Fence::kSet) {
        for (const StreamStamp& s : fences_.Get(c.fence_set)) {
          note(s.stream, s.stamp);
        }
      }
    }
  }
  return pending;
}

absl::Status BfcCore::Validate() const {
  const std::uint64_t min_block = config_.min_block_size;
  // I1: disjoint regions, index == live regions.
  std::size_t live_regions = 0;
  for (const Region& r : regions_) live_regions += r.live;
  if (live_regions != region_index_.size()) {
    return Broken("I1", absl::StrFormat("%d live regions but %d in the index",
                                        live_regions, region_index_.size()));
  }
  DeviceAddress previous_end = 0;
  std::uint64_t reserved = 0, in_use = 0, requested = 0, free_chunks = 0,
                in_use_chunks = 0, reachable = 0, fence_sets = 0;
  for (const auto& [base, rid] : region_index_) {
    if (rid >= regions_.size() || !regions_[rid].live ||
        regions_[rid].base != base) {
      return Broken("I1",
                    absl::StrFormat("index entry %#x names region %d, which is "
                                    "not a live region at that base",
                                    base, rid));
    }
    const Region& r = regions_[rid];
    if (base < previous_end) {
      return Broken("I1",
                    absl::StrFormat(
                        "region at %#x overlaps the previous one ending at %#x",
                        base, previous_end));
    }
    previous_end = base + r.size;
    reserved += r.size;
    // I2-I6 over the region's chunks.
    DeviceAddress expected = base;
    ChunkId prev = kNoChunk;
    bool prev_free = false;
    for (ChunkId id = r.first; id != kNoChunk; id = chunks_[id].next) {
      if (!chunks_.IsLive(id)) {
        return Broken(
            "I2", absl::StrFormat("region %#x links to dead chunk record %d",
                                  base, id));
      }
      const Chunk& c = chunks_[id];
      ++reachable;
      if (reachable > chunks_.live_count()) {
        return Broken("I2",
                      absl::StrFormat("region %#x: chunk list loops", base));
      }
      if (c.address != expected || c.prev != prev || c.region != rid) {
        return Broken("I2", absl::StrFormat(
                                "region %#x: chunk %d at %#x (prev %d, region "
                                "%d) should be at %#x (prev %d, region %d)",
                                base, id, c.address, c.prev, c.region, expected,
                                prev, rid));
      }
      if (c.size == 0 || c.size % min_block != 0 ||
          c.address % min_block != 0) {
        return Broken(
            "I3", absl::StrFormat("chunk %d at %#x has size %d; sizes and "
                                  "addresses must be non-zero multiples of %d",
                                  id, c.address, c.size, min_block));
      }
      if (!c.in_use) {
        if (prev_free && Mergeable(chunks_[prev], c)) {
          return Broken(
              "I4", absl::StrFormat(
                        "free chunks %d and %d at %#x are "
                        "neighbours and did not merge%s",
                        prev, id, c.address,
                        multi_stream_
                            ? absl::StrCat(" (both: ", ConditionText(c), ")")
                            : ""));
        }
        if (!bins_.Contains(id)) {
          return Broken(
              "I5",
              absl::StrFormat("free chunk %d (%#x, %d bytes) is not in its bin",
                              id, c.address, c.size));
        }
        if (in_use_.Find(c.address) != kNoChunk) {
          return Broken(
              "I6", absl::StrFormat("free chunk %d at %#x is in the in-use map",
                                    id, c.address));
        }
        const bool wants_set = c.fence == Fence::kSet;
        if (wants_set != (c.fence_set != kNoFenceSet) ||
            (wants_set && (!fences_.IsLive(c.fence_set) ||
                           fences_.Get(c.fence_set).empty()))) {
          return Broken(
              "I9", absl::StrFormat("free chunk %d at %#x: fence kind %d with "
                                    "fence set %d (live %d)",
                                    id, c.address, static_cast<int>(c.fence),
                                    c.fence_set, fences_.IsLive(c.fence_set)));
        }
        fence_sets += wants_set;
        ++free_chunks;
      } else {
        if (in_use_.Find(c.address) != id) {
          return Broken("I6", absl::StrFormat("in-use chunk %d at %#x is not "
                                              "in the in-use map under its id",
                                              id, c.address));
        }
        if (bins_.Contains(id)) {
          return Broken(
              "I6", absl::StrFormat("in-use chunk %d at %#x is in a bin", id,
                                    c.address));
        }
        if (c.requested > c.size) {
          return Broken(
              "I6", absl::StrFormat("chunk %d at %#x: requested %d > size %d",
                                    id, c.address, c.requested, c.size));
        }
        if (c.fence_set != kNoFenceSet && !fences_.IsLive(c.fence_set)) {
          return Broken("I9", absl::StrFormat("in-use chunk %d at %#x names "
                                              "dead fence set %d",
                                              id, c.address, c.fence_set));
        }
        fence_sets += c.fence_set != kNoFenceSet;
        in_use += c.size;
        requested += c.requested;
        ++in_use_chunks;
      }
      prev_free = !c.in_use;
      expected = c.address + c.size;
      prev = id;
    }
    if (prev != r.last) {
      return Broken(
          "I2", absl::StrFormat("region %#x: last chunk is %d, recorded as %d",
                                base, prev, r.last));
    }
    if (expected != base + r.size) {
      return Broken("I2",
                    absl::StrFormat("region %#x of %d bytes: chunks end at %#x",
                                    base, r.size, expected));
    }
  }
  if (free_chunks != bins_.size()) {
    return Broken("I5", absl::StrFormat("%d free chunks but %d bin entries",
                                        free_chunks, bins_.size()));
  }
  GPUALLOC_RETURN_IF_ERROR(bins_.Validate());
  if (in_use_chunks != in_use_.size()) {
    return Broken("I6", absl::StrFormat(
                            "%d in-use chunks but %d entries in the in-use map",
                            in_use_chunks, in_use_.size()));
  }
  const CoreCounters& k = counters_;
  if (k.bytes_in_use != in_use || k.bytes_requested != requested ||
      k.bytes_reserved != reserved || k.num_chunks_in_use != in_use_chunks) {
    return Broken(
        "I7", absl::StrFormat("counters say in use %d, requested %d, reserved "
                              "%d, chunks %d; the chunks sum to %d, %d, %d, %d",
                              k.bytes_in_use, k.bytes_requested,
                              k.bytes_reserved, k.num_chunks_in_use, in_use,
                              requested, reserved, in_use_chunks));
  }
  if (k.peak_bytes_in_use < k.bytes_in_use ||
      k.peak_bytes_requested < k.bytes_requested ||
      k.peak_bytes_reserved < k.bytes_reserved) {
    return Broken("I7", "a peak is below its current value");
  }
  if (fence_sets != fences_.live_count()) {
    return Broken("I9", absl::StrFormat("%d live fence sets but chunks name %d",
                                        fences_.live_count(), fence_sets));
  }
  if (reachable != chunks_.live_count()) {
    return Broken(
        "I8",
        absl::StrFormat("%d live chunk records but %d reachable from regions",
                        chunks_.live_count(), reachable));
  }
  return absl::OkStatus();
}

void BfcCore::AppendSnapshot(std::vector<RegionSnapshot>* regions) const {
  for (const auto& [base, rid] : region_index_) {
    const Region& r = regions_[rid];
    RegionSnapshot rs;
    rs.base = base;
    rs.size = r.size;
    for (ChunkId id = r.first; id != kNoChunk; id = chunks_[id].next) {
      const Chunk& c = chunks_[id];
      rs.chunks.push_back(
          ChunkSnapshot{c.address, c.size, c.in_use ? c.requested : 0, c.in_use,
                        c.in_use || c.fence == Fence::kStream ? c.stream : 0});
    }
    regions->push_back(std::move(rs));
  }
}

std::size_t BfcCore::MetadataBytes() const {
  const std::size_t bins =
      FreeBins::MemoryBytes();  // nodes live in the chunk table
  const std::size_t map = in_use_.MemoryBytes();
  return sizeof(*this) + chunks_.MemoryBytes() + bins + map +
         fences_.MemoryBytes() + pending_.MemoryBytes() +
         regions_.capacity() * sizeof(Region) + region_index_.size() * 64;
}

}  // namespace gpualloc::core
