// SPDX-License-Identifier: Apache-2.0
// core/regions/region_source.h: where the BFC allocator's regions come from.
//
// The facade (core/bfc/bfc_allocator.h) holds the lock, the BFC core, the
// stream order and the statistics, and asks a RegionSource for memory when no
// free chunk fits, and to give memory back (Trim, garbage collection). Two
// implementations, each in its own file:
//   SeparateRegions   (core/regions/separate_regions.cc): every region is one
//   backend
//     allocation (cuMemAlloc); growth adds regions of GrowthCandidates' sizes
//     and returns fully free ones.
//   ExpandableRegions (core/regions/expandable_regions.cc): one reserved
//   address range
//     with granules mapped where growth needs them (core/regions/expandable.h);
//     the core sees each maximal mapped run as one region.
// The facade chooses one at creation (ResolvedOptions::expandable) and never
// branches on which it has.
//
// Thread safety: none; every call is made under the facade's lock.
#ifndef GPUALLOC_CORE_REGION_SOURCE_H_
#define GPUALLOC_CORE_REGION_SOURCE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/bfc/bfc.h"
#include "core/config/options.h"
#include "core/layer.h"
#include "core/report/history.h"
#include "core/streams/stream_order.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

// What a source works on: the facade's members, borrowed for its lifetime.
struct RegionContext {
  const ResolvedOptions& resolved;
  Backend& backend;
  BfcCore& core;
  StreamOrder& stream_order;
  // The core's oracle: &stream_order when the backend has streams, else one
  // that knows all work complete (nothing is ever pending, nobody waits).
  const ReuseOracle& oracle;
  // A graph capture is underway: growth returns nothing to the device first
  // (no free, unmap or event call), since that could synchronize the device
  // or touch a capturing stream.
  const bool& capturing;
  // The allocation history (Options::history), null when off: regions made
  // and undone are recorded there.
  History* history = nullptr;
  bool streams() const { return stream_order.streams(); }
};

class RegionSource {
 public:
  virtual ~RegionSource() = default;

  // Preallocation: the whole limit, on the first Allocate.
  virtual absl::Status Preallocate() = 0;
  // Whether the source can add memory once preallocated (expandable regions
  // map into holes Trim left; a preallocated separate region is all there
  // is).
  virtual bool GrowsAfterPreallocation() const = 0;
  // Adds memory so that a free chunk of `needed` bytes usable on `stream`
  // exists. First (Options::trim_before_growth) it returns free memory that
  // could not serve this request and that no pending work uses, without
  // making the host wait. ResourceExhausted when the limit or the device
  // says no; other codes are driver errors.
  virtual absl::Status Grow(std::uint64_t needed, Stream stream) = 0;
  // Returns every free region or granule to the device, the host first
  // waiting for the work that may still use it (Trim, garbage collection).
  virtual absl::Status ReleaseFree() = 0;
  // Whether ReleaseFree would give anything back.
  virtual bool HasFreeToRelease() const = 0;
  // Invariant F1: the core's regions are exactly what the backend holds.
  // `full`: every mapping is walked (Validate()); otherwise only what is
  // cheap enough to check after every operation (debug_checks=2).
  virtual absl::Status Validate(bool full) const = 0;
  // --- Tagged memory and sleep (Allocator::Sleep); expandable regions only.
  // Whether the source can release the physical memory of a range while
  // keeping its addresses.
  virtual bool CanSleep() const { return false; }
  // Maps `bytes` (a multiple of the granule) as a mapping of its own in a
  // hole of the address range, added to the core's regions as growth is,
  // and returns where; the caller takes exactly that range out of free
  // memory (BfcCore::AllocateAt), so no other allocation shares its
  // granules. Where the limit would be passed, just enough free granules
  // that no pending work uses are unmapped first (no host wait; the smallest
  // free runs first). ResourceExhausted when that is not enough.
  virtual absl::StatusOr<DeviceAddress> MapExclusive(std::uint64_t bytes);
  // Releases the physical memory of the whole mappings in [address, address
  // + bytes), keeping the addresses; Wake maps fresh memory there. On error
  // *done bytes changed state. REQUIRES: CanSleep(); the range is in-use
  // chunks of whole mappings that MapExclusive made.
  virtual absl::Status Sleep(DeviceAddress address, std::uint64_t bytes,
                             std::uint64_t* done);
  virtual absl::Status Wake(DeviceAddress address, std::uint64_t bytes,
                            std::uint64_t* done);
  // Bytes asleep: counted in the core's regions, but with no physical memory
  // behind them (not reserved from the device).
  virtual std::uint64_t sleeping_bytes() const { return 0; }
  // Of them, the bytes inside [address, address + bytes).
  virtual std::uint64_t SleepingWithin(DeviceAddress, std::uint64_t) const {
    return 0;
  }

  // Bytes the device holds outside the regions' awake memory: what it
  // refused to take back (a failed unmap or release), kept and given back
  // later (ReleaseFree, Grow, destruction). Reserved from the device, so
  // counted in Stats::bytes_reserved and against the limit
  // (Stats::bytes_release_pending).
  virtual std::uint64_t pending_bytes() const { return 0; }

  // Sharing a block (Allocator::Export): what holds the in-use range
  // [address, address + bytes): separate regions, the backend allocation
  // (the region) holding it; expandable regions, every whole mapping it
  // overlaps, in address order. As (start, size) pairs.
  virtual std::vector<std::pair<DeviceAddress, std::uint64_t>> Holders(
      DeviceAddress address, std::uint64_t bytes) const = 0;

  // Regions or mappings made and undone (Stats::backend_allocs/frees).
  virtual std::uint64_t backend_allocs() const = 0;
  virtual std::uint64_t backend_frees() const = 0;
};

std::unique_ptr<RegionSource> MakeSeparateRegions(const RegionContext& context);
std::unique_ptr<RegionSource> MakeExpandableRegions(
    const RegionContext& context);

// Host-waits for the work queued on `streams` (which may still use free
// memory) before `doing` something that does not wait for it; the error
// names both. Shared by the facade and the sources.
absl::Status WaitForFreeMemory(StreamOrder& order,
                               const std::vector<std::uintptr_t>& streams,
                               absl::string_view doing);

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_REGION_SOURCE_H_
