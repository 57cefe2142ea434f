// SPDX-License-Identifier: Apache-2.0
// core/modes/platform_allocator.cc: allocator=platform (JAX's
// XLA_PYTHON_CLIENT_ALLOCATOR=platform): every Allocate is one backend
// Allocate and every Deallocate one backend Free, at once. Nothing is cached,
// so the footprint is exactly what is live; each call costs a device
// allocation, which synchronizes the device. For debugging (with a
// host-backed or sanitizing backend every block has its own guard) and for
// measuring what a workload really needs.
//
// Streams: a real cudaFree/hipFree waits for all work on the device before it
// returns, so memory freed here is safe to hand to any stream afterwards.
// Deallocate therefore ignores its stream and RecordStream only checks its
// pointer.
//
// Alignment: the device guarantees info().allocation_alignment. A stricter
// alignment (up to ResolvedOptions::max_alignment) is served by asking for
// alignment - allocation_alignment more bytes and handing out the first
// aligned address inside; Deallocate frees the block's base.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "core/alignment.h"
#include "core/bfc/plan_block.h"
#include "core/bfc/size_class.h"
#include "core/ipc/shared_blocks.h"
#include "core/live_allocations.h"
#include "core/lock.h"
#include "core/modes/modes.h"
#include "core/modes/non_caching_allocator.h"
#include "core/report/oom_message.h"
#include "core/status_macros.h"

namespace gpualloc::core {
namespace {

constexpr absl::string_view kMode = "platform";

class PlatformAllocator final : public NonCachingAllocator {
 public:
  PlatformAllocator(ResolvedOptions resolved, std::shared_ptr<Backend> backend)
      : NonCachingAllocator(std::move(resolved), std::move(backend)) {}

  ~PlatformAllocator() override {
    LockGuard lock(&mu_);
    ReportLiveAtDestruction(kMode, backend_->info(), live_.size(),
                            live_.counters().bytes_requested);
    // Live allocations die with the allocator (as with BFC); their memory
    // still goes back to the device (a refused free tried once more: nothing
    // could free it later).
    live_.ForEach([this](DeviceAddress, const LiveAllocation& a) {
      if (!backend_->Free(a.base).ok()) (void)backend_->Free(a.base);
    });
  }

  // Tags change nothing here: this mode keeps no memory (Sleep refuses).
  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream,
                                 std::size_t alignment, Tag /*tag*/) override {
    return AllocateHandlingOutOfMemory(*this, bytes, stream, alignment);
  }

  // One attempt at the request; an out-of-memory answer goes through
  // NoteOutOfMemory (`pending`: null on the handler's retry).
  absl::StatusOr<void*> AllocateOnce(std::size_t bytes, Stream stream,
                                     std::size_t alignment,
                                     PendingOutOfMemory* pending) {
    GPUALLOC_RETURN_IF_ERROR(
        CheckAlignment(bytes, alignment, resolved_.max_alignment));
    // 0 bytes get a minimum block: a unique non-null pointer (Allocator's
    // contract), which a device allocation of 0 bytes would not give.
    const BlockPlan plan =
        PlanBlock(kMode, bytes, alignment, resolved_.min_block_size, Limit(),
                  backend_->info(), /*whole_units=*/true);
    const OutOfMemoryFacts& facts = plan.facts;
    if (facts.device > Limit()) return RejectTooLarge(facts, pending);

    LockGuard lock(&mu_);
    const LiveCounters& k = live_.counters();
    // Blocks held for importers that all closed them go back first.
    if (k.bytes_held + facts.device > Limit() && shared_.any_held()) {
      ReleaseHeld();
    }
    if (k.bytes_held + facts.device > Limit()) {
      return OutOfMemory(
          facts, pending, "the limit is reached",
          absl::StrFormat(
              "the platform allocator caches nothing, so the live "
              "allocations alone fill the limit; free memory earlier, %s, or "
              "lower the batch size",
              RaiseLimitHint(resolved_)));
    }
    absl::StatusOr<DeviceAddress> base = backend_->Allocate(facts.device);
    if (!base.ok()) {
      if (absl::IsResourceExhausted(base.status())) {
        return OutOfMemory(
            facts, pending, base.status().message(),
            "the device refused more memory below the limit (other processes "
            "may hold it); lower the limit or free device memory elsewhere");
      }
      return absl::Status(
          base.status().code(),
          absl::StrFormat("platform allocator: backend %s Allocate(%d bytes) "
                          "for Allocate(%d bytes): %s",
                          backend_->info().backend, facts.device, bytes,
                          base.status().message()));
    }
    const absl::StatusOr<DeviceAddress> address =
        HandOutAddress(backend_->info(), "Allocate", *base, plan);
    if (!address.ok()) {
      (void)backend_->Free(*base);
      return address.status();
    }
    ++backend_allocs_;
    live_.Insert(*address, LiveAllocation{*base, facts.device, facts.size,
                                          bytes, stream.handle});
    MaybeValidate();
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(*address));
  }

  absl::Status Deallocate(void* ptr, Stream stream) override {
    // The stream does not matter: the backend's Free waits for the device.
    (void)stream;
    if (ptr == nullptr) return absl::OkStatus();  // like free(NULL)
    const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
    LockGuard lock(&mu_);
    const LiveAllocation* a = live_.Find(address);
    if (a == nullptr) return live_.DiagnoseUnknown("Deallocate", address);
    if (ABSL_PREDICT_FALSE(shared_.exported(address))) {
      if (shared_.HeldNow(address)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "Deallocate of %#x: already freed (an exported block kept for "
            "the processes that imported it)",
            address));
      }
      // Held while an importer has it open (the lifetime rule of Export).
      switch (shared_.Free(address, 0)) {
        case SharedBlocks::OnFree::kHeld:
          return absl::OkStatus();
        case SharedBlocks::OnFree::kRetired: {
          if (ABSL_PREDICT_FALSE(shared_.any_held())) ReleaseHeld();
          const absl::Status freed = FreeLocked(address);
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
    return FreeLocked(address);
  }

  // Sharing (Allocator::Export): each allocation is a backend allocation of
  // its own, shared through its IPC handle.
  absl::StatusOr<std::string> Export(void* ptr) override {
    const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
    LockGuard lock(&mu_);
    if (shared_.any_held()) ReleaseHeld();
    const LiveAllocation* a = live_.Find(address);
    if (a == nullptr || shared_.HeldNow(address)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Export of %p: not a live allocation of this allocator (an address "
          "Allocate returned and Deallocate did not take back)",
          ptr));
    }
    BlockHolders holders;
    holders.kind = RegionKind::kSeparate;
    holders.pieces = {{a->base, a->held}};
    return shared_.Export(address, a->size, holders);
  }
  absl::StatusOr<ImportedBlock> Import(absl::string_view description) override {
    LockGuard lock(&mu_);
    return shared_.Import(description);
  }
  absl::Status CloseImport(void* ptr) override {
    LockGuard lock(&mu_);
    return shared_.CloseImport(reinterpret_cast<std::uintptr_t>(ptr));
  }

 private:
  // Frees the held exported blocks no importer has open anymore. A block
  // the device refuses to free stays held and is tried again at the next
  // call; TryReleaseHeld returns the first such error.
  absl::Status TryReleaseHeld() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status status;
    for (const auto& [address, stream] : shared_.Releasable()) {
      const absl::Status freed = FreeLocked(address);
      if (freed.ok()) {
        shared_.Drop(address);
      } else {
        status.Update(absl::Status(
            freed.code(),
            absl::StrFormat("releasing the block at %#x held for importers "
                            "(they all closed it; it stays held and is "
                            "released at a later call): %s",
                            address, freed.message())));
      }
    }
    return status;
  }
  void ReleaseHeld() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    (void)TryReleaseHeld();
  }

  absl::Status FreeLocked(DeviceAddress address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const LiveAllocation* a = live_.Find(address);
    absl::Status freed = backend_->Free(a->base);
    if (!freed.ok()) {
      // The block stays live and counted: the device may still hold it.
      return absl::Status(
          freed.code(),
          absl::StrFormat("Deallocate(%#x): backend %s Free(%#x): %s", address,
                          backend_->info().backend, a->base, freed.message()));
    }
    ++backend_frees_;
    live_.Remove(address);
    MaybeValidate();
    return absl::OkStatus();
  }

 public:
  absl::Status RecordStream(void* ptr, Stream stream) override {
    // Nothing to remember: the Free in Deallocate synchronizes the device, so
    // work on `stream` has completed before the memory can be reused.
    (void)stream;
    const DeviceAddress address = reinterpret_cast<std::uintptr_t>(ptr);
    LockGuard lock(&mu_);
    if (live_.Find(address) == nullptr) {
      return live_.DiagnoseUnknown("RecordStream", address);
    }
    return absl::OkStatus();
  }

  // Nothing to do: this mode never records on or waits for a stream (every
  // free synchronizes the device).
  absl::Status ReleaseStream(Stream stream) override {
    (void)stream;
    return absl::OkStatus();
  }

  Stats GetStats() const override {
    LockGuard lock(&mu_);
    return StatsLocked();
  }

  void ResetPeakStats() override {
    LockGuard lock(&mu_);
    live_.ResetPeaks();
  }

  Snapshot GetSnapshot() const override {
    LockGuard lock(&mu_);
    Snapshot s;
    live_.AppendSnapshot(&s.regions);
    s.stats = StatsLocked();
    return s;
  }

  // Nothing is cached: only blocks held for importers that all closed
  // them can be returned.
  absl::Status Trim() override {
    LockGuard lock(&mu_);
    if (shared_.any_held()) return TryReleaseHeld();
    return absl::OkStatus();
  }

  absl::Status SetLimit(std::uint64_t bytes) override {
    GPUALLOC_ASSIGN_OR_RETURN(
        const std::uint64_t limit,
        NewLimit(bytes, resolved_.granularity, backend_->info()));
    LockGuard lock(&mu_);
    if (live_.counters().bytes_held > limit && shared_.any_held()) {
      ReleaseHeld();
    }
    const std::uint64_t held = live_.counters().bytes_held;
    if (held > limit) return LiveAboveNewLimit(limit, held, kMode);
    limit_.store(limit, std::memory_order_relaxed);
    return absl::OkStatus();
  }

 private:
  // Invariants beyond LiveAllocations' L1-L3:
  //   P1. Each live allocation is one backend allocation: live = allocs -
  //       frees.
  //   P2. Never more reserved than the limit.
  absl::Status ValidateLocked() const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    GPUALLOC_RETURN_IF_ERROR(live_.Validate());
    GPUALLOC_RETURN_IF_ERROR(shared_.Validate(
        [this](DeviceAddress ptr) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          const LiveAllocation* a = live_.Find(ptr);
          return a == nullptr ? std::uint64_t{0} : a->size;
        }));
    if (backend_allocs_ - backend_frees_ != live_.size()) {
      return absl::InternalError(absl::StrFormat(
          "invariant P1 broken: %d live allocations, but %d backend "
          "allocations minus %d frees",
          live_.size(), backend_allocs_, backend_frees_));
    }
    if (live_.counters().bytes_held > Limit()) {
      return absl::InternalError(
          absl::StrFormat("invariant P2 broken: %d bytes reserved, limit %d",
                          live_.counters().bytes_held, Limit()));
    }
    return absl::OkStatus();
  }

  Stats StatsLocked() const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const LiveCounters& k = live_.counters();
    Stats s = CommonStatsLocked();
    // Every device block is live: reserved is what the live blocks hold, and
    // nothing is free (largest_free_block_bytes and fragmentation stay 0).
    s.bytes_reserved = k.bytes_held;
    s.peak_bytes_reserved = k.peak_bytes_held;
    s.bytes_exported = shared_.bytes_exported();
    s.bytes_held_for_importers = shared_.bytes_held();
    s.bytes_imported = shared_.bytes_imported();
    return s;
  }

  std::uint64_t ReservedLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return live_.counters().bytes_held;
  }

  // Blocks exported to other processes and memory imported from them.
  SharedBlocks shared_ ABSL_GUARDED_BY(mu_){backend_.get()};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Allocator>> CreatePlatformAllocator(
    ResolvedOptions resolved, std::shared_ptr<Backend> backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError(
        "CreatePlatformAllocator: backend is null");
  }
  return std::unique_ptr<Allocator>(
      new PlatformAllocator(std::move(resolved), std::move(backend)));
}

}  // namespace gpualloc::core
