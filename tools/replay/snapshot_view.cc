// tools/replay/snapshot_view.cc: SnapshotAsReplayResult (see
// snapshot_view.h).
#include "tools/replay/snapshot_view.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpualloc/snapshot_json.h"

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
  t.max_regions_at_once = snapshot.regions.size();
  std::uint64_t id = 0;
  std::uint64_t in_use = 0;
  for (const RegionSnapshot& region : snapshot.regions) {
    t.regions.push_back({region.base, region.size, 0, 1});
    for (const ChunkSnapshot& c : region.chunks) {
      const std::uint64_t index = id++;
      if (!c.in_use) continue;
      in_use += c.size;
      // The requested bytes, as a replay draws them; the chunk's size for a
      // zero-byte request.
      t.blocks.push_back({index, c.address,
                          c.requested != 0 ? c.requested : c.size, 0, 1,
                          static_cast<std::uint64_t>(c.stream)});
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
