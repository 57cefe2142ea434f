// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_allocator.cc: the BFC facade (core/bfc/bfc_allocator.h):
// construction, queries, Trim, Validate and statistics.
#include "core/bfc/bfc_allocator.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/live_allocations.h"
#include "core/report/format_bytes.h"

namespace gpualloc::core {

BfcAllocator::BfcAllocator(ResolvedOptions resolved,
                           std::shared_ptr<Backend> backend)
    : resolved_(std::move(resolved)),
      backend_(std::move(backend)),
      core_(BfcConfig{resolved_.min_block_size,
                      resolved_.options.max_internal_fragmentation,
                      resolved_.large_page}),
      stream_order_(backend_.get(), resolved_.options.cross_stream_reuse),
      oracle_(stream_order_.streams()
                  ? static_cast<ReuseOracle*>(&stream_order_)
                  : &no_streams_),
      // The top bit is the released streams' (no stream handle has it).
      stream_mask_(stream_order_.streams() ? ~StreamOrder::kReleasedBit : 0),
      known_only_(*oracle_),
      pools_(core_.config(),
             RoundUpToMultiple(kSlabUnit, resolved_.min_block_size)),
      tags_(core_.config(), resolved_.granularity, *backend_, history_.get()),
      fronts_(resolved_.front_cache, core_, stream_order_, oracle_),
      source_(MakeSource()) {}

BfcAllocator::~BfcAllocator() {
  LockGuard lock(&mu_);
  // Cached blocks are free memory, not live allocations.
  fronts_.Disable();
  ReportLiveAtDestruction("bfc", backend_->info(),
                          core_.counters().num_chunks_in_use -
                              pools_.num_slabs() + pools_.num_chunks_in_use() -
                              tags_.pools().num_slabs() +
                              tags_.pools().num_chunks_in_use(),
                          Requested());
  // Every region goes back to the device with source_ (declared last,
  // destroyed first): live allocations die with the allocator, as with any
  // caching allocator. Expandable regions are unmapped, which does not wait
  // for the work still using them: the source waits for the work on plain
  // blocks, and here the host waits for the work on the blocks of private
  // pools and tags (their streams are the pools' users, which the core's
  // chunks do not name).
  if (pools_on_ && resolved_.expandable && stream_order_.streams()) {
    std::vector<std::uintptr_t> streams;
    for (const PrivatePools* pools : {&pools_, &tags_.pools()}) {
      for (PoolId id : pools->Ids()) {
        for (std::uintptr_t stream : pools->Users(id)) {
          if (std::find(streams.begin(), streams.end(), stream) ==
              streams.end()) {
            streams.push_back(stream);
          }
        }
      }
    }
    // (Each on its own: one failing wait does not skip the others.)
    for (std::uintptr_t stream : streams) {
      if (!stream_order_.WaitForAll({stream}).ok()) {
        (void)stream_order_.TakeError();
      }
    }
  }
}
absl::Status BfcAllocator::RecordStream(void* ptr, Stream stream) {
  const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
  LockGuard lock(&mu_);
  absl::Status status;
  if (pools_.Owns(address)) {
    status = pools_.RecordStream(address, Key(stream).handle);
  } else if (tags_.pools().Owns(address)) {
    status = tags_.CheckAwake(address, "RecordStream");
    if (status.ok()) {
      status = tags_.pools().RecordStream(address, Key(stream).handle);
    }
  } else {
    if (fronts_.on()) {
      fronts_.Fold();
      fronts_.Leave(address);
    }
    status = core_.RecordStream(address, Key(stream).handle);
  }
  MaybeValidate();
  return status;
}

absl::Status BfcAllocator::ReleaseStream(Stream given) {
  LockGuard lock(&mu_);
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
  if (StreamFront* f = fronts_.For(stream)) fronts_.Release(*f);
  // Without streams (all map to one) or never seen: nothing names it.
  if (!stream_order_.streams() ||
      (core_.StreamReferences(stream) == 0 &&
       pools_.StreamReferences(stream) == 0 &&
       tags_.pools().StreamReferences(stream) == 0 &&
       !shared_.NamesStream(stream) && !stream_order_.Knows(stream))) {
    RememberReleased(stream);
    return absl::OkStatus();
  }
  const std::uintptr_t key = StreamOrder::kReleasedBit | ++streams_released_;
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
  tags_.pools().RenameStream(stream, key);
  // Blocks freed on it and held for importers are released on its key
  // (answered by its last event), never on the stream itself.
  shared_.RenameStream(stream, key);
  RememberReleased(stream);
  MaybeValidate();
  return absl::OkStatus();
}

Stats BfcAllocator::GetStats() const {
  LockGuard lock(&mu_);
  return StatsLocked();
}

void BfcAllocator::ResetPeakStats() {
  LockGuard lock(&mu_);
  core_.ResetPeaks();
  if (fronts_.on()) fronts_.ResetPeaks();
  peak_in_use_ = InUse();
  peak_requested_ = Requested();
  largest_alloc_ = 0;
  peak_reserved_ = Physical();
}

void BfcAllocator::SetOutOfMemoryHandler(OutOfMemoryHandler handler) {
  std::shared_ptr<const OutOfMemoryHandler> next =
      ShareHandler(std::move(handler));
  LockGuard lock(&mu_);
  oom_handler_.swap(next);
}

Snapshot BfcAllocator::GetSnapshot() const {
  LockGuard lock(&mu_);
  // The fronts' cached blocks are free memory to the user: they go back to
  // the core first, so that the snapshot shows them free (this changes no
  // figure a user sees, only where the blocks wait).
  if (fronts_.on()) {
    fronts_.Fold();
    const_cast<StreamFronts&>(fronts_).Flush();
  }
  Snapshot s;
  s.region_kind =
      resolved_.expandable ? RegionKind::kExpandable : RegionKind::kSeparate;
  core_.AppendSnapshot(&s.regions);
  if (pools_on_) {
    // A tag's block asleep (a whole mapping of its own, TakeTagSlab) is
    // still a chunk of its region, but its memory is given back.
    // (The lambda is analyzed on its own: it sees mu_'s data by pointer.)
    const TaggedMemory* tags = &tags_;
    const RegionSource* source = source_.get();
    auto asleep = [tags, source](const ChunkSnapshot& c) {
      return tags->any_asleep() &&
             source->SleepingWithin(c.address, c.size) != 0;
    };
    for (RegionSnapshot& r : s.regions) {
      for (ChunkSnapshot& c : r.chunks) {
        if (!c.in_use) continue;
        c.pool = pools_.SlabOwner(c.address);
        c.tag = static_cast<Tag>(tags_.pools().SlabOwner(c.address));
        c.asleep = c.tag != 0 && asleep(c);
      }
    }
    pools_.AppendSnapshot(&s.pools);
    const std::size_t first_tag = s.pools.size();
    tags_.pools().AppendSnapshot(&s.pools);
    for (std::size_t i = first_tag; i < s.pools.size(); ++i) {
      PoolSnapshot& p = s.pools[i];
      p.tag = static_cast<Tag>(p.id);
      p.asleep = tags_.asleep(p.tag);
      if (!p.asleep) continue;
      p.bytes_sleeping = tags_.SleepingBytesOf(p.tag, *source_);
      p.bytes_reserved -= p.bytes_sleeping;
      for (RegionSnapshot& r : p.regions) {
        for (ChunkSnapshot& c : r.chunks) c.asleep = asleep(c);
      }
    }
  }
  s.stats = StatsLocked();
  if (history_ != nullptr) history_->AppendTo(&s);
  return s;
}

absl::Status BfcAllocator::Trim() {
  LockGuard lock(&mu_);
  if (capturing_ && CaptureNow()) {
    return absl::FailedPreconditionError(
        "Trim during a graph capture: returning memory would make the "
        "device synchronize; call it after EndAllocateToPool");
  }
  // No routed stream captures now: Trim may wait for work as usual.
  const CaptureOff capture_off(capturing_);
  if (fronts_.on()) fronts_.Fold();
  // A held block whose release fails stays held; Trim says so.
  const absl::Status held =
      shared_.any_held() ? TryReleaseHeld() : absl::OkStatus();
  absl::Status status = ReleaseAllFree();
  status.Update(held);
  MaybeValidate();
  return status;
}

absl::Status BfcAllocator::SetLimit(std::uint64_t bytes) {
  GPUALLOC_ASSIGN_OR_RETURN(
      const std::uint64_t limit,
      NewLimit(bytes, resolved_.granularity, backend_->info()));
  LockGuard lock(&mu_);
  if (limit > resolved_.limit && resolved_.options.preallocate &&
      !source_->GrowsAfterPreallocation() && core_.num_regions() != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "SetLimit(%d bytes, %s): the whole limit of %d bytes was "
        "preallocated in one region (preallocate=true, expandable=false), "
        "which cannot grow, so a higher limit would change nothing; Trim "
        "with nothing allocated first (the next allocation then "
        "preallocates the new limit), or set preallocate=false or "
        "expandable=true",
        limit, FormatBytes(limit), resolved_.limit));
  }
  if (Physical() > limit) {
    if (capturing_ && CaptureNow()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "SetLimit(%d bytes) during a graph capture: %d bytes are reserved "
          "and returning memory would make the device synchronize; call it "
          "after EndAllocateToPool",
          limit, Physical()));
    }
    const CaptureOff capture_off(capturing_);
    if (fronts_.on()) fronts_.Fold();
    // Blocks held for importers that all closed them go first.
    if (shared_.any_held()) ReleaseHeld();
    GPUALLOC_RETURN_IF_ERROR(ReleaseAllFree());
    MaybeValidate();
    if (Physical() > limit) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "SetLimit(%d bytes, %s): %d bytes (%s) stay reserved after "
          "returning every free region (%d bytes in use); free memory first "
          "or choose a limit of at least %d bytes",
          limit, FormatBytes(limit), Physical(), FormatBytes(Physical()),
          core_.counters().bytes_in_use, Physical()));
    }
  }
  resolved_.limit = limit;
  limit_now_.store(limit, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status BfcAllocator::Validate() const {
  LockGuard lock(&mu_);
  return ValidateLocked(/*full=*/true);
}

std::unique_ptr<RegionSource> BfcAllocator::MakeSource() {
  const RegionContext context{resolved_,     *backend_, core_,
                              stream_order_, *oracle_,  capturing_,
                              history_.get()};
  return resolved_.expandable ? MakeExpandableRegions(context)
                              : MakeSeparateRegions(context);
}

absl::Status BfcAllocator::ValidateLocked(bool full) const {
  GPUALLOC_RETURN_IF_ERROR(core_.Validate());
  GPUALLOC_RETURN_IF_ERROR(source_->Validate(full));
  GPUALLOC_RETURN_IF_ERROR(fronts_.Validate());
  if (pools_on_) {
    GPUALLOC_RETURN_IF_ERROR(pools_.Validate(core_));
    GPUALLOC_RETURN_IF_ERROR(tags_.pools().Validate(core_));
    GPUALLOC_RETURN_IF_ERROR(tags_.Validate(*source_));
  }
  GPUALLOC_RETURN_IF_ERROR(shared_.Validate(
      [this](DeviceAddress ptr)
          ABSL_NO_THREAD_SAFETY_ANALYSIS { return BlockSize(ptr); }));
  // F2: never more reserved from the device than the limit.
  if (Physical() > resolved_.limit) {
    return absl::InternalError(
        absl::StrFormat("invariant F2 broken: %d bytes reserved, limit %d",
                        Physical(), resolved_.limit));
  }
  return absl::OkStatus();
}

Stats BfcAllocator::StatsLocked() const {
  const CoreCounters& k = core_.counters();
  Stats s;
  s.num_allocs = k.num_allocs;
  s.bytes_in_use = k.bytes_in_use;
  s.peak_bytes_in_use = k.peak_bytes_in_use;
  s.largest_alloc_size = k.largest_alloc_size;
  s.bytes_limit = resolved_.limit;
  // (Memory the device refused to take back is reserved too.)
  s.bytes_release_pending = source_->pending_bytes();
  s.bytes_reserved = k.bytes_reserved + s.bytes_release_pending;
  s.peak_bytes_reserved = std::max(k.peak_bytes_reserved, s.bytes_reserved);
  s.largest_free_block_bytes = core_.LargestFreeBlock();
  s.bytes_requested = k.bytes_requested;
  s.peak_bytes_requested = k.peak_bytes_requested;
  const std::uint64_t free_bytes = core_.FreeBytes();
  s.fragmentation =
      free_bytes == 0 ? 0.0
                      : 1.0 - static_cast<double>(s.largest_free_block_bytes) /
                                  static_cast<double>(free_bytes);
  s.num_ooms = num_ooms_;
  // Regions, or with expandable regions granule mappings, made and undone.
  s.backend_allocs = source_->backend_allocs();
  s.backend_frees = source_->backend_frees();
  s.events_recorded = stream_order_.markers_recorded();
  s.stream_waits = stream_order_.stream_waits();
  s.host_waits = stream_order_.host_waits();
  if (pools_on_) {
    s.num_allocs = k.num_allocs - pools_.slabs_taken() + pools_.num_allocs() -
                   tags_.pools().slabs_taken() + tags_.pools().num_allocs();
    // With tags asleep, their live blocks count in bytes_in_use but their
    // memory is not reserved (bytes_sleeping).
    s.bytes_reserved = Physical();
    if (slept_) s.peak_bytes_reserved = std::max(peak_reserved_, Physical());
    s.peak_bytes_reserved = std::max(s.peak_bytes_reserved, Physical());
    s.bytes_sleeping = source_->sleeping_bytes();
    s.bytes_in_use = InUse();
    s.peak_bytes_in_use = peak_in_use_;
    s.largest_alloc_size = largest_alloc_;
    s.bytes_requested = Requested();
    s.peak_bytes_requested = peak_requested_;
    s.pool_bytes_reserved = pools_.bytes_reserved();
    s.pool_bytes_in_use = pools_.bytes_in_use();
  }
  s.bytes_exported = shared_.bytes_exported();
  s.bytes_held_for_importers = shared_.bytes_held();
  s.bytes_imported = shared_.bytes_imported();
  fronts_.AddStats(&s);
  return s;
}

absl::Status BfcAllocator::DeallocateToFront(DeviceAddress address,
                                             std::uintptr_t stream) {
  bool changed = true;
  absl::Status status = fronts_.Deallocate(address, stream, &changed);
  // (It locks every front: after the front's lock is released.)
  if (changed) MaybeValidate();
  return status;
}

void BfcAllocator::EvictFromFront(StreamFront& f) {
  LockGuard lock(&mu_);
  fronts_.EvictOver(f);
  MaybeValidate();
}

}  // namespace gpualloc::core
