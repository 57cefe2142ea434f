// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc.h: best-fit with coalescing over regions: the allocator's
// algorithm.
//
// Model. The core is given regions: contiguous device address ranges that some
// backend produced. Each region is tiled by chunks linked in address order. A
// free chunk sits in the free bins (core/bfc/free_bins.h); an in-use chunk sits
// in a hash map from its address, so Deallocate finds it in O(1) and host
// memory grows with the number of chunks, never with the size of a region.
//   Allocate: take the best-fitting free chunk (smallest that fits, lowest
//     address on ties), cut front padding off for alignment, and split the
//     surplus off as a new free chunk unless it is within the split bound.
//   Deallocate: mark the chunk free and merge it with free neighbours.
// The core makes no device calls and takes no locks: the allocator facade
// (core/bfc/bfc_allocator.h) holds the lock and talks to the backend, telling
// the core when a region arrives (AddRegion) or leaves (RemoveRegion).
//
// Invariants (numbered; Validate() checks each and names the broken one):
//   I1. Regions are disjoint; the region index holds exactly the live regions.
//   I2. A region's chunks tile it: the first starts at the base, each next one
//       starts where its predecessor ends, the last ends at the region's end
//       and is the region's recorded last chunk, prev/next links agree, and
//       every chunk names its region.
//   I3. Chunk sizes are non-zero multiples of the minimum block size and
//       addresses are multiples of it.
//   I4. No two neighbouring free chunks: free neighbours always merge.
//   I5. Every free chunk is in the bins exactly once, under its own size and
//       address, and the bins hold nothing else (plus FreeBins' B1-B4).
//   I6. Every in-use chunk is in the in-use map under its address, in no bin,
//       with requested <= size; the map holds nothing else.
//   I7. The counters equal the sums they summarize (bytes in use, requested,
//       reserved), and each peak is at least its current value.
//   I8. No chunk record is leaked: the live records are exactly those reachable
//       from the regions.
//   I9. Conditions (core/streams/condition.h): a free chunk under
//       Cond::kSet or kMap names a live set or map of the condition table,
//       and under kClean or kStream none; a map is well formed (two parts
//       or more, none empty, neighbours different, summing to the chunk);
//       an in-use chunk names a live set (its RecordStream streams) or none;
//       every live set and map is named exactly once (by a chunk or by a
//       part of a map).
//
// Streams. A free chunk remembers which streams' work may still use its
// bytes (its condition; a chunk merged from frees under different
// conditions keeps one per part). Allocate on stream T takes the best fit
// when T may use it at once (the common case, and the only one on a
// single-stream workload: one comparison). Otherwise it looks, in best-fit
// order over at most kMaxCrossStreamCandidates chunks, for one whose bytes
// at the placement T may use without asking the device (never used, freed
// on T, freed by work the oracle knows complete or that T already waits
// for), and only when there is none asks the ReuseOracle about the best
// fit's (a query, or making T wait).
//
// Merging. Free neighbours always merge, whatever their conditions: the
// layout of free memory is the one a single stream would have, and does not
// depend on when the allocator learns what completed (with pieces kept
// apart until then, memory laid out differently in every pass of a repeated
// step, and its peak crept up pass after pass). What a merge keeps apart is
// the conditions, part by part: handing out bytes asks only the conditions
// of the parts they overlap, so memory one stream freed never fences the
// memory next to it. Conditions settle (drop what is known complete) when a
// chunk is looked at.
//
// Thread safety: none. REQUIRES external synchronization (the facade's lock).
#ifndef GPUALLOC_CORE_BFC_H_
#define GPUALLOC_CORE_BFC_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/container/btree_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/address_map.h"
#include "core/bfc/chunk_table.h"
#include "core/bfc/free_bins.h"
#include "core/layer.h"
#include "core/streams/condition.h"
#include "core/streams/oracle.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::core {

struct BfcConfig {
  // Power of two; every chunk size and address is a multiple of it.
  std::uint64_t min_block_size = 256;
  // A surplus of at most this many bytes stays with the allocation (no split).
  std::uint64_t max_internal_fragmentation = 0;
  // Big-page placement: an allocation of at least this many bytes starts on
  // a multiple of it when its best-fit chunk has room for that, so that it
  // costs no extra memory (the front padding stays free). A power of two
  // >= min_block_size, or 0 for none.
  std::uint64_t large_page = 0;
};

// The free memory at both ends of a region (0 where the end chunk is in use).
struct RegionEdges {
  std::uint64_t free_head = 0;
  std::uint64_t free_tail = 0;
};

// Counters maintained on every operation (the rest of Stats is derived).
struct CoreCounters {
  std::uint64_t num_allocs = 0;
  std::uint64_t bytes_in_use = 0;
  std::uint64_t peak_bytes_in_use = 0;
  std::uint64_t largest_alloc_size = 0;
  std::uint64_t bytes_requested = 0;
  std::uint64_t peak_bytes_requested = 0;
  std::uint64_t bytes_reserved = 0;
  std::uint64_t peak_bytes_reserved = 0;
  std::uint64_t num_chunks_in_use = 0;
};

class BfcCore {
 public:
  explicit BfcCore(const BfcConfig& config);

  BfcCore(const BfcCore&) = delete;
  BfcCore& operator=(const BfcCore&) = delete;

  const BfcConfig& config() const { return config_; }

  // Adds [base, base + size) as a region made of one free chunk.
  // REQUIRES: base and size are non-zero multiples of min_block_size and the
  // range overlaps no region.
  RegionId AddRegion(DeviceAddress base, std::uint64_t size);

  // Removes a fully free region; the caller returns its memory to the device.
  // REQUIRES: IsRegionFree(id).
  void RemoveRegion(RegionId id);

  // Expandable regions (core/regions/expandable.h) change regions in place:
  //
  // Joins region `right`, which starts where `left` ends, onto `left` and
  // returns left's id; right's id is gone. Free chunks meeting at the seam
  // merge (I4). O(chunks of right).
  // REQUIRES: both live; region_base(right) == left's end.
  RegionId JoinRegions(RegionId left, RegionId right,
                       const ReuseOracle* oracle = nullptr);
  // Takes [address, address + bytes) out of the free chunk that holds it:
  // the bytes leave the reserved total, the rest of that chunk stays free
  // (with its condition), and the region splits around the hole (the part
  // after it becomes a region of its own; a region left empty disappears).
  // REQUIRES: the range is non-empty, lies in one free chunk, and its ends
  // are multiples of min_block_size.
  void CarveFree(DeviceAddress address, std::uint64_t bytes);
  // Takes exactly [address, address + size) out of the free chunk that holds
  // it as an in-use chunk allocated on `stream` (Allocate's counters and
  // statistics); the rest of that chunk stays free with its condition. For
  // memory just mapped for one owner, which must share its granules with no
  // other allocation (Allocator::Sleep's tags).
  // REQUIRES: size > 0; the range lies in one free chunk that `stream` may
  // use; its ends are multiples of min_block_size.
  void AllocateAt(DeviceAddress address, std::uint64_t size,
                  std::uint64_t requested, std::uintptr_t stream);
  // Whether [address, address + bytes) lies in one free chunk.
  bool IsFreeRange(DeviceAddress address, std::uint64_t bytes) const;
  // The free bytes at the region's ends that `stream` may use now, or with
  // `all` every free byte there (memory mapped next to them merges with
  // them, and a growth counts on them).
  RegionEdges region_edges(RegionId id, std::uintptr_t stream,
                           const ReuseOracle& oracle, bool all = false) const;
  // The region containing `address`, if any.
  std::optional<RegionId> RegionAt(DeviceAddress address) const;
  // Every free chunk of at least `min_size` bytes as [address, address +
  // size), in best-fit order (by size). Visits only those chunks.
  struct FreeSpan {
    DeviceAddress address = 0;
    std::uint64_t size = 0;
  };
  std::vector<FreeSpan> FreeSpans(std::uint64_t min_size) const;
  // The streams whose work may still use free chunk memory in
  // [address, address + bytes) of one region (any stream, including the
  // caller's): what a host must wait for before that memory is unmapped.
  // With `in_use_too`, also the streams in-use chunks there were allocated on
  // (the allocator is going away with them).
  std::vector<std::uintptr_t> StreamsUsingFree(DeviceAddress address,
                                               std::uint64_t bytes,
                                               const ReuseOracle& oracle,
                                               bool in_use_too = false) const;
  // The conditions of free memory in [address, address + bytes) of one
  // region that `oracle` does not know complete: each stream once, with its
  // largest stamp (what to ask the device about before unmapping it).
  std::vector<StreamStamp> PendingConditionsIn(DeviceAddress address,
                                               std::uint64_t bytes,
                                               const ReuseOracle& oracle) const;

  bool IsRegionFree(RegionId id) const;
  // Ids of the regions whose memory is entirely free, in address order.
  std::vector<RegionId> FreeRegions() const;
  DeviceAddress region_base(RegionId id) const { return regions_[id].base; }
  std::uint64_t region_size(RegionId id) const { return regions_[id].size; }
  std::size_t num_regions() const { return region_index_.size(); }
  // Bases of every region, in address order.
  std::vector<DeviceAddress> RegionBases() const;

  // Chunks Allocate examines beyond the best fit when the best fit's bytes
  // are still used by another stream's work (per phase: first for one
  // usable without a device call, then asking the oracle).
  static constexpr int kMaxCrossStreamCandidates = 32;

  // How far Allocate looks past a best fit `stream` may not use at once.
  enum class Search : std::uint8_t {
    // The hot path: at most kMaxCrossStreamCandidates chunks; the oracle
    // asks the device only as its budget allows, and never makes the
    // stream wait.
    kFast,
    // The slow path before growing: every fitting chunk for one usable
    // without a device call; then the oracle asks the device, without
    // waiting.
    kAll,
    // kAll, and the oracle may make the stream wait for the best fit's
    // freeing work (as the policy allows).
    kMayWait,
    // The best fit whichever stream freed it, the oracle making the stream
    // wait where its freeing work is not known complete (the best_fit
    // policy); as kFast when the oracle may not wait.
    kBestFit,
  };
  // Best fit for `size` bytes at `alignment`, usable on `stream`. Returns the
  // address, or nullopt when no free chunk can hold it (nothing changes then,
  // except what `oracle` did: markers recorded, streams made to wait). Free
  // bytes whose last use was on another stream are taken only as `oracle`
  // allows; with no oracle, never.
  // REQUIRES: size is a non-zero multiple of min_block_size; alignment is a
  // power of two >= min_block_size; size + alignment does not overflow.
  std::optional<DeviceAddress> Allocate(std::uint64_t size,
                                        std::uint64_t requested,
                                        std::uint64_t alignment,
                                        std::uintptr_t stream,
                                        ReuseOracle* oracle = nullptr,
                                        Search search = Search::kFast);

  // Frees the chunk that starts at `address`; its last use was queued on
  // `stream`, on the stream it was allocated on and on the streams
  // RecordStream added, before the free stamped `stamp`
  // (core/streams/condition.h). `oracle`, when given, settles what it knows
  // complete in the chunks merged with. InvalidArgument for an address no
  // region contains or that points inside a chunk; FailedPrecondition for a
  // chunk that is already free. Nothing changes on error.
  absl::Status Deallocate(DeviceAddress address, std::uintptr_t stream,
                          std::uint64_t stamp = 0,
                          const ReuseOracle* oracle = nullptr);

  // Declares that work on `stream` also uses the in-use chunk at `address`.
  // Errors as Deallocate's; nothing changes on error.
  absl::Status RecordStream(DeviceAddress address, std::uintptr_t stream);

  // How many chunks name `stream`: in-use chunks allocated on it or used by it
  // (RecordStream), free chunks whose condition names it. O(chunks).
  std::uint64_t StreamReferences(std::uintptr_t stream) const;
  // A stream is going away (Allocator::ReleaseStream): every chunk naming
  // `stream` names `key` instead, a stream that never allocates, so that a
  // new stream given the same handle later is a stranger to that memory
  // (never "its own" memory without the oracle's word). Leaves the
  // one-stream mode: `key` is a second stream. O(chunks).
  // REQUIRES: `key` is named by no chunk and is not kNoStreamYet.
  void RenameStream(std::uintptr_t stream, std::uintptr_t key);

  // Size of the in-use chunk starting at `address`, or 0.
  std::uint64_t AllocatedSize(DeviceAddress address) const;
  // The in-use chunk starting at `address`, for the front caches: its size,
  // requested bytes, the stream it was allocated on, and whether
  // RecordStream named other streams for it.
  struct InUseChunk {
    std::uint64_t size = 0;
    std::uint64_t requested = 0;
    std::uintptr_t stream = 0;
    bool other_streams = false;
    // Whether a free chunk lies next to it (a free would merge).
    bool free_neighbour = false;
  };
  std::optional<InUseChunk> FindInUse(DeviceAddress address) const {
    const ChunkId id = in_use_.Find(address);
    if (id == kNoChunk) return std::nullopt;
    const Chunk& c = chunks_[id];
    const bool free_neighbour =
        (c.prev != kNoChunk && !chunks_[c.prev].in_use) ||
        (c.next != kNoChunk && !chunks_[c.next].in_use);
    return InUseChunk{c.size, c.requested, c.stream, c.cond_id != kNoCond,
                      free_neighbour};
  }
  // The in-use chunk at `address` was handed out again (by a front cache)
  // for `requested` bytes: the requested figures follow.
  // REQUIRES: an in-use chunk starts at `address`; requested <= its size.
  void SetRequested(DeviceAddress address, std::uint64_t requested) {
    Chunk& c = chunks_[in_use_.Find(address)];
    counters_.bytes_requested =
        counters_.bytes_requested - c.requested + requested;
    counters_.peak_bytes_requested =
        std::max(counters_.peak_bytes_requested, counters_.bytes_requested);
    c.requested = requested;
  }

  const CoreCounters& counters() const { return counters_; }
  void ResetPeaks();
  std::uint64_t LargestFreeBlock() const;
  std::uint64_t FreeBytes() const {
    return counters_.bytes_reserved - counters_.bytes_in_use;
  }
  std::uint64_t num_free_chunks() const { return bins_.size(); }
  // Sets and maps the condition table holds (chunks under several pairs or
  // parts, and RecordStream's streams).
  std::size_t num_condition_sets() const { return conds_.live_sets(); }
  std::size_t num_condition_maps() const { return conds_.live_maps(); }
  // The streams other than `for_stream` named by the conditions of free
  // chunks that `oracle` does not know complete, each once. Cold: walks every
  // free chunk.
  std::vector<std::uintptr_t> PendingStreams(const ReuseOracle& oracle,
                                             std::uintptr_t for_stream) const;
  // The same, each stream with the largest stamp of its conditions.
  std::vector<StreamStamp> PendingConditions(const ReuseOracle& oracle,
                                             std::uintptr_t for_stream) const;

  // Whether the core has seen operations on more than one stream. Before,
  // every condition names the one stream and merges keep the later stamp;
  // from then on a merge keeps each part's condition. Once set, it stays.
  bool multi_stream() const { return multi_stream_; }
  // Drops the pairs `oracle` knows complete from every free chunk's
  // condition. Cold: walks every chunk. Returns the chunks whose condition
  // changed.
  std::size_t Settle(const ReuseOracle& oracle);
  // The streams other than the freeing one that the last Deallocate's
  // condition names (the stream a handed-over block was allocated on, the
  // streams RecordStream added); empty for a block freed on its own stream.
  // Valid until the next Deallocate.
  absl::Span<const std::uintptr_t> last_free_others() const {
    return last_free_others_;
  }
  // Whether free region `id` (IsRegionFree) may be used by `stream` without
  // waiting: never used, or freed on `stream`, or all of its work known
  // complete (or waited for by `stream`).
  bool RegionUsableBy(RegionId id, std::uintptr_t stream,
                      const ReuseOracle& oracle) const;

  absl::Status Validate() const;
  void AppendSnapshot(std::vector<RegionSnapshot>* regions) const;

  // Host memory held by the core's own data structures (approximate).
  std::size_t MetadataBytes() const;

 private:
  friend class BfcChecker;  // Validate's checks, one per invariant

  struct Region {
    DeviceAddress base = 0;
    std::uint64_t size = 0;
    ChunkId first = kNoChunk;
    ChunkId last = kNoChunk;
    bool live = false;
  };

  void InsertFree(ChunkId id);
  void RemoveFree(ChunkId id);
  // Carves the first `size` bytes of free chunk `id` (in the bins) into a new
  // record, returned, out of the bins; `id` keeps the rest and stays in the
  // bins, re-keyed. With `keep_free` the front keeps its part of the
  // condition (it stays free), else it gets none (it is about to be used).
  ChunkId SplitFront(ChunkId id, std::uint64_t size, bool keep_free);
  // The chunk of region `rid` that holds `address` (a walk from its start).
  ChunkId ChunkHolding(RegionId rid, DeviceAddress address) const;
  // Takes chunk record `id` out of its region's list and deletes it.
  void Unlink(ChunkId id);
  // A new free chunk record for [address, address + size) in `region`,
  // under `cond`; not linked, not in a bin.
  ChunkId NewFree(DeviceAddress address, std::uint64_t size, RegionId region,
                  ChunkCond cond);
  // A chunk record's condition, and setting it.
  static ChunkCond CondOf(const Chunk& c) {
    return ChunkCond{c.cond, c.cond_id, c.stream, c.free_stamp};
  }
  static void SetCond(Chunk& c, const ChunkCond& cond) {
    c.cond = cond.kind;
    c.cond_id = cond.id;
    c.stream = cond.stream;
    c.free_stamp = cond.stamp;
  }
  RegionId NewRegionId();
  // The alignment to place an allocation of `size` bytes at in free chunk
  // `c`: a big page when that costs nothing (one comparison for the rest).
  std::uint64_t PlacementAlignment(const Chunk& c, std::uint64_t size,
                                   std::uint64_t alignment) const {
    if (ABSL_PREDICT_TRUE(size < large_page_threshold_)) return alignment;
    return alignment < config_.large_page && LargePageFits(c, size)
               ? config_.large_page
               : alignment;
  }
  bool LargePageFits(const Chunk& c, std::uint64_t size) const;
  // Calls on_condition(stream, stamp) for every pair of the free chunks'
  // conditions and on_in_use(stream) for every in-use chunk overlapping
  // [address, address + bytes) of one region.
  template <typename OnCondition, typename OnInUse>
  void ForEachConditionIn(DeviceAddress address, std::uint64_t bytes,
                          OnCondition on_condition, OnInUse on_in_use) const;
  absl::Status DiagnoseBadAddress(absl::string_view operation,
                                  DeviceAddress address) const;

  // Hands free chunk `id` (out of the bins, its condition released) to
  // `stream`. Inlined: it is most of Allocate's tail.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void TakeChunk(ChunkId id,
                                              std::uint64_t requested,
                                              std::uintptr_t stream) {
    Chunk& c = chunks_[id];
    c.cond = Cond::kClean;
    c.in_use = true;
    c.requested = requested;
    c.stream = stream;
    in_use_.Insert(c.address, id);
    high_water_ = std::max(high_water_, c.address + c.size);

    CoreCounters& k = counters_;
    ++k.num_allocs;
    ++k.num_chunks_in_use;
    k.bytes_in_use += c.size;
    k.bytes_requested += requested;
    k.peak_bytes_in_use = std::max(k.peak_bytes_in_use, k.bytes_in_use);
    k.peak_bytes_requested =
        std::max(k.peak_bytes_requested, k.bytes_requested);
    k.largest_alloc_size = std::max(k.largest_alloc_size, c.size);
  }
  // Whether free chunk `c` may be handed to `stream` without asking anyone,
  // by its uniform condition alone.
  static bool UsableOn(const Chunk& c, std::uintptr_t stream) {
    return c.cond == Cond::kClean ||
           (c.cond == Cond::kStream && c.stream == stream);
  }
  // Where an allocation of `size` bytes at `alignment` starts in free chunk
  // `id`, when it goes there.
  struct Placement {
    ChunkId id = kNoChunk;
    DeviceAddress start = 0;
  };
  // The placement at `id`'s first aligned address (a big page where that
  // costs nothing).
  Placement PlaceAtStart(ChunkId id, std::uint64_t size,
                         std::uint64_t alignment) const {
    const Chunk& c = chunks_[id];
    const std::uint64_t a = PlacementAlignment(c, size, alignment);
    return Placement{id, (c.address + a - 1) & ~(a - 1)};
  }
  // The first placement from `first` on, in best-fit order, whose bytes
  // `stream` may use: one usable without a device call if any of the
  // candidates has one, else one `oracle` makes usable; id kNoChunk when
  // none.
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD Placement
  FindUsable(ChunkId first, std::uint64_t size, std::uint64_t alignment,
             std::uintptr_t stream, ReuseOracle* oracle, Search search);
  // The candidate's placement usable without a device call (settling what
  // `oracle` knows complete first): at its start when the whole chunk is
  // usable, else, in a map, in the tightest run of parts `stream` may use;
  // id kNoChunk when none. *run: the size of the free memory the placement
  // takes its bytes from (the chunk, or the run).
  Placement UsableWithoutAsking(ChunkId id, std::uint64_t size,
                                std::uint64_t alignment, std::uintptr_t stream,
                                const ReuseOracle& oracle, std::uint64_t* run);
  // Asks `oracle` to make the pairs that the bytes of `p` overlap usable on
  // `stream`, as far as `ask` allows.
  enum class Usable { kYes, kNo, kStop };
  // kStop: the oracle failed; the search ends (the caller reports it).
  Usable MakeUsable(const Placement& p, std::uint64_t size,
                    std::uintptr_t stream, ReuseOracle& oracle,
                    ReuseOracle::Ask ask);

  // Streams seen: the one stream seen so far (kNoStreamYet before any), and
  // whether a second one appeared.
  static constexpr std::uintptr_t kNoStreamYet = UINTPTR_MAX;
  void NoteStream(std::uintptr_t stream) {
    if (ABSL_PREDICT_FALSE(stream != solo_stream_)) NoteNewStream(stream);
  }
  // Out of line: a stream other than the first (nothing to do once several
  // were seen).
  ABSL_ATTRIBUTE_NOINLINE void NoteNewStream(std::uintptr_t stream);
  // Calls visit(std::uintptr_t&) on every stream field of every chunk.
  template <typename Visit>
  void ForEachStreamField(Visit visit);
  // On the switch to several streams: the part of each free chunk under a
  // condition above high_water_ was merged in while one stream was seen but
  // never used; it becomes a clean part.
  void CleanAboveHighWater();
  // "clean", "{stream 0x1 at stamp 4}", ... for messages.
  std::string ConditionText(const Chunk& c) const {
    return conds_.Text(CondOf(c));
  }
  // Merges free chunk `id` (in the bins) with its free neighbours; returns
  // the id of the chunk holding its bytes now.
  ChunkId MergeNeighbours(ChunkId id);
  // Deallocate's merge (inline in both paths), the condition of a block
  // freed with RecordStream streams or on another stream than its own, and
  // the whole free once several streams were seen.
  template <bool kSeveralStreams>
  void MergeFreed(ChunkId id);
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD void ConditionOfFree(
      Chunk& c, std::uintptr_t stream, std::uintptr_t allocated_on,
      std::uint64_t stamp);
  ABSL_ATTRIBUTE_NOINLINE void FreeAmongStreams(ChunkId id,
                                                std::uintptr_t stream,
                                                std::uint64_t stamp);
  // Gives free chunk `into` (of `into_bytes`, whatever its record says) the
  // merged condition of itself and its free neighbour `from` (`into_left`:
  // `into` lies before `from`); `from` gives up its condition. Inline: the
  // cases of a single-stream workload.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void JoinCond(Chunk& into,
                                             std::uint64_t into_bytes,
                                             Chunk& from, bool into_left) {
    if (from.cond == Cond::kClean && into.cond == Cond::kClean) return;
    if (!multi_stream_) {
      if (from.cond == Cond::kClean) return;
      if (into.cond == Cond::kClean) {
        SetCond(into, CondOf(from));
        from.cond = Cond::kClean;
        from.cond_id = kNoCond;
        return;
      }
      if (into.cond == Cond::kStream && from.cond == Cond::kStream &&
          into.stream == from.stream) {
        if (from.free_stamp > into.free_stamp) {
          into.free_stamp = from.free_stamp;
        }
        return;
      }
    }
    JoinCondSlow(into, into_bytes, from, into_left);
  }
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD void JoinCondSlow(
      Chunk& into, std::uint64_t into_bytes, Chunk& from, bool into_left);
  // Releases the chunk's set or map, if any (its condition becomes clean).
  void ReleaseCond(Chunk& c) {
    if (ABSL_PREDICT_FALSE(c.cond_id != kNoCond)) ReleaseCondSlow(c);
    c.cond = Cond::kClean;
  }
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD void ReleaseCondSlow(Chunk& c);
  // Settles free chunk `c`'s condition; returns whether it changed.
  bool SettleChunk(Chunk& c, const ReuseOracle& oracle) {
    if (c.cond == Cond::kClean) return false;
    ChunkCond cond = CondOf(c);
    if (!conds_.Settle(cond, oracle)) return false;
    SetCond(c, cond);
    return true;
  }

  BfcConfig config_;
  // config_.large_page, or "never" when it is 0.
  std::uint64_t large_page_threshold_;
  ChunkTable chunks_;
  FreeBins bins_;
  AddressMap in_use_;  // in-use chunk address -> id
  ConditionTable conds_;
  absl::InlinedVector<std::uintptr_t, 2> last_free_others_;
  std::vector<Region> regions_;
  std::vector<RegionId> free_region_ids_;
  absl::btree_map<DeviceAddress, RegionId> region_index_;  // base -> id
  CoreCounters counters_;
  std::uintptr_t solo_stream_ = kNoStreamYet;
  bool multi_stream_ = false;
  // The end of the highest allocation ever made: no stream's work has
  // touched memory above it.
  DeviceAddress high_water_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_BFC_H_
