// SPDX-License-Identifier: Apache-2.0
// tools/replay/snapshot_view.cc: SnapshotAsReplayResult (see
// snapshot_view.h).
#include "tools/replay/snapshot_view.h"

#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpualloc/core/snapshot_json.h"

namespace gpualloc::replay {

ReplayResult SnapshotAsReplayResult(const Snapshot& snapshot,
                                    const std::string& name) {
  ReplayResult r;
  r.trace = name;
  r.label = "snapshot";
  r.stats = snapshot.stats;
  r.peak_bytes_in_use = snapshot.stats.peak_bytes_in_use;
  r.peak_bytes_requested = snapshot.stats.peak_bytes_requested;
  r.peak_bytes_reserved = snapshot.stats.peak_bytes_reserved;
  r.final_bytes_reserved = snapshot.stats.bytes_reserved;
  r.largest_free_block_bytes = snapshot.stats.largest_free_block_bytes;
  r.fragmentation_at_peak = snapshot.stats.fragmentation;

  Timeline& t = r.timeline;
  t.num_ops = 1;
  t.mode = "snapshot";
  // Tags asleep: their chunks stay listed, their memory is given back.
  std::set<std::uint32_t> asleep;
  for (const PoolSnapshot& p : snapshot.pools) {
    if (p.asleep) asleep.insert(p.tag);
  }
  std::uint64_t id = 0;
  std::uint64_t in_use = 0;
  for (const RegionSnapshot& region : snapshot.regions) {
    t.regions.push_back({region.base, region.size, 0, 1});
    for (const ChunkSnapshot& c : region.chunks) {
      const std::uint64_t index = id++;
      TimelineBlock b{index, c.address, c.size,
                      0,     1,         static_cast<std::uint64_t>(c.stream)};
      if (c.in_use) {
        in_use += c.size;
        // The requested bytes, as a replay draws them; the chunk's size for
        // a zero-byte request.
        if (c.requested != 0) b.size = c.requested;
        if (c.tag != 0 && asleep.contains(c.tag)) {
          b.state = TimelineBlock::State::kAsleep;
        }
      } else if (c.stream != 0) {
        // Free, but its stream's work may still use it: not reusable on
        // another stream yet.
        b.state = TimelineBlock::State::kFreePending;
      } else {
        continue;
      }
      t.blocks.push_back(b);
    }
  }
  // Reserved and in use at the moment of the snapshot, held across the width.
  std::uint64_t reserved = 0;
  for (const RegionSnapshot& region : snapshot.regions) reserved += region.size;
  t.sample_ops = {0, 1};
  t.sample_reserved = {reserved, reserved};
  t.sample_in_use = {in_use, in_use};
  return r;
}

absl::StatusOr<ReplayResult> LoadSnapshotAsReplayResult(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<Snapshot> snapshot = SnapshotFromJson(text.str());
  if (!snapshot.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", snapshot.status().message()));
  }
  std::string stem = path.substr(path.find_last_of('/') + 1);
  if (const auto dot = stem.rfind('.'); dot != std::string::npos && dot > 0) {
    stem.resize(dot);
  }
  return SnapshotAsReplayResult(*snapshot, stem);
}

}  // namespace gpualloc::replay
