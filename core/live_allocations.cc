// SPDX-License-Identifier: Apache-2.0
// core/live_allocations.cc: see live_allocations.h.
#include "core/live_allocations.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/report/format_bytes.h"
#include "core/status_macros.h"

namespace gpualloc::core {

void ReportLiveAtDestruction(absl::string_view mode, const DeviceInfo& device,
                             std::uint64_t count, std::uint64_t bytes) {
  if (count == 0) return;
  const std::string line = absl::StrFormat(
      "gpualloc: %s allocator on %s (device %d) destroyed with %d live "
      "allocation%s (%s requested); their memory goes back to the device "
      "now\n",
      mode, device.name, device.ordinal, count, count == 1 ? "" : "s",
      FormatBytes(bytes));
  std::fwrite(line.data(), 1, line.size(), stderr);
}

Stats StatsFromCounters(const LiveCounters& k, std::uint64_t limit) {
  Stats s;
  s.num_allocs = k.num_allocs;
  s.bytes_in_use = k.bytes_in_use;
  s.peak_bytes_in_use = k.peak_bytes_in_use;
  s.largest_alloc_size = k.largest_alloc_size;
  s.bytes_limit = limit;
  s.bytes_requested = k.bytes_requested;
  s.peak_bytes_requested = k.peak_bytes_requested;
  return s;
}

LiveAllocations::LiveAllocations(std::uint64_t min_block_size,
                                 std::size_t history)
    : min_block_size_(min_block_size),
      ring_(std::max<std::size_t>(history, 1)) {}

void LiveAllocations::Insert(DeviceAddress address,
                             const LiveAllocation& allocation) {
  const bool inserted = live_.emplace(address, allocation).second;
  GPUALLOC_DCHECK(inserted);
  (void)inserted;
  // The device may hand the address out again (a real driver does); from now
  // on freeing it is legitimate.
  freed_.erase(address);
  LiveCounters& k = counters_;
  ++k.num_allocs;
  k.bytes_in_use += allocation.size;
  k.peak_bytes_in_use = std::max(k.peak_bytes_in_use, k.bytes_in_use);
  k.largest_alloc_size = std::max(k.largest_alloc_size, allocation.size);
  k.bytes_requested += allocation.requested;
  k.peak_bytes_requested = std::max(k.peak_bytes_requested, k.bytes_requested);
  k.bytes_held += allocation.held;
  k.peak_bytes_held = std::max(k.peak_bytes_held, k.bytes_held);
}

LiveAllocation LiveAllocations::Remove(DeviceAddress address) {
  auto it = live_.find(address);
  GPUALLOC_DCHECK(it != live_.end());
  const LiveAllocation allocation = it->second;
  live_.erase(it);
  counters_.bytes_in_use -= allocation.size;
  counters_.bytes_requested -= allocation.requested;
  counters_.bytes_held -= allocation.held;

  Freed& slot = ring_[free_seq_ % ring_.size()];
  if (slot.address != 0) {
    auto old = freed_.find(slot.address);
    if (old != freed_.end() && old->second == slot.seq) freed_.erase(old);
  }
  slot = Freed{address, free_seq_};
  freed_[address] = free_seq_;
  ++free_seq_;
  return allocation;
}

absl::Status LiveAllocations::DiagnoseUnknown(absl::string_view operation,
                                              DeviceAddress address) const {
  for (const auto& [start, a] : live_) {
    if (address > start && address < start + a.size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s(%#x): interior pointer, %d bytes into the allocation at %#x of "
          "%d bytes; pass the pointer Allocate returned",
          operation, address, address - start, start, a.requested));
    }
  }
  if (freed_.contains(address)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s(%#x): not a live allocation: it was freed already and not handed "
        "out again; double free, or use after free",
        operation, address));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s(%#x): pointer was not allocated by this allocator (it is none of "
      "its %d live allocations nor among the last %d it freed)",
      operation, address, live_.size(), ring_.size()));
}

void LiveAllocations::ResetPeaks() {
  counters_.peak_bytes_in_use = counters_.bytes_in_use;
  counters_.peak_bytes_requested = counters_.bytes_requested;
  counters_.peak_bytes_held = counters_.bytes_held;
  counters_.largest_alloc_size = 0;
}

void LiveAllocations::AppendSnapshot(
    std::vector<RegionSnapshot>* regions) const {
  const std::size_t first = regions->size();
  for (const auto& [address, a] : live_) {
    RegionSnapshot r;
    r.base = a.base;
    r.size = a.held;
    r.chunks.push_back(
        ChunkSnapshot{address, a.size, a.requested, true, a.stream});
    regions->push_back(std::move(r));
  }
  std::sort(regions->begin() + static_cast<std::ptrdiff_t>(first),
            regions->end(),
            [](const RegionSnapshot& x, const RegionSnapshot& y) {
              return x.base < y.base;
            });
}

absl::Status LiveAllocations::Validate() const {
  LiveCounters sums;
  for (const auto& [address, a] : live_) {
    if (a.size == 0 || a.requested > a.size || address % min_block_size_ != 0 ||
        address < a.base || a.size > a.held ||
        address - a.base > a.held - a.size) {
      return absl::InternalError(absl::StrFormat(
          "invariant L1 broken: allocation at %#x (size %d, requested %d) in "
          "the device block [%#x, +%d) with minimum block size %d",
          address, a.size, a.requested, a.base, a.held, min_block_size_));
    }
    sums.bytes_in_use += a.size;
    sums.bytes_requested += a.requested;
    sums.bytes_held += a.held;
    if (freed_.contains(address)) {
      return absl::InternalError(absl::StrFormat(
          "invariant L3 broken: %#x is live and also remembered as freed",
          address));
    }
  }
  const LiveCounters& k = counters_;
  if (sums.bytes_in_use != k.bytes_in_use ||
      sums.bytes_requested != k.bytes_requested ||
      sums.bytes_held != k.bytes_held) {
    return absl::InternalError(absl::StrFormat(
        "invariant L2 broken: the %d live allocations sum to %d in use, %d "
        "requested, %d held; the counters say %d, %d, %d",
        live_.size(), sums.bytes_in_use, sums.bytes_requested, sums.bytes_held,
        k.bytes_in_use, k.bytes_requested, k.bytes_held));
  }
  if (k.peak_bytes_in_use < k.bytes_in_use ||
      k.peak_bytes_requested < k.bytes_requested ||
      k.peak_bytes_held < k.bytes_held) {
    return absl::InternalError(absl::StrFormat(
        "invariant L2 broken: a peak is below its current value (in use %d/%d, "
        "requested %d/%d, held %d/%d)",
        k.bytes_in_use, k.peak_bytes_in_use, k.bytes_requested,
        k.peak_bytes_requested, k.bytes_held, k.peak_bytes_held));
  }
  return absl::OkStatus();
}

}  // namespace gpualloc::core
