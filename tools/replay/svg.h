// SPDX-License-Identifier: Apache-2.0
// tools/replay/svg.h: the address space over time, as an SVG picture (in the
// spirit of PyTorch's memory_viz), so that fragmentation can be seen.
#ifndef GPUALLOC_TOOLS_REPLAY_SVG_H_
#define GPUALLOC_TOOLS_REPLAY_SVG_H_

#include <string>
#include <vector>

#include "tools/layer.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay {

struct SvgPanel {
  std::string title;  // e.g. "torch-cs336-medium_128_training / growth, h100"
  const ReplayResult* result = nullptr;  // with a recorded timeline
};

// A legend of the colours at the top, then one panel per (trace,
// configuration), stacked vertically. In each: a caption saying what the
// panel shows, what to look for, how many regions there were, how many times
// memory was unmapped or given back (and that none was, when none was) and how
// the y extent compares with the peak reserved; a line chart of reserved and
// in-use bytes over time, with the peak marked; and the address area: x is
// the op index, y the offset into the address ranges reserved at some moment
// (regions stacked in address order with thin gaps, so that regions far apart
// in the address space stay readable; addresses in tooltips). Each block is a
// rectangle over its lifetime in its stream's colour (or hatched: free but
// waiting for its stream, asleep), at least a pixel each way so that every
// block shows; grey is reserved and free, white not reserved; separate
// regions are outlined over their lifetimes. Both axes are ticked at round,
// evenly spaced values (1, 2 or 5 x 10^k), and a panel's sizes (y axis,
// chart, caption) are all in one unit.
// Self-contained SVG 1.1, no scripts.
std::string RenderSvg(const std::vector<SvgPanel>& panels);

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_SVG_H_
