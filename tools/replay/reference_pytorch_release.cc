// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_pytorch_release.cc: the PyTorch model's cached
// blocks going back to the device: release_cached_blocks (empty_cache and
// the retry after a failed cudaMalloc), release_available_cached_blocks
// (max_split_size) and garbage_collect_cached_blocks
// (garbage_collection_threshold). The model: reference_pytorch.h.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/core/backend.h"
#include "tools/replay/reference_pytorch.h"

namespace gpualloc::replay::pytorch_internal {

// release_block: cudaFree of a cached block that is a whole segment.
void PyTorchModel::ReleaseBlock(BlockPool& pool, Block* b) {
  pool.erase(b);
  (void)backend_->Free(b->ptr);
  OnReleased(b->size);
  delete b;
}

// cudaStreamSynchronize(stream), as ExpandableSegment::unmapHandles makes
// before unmapping (unmapping does not wait for the segment's stream): the
// backend interface has no stream synchronize, so an event recorded on the
// stream is synchronized. A host wait.
absl::Status PyTorchModel::SynchronizeStream(std::uintptr_t stream) {
  absl::StatusOr<EventHandle> e = GetEvent();
  if (!e.ok()) return e.status();
  absl::Status s = backend_->RecordEvent(*e, Stream(stream));
  if (s.ok()) s = backend_->SynchronizeEvent(*e);
  event_pool_.push_back(*e);
  if (!s.ok()) return s;
  ++stats_.host_waits;
  return absl::OkStatus();
}

// release_blocks: release_block of every cached block that is a whole
// segment (!prev && !next).
absl::StatusOr<std::uint64_t> PyTorchModel::ReleaseBlocks(BlockPool& pool) {
  std::uint64_t released = 0;
  // Expandable blocks: their whole pages are unmapped (unmap_block), and a
  // segment left as one unmapped block goes (release_expandable_segment).
  std::vector<Block*> to_unmap;
  for (Block* b : pool) {
    if (b->seg != nullptr) to_unmap.push_back(b);
  }
  for (Block* b : to_unmap) {
    absl::StatusOr<Block*> u = UnmapBlock(pool, b);
    if (!u.ok()) return u.status();
    if (*u == nullptr) continue;
    ++released;
    if ((*u)->prev == nullptr && (*u)->next == nullptr) {
      ReleaseExpandableSegment(*u);
    }
  }
  for (auto it = pool.begin(); it != pool.end();) {
    Block* b = *it;
    ++it;
    if (b->seg != nullptr || b->prev != nullptr || b->next != nullptr) {
      continue;
    }
    ReleaseBlock(pool, b);
    ++released;
  }
  return released;
}

// release_available_cached_blocks: only with max_split_size: the
// smallest oversize block of the stream at least as large as the request
// (or max_split_size), else the largest ones until enough is freed.
bool PyTorchModel::ReleaseAvailableCachedBlocks(BlockPool& pool,
                                                std::uintptr_t stream,
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
  bool freed = false;
  for (Block* b : release) {
    // Oversize blocks are never split (should_split), so each is a
    // whole segment.
    if (b->prev != nullptr || b->next != nullptr) continue;
    ReleaseBlock(pool, b);
    freed = true;
  }
  // cudaFree synchronizes the device.
  if (freed) ++stats_.host_waits;
  return true;
}

// release_cached_blocks: synchronize_and_free_events (the host waits for
// every outstanding event), then every unsplit cached block goes back
// (release_blocks): cudaFree synchronizes the device, one more host wait
// when anything was freed (with expandable segments, each unmap's stream
// synchronization is counted instead).
absl::Status PyTorchModel::ReleaseCachedBlocks() {
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
  absl::StatusOr<std::uint64_t> large = ReleaseBlocks(large_);
  if (!large.ok()) return large.status();
  absl::StatusOr<std::uint64_t> small = ReleaseBlocks(small_);
  if (!small.ok()) return small.status();
  if (!o_.expandable_segments && *large + *small > 0) ++stats_.host_waits;
  return absl::OkStatus();
}

// garbage_collect_cached_blocks: above garbage_collection_threshold x the
// limit, the unsplit cached large blocks at least as old as the average
// go back, round after round, until enough is reclaimed (no event
// synchronization, unlike release_cached_blocks; its cudaFree calls still
// synchronize the device: one host wait when any was made).
void PyTorchModel::GarbageCollectCachedBlocks() {
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
  bool any = false;
  while (reclaimed < target && freed && count > 0) {
    const double average = total_age / static_cast<double>(count);
    freed = false;
    std::vector<Block*> old;
    for (Block* b : large_) {
      if (freeable(b) && age(b) >= average) old.push_back(b);
    }
    for (Block* b : old) {
      freed = true;
      any = true;
      reclaimed += b->size;
      total_age -= age(b);
      --count;
      ReleaseBlock(large_, b);
    }
  }
  if (any) ++stats_.host_waits;
}

}  // namespace gpualloc::replay::pytorch_internal
