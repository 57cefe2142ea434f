// SPDX-License-Identifier: Apache-2.0
// core/regions/separate_regions.cc: growth by separate backend allocations,
// each one region of the core (core/regions/region_source.h).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/bfc/size_class.h"
#include "core/regions/growth.h"
#include "core/regions/region_source.h"
#include "core/status_macros.h"

namespace gpualloc::core {
namespace {

class SeparateRegions final : public RegionSource {
 public:
  explicit SeparateRegions(const RegionContext& context)
      : c_(context), next_region_size_(context.resolved.granularity) {}

  // Live allocations die with the allocator (as with any caching
  // allocator); their memory still goes back to the device (cuMemFree
  // synchronizes the device first). A free the device refuses is tried once
  // more: nothing could free the region later.
  ~SeparateRegions() override {
    for (DeviceAddress base : c_.core.RegionBases()) {
      if (!c_.backend.Free(base).ok()) (void)c_.backend.Free(base);
    }
  }

  absl::Status Preallocate() override { return AddRegion(c_.resolved.limit); }

  bool GrowsAfterPreallocation() const override { return false; }

  // Tries the growth candidates, largest first. OK when a region was added.
  absl::Status Grow(std::uint64_t needed, Stream stream) override {
    // Under pressure only: when the smallest region that holds the request
    // would pass the limit (or gc_threshold x the limit), fully free regions
    // (none of which could serve it) go back first, largest first, until it
    // fits. Below that they stay: a repeated step finds them again, and
    // freeing them would cost a device call now and another when they are
    // needed next.
    const std::uint64_t smallest =
        RoundUpToMultiple(needed, c_.resolved.granularity);
    const std::uint64_t reserved = c_.core.counters().bytes_reserved;
    const std::uint64_t give_back_above =
        GiveBackAbove(c_.resolved.limit, c_.resolved.options.gc_threshold);
    if (c_.resolved.options.trim_before_growth && !c_.capturing &&
        reserved + smallest > give_back_above) {
      GPUALLOC_RETURN_IF_ERROR(
          ReleaseFreeRegions(&stream, reserved + smallest - give_back_above));
    }
    GrowthRequest request;
    request.needed = needed;
    request.reserved = c_.core.counters().bytes_reserved;
    request.limit = c_.resolved.limit;
    request.granularity = c_.resolved.granularity;
    request.policy = c_.resolved.options.growth_policy;
    request.next_region_size = next_region_size_;
    const std::vector<std::uint64_t> sizes = GrowthCandidates(request);
    if (sizes.empty()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "growing by %d bytes would pass the limit of %d bytes (%d reserved)",
          RoundUpToMultiple(needed, c_.resolved.granularity), c_.resolved.limit,
          request.reserved));
    }
    absl::Status last;
    for (std::uint64_t size : sizes) {
      last = AddRegion(size);
      if (last.ok()) {
        next_region_size_ = NextRegionSize(size, next_region_size_);
        return last;
      }
      if (!absl::IsResourceExhausted(last))
        break;  // a driver error: do not retry
    }
    return last;
  }

  absl::Status ReleaseFree() override { return ReleaseFreeRegions(nullptr); }

  bool HasFreeToRelease() const override {
    return !c_.core.FreeRegions().empty();
  }

  std::vector<std::pair<DeviceAddress, std::uint64_t>> Holders(
      DeviceAddress address, std::uint64_t /*bytes*/) const override {
    const std::optional<RegionId> region = c_.core.RegionAt(address);
    if (!region.has_value()) return {};
    const DeviceAddress base = c_.core.region_base(*region);
    return {{base, c_.core.region_size(*region)}};
  }

  absl::Status Validate(bool /*full*/) const override {
    if (allocs_ - frees_ != c_.core.num_regions()) {
      return absl::InternalError(absl::StrFormat(
          "invariant F1 broken: %d regions in the core, but %d backend "
          "allocations minus %d frees",
          c_.core.num_regions(), allocs_, frees_));
    }
    return absl::OkStatus();
  }

  std::uint64_t backend_allocs() const override { return allocs_; }
  std::uint64_t backend_frees() const override { return frees_; }

 private:
  // Asks the backend for a region of `size` bytes; on success the core gets
  // it.
  absl::Status AddRegion(std::uint64_t size) {
    absl::StatusOr<DeviceAddress> base = c_.backend.Allocate(size);
    if (!base.ok()) return base.status();
    if (*base % c_.resolved.min_block_size != 0) {
      (void)c_.backend.Free(*base);
      return absl::InternalError(absl::StrFormat(
          "backend %s returned %#x for %d bytes, not aligned to the minimum "
          "block size %d",
          c_.backend.info().backend, *base, size, c_.resolved.min_block_size));
    }
    ++allocs_;
    c_.core.AddRegion(*base, size);
    if (c_.history != nullptr)
      c_.history->Record(HistoryAction::kSegmentAlloc, *base, size, 0);
    return absl::OkStatus();
  }

  // Returns fully free regions to the backend, largest first, until
  // `enough` bytes went back (every one by default). With `for_stream`
  // (before growing for that stream) and several streams seen, regions whose
  // work on other streams is not known complete stay: freeing them would make
  // the device synchronize.
  absl::Status ReleaseFreeRegions(const Stream* for_stream,
                                  std::uint64_t enough = UINT64_MAX) {
    const bool only_usable =
        for_stream != nullptr && c_.core.multi_stream() && c_.streams();
    absl::Status first_error;
    std::vector<RegionId> regions = c_.core.FreeRegions();
    if (enough != UINT64_MAX) {
      std::stable_sort(regions.begin(), regions.end(),
                       [this](RegionId a, RegionId b) {
                         return c_.core.region_size(a) > c_.core.region_size(b);
                       });
    }
    std::uint64_t released = 0;
    for (RegionId id : regions) {
      if (released >= enough) break;
      if (only_usable &&
          !c_.core.RegionUsableBy(id, for_stream->handle, c_.stream_order)) {
        continue;
      }
      const DeviceAddress base = c_.core.region_base(id);
      absl::Status freed = c_.backend.Free(base);
      if (!freed.ok()) {
        if (first_error.ok()) first_error = freed;
        continue;  // the region stays usable
      }
      ++frees_;
      released += c_.core.region_size(id);
      if (c_.history != nullptr) {
        c_.history->Record(HistoryAction::kSegmentFree, base,
                           c_.core.region_size(id), 0);
      }
      c_.core.RemoveRegion(id);
    }
    return first_error;
  }

  const RegionContext c_;
  std::uint64_t next_region_size_;
  std::uint64_t allocs_ = 0;
  std::uint64_t frees_ = 0;
};

}  // namespace

std::unique_ptr<RegionSource> MakeSeparateRegions(
    const RegionContext& context) {
  return std::make_unique<SeparateRegions>(context);
}

absl::Status WaitForFreeMemory(StreamOrder& order,
                               const std::vector<std::uintptr_t>& streams,
                               absl::string_view doing) {
  if (streams.empty()) return absl::OkStatus();
  absl::Status waited = order.WaitForAll(streams);
  if (waited.ok()) return waited;
  (void)order.TakeError();
  return absl::Status(
      waited.code(),
      absl::StrFormat("waiting for the work that used free memory before %s: "
                      "%s",
                      doing, waited.message()));
}

// Only expandable regions can keep addresses without memory behind them.
absl::StatusOr<DeviceAddress> RegionSource::MapExclusive(std::uint64_t) {
  return absl::UnimplementedError("this region source cannot map exclusively");
}
absl::Status RegionSource::Sleep(DeviceAddress, std::uint64_t,
                                 std::uint64_t* done) {
  *done = 0;
  return absl::UnimplementedError("this region source cannot sleep");
}
absl::Status RegionSource::Wake(DeviceAddress, std::uint64_t,
                                std::uint64_t* done) {
  *done = 0;
  return absl::UnimplementedError("this region source cannot wake");
}

}  // namespace gpualloc::core
