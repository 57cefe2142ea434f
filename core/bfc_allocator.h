// SPDX-License-Identifier: Apache-2.0
// core/bfc_allocator.h: the BFC allocator facade (Options::mode kBfc): the
// lock, growth, garbage collection, statistics, out-of-memory reports and
// private pools around BfcCore.
//
// The facade is the only place that holds the lock and the only place in core/
// that calls the backend (through the abstract Backend, never a vendor API).
// Its hot paths (Allocate, Deallocate) are inline here; the rest lives in
//   core/allocator.cc       construction, queries, Trim, Validate, statistics;
//   core/bfc_slow_path.cc   growth, waiting for other streams, garbage
//                           collection and out-of-memory reports;
//   core/bfc_pools.cc       private pools and graph capture;
//   core/bfc_front.cc       the per-stream front caches' slow paths.
// Only core/ includes this header (CreateAllocator builds the facade).
#ifndef GPUALLOC_CORE_BFC_ALLOCATOR_H_
#define GPUALLOC_CORE_BFC_ALLOCATOR_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "core/alignment.h"
#include "core/bfc.h"
#include "core/front_cache.h"
#include "core/history.h"
#include "core/layer.h"
#include "core/lock.h"
#include "core/oom_message.h"
#include "core/options.h"
#include "core/private_pools.h"
#include "core/region_source.h"
#include "core/size_class.h"
#include "core/status_macros.h"
#include "core/stream_order.h"
#include "gpualloc/allocator.h"
#include "gpualloc/backend.h"

namespace gpualloc::core {

// The oracle of a backend without streams: its work runs in call order, so
// memory freed "on" any stream is free for every stream.
using NoStreams = AllCompleteOracle;

class BfcAllocator final : public Allocator, private SlabSource {
 public:
  BfcAllocator(ResolvedOptions resolved, std::shared_ptr<Backend> backend)
      : resolved_(std::move(resolved)),
        backend_(std::move(backend)),
        core_(BfcConfig{resolved_.min_block_size,
                        resolved_.options.max_internal_fragmentation,
                        resolved_.large_page}),
        stream_order_(backend_.get(), resolved_.options.cross_stream_reuse),
        oracle_(backend_->info().capabilities.streams
                    ? static_cast<ReuseOracle*>(&stream_order_)
                    : &no_streams_),
        // The top bit is the released streams' (no stream handle has it).
        stream_mask_(backend_->info().capabilities.streams
                         ? ~StreamOrder::kReleasedBit
                         : 0),
        known_only_(*oracle_),
        pools_(core_.config(),
               RoundUpToMultiple(kSlabUnit, resolved_.min_block_size)),
        tags_(core_.config(), resolved_.granularity, "tag"),
        source_(MakeSource()) {
    stream_order_.BindSearches(&core_.counters().num_allocs);
  }

  // Live allocations die with the allocator, as with any caching allocator:
  // every region goes back to the device with source_ (declared last,
  // destroyed first).
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
    if (ABSL_PREDICT_TRUE(fronts_on_.load(std::memory_order_relaxed))) {
      if (StreamFront* f = FrontFor(Key(stream).handle)) {
        FrontCache::PutResult put;
        bool evict = false;
        {
          LockGuard front_lock(&f->mu);
          const FrontCache::Put_ p =
              f->cache.Put(reinterpret_cast<std::uintptr_t>(ptr));
          put = p.result;
          if (put == FrontCache::PutResult::kCached) {
            f->Shift(-static_cast<std::int64_t>(p.size),
                     -static_cast<std::int64_t>(p.requested));
            evict = f->cache.NeedsEviction();
          }
        }
        if (ABSL_PREDICT_TRUE(put == FrontCache::PutResult::kCached)) {
          if (ABSL_PREDICT_FALSE(evict)) EvictFromFront(*f);
          return absl::OkStatus();
        }
        if (put == FrontCache::PutResult::kAlreadyFree) {
          return FreedTwice(reinterpret_cast<std::uintptr_t>(ptr), *f);
        }
      }
    }
    LockGuard lock(&mu_);
    if (ABSL_PREDICT_FALSE(slow_on_)) return DeallocateWithPools(ptr, stream);
    if (fronts_on_.load(std::memory_order_relaxed)) {
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

  absl::StatusOr<PoolId> CreatePool() override;

  absl::Status RetainPool(PoolId pool) override;

  absl::Status ReleasePool(PoolId pool, Stream last_use) override;

  // A capture may begin on a routed stream at any moment (PyTorch calls
  // beginAllocateToPool before cudaStreamBeginCapture), so while any stream
  // allocates to a pool on a backend that can capture, every operation
  // behaves as during a capture; the cold paths that would otherwise refuse
  // (Trim, ReleaseStream) ask the backend (CaptureNow).
  absl::Status BeginAllocateToPool(PoolId pool, Stream stream) override;

  absl::Status EndAllocateToPool(PoolId pool) override;

  // Sleep and wake (core/bfc_tags.cc).
  absl::StatusOr<SleepReport> Sleep(Tag tag, bool backup) override;
  absl::Status Wake(Tag tag) override;

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
    if (ABSL_PREDICT_TRUE(fronts_on_.load(std::memory_order_relaxed)) &&
        align == min_block && tag == 0) {
      if (StreamFront* f = FrontFor(stream.handle)) {
        std::optional<std::uint64_t> hit;
        {
          LockGuard front_lock(&f->mu);
          hit = f->cache.Take(size, bytes);
          if (hit.has_value()) {
            f->Raise(static_cast<std::int64_t>(size),
                     static_cast<std::int64_t>(bytes));
          }
        }
        if (hit.has_value()) {
          return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*hit));
        }
      }
    }

    LockGuard lock(&mu_);
    if (ABSL_PREDICT_FALSE(slow_on_ || tag != 0)) {
      return AllocateWithPools(size, bytes, align, needed, stream, pending,
                               tag);
    }
    const bool fronts = fronts_on_.load(std::memory_order_relaxed);
    if (fronts) FoldFigures();
    std::optional<DeviceAddress> address =
        core_.Allocate(size, bytes, align, stream.handle, oracle_);
    ResolveAdvanced();
    if (!address.has_value()) {
      if (stream_order_.has_error()) return EventFailure(bytes, given);
      absl::StatusOr<DeviceAddress> grown =
          AllocateSlow(size, bytes, align, needed, stream, pending);
      if (!grown.ok()) return grown.status();
      address = *grown;
    }
    if (fronts) SampleFigures();
    MaybeValidate();
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
  }

 private:
  std::unique_ptr<RegionSource> MakeSource();

  // Private pools grow by blocks of whole multiples of this.
  static constexpr std::uint64_t kSlabUnit = std::uint64_t{2} << 20;

  // The allocation path once a private pool was made: the stream's pool, or
  // the general core asking only what it may during a capture; the
  // statistics that pools change are kept here.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<void*> AllocateWithPools(
      std::uint64_t size, std::size_t bytes, std::uint64_t align,
      std::uint64_t needed, Stream stream, PendingOutOfMemory* pending, Tag tag)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Turns the pool-aware paths and figures on (the first pool or tag).
  void EnablePoolPaths() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Front caches (core/bfc_front.cc) -------------------------------------
  // One per stream alive (at most kMaxFronts at once; further streams go to
  // the core directly). A slot is made under mu_ and published by
  // num_fronts_, and never destroyed before the allocator: ReleaseStream
  // empties its front and frees the slot (its key becomes kFreeFront), and
  // the next stream's front reuses it. Lock order: mu_, then a front's mu.
  // What a front changes on top of the core's counters (see FoldFigures).
  struct FrontFigures {
    std::int64_t in_use = 0;
    std::int64_t requested = 0;
    // The largest in_use / requested since the last fold.
    std::int64_t in_use_max = 0;
    std::int64_t requested_max = 0;
    void Shift(std::int64_t in_use_by, std::int64_t requested_by) {
      in_use += in_use_by;
      requested += requested_by;
    }
    void Raise(std::int64_t in_use_by, std::int64_t requested_by) {
      Shift(in_use_by, requested_by);
      in_use_max = std::max(in_use_max, in_use);
      requested_max = std::max(requested_max, requested);
    }
  };
  // `stream` is read by every thread's FrontFor; the lock and everything it
  // guards start on the next cache line, which only the front's own users
  // write (sharing one line with the key cost 2 threads on 2 streams all
  // their scaling: 1.0x against 1.95x apart).
  struct alignas(64) StreamFront {
    StreamFront(std::uintptr_t s, std::uint64_t budget)
        : stream(s), cache(budget, kFrontMaxAge) {}
    // The stream served, or kFreeFront while the slot is free. Changed only
    // under mu_, with the front empty (MakeFront, FreeFront); read without
    // any lock by FrontFor, so that a thread on another stream may scan the
    // slot while it changes hands (the key it looks for is neither).
    std::atomic<std::uintptr_t> stream;
    alignas(64) Lock mu;
    FrontCache cache ABSL_GUARDED_BY(mu);
    FrontFigures figures ABSL_GUARDED_BY(mu);
    // Set by every change of `figures`, cleared by the fold that reads them:
    // a fold locks only the fronts that changed, so that a stream whose
    // cache takes no hits costs the global path nothing. Read unlocked.
    std::atomic<bool> changed{false};
    void Shift(std::int64_t in_use_by, std::int64_t requested_by)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      figures.Shift(in_use_by, requested_by);
      NoteChange();
    }
    void Raise(std::int64_t in_use_by, std::int64_t requested_by)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      figures.Raise(in_use_by, requested_by);
      NoteChange();
    }
    void NoteChange() {
      if (!changed.load(std::memory_order_relaxed)) {
        changed.store(true, std::memory_order_relaxed);
      }
    }
  };
  static constexpr int kMaxFronts = 16;
  // The key of a free slot: no stream's (live keys have the top bit clear,
  // released ones count up from 1 below it).
  static constexpr std::uintptr_t kFreeFront = ~std::uintptr_t{0};
  // Front operations a block may wait in its cache before it is evicted.
  static constexpr std::uint64_t kFrontMaxAge = std::uint64_t{1} << 16;
  // All streams' front caches together hold at most this many times
  // Options::front_cache.
  static constexpr std::uint64_t kFrontTotalFactor = 4;
  StreamFront* FrontFor(std::uintptr_t stream) const {
    const int n = num_fronts_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      if (fronts_[i]->stream.load(std::memory_order_acquire) == stream) {
        return fronts_[i].get();
      }
    }
    return nullptr;
  }
  // The stream's front, made if a slot is free or left (under mu_).
  StreamFront* MakeFront(std::uintptr_t stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the slot of `f`, emptied by ClearFront (its stream is released).
  void FreeFront(StreamFront& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Per live front at most front_cache bytes; all together at most
  // kFrontTotalFactor times that, shared evenly among the live fronts.
  std::uint64_t FrontBudget() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ShareFrontBudget() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The global path of a free while fronts are on: a second free of a cached
  // block is refused; a block a front handed out that another stream frees
  // leaves that front; a block freed on the stream it was allocated on
  // joins that stream's front when its size is in demand there; the rest
  // (and the front's evictions) go to the core.
  ABSL_ATTRIBUTE_NOINLINE absl::Status DeallocateToFront(DeviceAddress address,
                                                         std::uintptr_t stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees in the core the blocks the front must give up (over budget, or
  // past the age bound). `f`'s lock must not be held.
  ABSL_ATTRIBUTE_NOINLINE void EvictFromFront(StreamFront& f)
      ABSL_LOCKS_EXCLUDED(mu_);
  void EvictLocked(StreamFront& f, bool all)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, f.mu);
  ABSL_ATTRIBUTE_NOINLINE absl::Status FreedTwice(DeviceAddress address,
                                                  StreamFront& f);
  // Every front's cached blocks back to the core; whether there were any.
  bool FlushFronts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `stream`'s front gives up every block: cached ones to the core, live
  // ones to the core's bookkeeping (their frees go there).
  void ClearFront(StreamFront& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A block a front forgot: the core's requested figure becomes the block's.
  void TakeBack(StreamFront& f, const FrontCache::Forgotten& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, f.mu);
  // A block a front handed out is no longer the front's (RecordStream).
  void LeaveFront(DeviceAddress address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fronts off for good (a private pool or tag was made).
  void DisableFronts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The fronts' figures, added into `s` (StatsLocked).
  void AddFrontStats(Stats* s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateFronts() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // In-use and requested figures with front caches. The core counts a
  // cached block as in use; each front keeps, under its own lock, what it
  // changes on top of the core's counters C (minus its cached blocks, plus
  // what the blocks it handed out again were asked for, less what the core
  // recorded for them) and the largest such change since the last fold, so
  // that a hit writes nothing but its own front. C changes only under mu_:
  // FoldFigures (before C changes) adds C and every front's largest change
  // into the peaks and starts each front's largest again from where it
  // stands; SampleFigures (after C grew) adds C and the fronts' changes read
  // at the fold. The present figures are exact. With one front (one stream)
  // the peaks are exact too; with several they may run above the true peak,
  // by at most what the fronts held, because their largest changes may come
  // at different moments.
  static std::uint64_t Plus(std::uint64_t core, std::int64_t d) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(core) + d);
  }
  struct FoldedFigures {
    std::int64_t in_use = 0;  // the fronts' changes at the last fold
    std::int64_t requested = 0;
    std::uint64_t peak_in_use = 0;
    std::uint64_t peak_requested = 0;
    // Each front's changes as the last fold that locked it read them.
    std::array<std::int64_t, kMaxFronts> front_in_use{};
    std::array<std::int64_t, kMaxFronts> front_requested{};
  };
  void FoldFigures() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::int64_t in_use = 0, requested = 0, in_use_max = 0, requested_max = 0;
    const int n = num_fronts_.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      StreamFront& f = *fronts_[i];
      std::int64_t& u = folded_.front_in_use[i];
      std::int64_t& r = folded_.front_requested[i];
      std::int64_t u_max = u, r_max = r;
      // (A change racing with this load is read by the next fold.)
      if (f.changed.load(std::memory_order_relaxed)) {
        LockGuard front_lock(&f.mu);
        FrontFigures& g = f.figures;
        f.changed.store(false, std::memory_order_relaxed);
        u = g.in_use;
        r = g.requested;
        u_max = std::max(g.in_use_max, u);
        r_max = std::max(g.requested_max, r);
        g.in_use_max = u;
        g.requested_max = r;
      }
      in_use += u;
      requested += r;
      in_use_max += u_max;
      requested_max += r_max;
    }
    const CoreCounters& k = core_.counters();
    folded_.in_use = in_use;
    folded_.requested = requested;
    folded_.peak_in_use =
        std::max(folded_.peak_in_use, Plus(k.bytes_in_use, in_use_max));
    folded_.peak_requested = std::max(folded_.peak_requested,
                                      Plus(k.bytes_requested, requested_max));
  }
  void SampleFigures() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const CoreCounters& k = core_.counters();
    folded_.peak_in_use =
        std::max(folded_.peak_in_use, Plus(k.bytes_in_use, folded_.in_use));
    folded_.peak_requested = std::max(
        folded_.peak_requested, Plus(k.bytes_requested, folded_.requested));
  }

  // --- Tags (core/bfc_tags.cc) ---------------------------------------------
  // A tag's memory is a pool of its own (tags_, the tag as its id) whose
  // slabs are mappings of their own where memory can sleep (TakeTagSlab), so
  // that no granule holds another tag's or untagged memory.
  absl::StatusOr<DeviceAddress> AllocateToTag(Tag tag, std::uint64_t size,
                                              std::size_t bytes,
                                              std::uint64_t align,
                                              Stream stream,
                                              PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailedPrecondition when the tagged chunk at `address` is asleep.
  absl::Status CheckAwake(DeviceAddress address, absl::string_view call) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A slab for a tag: with expandable regions, a new mapping of exactly the
  // slab (whole granules); otherwise a block of general memory.
  absl::StatusOr<DeviceAddress> TakeTagSlab(std::uint64_t* bytes,
                                            std::uintptr_t key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why Sleep / Wake cannot run now, or OK.
  absl::Status CheckSleepable(absl::string_view call, Tag tag, bool backup)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sleeps or wakes one slab (RegionSource::Sleep / Wake), recording what
  // changed in the history (segment_unmap / segment_map).
  absl::Status SleepOrWakeSlab(DeviceAddress base, std::uint64_t size,
                               bool sleep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sleep or wake `slabs` in order; on an error, the ones done are turned
  // back (*clean: whether that worked) and the error names `call`.
  absl::Status SleepSlabs(
      const std::vector<std::pair<DeviceAddress, std::uint64_t>>& slabs,
      bool sleep, absl::string_view call, bool* clean)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes of the tag's memory asleep.
  std::uint64_t SleepingBytesOf(Tag tag) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Invariant S1: a tag awake has none of its memory asleep, and the memory
  // asleep is exactly the tags' asleep.
  absl::Status SleepValidate() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tags' blocks that lie in free memory go back to general memory (a
  // tag asleep keeps its memory).
  void ReturnFreeTagMemory() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Trim, garbage collection, a Wake short of room: the tags' free blocks,
  // then every free region or granule, back to the device.
  absl::Status ReleaseAllFree() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For a scope in which no routed stream captures (CaptureNow() said no):
  // the slow paths may wait and return memory as usual.
  class CaptureOff {
   public:
    explicit CaptureOff(bool& capturing)
        : capturing_(capturing), saved_(std::exchange(capturing, false)) {}
    ~CaptureOff() { capturing_ = saved_; }
    CaptureOff(const CaptureOff&) = delete;
    CaptureOff& operator=(const CaptureOff&) = delete;

   private:
    bool& capturing_;
    const bool saved_;
  };
  // Memory reserved from the device: regions, less the memory asleep, and
  // what the device refused to take back (RegionSource::pending_bytes).
  std::uint64_t Physical() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return core_.counters().bytes_reserved - source_->sleeping_bytes() +
           source_->pending_bytes();
  }
  // The tags' SlabSource: TakeTagSlab, the rest as for private pools.
  class TagSlabs final : public SlabSource {
   public:
    explicit TagSlabs(BfcAllocator& a) : a_(a) {}
    absl::StatusOr<DeviceAddress> TakeSlab(std::uint64_t* bytes,
                                           std::uintptr_t key) override
        ABSL_NO_THREAD_SAFETY_ANALYSIS {  // called under mu_, via tags_
      return a_.TakeTagSlab(bytes, key);
    }
    bool Contiguous(DeviceAddress a, DeviceAddress b) const override {
      return a_.Contiguous(a, b);
    }
    void ReturnSlab(DeviceAddress base,
                    absl::Span<const std::uintptr_t> streams) override
        ABSL_NO_THREAD_SAFETY_ANALYSIS {
      a_.ReturnSlab(base, streams);
    }

   private:
    BfcAllocator& a_;
  };
  // A tag asleep: the content of its live blocks when Sleep made a backup
  // (its memory asleep is found in the mappings: SleepingBytesOf).
  struct HostCopy {
    DeviceAddress address = 0;
    std::uint64_t bytes = 0;
    std::unique_ptr<unsigned char[]> data;
  };
  struct AsleepTag {
    std::vector<HostCopy> backup;
  };

  ABSL_ATTRIBUTE_NOINLINE absl::Status DeallocateWithPools(void* ptr,
                                                           Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // SlabSource: a block for a private pool, from general memory any stream
  // may use at once.
  absl::StatusOr<DeviceAddress> TakeSlab(std::uint64_t* bytes,
                                         std::uintptr_t key) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AllocateSlow, its device calls in relaxed capture mode during a capture.
  // While streams allocate to pools, the backend is asked first whether one
  // of them captures now; if none does, the slow path runs as usual (events,
  // host waits, returned memory).
  absl::StatusOr<DeviceAddress> AllocateSlowRelaxed(
      std::uint64_t size, std::uint64_t bytes, std::uint64_t align,
      std::uint64_t needed, Stream stream, PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Contiguous(DeviceAddress a, DeviceAddress b) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void ReturnSlab(DeviceAddress base,
                  absl::Span<const std::uintptr_t> streams) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Memory whose stream work the stream order learned complete (an event
  // query, a host wait) merges back now (BfcCore::ResolveCompleted).
  void ResolveAdvanced() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ABSL_PREDICT_TRUE(!stream_order_.has_advanced())) return;
    ResolveAdvancedSlow();
  }
  ABSL_ATTRIBUTE_NOINLINE void ResolveAdvancedSlow()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free on `stream` while several streams are in use: every so many, an
  // event on it (StreamOrder::NoteFree), and what that learned merges back.
  ABSL_ATTRIBUTE_NOINLINE void NoteFreeAmongStreams(std::uintptr_t stream,
                                                    std::uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // What the core may ask the device: nothing during a graph capture.
  ReuseOracle* Oracle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ABSL_PREDICT_FALSE(capturing_) ? &known_only_ : oracle_;
  }
  // Whether the slow path may record, query and wait for events.
  bool MayAsk() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return oracle_ == &stream_order_ && !capturing_;
  }
  // Memory handed out: the general core's, its pool slabs replaced by what
  // the pools handed out of them.
  std::uint64_t InUse() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return core_.counters().bytes_in_use - pools_.bytes_reserved() +
           pools_.bytes_in_use() - tags_.bytes_reserved() +
           tags_.bytes_in_use();
  }
  std::uint64_t Requested() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return core_.counters().bytes_requested - pools_.slabs_requested() +
           pools_.bytes_requested() - tags_.slabs_requested() +
           tags_.bytes_requested();
  }

  // A stream handle no caller uses: "every stream" where one is excluded.
  static constexpr std::uintptr_t kNoStream = UINTPTR_MAX;

  // The stream as the core sees it: a backend without streams runs its work
  // in call order, so all streams are one.
  Stream Key(Stream stream) const {
    return Stream(stream.handle & stream_mask_);
  }

  // `full`: also walk every mapping (Validate()); after each operation
  // (debug_checks=2) the mappings are checked at the regions' ends only.
  absl::Status ValidateLocked(bool full) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void MaybeValidate() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_VALIDATE_EACH_OP(ValidateLocked(/*full=*/false));
  }

  Stats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status RejectTooLarge(std::size_t bytes, PendingOutOfMemory* pending);
  absl::Status RejectTooLargeLocked(std::size_t bytes,
                                    PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Every out-of-memory answer (a request of `bytes`): counted now, or
  // prepared for the handler; in the history.
  absl::Status Exhausted(std::uint64_t bytes, absl::Status error,
                         const Stats& stats, PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Returns every free region or granule to the device (Trim, garbage
  // collection). With several streams, free pieces of different streams'
  // frees are separate chunks until their work is known complete: the host
  // waits for that work first, so that they merge into whole free regions
  // and granules that can go back.
  absl::Status ReleaseFree() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One more attempt at the core; *event_failed tells a failing event call
  // from an honest "nothing fits".
  std::optional<DeviceAddress> Retry(
      std::uint64_t size, std::uint64_t bytes, std::uint64_t align,
      Stream stream, bool* event_failed,
      BfcCore::Search search = BfcCore::Search::kAll)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Several streams, before growing: ask the device (without waiting) how
  // far the other streams whose frees fence memory have come, merge the
  // pieces whose work completed, look at every fitting chunk, then at runs of
  // neighbouring chunks. Growth is never the answer to work nobody asked
  // about.
  std::optional<DeviceAddress> SettleAndRetry(std::uint64_t size,
                                              std::uint64_t bytes,
                                              std::uint64_t align,
                                              Stream stream, bool* event_failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Out of fitting free chunks: grow (or preallocate), then wait for the work
  // of other streams' frees, then collect free regions and grow again; each
  // step retries the core before the next. Only then out of memory.
  absl::StatusOr<DeviceAddress> AllocateSlow(
      std::uint64_t size, std::uint64_t bytes, std::uint64_t align,
      std::uint64_t needed, Stream stream, PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A backend event call failed while looking at memory other streams freed:
  // report it (nothing was handed out) instead of guessing.
  absl::Status EventFailure(std::uint64_t bytes, Stream stream,
                            absl::Status error = absl::OkStatus())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status OutOfMemory(std::uint64_t bytes, std::uint64_t size,
                           const absl::Status& why, PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Fixed at creation but for `limit`, which SetLimit writes under mu_;
  // what reads it without the lock reads limit_now_.
  ResolvedOptions resolved_;
  const std::shared_ptr<Backend> backend_;
  std::atomic<std::uint64_t> limit_now_{resolved_.limit};

  mutable Lock mu_;
  // A private pool or a tag made, or the history on: Allocate and
  // Deallocate take their out-of-line paths (one flag next to the lock, on
  // the hot cache line).
  bool slow_on_ ABSL_GUARDED_BY(mu_) = resolved_.history != 0;
  // A private pool or a tag was made: the pool-aware statistics.
  bool pools_on_ ABSL_GUARDED_BY(mu_) = false;
  BfcCore core_ ABSL_GUARDED_BY(mu_);
  StreamOrder stream_order_ ABSL_GUARDED_BY(mu_);
  NoStreams no_streams_;
  ReuseOracle* const oracle_;  // &stream_order_ or &no_streams_
  // All ones with streams, 0 without (Key).
  const std::uintptr_t stream_mask_;
  std::uint64_t num_ooms_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const OutOfMemoryHandler> oom_handler_ ABSL_GUARDED_BY(mu_);
  std::uint64_t streams_released_ ABSL_GUARDED_BY(mu_) = 0;
  // The handles ReleaseStream was given (with streams), newest last, at most
  // kReleasedHandlesKept: ReleasePool refuses one as last_use while nothing
  // names it again (NamesStream), since the program may have destroyed it.
  std::deque<std::uintptr_t> released_handles_ ABSL_GUARDED_BY(mu_);
  static constexpr std::size_t kReleasedHandlesKept = 1024;
  void RememberReleased(std::uintptr_t stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a chunk, a pool (its users or routes), a tag or the stream
  // order names `stream`: a handle released earlier then names a new stream.
  bool NamesStream(std::uintptr_t stream) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The oracle during a graph capture: *oracle_'s known answers only.
  KnownOnlyOracle known_only_ ABSL_GUARDED_BY(mu_);
  PrivatePools pools_ ABSL_GUARDED_BY(mu_);
  PrivatePools tags_ ABSL_GUARDED_BY(mu_);
  TagSlabs tag_slabs_{*this};
  absl::flat_hash_map<Tag, AsleepTag> asleep_ ABSL_GUARDED_BY(mu_);
  // Whether a stream allocating to a pool is capturing a graph (no event
  // calls, host waits or returned memory, and device calls in relaxed mode).
  bool capturing_ ABSL_GUARDED_BY(mu_) = false;
  // The out-of-memory report a pool's growth prepares for the handler.
  PendingOutOfMemory* slab_pending_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Once a pool was made: the statistics pools change.
  std::uint64_t peak_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t peak_requested_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t largest_alloc_ ABSL_GUARDED_BY(mu_) = 0;
  // Once a tag slept (the core's peak then counts memory asleep): the peak
  // of physical memory reserved (Physical()), sampled after each allocation
  // and Wake.
  bool slept_ ABSL_GUARDED_BY(mu_) = false;
  std::uint64_t peak_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  // Front caches on (Options::front_cache, and no pool, tag or history).
  std::atomic<bool> fronts_on_{resolved_.front_cache != 0};
  std::array<std::unique_ptr<StreamFront>, kMaxFronts> fronts_;
  // Slots made (free ones included), and of them those serving a stream.
  std::atomic<int> num_fronts_{0};
  int live_fronts_ ABSL_GUARDED_BY(mu_) = 0;
  mutable FoldedFigures folded_ ABSL_GUARDED_BY(mu_);
  // The allocation history (Options::history), null when off.
  const std::unique_ptr<History> history_ = MakeHistory(resolved_.history);
  // Where regions come from: separate backend allocations or expandable
  // regions. Declared last, destroyed first: it returns every region while
  // the core and the stream order still exist.
  const std::unique_ptr<RegionSource> source_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_BFC_ALLOCATOR_H_
