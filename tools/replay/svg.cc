// tools/replay/svg.cc: RenderSvg (see svg.h).
//
// Layout of one panel, top to bottom: the title; a small chart of reserved
// and in-use bytes over the samples, with the peak reserved marked; the
// address area, where every band is a run of overlapping regions (regions
// that share addresses over time, e.g. a region returned and mapped again,
// share a band), bands stacked in address order with thin gaps, each band's
// height proportional to its span. Addresses grow downwards inside a band.
//
// Size: a rectangle costs ~80 bytes, so very large traces would give files
// the browser cannot open. Beyond kMaxExactBlocks blocks, a block narrower
// than one pixel is not drawn on its own: it marks the pixels it covers in a
// coverage grid, and covered pixels are drawn as merged grey runs per column.
// The picture says so.
#include "tools/replay/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace gpualloc::replay {
namespace {

constexpr double kLeft = 130;  // room for band labels
constexpr double kRight = 20;
constexpr double kPlotWidth = 1200;
constexpr double kTitleHeight = 26;
constexpr double kChartHeight = 70;
constexpr double kChartGap = 22;
constexpr double kAddressHeight = 420;
constexpr double kAxisHeight = 40;
constexpr double kPanelGap = 20;
constexpr double kPanelHeight = kTitleHeight + kChartHeight + kChartGap +
                                kAddressHeight + kAxisHeight + kPanelGap;
constexpr double kTotalWidth = kLeft + kPlotWidth + kRight;
constexpr std::size_t kMaxExactBlocks = 20000;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Escape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 at all.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string Bytes(double bytes) {
  if (bytes >= kGiB) return absl::StrFormat("%.2f GiB", bytes / kGiB);
  if (bytes >= 1024.0 * 1024.0) {
    return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
  }
  if (bytes >= 1024.0) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%.0f B", bytes);
}

// A colour per id, stable between runs and pictures: the same allocation has
// the same colour in every panel, which makes configurations comparable.
std::string ColorOf(std::uint64_t id) {
  std::uint64_t h = id * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  // HSL with fixed saturation and lightness, so that no block is too pale to
  // see on white or too dark to tell from its neighbours.
  const double hue = static_cast<double>(h % 360);
  const double s = 0.55 + 0.25 * static_cast<double>((h >> 12) % 2);
  const double l = 0.48 + 0.12 * static_cast<double>((h >> 20) % 2);
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double x = c * (1 - std::fabs(std::fmod(hue / 60.0, 2.0) - 1));
  const double m = l - c / 2;
  double r = 0, g = 0, b = 0;
  if (hue < 60) {
    r = c, g = x;
  } else if (hue < 120) {
    r = x, g = c;
  } else if (hue < 180) {
    g = c, b = x;
  } else if (hue < 240) {
    g = x, b = c;
  } else if (hue < 300) {
    r = x, b = c;
  } else {
    r = c, b = x;
  }
  const auto to = [m](double v) {
    return static_cast<int>(std::lround((v + m) * 255));
  };
  return absl::StrFormat("#%02x%02x%02x", to(r), to(g), to(b));
}

// Address bands: unions of overlapping regions, in address order.
struct Band {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  double top = 0;  // pixels, relative to the address area
  double height = 0;
};

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
      bands.push_back(Band{lo, hi, 0, 0});
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
  for (Band& b : bands) {
    b.height = std::max(1.0, usable * static_cast<double>(b.hi - b.lo) / total);
    b.top = y;
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

// `exact_peak`: the replay's peak reserved; the samples may fall between the
// moments it was reached (platform mode frees at once), so the label says the
// exact value and the dot sits on the highest sample.
void AppendChart(const Timeline& t, std::uint64_t exact_peak, double x0,
                 double y0, double xscale, std::string& out) {
  absl::StrAppendFormat(&out,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                        "height=\"%.1f\" fill=\"#f6f6f6\" stroke=\"#ccc\"/>\n",
                        x0, y0, kPlotWidth, kChartHeight);
  const std::size_t n = std::min(
      {t.sample_ops.size(), t.sample_reserved.size(), t.sample_in_use.size()});
  if (n == 0) {
    absl::StrAppendFormat(&out,
                          "<text x=\"%.1f\" y=\"%.1f\" class=\"s\">no "
                          "samples</text>\n",
                          x0 + 6, y0 + 16);
    return;
  }
  std::uint64_t top = std::max<std::uint64_t>(1, exact_peak);
  std::size_t peak = 0;
  for (std::size_t i = 0; i < n; ++i) {
    top = std::max({top, t.sample_reserved[i], t.sample_in_use[i]});
    if (t.sample_reserved[i] > t.sample_reserved[peak]) peak = i;
  }
  const double ys = (kChartHeight - 6) / static_cast<double>(top);
  const auto line = [&](const std::vector<std::uint64_t>& v,
                        absl::string_view color) {
    absl::StrAppendFormat(&out,
                          "<polyline fill=\"none\" stroke=\"%s\" "
                          "stroke-width=\"1.5\" points=\"",
                          color);
    for (std::size_t i = 0; i < n; ++i) {
      absl::StrAppendFormat(&out, "%s%.1f,%.1f", i == 0 ? "" : " ",
                            x0 + static_cast<double>(t.sample_ops[i]) * xscale,
                            y0 + kChartHeight - static_cast<double>(v[i]) * ys);
    }
    out += "\"/>\n";
  };
  line(t.sample_reserved, "#1f5fbf");
  line(t.sample_in_use, "#e07b00");
  const double px = x0 + static_cast<double>(t.sample_ops[peak]) * xscale;
  const double py =
      y0 + kChartHeight - static_cast<double>(t.sample_reserved[peak]) * ys;
  absl::StrAppendFormat(
      &out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#1f5fbf\"/>\n", px,
      py);
  // The label sits on the side of the peak with more room.
  const bool left = px > x0 + kPlotWidth * 0.7;
  absl::StrAppendFormat(
      &out,
      "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" text-anchor=\"%s\">peak "
      "reserved %.2f GiB</text>\n",
      left ? px - 6 : px + 6, std::max(py + 4, y0 + 12), left ? "end" : "start",
      static_cast<double>(std::max(exact_peak, t.sample_reserved[peak])) /
          kGiB);
  // Legend and scale.
  absl::StrAppendFormat(
      &out,
      "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" text-anchor=\"end\">"
      "<tspan fill=\"#1f5fbf\">reserved</tspan> / <tspan "
      "fill=\"#e07b00\">in use</tspan></text>\n",
      x0 - 6, y0 + 12);
  absl::StrAppendFormat(&out,
                        "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" "
                        "text-anchor=\"end\">%s</text>\n",
                        x0 - 6, y0 + 26,
                        Escape(Bytes(static_cast<double>(top))));
}

void AppendPanel(const SvgPanel& panel, double y0, std::string& out) {
  absl::StrAppendFormat(&out,
                        "<text x=\"%.1f\" y=\"%.1f\" class=\"t\">%s</text>\n",
                        kLeft, y0 + 18, Escape(panel.title));
  const double chart_y = y0 + kTitleHeight;
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
  AppendChart(t, panel.result->peak_bytes_reserved, kLeft, chart_y, xscale,
              out);

  absl::StrAppendFormat(&out,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                        "height=\"%.1f\" fill=\"#fcfcfc\" stroke=\"#bbb\"/>\n",
                        kLeft, area_y, kPlotWidth, kAddressHeight);
  const std::vector<Band> bands = MakeBands(t.regions);
  if (bands.empty() || t.blocks.empty()) {
    absl::StrAppendFormat(
        &out, "<text x=\"%.1f\" y=\"%.1f\" class=\"s\">%s</text>\n", kLeft + 8,
        area_y + 20,
        t.num_ops == 0 && t.blocks.empty()
            ? "empty timeline (none recorded, or an empty trace)"
        : bands.empty() ? "no regions reserved"
                        : "no blocks");
  }

  // Band labels: base address and span, on the left.
  const double label_min_gap = 11;
  double last_label = -1e9;
  for (const Band& b : bands) {
    const double y = area_y + b.top;
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.1f\" y=\"%.2f\" width=\"4\" "
                          "height=\"%.2f\" fill=\"#888\"/>\n",
                          kLeft - 6, y, std::max(0.5, b.height));
    if (y - last_label >= label_min_gap) {
      absl::StrAppendFormat(&out,
                            "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" "
                            "text-anchor=\"end\">0x%x</text>\n",
                            kLeft - 9, y + 9, b.lo);
      last_label = y;
      if (b.height >= 2 * label_min_gap) {
        absl::StrAppendFormat(&out,
                              "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" "
                              "text-anchor=\"end\">%s</text>\n",
                              kLeft - 9, y + 20,
                              Escape(Bytes(static_cast<double>(b.hi - b.lo))));
        last_label = y + 11;
      }
    }
  }

  // Reserved memory over its lifetime, light grey under the blocks: grey
  // without a block is reserved but free, the fragmentation to be seen.
  // Each region's box over its lifetime, drawn twice: grey under the blocks,
  // outlined above them.
  struct Box {
    double x, y, w, h;
  };
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
  for (const Box& b : boxes) {
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" class=\"g\"/>\n",
                          b.x, b.y, b.w, std::max(b.h, 0.5));
  }

  // Blocks.
  const bool merge = t.blocks.size() > kMaxExactBlocks;
  const int columns = static_cast<int>(kPlotWidth);
  const int rows = static_cast<int>(kAddressHeight);
  std::vector<std::uint8_t> grid;
  if (merge) grid.assign(static_cast<std::size_t>(columns) * rows, 0);
  std::uint64_t merged = 0;
  std::uint64_t outside = 0;
  out += "<g>\n";
  for (const TimelineBlock& blk : t.blocks) {
    const Band* band = BandOf(bands, blk.address);
    if (band == nullptr) {
      ++outside;
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
      ++merged;
      const int c = std::clamp(static_cast<int>(x), 0, columns - 1);
      const int r0 = std::clamp(static_cast<int>(y), 0, rows - 1);
      const int r1 =
          std::clamp(static_cast<int>(std::ceil(y + h)), r0 + 1, rows);
      for (int r = r0; r < r1; ++r) {
        grid[static_cast<std::size_t>(c) * rows + r] = 1;
      }
      continue;
    }
    // Tiny rectangles: a stroke would be all there is to see of them.
    const bool stroke = w >= 3 && h >= 3;
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" fill=\"%s\"%s/>\n",
                          kLeft + x, area_y + y, std::max(w, 0.3),
                          std::max(h, 0.3), ColorOf(blk.id),
                          stroke ? " class=\"k\"" : "");
  }
  if (merge) {
    for (int c = 0; c < columns; ++c) {
      int r = 0;
      while (r < rows) {
        if (grid[static_cast<std::size_t>(c) * rows + r] == 0) {
          ++r;
          continue;
        }
        int e = r;
        while (e < rows && grid[static_cast<std::size_t>(c) * rows + e] != 0) {
          ++e;
        }
        absl::StrAppendFormat(&out,
                              "<rect x=\"%d\" y=\"%.0f\" width=\"1\" "
                              "height=\"%d\" fill=\"#777\"/>\n",
                              static_cast<int>(kLeft) + c, area_y + r, e - r);
        r = e;
      }
    }
  }
  out += "</g>\n";

  // Region outlines over their lifetimes, dashed, on top of the blocks. An
  // outline only a few pixels tall would be a black smear hiding the blocks;
  // those regions still show as the grey underneath.
  std::uint64_t thin_regions = 0;
  for (const Box& b : boxes) {
    if (b.h < 4) {
      ++thin_regions;
      continue;
    }
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" class=\"r\"/>\n",
                          b.x, b.y, b.w, std::max(b.h, 0.5));
  }

  // Axes.
  const double axis_y = area_y + kAddressHeight;
  for (int i = 0; i <= 4; ++i) {
    const double x = kLeft + kPlotWidth * i / 4.0;
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                          "y2=\"%.1f\" stroke=\"#555\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" "
                          "text-anchor=\"middle\">%d</text>\n",
                          x, axis_y, x, axis_y + 4, x, axis_y + 15,
                          static_cast<std::uint64_t>(std::llround(
                              static_cast<double>(t.num_ops) * i / 4.0)));
  }
  std::string note = absl::StrFormat("%d blocks, %d regions", t.blocks.size(),
                                     t.regions.size());
  if (merged > 0) {
    absl::StrAppendFormat(&note,
                          "; %d blocks narrower than a pixel drawn merged "
                          "(grey)",
                          merged);
  }
  if (thin_regions > 0) {
    absl::StrAppendFormat(&note, " (%d too thin to outline; grey = reserved)",
                          thin_regions);
  }
  if (outside > 0) {
    absl::StrAppendFormat(&note, "; %d blocks outside every region left out",
                          outside);
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
      "%.1f) rotate(-90)\">address (regions in address order, growing "
      "down)</text>\n",
      12.0, area_y + kAddressHeight / 2);
}

}  // namespace

std::string RenderSvg(const std::vector<SvgPanel>& panels) {
  const double height =
      std::max<double>(1, static_cast<double>(panels.size())) * kPanelHeight;
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
      "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n"
      "<style>.t{font:bold 14px sans-serif}.s{font:11px sans-serif;"
      "fill:#222}.k{stroke:#000;stroke-opacity:0.35;stroke-width:0.5}"
      ".g{fill:#e4e4e4}.r{fill:none;stroke:#333;stroke-width:0.8;stroke-"
      "dasharray:4 3}"
      "</style>\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
      kTotalWidth, height, kTotalWidth, height);
  if (panels.empty()) {
    absl::StrAppendFormat(&out,
                          "<text x=\"%.1f\" y=\"40\" class=\"s\">nothing to "
                          "draw</text>\n",
                          kLeft);
  }
  for (std::size_t i = 0; i < panels.size(); ++i) {
    AppendPanel(panels[i], static_cast<double>(i) * kPanelHeight, out);
  }
  out += "</svg>\n";
  return out;
}

}  // namespace gpualloc::replay
