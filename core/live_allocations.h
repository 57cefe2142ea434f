// SPDX-License-Identifier: Apache-2.0
// core/live_allocations.h: bookkeeping shared by the allocator modes that hand
// every request to the device (platform: one backend allocation each; async:
// one pool allocation each): the live allocations, their statistics, the
// diagnosis of bad frees, snapshot and the invariants over them.
//
// Each allocation is a block the device handed out at `base` of `held` bytes;
// the caller got `address`, the first `align`-aligned address inside it, and
// may use `size` bytes (the request rounded to the minimum block size). `held`
// exceeds `size` only when the requested alignment is stricter than what the
// device guarantees (the allocation is padded so that an aligned address fits)
// or when the device accounts whole alignment units (ROCr rounds to 4 KiB).
//
// Invariants (Validate() checks each and names the broken one):
//   L1. Every entry is keyed by its own address, lies inside its device block
//       (base <= address, address + size <= base + held), is a multiple of the
//       minimum block size, and has 0 < size and requested <= size.
//   L2. The counters equal the sums they summarize (bytes in use, requested,
//       held) and each peak is at least its current value.
//   L3. No address is both live and in the history of freed addresses.
//
// Thread safety: none; the allocator's lock guards it.
#ifndef GPUALLOC_CORE_LIVE_ALLOCATIONS_H_
#define GPUALLOC_CORE_LIVE_ALLOCATIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/layer.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

// An allocator destroyed while `count` allocations of `bytes` (as requested)
// are live says so, in one line on stderr: their memory goes back to the
// device with the allocator, and any later use of those pointers is the
// caller's bug. Nothing when count is 0.
void ReportLiveAtDestruction(absl::string_view mode, const DeviceInfo& device,
                             std::uint64_t count, std::uint64_t bytes);

struct LiveAllocation {
  DeviceAddress base = 0;       // what the device returned; freeing frees this
  std::uint64_t held = 0;       // bytes asked of the device for it
  std::uint64_t size = 0;       // the request rounded to the minimum block size
  std::uint64_t requested = 0;  // as asked
  std::uintptr_t stream = 0;    // the stream it was allocated on
};

struct LiveCounters {
  std::uint64_t num_allocs = 0;
  std::uint64_t bytes_in_use = 0;  // sum of sizes
  std::uint64_t peak_bytes_in_use = 0;
  std::uint64_t largest_alloc_size = 0;
  std::uint64_t bytes_requested = 0;
  std::uint64_t peak_bytes_requested = 0;
  std::uint64_t bytes_held = 0;  // sum of held
  std::uint64_t peak_bytes_held = 0;
};

// The Stats fields the counters give (in use, requested, their peaks, the
// largest allocation) and the limit; the caller fills in the rest.
Stats StatsFromCounters(const LiveCounters& k, std::uint64_t limit);

class LiveAllocations {
 public:
  // Freed addresses are remembered (the last `history` of them) so that a
  // second free of one is reported as a double free rather than as a pointer
  // never handed out.
  explicit LiveAllocations(std::uint64_t min_block_size,
                           std::size_t history = 4096);

  // The live allocation handed out at `address`, or null.
  const LiveAllocation* Find(DeviceAddress address) const {
    auto it = live_.find(address);
    return it == live_.end() ? nullptr : &it->second;
  }
  // REQUIRES: `address` is not live.
  void Insert(DeviceAddress address, const LiveAllocation& allocation);
  // REQUIRES: `address` is live. Returns what it was.
  LiveAllocation Remove(DeviceAddress address);

  // Why `address` is not a live allocation, for `operation` ("Deallocate",
  // "RecordStream"): an interior pointer or an unknown one (InvalidArgument),
  // or a recently freed one (FailedPrecondition: double free). Cold path: it
  // scans every live allocation.
  absl::Status DiagnoseUnknown(absl::string_view operation,
                               DeviceAddress address) const;

  const LiveCounters& counters() const { return counters_; }
  std::size_t size() const { return live_.size(); }
  void ResetPeaks();
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [address, allocation] : live_) f(address, allocation);
  }
  // The same, letting `f` change each allocation's stream.
  template <typename F>
  void ForEachStream(F&& f) {
    for (auto& [address, allocation] : live_) f(allocation.stream);
  }

  // One region per live allocation (its device block) holding one in-use
  // chunk, in address order.
  void AppendSnapshot(std::vector<RegionSnapshot>* regions) const;

  absl::Status Validate() const;

 private:
  struct Freed {
    DeviceAddress address = 0;
    std::uint64_t seq = 0;
  };

  const std::uint64_t min_block_size_;
  absl::flat_hash_map<DeviceAddress, LiveAllocation> live_;
  LiveCounters counters_;
  // The last freed addresses: a ring in free order, and an index from address
  // to the sequence number of its latest free (a ring slot evicts its address
  // only when that free is still the latest one).
  std::vector<Freed> ring_;
  absl::flat_hash_map<DeviceAddress, std::uint64_t> freed_;
  std::uint64_t free_seq_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_LIVE_ALLOCATIONS_H_
