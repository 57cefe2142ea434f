// SPDX-License-Identifier: Apache-2.0
// tools/replay/svg_parts.h: the pieces of the address-space picture
// (svg.cc) that are text rather than geometry: the shared layout and
// colours, the legend, each panel's caption and the reserved/in-use chart.
// Internal to tools/replay.
#ifndef GPUALLOC_TOOLS_REPLAY_SVG_PARTS_H_
#define GPUALLOC_TOOLS_REPLAY_SVG_PARTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tools/layer.h"
#include "tools/replay/replay.h"
#include "tools/replay/svg.h"

namespace gpualloc::replay::svg_internal {

inline constexpr double kLeft = 130;  // room for the y axis labels
inline constexpr double kRight = 20;
inline constexpr double kPlotWidth = 1200;
inline constexpr double kLegendRow = 18;
inline constexpr double kTitleHeight = 24;
inline constexpr double kCaptionHeight = 48;
inline constexpr double kChartHeight = 70;
inline constexpr double kChartGap = 22;
inline constexpr double kAddressHeight = 420;
inline constexpr double kAxisHeight = 40;
inline constexpr double kPanelGap = 20;
inline constexpr double kPanelHeight = kTitleHeight + kCaptionHeight +
                                       kChartHeight + kChartGap +
                                       kAddressHeight + kAxisHeight + kPanelGap;
inline constexpr double kTotalWidth = kLeft + kPlotWidth + kRight;
inline constexpr std::size_t kMaxExactBlocks = 20000;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;

// A stream's hue (Tableau 10), in the order the streams are first seen.
inline constexpr const char* kStreamHues[] = {"#4e79a7", "#f28e2b", "#59a14f",
                                              "#e15759", "#76b7b2", "#edc948",
                                              "#b07aa1", "#9c755f"};
inline constexpr std::size_t kHues =
    sizeof(kStreamHues) / sizeof(kStreamHues[0]);
inline constexpr const char* kFree = "#e4e4e4";       // reserved, free
inline constexpr const char* kReservedLine = "#555";  // the chart's reserved
inline constexpr const char* kInUseLine = "#2b6cb0";  // the chart's in use
inline constexpr const char* kMergedFill = "#777";    // merged sub-pixel blocks

// The narrowest and flattest a block is drawn, in pixels: a 256-byte block
// in a region of gigabytes, or one living for one op of millions, still
// shows.
inline constexpr double kMinBlockPixels = 1.0;
// About how many intervals an axis is cut into (its ticks at a nice step).
inline constexpr double kAxisIntervals = 8;

// XML text: & < > " ' escaped, control characters replaced.
std::string Escape(absl::string_view text);
// "1.67 GiB", "148.0 MiB", "12.0 KiB", "100 B".
std::string Bytes(double bytes);

// The one unit of a panel's sizes: the y axis, the strip's scale and peak
// label, and the caption all use it, so that they compare at a glance.
struct Unit {
  const char* name = "B";  // "GiB", "MiB", "KiB" or "B"
  double bytes = 1;        // bytes in one unit
  int decimals = 0;        // shown: GiB 2, MiB and KiB 1, B 0
};
// The largest unit `largest` (the panel's largest size) reaches, at least B.
Unit UnitFor(std::uint64_t largest);
// `bytes` in `unit`: "6.0 MiB", "0.25 GiB".
std::string InUnit(double bytes, const Unit& unit);
// An axis label in `unit`: "0", "256 MiB", "1.5 GiB" (no trailing zeros).
std::string Offset(std::uint64_t bytes, const Unit& unit);
// The smallest "nice" step (1, 2 or 5 x 10^k) of at least `raw` (> 0); 1 for
// anything not above 0.
double NiceStep(double raw);

// How many times memory was given back to the device during the replay:
// unmapped (expandable regions) or freed (separate regions, platform mode).
// The replay's backend frees; for a timeline that has none (hand-made, or
// from a snapshot) the ops at which the regions alive shrank in all.
std::uint64_t Releases(const ReplayResult& r);

// Streams in the order of their values, each with its hue.
using StreamIndex = std::map<std::uint64_t, std::size_t>;
// "0", "1", ... or a stream handle in hex (snapshots).
std::string StreamName(std::uint64_t stream);

// Address bands: unions of overlapping regions, in address order; `offset`
// is the band's start on the y axis (the spans of the bands above).
struct Band {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::uint64_t offset = 0;
  double top = 0;  // pixels, relative to the address area
  double height = 0;
};

// What the legend must list, over every panel.
struct Present {
  StreamIndex streams;
  bool pending = false, asleep = false, outlines = false, merged = false;
};
// Whether the panel's regions are outlined: not an expandable range's mapped
// runs, which change size all the time (outlining every size would hide the
// blocks; the grey says what was mapped).
bool Outlined(const Timeline& t);
Present Survey(const std::vector<SvgPanel>& panels);

// The legend at the top of the picture. Returns its height.
double AppendLegend(const Present& p, std::string& out);

// The panel's caption, at most three lines: what it shows and what to look
// for; what the regions are and how many there were; the y extent (the
// bands' spans added up) against the peak reserved, and why they differ.
std::vector<std::string> Caption(const ReplayResult& r,
                                 const std::vector<Band>& bands,
                                 const Unit& unit);

// The chart of reserved and in-use bytes over the samples, with the peak
// reserved marked (`exact_peak`: the replay's own figure), its scale and
// label in `unit`.
void AppendChart(const Timeline& t, std::uint64_t exact_peak, double x0,
                 double y0, double xscale, const Unit& unit, std::string& out);

}  // namespace gpualloc::replay::svg_internal

#endif  // GPUALLOC_TOOLS_REPLAY_SVG_PARTS_H_
