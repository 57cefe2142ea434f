// SPDX-License-Identifier: Apache-2.0
// core/host/host_allocator.cc: CreateHostAllocator: the BFC allocator over
// HostMemoryBackend, behind a facade that turns host-side calls into
// kHostStream and names the host pool in its out-of-memory answers.
#include "gpualloc/core/host_allocator.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/config/options.h"
#include "core/host/host_memory_backend.h"
#include "core/lock.h"
#include "core/modes/modes.h"
#include "core/status_macros.h"

namespace gpualloc {
namespace {

// The facade: the BFC allocator over HostMemoryBackend serves the memory
// (one stream, kHostStream); the facade keeps the record-stream rule. A free
// of a block with recorded streams records one event on each of them (the
// work queued so far) and holds the block; each Allocate, Trim and GetStats
// first asks the device, without waiting, which held blocks' events have
// completed and frees those into the BFC. Only when the BFC is out of memory
// does the host wait for the held blocks' events (host_waits) and try again.
// The lock guards the facade's own state; the BFC has its own, and is called
// without this one held (its out-of-memory handler may call back in).
class HostAllocator final : public Allocator {
 public:
  HostAllocator(std::unique_ptr<Allocator> bfc, std::shared_ptr<Backend> device)
      : bfc_(std::move(bfc)), device_(std::move(device)) {}
  ~HostAllocator() override;

  using Allocator::Allocate;
  using Allocator::Deallocate;

  absl::StatusOr<void*> Allocate(std::size_t bytes, Stream stream,
                                 std::size_t alignment, Tag tag) override;
  absl::Status Deallocate(void* ptr, Stream stream) override;
  absl::Status RecordStream(void* ptr, Stream stream) override;
  absl::Status ReleaseStream(Stream stream) override;
  Stats GetStats() const override;
  void ResetPeakStats() override { bfc_->ResetPeakStats(); }
  Snapshot GetSnapshot() const override { return bfc_->GetSnapshot(); }
  absl::Status Trim() override {
    GPUALLOC_RETURN_IF_ERROR(Settle(/*wait=*/false));
    return bfc_->Trim();
  }
  absl::Status SetLimit(std::uint64_t bytes) override {
    return bfc_->SetLimit(bytes);
  }
  absl::Status Validate() const override;
  void SetOutOfMemoryHandler(OutOfMemoryHandler handler) override {
    bfc_->SetOutOfMemoryHandler(std::move(handler));
  }
  const DeviceInfo& device() const override { return bfc_->device(); }
  const Options& options() const override { return bfc_->options(); }

 private:
  // Frees into the BFC the held blocks whose events completed (with `wait`:
  // all of them, the host waiting for their events first).
  absl::Status Settle(bool wait) const;
  EventHandle TakeEvent() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<Allocator> bfc_;
  const std::shared_ptr<Backend> device_;
  mutable core::Lock mu_;
  // What uses a live block: the streams RecordStream named, and the events
  // ReleaseStream recorded for streams released since (never named again).
  struct Uses {
    std::vector<Stream> streams;
    std::vector<EventHandle> events;
  };
  mutable absl::flat_hash_map<void*, Uses> recorded_ ABSL_GUARDED_BY(mu_);
  // Freed blocks held until their events complete.
  mutable absl::flat_hash_map<void*, std::vector<EventHandle>> held_
      ABSL_GUARDED_BY(mu_);
  mutable std::vector<EventHandle> spare_events_ ABSL_GUARDED_BY(mu_);
  mutable std::uint64_t events_recorded_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::uint64_t host_waits_ ABSL_GUARDED_BY(mu_) = 0;
};

HostAllocator::~HostAllocator() {
  // The held blocks' work may still run: wait, then they go back with the
  // BFC's regions.
  (void)Settle(/*wait=*/true);
  core::LockGuard lock(&mu_);
  for (auto& [ptr, uses] : recorded_) {
    spare_events_.insert(spare_events_.end(), uses.events.begin(),
                         uses.events.end());
  }
  // Blocks whose wait failed still hold their events: destroyed too (an
  // event may be destroyed while its work runs, as in CUDA).
  for (auto& [ptr, events] : held_) {
    spare_events_.insert(spare_events_.end(), events.begin(), events.end());
  }
  held_.clear();
  for (EventHandle e : spare_events_) (void)device_->DestroyEvent(e);
}

EventHandle HostAllocator::TakeEvent() const {
  if (!spare_events_.empty()) {
    const EventHandle e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  absl::StatusOr<EventHandle> e = device_->CreateEvent();
  return e.ok() ? *e : 0;
}

absl::Status HostAllocator::Settle(bool wait) const {
  std::vector<void*> done;
  absl::Status status;
  {
    core::LockGuard lock(&mu_);
    for (auto it = held_.begin(); it != held_.end();) {
      bool complete = true;
      for (EventHandle e : it->second) {
        if (wait) {
          absl::Status s = device_->SynchronizeEvent(e);
          if (!s.ok()) status.Update(s), complete = false;
          continue;
        }
        absl::StatusOr<bool> q = device_->QueryEvent(e);
        if (!q.ok()) status.Update(q.status());
        if (!q.ok() || !*q) {
          complete = false;
          break;
        }
      }
      if (!complete) {
        ++it;
        continue;
      }
      if (wait) ++host_waits_;
      spare_events_.insert(spare_events_.end(), it->second.begin(),
                           it->second.end());
      done.push_back(it->first);
      held_.erase(it++);
    }
  }
  for (void* p : done) status.Update(bfc_->Deallocate(p, kHostStream));
  return status;
}

absl::StatusOr<void*> HostAllocator::Allocate(std::size_t bytes, Stream stream,
                                              std::size_t alignment, Tag tag) {
  if (!(stream == Stream()) && !(stream == kHostStream)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host pool: Allocate(%d bytes) on stream %#x: pinned host memory is "
        "allocated for the host, with no stream; declare the streams whose "
        "work uses it with RecordStream",
        bytes, stream.handle));
  }
  if (tag != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host pool: Allocate(%d bytes) with tag %d: tags put device memory "
        "to sleep; the host pool takes none",
        bytes, tag));
  }
  bool any_held = false;
  {
    core::LockGuard lock(&mu_);
    any_held = !held_.empty();
  }
  // Opportunistic: a held block whose event the device could not be asked
  // about stays held and is asked about again next time; the request does
  // not fail for it (the wait below, when memory runs out, reports a
  // failure that persists).
  if (any_held) (void)Settle(/*wait=*/false);
  absl::StatusOr<void*> ptr = bfc_->Allocate(bytes, kHostStream, alignment);
  if (!ptr.ok() && absl::IsResourceExhausted(ptr.status())) {
    {
      core::LockGuard lock(&mu_);
      any_held = !held_.empty();
    }
    if (any_held) {
      // Out of memory with blocks still held: the one host wait.
      GPUALLOC_RETURN_IF_ERROR(Settle(/*wait=*/true));
      ptr = bfc_->Allocate(bytes, kHostStream, alignment);
    }
  }
  if (ptr.ok() || !absl::IsResourceExhausted(ptr.status())) return ptr;
  // (Its hint names host_memory_limit, the pool's setting.)
  return absl::ResourceExhaustedError(absl::StrCat(
      ptr.status().message(), " (the host pool of pinned memory)"));
}

absl::Status HostAllocator::RecordStream(void* ptr, Stream stream) {
  {
    core::LockGuard lock(&mu_);
    if (held_.contains(ptr)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "host pool: RecordStream(%p): the block was freed", ptr));
    }
  }
  // The BFC checks that `ptr` is live (the host stream adds nothing).
  GPUALLOC_RETURN_IF_ERROR(bfc_->RecordStream(ptr, kHostStream));
  if (stream == kHostStream) return absl::OkStatus();
  core::LockGuard lock(&mu_);
  std::vector<Stream>& streams = recorded_[ptr].streams;
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) {
    streams.push_back(stream);
  }
  return absl::OkStatus();
}

absl::Status HostAllocator::Deallocate(void* ptr, Stream stream) {
  std::vector<Stream> streams;
  std::vector<EventHandle> held;  // recorded by ReleaseStream
  {
    core::LockGuard lock(&mu_);
    if (held_.contains(ptr)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "host pool: Deallocate(%p): a second free (the block waits for the "
          "work recorded on it)",
          ptr));
    }
    auto it = recorded_.find(ptr);
    if (it != recorded_.end()) streams = it->second.streams;
    if (it != recorded_.end() && !it->second.events.empty()) {
      held = it->second.events;
    }
  }
  if (!(stream == Stream()) && !(stream == kHostStream) &&
      std::find(streams.begin(), streams.end(), stream) == streams.end()) {
    // Freeing on a stream: its work so far uses the block too. (Checks
    // that `ptr` is live, too.)
    GPUALLOC_RETURN_IF_ERROR(bfc_->RecordStream(ptr, kHostStream));
    streams.push_back(stream);
  }
  if (streams.empty() && held.empty()) {
    return bfc_->Deallocate(ptr, kHostStream);
  }
  core::LockGuard lock(&mu_);
  std::vector<EventHandle> events;
  for (Stream s : streams) {
    const EventHandle e = TakeEvent();
    absl::Status recorded = e == 0 ? absl::InternalError("CreateEvent failed")
                                   : device_->RecordEvent(e, s);
    if (e != 0) events.push_back(e);
    if (!recorded.ok()) {
      // Nothing changes: the block stays live with its streams.
      spare_events_.insert(spare_events_.end(), events.begin(), events.end());
      return absl::Status(
          recorded.code(),
          absl::StrFormat("host pool: Deallocate(%p): recording an event on "
                          "stream %#x: %s",
                          ptr, s.handle, recorded.message()));
    }
    ++events_recorded_;
  }
  events.insert(events.end(), held.begin(), held.end());
  recorded_.erase(ptr);
  held_.emplace(ptr, std::move(events));
  return absl::OkStatus();
}

absl::Status HostAllocator::ReleaseStream(Stream stream) {
  if (stream == kHostStream) {
    return absl::InvalidArgumentError(
        "host pool: ReleaseStream(kHostStream): the host is no stream to "
        "release");
  }
  // Live blocks recorded on it get one event each now, the last call naming
  // the stream; their frees then wait for those events instead.
  core::LockGuard lock(&mu_);
  for (auto& [ptr, uses] : recorded_) {
    auto it = std::find(uses.streams.begin(), uses.streams.end(), stream);
    if (it == uses.streams.end()) continue;
    const EventHandle e = TakeEvent();
    absl::Status recorded = e == 0 ? absl::InternalError("CreateEvent failed")
                                   : device_->RecordEvent(e, stream);
    if (!recorded.ok()) {
      if (e != 0) spare_events_.push_back(e);
      return absl::Status(
          recorded.code(),
          absl::StrFormat("host pool: ReleaseStream(%#x): recording an event "
                          "for the live block %p: %s",
                          stream.handle, ptr, recorded.message()));
    }
    ++events_recorded_;
    uses.events.push_back(e);
    uses.streams.erase(it);
  }
  return absl::OkStatus();
}

Stats HostAllocator::GetStats() const {
  Stats stats = bfc_->GetStats();
  core::LockGuard lock(&mu_);
  stats.events_recorded += events_recorded_;
  stats.host_waits += host_waits_;
  return stats;
}

absl::Status HostAllocator::Validate() const {
  GPUALLOC_RETURN_IF_ERROR(bfc_->Validate());
  core::LockGuard lock(&mu_);
  for (const auto& [ptr, events] : held_) {
    if (recorded_.contains(ptr)) {
      return absl::InternalError(absl::StrFormat(
          "host pool: block %p is both held and live with streams", ptr));
    }
    if (events.empty()) {
      return absl::InternalError(
          absl::StrFormat("host pool: block %p is held with no event", ptr));
    }
  }
  return absl::OkStatus();
}

absl::Status MissingCapability(const DeviceInfo& info,
                               absl::string_view capability,
                               absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "CreateHostAllocator: backend %s (%s) lacks capability %s, which %s",
      info.backend, info.name, capability, why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Allocator>> CreateHostAllocator(
    const Options& options, std::shared_ptr<Backend> backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CreateHostAllocator: backend is null");
  }
  const DeviceInfo& info = backend->info();
  if (!info.capabilities.host_memory) {
    return MissingCapability(
        info, "host_memory",
        "the host pool needs (HostAllocate, HostFree: page-locked host "
        "memory)");
  }
  if (!info.capabilities.streams) {
    return MissingCapability(
        info, "streams",
        "the host pool needs to know when the work recorded on a buffer "
        "(RecordStream) has completed");
  }
  if (options.mode != AllocatorMode::kBfc) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CreateHostAllocator: Options.mode %s: the host pool is always a bfc "
        "allocator",
        AllocatorModeName(options.mode)));
  }
  if (options.expandable == Tristate::kOn) {
    return absl::InvalidArgumentError(
        "CreateHostAllocator: Options.expandable on: pinned host memory has "
        "no virtual memory; the host pool uses separate regions");
  }
  // The pool grows by whole regions: a limit above the largest whole number
  // of them (2^64 less part of one region) cannot be honoured.
  constexpr std::uint64_t kLargestLimit =
      UINT64_MAX / kHostRegionBytes * kHostRegionBytes;
  if (options.memory_limit > kLargestLimit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CreateHostAllocator: a limit of %d bytes (Options::memory_limit, "
        "configuration key host_memory_limit, variable "
        "GPUALLOC_HOST_MEMORY_LIMIT) is above %d, the largest whole number "
        "of the pool's %d-byte regions; set host_memory_limit to at most "
        "that, or leave it unset for the machine's physical memory",
        options.memory_limit, kLargestLimit, kHostRegionBytes));
  }
  Options host = options;
  host.preallocate = false;
  host.expandable = Tristate::kOff;
  host.front_cache = 0;
  host.growth_policy = GrowthPolicy::kExact;
  host.growth_granularity =
      std::max<std::uint64_t>(options.growth_granularity, kHostRegionBytes);
  if (options.memory_limit == 0) {
    host.memory_limit = DefaultHostMemoryLimit();
  }
  if (host.name.empty()) host.name = "host pool";
  std::shared_ptr<Backend> device = backend;
  auto adapter = std::make_shared<core::HostMemoryBackend>(std::move(backend),
                                                           host.memory_limit);
  // Its out-of-memory hints name host_memory_limit (ResolvedOptions).
  absl::StatusOr<core::ResolvedOptions> resolved =
      core::ResolveOptions(host, adapter->info());
  if (resolved.ok()) resolved->host_pool = true;
  absl::StatusOr<std::unique_ptr<Allocator>> bfc =
      resolved.ok()
          ? core::CreateResolvedAllocator(*std::move(resolved),
                                          std::move(adapter))
          : absl::StatusOr<std::unique_ptr<Allocator>>(resolved.status());
  if (!bfc.ok()) {
    return absl::Status(
        bfc.status().code(),
        absl::StrCat("CreateHostAllocator: ", bfc.status().message()));
  }
  return std::unique_ptr<Allocator>(
      new HostAllocator(*std::move(bfc), std::move(device)));
}

}  // namespace gpualloc
