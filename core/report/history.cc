// SPDX-License-Identifier: Apache-2.0
// core/report/history.cc: the allocation history's ring buffer and the interned
// per-thread contexts.
#include "core/report/history.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace gpualloc {
namespace {

thread_local std::uint32_t current_context = 0;

// Every distinct context ever set, for the life of the process (never
// destroyed: a thread may set one during exit). Read and written with `mu`
// held.
struct ContextTable {
  std::mutex mu;
  // Id i + 1 is texts[i]; a deque keeps the keys' storage in place.
  std::deque<std::string> texts;
  absl::flat_hash_map<absl::string_view, std::uint32_t> ids;
};

ContextTable& Contexts() {
  static ContextTable* table = new ContextTable();
  return *table;
}

}  // namespace

void SetThreadContext(absl::string_view context) {
  if (context.empty()) {
    current_context = 0;
    return;
  }
  ContextTable& t = Contexts();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(context);
  if (it == t.ids.end()) {
    t.texts.emplace_back(context);
    const auto id = static_cast<std::uint32_t>(t.texts.size());
    it = t.ids.emplace(t.texts.back(), id).first;
  }
  current_context = it->second;
}

absl::string_view HistoryActionName(HistoryAction action) {
  switch (action) {
    case HistoryAction::kAlloc:
      return "alloc";
    case HistoryAction::kFreeRequested:
      return "free_requested";
    case HistoryAction::kFreeCompleted:
      return "free_completed";
    case HistoryAction::kSegmentAlloc:
      return "segment_alloc";
    case HistoryAction::kSegmentFree:
      return "segment_free";
    case HistoryAction::kSegmentMap:
      return "segment_map";
    case HistoryAction::kSegmentUnmap:
      return "segment_unmap";
    case HistoryAction::kOom:
      return "oom";
  }
  return "invalid";
}

namespace core {

std::uint32_t CurrentContextId() { return current_context; }

std::string ContextString(std::uint32_t id) {
  if (id == 0) return "";
  ContextTable& t = Contexts();
  std::lock_guard<std::mutex> lock(t.mu);
  return id <= t.texts.size() ? t.texts[id - 1] : std::string();
}

History::History(std::uint64_t capacity) : capacity_(capacity) {}

std::uint64_t History::bytes_held() const {
  std::uint64_t entries = 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    entries += std::min(kChunkEntries, capacity_ - c * kChunkEntries);
  }
  return entries * sizeof(Entry);
}

std::uint64_t History::NowNs() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
}

void History::Record(HistoryAction action, std::uint64_t address,
                     std::uint64_t size, std::uintptr_t stream,
                     std::uint64_t time_ns) {
  if (next_ % kChunkEntries == 0 && next_ / kChunkEntries == chunks_.size()) {
    // The ring's first pass reaches a chunk not made yet.
    chunks_.push_back(
        std::make_unique<Entry[]>(std::min(kChunkEntries, capacity_ - next_)));
  }
  Entry& e = At(next_);
  e.address = address;
  e.size = size;
  e.time_ns = time_ns;
  e.stream = stream;
  e.context = current_context;
  e.action = action;
  if (++next_ == capacity_) next_ = 0;
  ++recorded_;
}

void History::AppendTo(Snapshot* s) const {
  const std::uint64_t kept = recorded_ - dropped();
  // The oldest kept entry: index 0 until the ring has wrapped, then next_.
  std::uint64_t i = recorded_ > capacity_ ? next_ : 0;
  std::uint32_t last_id = 0;
  std::string last_text;
  s->history.reserve(s->history.size() + kept);
  for (std::uint64_t n = 0; n < kept; ++n) {
    const Entry& e = At(i);
    if (e.context != last_id) {  // runs of one context look it up once
      last_id = e.context;
      last_text = ContextString(e.context);
    }
    s->history.push_back(HistoryEvent{e.action, e.address, e.size, e.stream,
                                      e.time_ns, last_text});
    if (++i == capacity_) i = 0;
  }
  s->history_recorded = recorded_;
  s->history_dropped = dropped();
}

}  // namespace core
}  // namespace gpualloc
