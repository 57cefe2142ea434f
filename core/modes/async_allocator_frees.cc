// SPDX-License-Identifier: Apache-2.0
// core/modes/async_allocator_frees.cc: the async mode's
// (core/modes/async_allocator.h) stream-ordered frees: each free ordered after
// the allocation and recorded streams with events from a small pool of
// reusable ones, the frees deferred when that fails, ReleaseStream (a
// released stream's last event stands for it) and the out-of-memory wait for
// the streams that freed memory.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/live_allocations.h"
#include "core/lock.h"
#include "core/modes/async_allocator.h"
#include "core/status_macros.h"
#include "core/streams/stream_order.h"

namespace gpualloc::core {

absl::Status AsyncAllocator::ReleaseStream(Stream stream) {
  LockGuard lock(&mu_);
  if (!backend_->info().capabilities.streams) return absl::OkStatus();
  PruneReleasedLocked();
  const std::uintptr_t s = stream.handle;
  bool named = freed_streams_.contains(s);
  ForEachStreamFieldLocked([&](std::uintptr_t& f) { named |= f == s; });
  if (!named) return absl::OkStatus();
  GPUALLOC_ASSIGN_OR_RETURN(const EventHandle event, AcquireEventLocked());
  absl::Status status = backend_->RecordEvent(event, stream);
  if (!status.ok()) {
    idle_events_.push_back(event);
    return absl::Status(
        status.code(),
        absl::StrFormat("ReleaseStream(stream %#x): recording its last "
                        "event failed, nothing changed: %s",
                        s, status.message()));
  }
  ++events_recorded_;
  const std::uintptr_t key = StreamOrder::kReleasedBit | ++streams_released_;
  released_[key] = event;
  ForEachStreamFieldLocked([&](std::uintptr_t& f) {
    if (f == s) f = key;
  });
  if (freed_streams_.erase(s) != 0) freed_streams_.insert(key);
  for (Deferred& d : deferred_) {
    if (d.stream.handle == key) {
      // Freed on it: the default stream frees it, after its last event.
      d.stream = Stream(0);
      if (std::find(d.recorded.begin(), d.recorded.end(), key) ==
          d.recorded.end()) {
        d.recorded.push_back(key);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AsyncAllocator::FreeLocked(DeviceAddress address, Stream stream) {
  const LiveAllocation* a = live_.Find(address);
  GPUALLOC_DCHECK(a != nullptr);
  auto recorded = recorded_.find(address);
  static const std::vector<std::uintptr_t> kNone;
  absl::Status status = OrderAndFree(
      *a, recorded != recorded_.end() ? recorded->second : kNone, stream);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrFormat("Deallocate(%#x, stream %#x): %s", address,
                        stream.handle, status.message()));
  }
  live_.Remove(address);
  if (recorded != recorded_.end()) recorded_.erase(recorded);
  return absl::OkStatus();
}

absl::Status AsyncAllocator::OrderAndFree(
    const LiveAllocation& a, const std::vector<std::uintptr_t>& recorded,
    Stream stream) {
  std::vector<std::uintptr_t> others;
  if (a.stream != stream.handle) others.push_back(a.stream);
  for (std::uintptr_t other : recorded) {
    if (other != stream.handle &&
        std::find(others.begin(), others.end(), other) == others.end()) {
      others.push_back(other);
    }
  }
  if (!backend_->info().capabilities.streams) others.clear();
  for (std::uintptr_t other : others) {
    absl::Status waited = StreamWaitLocked(stream, Stream(other));
    if (!waited.ok()) {
      return absl::Status(
          waited.code(),
          absl::StrFormat("ordering the free after %s stream %#x: %s",
                          other == a.stream ? "allocation" : "recorded", other,
                          waited.message()));
    }
  }
  absl::Status freed = backend_->PoolFree(a.base, stream);
  if (!freed.ok()) {
    return absl::Status(
        freed.code(),
        absl::StrFormat("backend %s PoolFree(%#x): %s",
                        backend_->info().backend, a.base, freed.message()));
  }
  ++backend_frees_;
  freed_streams_.insert(stream.handle);
  return absl::OkStatus();
}

void AsyncAllocator::Defer(DeviceAddress address, Stream stream,
                           const absl::Status& why) {
  Deferred d;
  d.stream = stream;
  auto recorded = recorded_.find(address);
  if (recorded != recorded_.end()) {
    d.recorded = std::move(recorded->second);
    recorded_.erase(recorded);
  }
  d.allocation = live_.Remove(address);
  deferred_bytes_ += d.allocation.held;
  deferred_.push_back(std::move(d));
  if (!reported_deferral_) {
    reported_deferral_ = true;
    std::fprintf(stderr,
                 "gpualloc: async allocator on %s (device %d): a free could "
                 "not be ordered or done (%s); its block is held back and "
                 "the free retried at later calls\n",
                 backend_->info().name.c_str(), backend_->info().ordinal,
                 std::string(why.message()).c_str());
  }
}

void AsyncAllocator::RetryDeferredLocked() {
  std::vector<Deferred> still;
  for (Deferred& d : deferred_) {
    if (OrderAndFree(d.allocation, d.recorded, d.stream).ok()) {
      deferred_bytes_ -= d.allocation.held;
    } else {
      still.push_back(std::move(d));
    }
  }
  deferred_ = std::move(still);
}

absl::Status AsyncAllocator::StreamWaitLocked(Stream waiter, Stream other) {
  if (StreamOrder::IsReleasedKey(other.handle)) {
    // Its last event stands for it; a forgotten one has completed.
    auto it = released_.find(other.handle);
    if (it == released_.end()) return absl::OkStatus();
    absl::Status status = backend_->StreamWaitEvent(waiter, it->second);
    if (status.ok()) ++stream_waits_;
    return status;
  }
  GPUALLOC_ASSIGN_OR_RETURN(const EventHandle event, AcquireEventLocked());
  absl::Status status = backend_->RecordEvent(event, other);
  if (status.ok()) {
    ++events_recorded_;
    status = backend_->StreamWaitEvent(waiter, event);
    if (status.ok()) ++stream_waits_;
  }
  idle_events_.push_back(event);
  return status;
}

absl::StatusOr<bool> AsyncAllocator::WaitForFreesLocked() {
  if (freed_streams_.empty() || !backend_->info().capabilities.streams) {
    return false;
  }
  GPUALLOC_ASSIGN_OR_RETURN(const EventHandle event, AcquireEventLocked());
  absl::Status status;
  std::vector<std::uintptr_t> done;
  for (std::uintptr_t s : freed_streams_) {
    if (StreamOrder::IsReleasedKey(s)) {
      auto it = released_.find(s);
      if (it != released_.end()) {
        status = backend_->SynchronizeEvent(it->second);
        if (!status.ok()) break;
        ++host_waits_;
        idle_events_.push_back(it->second);
        released_.erase(it);
      }
      done.push_back(s);
      continue;
    }
    status = backend_->RecordEvent(event, Stream(s));
    if (!status.ok()) break;
    ++events_recorded_;
    status = backend_->SynchronizeEvent(event);
    if (!status.ok()) break;
    ++host_waits_;
    done.push_back(s);
  }
  idle_events_.push_back(event);
  for (std::uintptr_t s : done) freed_streams_.erase(s);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrFormat("async allocator: waiting for pending frees after "
                        "running out of memory on backend %s: %s",
                        backend_->info().backend, status.message()));
  }
  return !done.empty();
}

void AsyncAllocator::PruneReleasedLocked() {
  for (auto it = released_.begin(); it != released_.end();) {
    absl::StatusOr<bool> done = backend_->QueryEvent(it->second);
    if (done.ok() && *done) {
      idle_events_.push_back(it->second);
      freed_streams_.erase(it->first);
      released_.erase(it++);
    } else {
      ++it;
    }
  }
}

template <typename Visit>
void AsyncAllocator::ForEachStreamFieldLocked(Visit visit) {
  live_.ForEachStream(visit);
  for (auto& [address, streams] : recorded_) {
    for (std::uintptr_t& s : streams) visit(s);
  }
  for (Deferred& d : deferred_) {
    visit(d.allocation.stream);
    for (std::uintptr_t& s : d.recorded) visit(s);
    visit(d.stream.handle);
  }
}

absl::StatusOr<EventHandle> AsyncAllocator::AcquireEventLocked() {
  if (!idle_events_.empty()) {
    const EventHandle event = idle_events_.back();
    idle_events_.pop_back();
    return event;
  }
  absl::StatusOr<EventHandle> event = backend_->CreateEvent();
  if (event.ok()) ++events_created_;
  return event;
}

}  // namespace gpualloc::core
