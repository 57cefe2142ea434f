// SPDX-License-Identifier: Apache-2.0
// core/streams/condition.h: conditions, the one word for "when may another
// stream use this free memory", and the table that owns their algebra.
//
// docs/DESIGN.md, "Streams": Deallocate(p, S) says that all work using p is
// queued on S (and on the streams RecordStream named). The memory may be
// reused on S at once, and on another stream T once that work has completed,
// or after T was made to wait for it.
//
// Stamps. The stream order (core/streams/stream_order.h) numbers the markers
// it records on streams (events or counter writes). A free is stamped with
// the number of markers recorded so far, so "a marker on S numbered above
// the free's stamp" is exactly "a marker recorded on S after the free",
// which covers the freeing work. A condition is a set of (stream, stamp)
// pairs, one per stream whose queued work may still use the memory.
//
// Kinds. A free chunk's condition is stored in the chunk record when it is
// uniform over the chunk: none (kClean), one pair (kStream: the record's
// stream and stamp fields) or several pairs (kSet: a set in this table).
// Free neighbours always merge, as in a single-stream BFC, so that the
// layout of free memory does not depend on when the allocator learns what
// completed; a merged chunk whose parts were freed under different
// conditions keeps each part's condition (kMap: a list of parts in this
// table, in address order). Handing out bytes asks only the conditions of
// the parts those bytes overlap.
//
// Settling. Pairs known complete (the oracle, core/streams/oracle.h) are
// dropped from a condition when the chunk is next looked at; a condition
// left with no pair is clean, a map left with one condition is uniform.
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_STREAMS_CONDITION_H_
#define GPUALLOC_CORE_STREAMS_CONDITION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "core/layer.h"
#include "core/status_macros.h"
#include "core/streams/oracle.h"

namespace gpualloc::core {

// Ids of sets and maps in a ConditionTable; recycled like chunk records.
using CondId = std::uint32_t;
inline constexpr CondId kNoCond = UINT32_MAX;

enum class Cond : std::uint8_t {
  // Never used, or every use known complete: any stream, at once.
  kClean,
  // One pair, (stream, stamp), held by the chunk itself.
  kStream,
  // Several pairs: the set `id` of the table. Also, on an in-use chunk, the
  // streams RecordStream added (their stamps unused).
  kSet,
  // Parts under different conditions: the map `id` of the table.
  kMap,
};

// A chunk's condition as the table sees it: what a chunk record holds.
struct ChunkCond {
  Cond kind = Cond::kClean;
  CondId id = kNoCond;        // kSet, kMap
  std::uintptr_t stream = 0;  // kStream
  std::uint64_t stamp = 0;    // kStream
};

// One part of a map: `bytes` under a uniform condition (never kMap).
struct CondPart {
  std::uint64_t bytes = 0;
  ChunkCond cond;
};

class ConditionTable {
 public:
  ConditionTable() = default;
  ConditionTable(const ConditionTable&) = delete;
  ConditionTable& operator=(const ConditionTable&) = delete;

  // --- Sets -------------------------------------------------------------
  CondId NewSet();
  // Adds (stream, stamp); an entry for the same stream keeps the larger
  // stamp.
  void AddPair(CondId set, std::uintptr_t stream, std::uint64_t stamp);
  // Gives every pair of `set` the stamp `stamp`.
  void Restamp(CondId set, std::uint64_t stamp);
  absl::Span<const StreamStamp> Pairs(CondId set) const {
    GPUALLOC_DCHECK(IsLiveSet(set));
    return sets_[set];
  }

  // --- Conditions of free chunks -----------------------------------------
  // The condition of free neighbours `left` (`left_bytes`) and `right`
  // merged; both are consumed. With `solo` (one stream seen so far: every
  // condition names it) the result is uniform: the later stamp.
  ChunkCond Join(ChunkCond left, std::uint64_t left_bytes, ChunkCond right,
                 std::uint64_t right_bytes, bool solo);
  // Cuts a chunk of `total` bytes under `c` (consumed) into its first
  // `front_bytes` and the rest.
  std::pair<ChunkCond, ChunkCond> Split(ChunkCond c, std::uint64_t total,
                                        std::uint64_t front_bytes);
  // The condition of what is left of a chunk under `c` (consumed) once its
  // first `front_bytes` are handed out (front_bytes < its size).
  ChunkCond DropFront(ChunkCond c, std::uint64_t front_bytes);
  // A copy of uniform `c` (a set is duplicated).
  ChunkCond CopyUniform(const ChunkCond& c);
  // Gives back `c`'s set or map; `c` becomes clean.
  void Release(ChunkCond& c);
  // Drops the pairs `oracle` knows complete; returns whether `c` changed.
  bool Settle(ChunkCond& c, const ReuseOracle& oracle);

  // Whether bytes [offset, offset + bytes) of a chunk under `c` may go to
  // `stream` without a device call: no pair there but `stream`'s own or
  // ones `oracle` knows complete (or knows `stream` already waits for).
  bool UsableNow(const ChunkCond& c, std::uint64_t offset, std::uint64_t bytes,
                 std::uintptr_t stream, const ReuseOracle& oracle) const;
  // The tightest run of parts of map `c` (a chunk of `total` bytes at
  // address `base`) that `stream` may use without a device call and that
  // holds `bytes` bytes starting on a multiple of `alignment`: where the
  // allocation starts in it (an offset into the chunk), and the run's size.
  // Lowest offset on ties; nullopt when no run holds it.
  struct Window {
    std::uint64_t offset = 0;
    std::uint64_t run = 0;
  };
  std::optional<Window> BestUsableWindow(const ChunkCond& c, std::uint64_t base,
                                         std::uint64_t total,
                                         std::uint64_t bytes,
                                         std::uint64_t alignment,
                                         std::uintptr_t stream,
                                         const ReuseOracle& oracle) const;

  // Calls f(stream, stamp) for every pair of the parts of a chunk under `c`
  // that [offset, offset + bytes) overlaps (the whole chunk: offset 0,
  // bytes UINT64_MAX). A pair may be reported once per part.
  template <typename F>
  void ForEachPair(const ChunkCond& c, std::uint64_t offset,
                   std::uint64_t bytes, F f) const {
    switch (c.kind) {
      case Cond::kClean:
        return;
      case Cond::kStream:
        f(c.stream, c.stamp);
        return;
      case Cond::kSet:
        for (const StreamStamp& p : sets_[c.id]) f(p.stream, p.stamp);
        return;
      case Cond::kMap: {
        const std::uint64_t end =
            bytes > UINT64_MAX - offset ? UINT64_MAX : offset + bytes;
        std::uint64_t at = 0;
        for (const CondPart& part : maps_[c.id]) {
          if (at >= end) break;
          if (at + part.bytes > offset) ForEachPair(part.cond, 0, 1, f);
          at += part.bytes;
        }
        return;
      }
    }
  }
  // Calls f(std::uintptr_t&) on the stream of every pair of `c`, then
  // merges the parts of a map that became equal (renames).
  template <typename F>
  void RenameStreams(ChunkCond& c, F f) {
    ForEachStreamField(c, f);
    if (c.kind == Cond::kMap) c = Coalesce(c.id);
  }
  template <typename F>
  void ForEachStreamField(ChunkCond& c, F f) {
    switch (c.kind) {
      case Cond::kClean:
        return;
      case Cond::kStream:
        f(c.stream);
        return;
      case Cond::kSet:
        for (StreamStamp& p : sets_[c.id]) f(p.stream);
        return;
      case Cond::kMap:
        for (CondPart& part : maps_[c.id]) ForEachStreamField(part.cond, f);
        return;
    }
  }
  // How many bytes at the start, and at the end, of a chunk of `total` bytes
  // under `c` may go to `stream` without a device call.
  std::uint64_t UsablePrefix(const ChunkCond& c, std::uint64_t total,
                             std::uintptr_t stream,
                             const ReuseOracle& oracle) const;
  std::uint64_t UsableSuffix(const ChunkCond& c, std::uint64_t total,
                             std::uintptr_t stream,
                             const ReuseOracle& oracle) const;
  // Whether some pair of `c` names `stream`.
  bool Names(const ChunkCond& c, std::uintptr_t stream) const;
  // Whether two uniform conditions are the same (same pairs).
  bool SameUniform(const ChunkCond& a, const ChunkCond& b) const;
  // "clean", "{stream 0x1 at stamp 4}", "[64 KiB {..}, 2 MiB clean]".
  std::string Text(const ChunkCond& c) const;

  // The parts of map `c`.
  absl::Span<const CondPart> Parts(const ChunkCond& c) const {
    GPUALLOC_DCHECK(c.kind == Cond::kMap && IsLiveMap(c.id));
    return maps_[c.id];
  }

  bool IsLiveSet(CondId id) const { return id < sets_.size() && set_live_[id]; }
  bool IsLiveMap(CondId id) const { return id < maps_.size() && map_live_[id]; }
  std::size_t live_sets() const { return live_sets_; }
  std::size_t live_maps() const { return live_maps_; }
  // Every live set and map named by a uniform condition inside a map (for
  // Validate: the ids the chunks do not name directly).
  template <typename F>
  void ForEachIdInMaps(F f) const {
    for (std::size_t m = 0; m < maps_.size(); ++m) {
      if (!map_live_[m]) continue;
      for (const CondPart& part : maps_[m]) {
        if (part.cond.kind == Cond::kSet) f(part.cond.id);
      }
    }
  }
  // A map is well formed: at least two parts, none empty, none a map,
  // neighbours different, sizes summing to `total`. Empty string when so.
  std::string CheckMap(const ChunkCond& c, std::uint64_t total) const;
  std::size_t MemoryBytes() const;

 private:
  using Pairs_ = absl::InlinedVector<StreamStamp, 2>;
  using Map = std::vector<CondPart>;

  void DeleteSet(CondId id);
  CondId NewMap();
  void DeleteMap(CondId id);
  // Appends the parts of `c` (`bytes` of it; consumed) to `out`, merging a
  // first part equal to `out`'s last one.
  void AppendParts(Map& out, ChunkCond c, std::uint64_t bytes);
  // Appends uniform `u` (consumed) of `bytes`, merging with an equal last.
  void AppendUniform(Map& out, ChunkCond u, std::uint64_t bytes);
  // A map of one part becomes that part's uniform condition.
  ChunkCond Normalize(CondId map);
  // Merges the equal neighbours of map `map`, then Normalize.
  ChunkCond Coalesce(CondId map);
  // Drops the pairs of uniform `u` that `oracle` knows complete.
  bool SettleUniform(ChunkCond& u, const ReuseOracle& oracle);
  bool UniformUsable(const ChunkCond& u, std::uintptr_t stream,
                     const ReuseOracle& oracle) const;
  std::string UniformText(const ChunkCond& u) const;

  std::vector<Pairs_> sets_;
  std::vector<bool> set_live_;
  std::vector<CondId> free_sets_;
  std::size_t live_sets_ = 0;
  std::vector<Map> maps_;
  Map scratch_;  // a map's parts while they move into another (no malloc)
  std::vector<bool> map_live_;
  std::vector<CondId> free_maps_;
  std::size_t live_maps_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_STREAMS_CONDITION_H_
