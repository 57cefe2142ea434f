// SPDX-License-Identifier: Apache-2.0
// tools/replay/svg.cc: RenderSvg (see svg.h).
//
// Layout: a legend of the colours, once at the top; then per panel, top to
// bottom: the title; a caption of two lines (what the picture shows and what
// to look for; the y extent against the peak reserved, and the region
// count); a small chart of reserved and in-use bytes over the samples, with
// the peak reserved marked; the address area, where every band is a run of
// overlapping regions (regions that share addresses over time, e.g. a region
// returned and mapped again, share a band), bands stacked in address order
// with thin gaps, each band's height proportional to its span. The y axis is
// the offset into the bands (their spans added up, gaps left out), in the
// panel's one unit (the chart and caption use it too), ticked at 1, 2 or 5 x
// 10^k of it; the x axis is ticked the same way in ops; the addresses are in
// tooltips (<title>) of the band bars and blocks. Blocks are at least
// kMinBlockPixels each way.
//
// Colours mean something: an in-use block has its stream's hue (three shades
// alternating by id, so that neighbours stay apart); grey is reserved and
// free; white is not reserved at that moment; hatched amber is a free chunk
// still waiting for its stream's work, hatched violet a chunk asleep
// (snapshots only).
//
// Size: a rectangle costs ~80 bytes (~140 with its tooltip), so very large
// traces would give files the browser cannot open. Beyond kMaxExactBlocks
// blocks, a block narrower than one pixel is not drawn on its own: it marks
// the pixels it covers in a coverage grid, and covered pixels are drawn as
// merged grey runs per column; no block has a tooltip then. The picture says
// so.
#include "tools/replay/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "tools/replay/svg_parts.h"

namespace gpualloc::replay {
namespace {

using svg_internal::AppendChart;
using svg_internal::AppendLegend;
using svg_internal::Band;
using svg_internal::Bytes;
using svg_internal::Caption;
using svg_internal::Escape;
using svg_internal::kAddressHeight;
using svg_internal::kAxisIntervals;
using svg_internal::kCaptionHeight;
using svg_internal::kChartGap;
using svg_internal::kChartHeight;
using svg_internal::kFree;
using svg_internal::kHues;
using svg_internal::kLeft;
using svg_internal::kMaxExactBlocks;
using svg_internal::kMergedFill;
using svg_internal::kMinBlockPixels;
using svg_internal::kPanelHeight;
using svg_internal::kPlotWidth;
using svg_internal::kStreamHues;
using svg_internal::kTitleHeight;
using svg_internal::kTotalWidth;
using svg_internal::NiceStep;
using svg_internal::Offset;
using svg_internal::Outlined;
using svg_internal::Present;
using svg_internal::StreamIndex;
using svg_internal::StreamName;
using svg_internal::Survey;
using svg_internal::Unit;
using svg_internal::UnitFor;

// `color` (#rrggbb) moved towards white (f > 0) or black (f < 0).
std::string Shade(absl::string_view color, double f) {
  std::string out = "#";
  for (int i = 0; i < 3; ++i) {
    int v = 0;
    for (char c : color.substr(1 + 2 * i, 2)) {
      v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    const double target = f > 0 ? 255.0 : 0.0;
    const double mixed = v + (target - v) * std::fabs(f);
    absl::StrAppendFormat(&out, "%02x", static_cast<int>(std::lround(mixed)));
  }
  return out;
}

// An in-use block's colour: its stream's hue in one of three shades by id,
// the same in every panel (configurations stay comparable).
std::string ColorOf(const TimelineBlock& b, const StreamIndex& streams) {
  auto it = streams.find(b.stream);
  const std::size_t hue = it == streams.end() ? 0 : it->second % kHues;
  static constexpr double kShades[] = {0.0, 0.35, -0.25};
  return Shade(kStreamHues[hue], kShades[b.id % 3]);
}

std::string FillOf(const TimelineBlock& b, const StreamIndex& streams) {
  switch (b.state) {
    case TimelineBlock::State::kFreePending:
      return "url(#pending)";
    case TimelineBlock::State::kAsleep:
      return "url(#asleep)";
    case TimelineBlock::State::kInUse:
      break;
  }
  return ColorOf(b, streams);
}

std::vector<Band> MakeBands(const std::vector<TimelineRegion>& regions) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const TimelineRegion& r : regions) {
    if (r.size > 0) spans.emplace_back(r.base, r.base + r.size);
  }
  std::sort(spans.begin(), spans.end());
  std::vector<Band> bands;
  for (const auto& [lo, hi] : spans) {
    // Touching regions share a band too: an allocator growing by many small
    // regions placed back to back would otherwise get hundreds of bands.
    if (!bands.empty() && lo <= bands.back().hi) {
      bands.back().hi = std::max(bands.back().hi, hi);
    } else {
      bands.push_back(Band{lo, hi, 0, 0, 0});
    }
  }
  if (bands.empty()) return bands;
  // Gaps take at most a fifth of the height; every band gets at least a
  // pixel, so that a small region far from the others is still seen.
  const double gap =
      std::min(4.0, kAddressHeight * 0.2 / static_cast<double>(bands.size()));
  const double usable =
      kAddressHeight - gap * static_cast<double>(bands.size() - 1);
  double total = 0;
  for (const Band& b : bands) total += static_cast<double>(b.hi - b.lo);
  double y = 0;
  std::uint64_t offset = 0;
  for (Band& b : bands) {
    b.height = std::max(1.0, usable * static_cast<double>(b.hi - b.lo) / total);
    b.top = y;
    b.offset = offset;
    offset += b.hi - b.lo;
    y += b.height + gap;
  }
  // Minimum heights may overshoot; squeeze everything back in.
  if (y - gap > kAddressHeight) {
    const double k = kAddressHeight / (y - gap);
    for (Band& b : bands) {
      b.top *= k;
      b.height *= k;
    }
  }
  return bands;
}

// The band holding [address, address + size), or nullptr (a block outside
// every region: the timeline is inconsistent; it is left out, not guessed).
const Band* BandOf(const std::vector<Band>& bands, std::uint64_t address) {
  auto it =
      std::upper_bound(bands.begin(), bands.end(), address,
                       [](std::uint64_t a, const Band& b) { return a < b.lo; });
  if (it == bands.begin()) return nullptr;
  --it;
  if (address >= it->hi) return nullptr;
  return &*it;
}

double YOf(const Band& b, std::uint64_t address) {
  return b.top + b.height * static_cast<double>(address - b.lo) /
                     static_cast<double>(b.hi - b.lo);
}

// The y axis: the offset into the bands at evenly spaced bytes, and a bar per
// band whose tooltip names its addresses.
void AppendYAxis(const std::vector<Band>& bands, double area_y,
                 const Unit& unit, std::string& out) {
  for (std::size_t i = 0; i < bands.size(); ++i) {
    const Band& b = bands[i];
    absl::StrAppendFormat(
        &out,
        "<rect x=\"%.1f\" y=\"%.2f\" width=\"4\" height=\"%.2f\" "
        "fill=\"#888\"><title>range %d of %d: 0x%x to 0x%x (%s), offsets %s "
        "to %s</title></rect>\n",
        kLeft - 6, area_y + b.top, std::max(0.5, b.height), i + 1, bands.size(),
        b.lo, b.hi, Escape(Bytes(static_cast<double>(b.hi - b.lo))),
        Offset(b.offset, unit), Offset(b.offset + (b.hi - b.lo), unit));
  }
  if (bands.empty()) return;
  const std::uint64_t total =
      bands.back().offset + (bands.back().hi - bands.back().lo);
  // Ticks at a nice step (1, 2 or 5 x 10^k) of the panel's unit.
  const double step =
      NiceStep(static_cast<double>(total) / unit.bytes / kAxisIntervals);
  double last = -1e9;
  std::size_t k = 0;
  for (std::uint64_t i = 0;; ++i) {
    const std::uint64_t at = static_cast<std::uint64_t>(
        std::llround(static_cast<double>(i) * step * unit.bytes));
    if (at > total) break;
    while (k + 1 < bands.size() && bands[k + 1].offset <= at) ++k;
    const Band& b = bands[k];
    const std::uint64_t into =
        std::min<std::uint64_t>(at - b.offset, b.hi - b.lo);
    const double y =
        area_y + b.top +
        b.height * static_cast<double>(into) / static_cast<double>(b.hi - b.lo);
    if (y - last < 12) continue;
    last = y;
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" "
                          "y2=\"%.2f\" stroke=\"#555\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" "
                          "text-anchor=\"end\">%s</text>\n",
                          kLeft - 12, y, kLeft - 8, y, kLeft - 14, y + 4,
                          Offset(at, unit));
  }
}

// One unit for a panel's sizes: its largest, of the y extent, the peak
// reserved and the strip's samples.
Unit PanelUnit(const ReplayResult& result, const std::vector<Band>& bands) {
  const Timeline& t = result.timeline;
  std::uint64_t largest = result.peak_bytes_reserved;
  std::uint64_t span = 0;
  for (const Band& b : bands) span += b.hi - b.lo;
  largest = std::max(largest, span);
  for (std::uint64_t v : t.sample_reserved) largest = std::max(largest, v);
  for (std::uint64_t v : t.sample_in_use) largest = std::max(largest, v);
  return UnitFor(largest);
}

// Each region's box over its lifetime, drawn twice: grey under the blocks,
// outlined above them (but for an expandable range's runs).
struct Box {
  double x, y, w, h;
};

std::vector<Box> RegionBoxes(const Timeline& t, const std::vector<Band>& bands,
                             double area_y, double xscale) {
  std::vector<Box> boxes;
  boxes.reserve(t.regions.size());
  for (const TimelineRegion& reg : t.regions) {
    const Band* band = BandOf(bands, reg.base);
    if (band == nullptr) continue;
    const std::uint64_t to = std::max(reg.to_op, reg.from_op + 1);
    const double y = YOf(*band, reg.base);
    const double h = YOf(*band, std::min(band->hi, reg.base + reg.size)) - y;
    boxes.push_back({kLeft + static_cast<double>(reg.from_op) * xscale,
                     area_y + y, static_cast<double>(to - reg.from_op) * xscale,
                     h});
  }
  return boxes;
}

// What the blocks' drawing left out of the picture, for its note.
struct BlockCounts {
  std::uint64_t merged = 0;   // narrower than a pixel, drawn merged
  std::uint64_t outside = 0;  // outside every region
};

// Beyond kMaxExactBlocks blocks, the pixels the narrow ones cover: a column
// per pixel of the plot's width, a row per pixel of its height.
struct Coverage {
  int columns = static_cast<int>(kPlotWidth);
  int rows = static_cast<int>(kAddressHeight);
  std::vector<std::uint8_t> grid;

  void Mark(double x, double y, double h) {
    const int c = std::clamp(static_cast<int>(x), 0, columns - 1);
    const int r0 = std::clamp(static_cast<int>(y), 0, rows - 1);
    const int r1 = std::clamp(static_cast<int>(std::ceil(y + h)), r0 + 1, rows);
    for (int r = r0; r < r1; ++r) {
      grid[static_cast<std::size_t>(c) * rows + r] = 1;
    }
  }
};

// One block drawn on its own, with its addresses in a tooltip unless the
// blocks are merged.
void AppendBlock(const TimelineBlock& blk, const Band& band, double x, double w,
                 double y, double h, double area_y, bool merge,
                 const StreamIndex& streams, std::string& out) {
  // Tiny rectangles: a stroke would be all there is to see of them.
  const bool stroke = w >= 3 && h >= 3;
  // Every block shows: at least kMinBlockPixels each way, kept inside the
  // plot and its band (a small block at the end of either grows back).
  const double dw = std::max(w, kMinBlockPixels);
  const double dh = std::max(h, kMinBlockPixels);
  const double dx = std::max(0.0, std::min(x, kPlotWidth - dw));
  const double dy =
      std::max(band.top, std::min(y, band.top + band.height - dh));
  absl::StrAppendFormat(&out,
                        "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                        "height=\"%.2f\" fill=\"%s\"%s",
                        kLeft + dx, area_y + dy, dw, dh, FillOf(blk, streams),
                        stroke ? " class=\"k\"" : "");
  if (merge) {
    out += "/>\n";
    return;
  }
  absl::StrAppendFormat(
      &out, "><title>0x%x, %s, ops %d to %d%s%s</title></rect>\n", blk.address,
      Escape(Bytes(static_cast<double>(blk.size))), blk.alloc_op, blk.free_op,
      streams.size() > 1 ? absl::StrCat(", stream ", StreamName(blk.stream))
                         : "",
      blk.state == TimelineBlock::State::kFreePending
          ? ", free, waiting for the stream"
      : blk.state == TimelineBlock::State::kAsleep ? ", asleep"
                                                   : "");
}

// The covered pixels as merged grey runs per column.
void AppendCoverage(const Coverage& cov, double area_y, std::string& out) {
  for (int c = 0; c < cov.columns; ++c) {
    int r = 0;
    while (r < cov.rows) {
      if (cov.grid[static_cast<std::size_t>(c) * cov.rows + r] == 0) {
        ++r;
        continue;
      }
      int e = r;
      while (e < cov.rows &&
             cov.grid[static_cast<std::size_t>(c) * cov.rows + e] != 0) {
        ++e;
      }
      absl::StrAppendFormat(&out,
                            "<rect x=\"%d\" y=\"%.0f\" width=\"1\" "
                            "height=\"%d\" fill=\"%s\"/>\n",
                            static_cast<int>(kLeft) + c, area_y + r, e - r,
                            kMergedFill);
      r = e;
    }
  }
}

// Blocks, each with its addresses in a tooltip when drawn on its own.
BlockCounts AppendBlocks(const Timeline& t, const std::vector<Band>& bands,
                         double area_y, double xscale,
                         const StreamIndex& streams, std::string& out) {
  const bool merge = t.blocks.size() > kMaxExactBlocks;
  Coverage cov;
  if (merge)
    cov.grid.assign(static_cast<std::size_t>(cov.columns) * cov.rows, 0);
  BlockCounts counts;
  out += "<g>\n";
  for (const TimelineBlock& blk : t.blocks) {
    const Band* band = BandOf(bands, blk.address);
    if (band == nullptr) {
      ++counts.outside;
      continue;
    }
    const std::uint64_t end_op = std::max(blk.free_op, blk.alloc_op + 1);
    const double x = static_cast<double>(blk.alloc_op) * xscale;
    const double w = static_cast<double>(end_op - blk.alloc_op) * xscale;
    const double y = YOf(*band, blk.address);
    const std::uint64_t last =
        std::min(band->hi, blk.address + std::max<std::uint64_t>(1, blk.size));
    const double h = YOf(*band, last) - y;
    if (merge && w < 1.0) {
      ++counts.merged;
      cov.Mark(x, y, h);
      continue;
    }
    AppendBlock(blk, *band, x, w, y, h, area_y, merge, streams, out);
  }
  if (merge) AppendCoverage(cov, area_y, out);
  out += "</g>\n";
  return counts;
}

// Region outlines over their lifetimes, dashed, on top of the blocks. An
// outline only a few pixels tall would be a black smear hiding the blocks;
// those regions still show as the grey underneath. Returns how many were too
// thin.
std::uint64_t AppendOutlines(const Timeline& t, const std::vector<Box>& boxes,
                             std::string& out) {
  std::uint64_t thin_regions = 0;
  for (const Box& b : boxes) {
    if (!Outlined(t)) break;
    if (b.h < 4) {
      ++thin_regions;
      continue;
    }
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" class=\"r\"/>\n",
                          b.x, b.y, b.w, std::max(b.h, 0.5));
  }
  return thin_regions;
}

// The x ticks are at a nice step (1, 2 or 5 x 10^k ops), evenly spaced from
// 0, up to the last op.
void AppendXAxis(const Timeline& t, double num_ops, double xscale,
                 double axis_y, std::string& out) {
  const std::uint64_t x_step = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(
             std::llround(NiceStep(num_ops / kAxisIntervals))));
  for (std::uint64_t op = 0; op <= t.num_ops; op += x_step) {
    const double x = kLeft + static_cast<double>(op) * xscale;
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                          "y2=\"%.1f\" stroke=\"#555\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" "
                          "text-anchor=\"middle\">%d</text>\n",
                          x, axis_y, x, axis_y + 4, x, axis_y + 15, op);
  }
}

// The axes' labels, and the note of what the picture left out or merged.
void AppendAxisLabels(const Timeline& t, std::size_t num_bands,
                      const BlockCounts& counts, std::uint64_t thin_regions,
                      double area_y, std::string& out) {
  const double axis_y = area_y + kAddressHeight;
  std::string note = absl::StrFormat("%d blocks", t.blocks.size());
  if (counts.merged > 0) {
    absl::StrAppendFormat(&note,
                          "; %d blocks narrower than a pixel drawn merged "
                          "(grey)",
                          counts.merged);
  }
  if (thin_regions > 0) {
    absl::StrAppendFormat(&note, "; %d regions too thin to outline",
                          thin_regions);
  }
  if (counts.outside > 0) {
    absl::StrAppendFormat(&note, "; %d blocks outside every region left out",
                          counts.outside);
  }
  absl::StrAppendFormat(&out,
                        "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" "
                        "text-anchor=\"middle\">operation index (alloc and "
                        "free ops of the trace)</text>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" class=\"s\">%s</text>\n",
                        kLeft + kPlotWidth / 2, axis_y + 30, kLeft, axis_y + 30,
                        Escape(note));
  absl::StrAppendFormat(
      &out,
      "<text class=\"s\" text-anchor=\"middle\" transform=\"translate(%.1f "
      "%.1f) rotate(-90)\">%s</text>\n",
      12.0, area_y + kAddressHeight / 2,
      num_bands > 1 ? "bytes into the address ranges, stacked in address "
                      "order (gaps not to scale)"
                    : "bytes into the address range, growing down");
}

// The address area's frame, with a line when there is nothing to draw in it.
void AppendAddressFrame(const Timeline& t, const std::vector<Band>& bands,
                        double area_y, std::string& out) {
  absl::StrAppendFormat(&out,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                        "height=\"%.1f\" fill=\"#fcfcfc\" stroke=\"#bbb\"/>\n",
                        kLeft, area_y, kPlotWidth, kAddressHeight);
  if (bands.empty() || t.blocks.empty()) {
    absl::StrAppendFormat(
        &out, "<text x=\"%.1f\" y=\"%.1f\" class=\"s\">%s</text>\n", kLeft + 8,
        area_y + 20,
        t.num_ops == 0 && t.blocks.empty()
            ? "empty timeline (none recorded, or an empty trace)"
        : bands.empty() ? "no regions reserved"
                        : "no blocks");
  }
}

void AppendPanel(const SvgPanel& panel, double y0, const StreamIndex& streams,
                 std::string& out) {
  absl::StrAppendFormat(&out,
                        "<text x=\"%.1f\" y=\"%.1f\" class=\"t\">%s</text>\n",
                        kLeft, y0 + 18, Escape(panel.title));
  const double caption_y = y0 + kTitleHeight;
  const double chart_y = caption_y + kCaptionHeight;
  const double area_y = chart_y + kChartHeight + kChartGap;
  if (panel.result == nullptr) {
    absl::StrAppendFormat(&out,
                          "<text x=\"%.1f\" y=\"%.1f\" class=\"s\">no "
                          "result</text>\n",
                          kLeft, area_y + 20);
    return;
  }
  const Timeline& t = panel.result->timeline;
  const double num_ops =
      static_cast<double>(std::max<std::uint64_t>(1, t.num_ops));
  const double xscale = kPlotWidth / num_ops;
  const std::vector<Band> bands = MakeBands(t.regions);
  const Unit unit = PanelUnit(*panel.result, bands);
  if (!bands.empty()) {
    const std::vector<std::string> lines = Caption(*panel.result, bands, unit);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      absl::StrAppendFormat(
          &out, "<text x=\"%.1f\" y=\"%.1f\" class=\"c\">%s</text>\n", kLeft,
          caption_y + 10 + 14 * static_cast<double>(i), Escape(lines[i]));
    }
  }
  AppendChart(t, panel.result->peak_bytes_reserved, kLeft, chart_y, xscale,
              unit, out);
  AppendAddressFrame(t, bands, area_y, out);
  AppendYAxis(bands, area_y, unit, out);

  // Reserved memory over its lifetime, light grey under the blocks: grey
  // without a block is reserved but free, the fragmentation to be seen.
  const std::vector<Box> boxes = RegionBoxes(t, bands, area_y, xscale);
  for (const Box& b : boxes) {
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" class=\"g\"/>\n",
                          b.x, b.y, b.w, std::max(b.h, 0.5));
  }
  const BlockCounts counts =
      AppendBlocks(t, bands, area_y, xscale, streams, out);
  const std::uint64_t thin_regions = AppendOutlines(t, boxes, out);
  AppendXAxis(t, num_ops, xscale, area_y + kAddressHeight, out);
  AppendAxisLabels(t, bands.size(), counts, thin_regions, area_y, out);
}

}  // namespace

std::string RenderSvg(const std::vector<SvgPanel>& panels) {
  const Present present = Survey(panels);
  std::string legend;
  const double legend_height = AppendLegend(present, legend);
  const double height =
      legend_height +
      std::max<double>(1, static_cast<double>(panels.size())) * kPanelHeight;
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
      "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n"
      "<style>.t{font:bold 14px sans-serif}.s{font:11px sans-serif;"
      "fill:#222}.c{font:italic 11px sans-serif;fill:#444}"
      ".k{stroke:#000;stroke-opacity:0.35;stroke-width:0.5}"
      ".g{fill:%s}.r{fill:none;stroke:#333;stroke-width:0.8;stroke-"
      "dasharray:4 3}"
      "</style>\n"
      "<defs><pattern id=\"pending\" width=\"6\" height=\"6\" "
      "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
      "<rect width=\"6\" height=\"6\" fill=\"#fde8b0\"/><rect width=\"3\" "
      "height=\"6\" fill=\"#e0a020\"/></pattern>"
      "<pattern id=\"asleep\" width=\"6\" height=\"6\" "
      "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(-45)\">"
      "<rect width=\"6\" height=\"6\" fill=\"#ece4f6\"/><rect width=\"3\" "
      "height=\"6\" fill=\"#9b7fc4\"/></pattern></defs>\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
      kTotalWidth, height, kTotalWidth, height, kFree);
  out += legend;
  if (panels.empty()) {
    absl::StrAppendFormat(&out,
                          "<text x=\"%.1f\" y=\"%.1f\" class=\"s\">nothing to "
                          "draw</text>\n",
                          kLeft, legend_height + 30);
  }
  for (std::size_t i = 0; i < panels.size(); ++i) {
    AppendPanel(panels[i],
                legend_height + static_cast<double>(i) * kPanelHeight,
                present.streams, out);
  }
  out += "</svg>\n";
  return out;
}

}  // namespace gpualloc::replay
