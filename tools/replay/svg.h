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

// One panel per (trace, configuration), stacked vertically. In each: x is the
// op index; y is the address, regions stacked in address order with thin gaps
// (so regions far apart in the address space stay readable); each block is a
// rectangle over its lifetime, coloured by its id; the region outlines show
// what was reserved when; a line above shows reserved and in-use bytes over
// time, with the peak marked. Self-contained SVG 1.1, no scripts.
std::string RenderSvg(const std::vector<SvgPanel>& panels);

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_SVG_H_
