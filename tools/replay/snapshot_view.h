// SPDX-License-Identifier: Apache-2.0
// tools/replay/snapshot_view.h: an allocator snapshot (the JSON of
// gpualloc/core/snapshot_json.h, as gpualloc_snapshot_json writes it) drawn by
// the replay's SVG renderer: one moment, every region a band, every in-use
// chunk a block across the whole width.
#ifndef GPUALLOC_TOOLS_REPLAY_SNAPSHOT_VIEW_H_
#define GPUALLOC_TOOLS_REPLAY_SNAPSHOT_VIEW_H_

#include <string>

#include "absl/status/statusor.h"
#include "gpualloc/core/allocator.h"
#include "tools/layer.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay {

// A ReplayResult whose timeline has one op: regions and in-use chunks live
// over it (block ids are the chunks' indices in address order, so colours are
// stable), and the chart shows the snapshot's reserved and in-use bytes, with
// its peak reserved. `name` becomes the result's trace name.
ReplayResult SnapshotAsReplayResult(const Snapshot& snapshot,
                                    const std::string& name);

// Reads a JSON snapshot file; the name is the file's stem. Errors name the
// file.
absl::StatusOr<ReplayResult> LoadSnapshotAsReplayResult(
    const std::string& path);

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_SNAPSHOT_VIEW_H_
