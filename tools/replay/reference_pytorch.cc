// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_pytorch.cc: a model of PyTorch's CUDA caching
// allocator with native segments (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator), for comparison. Each rule names the function of
// that file it follows. What it leaves out: docs/REFERENCE.md,
// "Reference models".
//
// Version: the rules were checked against PyTorch's main branch
// (version.txt 2.15.0a0; malloc, alloc_block,
// release_available_cached_blocks, release_cached_blocks,
// garbage_collect_cached_blocks, unmapHandles) and an earlier 2.x version of
// the file (with set_fraction), whose stages at the limit are the same.
// Under set_per_process_memory_fraction (PyTorchModelOptions::memory_limit)
// a new segment that would bring the reserved bytes above the limit fails
// like a refused cudaMalloc, and malloc goes through its stages:
// garbage_collect_cached_blocks (with garbage_collection_threshold),
// alloc_block, release_available_cached_blocks (with max_split_size) and
// alloc_block, release_cached_blocks and alloc_block, then out of memory.
// Host waits counted: each event synchronized
// (synchronize_and_free_events), each release step whose cudaFree calls
// synchronized the device (one per step: the first cudaFree waits for the
// queued work, the rest find none), and with expandable segments each
// unmap's cudaStreamSynchronize.
//
// This file: the allocation and free paths, their size rules and the
// events; the blocks and the class: reference_pytorch.h.
#include "tools/replay/reference_pytorch.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/replay/reference.h"

namespace gpualloc::replay {
namespace pytorch_internal {

PyTorchModel::~PyTorchModel() {
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
  // Each chain's first block, found before any block is deleted: several
  // heads may lie in one chain.
  std::set<Block*> firsts;
  for (Block* b : heads) {
    while (b->prev != nullptr) b = b->prev;
    firsts.insert(b);
  }
  for (Block* b : firsts) {
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

absl::StatusOr<void*> PyTorchModel::Allocate(std::size_t bytes, Stream stream,
                                             std::size_t, Tag) {
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
    absl::StatusOr<Block*> b =
        AllocBlock(alloc_size, size, stream.handle, small);
    if (!b.ok()) return b.status();
    if (*b == nullptr &&
        ReleaseAvailableCachedBlocks(pool, stream.handle, size)) {
      b = AllocBlock(alloc_size, size, stream.handle, small);
      if (!b.ok()) return b.status();
    }
    if (*b == nullptr) {
      s = ReleaseCachedBlocks();
      if (!s.ok()) return s;
      b = AllocBlock(alloc_size, size, stream.handle, small);
      if (!b.ok()) return b.status();
    }
    if (*b == nullptr) {
      return OutOfMemory(
          bytes,
          o_.memory_limit != 0
              ? absl::StrCat("a new segment of ", alloc_size,
                             " bytes would pass the memory limit of ",
                             o_.memory_limit,
                             " bytes (set_per_process_memory_fraction), or "
                             "the device refused it, after every cached "
                             "segment was released")
              : std::string("cudaMalloc of a new segment failed after "
                            "every cached segment was released"));
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

absl::Status PyTorchModel::Deallocate(void* ptr, Stream stream) {
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

Snapshot PyTorchModel::GetSnapshot() const {
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

void PyTorchModel::FreeSummary(std::uint64_t* largest, double* frag) const {
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

// round_size: at least kMinBlockSize, a multiple of it; with
// roundup_power2_divisions N, a size above kMinBlockSize * N rounds up to
// the next of N steps of its power-of-two interval
// (roundup_power2_next_division).
std::uint64_t PyTorchModel::RoundSize(std::uint64_t size) const {
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
std::uint64_t PyTorchModel::AllocationSize(std::uint64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

// should_split: small blocks keep a remainder of at least kMinBlockSize,
// large ones only a remainder above kSmallSize, and no block is split for
// a request of max_split_size or more.
bool PyTorchModel::ShouldSplit(const Block& block, std::uint64_t size) const {
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
Block* PyTorchModel::GetFreeBlock(BlockPool& pool, std::uintptr_t stream,
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

// alloc_block: a new segment of `alloc_size` (get_allocation_size) from
// cudaMalloc, or with expandable segments the pages `size` needs (nullptr
// when the device or set_per_process_memory_fraction refuses it). The limit
// is checked against alloc_size in both cases, as PyTorch does.
absl::StatusOr<Block*> PyTorchModel::AllocBlock(std::uint64_t alloc_size,
                                                std::uint64_t size,
                                                std::uintptr_t stream,
                                                bool small) {
  if (o_.memory_limit != 0 &&
      stats_.bytes_reserved + alloc_size > o_.memory_limit) {
    return nullptr;
  }
  if (o_.expandable_segments) {
    return TryAllocateExpandableBlock(stream, small, size);
  }
  size = alloc_size;
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
void PyTorchModel::FreeBlock(Block* block) {
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

// process_events: per stream, in record order, the events that completed
// (cudaEventQuery) free their blocks; the first one still pending stops
// that stream's walk.
absl::Status PyTorchModel::ProcessEvents() {
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
absl::StatusOr<EventHandle> PyTorchModel::GetEvent() {
  if (!event_pool_.empty()) {
    const EventHandle e = event_pool_.back();
    event_pool_.pop_back();
    return e;
  }
  return backend_->CreateEvent();
}

}  // namespace pytorch_internal

using pytorch_internal::PyTorchModel;

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
