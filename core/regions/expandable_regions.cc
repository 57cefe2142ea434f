// SPDX-License-Identifier: Apache-2.0
// core/regions/expandable_regions.cc: growth by mapping granules into one
// reserved address range (core/regions/expandable.h), the core seeing each
// maximal mapped run as one region (core/regions/region_source.h).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/bfc/size_class.h"
#include "core/regions/expandable.h"
#include "core/regions/growth.h"
#include "core/regions/region_source.h"
#include "core/status_macros.h"

namespace gpualloc::core {
namespace {

class ExpandableRegions final : public RegionSource {
 public:
  explicit ExpandableRegions(const RegionContext& context)
      : c_(context), space_(&context.backend, context.resolved.granularity) {}

  // Live allocations die with the allocator; their memory still goes back to
  // the device: ~ExpandableSpace unmaps and frees the range, once the host
  // has waited for the work that may still use it, because unmapping does
  // not wait as cuMemFree does.
  ~ExpandableRegions() override {
    if (!c_.streams()) return;
    std::vector<Range> regions;
    for (DeviceAddress base : c_.core.RegionBases()) {
      regions.emplace_back(base, c_.core.region_size(*c_.core.RegionAt(base)));
    }
    const std::vector<std::uintptr_t> streams =
        StreamsUsing(regions, /*in_use_too=*/true);
    if (!streams.empty()) (void)c_.stream_order.WaitForAll(streams);
  }

  // The whole limit at once, in at most kMaxHandles handles of nearly equal
  // size (Trim can give back each whole handle later).
  // Memory the device refused to take back before (Trim) is given back
  // first; what it still holds is left out of the preallocation (the limit
  // counts it) and its mapped ranges are avoided.
  absl::Status Preallocate() override {
    GPUALLOC_RETURN_IF_ERROR(EnsureReserved());
    if (!c_.capturing) (void)space_.RetryPending();
    const std::uint64_t unit = space_.unit();
    const std::uint64_t held = std::min(Physical(), c_.resolved.limit);
    // (The limit is whole units, and so is what the device holds.)
    const std::uint64_t units = (c_.resolved.limit - held) / unit;
    if (units == 0) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the device still holds %d bytes it refused to take back, which "
          "fill the limit of %d bytes",
          held, c_.resolved.limit));
    }
    const std::uint64_t handles = std::min(kMaxHandles, units);
    // `longer` handles of q + 1 units, then the rest of q units.
    const std::uint64_t q = units / handles, longer = units % handles;
    DeviceAddress at = space_.base();
    if (held != 0) {
      const std::optional<GrowthPlan> plan =
          PlanGrowth(Extents(/*free_ends=*/false), space_.base(), space_.size(),
                     units * unit, unit);
      if (!plan.has_value()) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "no hole of the reserved range of %d bytes can take %d bytes",
            space_.size(), units * unit));
      }
      at = plan->address;
    }
    if (longer != 0) {
      GPUALLOC_RETURN_IF_ERROR(
          MapRegion(at, longer * (q + 1) * unit, (q + 1) * unit));
      at += longer * (q + 1) * unit;
    }
    return MapRegion(at, (handles - longer) * q * unit, q * unit);
  }

  bool GrowsAfterPreallocation() const override { return true; }

  // Maps the least that makes room for `needed` bytes (PlanGrowth): at the
  // end of what is mapped, or in a hole left by an earlier trim. With
  // growth_policy kDoubling, at least as much as is mapped already where the
  // hole and the limit have room (GrowDoubling).
  absl::Status Grow(std::uint64_t needed, Stream stream) override {
    GPUALLOC_RETURN_IF_ERROR(EnsureReserved());
    // What the device refused to take back before, first (its error is met
    // again at the next Trim; what stays counts against the limit below).
    if (!c_.capturing) (void)space_.RetryPending();
    const std::optional<GrowthPlan> plan =
        PlanGrowth(Extents(/*free_ends=*/true, stream), space_.base(),
                   space_.size(), needed, space_.unit());
    if (!plan.has_value()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "no hole of the reserved range of %d bytes can take %d more bytes",
          space_.size(), needed));
    }
    // Under pressure only: when mapping the plan would pass the limit (or
    // gc_threshold x the limit), free granules elsewhere (which could not
    // serve this request) are unmapped first, the smallest free runs first,
    // until it fits; the free memory the plan joins stays. Below that
    // nothing is unmapped: a repeated step finds that memory again, and
    // unmapping it would cost device calls now and again when it is needed
    // next (PyTorch's expandable segments also unmap only on empty_cache,
    // out of memory and past garbage_collection_threshold).
    const std::uint64_t give_back_above =
        GiveBackAbove(c_.resolved.limit, c_.resolved.options.gc_threshold);
    if (c_.resolved.options.trim_before_growth && !c_.capturing &&
        Physical() + plan->bytes > give_back_above) {
      GPUALLOC_RETURN_IF_ERROR(
          UnmapFree(plan->address, plan->address + plan->bytes, &stream,
                    Physical() + plan->bytes - give_back_above));
    }
    const std::uint64_t reserved = Physical();
    if (reserved + plan->bytes > c_.resolved.limit) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "mapping %d more bytes would pass the limit of %d bytes (%d mapped)",
          plan->bytes, c_.resolved.limit, reserved));
    }
    // A growth smaller than kGrowthStepUnits units maps that many where the
    // hole has room: small growth comes in runs (a live set rising to its
    // peak a block at a time), and each mapping costs three device calls
    // whatever its size. Only in the lower half of the limit: a block kept
    // in a larger handle pins the whole handle, and near the limit that can
    // be the difference between serving a large request after fragmentation
    // and running out of memory.
    const std::uint64_t step = kGrowthStepUnits * space_.unit();
    std::uint64_t bytes = plan->bytes;
    if (bytes < step && bytes + plan->room_after >= step &&
        reserved + step <= c_.resolved.limit / 2) {
      bytes = step;
    }
    if (c_.resolved.options.growth_policy == GrowthPolicy::kDoubling) {
      return GrowDoubling(*plan, bytes, reserved);
    }
    // One physical handle of the whole growth: one create, map and
    // set-access whatever its size (measured on the bundled traces against
    // one handle per 2 MiB granule: 5 to 16 times fewer device calls, and
    // 0.2 to 1.3 points less utilization, because Trim and garbage
    // collection can unmap only whole handles), up to HandleCap().
    //
    // In the upper half of the limit each granule is a handle of its own:
    // free memory is given back only under pressure (above), by whole
    // handles, and there a large handle pinned by one small block would keep
    // the rest of it (measured: the 1024-token training trace on a device 2%
    // above its peak ran out of memory with 494 MiB free inside such
    // handles). More calls per growth, but only close to the limit.
    const std::uint64_t handle = reserved + bytes > c_.resolved.limit / 2
                                     ? space_.unit()
                                     : std::min(bytes, HandleCap());
    return MapRegion(plan->address, bytes, handle);
  }

  bool CanSleep() const override { return true; }

  // The smallest hole that takes `bytes` without joining free memory next to
  // it (PlanGrowth with no free ends), mapped as one handle.
  absl::StatusOr<DeviceAddress> MapExclusive(std::uint64_t bytes) override {
    GPUALLOC_RETURN_IF_ERROR(EnsureReserved());
    if (!c_.capturing) (void)space_.RetryPending();
    const std::optional<GrowthPlan> plan =
        PlanGrowth(Extents(/*free_ends=*/false), space_.base(), space_.size(),
                   bytes, space_.unit());
    if (!plan.has_value()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "no hole of the reserved range of %d bytes can take %d bytes",
          space_.size(), bytes));
    }
    if (Physical() + bytes > c_.resolved.limit && !c_.capturing) {
      const Stream none;
      GPUALLOC_RETURN_IF_ERROR(
          UnmapFree(1, 0, &none, Physical() + bytes - c_.resolved.limit));
    }
    if (Physical() + bytes > c_.resolved.limit) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "mapping %d more bytes would pass the limit of %d bytes (%d mapped)",
          bytes, c_.resolved.limit, Physical()));
    }
    GPUALLOC_RETURN_IF_ERROR(MapRegion(plan->address, bytes, bytes));
    return plan->address;
  }

  absl::Status Sleep(DeviceAddress address, std::uint64_t bytes,
                     std::uint64_t* done) override {
    return space_.Sleep(address, bytes, done);
  }
  absl::Status Wake(DeviceAddress address, std::uint64_t bytes,
                    std::uint64_t* done) override {
    return space_.Wake(address, bytes, done);
  }
  std::uint64_t sleeping_bytes() const override {
    return space_.sleeping_bytes();
  }
  std::uint64_t SleepingWithin(DeviceAddress address,
                               std::uint64_t bytes) const override {
    return space_.SleepingWithin(address, bytes);
  }

  // What the device refused before, then every free mapping. (An empty keep
  // range: [1, 0) touches no chunk.)
  absl::Status ReleaseFree() override {
    const absl::Status retried = space_.RetryPending();
    const absl::Status unmapped = UnmapFree(1, 0, nullptr);
    return retried.ok() ? unmapped : retried;
  }

  std::uint64_t pending_bytes() const override {
    return space_.pending_bytes();
  }

  bool HasFreeToRelease() const override {
    for (const BfcCore::FreeSpan& span : c_.core.FreeSpans(space_.unit())) {
      if (!space_.MappedRunsWithin(span.address, span.size).empty())
        return true;
    }
    return false;
  }

  // F1 with expandable regions: the core's regions are exactly the maximal
  // runs of mapped granules (so mapped bytes equal reserved bytes, nothing is
  // mapped twice and no chunk lies in unmapped memory). Without `full`, the
  // cheap part, O(regions x log mappings): every region starts and ends where
  // mappings do, with no mapping touching it from outside.
  absl::Status Validate(bool full) const override {
    if (space_.mapped_bytes() != c_.core.counters().bytes_reserved) {
      return absl::InternalError(absl::StrFormat(
          "invariant F1 broken: %d bytes mapped but %d reserved in the core",
          space_.mapped_bytes(), c_.core.counters().bytes_reserved));
    }
    return full ? ValidateMappings() : ValidateMappingEnds();
  }

  // Granule mappings made and undone.
  std::uint64_t backend_allocs() const override { return space_.maps(); }
  std::uint64_t backend_frees() const override { return space_.unmaps(); }

 private:
  // Memory reserved from the device: what is mapped and awake, and what the
  // device refused to take back.
  std::uint64_t Physical() const {
    return c_.core.counters().bytes_reserved - space_.sleeping_bytes() +
           space_.pending_bytes();
  }

  // The core's regions (with their free ends when `free_ends`) and the
  // refused memory still mapped (no free end: nothing may use it), in
  // address order, for PlanGrowth.
  std::vector<Extent> Extents(bool free_ends, Stream stream = Stream()) const {
    std::vector<Extent> extents;
    for (DeviceAddress base : c_.core.RegionBases()) {
      const RegionId id = *c_.core.RegionAt(base);
      Extent e{base, c_.core.region_size(id), 0, 0};
      if (free_ends) {
        // When the stream may wait rather than grow (never during a
        // capture), the whole free end: the allocation waits for what its
        // work may still use.
        const RegionEdges edges = c_.core.region_edges(
            id, stream.handle, c_.oracle,
            !c_.capturing && c_.stream_order.MayWaitBeforeGrowth() &&
                !StreamOrder::IsReleasedKey(stream.handle));
        e.free_head = edges.free_head;
        e.free_tail = edges.free_tail;
      }
      extents.push_back(e);
    }
    const auto refused = space_.RefusedMappedRanges();
    if (refused.empty()) return extents;
    for (const auto& [address, bytes] : refused) {
      extents.push_back(Extent{address, bytes, 0, 0});
    }
    std::sort(extents.begin(), extents.end(),
              [](const Extent& a, const Extent& b) { return a.base < b.base; });
    return extents;
  }

  // Preallocation, and a doubling growth, map in at most this many handles.
  static constexpr std::uint64_t kMaxHandles = 64;

  // TensorFlow's doubling growth (growth_policy kDoubling) on one range: the
  // mapped total doubles, each growth mapping at least as much as is mapped
  // already. The sizes are GrowthCandidates' with the mapped bytes as the
  // next region size, within the limit and the room the plan's hole has
  // after it; largest first, each backing off by half when the device
  // refuses, down to `bytes` (what exact growth maps, as one handle). A
  // larger growth is mapped in at most kMaxHandles handles of equal size, so
  // that Trim and garbage collection can give back parts of it, and is cut
  // to a whole number of them.
  absl::Status GrowDoubling(const GrowthPlan& plan, std::uint64_t bytes,
                            std::uint64_t reserved) {
    const std::uint64_t unit = space_.unit();
    GrowthRequest request;
    request.needed = bytes;
    request.reserved = reserved;
    request.limit =
        std::min(c_.resolved.limit, reserved + plan.bytes + plan.room_after);
    request.granularity = unit;
    request.policy = GrowthPolicy::kDoubling;
    request.next_region_size = reserved;
    for (const std::uint64_t size : GrowthCandidates(request)) {
      if (size <= bytes) break;
      const std::uint64_t handle =
          RoundUpToMultiple((size + kMaxHandles - 1) / kMaxHandles, unit);
      const std::uint64_t mapped = RoundDownToMultiple(size, handle);
      if (mapped <= bytes) continue;
      const absl::Status status = MapRegion(plan.address, mapped, handle);
      if (status.ok() || !absl::IsResourceExhausted(status)) return status;
    }
    return MapRegion(plan.address, bytes, bytes);
  }

  // The largest handle a growth maps: 1/kHandlesPerLimit of the limit, and
  // at least kMinHandleCap. A block left in a handle pins all of it, and
  // under pressure only whole handles go back: with no cap, the seven
  // multi-stream traces measured at a limit of 1.05x their peak live bytes
  // ran out of memory up to 7 times each, with hundreds of MiB free inside
  // pinned handles; with this cap, never (with a floor of 64 MiB: up to 2
  // times). With memory to spare it costs a few more handles: on the four
  // bundled traces under the default limit (60 GB on an H100: handles up to
  // 229 MiB), 1575 mappings against 1520 and 68.6 modeled ms against 67.1.
  static constexpr std::uint64_t kHandlesPerLimit = 256;
  static constexpr std::uint64_t kMinHandleCap = std::uint64_t{32} << 20;
  std::uint64_t HandleCap() const {
    return std::max(RoundUpToMultiple(kMinHandleCap, space_.unit()),
                    RoundDownToMultiple(c_.resolved.limit / kHandlesPerLimit,
                                        space_.unit()));
  }

  // Growth maps at least this many units (6 MiB with 2 MiB units) while
  // reserved memory is below half the limit. Measured on the four bundled
  // real traces (growth, simulated H100), as backend calls and modeled
  // device time against separate regions and utilization, worst trace each
  // (modeled time under the cost model as it was before its refit to the
  // H200 measurement, which gives 0.98x and 0.79x for the first two rows;
  // docs/MEASUREMENTS.md):
  //   exact growth:             3.43x, 1.48x, 99.01%
  //   at least 3 units:         2.74x, 1.24x, 98.77%
  //   multiples of 3 units:     2.58x, 1.18x, 98.91%, and a 2%-spare device
  //                             runs out of memory (larger handles, pinned)
  //   multiples of 5 units:     2.12x, 1.02x, 97.24%
  static constexpr std::uint64_t kGrowthStepUnits = 3;

  // The reserved range, on first use: four times the device's memory.
  // Address space is cheap (a GPU's is 2^47 bytes and more) while running
  // out of it is not: trimming leaves holes, and a request larger than every
  // hole needs room past the end of what is mapped (measured: with a range
  // of 1x the device, the 1024-token inference trace ran out of address
  // space on a device 2% above its peak).
  static constexpr std::uint64_t kAddressSpaceFactor = 4;
  absl::Status EnsureReserved() {
    if (space_.reserved()) return absl::OkStatus();
    return space_.Reserve(
        kAddressSpaceFactor *
        std::max(c_.backend.info().total_bytes, c_.resolved.limit));
  }

  // Maps [address, address + bytes) and hands it to the core, joined with
  // the regions on either side.
  absl::Status MapRegion(DeviceAddress address, std::uint64_t bytes,
                         std::uint64_t handle_bytes) {
    GPUALLOC_RETURN_IF_ERROR(space_.Map(address, bytes, handle_bytes));
    RegionId id = c_.core.AddRegion(address, bytes);
    if (c_.history != nullptr)
      c_.history->Record(HistoryAction::kSegmentMap, address, bytes, 0);
    if (address > space_.base()) {
      if (std::optional<RegionId> before = c_.core.RegionAt(address - 1)) {
        id = c_.core.JoinRegions(*before, id, &c_.oracle);
      }
    }
    if (std::optional<RegionId> after = c_.core.RegionAt(address + bytes)) {
      c_.core.JoinRegions(id, *after, &c_.oracle);
    }
    return absl::OkStatus();
  }

  // Unmaps every whole mapping inside a free chunk, except chunks touching
  // [keep_begin, keep_end). Unmapping does not wait for work still using the
  // memory, so: for growth (`for_stream` given) the device is only asked
  // whether that work completed (an event query; an event is recorded only
  // where none covers the frees yet) and memory whose work is still pending
  // stays mapped for now (a later growth finds its event complete); growth
  // never makes the host wait. Otherwise (Trim, garbage collection) the host
  // waits for that work first. Stops once `enough` bytes are unmapped
  // (the smallest free chunks come first).
  absl::Status UnmapFree(DeviceAddress keep_begin, DeviceAddress keep_end,
                         const Stream* for_stream,
                         std::uint64_t enough = UINT64_MAX) {
    std::vector<std::pair<DeviceAddress, std::uint64_t>> targets;
    for (const BfcCore::FreeSpan& span : c_.core.FreeSpans(space_.unit())) {
      if (span.address <= keep_end && span.address + span.size >= keep_begin) {
        continue;
      }
      // (One mapping at a time when only some are wanted.)
      for (const auto& run : space_.MappedRunsWithin(span.address, span.size,
                                                     enough == UINT64_MAX))
        targets.push_back(run);
    }
    if (targets.empty()) return absl::OkStatus();
    if (c_.streams() && for_stream != nullptr) {
      GPUALLOC_RETURN_IF_ERROR(KeepCompleted(&targets));
    } else if (c_.streams()) {
      GPUALLOC_RETURN_IF_ERROR(WaitForFreeMemory(
          c_.stream_order, StreamsUsing(targets, /*in_use_too=*/false),
          "unmapping it"));
    }
    absl::Status first_error;
    std::uint64_t total = 0;
    for (const auto& [address, bytes] : targets) {
      if (total >= enough) break;
      std::uint64_t unmapped = 0;
      absl::Status status = space_.Unmap(address, bytes, &unmapped);
      if (unmapped != 0) c_.core.CarveFree(address, unmapped);
      total += unmapped;
      if (unmapped != 0 && c_.history != nullptr)
        c_.history->Record(HistoryAction::kSegmentUnmap, address, unmapped, 0);
      if (!status.ok() && first_error.ok()) first_error = status;
    }
    return first_error;
  }

  using Range = std::pair<DeviceAddress, std::uint64_t>;

  // The streams whose work may still use free memory in `ranges` (and, with
  // `in_use_too`, the streams in-use chunks there were allocated on), each
  // once.
  std::vector<std::uintptr_t> StreamsUsing(const std::vector<Range>& ranges,
                                           bool in_use_too) const {
    std::vector<std::uintptr_t> streams;
    for (const auto& [address, bytes] : ranges) {
      for (std::uintptr_t s : c_.core.StreamsUsingFree(
               address, bytes, c_.stream_order, in_use_too)) {
        if (std::find(streams.begin(), streams.end(), s) == streams.end())
          streams.push_back(s);
      }
    }
    return streams;
  }

  // Keeps the targets no pending work uses, asking the device (no wait)
  // about each stream whose frees there are not yet known complete.
  absl::Status KeepCompleted(
      std::vector<std::pair<DeviceAddress, std::uint64_t>>* targets) {
    std::vector<std::pair<DeviceAddress, std::uint64_t>> ready;
    for (const auto& [address, bytes] : *targets) {
      for (const StreamStamp& p :
           c_.core.PendingConditionsIn(address, bytes, c_.stream_order)) {
        if (!c_.stream_order.Poll(p.stream, p.stamp)) {
          const absl::Status error = c_.stream_order.TakeError();
          return absl::Status(
              error.code(),
              absl::StrFormat("asking whether the work that used free "
                              "memory completed, before unmapping it: %s",
                              error.message()));
        }
      }
      if (c_.core.PendingConditionsIn(address, bytes, c_.stream_order)
              .empty()) {
        ready.emplace_back(address, bytes);
      }
    }
    *targets = std::move(ready);
    return absl::OkStatus();
  }

  std::vector<std::pair<DeviceAddress, std::uint64_t>> Holders(
      DeviceAddress address, std::uint64_t bytes) const override {
    return space_.MappingsOverlapping(address, bytes);
  }

  absl::Status ValidateMappings() const {
    const auto runs = space_.MappedRunsWithin(space_.base(), space_.size());
    const std::vector<DeviceAddress> bases = c_.core.RegionBases();
    if (runs.size() != bases.size()) {
      return absl::InternalError(absl::StrFormat(
          "invariant F1 broken: %d runs of mapped granules but %d regions",
          runs.size(), bases.size()));
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const std::uint64_t size =
          c_.core.region_size(*c_.core.RegionAt(bases[i]));
      if (runs[i].first != bases[i] || runs[i].second != size) {
        return absl::InternalError(absl::StrFormat(
            "invariant F1 broken: mapped run [%#x, +%d) but region [%#x, +%d)",
            runs[i].first, runs[i].second, bases[i], size));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ValidateMappingEnds() const {
    for (DeviceAddress base : c_.core.RegionBases()) {
      const DeviceAddress end =
          base + c_.core.region_size(*c_.core.RegionAt(base));
      if (!space_.MappingStartsAt(base) || !space_.MappingEndsAt(end) ||
          space_.MappingEndsAt(base) || space_.MappingStartsAt(end)) {
        return absl::InternalError(absl::StrFormat(
            "invariant F1 broken: region [%#x, %#x) is not a maximal run of "
            "mapped granules",
            base, end));
      }
    }
    return absl::OkStatus();
  }

  const RegionContext c_;
  ExpandableSpace space_;
};

}  // namespace

std::unique_ptr<RegionSource> MakeExpandableRegions(
    const RegionContext& context) {
  return std::make_unique<ExpandableRegions>(context);
}

}  // namespace gpualloc::core
