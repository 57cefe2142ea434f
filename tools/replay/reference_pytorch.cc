// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_pytorch.cc: a model of PyTorch's CUDA caching
// allocator with native segments (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator), for comparison. Each rule names the function of
// that file it follows. What it leaves out: docs/REFERENCE.md,
// "Reference models".
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpualloc/allocator.h"
#include "gpualloc/backend.h"
#include "tools/replay/reference.h"
#include "tools/replay/reference_model.h"

namespace gpualloc::replay {
namespace {

// CUDACachingAllocator.cpp's constants.
constexpr std::uint64_t kMinBlockSize = 512;        // all sizes round to this
constexpr std::uint64_t kSmallSize = 1048576;       // largest "small" request
constexpr std::uint64_t kSmallBuffer = 2097152;     // small requests' segments
constexpr std::uint64_t kLargeBuffer = 20971520;    // 1-10 MiB requests' segs
constexpr std::uint64_t kMinLargeAlloc = 10485760;  // above: rounded segments
constexpr std::uint64_t kRoundLarge = 2097152;      // their rounding

struct Block {
  std::uint64_t ptr = 0;
  std::uint64_t size = 0;
  std::uint64_t requested = 0;
  std::uintptr_t stream = 0;  // the stream it was allocated on (its pool key)
  bool small = false;         // which pool
  bool allocated = false;
  int event_count = 0;    // outstanding events of streams that used it
  Block* prev = nullptr;  // neighbours in the segment (split blocks)
  Block* next = nullptr;
  // Expandable segments: the segment, and whether the block's pages are
  // mapped (an unmapped block is address space only).
  struct Segment* seg = nullptr;
  bool mapped = true;
  // garbage_collection_threshold: its pool's get_free_block count when it
  // was cached (its age is the count since).
  std::uint64_t gc_count_base = 0;
};

// ExpandableSegment: address space for 1 1/8 of the device's memory, mapped
// page by page (2 MiB pages for the small pool, 20 MiB for the large), one
// per stream and pool.
struct Segment {
  std::uint64_t base = 0;
  std::uint64_t size = 0;
  std::uint64_t page = 0;
  std::vector<PhysicalHandle> handles;  // per page; 0: not mapped
};

// BlockComparatorAddress: (stream, address), for the unmapped blocks.
struct ByAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    return a->ptr < b->ptr;
  }
};

// BlockComparatorSize: (stream, size, address).
struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};
using BlockPool = std::set<Block*, BySize>;

class PyTorchModel final : public ReferenceModel {
 public:
  PyTorchModel(const PyTorchModelOptions& o, std::shared_ptr<Backend> backend)
      : ReferenceModel("pytorch", std::move(backend)), o_(o) {
    stats_.bytes_limit =
        o.memory_limit != 0 ? o.memory_limit : backend_->info().total_bytes;
  }

  ~PyTorchModel() override {
    // Every block, free or not, once; then the segments go back.
    std::vector<Block*> heads;
    for (auto& [ptr, b] : allocated_) heads.push_back(b);
    for (Block* b : small_) heads.push_back(b);
    for (Block* b : large_) heads.push_back(b);
    for (Block* b : small_unmapped_) heads.push_back(b);
    for (Block* b : large_unmapped_) heads.push_back(b);
    for (auto& [stream, q] : events_) {
      for (auto& e : q) heads.push_back(e.second);
    }
    std::set<Block*> seen;
    for (Block* b : heads) {
      while (b->prev != nullptr) b = b->prev;
      if (!seen.insert(b).second) continue;
      if (b->seg == nullptr) (void)backend_->Free(b->ptr);
      while (b != nullptr) {
        Block* next = b->next;
        delete b;
        b = next;
      }
    }
    for (EventHandle e : event_pool_) (void)backend_->DestroyEvent(e);
    for (const std::unique_ptr<Segment>& seg : segments_) {
      for (std::size_t i = 0; i < seg->handles.size(); ++i) {
        if (seg->handles[i] == 0) continue;
        (void)backend_->Unmap(seg->base + i * seg->page, seg->page);
        (void)backend_->ReleasePhysical(seg->handles[i]);
      }
      (void)backend_->FreeAddress(seg->base, seg->size);
    }
  }

  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream, std::size_t,
                                 Tag) override {
    // malloc(): outstanding events first (process_events).
    absl::Status s = ProcessEvents();
    if (!s.ok()) return s;
    const std::uint64_t size = RoundSize(bytes);
    const bool small = size <= kSmallSize;  // get_pool
    BlockPool& pool = small ? small_ : large_;
    const std::uint64_t alloc_size = AllocationSize(size);
    Block* block = GetFreeBlock(pool, stream.handle, size);
    if (block == nullptr) {
      // With garbage_collection_threshold, garbage_collect_cached_blocks
      // first. Then alloc_block, then release_available_cached_blocks
      // (max_split_size only) and alloc_block, then release_cached_blocks
      // (synchronize every outstanding event, free every unsplit cached block)
      // and alloc_block once more (the retry). Expandable segments map the
      // request's pages instead of a segment of get_allocation_size.
      if (GcEnabled()) GarbageCollectCachedBlocks();
      const std::uint64_t want = o_.expandable_segments ? size : alloc_size;
      absl::StatusOr<Block*> b = AllocBlock(want, stream.handle, small);
      if (!b.ok()) return b.status();
      if (*b == nullptr &&
          ReleaseAvailableCachedBlocks(pool, stream.handle, size)) {
        b = AllocBlock(want, stream.handle, small);
        if (!b.ok()) return b.status();
      }
      if (*b == nullptr) {
        s = ReleaseCachedBlocks();
        if (!s.ok()) return s;
        b = AllocBlock(want, stream.handle, small);
        if (!b.ok()) return b.status();
      }
      if (*b == nullptr) {
        return OutOfMemory(bytes,
                           "cudaMalloc of a new segment failed after every "
                           "cached segment was released");
      }
      block = *b;
    }
    // alloc_found_block: the front of the block is the allocation; the rest
    // stays cached when should_split says so.
    if (ShouldSplit(*block, size)) {
      Block* rest = new Block(*block);
      rest->ptr = block->ptr + size;
      rest->size = block->size - size;
      rest->prev = block;
      rest->next = block->next;
      if (rest->next != nullptr) rest->next->prev = rest;
      block->next = rest;
      block->size = size;
      InsertIntoBlocks(pool, rest);
    }
    block->allocated = true;
    block->requested = bytes;
    allocated_[block->ptr] = block;
    OnAllocated(bytes, block->size);
    return reinterpret_cast<void*>(block->ptr);
  }

  absl::Status Deallocate(void* ptr, Stream stream) override {
    auto it = allocated_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == allocated_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the pytorch model did not hand out ",
                       reinterpret_cast<std::uintptr_t>(ptr)));
    }
    Block* block = it->second;
    allocated_.erase(it);
    block->allocated = false;
    OnFreed(block->requested, block->size);
    block->requested = 0;
    // free(): a block used on another stream (record_stream; a trace's free
    // on another stream than the allocation's means the program recorded
    // it) waits for an event on that stream (insert_events); otherwise it
    // is cached at once (free_block).
    if (stream.handle != block->stream) {
      absl::StatusOr<EventHandle> e = GetEvent();
      if (!e.ok()) return e.status();
      absl::Status s = backend_->RecordEvent(*e, stream);
      if (!s.ok()) return s;
      ++stats_.events_recorded;
      ++block->event_count;
      events_[stream.handle].emplace_back(*e, block);
      return absl::OkStatus();
    }
    FreeBlock(block);
    return absl::OkStatus();
  }

  Snapshot GetSnapshot() const override {
    Snapshot snap;
    std::map<std::uint64_t, const Block*> heads;
    auto add = [&](const Block* b) {
      while (b->prev != nullptr) b = b->prev;
      heads.emplace(b->ptr, b);
    };
    for (const auto& [p, b] : allocated_) add(b);
    for (const Block* b : small_) add(b);
    for (const Block* b : large_) add(b);
    for (const Block* b : small_unmapped_) add(b);
    for (const Block* b : large_unmapped_) add(b);
    for (const auto& [stream, q] : events_) {
      for (const auto& e : q) add(e.second);
    }
    // A region per run of mapped blocks (an expandable segment's mapped
    // stretches; a native segment is one).
    for (const auto& [base, head] : heads) {
      RegionSnapshot r;
      for (const Block* b = head; b != nullptr; b = b->next) {
        if (!b->mapped) {
          if (r.size != 0) snap.regions.push_back(std::move(r));
          r = RegionSnapshot();
          continue;
        }
        if (r.size == 0) r.base = b->ptr;
        r.size += b->size;
        ChunkSnapshot c;
        c.address = b->ptr;
        c.size = b->size;
        c.requested = b->requested;
        c.in_use = b->allocated;
        c.stream = b->stream;
        r.chunks.push_back(c);
      }
      if (r.size != 0) snap.regions.push_back(std::move(r));
    }
    snap.stats = GetStats();
    return snap;
  }

  // empty_cache(): release_cached_blocks.
  absl::Status Trim() override { return ReleaseCachedBlocks(); }

 protected:
  void FreeSummary(std::uint64_t* largest, double* frag) const override {
    std::uint64_t total = 0, max = 0;
    for (const BlockPool* pool : {&small_, &large_}) {
      for (const Block* b : *pool) {
        total += b->size;
        max = std::max(max, b->size);
      }
    }
    *largest = max;
    *frag = total == 0
                ? 0
                : 1.0 - static_cast<double>(max) / static_cast<double>(total);
  }

 private:
  // round_size: at least kMinBlockSize, a multiple of it; with
  // roundup_power2_divisions N, a size above kMinBlockSize * N rounds up to
  // the next of N steps of its power-of-two interval
  // (roundup_power2_next_division).
  std::uint64_t RoundSize(std::uint64_t size) const {
    if (size < kMinBlockSize) return kMinBlockSize;
    const std::uint64_t n = o_.roundup_power2_divisions;
    if (n > 1 && size > kMinBlockSize * n) {
      if ((size & (size - 1)) == 0) return size;
      const std::uint64_t floor = std::uint64_t{1}
                                  << (63 - __builtin_clzll(size));
      const std::uint64_t step = floor / n;  // n is a power of two
      if (step == 0) return floor << 1;
      const std::uint64_t down = size & ~(step - 1);
      return down == size ? size : down + step;
    }
    return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
  }

  // get_allocation_size: the segment a request that found nothing gets.
  static std::uint64_t AllocationSize(std::uint64_t size) {
    if (size <= kSmallSize) return kSmallBuffer;
    if (size < kMinLargeAlloc) return kLargeBuffer;
    return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
  }

  // should_split: small blocks keep a remainder of at least kMinBlockSize,
  // large ones only a remainder above kSmallSize, and no block is split for
  // a request of max_split_size or more.
  bool ShouldSplit(const Block& block, std::uint64_t size) const {
    const std::uint64_t remaining = block.size - size;
    if (block.small || o_.expandable_segments) {
      return remaining >= kMinBlockSize;
    }
    return size < o_.max_split_size && remaining > kSmallSize;
  }

  // get_free_block: the smallest cached block of the request's stream that
  // fits (lower_bound on (stream, size, address)); with max_split_size, a
  // request below it never takes a block of it or more, and a request of it
  // or more takes a block at most kLargeBuffer larger.
  Block* GetFreeBlock(BlockPool& pool, std::uintptr_t stream,
                      std::uint64_t size) {
    // Block ages are tracked only with garbage collection on.
    if (GcEnabled()) ++FreeBlockCalls(pool);
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    if ((*it)->seg != nullptr) {
      // An expandable block counts as the size it can grow to (itself and
      // the unmapped space after it): the smallest such is taken.
      auto grows_to = [](const Block* b) {
        return b->size +
               (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
      };
      auto next = std::next(it);
      while ((*it)->seg != nullptr && next != pool.end() &&
             (*next)->stream == stream && grows_to(*next) < grows_to(*it)) {
        it = next++;
      }
    }
    if (size < o_.max_split_size && (*it)->size >= o_.max_split_size) {
      return nullptr;
    }
    if (size >= o_.max_split_size && (*it)->size >= size + kLargeBuffer) {
      return nullptr;
    }
    Block* b = *it;
    pool.erase(it);
    return b;
  }

  // alloc_block: a new segment from cudaMalloc (nullptr when the device or
  // set_per_process_memory_fraction refuses it).
  absl::StatusOr<Block*> AllocBlock(std::uint64_t size, std::uintptr_t stream,
                                    bool small) {
    if (o_.memory_limit != 0 &&
        stats_.bytes_reserved + size > o_.memory_limit) {
      return nullptr;
    }
    if (o_.expandable_segments) {
      return TryAllocateExpandableBlock(stream, small, size);
    }
    absl::StatusOr<DeviceAddress> p = backend_->Allocate(size);
    if (!p.ok()) {
      if (absl::IsResourceExhausted(p.status())) return nullptr;
      return p.status();
    }
    OnReserved(size);
    Block* b = new Block;
    b->ptr = *p;
    b->size = size;
    b->stream = stream;
    b->small = small;
    return b;
  }

  // free_block: merge with free neighbours (try_merge_blocks: not allocated,
  // no outstanding event), then cache in the block's pool.
  void FreeBlock(Block* block) {
    BlockPool& pool = block->small ? small_ : large_;
    for (Block* n : {block->prev, block->next}) {
      if (n == nullptr || n->allocated || n->event_count > 0 ||
          n->mapped != block->mapped) {
        continue;
      }
      if (n->mapped) {
        pool.erase(n);
      } else {
        Unmapped(*n).erase(n);
      }
      if (n == block->prev) {
        block->ptr = n->ptr;
        block->prev = n->prev;
        if (block->prev != nullptr) block->prev->next = block;
      } else {
        block->next = n->next;
        if (block->next != nullptr) block->next->prev = block;
      }
      block->size += n->size;
      delete n;
    }
    if (block->mapped) {
      InsertIntoBlocks(pool, block);
    } else {
      Unmapped(*block).insert(block);
    }
  }

  // release_block of every cached block that is a whole segment
  // (release_blocks: !prev && !next).
  void ReleaseBlocks(BlockPool& pool) {
    // Expandable blocks: their whole pages are unmapped (unmap_block), and a
    // segment left as one unmapped block goes (release_expandable_segment).
    std::vector<Block*> to_unmap;
    for (Block* b : pool) {
      if (b->seg != nullptr) to_unmap.push_back(b);
    }
    for (Block* b : to_unmap) {
      Block* u = UnmapBlock(pool, b);
      if (u != nullptr && u->prev == nullptr && u->next == nullptr) {
        ReleaseExpandableSegment(u);
      }
    }
    for (auto it = pool.begin(); it != pool.end();) {
      Block* b = *it;
      if (b->seg != nullptr || b->prev != nullptr || b->next != nullptr) {
        ++it;
        continue;
      }
      it = pool.erase(it);
      (void)backend_->Free(b->ptr);
      OnReleased(b->size);
      delete b;
    }
  }

  // release_available_cached_blocks: only with max_split_size: the
  // smallest oversize block of the stream at least as large as the request
  // (or max_split_size), else the largest ones until enough is freed.
  bool ReleaseAvailableCachedBlocks(BlockPool& pool, std::uintptr_t stream,
                                    std::uint64_t size) {
    // (Expandable segments' blocks are not segments: nothing to release
    // here.)
    if (o_.max_split_size == UINT64_MAX || o_.expandable_segments) {
      return false;
    }
    Block key;
    key.stream = stream;
    key.size = std::max(size, o_.max_split_size);
    auto it = pool.lower_bound(&key);
    std::vector<Block*> release;
    if (it == pool.end() || (*it)->stream != stream) {
      if (it == pool.begin()) return false;
      std::uint64_t released = 0;
      --it;
      while (released < key.size && (*it)->size >= o_.max_split_size &&
             (*it)->stream == stream) {
        released += (*it)->size;
        release.push_back(*it);
        if (it == pool.begin()) break;
        --it;
      }
      if (released < key.size) return false;
    } else {
      release.push_back(*it);
    }
    for (Block* b : release) {
      // Oversize blocks are never split (should_split), so each is a
      // whole segment.
      if (b->prev != nullptr || b->next != nullptr) continue;
      pool.erase(b);
      (void)backend_->Free(b->ptr);
      OnReleased(b->size);
      delete b;
    }
    return true;
  }

  // release_cached_blocks: synchronize_and_free_events (the host waits for
  // every outstanding event), then every unsplit cached block goes back.
  absl::Status ReleaseCachedBlocks() {
    for (auto& [stream, q] : events_) {
      while (!q.empty()) {
        auto [e, block] = q.front();
        q.pop_front();
        absl::Status s = backend_->SynchronizeEvent(e);
        if (!s.ok()) return s;
        ++stats_.host_waits;
        event_pool_.push_back(e);
        if (--block->event_count == 0) FreeBlock(block);
      }
    }
    ReleaseBlocks(large_);
    ReleaseBlocks(small_);
    return absl::OkStatus();
  }

  // process_events: per stream, in record order, the events that completed
  // (cudaEventQuery) free their blocks; the first one still pending stops
  // that stream's walk.
  absl::Status ProcessEvents() {
    for (auto& [stream, q] : events_) {
      while (!q.empty()) {
        auto [e, block] = q.front();
        absl::StatusOr<bool> done = backend_->QueryEvent(e);
        if (!done.ok()) return done.status();
        if (!*done) break;
        q.pop_front();
        event_pool_.push_back(e);
        if (--block->event_count == 0) FreeBlock(block);
      }
    }
    return absl::OkStatus();
  }
  bool GcEnabled() const {
    return o_.memory_limit != 0 && o_.garbage_collection_threshold > 0;
  }
  std::uint64_t& FreeBlockCalls(const BlockPool& pool) {
    return &pool == &small_ ? small_calls_ : large_calls_;
  }
  // BlockPool::insert_into_blocks: cached, its age counted from now.
  void InsertIntoBlocks(BlockPool& pool, Block* b) {
    b->gc_count_base = FreeBlockCalls(pool);
    pool.insert(b);
  }

  // garbage_collect_cached_blocks: above garbage_collection_threshold x the
  // limit, the unsplit cached large blocks at least as old as the average
  // go back, round after round, until enough is reclaimed (no
  // synchronization, unlike release_cached_blocks).
  void GarbageCollectCachedBlocks() {
    const auto threshold = static_cast<std::uint64_t>(
        o_.garbage_collection_threshold * static_cast<double>(o_.memory_limit));
    if (stats_.bytes_reserved <= threshold) return;
    const std::uint64_t target = stats_.bytes_reserved - threshold;
    const std::uint64_t calls = large_calls_;
    auto age = [calls](const Block* b) {
      return static_cast<double>(calls - b->gc_count_base);
    };
    auto freeable = [](const Block* b) {
      return b->seg == nullptr && b->prev == nullptr && b->next == nullptr;
    };
    double total_age = 0;
    std::uint64_t count = 0;
    for (const Block* b : large_) {
      if (!freeable(b)) continue;
      total_age += age(b);
      ++count;
    }
    std::uint64_t reclaimed = 0;
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
      const double average = total_age / static_cast<double>(count);
      freed = false;
      std::vector<Block*> old;
      for (Block* b : large_) {
        if (freeable(b) && age(b) >= average) old.push_back(b);
      }
      for (Block* b : old) {
        freed = true;
        reclaimed += b->size;
        total_age -= age(b);
        --count;
        large_.erase(b);
        (void)backend_->Free(b->ptr);
        OnReleased(b->size);
        delete b;
      }
    }
  }

  std::set<Block*, ByAddress>& Unmapped(const Block& b) {
    return b.small ? small_unmapped_ : large_unmapped_;
  }

  // try_allocate_expandable_block: the stream's segment of the pool (made on
  // first use, find_expandable_block) maps as many pages as the request
  // needs after the free space it extends (map_block).
  absl::StatusOr<Block*> TryAllocateExpandableBlock(std::uintptr_t stream,
                                                    bool small,
                                                    std::uint64_t size) {
    BlockPool& pool = small ? small_ : large_;
    absl::StatusOr<Block*> found = FindExpandableBlock(stream, small, size);
    if (!found.ok() || *found == nullptr) return found;
    Block* c = *found;
    if (!c->mapped) {
      absl::StatusOr<Block*> m = MapBlock(c, std::min(c->size, size));
      if (!m.ok() || *m == nullptr) return m;
      c = *m;
    }
    while (c->size < size) {
      // free -> unmapped -> ...: map some of the unmapped, merged into c.
      absl::StatusOr<Block*> m =
          MapBlock(c->next, std::min(size - c->size, c->next->size));
      if (!m.ok() || *m == nullptr) return m;
      c = *m;
    }
    pool.erase(c);
    return c;
  }

  // find_expandable_block: the lowest unmapped block of the stream's
  // segments (with the free block before it) that has room, else a new
  // segment.
  absl::StatusOr<Block*> FindExpandableBlock(std::uintptr_t stream, bool small,
                                             std::uint64_t size) {
    auto allocatable = [](const Block* b) {
      return b != nullptr && !b->allocated && b->event_count == 0;
    };
    auto room = [&](const Block* b) {
      std::uint64_t bytes = 0;
      while (bytes < size && allocatable(b)) {
        bytes += b->size;
        b = b->next;
      }
      return bytes >= size;
    };
    std::set<Block*, ByAddress>& unmapped =
        small ? small_unmapped_ : large_unmapped_;
    Block key;
    key.stream = stream;
    for (auto it = unmapped.lower_bound(&key);
         it != unmapped.end() && (*it)->stream == stream; ++it) {
      Block* c = *it;
      if (allocatable(c->prev)) c = c->prev;
      if (room(c)) return c;
    }
    const DeviceInfo& info = backend_->info();
    auto seg = std::make_unique<Segment>();
    seg->page = small ? kSmallBuffer : kLargeBuffer;
    const std::uint64_t want = info.total_bytes + info.total_bytes / 8;
    seg->size = (want + seg->page - 1) / seg->page * seg->page;
    absl::StatusOr<DeviceAddress> base = backend_->ReserveAddress(seg->size, 0);
    if (!base.ok()) {
      if (absl::IsResourceExhausted(base.status())) return nullptr;
      return base.status();
    }
    seg->base = *base;
    seg->handles.assign(seg->size / seg->page, 0);
    Block* b = new Block;
    b->ptr = seg->base;
    b->size = seg->size;
    b->stream = stream;
    b->small = small;
    b->mapped = false;
    b->seg = seg.get();
    segments_.push_back(std::move(seg));
    unmapped.insert(b);
    return b;
  }

  // map_block: whole pages over [b->ptr, b->ptr + size) (b is unmapped, so
  // page-aligned), each its own physical allocation; the mapped part becomes
  // a free block merged with its free mapped neighbours (it keeps the
  // merged block). nullptr when the device has no memory for them (what was
  // mapped here is undone).
  absl::StatusOr<Block*> MapBlock(Block* b, std::uint64_t size) {
    Segment& seg = *b->seg;
    const std::uint64_t first = (b->ptr - seg.base) / seg.page;
    const std::uint64_t last =
        (b->ptr + size - seg.base + seg.page - 1) / seg.page;
    // ExpandableSegment::map: every page's physical memory first (on
    // failure what was created is released and nothing is mapped), then
    // the mappings and their access.
    for (std::uint64_t i = first; i < last; ++i) {
      absl::StatusOr<PhysicalHandle> h = backend_->CreatePhysical(seg.page);
      if (!h.ok()) {
        for (std::uint64_t j = first; j < i; ++j) {
          (void)backend_->ReleasePhysical(seg.handles[j]);
          seg.handles[j] = 0;
        }
        if (absl::IsResourceExhausted(h.status())) return nullptr;
        return h.status();
      }
      seg.handles[i] = *h;
    }
    for (std::uint64_t i = first; i < last; ++i) {
      absl::Status s =
          backend_->Map(seg.base + i * seg.page, seg.page, seg.handles[i]);
      if (!s.ok()) return s;
      OnReserved(seg.page);
    }
    const std::uint64_t bytes = (last - first) * seg.page;
    absl::Status s = backend_->SetAccess(seg.base + first * seg.page, bytes);
    if (!s.ok()) return s;
    Unmapped(*b).erase(b);
    b->mapped = true;
    if (bytes < b->size) {
      Block* rest = new Block(*b);
      rest->ptr = b->ptr + bytes;
      rest->size = b->size - bytes;
      rest->mapped = false;
      rest->prev = b;
      if (rest->next != nullptr) rest->next->prev = rest;
      b->next = rest;
      b->size = bytes;
      Unmapped(*rest).insert(rest);
    }
    FreeBlock(b);
    return b;
  }

  // unmap_block: the whole pages inside the free block are unmapped; what
  // is left before and after them stays free and mapped. Returns the
  // unmapped block (merged with unmapped neighbours), or nullptr when the
  // block holds no whole page.
  Block* UnmapBlock(BlockPool& pool, Block* b) {
    Segment& seg = *b->seg;
    const std::uint64_t first = (b->ptr - seg.base + seg.page - 1) / seg.page;
    const std::uint64_t last = (b->ptr + b->size - seg.base) / seg.page;
    if (last <= first) return nullptr;
    pool.erase(b);
    const std::uint64_t lo = seg.base + first * seg.page;
    const std::uint64_t hi = seg.base + last * seg.page;
    for (std::uint64_t i = first; i < last; ++i) {
      (void)backend_->Unmap(seg.base + i * seg.page, seg.page);
      (void)backend_->ReleasePhysical(seg.handles[i]);
      seg.handles[i] = 0;
      OnReleased(seg.page);
    }
    if (lo > b->ptr) {  // prev -> before -> b
      Block* before = new Block(*b);
      before->size = lo - b->ptr;
      before->next = b;
      if (before->prev != nullptr) before->prev->next = before;
      b->prev = before;
      InsertIntoBlocks(pool, before);
    }
    if (b->ptr + b->size > hi) {  // b -> after -> next
      Block* after = new Block(*b);
      after->ptr = hi;
      after->size = b->ptr + b->size - hi;
      after->prev = b;
      if (after->next != nullptr) after->next->prev = after;
      b->next = after;
      InsertIntoBlocks(pool, after);
    }
    b->ptr = lo;
    b->size = hi - lo;
    b->mapped = false;
    FreeBlock(b);  // merges with unmapped neighbours, into the unmapped set
    return b;
  }

  // release_expandable_segment: a segment that is one unmapped block.
  void ReleaseExpandableSegment(Block* b) {
    Unmapped(*b).erase(b);
    (void)backend_->FreeAddress(b->seg->base, b->seg->size);
    for (auto it = segments_.begin(); it != segments_.end(); ++it) {
      if (it->get() == b->seg) {
        segments_.erase(it);
        break;
      }
    }
    delete b;
  }

  // EventPool: events are created once and reused.
  absl::StatusOr<EventHandle> GetEvent() {
    if (!event_pool_.empty()) {
      const EventHandle e = event_pool_.back();
      event_pool_.pop_back();
      return e;
    }
    return backend_->CreateEvent();
  }

  const PyTorchModelOptions o_;
  BlockPool small_, large_;
  std::uint64_t small_calls_ = 0, large_calls_ = 0;  // get_free_block calls
  // Expandable segments: the unmapped blocks per pool, and the segments.
  std::set<Block*, ByAddress> small_unmapped_, large_unmapped_;
  std::vector<std::unique_ptr<Segment>> segments_;
  absl::flat_hash_map<std::uintptr_t, Block*> allocated_;
  // Outstanding events per stream they were recorded on, in record order.
  std::map<std::uintptr_t, std::deque<std::pair<EventHandle, Block*>>> events_;
  std::vector<EventHandle> event_pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Allocator>> CreatePyTorchModel(
    const PyTorchModelOptions& options, std::shared_ptr<Backend> backend) {
  const std::uint32_t n = options.roundup_power2_divisions;
  if (n != 0 && (n & (n - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "roundup_power2_divisions must be a power of two, got ", n));
  }
  if (options.garbage_collection_threshold < 0 ||
      options.garbage_collection_threshold >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("garbage_collection_threshold must be in [0, 1), got ",
                     options.garbage_collection_threshold));
  }
  if (options.expandable_segments &&
      !backend->info().capabilities.virtual_memory) {
    return absl::FailedPreconditionError(
        absl::StrCat("expandable_segments needs virtual memory; backend ",
                     backend->info().backend, " has none"));
  }
  return std::unique_ptr<Allocator>(
      new PyTorchModel(options, std::move(backend)));
}

}  // namespace gpualloc::replay
