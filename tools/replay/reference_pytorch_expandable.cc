// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_pytorch_expandable.cc: the PyTorch model's
// expandable segments (expandable_segments:True): address space per stream
// and pool mapped page by page as requests need it, and unmapped again when
// the cache is released. The model: reference_pytorch.h.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpualloc/core/backend.h"
#include "tools/replay/reference_pytorch.h"

namespace gpualloc::replay::pytorch_internal {

// try_allocate_expandable_block: the stream's segment of the pool (made on
// first use, find_expandable_block) maps as many pages as the request
// needs after the free space it extends (map_block).
absl::StatusOr<Block*> PyTorchModel::TryAllocateExpandableBlock(
    std::uintptr_t stream, bool small, std::uint64_t size) {
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
absl::StatusOr<Block*> PyTorchModel::FindExpandableBlock(std::uintptr_t stream,
                                                         bool small,
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
absl::StatusOr<Block*> PyTorchModel::MapBlock(Block* b, std::uint64_t size) {
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

// unmap_block: the whole pages inside the free block are unmapped, after
// the segment's stream is synchronized (unmapHandles); what is left before
// and after them stays free and mapped. Returns the unmapped block (merged
// with unmapped neighbours), or nullptr when the block holds no whole page.
absl::StatusOr<Block*> PyTorchModel::UnmapBlock(BlockPool& pool, Block* b) {
  Segment& seg = *b->seg;
  const std::uint64_t first = (b->ptr - seg.base + seg.page - 1) / seg.page;
  const std::uint64_t last = (b->ptr + b->size - seg.base) / seg.page;
  if (last <= first) return nullptr;
  // The segment belongs to the block's stream.
  absl::Status synced = SynchronizeStream(b->stream);
  if (!synced.ok()) return synced;
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
void PyTorchModel::ReleaseExpandableSegment(Block* b) {
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

}  // namespace gpualloc::replay::pytorch_internal
