// SPDX-License-Identifier: Apache-2.0
// backends/sim/counters.h: the simulator's completion counters
// (Backend::CreateCounters, DestroyCounters, WriteCounter, WaitCounter).
//
// A block is real host memory the simulator owns (in fake and host-backed
// mode alike), so that the caller reads the counters with plain acquire loads
// as it would on a device. A write is modeled like an event record: it
// captures the work queued on its stream so far (Streams::Capture: the
// stream's position and what it waits for) and lands, a release store into
// the block, once that work has completed under the clock in use (manual:
// CompleteStream, CompleteAll, a host wait; modeled: when the clock passes
// its end). Nothing calls the simulator when the host reads a counter, so the
// backend lands what is due after everything that can complete work (Land).
// Writes on one stream land in the order they were queued (each one's work
// covers the previous one's); writes due at the same moment on several
// streams land in queue order (manual clock) or in order of their ends
// (modeled clock).
//
// A wait is modeled like StreamWaitEvent: the waiting stream is ordered after
// the work the first queued write of a value >= the awaited one captured, so
// the hazard detector sees the dependency. A counter that holds such a value
// already needs no ordering. A wait that no queued write can satisfy is
// FailedPrecondition (on a device it would never end).
//
// Not thread-safe: the backend holds its lock around every use.
#ifndef GPUALLOC_BACKENDS_SIM_COUNTERS_H_
#define GPUALLOC_BACKENDS_SIM_COUNTERS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/layer.h"
#include "backends/sim/streams.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

class Counters {
 public:
  Counters(const DeviceInfo& info, bool modeled_clock)
      : info_(info), modeled_clock_(modeled_clock) {}

  // --- The calls' checks and effects (the backend counts them) ---
  absl::StatusOr<CounterBlock> Create(std::size_t count);
  // InvalidArgument for a handle Create did not return (or destroyed).
  absl::Status CheckBlock(CounterHandle handle) const;
  // Frees the block and forgets its queued writes (the caller synchronized
  // the device first, so they have landed). `bytes` is the block's size.
  absl::Status Destroy(CounterHandle handle, std::uint64_t* bytes);
  absl::Status Write(CounterHandle handle, std::size_t index,
                     std::uint64_t value, Stream stream, Streams& streams);
  absl::Status Wait(CounterHandle handle, std::size_t index,
                    std::uint64_t value, Stream stream, Streams& streams);

  // Lands every queued write whose work has completed.
  void Land(Streams& streams);

  std::uint64_t live_blocks() const { return blocks_.size(); }
  std::uint64_t pending_writes() const { return pending_.size(); }

 private:
  struct Block {
    std::unique_ptr<std::uint64_t[]> values;
    std::size_t count = 0;
  };
  struct PendingWrite {
    CounterHandle handle = 0;
    std::size_t index = 0;
    std::uint64_t value = 0;
    VectorClock clock;          // the work it waits for
    std::uint64_t done_ns = 0;  // modeled: when that work is done
  };

  // The block `call` names with `index` and `value` checked; InvalidArgument
  // otherwise.
  absl::StatusOr<Block*> Find(const char* call, CounterHandle handle,
                              std::size_t index, std::uint64_t value);
  static std::uint64_t Load(const std::uint64_t& slot);
  static void Store(std::uint64_t& slot, std::uint64_t value);

  const DeviceInfo& info_;
  const bool modeled_clock_;
  absl::flat_hash_map<CounterHandle, Block> blocks_;
  CounterHandle last_handle_ = 0;
  // Queued writes not landed yet, by queue order.
  absl::btree_map<std::uint64_t, PendingWrite> pending_;
  std::uint64_t next_write_ = 0;
  // Per writing stream, its pending writes (keys of pending_) in queue
  // order: they land as a prefix.
  absl::flat_hash_map<std::uintptr_t, std::deque<std::uint64_t>> by_stream_;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_COUNTERS_H_
