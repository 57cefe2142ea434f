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
#include "core/bfc.h"
#include "core/expandable.h"
#include "core/growth.h"
#include "core/live_allocations.h"
#include "core/lock.h"
#include "core/modes.h"
#include "core/options.h"
#include "core/size_class.h"
#include "core/status_macros.h"
#include "core/stream_order.h"

namespace gpualloc {
namespace {

// The oracle of a backend without streams: its work runs in call order, so
// memory freed "on" any stream is free for every stream.
class NoStreams final : public core::ReuseOracle {
 public:
  bool KnownComplete(std::uintptr_t, std::uint64_t) const override {
    return true;
  }
  Verdict Prepare(std::uintptr_t, std::uint64_t, std::uintptr_t,
                  bool) override {
    return Verdict::kReady;
  }
};

class BfcAllocator final : public Allocator {
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
        stream_mask_(backend_->info().capabilities.streams ? UINTPTR_MAX : 0),
        next_region_size_(resolved_.granularity) {
    if (resolved_.expandable) {
      space_ = std::make_unique<core::ExpandableSpace>(backend_.get(),
                                                       resolved_.granularity);
    }
  }

  ~BfcAllocator() override {
    core::LockGuard lock(&mu_);
    core::ReportLiveAtDestruction("bfc", backend_->info(),
                                  core_.counters().num_chunks_in_use,
                                  core_.counters().bytes_requested);
    // Return every region. Live allocations die with the allocator (as with
    // any caching allocator); their memory still goes back to the device
    // (expandable regions: ~ExpandableSpace unmaps and frees the range, once
    // the host has waited for the work that may still use it, because
    // unmapping does not wait as cuMemFree does).
    if (space_ != nullptr) {
      if (oracle_ == &stream_order_) {
        std::vector<std::uintptr_t> streams;
        for (DeviceAddress base : core_.RegionBases()) {
          const std::uint64_t size = core_.region_size(*core_.RegionAt(base));
          for (std::uintptr_t s : core_.StreamsUsingFree(
                   base, size, stream_order_, /*in_use_too=*/true)) {
            if (std::find(streams.begin(), streams.end(), s) == streams.end())
              streams.push_back(s);
          }
        }
        if (!streams.empty()) (void)stream_order_.WaitForAll(streams);
      }
      return;
    }
    for (DeviceAddress base : core_.RegionBases()) {
      (void)backend_->Free(base);
    }
  }

  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream given,
                                 std::size_t alignment) override {
    const Stream stream = Key(given);
    const std::uint64_t min_block = resolved_.min_block_size;
    if (alignment != 0) {  // 0, the common case, needs no check
      GPUALLOC_RETURN_IF_ERROR(
          core::CheckAlignment(bytes, alignment, resolved_.max_alignment));
    }
    const std::uint64_t align = std::max<std::uint64_t>(alignment, min_block);
    // Sizes beyond the limit are rejected before any arithmetic can overflow.
    if (bytes > resolved_.limit) return RejectTooLarge(bytes);
    const std::uint64_t size = core::RoundUp(bytes == 0 ? 1 : bytes, min_block);
    const std::uint64_t needed = size + (align - min_block);
    if (needed > resolved_.limit) return RejectTooLarge(bytes);

    core::LockGuard lock(&mu_);
    std::optional<DeviceAddress> address =
        core_.Allocate(size, bytes, align, stream.handle, oracle_);
    if (!address.has_value()) {
      if (stream_order_.has_error()) return EventFailure(bytes, given);
      absl::StatusOr<DeviceAddress> grown =
          AllocateSlow(size, bytes, align, needed, stream);
      if (!grown.ok()) return grown.status();
      address = *grown;
    }
    MaybeValidate();
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
  }

  absl::Status Deallocate(void* ptr, Stream stream) override {
    if (ptr == nullptr)
      return absl::OkStatus();  // like free(NULL) and cudaFree(0)
    core::LockGuard lock(&mu_);
    absl::Status status =
        core_.Deallocate(reinterpret_cast<std::uintptr_t>(ptr),
                         Key(stream).handle, stream_order_.stamp(), oracle_);
    MaybeValidate();
    return status;
  }

  absl::Status RecordStream(void* ptr, Stream stream) override {
    core::LockGuard lock(&mu_);
    absl::Status status = core_.RecordStream(
        reinterpret_cast<std::uintptr_t>(ptr), Key(stream).handle);
    MaybeValidate();
    return status;
  }

  Stats GetStats() const override {
    core::LockGuard lock(&mu_);
    return StatsLocked();
  }

  void ResetPeakStats() override {
    core::LockGuard lock(&mu_);
    core_.ResetPeaks();
  }

  Snapshot GetSnapshot() const override {
    core::LockGuard lock(&mu_);
    Snapshot s;
    core_.AppendSnapshot(&s.regions);
    s.stats = StatsLocked();
    return s;
  }

  absl::Status Trim() override {
    core::LockGuard lock(&mu_);
    absl::Status status = ReleaseFreeRegions();
    MaybeValidate();
    return status;
  }

  absl::Status Validate() const override {
    core::LockGuard lock(&mu_);
    return ValidateLocked(/*full=*/true);
  }

  const DeviceInfo& device() const override { return backend_->info(); }
  const Options& options() const override { return resolved_.options; }

 private:
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
    if (space_ != nullptr) {
      GPUALLOC_RETURN_IF_ERROR(full ? ValidateMappings()
                                    : ValidateMappingEnds());
    } else if (backend_allocs_ - backend_frees_ != core_.num_regions()) {
      return absl::InternalError(absl::StrFormat(
          "invariant F1 broken: %d regions in the core, but %d backend "
          "allocations minus %d frees",
          core_.num_regions(), backend_allocs_, backend_frees_));
    }
    // F2: never more reserved than the limit.
    if (core_.counters().bytes_reserved > resolved_.limit) {
      return absl::InternalError(
          absl::StrFormat("invariant F2 broken: %d bytes reserved, limit %d",
                          core_.counters().bytes_reserved, resolved_.limit));
    }
    return absl::OkStatus();
  }

  // F1 with expandable regions: the core's regions are exactly the maximal
  // runs of mapped granules (so mapped bytes equal reserved bytes, nothing is
  // mapped twice and no chunk lies in unmapped memory).
  absl::Status ValidateMappings() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (space_->mapped_bytes() != core_.counters().bytes_reserved) {
      return absl::InternalError(absl::StrFormat(
          "invariant F1 broken: %d bytes mapped but %d reserved in the core",
          space_->mapped_bytes(), core_.counters().bytes_reserved));
    }
    const auto runs = space_->MappedRunsWithin(space_->base(), space_->size());
    const std::vector<DeviceAddress> bases = core_.RegionBases();
    if (runs.size() != bases.size()) {
      return absl::InternalError(absl::StrFormat(
          "invariant F1 broken: %d runs of mapped granules but %d regions",
          runs.size(), bases.size()));
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const std::uint64_t size = core_.region_size(*core_.RegionAt(bases[i]));
      if (runs[i].first != bases[i] || runs[i].second != size) {
        return absl::InternalError(absl::StrFormat(
            "invariant F1 broken: mapped run [%#x, +%d) but region [%#x, +%d)",
            runs[i].first, runs[i].second, bases[i], size));
      }
    }
    return absl::OkStatus();
  }

  // F1's cheap part, O(regions x log mappings): mapped bytes equal reserved
  // bytes, and every region starts and ends where mappings do, with no
  // mapping touching it from outside (each region is a maximal run).
  absl::Status ValidateMappingEnds() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (space_->mapped_bytes() != core_.counters().bytes_reserved) {
      return absl::InternalError(absl::StrFormat(
          "invariant F1 broken: %d bytes mapped but %d reserved in the core",
          space_->mapped_bytes(), core_.counters().bytes_reserved));
    }
    for (DeviceAddress base : core_.RegionBases()) {
      const DeviceAddress end = base + core_.region_size(*core_.RegionAt(base));
      if (!space_->MappingStartsAt(base) || !space_->MappingEndsAt(end) ||
          space_->MappingEndsAt(base) || space_->MappingStartsAt(end)) {
        return absl::InternalError(absl::StrFormat(
            "invariant F1 broken: region [%#x, %#x) is not a maximal run of "
            "mapped granules",
            base, end));
      }
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
    // Expandable regions: granule mappings made and undone.
    s.backend_allocs = space_ != nullptr ? space_->maps() : backend_allocs_;
    s.backend_frees = space_ != nullptr ? space_->unmaps() : backend_frees_;
    s.events_recorded = stream_order_.events_recorded();
    s.stream_waits = stream_order_.stream_waits();
    s.host_waits = stream_order_.host_waits();
    return s;
  }

  absl::Status RejectTooLarge(std::size_t bytes) {
    core::LockGuard lock(&mu_);
    ++num_ooms_;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "out of memory: Allocate(%d bytes) can never succeed: it exceeds the "
        "allocator's limit of %d bytes (%s) on %s. Hint: raise memory_fraction "
        "(now %g) or set memory_limit.",
        bytes, resolved_.limit, core::FormatBytes(resolved_.limit),
        backend_->info().name, resolved_.options.memory_fraction));
  }

  // Asks the backend for a region of `size` bytes; on success the core gets it.
  absl::Status AddRegion(std::uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<DeviceAddress> base = backend_->Allocate(size);
    if (!base.ok()) return base.status();
    if (*base % resolved_.min_block_size != 0) {
      (void)backend_->Free(*base);
      return absl::InternalError(absl::StrFormat(
          "backend %s returned %#x for %d bytes, not aligned to the minimum "
          "block size %d",
          backend_->info().backend, *base, size, resolved_.min_block_size));
    }
    ++backend_allocs_;
    core_.AddRegion(*base, size);
    return absl::OkStatus();
  }

  // Tries the growth candidates, largest first. OK when a region was added.
  absl::Status Grow(std::uint64_t needed, Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (space_ != nullptr) return GrowExpandable(needed, stream);
    core::GrowthRequest request;
    request.needed = needed;
    request.reserved = core_.counters().bytes_reserved;
    request.limit = resolved_.limit;
    request.granularity = resolved_.granularity;
    request.policy = resolved_.options.growth_policy;
    request.next_region_size = next_region_size_;
    const std::vector<std::uint64_t> sizes = core::GrowthCandidates(request);
    if (sizes.empty()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "growing by %d bytes would pass the limit of %d bytes (%d reserved)",
          core::RoundUpToMultiple(needed, resolved_.granularity),
          resolved_.limit, request.reserved));
    }
    absl::Status last;
    for (std::uint64_t size : sizes) {
      last = AddRegion(size);
      if (last.ok()) {
        next_region_size_ = core::NextRegionSize(size, next_region_size_);
        return last;
      }
      if (!absl::IsResourceExhausted(last))
        break;  // a driver error: do not retry
    }
    return last;
  }

  // The reserved range, on first use: four times the device's memory.
  // Address space is cheap (a GPU's is 2^47 bytes and more) while running out
  // of it is not: trimming leaves holes, and a request larger than every hole
  // needs room past the end of what is mapped (measured: with a range of 1x
  // the device, the 1024-token inference trace ran out of address space on a
  // device 2% above its peak).
  static constexpr std::uint64_t kAddressSpaceFactor = 4;
  absl::Status EnsureReserved() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (space_->reserved()) return absl::OkStatus();
    return space_->Reserve(
        kAddressSpaceFactor *
        std::max(backend_->info().total_bytes, resolved_.limit));
  }

  // Maps [address, address + bytes) and hands it to the core, joined with
  // the regions on either side.
  absl::Status MapRegion(DeviceAddress address, std::uint64_t bytes,
                         std::uint64_t handle_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_RETURN_IF_ERROR(space_->Map(address, bytes, handle_bytes));
    core::RegionId id = core_.AddRegion(address, bytes);
    if (address > space_->base()) {
      if (std::optional<core::RegionId> before = core_.RegionAt(address - 1)) {
        id = core_.JoinRegions(*before, id, oracle_);
      }
    }
    if (std::optional<core::RegionId> after = core_.RegionAt(address + bytes)) {
      core_.JoinRegions(id, *after, oracle_);
    }
    return absl::OkStatus();
  }

  // Preallocation with expandable regions: the whole limit at once, in at
  // most 64 handles of nearly equal size (Trim can give back each whole
  // handle later).
  absl::Status PreallocateExpandable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_RETURN_IF_ERROR(EnsureReserved());
    const std::uint64_t unit = space_->unit();
    const std::uint64_t units = resolved_.limit / unit;  // the limit is whole
    const std::uint64_t handles = std::min<std::uint64_t>(64, units);
    // `longer` handles of q + 1 units, then the rest of q units.
    const std::uint64_t q = units / handles, longer = units % handles;
    DeviceAddress at = space_->base();
    if (longer != 0) {
      GPUALLOC_RETURN_IF_ERROR(
          MapRegion(at, longer * (q + 1) * unit, (q + 1) * unit));
      at += longer * (q + 1) * unit;
    }
    return MapRegion(at, (handles - longer) * q * unit, q * unit);
  }

  // Maps the least that makes room for `needed` bytes (PlanGrowth): at the
  // end of what is mapped, or in a hole left by an earlier trim.
  absl::Status GrowExpandable(std::uint64_t needed, Stream stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_RETURN_IF_ERROR(EnsureReserved());
    std::vector<core::Extent> extents;
    for (DeviceAddress base : core_.RegionBases()) {
      const core::RegionId id = *core_.RegionAt(base);
      const core::RegionEdges edges = core_.region_edges(id);
      extents.push_back(core::Extent{base, core_.region_size(id),
                                     edges.free_head, edges.free_tail});
    }
    const std::optional<core::GrowthPlan> plan = core::PlanGrowth(
        extents, space_->base(), space_->size(), needed, space_->unit());
    if (!plan.has_value()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "no hole of the reserved range of %d bytes can take %d more bytes",
          space_->size(), needed));
    }
    // Free granules elsewhere could not serve this request: unmap them
    // first, keeping the free memory the plan joins.
    if (resolved_.options.trim_before_growth) {
      GPUALLOC_RETURN_IF_ERROR(
          UnmapFree(plan->address, plan->address + plan->bytes, &stream));
    }
    const std::uint64_t reserved = core_.counters().bytes_reserved;
    if (reserved + plan->bytes > resolved_.limit) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "mapping %d more bytes would pass the limit of %d bytes (%d mapped)",
          plan->bytes, resolved_.limit, reserved));
    }
    return MapRegion(plan->address, plan->bytes, space_->unit());
  }

  // Host-waits for the work queued on `streams` (which may still use free
  // memory) before `doing` something that does not wait for it.
  absl::Status WaitForFreeMemory(const std::vector<std::uintptr_t>& streams,
                                 absl::string_view doing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (streams.empty()) return absl::OkStatus();
    absl::Status waited = stream_order_.WaitForAll(streams);
    if (waited.ok()) return waited;
    (void)stream_order_.TakeError();
    return absl::Status(
        waited.code(),
        absl::StrFormat("waiting for the work that used free memory before %s: "
                        "%s",
                        doing, waited.message()));
  }

  // Unmaps every whole mapping inside a free chunk, except chunks touching
  // [keep_begin, keep_end). Unmapping does not wait for work still using the
  // memory, so: for growth (`for_stream` given) the device is only asked
  // whether that work completed (an event query; an event is recorded only
  // where none covers the frees yet) and memory whose work is still pending
  // stays mapped for now (a later growth finds its event complete); growth
  // never makes the host wait. Otherwise (Trim, garbage collection) the host
  // waits for that work first.
  absl::Status UnmapFree(DeviceAddress keep_begin, DeviceAddress keep_end,
                         const Stream* for_stream = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::pair<DeviceAddress, std::uint64_t>> targets;
    for (const core::BfcCore::FreeSpan& span :
         core_.FreeSpans(space_->unit())) {
      if (span.address <= keep_end && span.address + span.size >= keep_begin) {
        continue;
      }
      for (const auto& run : space_->MappedRunsWithin(span.address, span.size))
        targets.push_back(run);
    }
    if (targets.empty()) return absl::OkStatus();
    if (oracle_ == &stream_order_ && for_stream != nullptr) {
      std::vector<std::pair<DeviceAddress, std::uint64_t>> ready;
      for (const auto& [address, bytes] : targets) {
        for (const core::StreamStamp& c :
             core_.PendingConditionsIn(address, bytes, stream_order_)) {
          if (!stream_order_.Poll(c.stream, c.stamp)) {
            const absl::Status error = stream_order_.TakeError();
            return absl::Status(
                error.code(),
                absl::StrFormat("asking whether the work that used free "
                                "memory completed, before unmapping it: %s",
                                error.message()));
          }
        }
        if (core_.PendingConditionsIn(address, bytes, stream_order_).empty()) {
          ready.emplace_back(address, bytes);
        }
      }
      targets = std::move(ready);
    } else if (oracle_ == &stream_order_) {
      std::vector<std::uintptr_t> streams;
      for (const auto& [address, bytes] : targets) {
        for (std::uintptr_t s :
             core_.StreamsUsingFree(address, bytes, stream_order_)) {
          if (std::find(streams.begin(), streams.end(), s) == streams.end())
            streams.push_back(s);
        }
      }
      GPUALLOC_RETURN_IF_ERROR(WaitForFreeMemory(streams, "unmapping it"));
    }
    absl::Status first_error;
    for (const auto& [address, bytes] : targets) {
      std::uint64_t unmapped = 0;
      absl::Status status = space_->Unmap(address, bytes, &unmapped);
      if (unmapped != 0) core_.CarveFree(address, unmapped);
      if (!status.ok() && first_error.ok()) first_error = status;
    }
    return first_error;
  }

  // Returns every fully free region to the backend (expandable regions:
  // unmaps every free granule). With `for_stream` (before growing for that
  // stream) and several streams seen, regions whose work on other streams
  // is not known complete stay: freeing them would make the device
  // synchronize.
  absl::Status ReleaseFreeRegions(const Stream* for_stream = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (for_stream == nullptr && core_.multi_stream() &&
        oracle_ == &stream_order_) {
      // Free pieces of different streams' frees are separate chunks until
      // their work is known complete: wait for it, so that they merge into
      // whole free regions and granules that can go back.
      const std::vector<std::uintptr_t> streams =
          core_.PendingStreams(stream_order_, kNoStream);
      GPUALLOC_RETURN_IF_ERROR(
          WaitForFreeMemory(streams, "returning it to the device"));
      core_.Settle(stream_order_);
    }
    // (An empty keep range: [1, 0) touches no chunk.)
    if (space_ != nullptr) return UnmapFree(1, 0);
    const bool only_own = for_stream != nullptr && core_.multi_stream() &&
                          oracle_ == &stream_order_;
    absl::Status first_error;
    for (core::RegionId id : core_.FreeRegions()) {
      if (only_own &&
          !core_.RegionUsableBy(id, for_stream->handle, stream_order_)) {
        continue;
      }
      const DeviceAddress base = core_.region_base(id);
      absl::Status freed = backend_->Free(base);
      if (!freed.ok()) {
        if (first_error.ok()) first_error = freed;
        continue;  // the region stays usable
      }
      ++backend_frees_;
      core_.RemoveRegion(id);
    }
    return first_error;
  }

  // Whether garbage collection would give anything back.
  bool HasFreeToRelease() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (space_ == nullptr) return !core_.FreeRegions().empty();
    for (const core::BfcCore::FreeSpan& span :
         core_.FreeSpans(space_->unit())) {
      if (!space_->MappedRunsWithin(span.address, span.size).empty())
        return true;
    }
    return false;
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
        core_.Allocate(size, bytes, align, stream.handle, oracle_, search);
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
      std::uint64_t needed, Stream stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // A retry that met a failing event call stops everything (EventFailure).
    bool event_failed = false;
    if (core_.num_regions() != 0) {
      if (std::optional<DeviceAddress> a =
              SettleAndRetry(size, bytes, align, stream, &event_failed))
        return *a;
      if (event_failed) return EventFailure(bytes, stream);
    }
    absl::Status why;
    if (resolved_.options.preallocate && core_.num_regions() == 0) {
      {
        why = space_ != nullptr ? PreallocateExpandable()
                                : AddRegion(resolved_.limit);
        if (!why.ok()) {
          why = absl::Status(why.code(),
                             absl::StrFormat("preallocating %d bytes: %s",
                                             resolved_.limit, why.message()));
        }
      }
    } else if (resolved_.options.preallocate && space_ == nullptr) {
      why = absl::ResourceExhaustedError(
          "the preallocated region has no free chunk large enough");
    } else {
      // Fully free regions that could not serve this request only inflate
      // what is reserved: return them before asking for more (expandable
      // regions do the same with free granules inside Grow).
      if (space_ == nullptr && resolved_.options.trim_before_growth &&
          !core_.FreeRegions().empty()) {
        GPUALLOC_RETURN_IF_ERROR(ReleaseFreeRegions(&stream));
      }
      why = Grow(needed, stream);
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
    if (oracle_ == &stream_order_ && core_.multi_stream()) {
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
    if (oracle_ == &stream_order_) {
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

    if ((!resolved_.options.preallocate || space_ != nullptr) &&
        resolved_.options.garbage_collection && HasFreeToRelease()) {
      GPUALLOC_RETURN_IF_ERROR(ReleaseFreeRegions());
      absl::Status grown = Grow(needed, stream);
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
    ++num_ooms_;
    return OutOfMemory(bytes, size, why);
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
                           const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Stats s = StatsLocked();
    const std::uint64_t free_bytes = core_.FreeBytes();
    std::string hint;
    if (free_bytes >= size) {
      hint = absl::StrFormat(
          "%s are free but in pieces (largest %s): fragmentation. %s",
          core::FormatBytes(free_bytes),
          core::FormatBytes(s.largest_free_block_bytes),
          resolved_.options.preallocate
              ? "Growing on demand (preallocate=false) lets garbage collection "
                "return whole free regions; freeing long-lived blocks earlier, "
                "or allocating them first, keeps the pool in one piece"
              : "Free memory is split across separate regions or between live "
                "blocks; raise the limit, or free long-lived blocks earlier");
    } else if (s.bytes_reserved + size <= s.bytes_limit) {
      hint =
          "the device refused more memory (other processes may hold it); lower "
          "the limit or free device memory elsewhere";
    } else {
      hint = absl::StrFormat(
          "the limit is reached; raise memory_fraction (now %g) or "
          "memory_limit, or lower the batch size",
          resolved_.options.memory_fraction);
    }
    return absl::ResourceExhaustedError(absl::StrFormat(
        "out of memory: Allocate(%d bytes, rounded to %d) on %s%s: %s. limit "
        "%d, in use %d, reserved %d, largest free block %d, fragmentation "
        "%.1f%%. Hint: %s",
        bytes, size, backend_->info().name,
        resolved_.options.name.empty() ? ""
                                       : " (" + resolved_.options.name + ")",
        why.message(), s.bytes_limit, s.bytes_in_use, s.bytes_reserved,
        s.largest_free_block_bytes, 100 * s.fragmentation, hint));
  }

  const core::ResolvedOptions resolved_;
  const std::shared_ptr<Backend> backend_;

  mutable core::Lock mu_;
  core::BfcCore core_ ABSL_GUARDED_BY(mu_);
  // Expandable regions, or null (regions are separate backend allocations).
  // Declared after core_ and destroyed before it: unmaps, frees the range.
  std::unique_ptr<core::ExpandableSpace> space_ ABSL_GUARDED_BY(mu_);
  core::StreamOrder stream_order_ ABSL_GUARDED_BY(mu_);
  NoStreams no_streams_;
  core::ReuseOracle* const oracle_;  // &stream_order_ or &no_streams_
  // All ones with streams, 0 without (Key).
  const std::uintptr_t stream_mask_;
  std::uint64_t next_region_size_ ABSL_GUARDED_BY(mu_);
  std::uint64_t num_ooms_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t backend_allocs_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t backend_frees_ ABSL_GUARDED_BY(mu_) = 0;
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
