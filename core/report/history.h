// SPDX-License-Identifier: Apache-2.0
// core/report/history.h: the allocation history (Options::history): a ring
// buffer of allocator events, and the per-thread context (SetThreadContext)
// stored with each event. The ring grows as it first fills, by chunks of
// kChunkEntries events (160 KiB), up to its capacity, so that a large
// capacity costs memory only once that many events were recorded (16777216
// events take 640 MiB when full).
//
// Recording an event costs a clock read, a thread-local read and one store
// of 40 bytes, no lock of its own (the facade's lock is held), and one
// allocation of a chunk every kChunkEntries events until the ring is full.
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

  static constexpr std::uint64_t kChunkEntries = 4096;

  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t recorded() const { return recorded_; }
  std::uint64_t dropped() const {
    return recorded_ > capacity_ ? recorded_ - capacity_ : 0;
  }
  // Host memory the ring holds now.
  std::uint64_t bytes_held() const;

 private:
  struct Entry {
    std::uint64_t address;
    std::uint64_t size;
    std::uint64_t time_ns;
    std::uintptr_t stream;
    std::uint32_t context;
    HistoryAction action;
  };
  Entry& At(std::uint64_t i) const {
    return chunks_[i / kChunkEntries][i % kChunkEntries];
  }
  const std::uint64_t capacity_;
  // Entry i is in chunks_[i / kChunkEntries]; the last chunk may be short.
  std::vector<std::unique_ptr<Entry[]>> chunks_;
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
