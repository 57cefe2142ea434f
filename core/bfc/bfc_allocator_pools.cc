// SPDX-License-Identifier: Apache-2.0
// core/bfc/bfc_allocator_pools.cc: the BFC facade's (core/bfc/bfc_allocator.h)
// private pools and graph capture (core/bfc/private_pools.h).
#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/bfc/bfc_allocator.h"

namespace gpualloc::core {

absl::StatusOr<PoolId> BfcAllocator::CreatePool() {
  LockGuard lock(&mu_);
  EnablePoolPaths();
  // A key no stream has, like a released stream's: its slabs are strangers
  // to every stream, and conditions naming it are complete.
  return pools_.Create(StreamOrder::kReleasedBit | ++streams_released_);
}

void BfcAllocator::EnablePoolPaths() {
  if (pools_on_) return;  // from now on the pool-aware paths and figures
  const bool fronts = fronts_.on();
  fronts_.Disable();
  peak_in_use_ =
      fronts ? fronts_.peak_in_use() : core_.counters().peak_bytes_in_use;
  peak_requested_ =
      fronts ? fronts_.peak_requested() : core_.counters().peak_bytes_requested;
  largest_alloc_ = core_.counters().largest_alloc_size;
  peak_reserved_ = core_.counters().peak_bytes_reserved;
  pools_on_ = slow_on_ = true;
}

absl::Status BfcAllocator::RetainPool(PoolId pool) {
  LockGuard lock(&mu_);
  return pools_.Retain(pool);
}

absl::Status BfcAllocator::ReleasePool(PoolId pool, Stream last_use) {
  LockGuard lock(&mu_);
  const std::uintptr_t stream = Key(last_use).handle;
  auto released =
      std::find(released_handles_.begin(), released_handles_.end(), stream);
  if (released != released_handles_.end()) {
    if (!NamesStream(stream)) {
      // The pool's memory would go back after an event recorded on it, a
      // stream the program may have destroyed.
      return absl::FailedPreconditionError(absl::StrFormat(
          "ReleasePool(pool %d, stream %#x): the stream was released with "
          "ReleaseStream and no call has named it since, so it may no longer "
          "exist; pass the stream the pool's memory was last used on (or the "
          "default stream). Nothing changed",
          pool, last_use.handle));
    }
    released_handles_.erase(released);  // the handle names a new stream
  }
  absl::Status status = pools_.Release(pool, stream, *this);
  MaybeValidate();
  return status;
}

// The handles ReleaseStream was given (with streams), at most
// kReleasedHandlesKept: ReleasePool refuses one as last_use while nothing
// names it again (NamesStream: a chunk, a pool's users or routes, a tag or
// the stream order), since the program may have destroyed it.
void BfcAllocator::RememberReleased(std::uintptr_t stream) {
  if (!stream_order_.streams()) return;  // nothing is ever recorded on one
  if (std::find(released_handles_.begin(), released_handles_.end(), stream) !=
      released_handles_.end()) {
    return;
  }
  if (released_handles_.size() == kReleasedHandlesKept) {
    released_handles_.pop_front();
  }
  released_handles_.push_back(stream);
}

bool BfcAllocator::NamesStream(std::uintptr_t stream) const {
  return core_.StreamReferences(stream) != 0 ||
         pools_.StreamReferences(stream) != 0 ||
         tags_.pools().StreamReferences(stream) != 0 ||
         pools_.IsRouted(stream) || shared_.NamesStream(stream) ||
         stream_order_.Knows(stream);
}

// A capture may begin on a routed stream at any moment (PyTorch calls
// beginAllocateToPool before cudaStreamBeginCapture), so while any stream
// allocates to a pool on a backend that can capture, every operation behaves
// as during a capture; the cold paths that would otherwise refuse (Trim,
// ReleaseStream) ask the backend (CaptureNow).
absl::Status BfcAllocator::BeginAllocateToPool(PoolId pool, Stream stream) {
  LockGuard lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(pools_.Begin(pool, Key(stream).handle));
  capturing_ = backend_->info().capabilities.graph_capture;
  return absl::OkStatus();
}

absl::Status BfcAllocator::EndAllocateToPool(PoolId pool) {
  LockGuard lock(&mu_);
  GPUALLOC_RETURN_IF_ERROR(pools_.End(pool));
  capturing_ = pools_.routed() && backend_->info().capabilities.graph_capture;
  return absl::OkStatus();
}

bool BfcAllocator::CaptureNow() {
  for (std::uintptr_t stream : pools_.RoutedStreams()) {
    absl::StatusOr<bool> asked = backend_->IsCapturing(Stream(stream));
    if (!asked.ok() || *asked) return true;
  }
  return false;
}

// The allocation path once a private pool was made: the stream's pool, or
// the general core asking only what it may during a capture; the
// statistics that pools change are kept here.
absl::StatusOr<void*> BfcAllocator::AllocateWithPools(
    const AllocationRequest& request, PendingOutOfMemory* pending, Tag tag) {
  const Stream stream = request.stream;
  absl::StatusOr<DeviceAddress> address;
  std::uint64_t chunk = 0;
  if (tag != 0) {
    EnablePoolPaths();
    address = AllocateToTag(tag, request, pending);
    if (address.ok()) chunk = tags_.pools().AllocatedSize(*address);
  } else if (std::optional<PoolId> pool = pools_.RoutedPool(stream.handle)) {
    slab_pending_ = pending;
    address =
        pools_.Allocate(*pool, request.chunk_size, request.requested,
                        request.alignment, stream.handle, Oracle(), *this);
    slab_pending_ = nullptr;
    if (address.ok()) chunk = pools_.AllocatedSize(*address);
  } else {
    std::optional<DeviceAddress> a =
        core_.Allocate(request.chunk_size, request.requested, request.alignment,
                       stream.handle, Oracle());
    if (a.has_value()) {
      address = *a;
    } else if (stream_order_.has_error()) {
      address = EventFailure(request.requested, stream);
    } else {
      address = AllocateSlowRelaxed(request, pending);
    }
    if (address.ok()) chunk = core_.AllocatedSize(*address);
  }
  if (!address.ok()) return address.status();
  peak_in_use_ = std::max(peak_in_use_, InUse());
  peak_requested_ = std::max(peak_requested_, Requested());
  largest_alloc_ = std::max(largest_alloc_, chunk);
  peak_reserved_ = std::max(peak_reserved_, Physical());
  if (history_ != nullptr) {
    history_->Record(HistoryAction::kAlloc, *address, request.requested,
                     stream.handle);
  }
  MaybeValidate();
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
}

absl::Status BfcAllocator::DeallocateWithPools(void* ptr, Stream stream) {
  const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
  if (ABSL_PREDICT_FALSE(shared_.exported(address))) {
    if (shared_.HeldNow(address)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Deallocate of %p: already freed (an exported block kept for the "
          "processes that imported it)",
          ptr));
    }
    // Held while an importer has it open (the lifetime rule of Export).
    switch (shared_.Free(address, Key(stream).handle)) {
      case SharedBlocks::OnFree::kHeld:
        MaybeValidate();
        return absl::OkStatus();
      case SharedBlocks::OnFree::kRetired: {
        if (ABSL_PREDICT_FALSE(shared_.any_held())) ReleaseHeld();
        const absl::Status freed = FreeBlock(address, stream);
        if (freed.ok()) {
          shared_.Drop(address);
        } else {
          shared_.Reopen(address);  // still allocated, still exported
        }
        return freed;
      }
      case SharedBlocks::OnFree::kNotExported:
        break;
    }
  }
  if (ABSL_PREDICT_FALSE(shared_.any_held())) ReleaseHeld();
  return FreeBlock(address, stream);
}

absl::Status BfcAllocator::FreeBlock(DeviceAddress address, Stream stream) {
  const std::uint64_t chunk =
      history_ == nullptr           ? 0
      : pools_.Owns(address)        ? pools_.AllocatedSize(address)
      : tags_.pools().Owns(address) ? tags_.pools().AllocatedSize(address)
                                    : core_.AllocatedSize(address);
  absl::Status status;
  if (pools_.Owns(address)) {
    status = pools_.Deallocate(address, Key(stream).handle,
                               stream_order_.stamp(), oracle_, *this);
  } else if (tags_.pools().Owns(address)) {
    status = tags_.CheckAwake(address, "Deallocate");
    if (status.ok()) {
      status =
          tags_.pools().Deallocate(address, Key(stream).handle,
                                   stream_order_.stamp(), oracle_, *tag_slabs_);
    }
  } else {
    status = core_.Deallocate(address, Key(stream).handle,
                              stream_order_.stamp(), oracle_);
  }
  if (history_ != nullptr && status.ok()) {
    RecordFree(*history_, address, chunk, Key(stream).handle);
  }
  MaybeValidate();
  return status;
}

absl::StatusOr<DeviceAddress> BfcAllocator::TakeSlab(std::uint64_t* bytes,
                                                     std::uintptr_t key) {
  const std::uint64_t min_block = resolved_.min_block_size;
  const std::uint64_t want = *bytes;
  if (want > resolved_.limit) return RejectTooLargeLocked(want, slab_pending_);
  absl::StatusOr<DeviceAddress> base;
  if (std::optional<DeviceAddress> a =
          core_.Allocate(want, want, min_block, key, Oracle())) {
    base = *a;
  } else if (stream_order_.has_error()) {
    base = EventFailure(want, Stream(key));
  } else {
    base = AllocateSlowRelaxed({.requested = want,
                                .chunk_size = want,
                                .alignment = min_block,
                                .needed = want,
                                .stream = Stream(key)},
                               slab_pending_);
  }
  if (base.ok()) *bytes = core_.AllocatedSize(*base);
  return base;
}

// AllocateSlow, its device calls in relaxed capture mode during a capture.
// While streams allocate to pools, the backend is asked first whether one
// of them captures now; if none does, the slow path runs as usual (events,
// host waits, returned memory).
absl::StatusOr<DeviceAddress> BfcAllocator::AllocateSlowRelaxed(
    const AllocationRequest& request, PendingOutOfMemory* pending) {
  if (capturing_ && !CaptureNow()) {
    const CaptureOff capture_off(capturing_);
    return AllocateSlow(request, pending);
  }
  RelaxedCapture relaxed(*backend_, capturing_);
  GPUALLOC_RETURN_IF_ERROR(relaxed.status());
  return AllocateSlow(request, pending);
}

bool BfcAllocator::Contiguous(DeviceAddress a, DeviceAddress b) const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // called under mu_, via the pools
  return core_.RegionAt(a) == core_.RegionAt(b);
}

void BfcAllocator::ReturnSlab(DeviceAddress base,
                              absl::Span<const std::uintptr_t> streams) {
  for (std::size_t i = 1; i < streams.size(); ++i) {
    (void)core_.RecordStream(base, streams[i]);
  }
  (void)core_.Deallocate(base, streams.front(), stream_order_.stamp(), oracle_);
}

}  // namespace gpualloc::core
