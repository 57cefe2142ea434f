// SPDX-License-Identifier: Apache-2.0
// tools/replay/reference_pytorch.h: the model of PyTorch's CUDA caching
// allocator (reference.h, CreatePyTorchModel): its blocks, segments and
// pools, and the model's class, whose rules live in reference_pytorch.cc
// (allocation and free), reference_pytorch_release.cc (releasing cached
// blocks, garbage collection) and reference_pytorch_expandable.cc
// (expandable segments). Internal to tools/replay.
#ifndef GPUALLOC_TOOLS_REPLAY_REFERENCE_PYTORCH_H_
#define GPUALLOC_TOOLS_REPLAY_REFERENCE_PYTORCH_H_

#include <cstddef>
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
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"
#include "tools/layer.h"
#include "tools/replay/reference.h"
#include "tools/replay/reference_model.h"

namespace gpualloc::replay::pytorch_internal {

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

  ~PyTorchModel() override;

  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream, std::size_t,
                                 Tag) override;
  absl::Status Deallocate(void* ptr, Stream stream) override;
  Snapshot GetSnapshot() const override;

  // empty_cache(): release_cached_blocks.
  absl::Status Trim() override { return ReleaseCachedBlocks(); }

 protected:
  void FreeSummary(std::uint64_t* largest, double* frag) const override;

 private:
  // The allocation and free paths: their size rules, the blocks they take
  // and cache, and the events of blocks used on other streams
  // (reference_pytorch.cc).
  std::uint64_t RoundSize(std::uint64_t size) const;
  static std::uint64_t AllocationSize(std::uint64_t size);
  bool ShouldSplit(const Block& block, std::uint64_t size) const;
  Block* GetFreeBlock(BlockPool& pool, std::uintptr_t stream,
                      std::uint64_t size);
  absl::StatusOr<Block*> AllocBlock(std::uint64_t alloc_size,
                                    std::uint64_t size, std::uintptr_t stream,
                                    bool small);
  void FreeBlock(Block* block);
  absl::Status ProcessEvents();
  absl::StatusOr<EventHandle> GetEvent();
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

  // Releasing cached blocks and garbage collection
  // (reference_pytorch_release.cc).
  // The number of segments freed (cudaFree) and pages unmapped.
  absl::StatusOr<std::uint64_t> ReleaseBlocks(BlockPool& pool);
  // release_block: cudaFree of a cached whole segment.
  void ReleaseBlock(BlockPool& pool, Block* b);
  // cudaStreamSynchronize(stream) before an unmap (ExpandableSegment::
  // unmapHandles): a host wait.
  absl::Status SynchronizeStream(std::uintptr_t stream);
  bool ReleaseAvailableCachedBlocks(BlockPool& pool, std::uintptr_t stream,
                                    std::uint64_t size);
  absl::Status ReleaseCachedBlocks();
  void GarbageCollectCachedBlocks();

  // Expandable segments (reference_pytorch_expandable.cc).
  std::set<Block*, ByAddress>& Unmapped(const Block& b) {
    return b.small ? small_unmapped_ : large_unmapped_;
  }
  absl::StatusOr<Block*> TryAllocateExpandableBlock(std::uintptr_t stream,
                                                    bool small,
                                                    std::uint64_t size);
  absl::StatusOr<Block*> FindExpandableBlock(std::uintptr_t stream, bool small,
                                             std::uint64_t size);
  absl::StatusOr<Block*> MapBlock(Block* b, std::uint64_t size);
  absl::StatusOr<Block*> UnmapBlock(BlockPool& pool, Block* b);
  void ReleaseExpandableSegment(Block* b);

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

}  // namespace gpualloc::replay::pytorch_internal

#endif  // GPUALLOC_TOOLS_REPLAY_REFERENCE_PYTORCH_H_
