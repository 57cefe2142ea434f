// core/allocator.cc: the BFC allocator facade: the lock, growth, garbage
// collection, statistics and out-of-memory reports around core::BfcCore.
//
// The facade is the only place that holds the lock and the only place in core/
// that calls the backend (through the abstract Backend, never a vendor API).
#include "gpualloc/allocator.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "core/alignment.h"
#include "core/bfc.h"
#include "core/format_bytes.h"
#include "core/live_allocations.h"
#include "core/lock.h"
#include "core/modes.h"
#include "core/oom_message.h"
#include "core/options.h"
#include "core/private_pools.h"
#include "core/region_source.h"
#include "core/size_class.h"
#include "core/status_macros.h"
#include "core/stream_order.h"

namespace gpualloc {
namespace {

// The oracle of a backend without streams: its work runs in call order, so
// memory freed "on" any stream is free for every stream.
using NoStreams = core::AllCompleteOracle;

class BfcAllocator final : public Allocator, private core::SlabSource {
 public:
  BfcAllocator(core::ResolvedOptions resolved, std::shared_ptr<Backend> backend)
      : resolved_(std::move(resolved)),
        backend_(std::move(backend)),
        core_(core::BfcConfig{resolved_.min_block_size,
                              resolved_.options.max_internal_fragmentation,
                              resolved_.large_page}),
        stream_order_(backend_.get(), resolved_.options.cross_stream_reuse),
        oracle_(backend_->info().capabilities.streams
                    ? static_cast<core::ReuseOracle*>(&stream_order_)
                    : &no_streams_),
        // The top bit is the released streams' (no stream handle has it).
        stream_mask_(backend_->info().capabilities.streams
                         ? ~core::StreamOrder::kReleasedBit
                         : 0),
        known_only_(*oracle_),
        pools_(core_.config(),
               core::RoundUpToMultiple(kSlabUnit, resolved_.min_block_size)),
        source_(MakeSource()) {
    stream_order_.BindSearches(&core_.counters().num_allocs);
  }

  ~BfcAllocator() override {
    core::LockGuard lock(&mu_);
    core::ReportLiveAtDestruction("bfc", backend_->info(),
                                  core_.counters().num_chunks_in_use -
                                      pools_.num_slabs() +
                                      pools_.num_chunks_in_use(),
                                  Requested());
    // Every region goes back to the device with source_ (declared last,
    // destroyed first): live allocations die with the allocator, as with any
    // caching allocator.
  }

  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream given,
                                 std::size_t alignment) override {
    return core::AllocateHandlingOutOfMemory(*this, bytes, given, alignment);
  }

  // For AllocateHandlingOutOfMemory: a failure final after the handler.
  void CountOutOfMemory() {
    core::LockGuard lock(&mu_);
    ++num_ooms_;
  }

  absl::Status Deallocate(void* ptr, Stream stream) override {
    if (ptr == nullptr)
      return absl::OkStatus();  // like free(NULL) and cudaFree(0)
    core::LockGuard lock(&mu_);
    if (ABSL_PREDICT_FALSE(pools_on_)) return DeallocateWithPools(ptr, stream);
    absl::Status status =
        core_.Deallocate(reinterpret_cast<std::uintptr_t>(ptr),
                         Key(stream).handle, stream_order_.stamp(), oracle_);
    MaybeValidate();
    return status;
  }

  absl::Status RecordStream(void* ptr, Stream stream) override {
    const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
    core::LockGuard lock(&mu_);
    absl::Status status = pools_.Owns(address)
                              ? pools_.RecordStream(address, Key(stream).handle)
                              : core_.RecordStream(address, Key(stream).handle);
    MaybeValidate();
    return status;
  }

  absl::Status ReleaseStream(Stream given) override {
    core::LockGuard lock(&mu_);
    const std::uintptr_t stream = Key(given).handle;
    if (pools_.IsRouted(stream) || (capturing_ && CaptureNow())) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "ReleaseStream(stream %#x): %s; call it after EndAllocateToPool",
          given.handle,
          pools_.IsRouted(stream)
              ? "the stream allocates to a private pool"
              : "a stream allocating to a private pool is capturing a graph, "
                "and releasing records an event"));
    }
    // Without streams (all map to one) or never seen: nothing names it.
    if (stream_mask_ == 0 || (core_.StreamReferences(stream) == 0 &&
                              pools_.StreamReferences(stream) == 0 &&
                              !stream_order_.Knows(stream))) {
      return absl::OkStatus();
    }
    const std::uintptr_t key =
        core::StreamOrder::kReleasedBit | ++streams_released_;
    absl::Status status = stream_order_.ReleaseStream(stream, key);
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrFormat("ReleaseStream(stream %#x): recording its last "
                          "event failed, nothing changed: %s",
                          given.handle, status.message()));
    }
    core_.RenameStream(stream, key);
    pools_.RenameStream(stream, key);
    MaybeValidate();
    return absl::OkStatus();
  }

  Stats GetStats() const override {
    core::LockGuard lock(&mu_);
    return StatsLocked();
  }

  void ResetPeakStats() override {
    core::LockGuard lock(&mu_);
    core_.ResetPeaks();
    peak_in_use_ = InUse();
    peak_requested_ = Requested();
    largest_alloc_ = 0;
  }

  void SetOutOfMemoryHandler(OutOfMemoryHandler handler) override {
    std::shared_ptr<const OutOfMemoryHandler> next =
        core::ShareHandler(std::move(handler));
    core::LockGuard lock(&mu_);
    oom_handler_.swap(next);
  }

  Snapshot GetSnapshot() const override {
    core::LockGuard lock(&mu_);
    Snapshot s;
    core_.AppendSnapshot(&s.regions);
    if (pools_on_) {
      for (RegionSnapshot& r : s.regions) {
        for (ChunkSnapshot& c : r.chunks) {
          if (c.in_use) c.pool = pools_.SlabOwner(c.address);
        }
      }
      pools_.AppendSnapshot(&s.pools);
    }
    s.stats = StatsLocked();
    return s;
  }

  absl::Status Trim() override {
    core::LockGuard lock(&mu_);
    if (capturing_ && CaptureNow()) {
      return absl::FailedPreconditionError(
          "Trim during a graph capture: returning memory would make the "
          "device synchronize; call it after EndAllocateToPool");
    }
    // No routed stream captures now: Trim may wait for work as usual.
    const bool routed = std::exchange(capturing_, false);
    absl::Status status = ReleaseFree();
    capturing_ = routed;
    MaybeValidate();
    return status;
  }

  absl::Status Validate() const override {
    core::LockGuard lock(&mu_);
    return ValidateLocked(/*full=*/true);
  }

  const DeviceInfo& device() const override { return backend_->info(); }
  const Options& options() const override { return resolved_.options; }

  absl::StatusOr<PoolId> CreatePool() override {
    core::LockGuard lock(&mu_);
    if (!pools_on_) {  // from now on the pool-aware paths and figures
      peak_in_use_ = core_.counters().peak_bytes_in_use;
      peak_requested_ = core_.counters().peak_bytes_requested;
      largest_alloc_ = core_.counters().largest_alloc_size;
      pools_on_ = true;
    }
    // A key no stream has, like a released stream's: its slabs are strangers
    // to every stream, and conditions naming it are complete.
    return pools_.Create(core::StreamOrder::kReleasedBit | ++streams_released_);
  }

  absl::Status RetainPool(PoolId pool) override {
    core::LockGuard lock(&mu_);
    return pools_.Retain(pool);
  }

  absl::Status ReleasePool(PoolId pool, Stream last_use) override {
    core::LockGuard lock(&mu_);
    absl::Status status = pools_.Release(pool, Key(last_use).handle, *this);
    MaybeValidate();
    return status;
  }

  // A capture may begin on a routed stream at any moment (PyTorch calls
  // beginAllocateToPool before cudaStreamBeginCapture), so while any stream
  // allocates to a pool on a backend that can capture, every operation
  // behaves as during a capture; the cold paths that would otherwise refuse
  // (Trim, ReleaseStream) ask the backend (CaptureNow).
  absl::Status BeginAllocateToPool(PoolId pool, Stream stream) override {
    core::LockGuard lock(&mu_);
    GPUALLOC_RETURN_IF_ERROR(pools_.Begin(pool, Key(stream).handle));
    capturing_ = backend_->info().capabilities.graph_capture;
    return absl::OkStatus();
  }

  absl::Status EndAllocateToPool(PoolId pool) override {
    core::LockGuard lock(&mu_);
    GPUALLOC_RETURN_IF_ERROR(pools_.End(pool));
    capturing_ = pools_.routed() && backend_->info().capabilities.graph_capture;
    return absl::OkStatus();
  }

  // Whether a routed stream captures now (an answer the backend cannot give
  // counts as yes).
  bool CaptureNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (std::uintptr_t stream : pools_.RoutedStreams()) {
      absl::StatusOr<bool> asked = backend_->IsCapturing(Stream(stream));
      if (!asked.ok() || *asked) return true;
    }
    return false;
  }

  // One attempt at the request; an out-of-memory answer goes through
  // NoteOutOfMemory (`pending`: null on the handler's retry).
  ABSL_ATTRIBUTE_ALWAYS_INLINE absl::StatusOr<void*> AllocateOnce(
      std::size_t bytes, Stream given, std::size_t alignment,
      core::PendingOutOfMemory* pending) {
    const Stream stream = Key(given);
    const std::uint64_t min_block = resolved_.min_block_size;
    if (alignment != 0) {  // 0, the common case, needs no check
      GPUALLOC_RETURN_IF_ERROR(
          core::CheckAlignment(bytes, alignment, resolved_.max_alignment));
    }
    const std::uint64_t align = std::max<std::uint64_t>(alignment, min_block);
    // Sizes beyond the limit are rejected before any arithmetic can overflow.
    if (bytes > resolved_.limit) return RejectTooLarge(bytes, pending);
    const std::uint64_t size =
        core::ChunkSize(bytes, min_block, resolved_.size_divisions);
    const std::uint64_t needed = size + (align - min_block);
    if (needed > resolved_.limit) return RejectTooLarge(bytes, pending);

    core::LockGuard lock(&mu_);
    if (ABSL_PREDICT_FALSE(pools_on_)) {
      return AllocateWithPools(size, bytes, align, needed, stream, pending);
    }
    std::optional<DeviceAddress> address =
        core_.Allocate(size, bytes, align, stream.handle, oracle_);
    if (!address.has_value()) {
      if (stream_order_.has_error()) return EventFailure(bytes, given);
      absl::StatusOr<DeviceAddress> grown =
          AllocateSlow(size, bytes, align, needed, stream, pending);
      if (!grown.ok()) return grown.status();
      address = *grown;
    }
    MaybeValidate();
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
  }

 private:
  std::unique_ptr<core::RegionSource> MakeSource() {
    const core::RegionContext context{resolved_,     *backend_, core_,
                                      stream_order_, *oracle_,  capturing_};
    return resolved_.expandable ? core::MakeExpandableRegions(context)
                                : core::MakeSeparateRegions(context);
  }

  // Private pools grow by blocks of whole multiples of this.
  static constexpr std::uint64_t kSlabUnit = std::uint64_t{2} << 20;

  // The allocation path once a private pool was made: the stream's pool, or
  // the general core asking only what it may during a capture; the
  // statistics that pools change are kept here.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<void*> AllocateWithPools(
      std::uint64_t size, std::size_t bytes, std::uint64_t align,
      std::uint64_t needed, Stream stream, core::PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<DeviceAddress> address;
    std::uint64_t chunk = 0;
    if (std::optional<PoolId> pool = pools_.RoutedPool(stream.handle)) {
      slab_pending_ = pending;
      address = pools_.Allocate(*pool, size, bytes, align, stream.handle,
                                Oracle(), *this);
      slab_pending_ = nullptr;
      if (address.ok()) chunk = pools_.AllocatedSize(*address);
    } else {
      std::optional<DeviceAddress> a =
          core_.Allocate(size, bytes, align, stream.handle, Oracle());
      if (a.has_value()) {
        address = *a;
      } else if (stream_order_.has_error()) {
        address = EventFailure(bytes, stream);
      } else {
        address =
            AllocateSlowRelaxed(size, bytes, align, needed, stream, pending);
      }
      if (address.ok()) chunk = core_.AllocatedSize(*address);
    }
    if (!address.ok()) return address.status();
    peak_in_use_ = std::max(peak_in_use_, InUse());
    peak_requested_ = std::max(peak_requested_, Requested());
    largest_alloc_ = std::max(largest_alloc_, chunk);
    MaybeValidate();
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
  }

  ABSL_ATTRIBUTE_NOINLINE absl::Status DeallocateWithPools(void* ptr,
                                                           Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
    absl::Status status =
        pools_.Owns(address)
            ? pools_.Deallocate(address, Key(stream).handle,
                                stream_order_.stamp(), oracle_, *this)
            : core_.Deallocate(address, Key(stream).handle,
                               stream_order_.stamp(), oracle_);
    MaybeValidate();
    return status;
  }

  // SlabSource: a block for a private pool, from general memory any stream
  // may use at once.
  absl::StatusOr<DeviceAddress> TakeSlab(std::uint64_t* bytes,
                                         std::uintptr_t key) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::uint64_t min_block = resolved_.min_block_size;
    const std::uint64_t want = *bytes;
    if (want > resolved_.limit)
      return RejectTooLargeLocked(want, slab_pending_);
    absl::StatusOr<DeviceAddress> base;
    if (std::optional<DeviceAddress> a =
            core_.Allocate(want, want, min_block, key, Oracle())) {
      base = *a;
    } else if (stream_order_.has_error()) {
      base = EventFailure(want, Stream(key));
    } else {
      base = AllocateSlowRelaxed(want, want, min_block, want, Stream(key),
                                 slab_pending_);
    }
    if (base.ok()) *bytes = core_.AllocatedSize(*base);
    return base;
  }
  // AllocateSlow, its device calls in relaxed capture mode during a capture.
  // While streams allocate to pools, the backend is asked first whether one
  // of them captures now; if none does, the slow path runs as usual (events,
  // host waits, returned memory).
  absl::StatusOr<DeviceAddress> AllocateSlowRelaxed(
      std::uint64_t size, std::uint64_t bytes, std::uint64_t align,
      std::uint64_t needed, Stream stream, core::PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (capturing_ && !CaptureNow()) {
      capturing_ = false;
      absl::StatusOr<DeviceAddress> a =
          AllocateSlow(size, bytes, align, needed, stream, pending);
      capturing_ = true;
      return a;
    }
    core::RelaxedCapture relaxed(*backend_, capturing_);
    GPUALLOC_RETURN_IF_ERROR(relaxed.status());
    return AllocateSlow(size, bytes, align, needed, stream, pending);
  }
  bool Contiguous(DeviceAddress a, DeviceAddress b) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {  // called under mu_, via the pools
    return core_.RegionAt(a) == core_.RegionAt(b);
  }
  void ReturnSlab(DeviceAddress base,
                  absl::Span<const std::uintptr_t> streams) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (std::size_t i = 1; i < streams.size(); ++i) {
      (void)core_.RecordStream(base, streams[i]);
    }
    (void)core_.Deallocate(base, streams.front(), stream_order_.stamp(),
                           oracle_);
  }

  // What the core may ask the device: nothing during a graph capture.
  core::ReuseOracle* Oracle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
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
           pools_.bytes_in_use();
  }
  std::uint64_t Requested() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return core_.counters().bytes_requested - pools_.slabs_requested() +
           pools_.bytes_requested();
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
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_RETURN_IF_ERROR(core_.Validate());
    GPUALLOC_RETURN_IF_ERROR(source_->Validate(full));
    if (pools_on_) GPUALLOC_RETURN_IF_ERROR(pools_.Validate(core_));
    // F2: never more reserved than the limit.
    if (core_.counters().bytes_reserved > resolved_.limit) {
      return absl::InternalError(
          absl::StrFormat("invariant F2 broken: %d bytes reserved, limit %d",
                          core_.counters().bytes_reserved, resolved_.limit));
    }
    return absl::OkStatus();
  }

  void MaybeValidate() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_VALIDATE_EACH_OP(ValidateLocked(/*full=*/false));
  }

  Stats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const core::CoreCounters& k = core_.counters();
    Stats s;
    s.num_allocs = k.num_allocs;
    s.bytes_in_use = k.bytes_in_use;
    s.peak_bytes_in_use = k.peak_bytes_in_use;
    s.largest_alloc_size = k.largest_alloc_size;
    s.bytes_limit = resolved_.limit;
    s.bytes_reserved = k.bytes_reserved;
    s.peak_bytes_reserved = k.peak_bytes_reserved;
    s.largest_free_block_bytes = core_.LargestFreeBlock();
    s.bytes_requested = k.bytes_requested;
    s.peak_bytes_requested = k.peak_bytes_requested;
    const std::uint64_t free_bytes = core_.FreeBytes();
    s.fragmentation =
        free_bytes == 0
            ? 0.0
            : 1.0 - static_cast<double>(s.largest_free_block_bytes) /
                        static_cast<double>(free_bytes);
    s.num_ooms = num_ooms_;
    // Regions, or with expandable regions granule mappings, made and undone.
    s.backend_allocs = source_->backend_allocs();
    s.backend_frees = source_->backend_frees();
    s.events_recorded = stream_order_.events_recorded();
    s.stream_waits = stream_order_.stream_waits();
    s.host_waits = stream_order_.host_waits();
    if (pools_on_) {
      s.num_allocs = k.num_allocs - pools_.slabs_taken() + pools_.num_allocs();
      s.bytes_in_use = InUse();
      s.peak_bytes_in_use = peak_in_use_;
      s.largest_alloc_size = largest_alloc_;
      s.bytes_requested = Requested();
      s.peak_bytes_requested = peak_requested_;
      s.pool_bytes_reserved = pools_.bytes_reserved();
      s.pool_bytes_in_use = pools_.bytes_in_use();
    }
    return s;
  }

  absl::Status RejectTooLarge(std::size_t bytes,
                              core::PendingOutOfMemory* pending) {
    core::LockGuard lock(&mu_);
    return RejectTooLargeLocked(bytes, pending);
  }
  absl::Status RejectTooLargeLocked(std::size_t bytes,
                                    core::PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Exhausted(
        absl::ResourceExhaustedError(absl::StrFormat(
            "out of memory: Allocate(%d bytes) can never succeed: it exceeds "
            "the "
            "allocator's limit of %d bytes (%s) on %s. Hint: raise "
            "memory_fraction "
            "(now %g) or set memory_limit.",
            bytes, resolved_.limit, core::FormatBytes(resolved_.limit),
            backend_->info().name, resolved_.options.memory_fraction)),
        StatsLocked(), pending);
  }

  // Every out-of-memory answer: counted now, or prepared for the handler.
  absl::Status Exhausted(absl::Status error, const Stats& stats,
                         core::PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return core::NoteOutOfMemory(std::move(error), oom_handler_, stats, pending,
                                 &num_ooms_);
  }

  // Returns every free region or granule to the device (Trim, garbage
  // collection). With several streams, free pieces of different streams'
  // frees are separate chunks until their work is known complete: the host
  // waits for that work first, so that they merge into whole free regions
  // and granules that can go back.
  absl::Status ReleaseFree() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (core_.multi_stream() && MayAsk()) {
      GPUALLOC_RETURN_IF_ERROR(core::WaitForFreeMemory(
          stream_order_, core_.PendingStreams(stream_order_, kNoStream),
          "returning it to the device"));
      core_.Settle(stream_order_);
    }
    return source_->ReleaseFree();
  }

  // One more attempt at the core; *event_failed tells a failing event call
  // from an honest "nothing fits".
  std::optional<DeviceAddress> Retry(
      std::uint64_t size, std::uint64_t bytes, std::uint64_t align,
      Stream stream, bool* event_failed,
      core::BfcCore::Search search = core::BfcCore::Search::kAll)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Every fitting chunk is looked at: this is the slow path.
    std::optional<DeviceAddress> a =
        core_.Allocate(size, bytes, align, stream.handle, Oracle(), search);
    *event_failed = !a.has_value() && stream_order_.has_error();
    return a;
  }

  // Several streams, before growing: ask the device (without waiting) how
  // far the other streams whose frees fence memory have come, merge the
  // pieces whose work completed, look at every fitting chunk, then at runs of
  // neighbouring chunks. Growth is never the answer to work nobody asked
  // about.
  std::optional<DeviceAddress> SettleAndRetry(std::uint64_t size,
                                              std::uint64_t bytes,
                                              std::uint64_t align,
                                              Stream stream, bool* event_failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    *event_failed = false;
    if (oracle_ != &stream_order_ || !core_.multi_stream()) {
      return std::nullopt;
    }
    for (const core::StreamStamp& p :
         core_.PendingConditions(stream_order_, stream.handle)) {
      if (capturing_) break;  // known answers only
      if (!stream_order_.Poll(p.stream, p.stamp)) {
        *event_failed = true;
        return std::nullopt;
      }
    }
    core_.Settle(stream_order_);
    if (std::optional<DeviceAddress> a =
            Retry(size, bytes, align, stream, event_failed)) {
      return a;
    }
    if (*event_failed) return std::nullopt;
    // Pieces of different streams' frees that the stream may all use, next
    // to each other.
    return core_.AllocateAcross(size, bytes, align, stream.handle,
                                &stream_order_);
  }

  // Out of fitting free chunks: grow (or preallocate), then wait for the work
  // of other streams' frees, then collect free regions and grow again; each
  // step retries the core before the next. Only then out of memory.
  absl::StatusOr<DeviceAddress> AllocateSlow(
      std::uint64_t size, std::uint64_t bytes, std::uint64_t align,
      std::uint64_t needed, Stream stream, core::PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // A retry that met a failing event call stops everything (EventFailure).
    bool event_failed = false;
    if (core_.num_regions() != 0) {
      if (std::optional<DeviceAddress> a =
              SettleAndRetry(size, bytes, align, stream, &event_failed))
        return *a;
      if (event_failed) return EventFailure(bytes, stream);
    }
    absl::Status why;
    const bool grows =
        !resolved_.options.preallocate || source_->GrowsAfterPreallocation();
    if (resolved_.options.preallocate && core_.num_regions() == 0) {
      why = source_->Preallocate();
      if (!why.ok()) {
        why = absl::Status(why.code(),
                           absl::StrFormat("preallocating %d bytes: %s",
                                           resolved_.limit, why.message()));
      }
    } else if (!grows) {
      why = absl::ResourceExhaustedError(
          "the preallocated region has no free chunk large enough");
    } else {
      why = source_->Grow(needed, stream);
    }
    if (why.ok()) {
      if (std::optional<DeviceAddress> a =
              Retry(size, bytes, align, stream, &event_failed))
        return *a;
      if (event_failed) return EventFailure(bytes, stream);
      why =
          absl::ResourceExhaustedError("no free chunk fits even after growing");
    }
    if (!absl::IsResourceExhausted(why)) return why;  // a driver error, not OOM

    // Memory other streams freed may be waiting for their work to finish:
    // first what a stream wait makes usable (when policy says so) or a query
    // finds complete, in one chunk or across neighbours, then waiting on the
    // host.
    // (Never for a private pool's block: its key is no stream to wait.)
    if (MayAsk() && core_.multi_stream() &&
        !core::StreamOrder::IsReleasedKey(stream.handle)) {
      if (std::optional<DeviceAddress> a =
              Retry(size, bytes, align, stream, &event_failed,
                    core::BfcCore::Search::kMayWait))
        return *a;
      if (event_failed) return EventFailure(bytes, stream);
      if (std::optional<DeviceAddress> a = core_.AllocateAcross(
              size, bytes, align, stream.handle, &stream_order_, /*ask=*/true))
        return *a;
      if (stream_order_.has_error()) return EventFailure(bytes, stream);
    }
    if (MayAsk()) {
      const std::vector<std::uintptr_t> pending =
          core_.PendingStreams(stream_order_, stream.handle);
      if (!pending.empty()) {
        absl::Status waited = stream_order_.WaitForAll(pending);
        if (!waited.ok()) return EventFailure(bytes, stream, waited);
        // What the wait completed may merge now.
        if (core_.multi_stream()) core_.Settle(stream_order_);
        if (std::optional<DeviceAddress> a =
                Retry(size, bytes, align, stream, &event_failed))
          return *a;
        if (event_failed) return EventFailure(bytes, stream);
      }
      // The stream's own pieces next to memory now clean.
      if (core_.multi_stream()) {
        if (std::optional<DeviceAddress> a = core_.AllocateAcross(
                size, bytes, align, stream.handle, &stream_order_))
          return *a;
      }
    }

    if (grows && resolved_.options.garbage_collection && !capturing_ &&
        source_->HasFreeToRelease()) {
      GPUALLOC_RETURN_IF_ERROR(ReleaseFree());
      absl::Status grown = source_->Grow(needed, stream);
      if (grown.ok()) {
        if (std::optional<DeviceAddress> a =
                Retry(size, bytes, align, stream, &event_failed))
          return *a;
        if (event_failed) return EventFailure(bytes, stream);
      } else if (!absl::IsResourceExhausted(grown)) {
        return grown;
      } else {
        why = grown;
      }
    }
    // The next Allocate asks afresh (no allocation ended this search).
    stream_order_.NewSearch();
    if (capturing_) {
      why = absl::ResourceExhaustedError(absl::StrFormat(
          "%s; a graph capture is underway, during which the allocator "
          "neither waits for other streams' work nor returns memory to the "
          "device",
          why.message()));
    }
    return OutOfMemory(bytes, size, why, pending);
  }

  // A backend event call failed while looking at memory other streams freed:
  // report it (nothing was handed out) instead of guessing.
  absl::Status EventFailure(std::uint64_t bytes, Stream stream,
                            absl::Status error = absl::OkStatus())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status kept = stream_order_.TakeError();
    if (error.ok()) error = kept;
    return absl::Status(
        error.code(),
        absl::StrFormat("Allocate(%d bytes) on stream %#x: a backend event "
                        "call failed, so memory other streams freed cannot be "
                        "reused safely: %s",
                        bytes, stream.handle, error.message()));
  }

  absl::Status OutOfMemory(std::uint64_t bytes, std::uint64_t size,
                           const absl::Status& why,
                           core::PendingOutOfMemory* pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Stats s = StatsLocked();
    return Exhausted(
        core::BfcOutOfMemoryError(backend_->info(), resolved_.options, bytes,
                                  size, why.message(), s, core_.FreeBytes()),
        s, pending);
  }

  const core::ResolvedOptions resolved_;
  const std::shared_ptr<Backend> backend_;

  mutable core::Lock mu_;
  // Whether a private pool was ever made: Allocate and Deallocate then take
  // their pool-aware paths (kept next to the lock, on the hot cache line).
  bool pools_on_ ABSL_GUARDED_BY(mu_) = false;
  core::BfcCore core_ ABSL_GUARDED_BY(mu_);
  core::StreamOrder stream_order_ ABSL_GUARDED_BY(mu_);
  NoStreams no_streams_;
  core::ReuseOracle* const oracle_;  // &stream_order_ or &no_streams_
  // All ones with streams, 0 without (Key).
  const std::uintptr_t stream_mask_;
  std::uint64_t num_ooms_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const OutOfMemoryHandler> oom_handler_ ABSL_GUARDED_BY(mu_);
  std::uint64_t streams_released_ ABSL_GUARDED_BY(mu_) = 0;
  // The oracle during a graph capture: *oracle_'s known answers only.
  core::KnownOnlyOracle known_only_ ABSL_GUARDED_BY(mu_);
  core::PrivatePools pools_ ABSL_GUARDED_BY(mu_);
  // Whether a stream allocating to a pool is capturing a graph (no event
  // calls, host waits or returned memory, and device calls in relaxed mode).
  bool capturing_ ABSL_GUARDED_BY(mu_) = false;
  // The out-of-memory report a pool's growth prepares for the handler.
  core::PendingOutOfMemory* slab_pending_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Once a pool was made: the statistics pools change.
  std::uint64_t peak_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t peak_requested_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t largest_alloc_ ABSL_GUARDED_BY(mu_) = 0;
  // Where regions come from: separate backend allocations or expandable
  // regions. Declared last, destroyed first: it returns every region while
  // the core and the stream order still exist.
  const std::unique_ptr<core::RegionSource> source_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::string_view AllocatorModeName(AllocatorMode mode) {
  switch (mode) {
    case AllocatorMode::kBfc:
      return "bfc";
    case AllocatorMode::kPlatform:
      return "platform";
    case AllocatorMode::kAsync:
      return "async";
  }
  return "invalid";
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateAllocator(
    const Options& options, std::shared_ptr<Backend> backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CreateAllocator: backend is null");
  }
  GPUALLOC_ASSIGN_OR_RETURN(core::ResolvedOptions resolved,
                            core::ResolveOptions(options, backend->info()));
  switch (options.mode) {
    case AllocatorMode::kBfc:
      break;
    case AllocatorMode::kPlatform:
      return core::CreatePlatformAllocator(std::move(resolved),
                                           std::move(backend));
    case AllocatorMode::kAsync:
      return core::CreateAsyncAllocator(std::move(resolved),
                                        std::move(backend));
  }
  return std::unique_ptr<Allocator>(
      new BfcAllocator(std::move(resolved), std::move(backend)));
}

}  // namespace gpualloc
