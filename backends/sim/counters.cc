// SPDX-License-Identifier: Apache-2.0
// backends/sim/counters.cc: completion counters, their queued writes and the
// waits on them.
#include "backends/sim/counters.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/common/counters.h"

namespace gpualloc::sim {
namespace {

constexpr absl::string_view kPrefix = "sim ";

}  // namespace

std::uint64_t Counters::Load(const std::uint64_t& slot) {
  return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(slot))
      .load(std::memory_order_acquire);
}

void Counters::Store(std::uint64_t& slot, std::uint64_t value) {
  std::atomic_ref<std::uint64_t>(slot).store(value, std::memory_order_release);
}

absl::StatusOr<CounterBlock> Counters::Create(std::size_t count) {
  if (absl::Status s = common::CheckCounterCount(kPrefix, count); !s.ok()) {
    return s;
  }
  Block block;
  // Value-initialized: every counter starts at 0.
  block.values = std::make_unique<std::uint64_t[]>(count);
  block.count = count;
  const CounterHandle handle = ++last_handle_;
  CounterBlock out;
  out.handle = handle;
  out.values = block.values.get();
  out.count = count;
  blocks_.emplace(handle, std::move(block));
  return out;
}

absl::Status Counters::CheckBlock(CounterHandle handle) const {
  if (blocks_.contains(handle)) return absl::OkStatus();
  return common::UnknownCounters(kPrefix, "DestroyCounters", handle,
                                 info_.ordinal);
}

absl::Status Counters::Destroy(CounterHandle handle, std::uint64_t* bytes) {
  auto it = blocks_.find(handle);
  if (it == blocks_.end()) {
    return common::UnknownCounters(kPrefix, "DestroyCounters", handle,
                                   info_.ordinal);
  }
  *bytes = it->second.count * sizeof(std::uint64_t);
  // Writes into the block still queued go with it (none once the device
  // was synchronized, as DestroyCounters does).
  for (auto p = pending_.begin(); p != pending_.end();) {
    p = p->second.handle == handle ? pending_.erase(p) : std::next(p);
  }
  for (auto s = by_stream_.begin(); s != by_stream_.end();) {
    std::deque<std::uint64_t>& q = s->second;
    q.erase(
        std::remove_if(q.begin(), q.end(),
                       [&](std::uint64_t w) { return !pending_.contains(w); }),
        q.end());
    if (q.empty()) {
      by_stream_.erase(s++);
    } else {
      ++s;
    }
  }
  blocks_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<Counters::Block*> Counters::Find(const char* call,
                                                CounterHandle handle,
                                                std::size_t index,
                                                std::uint64_t value) {
  auto it = blocks_.find(handle);
  if (it == blocks_.end()) {
    return common::UnknownCounters(kPrefix, call, handle, info_.ordinal);
  }
  if (absl::Status s = common::CheckCounterAccess(kPrefix, call, handle, index,
                                                  value, it->second.count);
      !s.ok()) {
    return s;
  }
  return &it->second;
}

absl::Status Counters::Write(CounterHandle handle, std::size_t index,
                             std::uint64_t value, Stream stream,
                             Streams& streams) {
  absl::StatusOr<Block*> block = Find("WriteCounter", handle, index, value);
  if (!block.ok()) return block.status();
  if (absl::Status s = streams.CheckNotDestroyed(stream, "WriteCounter");
      !s.ok()) {
    return s;
  }
  Event captured = streams.Capture(stream.handle);
  const std::uint64_t id = next_write_++;
  pending_.emplace(id,
                   PendingWrite{handle, index, value, std::move(captured.clock),
                                captured.done_ns});
  by_stream_[stream.handle].push_back(id);
  // A stream whose earlier work has completed writes at once.
  Land(streams);
  return absl::OkStatus();
}

absl::Status Counters::Wait(CounterHandle handle, std::size_t index,
                            std::uint64_t value, Stream stream,
                            Streams& streams) {
  absl::StatusOr<Block*> block = Find("WaitCounter", handle, index, value);
  if (!block.ok()) return block.status();
  if (absl::Status s = streams.CheckNotDestroyed(stream, "WaitCounter");
      !s.ok()) {
    return s;
  }
  Land(streams);
  const std::uint64_t now = Load((*block)->values[index]);
  if (now >= value) return absl::OkStatus();  // nothing left to wait for
  for (const auto& [id, w] : pending_) {
    if (w.handle != handle || w.index != index || w.value < value) continue;
    // Ordered after the work that write waits for, as StreamWaitEvent after
    // an event recorded where the write was queued.
    streams.Wait(stream.handle, w.clock, w.done_ns);
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      common::CounterCall(kPrefix, "WaitCounter", handle, index, value),
      absl::StrFormat(" on stream %#x: the counter holds %d and no write of a "
                      "value >= %d to it is queued; on a device the stream "
                      "would wait forever",
                      stream.handle, now, value)));
}

void Counters::Land(Streams& streams) {
  if (pending_.empty()) return;
  // Each stream's writes land as a prefix of its queue.
  std::vector<std::uint64_t> due;
  for (auto s = by_stream_.begin(); s != by_stream_.end();) {
    std::deque<std::uint64_t>& q = s->second;
    while (!q.empty() && streams.Completed(pending_.at(q.front()).clock)) {
      due.push_back(q.front());
      q.pop_front();
    }
    if (q.empty()) {
      by_stream_.erase(s++);
    } else {
      ++s;
    }
  }
  if (due.empty()) return;
  // The order they land in: queue order, or on the modeled clock the order
  // of their ends (ties in queue order).
  std::sort(due.begin(), due.end());
  if (modeled_clock_) {
    std::stable_sort(due.begin(), due.end(),
                     [&](std::uint64_t a, std::uint64_t b) {
                       return pending_.at(a).done_ns < pending_.at(b).done_ns;
                     });
  }
  for (const std::uint64_t id : due) {
    auto it = pending_.find(id);
    const PendingWrite& w = it->second;
    Store(blocks_.at(w.handle).values[w.index], w.value);
    pending_.erase(it);
  }
}

}  // namespace gpualloc::sim
