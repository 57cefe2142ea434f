// SPDX-License-Identifier: Apache-2.0
// core/streams/condition.cc: the condition table: sets, maps and their
// algebra (core/streams/condition.h).
#include "core/streams/condition.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpualloc::core {

CondId ConditionTable::NewSet() {
  CondId id;
  if (!free_sets_.empty()) {
    id = free_sets_.back();
    free_sets_.pop_back();
  } else {
    id = static_cast<CondId>(sets_.size());
    GPUALLOC_DCHECK(id != kNoCond);
    sets_.emplace_back();
    set_live_.push_back(false);
  }
  set_live_[id] = true;
  ++live_sets_;
  return id;
}

void ConditionTable::DeleteSet(CondId id) {
  GPUALLOC_DCHECK(IsLiveSet(id));
  sets_[id].clear();
  set_live_[id] = false;
  free_sets_.push_back(id);
  --live_sets_;
}

void ConditionTable::AddPair(CondId set, std::uintptr_t stream,
                             std::uint64_t stamp) {
  for (StreamStamp& p : sets_[set]) {
    if (p.stream == stream) {
      p.stamp = std::max(p.stamp, stamp);
      return;
    }
  }
  sets_[set].push_back(StreamStamp{stream, stamp});
}

void ConditionTable::Restamp(CondId set, std::uint64_t stamp) {
  for (StreamStamp& p : sets_[set]) p.stamp = stamp;
}

CondId ConditionTable::NewMap() {
  CondId id;
  if (!free_maps_.empty()) {
    id = free_maps_.back();
    free_maps_.pop_back();
  } else {
    id = static_cast<CondId>(maps_.size());
    GPUALLOC_DCHECK(id != kNoCond);
    maps_.emplace_back();
    map_live_.push_back(false);
  }
  map_live_[id] = true;
  ++live_maps_;
  return id;
}

void ConditionTable::DeleteMap(CondId id) {
  GPUALLOC_DCHECK(IsLiveMap(id));
  for (CondPart& part : maps_[id]) Release(part.cond);
  maps_[id].clear();
  map_live_[id] = false;
  free_maps_.push_back(id);
  --live_maps_;
}

void ConditionTable::Release(ChunkCond& c) {
  if (c.kind == Cond::kSet) DeleteSet(c.id);
  if (c.kind == Cond::kMap) DeleteMap(c.id);
  c = ChunkCond();
}

ChunkCond ConditionTable::CopyUniform(const ChunkCond& c) {
  GPUALLOC_DCHECK(c.kind != Cond::kMap);
  if (c.kind != Cond::kSet) return c;
  ChunkCond copy = c;
  copy.id = NewSet();
  sets_[copy.id] = sets_[c.id];
  return copy;
}

bool ConditionTable::SameUniform(const ChunkCond& a, const ChunkCond& b) const {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Cond::kClean:
      return true;
    case Cond::kStream:
      return a.stream == b.stream && a.stamp == b.stamp;
    case Cond::kSet: {
      const Pairs_& x = sets_[a.id];
      const Pairs_& y = sets_[b.id];
      if (x.size() != y.size()) return false;
      for (const StreamStamp& p : x) {
        bool found = false;
        for (const StreamStamp& q : y) {
          found |= p.stream == q.stream && p.stamp == q.stamp;
        }
        if (!found) return false;
      }
      return true;
    }
    case Cond::kMap:
      return false;
  }
  return false;
}

void ConditionTable::AppendUniform(Map& out, ChunkCond u, std::uint64_t bytes) {
  GPUALLOC_DCHECK(u.kind != Cond::kMap && bytes > 0);
  if (!out.empty() && SameUniform(out.back().cond, u)) {
    out.back().bytes += bytes;
    Release(u);
    return;
  }
  out.push_back(CondPart{bytes, u});
}

void ConditionTable::AppendParts(Map& out, ChunkCond c, std::uint64_t bytes) {
  if (c.kind != Cond::kMap) {
    AppendUniform(out, c, bytes);
    return;
  }
  // (out may be a vector of maps_: no map is created below.)
  scratch_.swap(maps_[c.id]);  // both keep their capacity
  map_live_[c.id] = false;
  free_maps_.push_back(c.id);
  --live_maps_;
  for (CondPart& part : scratch_) AppendUniform(out, part.cond, part.bytes);
  scratch_.clear();
}

ChunkCond ConditionTable::Normalize(CondId map) {
  Map& m = maps_[map];
  if (m.size() != 1) return ChunkCond{Cond::kMap, map, 0, 0};
  const ChunkCond only = m.front().cond;
  m.clear();
  map_live_[map] = false;
  free_maps_.push_back(map);
  --live_maps_;
  return only;
}

ChunkCond ConditionTable::Join(ChunkCond left, std::uint64_t left_bytes,
                               ChunkCond right, std::uint64_t right_bytes,
                               bool solo) {
  if (left.kind == Cond::kClean && right.kind == Cond::kClean) return left;
  if (solo) {
    // One stream: every condition names it; the later one holds for all.
    GPUALLOC_DCHECK(left.kind != Cond::kMap && right.kind != Cond::kMap);
    if (left.kind == Cond::kClean) return right;
    if (right.kind == Cond::kClean) return left;
    if (left.kind == Cond::kStream && right.kind == Cond::kStream &&
        left.stream == right.stream) {
      left.stamp = std::max(left.stamp, right.stamp);
      return left;
    }
    // Sets (RecordStream named the solo stream itself): the union.
    if (left.kind == Cond::kStream) std::swap(left, right);
    if (left.kind == Cond::kStream) {
      const CondId set = NewSet();
      AddPair(set, left.stream, left.stamp);
      left = ChunkCond{Cond::kSet, set, 0, 0};
    }
    ForEachPair(right, 0, UINT64_MAX, [&](std::uintptr_t s, std::uint64_t q) {
      AddPair(left.id, s, q);
    });
    Release(right);
    return left;
  }
  if (left.kind != Cond::kMap && right.kind != Cond::kMap &&
      SameUniform(left, right)) {
    Release(right);
    return left;
  }
  // Each part keeps its own condition: the left map grows in place.
  CondId map;
  if (left.kind == Cond::kMap) {
    map = left.id;
  } else {
    map = NewMap();
    AppendUniform(maps_[map], left, left_bytes);
  }
  if (right.kind == Cond::kMap) {
    scratch_.swap(maps_[right.id]);  // both keep their capacity
    map_live_[right.id] = false;
    free_maps_.push_back(right.id);
    --live_maps_;
    for (CondPart& part : scratch_) {
      AppendUniform(maps_[map], part.cond, part.bytes);
    }
    scratch_.clear();
  } else {
    AppendUniform(maps_[map], right, right_bytes);
  }
  return Normalize(map);
}

std::pair<ChunkCond, ChunkCond> ConditionTable::Split(
    ChunkCond c, std::uint64_t total, std::uint64_t front_bytes) {
  GPUALLOC_DCHECK(front_bytes > 0 && front_bytes < total);
  if (c.kind != Cond::kMap) return {CopyUniform(c), c};
  const CondId front_map = NewMap();  // may move maps_: index afresh below
  Map& back = maps_[c.id];
  Map& front = maps_[front_map];
  std::uint64_t at = 0;
  std::size_t whole = 0;  // parts wholly in the front
  while (at + back[whole].bytes <= front_bytes) {
    at += back[whole].bytes;
    ++whole;
  }
  for (std::size_t i = 0; i < whole; ++i) front.push_back(back[i]);
  if (at < front_bytes) {
    // A part straddles the cut: both sides get its condition.
    CondPart& straddle = back[whole];
    front.push_back(CondPart{front_bytes - at, CopyUniform(straddle.cond)});
    straddle.bytes -= front_bytes - at;
  }
  back.erase(back.begin(), back.begin() + static_cast<std::ptrdiff_t>(whole));
  (void)total;
  const ChunkCond f = Normalize(front_map);
  const ChunkCond b = Normalize(c.id);
  return {f, b};
}

bool ConditionTable::SettleUniform(ChunkCond& u, const ReuseOracle& oracle) {
  switch (u.kind) {
    case Cond::kClean:
    case Cond::kMap:
      return false;
    case Cond::kStream:
      if (!oracle.KnownComplete(u.stream, u.stamp)) return false;
      u = ChunkCond();
      return true;
    case Cond::kSet: {
      Pairs_& set = sets_[u.id];
      const std::size_t before = set.size();
      set.erase(std::remove_if(set.begin(), set.end(),
                               [&oracle](const StreamStamp& p) {
                                 return oracle.KnownComplete(p.stream, p.stamp);
                               }),
                set.end());
      if (set.size() == before) return false;
      if (set.size() <= 1) {
        const std::optional<StreamStamp> only =
            set.empty() ? std::nullopt : std::optional(set.front());
        DeleteSet(u.id);
        u = only.has_value()
                ? ChunkCond{Cond::kStream, kNoCond, only->stream, only->stamp}
                : ChunkCond();
      }
      return true;
    }
  }
  return false;
}

ChunkCond ConditionTable::Coalesce(CondId map) {
  Map& m = maps_[map];
  std::size_t out = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (out > 0 && SameUniform(m[out - 1].cond, m[i].cond)) {
      m[out - 1].bytes += m[i].bytes;
      Release(m[i].cond);
      continue;
    }
    m[out++] = m[i];
  }
  m.resize(out);
  return Normalize(map);
}

bool ConditionTable::Settle(ChunkCond& c, const ReuseOracle& oracle) {
  if (c.kind != Cond::kMap) return SettleUniform(c, oracle);
  bool changed = false;
  for (CondPart& part : maps_[c.id]) {
    changed |= SettleUniform(part.cond, oracle);
  }
  if (!changed) return false;
  // Neighbours that became equal merge.
  c = Coalesce(c.id);
  return true;
}

ChunkCond ConditionTable::DropFront(ChunkCond c, std::uint64_t front_bytes) {
  if (c.kind != Cond::kMap) return c;
  Map& m = maps_[c.id];
  std::size_t whole = 0;
  std::uint64_t at = 0;
  while (at + m[whole].bytes <= front_bytes) {
    at += m[whole].bytes;
    Release(m[whole].cond);
    ++whole;
  }
  m[whole].bytes -= front_bytes - at;
  m.erase(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(whole));
  return Normalize(c.id);
}

bool ConditionTable::UniformUsable(const ChunkCond& u, std::uintptr_t stream,
                                   const ReuseOracle& oracle) const {
  switch (u.kind) {
    case Cond::kClean:
      return true;
    case Cond::kStream:
      return oracle.KnownOrdered(stream, u.stream, u.stamp);
    case Cond::kSet:
      for (const StreamStamp& p : sets_[u.id]) {
        if (!oracle.KnownOrdered(stream, p.stream, p.stamp)) return false;
      }
      return true;
    case Cond::kMap:
      return false;
  }
  return false;
}

bool ConditionTable::UsableNow(const ChunkCond& c, std::uint64_t offset,
                               std::uint64_t bytes, std::uintptr_t stream,
                               const ReuseOracle& oracle) const {
  if (c.kind != Cond::kMap) return UniformUsable(c, stream, oracle);
  const std::uint64_t end = offset + bytes;
  std::uint64_t at = 0;
  for (const CondPart& part : maps_[c.id]) {
    if (at >= end) break;
    if (at + part.bytes > offset && !UniformUsable(part.cond, stream, oracle)) {
      return false;
    }
    at += part.bytes;
  }
  return true;
}

std::optional<ConditionTable::Window> ConditionTable::BestUsableWindow(
    const ChunkCond& c, std::uint64_t base, std::uint64_t total,
    std::uint64_t bytes, std::uint64_t alignment, std::uintptr_t stream,
    const ReuseOracle& oracle) const {
  GPUALLOC_DCHECK(c.kind == Cond::kMap);
  (void)total;
  std::optional<Window> best;
  // Each maximal run of usable parts, in address order.
  const Map& m = maps_[c.id];
  std::uint64_t at = 0;
  std::size_t i = 0;
  while (i < m.size()) {
    if (!UniformUsable(m[i].cond, stream, oracle)) {
      at += m[i].bytes;
      ++i;
      continue;
    }
    const std::uint64_t run_start = at;
    while (i < m.size() && UniformUsable(m[i].cond, stream, oracle)) {
      at += m[i].bytes;
      ++i;
    }
    const std::uint64_t run = at - run_start;
    const std::uint64_t start =
        ((base + run_start + alignment - 1) & ~(alignment - 1)) - base;
    if (start + bytes <= at && (!best.has_value() || run < best->run)) {
      best = Window{start, run};
    }
  }
  return best;
}

std::uint64_t ConditionTable::UsablePrefix(const ChunkCond& c,
                                           std::uint64_t total,
                                           std::uintptr_t stream,
                                           const ReuseOracle& oracle) const {
  if (c.kind != Cond::kMap) {
    return UniformUsable(c, stream, oracle) ? total : 0;
  }
  std::uint64_t bytes = 0;
  for (const CondPart& part : maps_[c.id]) {
    if (!UniformUsable(part.cond, stream, oracle)) break;
    bytes += part.bytes;
  }
  return bytes;
}

std::uint64_t ConditionTable::UsableSuffix(const ChunkCond& c,
                                           std::uint64_t total,
                                           std::uintptr_t stream,
                                           const ReuseOracle& oracle) const {
  if (c.kind != Cond::kMap) {
    return UniformUsable(c, stream, oracle) ? total : 0;
  }
  const Map& m = maps_[c.id];
  std::uint64_t bytes = 0;
  for (auto it = m.rbegin(); it != m.rend(); ++it) {
    if (!UniformUsable(it->cond, stream, oracle)) break;
    bytes += it->bytes;
  }
  return bytes;
}

bool ConditionTable::Names(const ChunkCond& c, std::uintptr_t stream) const {
  bool found = false;
  ForEachPair(c, 0, UINT64_MAX,
              [&](std::uintptr_t s, std::uint64_t) { found |= s == stream; });
  return found;
}

std::string ConditionTable::UniformText(const ChunkCond& u) const {
  switch (u.kind) {
    case Cond::kClean:
      return "clean";
    case Cond::kStream:
      return absl::StrFormat("{stream %#x at stamp %d}", u.stream, u.stamp);
    case Cond::kSet: {
      std::vector<std::string> pairs;
      for (const StreamStamp& p : sets_[u.id]) {
        pairs.push_back(
            absl::StrFormat("stream %#x at stamp %d", p.stream, p.stamp));
      }
      return absl::StrCat("{", absl::StrJoin(pairs, ", "), "}");
    }
    case Cond::kMap:
      return "map";
  }
  return "?";
}

std::string ConditionTable::Text(const ChunkCond& c) const {
  if (c.kind != Cond::kMap) return UniformText(c);
  std::vector<std::string> parts;
  for (const CondPart& part : maps_[c.id]) {
    parts.push_back(
        absl::StrFormat("%d bytes %s", part.bytes, UniformText(part.cond)));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::string ConditionTable::CheckMap(const ChunkCond& c,
                                     std::uint64_t total) const {
  if (!IsLiveMap(c.id)) return absl::StrFormat("map %d is not live", c.id);
  const Map& m = maps_[c.id];
  if (m.size() < 2) {
    return absl::StrFormat(
        "map %d has %d parts (a uniform condition "
        "belongs in the chunk)",
        c.id, m.size());
  }
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const CondPart& part = m[i];
    if (part.bytes == 0)
      return absl::StrFormat("map %d: part %d empty", c.id, i);
    if (part.cond.kind == Cond::kMap) {
      return absl::StrFormat("map %d: part %d is a map", c.id, i);
    }
    if (part.cond.kind == Cond::kSet && !IsLiveSet(part.cond.id)) {
      return absl::StrFormat("map %d: part %d names dead set %d", c.id, i,
                             part.cond.id);
    }
    if (i > 0 && SameUniform(m[i - 1].cond, part.cond)) {
      return absl::StrFormat("map %d: parts %d and %d have the same condition",
                             c.id, i - 1, i);
    }
    sum += part.bytes;
  }
  if (sum != total) {
    return absl::StrFormat("map %d: parts sum to %d bytes, chunk has %d", c.id,
                           sum, total);
  }
  return "";
}

std::size_t ConditionTable::MemoryBytes() const {
  std::size_t bytes =
      sets_.capacity() * sizeof(Pairs_) + maps_.capacity() * sizeof(Map) +
      (set_live_.capacity() + map_live_.capacity()) / 8 +
      (free_sets_.capacity() + free_maps_.capacity()) * sizeof(CondId);
  for (const Map& m : maps_) bytes += m.capacity() * sizeof(CondPart);
  return bytes;
}

}  // namespace gpualloc::core
