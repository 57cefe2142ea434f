// SPDX-License-Identifier: Apache-2.0
// core/report/history.h: the allocation history (Options::history): a ring
// buffer of allocator events made once at creation, and the per-thread context
// (SetThreadContext) stored with each event.
//
// Recording an event costs a clock read, a thread-local read and one store
// of 40 bytes: no allocation, no lock of its own (the facade's lock is held).
// Contexts are interned when set (a process-wide table behind a mutex that
// only the setter and GetSnapshot take), so an event keeps a 32-bit id.
//
// Thread safety: History is not thread-safe (used under the facade's lock);
// SetThreadContext and ContextString are.
#ifndef GPUALLOC_CORE_HISTORY_H_
#define GPUALLOC_CORE_HISTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/layer.h"
#include "gpualloc/core/allocator.h"

namespace gpualloc::core {

// The calling thread's context id (0: none).
std::uint32_t CurrentContextId();
// The text of a context id ("" for 0 or an unknown id).
std::string ContextString(std::uint32_t id);

class History {
 public:
  // REQUIRES: 0 < capacity <= kMaxHistory.
  explicit History(std::uint64_t capacity);

  void Record(HistoryAction action, std::uint64_t address, std::uint64_t size,
              std::uintptr_t stream) {
    Record(action, address, size, stream, NowNs());
  }
  // The same at a time read earlier (NowNs): events of one call share it.
  void Record(HistoryAction action, std::uint64_t address, std::uint64_t size,
              std::uintptr_t stream, std::uint64_t time_ns);
  static std::uint64_t NowNs();

  // Appends the events kept, oldest first, to s->history and sets the
  // counts.
  void AppendTo(Snapshot* s) const;

  std::uint64_t capacity() const { return entries_.size(); }
  std::uint64_t recorded() const { return recorded_; }
  std::uint64_t dropped() const {
    return recorded_ > entries_.size() ? recorded_ - entries_.size() : 0;
  }

 private:
  struct Entry {
    std::uint64_t address;
    std::uint64_t size;
    std::uint64_t time_ns;
    std::uintptr_t stream;
    std::uint32_t context;
    HistoryAction action;
  };
  std::vector<Entry> entries_;
  std::uint64_t next_ = 0;  // index of the next entry written
  std::uint64_t recorded_ = 0;
};

// A Deallocate: free_requested then free_completed, both now (the chunk is
// free at once, its stream-order condition attached).
inline void RecordFree(History& h, std::uint64_t address, std::uint64_t size,
                       std::uintptr_t stream) {
  const std::uint64_t now = History::NowNs();
  h.Record(HistoryAction::kFreeRequested, address, size, stream, now);
  h.Record(HistoryAction::kFreeCompleted, address, size, stream, now);
}

// An out-of-memory answer to a request of `bytes`; the address is what the
// limit still allows to reserve (PyTorch's device_free).
inline void RecordOom(History& h, std::uint64_t bytes, const Stats& s) {
  h.Record(HistoryAction::kOom, s.bytes_limit - s.bytes_reserved, bytes, 0);
}

// The facade's history: null when `capacity` is 0 (off).
inline std::unique_ptr<History> MakeHistory(std::uint64_t capacity) {
  return capacity == 0 ? nullptr : std::make_unique<History>(capacity);
}

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_HISTORY_H_
