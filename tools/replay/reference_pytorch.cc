// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_pytorch.cc: a model of PyTorch's CUDA caching
// allocator with native segments (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator), for comparison. Each rule names the function of
// that file it follows. What it leaves out: docs/ARCHITECTURE.md,
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
    for (auto& [stream, q] : events_) {
      for (auto& e : q) heads.push_back(e.second);
    }
    std::set<Block*> seen;
    for (Block* b : heads) {
      while (b->prev != nullptr) b = b->prev;
      if (!seen.insert(b).second) continue;
      (void)backend_->Free(b->ptr);
      while (b != nullptr) {
        Block* next = b->next;
        delete b;
        b = next;
      }
    }
    for (EventHandle e : event_pool_) (void)backend_->DestroyEvent(e);
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
      // alloc_block, then release_available_cached_blocks (max_split_size
      // only) and alloc_block, then release_cached_blocks (synchronize every
      // outstanding event, free every unsplit cached block) and alloc_block
      // once more (the retry).
      absl::StatusOr<Block*> b = AllocBlock(alloc_size, stream.handle, small);
      if (!b.ok()) return b.status();
      if (*b == nullptr &&
          ReleaseAvailableCachedBlocks(pool, stream.handle, size)) {
        b = AllocBlock(alloc_size, stream.handle, small);
        if (!b.ok()) return b.status();
      }
      if (*b == nullptr) {
        s = ReleaseCachedBlocks();
        if (!s.ok()) return s;
        b = AllocBlock(alloc_size, stream.handle, small);
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
      pool.insert(rest);
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
    for (const auto& [stream, q] : events_) {
      for (const auto& e : q) add(e.second);
    }
    for (const auto& [base, head] : heads) {
      RegionSnapshot r;
      r.base = base;
      for (const Block* b = head; b != nullptr; b = b->next) {
        r.size += b->size;
        ChunkSnapshot c;
        c.address = b->ptr;
        c.size = b->size;
        c.requested = b->requested;
        c.in_use = b->allocated;
        c.stream = b->stream;
        r.chunks.push_back(c);
      }
      snap.regions.push_back(std::move(r));
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
    if (block.small) return remaining >= kMinBlockSize;
    return size < o_.max_split_size && remaining > kSmallSize;
  }

  // get_free_block: the smallest cached block of the request's stream that
  // fits (lower_bound on (stream, size, address)); with max_split_size, a
  // request below it never takes a block of it or more, and a request of it
  // or more takes a block at most kLargeBuffer larger.
  Block* GetFreeBlock(BlockPool& pool, std::uintptr_t stream,
                      std::uint64_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
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
      if (n == nullptr || n->allocated || n->event_count > 0) continue;
      pool.erase(n);
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
    pool.insert(block);
  }

  // release_block of every cached block that is a whole segment
  // (release_blocks: !prev && !next).
  void ReleaseBlocks(BlockPool& pool) {
    for (auto it = pool.begin(); it != pool.end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
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
    if (o_.max_split_size == UINT64_MAX) return false;
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
  return std::unique_ptr<Allocator>(
      new PyTorchModel(options, std::move(backend)));
}

}  // namespace gpualloc::replay
