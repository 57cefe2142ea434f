// SPDX-License-Identifier: Apache-2.0
// backends/sim/hazards.h: the simulator's hazard detector.
//
// Each stream's pending pieces of work are indexed by start address (and by
// position, to drop them as they complete), and every stream's pieces
// together by start address in classes of length (2^k to 2^(k+1) - 1 bytes).
// A Use finds the streams with a pending piece that can overlap its range in
// that shared index (per class, the pieces starting less than the class's
// longest length before the range), then scans only those streams' own
// pieces: its cost does not grow with the number of streams, only with the
// pieces near its range. A piece covered by a later one of the same stream at
// the same start is dropped at once, so reusing one block on one stream
// keeps one entry however long nothing completes.
//
// Not thread-safe: the backend holds its lock around every use.
#ifndef GPUALLOC_BACKENDS_SIM_HAZARDS_H_
#define GPUALLOC_BACKENDS_SIM_HAZARDS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "backends/layer.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/backend.h"

namespace gpualloc::sim {

// A piece of work that may still cause a hazard, indexed by its start.
struct IndexedPiece {
  DeviceAddress end = 0;
  std::uint64_t position = 0;
};

// One stream's pending pieces that touch memory, by start address and by
// position. A piece is dropped from both when it completes, or when a later
// piece of the same stream starts at the same address and covers it (any
// stream ordered after the later piece is ordered after the earlier one, so
// only the later one can be a hazard).
struct StreamPieces {
  absl::btree_multimap<DeviceAddress, IndexedPiece> by_address;
  absl::btree_map<std::uint64_t, DeviceAddress> by_position;
  // Longest indexed piece: bounds how far before a range an overlapping
  // piece can start.
  std::uint64_t longest = 0;
};

using Overlap = std::pair<DeviceAddress, DeviceAddress>;

class HazardDetector {
 public:
  // Indexes the piece [start, end) at `position` of stream `stream`.
  void Index(std::uintptr_t stream, StreamPieces& pieces, DeviceAddress start,
             DeviceAddress end, std::uint64_t position);
  // Drops the pieces of `stream` at or below `completed`.
  void DropCompleted(std::uintptr_t stream, StreamPieces& pieces,
                     std::uint64_t completed);
  // The streams, in handle order, with an indexed piece that overlaps
  // [start, end).
  std::vector<std::uintptr_t> StreamsNear(DeviceAddress start,
                                          DeviceAddress end) const;
  // The first pending piece past position `ordered` that overlaps
  // [start, end), as the overlapping range.
  static std::optional<Overlap> FindUnordered(const StreamPieces& pieces,
                                              DeviceAddress start,
                                              DeviceAddress end,
                                              std::uint64_t ordered);

  void Flag(SimHazardKind kind, Stream stream, Stream other,
            const Overlap& overlap);
  void FlagInaccessible(Stream stream, DeviceAddress start, DeviceAddress end);

  std::uint64_t hazards() const { return hazards_; }
  const std::vector<SimHazard>& hazard_log() const { return hazard_log_; }
  std::uint64_t access_violations() const { return access_violations_; }
  const std::vector<SimHazard>& access_violation_log() const {
    return access_violation_log_;
  }

 private:
  // The shared index: every stream's indexed pieces, by (start, stream,
  // position), in classes of length.
  using SharedKey = std::tuple<DeviceAddress, std::uintptr_t, std::uint64_t>;
  void Unshare(std::uintptr_t stream, DeviceAddress start, DeviceAddress end,
               std::uint64_t position);

  // Class k holds lengths in [2^k, 2^(k+1)); the value is the piece's end.
  std::array<absl::btree_map<SharedKey, DeviceAddress>, 64> shared_pieces_;
  std::uint64_t nonempty_classes_ = 0;  // bit k: class k
  std::uint64_t hazards_ = 0;
  std::vector<SimHazard> hazard_log_;
  std::uint64_t access_violations_ = 0;
  std::vector<SimHazard> access_violation_log_;
};

}  // namespace gpualloc::sim

#endif  // GPUALLOC_BACKENDS_SIM_HAZARDS_H_
