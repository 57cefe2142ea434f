// core/bfc.cc: best-fit with coalescing over regions.
#include "core/bfc.h"

#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpualloc::core {
namespace {

absl::Status Broken(absl::string_view invariant, absl::string_view detail) {
  return absl::InternalError(
      absl::StrFormat("invariant %s broken: %s", invariant, detail));
}

}  // namespace

BfcCore::BfcCore(const BfcConfig& config)
    : config_(config),
      large_page_threshold_(config.large_page != 0 ? config.large_page
                                                   : UINT64_MAX),
      bins_(&chunks_) {
  GPUALLOC_DCHECK(std::has_single_bit(config_.min_block_size));
}

void BfcCore::InsertFree(ChunkId id) { bins_.Insert(id); }

void BfcCore::RemoveFree(ChunkId id) { bins_.Remove(id); }

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
}

ChunkId BfcCore::NewFreeLike(ChunkId from, DeviceAddress address,
                             std::uint64_t size, RegionId region) {
  const ChunkId id = chunks_.New();  // may move the table: index afresh
  Chunk& c = chunks_[id];
  c.address = address;
  c.size = size;
  c.region = region;
  CopyCondition(from, id);
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
  if (multi_stream_ && !a.in_use && !b.in_use) {
    // Several streams: drop what is known complete on both sides, then merge
    // whatever may merge now (each side also with its other neighbour).
    if (oracle != nullptr) {
      DropComplete(a, *oracle);
      DropComplete(b, *oracle);
    }
    // The left seam chunk may itself have merged away (into its own left
    // neighbour) by now: merge it only while it lives and is free.
    MergeNeighbours(seam_right);
    if (chunks_.IsLive(seam_left) && !chunks_[seam_left].in_use) {
      MergeNeighbours(seam_left);
    }
  } else if (!a.in_use && !b.in_use) {
    const std::uint64_t merged = a.size + b.size;
    AbsorbFence(a, b, oracle);
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

void BfcCore::CarveFree(DeviceAddress address, std::uint64_t bytes) {
  const std::optional<RegionId> found = RegionAt(address);
  GPUALLOC_DCHECK(found.has_value());
  const RegionId rid = *found;
  // The free chunk holding the range.
  ChunkId id = regions_[rid].first;
  while (chunks_[id].address + chunks_[id].size <= address) {
    id = chunks_[id].next;
  }
  const DeviceAddress end = address + bytes;
  const Chunk& c = chunks_[id];
  GPUALLOC_DCHECK(!c.in_use && c.address <= address &&
                  end <= c.address + c.size && bytes > 0);
  const Region old = regions_[rid];
  const ChunkId prev = c.prev;
  const ChunkId next = c.next;
  const DeviceAddress chunk_start = c.address;
  const DeviceAddress chunk_end = c.address + c.size;

  // The pieces of the chunk left on either side of the hole.
  ChunkId front = kNoChunk, back = kNoChunk;
  if (chunk_start < address) {
    front = NewFreeLike(id, chunk_start, address - chunk_start, rid);
  }
  if (end < chunk_end) {
    back = NewFreeLike(id, end, chunk_end - end, rid);
  }
  RemoveFree(id);
  ReleaseFenceSet(chunks_[id]);
  chunks_.Delete(id);

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

RegionEdges BfcCore::region_edges(RegionId id) const {
  const Region& r = regions_[id];
  // Fresh memory is clean: with several streams it merges only with ends
  // that are clean too.
  auto joins = [this](const Chunk& c) {
    return !c.in_use && (!multi_stream_ || c.fence == Fence::kClean);
  };
  RegionEdges e;
  if (joins(chunks_[r.first])) e.free_head = chunks_[r.first].size;
  if (joins(chunks_[r.last])) e.free_tail = chunks_[r.last].size;
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
    } else if (c.fence == Fence::kStream) {
      on_condition(c.stream, c.free_stamp);
    } else if (c.fence == Fence::kSet) {
      for (const StreamStamp& pair : fences_.Get(c.fence_set)) {
        on_condition(pair.stream, pair.stamp);
      }
    }
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
  ReleaseFenceSet(chunks_[r.first]);
  chunks_.Delete(r.first);
  region_index_.erase(r.base);
  counters_.bytes_reserved -= r.size;
  r = Region();
  free_region_ids_.push_back(id);
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
  ForEachStreamField([&](std::uintptr_t& s) {
    if (s == stream) s = key;
  });
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
  if (c.fence_set == kNoFenceSet && allocated_on == stream) {
    c.fence = Fence::kStream;
  } else {
    FenceFreed(c, stream, allocated_on, stamp);
  }
  // Neighbours whose work is known complete may merge now.
  if (oracle != nullptr) ResolveNeighbours(id, *oracle);
  c.in_use = false;
  MergeFreed</*kSeveralStreams=*/true>(id, oracle);
}

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
         fences_.MemoryBytes() + regions_.capacity() * sizeof(Region) +
         region_index_.size() * 64;
}

}  // namespace gpualloc::core
