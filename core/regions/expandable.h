// SPDX-License-Identifier: Apache-2.0
// core/regions/expandable.h: expandable regions: one reserved address range,
// grown by mapping physical granules into it.
//
// Growth by separate physical regions fragments memory: the free end of one
// region never merges with the start of the next. With virtual memory the
// allocator reserves one address range of at least the device's size once and
// maps granules where it must grow, so new memory joins the free chunk next to
// it and every free byte stays mergeable; free granules can be unmapped again
// (Trim, garbage collection, before growth), which leaves holes that later
// growth fills first when that maps less.
//
// The BFC core sees each mapped extent as one region (BfcCore::JoinRegions and
// CarveFree keep it so): regions are exactly the maximal mapped runs.
//
// Two parts:
//   PlanGrowth: pure arithmetic (where to map, how much), unit tested alone.
//   ExpandableSpace: the reservation and its mappings, and the backend calls
//     (ReserveAddress, CreatePhysical, Map, SetAccess, Unmap,
//     ReleasePhysical, FreeAddress). Each mapping is one physical handle
//     (ExpandableRegions maps one per growth, of the growth's size, and at
//     most 64 when preallocating), kept until the mapping goes and released
//     right after it, as PyTorch does: CUDA allows releasing a mapped handle,
//     but some ROCm releases mishandle it.
//
// Under pressure a growth unmaps free mappings elsewhere with their handles
// kept as spares (Unmap with keep_handles) and maps those same handles where
// it grows (Map takes a spare before it creates a handle): physical memory
// moves with an unmap and a map, without a release and a create. Spares
// live only inside one growth: what it does not map is released at its end
// (ReleaseSpares).
//
// Memory the device refuses to take back is never forgotten: a handle whose
// release fails, or a mapping whose unmap fails where no region may keep it
// (taking back a failed Map), is kept as "refused" (pending_bytes(): the
// device still holds it, so it counts as reserved and against the limit),
// its address range closed to growth while still mapped, and given back by
// RetryPending (Trim, growth, destruction).
//
// Thread safety: none; the allocator facade's lock guards it.
#ifndef GPUALLOC_CORE_EXPANDABLE_H_
#define GPUALLOC_CORE_EXPANDABLE_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "core/layer.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

// A mapped extent as the planner sees it.
struct Extent {
  DeviceAddress base = 0;
  std::uint64_t size = 0;
  std::uint64_t free_head = 0;  // free bytes at its start
  std::uint64_t free_tail = 0;  // free bytes at its end
};

struct GrowthPlan {
  DeviceAddress address = 0;  // where to map
  std::uint64_t bytes = 0;    // how much: a multiple of the unit
  // Unmapped bytes right after [address, address + bytes) that a larger
  // mapping may take (0 where the plan reaches the free start of the extent
  // after it, which a larger mapping would cut off).
  std::uint64_t room_after = 0;
};

// The smallest mapping inside [space_base, space_base + space_size) after
// which a free chunk of at least `needed` bytes exists, counting the free ends
// of the extents it touches; ties go to the lowest address. nullopt when no
// hole or the space after the last extent is large enough.
// REQUIRES: extents sorted, disjoint, inside the space, with unit-aligned
// bounds relative to space_base; unit > 0; needed > 0.
std::optional<GrowthPlan> PlanGrowth(const std::vector<Extent>& extents,
                                     DeviceAddress space_base,
                                     std::uint64_t space_size,
                                     std::uint64_t needed, std::uint64_t unit);

class ExpandableSpace {
 public:
  // `unit`: the granule mapped at a time (a multiple of the device's minimum
  // granularity). Reserves nothing yet.
  ExpandableSpace(Backend* backend, std::uint64_t unit)
      : backend_(*backend), unit_(unit) {}
  // Unmaps everything still mapped, releases every handle (what the device
  // refused before included, each refused call tried once more) and frees
  // the reservation; errors are ignored (the allocator is going away).
  ~ExpandableSpace();

  ExpandableSpace(const ExpandableSpace&) = delete;
  ExpandableSpace& operator=(const ExpandableSpace&) = delete;

  // Reserves `bytes` (rounded up to the unit) once, aligned to the largest
  // power of two dividing the unit (the unit itself need not be one).
  absl::Status Reserve(std::uint64_t bytes);
  bool reserved() const { return size_ != 0; }
  DeviceAddress base() const { return base_; }
  std::uint64_t size() const { return size_; }
  std::uint64_t unit() const { return unit_; }

  // Maps [address, address + bytes) as handles of `handle_bytes` each (a
  // multiple of the unit dividing `bytes`) and makes it accessible. Spare
  // handles go first, each where it fits (one of `handle_bytes` exactly,
  // else the largest that fits what is left), and are used up. On error
  // no mapping of this call is left in the table and the error names the
  // step; what the device refused to take back is kept as refused.
  absl::Status Map(DeviceAddress address, std::uint64_t bytes,
                   std::uint64_t handle_bytes);
  // Unmaps every mapping inside [address, address + bytes), one call each,
  // and releases its handle. A failed unmap stops there: the mappings before
  // it are gone (reported through *unmapped, in bytes) and the rest stay. A
  // failed release after a successful unmap counts the mapping as gone, its
  // handle kept as refused (the error says so), and goes on. A mapping
  // asleep (Sleep) has nothing behind it unless a failed call left its
  // handle.
  // With `keep_handles`, an awake mapping's handle is kept as a spare
  // instead of released.
  absl::Status Unmap(DeviceAddress address, std::uint64_t bytes,
                     std::uint64_t* unmapped, bool keep_handles = false);
  // Releases every spare handle; one the device refuses is kept as refused
  // (RetryPending). The first error.
  absl::Status ReleaseSpares();
  // Bytes of the spare handles (unmapped, not released).
  std::uint64_t spare_bytes() const { return spare_bytes_; }
  // Gives back what the device refused before (unmap, then release), each
  // once more; what it refuses again stays. The first error, or OK when
  // nothing is left.
  absl::Status RetryPending();
  // Bytes the device holds outside the mapping table's awake mappings:
  // refused memory, handles kept by mappings asleep, and spares. Reserved
  // from the device, so counted as reserved and against the limit.
  std::uint64_t pending_bytes() const {
    return refused_bytes_ + asleep_held_bytes_ + spare_bytes_;
  }
  // The refused memory still mapped, as [address, address + bytes) in
  // address order: no region holds it, and no growth may map there.
  std::vector<std::pair<DeviceAddress, std::uint64_t>> RefusedMappedRanges()
      const;
  // The runs of whole mappings inside [address, address + bytes), merged
  // where adjacent (unless not `merged`), in address order.
  std::vector<std::pair<DeviceAddress, std::uint64_t>> MappedRunsWithin(
      DeviceAddress address, std::uint64_t bytes, bool merged = true) const;

  // Every whole mapping that [address, address + bytes) overlaps, as
  // (start, size), in address order (Allocator::Export: the mappings that
  // hold a block, which may start before it and end after it).
  std::vector<std::pair<DeviceAddress, std::uint64_t>> MappingsOverlapping(
      DeviceAddress address, std::uint64_t bytes) const {
    std::vector<std::pair<DeviceAddress, std::uint64_t>> found;
    auto it = mappings_.upper_bound(address);
    if (it != mappings_.begin()) --it;
    for (; it != mappings_.end() && it->first < address + bytes; ++it) {
      if (it->first + it->second.bytes > address) {
        found.emplace_back(it->first, it->second.bytes);
      }
    }
    return found;
  }

  // Sleep and wake (Allocator::Sleep): the mappings inside [address,
  // address + bytes) give their physical memory back but stay in the
  // mapping table without a handle ("asleep"), so that the address range
  // stays theirs and everything that walks the mappings sees them as before;
  // Wake maps a fresh handle of the same size at each again and makes it
  // accessible. Both act mapping by mapping and stop at the first error,
  // *done then telling how many bytes changed state. A handle whose release
  // fails after its unmap is mapped back (the error says so); if that fails
  // too, the mapping is asleep with its handle kept (and still mapped, if
  // only the access was refused), which Wake maps again or makes accessible
  // (never lost). A Wake that fails after its Map takes the mapping back;
  // what the device refuses there stays the mapping's, for the next Wake.
  // REQUIRES: the range holds whole mappings only, all awake (Sleep) or all
  // asleep (Wake).
  absl::Status Sleep(DeviceAddress address, std::uint64_t bytes,
                     std::uint64_t* done);
  absl::Status Wake(DeviceAddress address, std::uint64_t bytes,
                    std::uint64_t* done);
  // Bytes of the mappings inside [address, address + bytes) that are asleep.
  std::uint64_t SleepingWithin(DeviceAddress address,
                               std::uint64_t bytes) const;

  // Bytes of every mapping, awake or asleep.
  std::uint64_t mapped_bytes() const { return mapped_bytes_; }
  // Of them, bytes asleep (no physical memory behind them).
  std::uint64_t sleeping_bytes() const { return sleeping_bytes_; }
  // Whether a mapping starts / ends exactly at `address` (O(log mappings)).
  bool MappingStartsAt(DeviceAddress address) const {
    return mappings_.contains(address);
  }
  bool MappingEndsAt(DeviceAddress address) const {
    auto it = mappings_.lower_bound(address);
    if (it == mappings_.begin()) return false;
    --it;
    return it->first + it->second.bytes == address;
  }
  std::uint64_t maps() const { return maps_; }
  std::uint64_t unmaps() const { return unmaps_; }

 private:
  struct Mapping {
    std::uint64_t bytes = 0;
    // Awake: the handle mapped here. Asleep: 0, or a handle a failed call
    // left (asleep_held_bytes_).
    PhysicalHandle handle = 0;
    bool asleep = false;
    // Asleep with its handle still mapped, without access.
    bool mapped = false;
  };
  // Memory the device refused to take back, in no mapping of the table.
  struct Refused {
    DeviceAddress address = 0;
    std::uint64_t bytes = 0;
    PhysicalHandle handle = 0;  // 0: released, only the mapping is left
    bool mapped = false;        // still mapped at `address`
  };
  // Maps `reuse` (a spare of `bytes`), or else one new handle of `bytes`, at
  // `address` (create, map).
  absl::Status MapOne(DeviceAddress address, std::uint64_t bytes,
                      PhysicalHandle reuse = 0);
  // Takes the spare to map next when `want` bytes are due and `room` are
  // left: one of `want` bytes, else the largest of at most `room` (a handle
  // of 0 bytes when none fits).
  std::pair<PhysicalHandle, std::uint64_t> TakeSpare(std::uint64_t want,
                                                     std::uint64_t room);
  // Unmaps [at, at + bytes) when `mapped`, then releases `handle` (if any):
  // memory no mapping of the table holds. What the device refuses is kept
  // as refused; the error names the step.
  absl::Status GiveBack(DeviceAddress at, std::uint64_t bytes,
                        PhysicalHandle handle, bool mapped);
  // Takes every mapping inside [address, address + bytes) out of the table
  // and gives it back (a failed Map's rollback).
  absl::Status TakeBack(DeviceAddress address, std::uint64_t bytes);

  Backend& backend_;
  const std::uint64_t unit_;
  DeviceAddress base_ = 0;
  std::uint64_t size_ = 0;
  absl::btree_map<DeviceAddress, Mapping> mappings_;  // by start
  std::uint64_t mapped_bytes_ = 0;
  std::uint64_t sleeping_bytes_ = 0;
  // Of them, the bytes whose mapping still holds a handle.
  std::uint64_t asleep_held_bytes_ = 0;
  std::vector<Refused> refused_;
  std::uint64_t refused_bytes_ = 0;
  struct Spare {
    PhysicalHandle handle = 0;
    std::uint64_t bytes = 0;
    DeviceAddress unmapped_at = 0;  // where it was mapped (for errors)
  };
  std::vector<Spare> spares_;
  std::uint64_t spare_bytes_ = 0;
  std::uint64_t maps_ = 0;
  std::uint64_t unmaps_ = 0;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_EXPANDABLE_H_
