// SPDX-License-Identifier: Apache-2.0
// backends/sim/pool.h: the simulator's stream-ordered pool.
//
// The pool carves blocks out of segments taken like plain allocations (same
// placement, guards and host mappings), from the device's capacity. Each
// free block carries the condition of its free: the freeing stream, its clock
// at the free, and whether it merged frees of several streams; CUDA's three
// reuse rules are checked against that condition when a block is considered
// (gpualloc/backends/sim_backend.h has the contract).
//
// Not thread-safe: the backend holds its lock around every use.
#ifndef GPUALLOC_BACKENDS_SIM_POOL_H_
#define GPUALLOC_BACKENDS_SIM_POOL_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/layer.h"
#include "backends/sim/call_ledger.h"
#include "backends/sim/placement.h"
#include "backends/sim/streams.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// When memory freed into the pool may be handed to a stream.
struct FreeCondition {
  std::uintptr_t stream = 0;  // the stream the free was queued on
  bool mixed = false;         // merged from frees on different streams
  Event work;                 // the freeing stream's work at the free
};
struct PoolBlock {
  std::uint64_t size = 0;
  DeviceAddress segment = 0;  // start of the segment holding the block
  bool free = true;
  FreeCondition freed;  // meaningful when free
};

class Pool {
 public:
  // `device_free` answers the device's free bytes (plain allocations, this
  // pool and physical memory share the capacity).
  Pool(const DeviceInfo& info, Placement* placement, Streams* streams,
       CallLedger* ledger, std::function<std::uint64_t()> device_free)
      : info_(info),
        placement_(placement),
        streams_(streams),
        ledger_(ledger),
        device_free_(std::move(device_free)) {}
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Takes effect at the next synchronization point, not at once (like
  // setting cudaMemPoolAttrReleaseThreshold).
  void Configure(const PoolOptions& options) { options_ = options; }
  absl::StatusOr<DeviceAddress> Allocate(std::uint64_t bytes, Stream stream);
  absl::Status Free(DeviceAddress address, Stream stream);
  // Returns fully free segments whose frees have completed to the device,
  // newest address first, until the pool holds at most `keep` bytes and the
  // device has `want_free` bytes free.
  void ReleaseSegments(std::uint64_t keep, std::uint64_t want_free);
  // What a synchronization point does: applies the release threshold.
  void ReleaseAboveThreshold();

  const PoolUsage& usage() const { return usage_; }
  // Stream waits the pool inserted (cudaMemPoolReuseAllowInternalDependencies:
  // a block handed to a stream only after making it wait for the free),
  // since creation or the last ResetStreamWaits.
  std::uint64_t stream_waits() const { return stream_waits_; }
  void ResetStreamWaits() { stream_waits_ = 0; }
  // Whether all of [start, end) lies in one live segment.
  bool Holds(DeviceAddress start, DeviceAddress end) const;

 private:
  enum class Reuse { kNo, kNow, kAfterWait };
  Reuse CanReuse(const FreeCondition& freed, std::uintptr_t stream,
                 const StreamState& s);
  FreeCondition MergeConditions(const FreeCondition& a, const FreeCondition& b);
  void NoteUse(std::uint64_t more_used);
  std::uint64_t LargestFreeBlock() const;
  absl::StatusOr<DeviceAddress> Grow(std::uint64_t size);
  bool Releasable(DeviceAddress start, const Allocation& segment);
  std::uint64_t ReleasableBytes();
  absl::Status OutOfMemory(std::uint64_t bytes, Stream stream,
                           std::uint64_t segment) const;

  const DeviceInfo& info_;
  Placement* const placement_;
  Streams* const streams_;
  CallLedger* const ledger_;
  const std::function<std::uint64_t()> device_free_;
  PoolOptions options_;
  PoolUsage usage_;
  std::uint64_t stream_waits_ = 0;
  absl::btree_map<DeviceAddress, Allocation> segments_;
  absl::btree_map<DeviceAddress, PoolBlock> blocks_;
  // Free blocks by (size, address): best fit, lowest address first.
  absl::btree_set<std::pair<std::uint64_t, DeviceAddress>> free_;
  // Addresses Allocate handed out that were freed and not handed out again:
  // a second Free of one is a double free (FailedPrecondition), not an
  // unknown address.
  absl::btree_set<DeviceAddress> freed_starts_;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_POOL_H_
