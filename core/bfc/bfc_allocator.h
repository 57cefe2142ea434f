// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_allocator.h: the BFC allocator facade (Options::mode kBfc): the
// lock, growth, garbage collection, statistics, out-of-memory reports and
// private pools around BfcCore, composing the per-stream front caches
// (core/bfc/stream_fronts.h, each with a lock of its own) and the tags' memory
// (core/bfc/tagged_memory.h). It holds the allocator's lock and is the BFC
// mode's only caller of the backend. Its hot paths (Allocate, Deallocate) are
// inline here; the rest is in core/bfc/bfc_allocator*.cc, grouped below by
// file. Only core/ includes this header (CreateAllocator builds the facade).
#ifndef GPUALLOC_CORE_BFC_ALLOCATOR_H_
#define GPUALLOC_CORE_BFC_ALLOCATOR_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "core/alignment.h"
#include "core/bfc/allocation_request.h"
#include "core/bfc/bfc.h"
#include "core/bfc/private_pools.h"
#include "core/bfc/size_class.h"
#include "core/bfc/stream_fronts.h"
#include "core/bfc/tagged_memory.h"
#include "core/config/options.h"
#include "core/ipc/shared_blocks.h"
#include "core/layer.h"
#include "core/lock.h"
#include "core/regions/region_source.h"
#include "core/report/history.h"
#include "core/report/oom_message.h"
#include "core/status_macros.h"
#include "core/streams/stream_order.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

class BfcAllocator final : public Allocator, private SlabSource {
 public:
  BfcAllocator(ResolvedOptions resolved, std::shared_ptr<Backend> backend);

  // Live allocations die with the allocator (source_ returns every region).
  ~BfcAllocator() override;

  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream given,
                                 std::size_t alignment, Tag tag) override {
    if (ABSL_PREDICT_FALSE(tag != 0)) {
      return AllocateTagged(bytes, given, alignment, tag);
    }
    return AllocateHandlingOutOfMemory(*this, bytes, given, alignment);
  }
  // (Out of line, so that the untagged path inlines with tag 0.)
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<void*> AllocateTagged(
      std::size_t bytes, Stream given, std::size_t alignment, Tag tag);

  // For AllocateHandlingOutOfMemory: a failure final after the handler.
  void CountOutOfMemory() {
    LockGuard lock(&mu_);
    ++num_ooms_;
  }

  absl::Status Deallocate(void* ptr, Stream stream) override {
    if (ptr == nullptr)
      return absl::OkStatus();  // like free(NULL) and cudaFree(0)
    // A block the stream's front cache handed out goes back there, under
    // that front's lock alone.
    if (ABSL_PREDICT_TRUE(fronts_.on())) {
      const StreamFronts::Freed freed = fronts_.Put(
          Key(stream).handle, reinterpret_cast<std::uintptr_t>(ptr));
      if (ABSL_PREDICT_TRUE(freed.put == FrontCache::PutResult::kCached)) {
        if (ABSL_PREDICT_FALSE(freed.evict)) EvictFromFront(*freed.front);
        return absl::OkStatus();
      }
      if (freed.put == FrontCache::PutResult::kAlreadyFree) {
        return StreamFronts::FreedTwice(reinterpret_cast<std::uintptr_t>(ptr),
                                        *freed.front);
      }
    }
    LockGuard lock(&mu_);
    if (ABSL_PREDICT_FALSE(slow_on_)) return DeallocateWithPools(ptr, stream);
    if (fronts_.on()) {
      return DeallocateToFront(reinterpret_cast<std::uintptr_t>(ptr),
                               Key(stream).handle);
    }
    const std::uintptr_t handle = Key(stream).handle;
    const std::uint64_t before = core_.counters().bytes_in_use;
    absl::Status status =
        core_.Deallocate(reinterpret_cast<std::uintptr_t>(ptr), handle,
                         stream_order_.stamp(), oracle_);
    if (ABSL_PREDICT_FALSE(core_.multi_stream()) && status.ok()) {
      NoteFreeAmongStreams(handle, before - core_.counters().bytes_in_use);
    }
    MaybeValidate();
    return status;
  }

  absl::Status RecordStream(void* ptr, Stream stream) override;
  absl::Status ReleaseStream(Stream given) override;
  Stats GetStats() const override;
  void ResetPeakStats() override;
  void SetOutOfMemoryHandler(OutOfMemoryHandler handler) override;
  Snapshot GetSnapshot() const override;
  absl::Status Trim() override;
  absl::Status SetLimit(std::uint64_t bytes) override;
  absl::Status Validate() const override;
  const DeviceInfo& device() const override { return backend_->info(); }
  const Options& options() const override { return resolved_.options; }

  // Private pools and graph capture (core/bfc/bfc_allocator_pools.cc).
  absl::StatusOr<PoolId> CreatePool() override;
  absl::Status RetainPool(PoolId pool) override;
  absl::Status ReleasePool(PoolId pool, Stream last_use) override;

  // While a stream allocates to a pool on a backend that can capture, every
  // operation behaves as during a capture (capturing_; see the .cc).
  absl::Status BeginAllocateToPool(PoolId pool, Stream stream) override;
  absl::Status EndAllocateToPool(PoolId pool) override;

  // Sleep and wake (core/bfc/bfc_allocator_tags.cc).
  absl::StatusOr<SleepReport> Sleep(Tag tag, bool backup) override;
  absl::Status Wake(Tag tag) override;

  // Sharing blocks with other processes (core/bfc/bfc_allocator_ipc.cc).
  absl::StatusOr<std::string> Export(void* ptr) override;
  absl::StatusOr<ImportedBlock> Import(absl::string_view description) override;
  absl::Status CloseImport(void* ptr) override;

  // Whether a routed stream captures now (an answer the backend cannot give
  // counts as yes).
  bool CaptureNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One attempt at the request; an out-of-memory answer goes through
  // NoteOutOfMemory (`pending`: null on the handler's retry).
  ABSL_ATTRIBUTE_ALWAYS_INLINE absl::StatusOr<void*> AllocateOnce(
      std::size_t bytes, Stream given, std::size_t alignment,
      PendingOutOfMemory* pending, Tag tag = 0) {
    const Stream stream = Key(given);
    const std::uint64_t min_block = resolved_.min_block_size;
    if (alignment != 0) {  // 0, the common case, needs no check
      GPUALLOC_RETURN_IF_ERROR(
          CheckAlignment(bytes, alignment, resolved_.max_alignment));
    }
    const std::uint64_t align = std::max<std::uint64_t>(alignment, min_block);
    // Sizes beyond the limit are rejected before any arithmetic can overflow.
    const std::uint64_t limit = limit_now_.load(std::memory_order_relaxed);
    if (bytes > limit) return RejectTooLarge(bytes, pending);
    const std::uint64_t size =
        ChunkSize(bytes, min_block, resolved_.size_divisions);
    const std::uint64_t needed = size + (align - min_block);
    if (needed > limit) return RejectTooLarge(bytes, pending);

    // The stream's front cache: a block of exactly this size it freed,
    // under that front's lock alone (no alignment beyond the minimum block,
    // which every cached block has).
    if (ABSL_PREDICT_TRUE(fronts_.on()) && align == min_block && tag == 0) {
      if (const std::optional<std::uint64_t> hit =
              fronts_.Take(stream.handle, size, bytes)) {
        return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*hit));
      }
    }

    LockGuard lock(&mu_);
    if (ABSL_PREDICT_FALSE(slow_on_ || tag != 0)) {
      return AllocateWithPools({.requested = bytes,
                                .chunk_size = size,
                                .alignment = align,
                                .needed = needed,
                                .stream = stream},
                               pending, tag);
    }
    const bool fronts = fronts_.on();
    if (fronts) fronts_.Fold();
    if (ABSL_PREDICT_FALSE(core_.multi_stream())) BeginSearch(stream.handle);
    std::optional<DeviceAddress> address = core_.Allocate(
        size, bytes, align, stream.handle, oracle_, first_search_);
    if (!address.has_value()) {
      if (stream_order_.has_error()) return EventFailure(bytes, given);
      absl::StatusOr<DeviceAddress> grown = AllocateSlow({.requested = bytes,
                                                          .chunk_size = size,
                                                          .alignment = align,
                                                          .needed = needed,
                                                          .stream = stream},
                                                         pending);
      if (!grown.ok()) return grown.status();
      address = *grown;
    }
    if (fronts) fronts_.Sample();
    MaybeValidate();
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
  }

 private:
  friend class TagSlabs;
  // Private pools grow by blocks of whole multiples of this.
  static constexpr std::uint64_t kSlabUnit = std::uint64_t{2} << 20;
  // A stream handle no caller uses: "every stream" where one is excluded.
  static constexpr std::uintptr_t kNoStream = UINTPTR_MAX;
  static constexpr std::size_t kReleasedHandlesKept = 1024;

  // --- core/bfc/bfc_allocator.cc
  // ------------------------------------------------
  std::unique_ptr<RegionSource> MakeSource();
  // `full`: walk every mapping; else (debug_checks=2) the regions' ends.
  absl::Status ValidateLocked(bool full) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeValidate() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_VALIDATE_EACH_OP(ValidateLocked(/*full=*/false));
  }
  Stats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The global path of a free while fronts are on (StreamFronts::Deallocate).
  ABSL_ATTRIBUTE_NOINLINE absl::Status DeallocateToFront(DeviceAddress address,
                                                         std::uintptr_t stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `f`'s evictions (over budget or too old) freed in the core; unlocked `f`.
  ABSL_ATTRIBUTE_NOINLINE void EvictFromFront(StreamFront& f)
      ABSL_LOCKS_EXCLUDED(mu_);

  // --- core/bfc/bfc_allocator_slow_path.cc ---------------------------------
  // Before a search with several streams: a new search for the stream
  // order, and its markers and questions on the budget (not while a graph
  // is captured).
  ABSL_ATTRIBUTE_NOINLINE void BeginSearch(std::uintptr_t stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free among several streams: the freeing stream (and the other streams
  // the block's condition names) are noted for a marker
  // (StreamOrder::NoteFree).
  ABSL_ATTRIBUTE_NOINLINE void NoteFreeAmongStreams(std::uintptr_t stream,
                                                    std::uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Out of fitting free chunks: growth, waits, collection; or out of memory.
  absl::StatusOr<DeviceAddress> AllocateSlow(const AllocationRequest& request,
                                             PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One more attempt at the core; *event_failed tells a failing event call
  // from an honest "nothing fits".
  std::optional<DeviceAddress> Retry(
      const AllocationRequest& request, bool* event_failed,
      BfcCore::Search search = BfcCore::Search::kAll)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Several streams, before growing: ask what completed, settle, retry;
  // then, as the policy says, make the stream wait for the best fit.
  std::optional<DeviceAddress> SettleAndRetry(const AllocationRequest& request,
                                              bool* event_failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every free region or granule back to the device (Trim, collection).
  absl::Status ReleaseFree() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A backend event call failed: reported (nothing handed out), no guessing.
  absl::Status EventFailure(std::uint64_t bytes, Stream stream,
                            absl::Status error = absl::OkStatus())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OutOfMemory(const AllocationRequest& request,
                           const absl::Status& why, PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RejectTooLarge(std::size_t bytes, PendingOutOfMemory* pending);
  absl::Status RejectTooLargeLocked(std::size_t bytes,
                                    PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every out-of-memory answer: counted or prepared for the handler; history.
  absl::Status Exhausted(std::uint64_t bytes, absl::Status error,
                         const Stats& stats, PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- core/bfc/bfc_allocator_pools.cc
  // ------------------------------------------ The allocation path once a
  // private pool or tag was made.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<void*> AllocateWithPools(
      const AllocationRequest& request, PendingOutOfMemory* pending, Tag tag)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ABSL_ATTRIBUTE_NOINLINE absl::Status DeallocateWithPools(void* ptr,
                                                           Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Turns the pool-aware paths and figures on (the first pool or tag).
  void EnablePoolPaths() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AllocateSlow, its device calls in relaxed mode during a capture.
  absl::StatusOr<DeviceAddress> AllocateSlowRelaxed(
      const AllocationRequest& request, PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SlabSource: private pools' blocks from general memory any stream may use.
  absl::StatusOr<DeviceAddress> TakeSlab(std::uint64_t* bytes,
                                         std::uintptr_t key) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Contiguous(DeviceAddress a, DeviceAddress b) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void ReturnSlab(DeviceAddress base,
                  absl::Span<const std::uintptr_t> streams) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Released handles, and whether anything names a stream (ReleasePool).
  void RememberReleased(std::uintptr_t stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NamesStream(std::uintptr_t stream) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- core/bfc/bfc_allocator_tags.cc
  // ------------------------------------------- An allocation with a tag, from
  // the tag's pool.
  absl::StatusOr<DeviceAddress> AllocateToTag(Tag tag,
                                              const AllocationRequest& request,
                                              PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A slab for a tag (a mapping of its own with expandable regions).
  absl::StatusOr<DeviceAddress> TakeTagSlab(std::uint64_t* bytes,
                                            std::uintptr_t key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<SlabSource> MakeTagSlabs();
  // Why Sleep / Wake cannot run now (also: a graph capture underway), or OK.
  absl::Status CheckSleepable(absl::string_view call, Tag tag, bool backup)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tags' free blocks back to general memory (not a sleeping tag's).
  void ReturnFreeTagMemory() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tags' free blocks, then every free region, back to the device.
  absl::Status ReleaseAllFree() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- core/bfc/bfc_allocator_ipc.cc
  // -------------------------------------------- The size of the live block
  // at `address` (general memory, a private pool's or a tag's), or 0.
  std::uint64_t BlockSize(DeviceAddress address) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees, on their free's stream, the exported blocks held for importers
  // that no importer has open anymore; a block whose free fails stays held
  // and is tried again at the next call (TryReleaseHeld returns the first
  // such error, ReleaseHeld leaves it for that call).
  absl::Status TryReleaseHeld() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseHeld() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)TryReleaseHeld();
  }
  // DeallocateWithPools without the export check.
  absl::Status FreeBlock(DeviceAddress address, Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Inline helpers -------------------------------------------------------
  // What the core may ask the device: nothing during a graph capture.
  ReuseOracle* Oracle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ABSL_PREDICT_FALSE(capturing_) ? &known_only_ : oracle_;
  }
  // Whether the slow path may record markers, ask about them and wait.
  bool MayAsk() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream_order_.streams() && !capturing_;
  }
  // Reserved from the device: regions less memory asleep, plus pending_bytes.
  std::uint64_t Physical() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return core_.counters().bytes_reserved - source_->sleeping_bytes() +
           source_->pending_bytes();
  }
  // Handed out: the general core's, pool slabs replaced by the pools' blocks.
  std::uint64_t InUse() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return core_.counters().bytes_in_use - pools_.bytes_reserved() +
           pools_.bytes_in_use() - tags_.pools().bytes_reserved() +
           tags_.pools().bytes_in_use();
  }
  std::uint64_t Requested() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return core_.counters().bytes_requested - pools_.slabs_requested() +
           pools_.bytes_requested() - tags_.pools().slabs_requested() +
           tags_.pools().bytes_requested();
  }
  // The stream as the core sees it (all streams are one without streams).
  Stream Key(Stream stream) const {
    return Stream(stream.handle & stream_mask_);
  }

  // Fixed at creation but for `limit`, which SetLimit writes under mu_;
  // what reads it without the lock reads limit_now_.
  ResolvedOptions resolved_;
  const std::shared_ptr<Backend> backend_;
  std::atomic<std::uint64_t> limit_now_{resolved_.limit};

  mutable Lock mu_;
  // The allocation history (Options::history), null when off.
  const std::unique_ptr<History> history_ = MakeHistory(resolved_.history);
  // A pool or tag made, or the history on: the out-of-line paths (one flag
  // next to the lock, on the hot cache line).
  bool slow_on_ ABSL_GUARDED_BY(mu_) = resolved_.history != 0;
  // A private pool or a tag was made: the pool-aware statistics.
  bool pools_on_ ABSL_GUARDED_BY(mu_) = false;
  BfcCore core_ ABSL_GUARDED_BY(mu_);
  StreamOrder stream_order_ ABSL_GUARDED_BY(mu_);
  // The oracle of a backend without streams: its work runs in call order, so
  // memory freed "on" any stream is free for every stream.
  AllComplete no_streams_;
  ReuseOracle* const oracle_;  // &stream_order_ or &no_streams_
  // All ones with streams, 0 without (Key).
  const std::uintptr_t stream_mask_;
  // How the core's first search for a request looks past a best fit the
  // stream may not use at once: kBestFit with the best_fit policy.
  const BfcCore::Search first_search_ =
      resolved_.options.cross_stream_reuse == CrossStreamReuse::kBestFit
          ? BfcCore::Search::kBestFit
          : BfcCore::Search::kFast;
  std::uint64_t num_ooms_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const OutOfMemoryHandler> oom_handler_ ABSL_GUARDED_BY(mu_);
  std::uint64_t streams_released_ ABSL_GUARDED_BY(mu_) = 0;
  // The handles ReleaseStream was given, newest last (RememberReleased).
  std::deque<std::uintptr_t> released_handles_ ABSL_GUARDED_BY(mu_);
  // The oracle during a graph capture: *oracle_'s known answers only.
  KnownOnly known_only_ ABSL_GUARDED_BY(mu_);
  PrivatePools pools_ ABSL_GUARDED_BY(mu_);
  TaggedMemory tags_ ABSL_GUARDED_BY(mu_);
  // The tags' SlabSource (TakeTagSlab; the rest as for private pools).
  const std::unique_ptr<SlabSource> tag_slabs_ = MakeTagSlabs();
  // A stream allocating to a pool may capture a graph: no event calls, host
  // waits or returned memory, and device calls in relaxed mode.
  bool capturing_ ABSL_GUARDED_BY(mu_) = false;
  // The out-of-memory report a pool's growth prepares for the handler.
  PendingOutOfMemory* slab_pending_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Once a pool was made: the statistics pools change.
  std::uint64_t peak_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t peak_requested_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t largest_alloc_ ABSL_GUARDED_BY(mu_) = 0;
  // Once a tag slept, Physical()'s peak (the core's counts memory asleep).
  bool slept_ ABSL_GUARDED_BY(mu_) = false;
  std::uint64_t peak_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  // Blocks exported to other processes and memory imported from them.
  SharedBlocks shared_ ABSL_GUARDED_BY(mu_){backend_.get()};
  // The front caches (Options::front_cache). Not guarded by mu_: their hot
  // paths run under each front's own lock; the rest requires mu_.
  StreamFronts fronts_;
  // Separate or expandable regions. Declared last, destroyed first: it
  // returns every region while the core and the stream order still exist.
  const std::unique_ptr<RegionSource> source_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_BFC_ALLOCATOR_H_
