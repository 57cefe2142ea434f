// SPDX-License-Identifier: Apache-2.0
// core/bfc/tagged_memory.h: the BFC facade's tagged memory and its Sleep / Wake
// (Allocator::Sleep). A tag's memory is a pool of its own (pools(), the tag
// as its id) whose slabs, with expandable regions, are mappings of their own
// (the facade's SlabSource for tags maps them, RegionSource::MapExclusive):
// sleeping unmaps exactly them and keeps their addresses. This component
// keeps the tags' pools, which tags are asleep with their host backups, and
// turns the tags' mappings asleep and awake through the RegionSource; the
// facade keeps the lock, the capture checks, the limit and the statistics
// (docs/DESIGN.md, "Sleep and wake").
//
// Invariants (Validate):
//   S1. A tag awake has none of its memory asleep, and the memory asleep is
//       exactly what the tags asleep hold.
//
// Thread safety: none; the facade's lock guards it.
#ifndef GPUALLOC_CORE_TAGGED_MEMORY_H_
#define GPUALLOC_CORE_TAGGED_MEMORY_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/bfc/bfc.h"
#include "core/bfc/private_pools.h"
#include "core/layer.h"
#include "core/regions/region_source.h"
#include "core/report/history.h"
#include "core/streams/stream_order.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::core {

class TaggedMemory {
 public:
  // `config`: the general core's; slabs are whole multiples of `granularity`
  // bytes. Backups copy through `backend`; `history` (null when off) records
  // the mappings given back and mapped again.
  TaggedMemory(const BfcConfig& config, std::uint64_t granularity,
               Backend& backend, History* history)
      : pools_(config, granularity, "tag"),
        backend_(backend),
        history_(history) {}

  TaggedMemory(const TaggedMemory&) = delete;
  TaggedMemory& operator=(const TaggedMemory&) = delete;

  // The tags' pools (the tag as the pool id).
  PrivatePools& pools() { return pools_; }
  const PrivatePools& pools() const { return pools_; }

  bool asleep(Tag tag) const { return asleep_.contains(tag); }
  bool any_asleep() const { return !asleep_.empty(); }

  // FailedPrecondition when `tag` is asleep (Allocate of `bytes` with it).
  absl::Status CheckAllocate(Tag tag, std::size_t bytes) const;
  // FailedPrecondition when the tagged chunk at `address` is asleep.
  absl::Status CheckAwake(DeviceAddress address, absl::string_view call) const;
  // Why `call` (Sleep or Wake) cannot run on `source` and the backend: tag 0,
  // no sleeping memory, a backup without host copies; or OK.
  absl::Status CheckSleepable(absl::string_view call, Tag tag, bool backup,
                              const RegionSource& source) const;
  // Bytes of the tag's memory asleep.
  std::uint64_t SleepingBytesOf(Tag tag, const RegionSource& source) const;

  // Sleep(tag): waits (with `order`, null when the facade may not ask) for
  // the work that uses the tag's memory, backs its live blocks up to the
  // host when asked, and gives its mappings back. REQUIRES: CheckSleepable
  // said OK.
  absl::StatusOr<SleepReport> Sleep(Tag tag, bool backup, StreamOrder* order,
                                    RegionSource& source);
  // Wake(tag): maps the tag's memory again and restores its backup.
  // REQUIRES: asleep(tag), and the limit has room for its memory.
  absl::Status Wake(Tag tag, RegionSource& source);

  // The free blocks of the tags awake go back to general memory through
  // `slabs` (a tag asleep keeps its memory). With `order` (null when the
  // facade may not ask), the host first waits for the work on them.
  void ReturnFree(StreamOrder* order, const ReuseOracle& known,
                  SlabSource& slabs);

  // S1.
  absl::Status Validate(const RegionSource& source) const;

 private:
  // A live block's content, copied to the host by Sleep with a backup.
  struct HostCopy {
    DeviceAddress address = 0;
    std::uint64_t bytes = 0;
    std::unique_ptr<unsigned char[]> data;
  };
  // The backups of a tag's live blocks (its memory asleep is found in the
  // mappings: SleepingBytesOf).
  using Backup = std::vector<HostCopy>;
  using Slabs = std::vector<std::pair<DeviceAddress, std::uint64_t>>;

  // Sleeps or wakes one slab (RegionSource::Sleep / Wake), recording what
  // changed in the history (segment_unmap / segment_map).
  absl::Status SleepOrWakeSlab(RegionSource& source, DeviceAddress base,
                               std::uint64_t size, bool sleep);
  // Sleep or wake `slabs` in order; on an error, the ones done are turned
  // back (*clean: whether that worked) and the error names `call`.
  absl::Status SleepSlabs(RegionSource& source, const Slabs& slabs, bool sleep,
                          absl::string_view call, bool* clean);
  // Counts the tag's live blocks into *report and, with `backup`, copies
  // them to the host into *copies.
  absl::Status CountAndBackUp(Tag tag, bool backup, absl::string_view call,
                              SleepReport* report, Backup* copies);

  PrivatePools pools_;
  Backend& backend_;
  History* const history_;
  absl::flat_hash_map<Tag, Backup> asleep_;
};

}  // namespace gpualloc::core

#endif  // GPUALLOC_CORE_TAGGED_MEMORY_H_
