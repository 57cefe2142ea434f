// SPDX-License-Identifier: Apache-2.0
// core/bfc/private_pools.h: private memory pools for graph capture
// (docs/DESIGN.md, "Private pools and graph capture").
//
// A private pool is a BfcCore of its own whose regions are blocks ("slabs")
// the pool took from the allocator's general memory: each slab is one in-use
// chunk of the general core, allocated on the pool's key (a stream handle no
// stream has, so the general core treats the slab like any allocation and
// never hands its bytes to anyone else). The pool carves its slabs with best
// fit and coalescing exactly like the general core; a new slab next to one
// the pool holds joins its region, so free memory of neighbouring slabs
// merges. Memory freed from a pool stays in the pool. When the pool's last
// reference is dropped, each region of the pool that is entirely free goes
// back, slab by slab, as a stream-ordered free on every stream that used the
// pool's memory; regions still holding live blocks follow when their last
// block is freed.
//
// The facade (core/bfc/bfc_allocator.h) holds the lock, routes allocations of
// streams that allocate to a pool here, and lends a SlabSource for growth.
//
// Invariants (Validate; G for graph pools):
//   G1. Every pool core is valid (I1-I9), and its regions are exactly its
//       slabs: every slab lies in one region, and the slabs' bytes sum to the
//       pool core's reserved bytes.
//   G2. Every slab is an in-use chunk of the general core, of the slab's
//       size, allocated on its pool's key; the slab index holds exactly the
//       live pools' slabs.
//
// Thread safety: none; the facade's lock guards it.
#ifndef GPUALLOC_CORE_PRIVATE_POOLS_H_
#define GPUALLOC_CORE_PRIVATE_POOLS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/bfc/bfc.h"
#include "core/layer.h"
#include "core/streams/oracle.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

// The calling thread's capture mode set to relaxed for the scope's device
// calls, while a graph capture is underway (PyTorch does the same around
// cudaMalloc); the previous mode comes back at the end.
class RelaxedCapture {
 public:
  RelaxedCapture(Backend& backend, bool capturing);
  ~RelaxedCapture() {
    if (active_) (void)backend_.ExchangeCaptureMode(previous_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  Backend& backend_;
  bool active_ = false;
  CaptureMode previous_ = CaptureMode::kGlobal;
  absl::Status status_;
};

// For a scope in which no stream allocating to a pool captures (the facade's
// CaptureNow() said no): `capturing` is false for the scope, so that the slow
// paths may wait and return memory as usual.
class CaptureOff {
 public:
  explicit CaptureOff(bool& capturing)
      : capturing_(capturing), saved_(std::exchange(capturing, false)) {}
  ~CaptureOff() { capturing_ = saved_; }
  CaptureOff(const CaptureOff&) = delete;
  CaptureOff& operator=(const CaptureOff&) = delete;

 private:
  bool& capturing_;
  const bool saved_;
};

// Where pools get their memory: the facade's general allocator.
class SlabSource {
 public:
  virtual ~SlabSource() = default;
  // A block of at least `*bytes` (a multiple of the minimum block size) of
  // general memory that every stream may use at once, held under `key`;
  // `*bytes` becomes its size (a split bound may leave a surplus with it).
  // The facade grows its memory when needed. ResourceExhausted (the
  // out-of-memory report) when it cannot.
  virtual absl::StatusOr<DeviceAddress> TakeSlab(std::uint64_t* bytes,
                                                 std::uintptr_t key) = 0;
  // Whether general memory is contiguous from `a` to `b` (one region of the
  // general core): only such neighbouring blocks may join.
  virtual bool Contiguous(DeviceAddress a, DeviceAddress b) const = 0;
  // Gives the block at `base` back to general memory, reusable once the
  // work queued so far on each of `streams` has completed.
  virtual void ReturnSlab(DeviceAddress base,
                          absl::Span<const std::uintptr_t> streams) = 0;
};

class PrivatePools {
 public:
  // `config`: the general core's (pool cores carve the same way). Slabs are
  // multiples of `slab_unit` bytes.
  // `kind` names a pool in messages ("private pool", "tag").
  PrivatePools(const BfcConfig& config, std::uint64_t slab_unit,
               absl::string_view kind = "private pool")
      : config_(config), slab_unit_(slab_unit), kind_(kind) {}

  // A new pool allocating slabs on `key`; its id is `id` when given (not in
  // use), else the next free number.
  PoolId Create(std::uintptr_t key, PoolId id = 0);
  bool Has(PoolId id) const { return pools_.contains(id); }
  absl::Status Retain(PoolId id);
  // Drops a reference; at the last one the pool's memory goes back as its
  // regions become free. `last_use` joins the streams that used it.
  absl::Status Release(PoolId id, std::uintptr_t last_use, SlabSource& slabs);
  absl::Status Begin(PoolId id, std::uintptr_t stream);
  absl::Status End(PoolId id);
  // Whether any stream allocates to a pool now.
  bool routed() const { return !routes_.empty(); }
  // The streams allocating to a pool now.
  std::vector<std::uintptr_t> RoutedStreams() const;
  // The pool `stream` allocates to, or none.
  std::optional<PoolId> RoutedPool(std::uintptr_t stream) const {
    if (routes_.empty()) return std::nullopt;
    auto it = routes_.find(stream);
    if (it == routes_.end()) return std::nullopt;
    return it->second.pool;
  }
  bool IsRouted(std::uintptr_t stream) const {
    return routes_.contains(stream);
  }

  // Best fit in pool `id` for the request (BfcCore::Allocate's contract),
  // growing the pool by a slab when nothing fits.
  absl::StatusOr<DeviceAddress> Allocate(PoolId id, std::uint64_t size,
                                         std::uint64_t requested,
                                         std::uint64_t alignment,
                                         std::uintptr_t stream,
                                         ReuseOracle* oracle,
                                         SlabSource& slabs);
  // The pool whose slab holds `address`, or 0.
  PoolId PoolOf(DeviceAddress address) const {
    const Slab* slab = SlabAt(address);
    return slab == nullptr ? 0 : slab->pool;
  }
  // Pool `id`'s slabs as [base, base + bytes), in address order, and the
  // streams whose work used its memory. REQUIRES: Has(id).
  std::vector<std::pair<DeviceAddress, std::uint64_t>> Slabs(PoolId id) const;
  const std::vector<std::uintptr_t>& Users(PoolId id) const {
    return pools_.at(id).users;
  }
  // Pool `id`'s chunks in use as [address, address + size), in address
  // order. REQUIRES: Has(id).
  std::vector<std::pair<DeviceAddress, std::uint64_t>> ChunksInUse(
      PoolId id) const;
  // Gives every slab of pool `id` that lies in one free chunk back to
  // general memory, fenced by every stream that used the pool (Trim, garbage
  // collection). `known` first drops the conditions of free pieces it knows
  // complete, so that they merge (the caller waited for the work of
  // PendingStreams). The pool stays, even empty. REQUIRES: Has(id).
  void ReturnFreeSlabs(PoolId id, SlabSource& slabs, const ReuseOracle& known);
  // The ids of the pools, in no order.
  std::vector<PoolId> Ids() const;
  // The streams whose work may still use pool `id`'s free memory.
  std::vector<std::uintptr_t> PendingStreams(PoolId id,
                                             const ReuseOracle& known) const {
    return pools_.at(id).core->PendingStreams(known, UINTPTR_MAX);
  }
  // Whether `address` lies in a slab some pool holds.
  bool Owns(DeviceAddress address) const { return SlabAt(address) != nullptr; }
  // BfcCore::Deallocate / RecordStream on the pool holding `address`.
  // REQUIRES: Owns(address).
  absl::Status Deallocate(DeviceAddress address, std::uintptr_t stream,
                          std::uint64_t stamp, const ReuseOracle* oracle,
                          SlabSource& slabs);
  absl::Status RecordStream(DeviceAddress address, std::uintptr_t stream);
  // Allocator::ReleaseStream: chunks and users naming `stream` name `key`.
  void RenameStream(std::uintptr_t stream, std::uintptr_t key);
  // How many chunks of every pool name `stream`.
  std::uint64_t StreamReferences(std::uintptr_t stream) const;

  // Totals over the live pools, and what pools ever did.
  std::uint64_t bytes_reserved() const { return slab_bytes_; }
  // What the general core counts as requested for the slabs.
  std::uint64_t slabs_requested() const { return slab_requested_; }
  std::uint64_t bytes_in_use() const;
  std::uint64_t bytes_requested() const;
  // Allocations pools served, ever (released pools included).
  std::uint64_t num_allocs() const;
  // Size of the pool chunk in use at `address`, or 0.
  std::uint64_t AllocatedSize(DeviceAddress address) const {
    const Slab* slab = SlabAt(address);
    return slab == nullptr ? 0
                           : pools_.at(slab->pool).core->AllocatedSize(address);
  }
  std::size_t num_slabs() const { return slabs_.size(); }
  std::uint64_t num_chunks_in_use() const;
  // Slabs ever taken from the general core (allocations that are not a
  // caller's).
  std::uint64_t slabs_taken() const { return slabs_taken_; }
  // The pool a general-core chunk at `address` is a slab of, or 0.
  PoolId SlabOwner(DeviceAddress address) const;

  absl::Status Validate(const BfcCore& general) const;
  void AppendSnapshot(std::vector<PoolSnapshot>* pools) const;

 private:
  struct Pool {
    PoolId id = 0;
    std::uintptr_t key = 0;
    std::unique_ptr<BfcCore> core;
    std::uint32_t references = 1;
    std::uint32_t routed = 0;
    std::uint64_t slab_bytes = 0;
    // Streams whose work used the pool's memory (allocated, freed, recorded
    // or launched on).
    std::vector<std::uintptr_t> users;
  };
  struct Slab {
    std::uint64_t bytes = 0;
    std::uint64_t requested = 0;  // what was asked of the general core
    PoolId pool = 0;
  };
  struct Route {
    PoolId pool = 0;
  };

  absl::StatusOr<Pool*> Find(PoolId id, absl::string_view call);
  const Slab* SlabAt(DeviceAddress address) const;
  Pool& PoolAt(DeviceAddress address);
  static void AddUser(Pool& pool, std::uintptr_t stream);
  // Adds the slab [base, base + bytes) to the pool's core, joined to the
  // pool's regions that touch it.
  void AddSlab(Pool& pool, DeviceAddress base, std::uint64_t bytes,
               const ReuseOracle* oracle, const SlabSource& slabs);
  // A released pool: returns every region that holds no live block (its
  // free pieces' stream conditions dropped first: every stream that used
  // the pool fences the returned blocks); forgets the pool once nothing is
  // left.
  void ReturnFree(Pool& pool, SlabSource& slabs);

  const BfcConfig config_;
  const std::uint64_t slab_unit_;
  const absl::string_view kind_;
  PoolId next_id_ = 1;
  absl::flat_hash_map<PoolId, Pool> pools_;
  absl::flat_hash_map<std::uintptr_t, Route> routes_;
  absl::btree_map<DeviceAddress, Slab> slabs_;  // base -> slab
  std::uint64_t slab_bytes_ = 0;
  std::uint64_t slab_requested_ = 0;
  std::uint64_t slabs_taken_ = 0;
  // Allocations of pools already forgotten.
  std::uint64_t forgotten_allocs_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_PRIVATE_POOLS_H_
