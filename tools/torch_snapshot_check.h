// SPDX-License-Identifier: Apache-2.0
// tools/torch_snapshot_check.h: what gpualloc-torch-snapshot checks in a JSON
// snapshot before it writes a pickle: the layout an allocator writes, in
// which every region is tiled by its chunks. A file that breaks it (edited by
// hand, truncated, from another program) would become a pickle that
// pytorch.org/memory_viz cannot open, or one that draws memory that never was.
#ifndef GPUALLOC_TOOLS_TORCH_SNAPSHOT_CHECK_H_
#define GPUALLOC_TOOLS_TORCH_SNAPSHOT_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "gpualloc/core/allocator.h"
#include "tools/layer.h"

namespace gpualloc::tools {

// memory_viz reads every integer as a JavaScript number, exact up to 2^53:
// no region may end past it.
inline constexpr std::uint64_t kMaxSnapshotAddress = std::uint64_t{1} << 53;

// OK, or InvalidArgument naming the first inconsistency by the JSON's own
// path, field and value (e.g. "regions[0].chunks[3].address: 139...: expected
// 139... (where regions[0].chunks[2] ends): the chunks must tile the
// region"). Checked, for the regions and for each pool's regions: a region is
// not empty and ends at most at kMaxSnapshotAddress; regions are in address
// order and do not overlap (a duplicate is an overlap); the chunks tile their
// region (the first starts at its base, each next one where the one before
// ends, the last ends at its end), none is empty, and none has more bytes
// requested than its size.
absl::Status CheckSnapshotForExport(const Snapshot& snapshot);

}  // namespace gpualloc::tools

#endif  // GPUALLOC_TOOLS_TORCH_SNAPSHOT_CHECK_H_
