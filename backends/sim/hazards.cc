// SPDX-License-Identifier: Apache-2.0
// backends/sim/hazards.cc: the hazard detector's indexes and logs.
#include "backends/sim/hazards.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "absl/strings/str_format.h"
#include "backends/sim/sim_util.h"

namespace gpualloc {

std::string SimHazard::ToString() const {
  switch (kind) {
    case SimHazardKind::kStreamOrder:
      break;
    case SimHazardKind::kUnmapInUse:
      return absl::StrFormat(
          "hazard: Unmap of [%#x, %#x) (%d bytes) while work queued on stream "
          "%#x still uses it (unmap only after the work's events completed)",
          address, address + bytes, bytes, other.handle);
    case SimHazardKind::kInaccessible:
      return absl::StrFormat(
          "access violation: stream %#x touched [%#x, %#x) (%d bytes), which "
          "is not inside one live allocation, pool segment or mapped range "
          "with access set",
          stream.handle, address, address + bytes, bytes);
  }
  return absl::StrFormat(
      "hazard: stream %#x touched [%#x, %#x) (%d bytes) while work queued on "
      "stream %#x still uses it and stream %#x was not made to wait for it",
      stream.handle, address, address + bytes, bytes, other.handle,
      stream.handle);
}

namespace sim {
namespace {

int LengthClass(std::uint64_t length) {
  return std::bit_width(length) - 1;  // length >= 1
}

}  // namespace

void HazardDetector::Index(std::uintptr_t stream, StreamPieces& pieces,
                           DeviceAddress start, DeviceAddress end,
                           std::uint64_t position) {
  // Erasing from a btree invalidates other iterators: no saved end.
  for (auto it = pieces.by_address.lower_bound(start);
       it != pieces.by_address.end() && it->first == start;) {
    if (it->second.end <= end) {
      Unshare(stream, start, it->second.end, it->second.position);
      pieces.by_position.erase(it->second.position);
      it = pieces.by_address.erase(it);
    } else {
      ++it;
    }
  }
  pieces.by_address.emplace(start, IndexedPiece{end, position});
  pieces.by_position.emplace(position, start);
  pieces.longest = std::max(pieces.longest, end - start);
  const int k = LengthClass(end - start);
  shared_pieces_[k].emplace(SharedKey{start, stream, position}, end);
  nonempty_classes_ |= std::uint64_t{1} << k;
}

void HazardDetector::DropCompleted(std::uintptr_t stream, StreamPieces& pieces,
                                   std::uint64_t completed) {
  while (!pieces.by_position.empty() &&
         pieces.by_position.begin()->first <= completed) {
    const auto [position, start] = *pieces.by_position.begin();
    auto [first, last] = pieces.by_address.equal_range(start);
    for (auto it = first; it != last; ++it) {
      if (it->second.position == position) {
        Unshare(stream, start, it->second.end, position);
        pieces.by_address.erase(it);
        break;
      }
    }
    pieces.by_position.erase(pieces.by_position.begin());
  }
  if (pieces.by_address.empty()) pieces.longest = 0;
}

void HazardDetector::Unshare(std::uintptr_t stream, DeviceAddress start,
                             DeviceAddress end, std::uint64_t position) {
  const int k = LengthClass(end - start);
  shared_pieces_[k].erase(SharedKey{start, stream, position});
  if (shared_pieces_[k].empty()) {
    nonempty_classes_ &= ~(std::uint64_t{1} << k);
  }
}

// Each class holds lengths below 2^(k+1), so its overlapping pieces start
// less than that before `start`.
std::vector<std::uintptr_t> HazardDetector::StreamsNear(
    DeviceAddress start, DeviceAddress end) const {
  std::vector<std::uintptr_t> near;
  for (std::uint64_t classes = nonempty_classes_; classes != 0;
       classes &= classes - 1) {
    const int k = std::countr_zero(classes);
    const std::uint64_t longest =
        k == 63 ? std::numeric_limits<std::uint64_t>::max()
                : (std::uint64_t{2} << k) - 1;
    const DeviceAddress from = start > longest ? start - longest + 1 : 0;
    const auto& pieces = shared_pieces_[k];
    for (auto it = pieces.lower_bound(SharedKey{from, 0, 0});
         it != pieces.end() && std::get<0>(it->first) < end; ++it) {
      if (it->second > start) near.push_back(std::get<1>(it->first));
    }
  }
  std::sort(near.begin(), near.end());
  near.erase(std::unique(near.begin(), near.end()), near.end());
  return near;
}

std::optional<Overlap> HazardDetector::FindUnordered(const StreamPieces& pieces,
                                                     DeviceAddress start,
                                                     DeviceAddress end,
                                                     std::uint64_t ordered) {
  const DeviceAddress from =
      start >= pieces.longest ? start - pieces.longest + 1 : 0;
  for (auto it = pieces.by_address.lower_bound(from);
       it != pieces.by_address.end() && it->first < end; ++it) {
    if (it->second.end <= start || it->second.position <= ordered) continue;
    return std::make_pair(std::max(start, it->first),
                          std::min(end, it->second.end));
  }
  return std::nullopt;
}

void HazardDetector::Flag(SimHazardKind kind, Stream stream, Stream other,
                          const Overlap& overlap) {
  ++hazards_;
  if (hazard_log_.size() < kHazardLogSize) {
    hazard_log_.push_back(SimHazard{kind, stream, other, overlap.first,
                                    overlap.second - overlap.first});
  }
}

void HazardDetector::FlagInaccessible(Stream stream, DeviceAddress start,
                                      DeviceAddress end) {
  ++access_violations_;
  if (access_violation_log_.size() < kHazardLogSize) {
    access_violation_log_.push_back(SimHazard{
        SimHazardKind::kInaccessible, stream, stream, start, end - start});
  }
}

}  // namespace sim
}  // namespace gpualloc
