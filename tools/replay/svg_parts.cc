// SPDX-License-Identifier: Apache-2.0
// tools/replay/svg_parts.cc: see svg_parts.h.
#include "tools/replay/svg_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"

namespace gpualloc::replay::svg_internal {

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
  if (bytes >= kMiB) return absl::StrFormat("%.1f MiB", bytes / kMiB);
  if (bytes >= 1024.0) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%.0f B", bytes);
}

Unit UnitFor(std::uint64_t largest) {
  const double b = static_cast<double>(largest);
  if (b >= kGiB) return Unit{"GiB", kGiB, 2};
  if (b >= kMiB) return Unit{"MiB", kMiB, 1};
  if (b >= 1024.0) return Unit{"KiB", 1024.0, 1};
  return Unit{};
}

std::string InUnit(double bytes, const Unit& unit) {
  return absl::StrFormat("%.*f %s", unit.decimals, bytes / unit.bytes,
                         unit.name);
}

std::string Offset(std::uint64_t bytes, const Unit& unit) {
  if (bytes == 0) return "0";
  std::string text = absl::StrFormat("%.*f", unit.decimals,
                                     static_cast<double>(bytes) / unit.bytes);
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  return absl::StrCat(text, " ", unit.name);
}

double NiceStep(double raw) {
  if (!(raw > 0)) return 1;
  double step = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    // A little slack: 0.3 / 0.1 must not come out as 2.9999 steps.
    if (m * step >= raw * (1 - 1e-9)) return m * step;
  }
  return 10 * step;
}

std::uint64_t Releases(const ReplayResult& r) {
  if (r.backend_frees > 0) return r.backend_frees;
  const Timeline& t = r.timeline;
  // Net change of the bytes the regions hold, per op where one ends.
  std::map<std::uint64_t, std::int64_t> change;
  for (const TimelineRegion& g : t.regions) {
    if (g.to_op >= t.num_ops) continue;  // alive to the end
    change[g.to_op] -= static_cast<std::int64_t>(g.size);
  }
  for (const TimelineRegion& g : t.regions) {
    auto it = change.find(g.from_op);
    if (it != change.end()) it->second += static_cast<std::int64_t>(g.size);
  }
  std::uint64_t shrank = 0;
  for (const auto& [op, delta] : change) shrank += delta < 0 ? 1 : 0;
  return shrank;
}

std::string StreamName(std::uint64_t stream) {
  return stream < 4096 ? absl::StrCat(stream) : absl::StrFormat("0x%x", stream);
}

bool Outlined(const Timeline& t) {
  // An expandable range's mapped runs change size all the time: outlining
  // every size would hide the blocks, and the grey says what was mapped.
  return !t.expandable && !t.regions.empty();
}

Present Survey(const std::vector<SvgPanel>& panels) {
  Present p;
  std::set<std::uint64_t> streams;
  for (const SvgPanel& panel : panels) {
    if (panel.result == nullptr) continue;
    const Timeline& t = panel.result->timeline;
    for (const TimelineBlock& b : t.blocks) {
      if (b.state == TimelineBlock::State::kInUse) streams.insert(b.stream);
      p.pending |= b.state == TimelineBlock::State::kFreePending;
      p.asleep |= b.state == TimelineBlock::State::kAsleep;
    }
    p.outlines |= Outlined(t);
    p.merged |= t.blocks.size() > kMaxExactBlocks;
  }
  for (std::uint64_t s : streams) p.streams.emplace(s, p.streams.size());
  return p;
}

// The legend: swatches and words in rows, wrapped at the picture's width.
// Returns its height.
double AppendLegend(const Present& p, std::string& out) {
  struct Item {
    std::string swatch;  // an SVG element drawn at (%X, %Y), 12 x 12
    std::string text;
  };
  const auto box = [](absl::string_view fill, absl::string_view extra = "") {
    return absl::StrCat(
        "<rect x=\"%X\" y=\"%Y\" width=\"12\" height=\"12\" "
        "fill=\"",
        fill, "\" stroke=\"#999\" stroke-width=\"0.5\"", extra, "/>");
  };
  const auto line = [](absl::string_view color) {
    return absl::StrCat(
        "<line x1=\"%X\" y1=\"%M\" x2=\"%R\" y2=\"%M\" "
        "stroke=\"",
        color, "\" stroke-width=\"2\"/>");
  };
  // One row each: the blocks, the space around them, the strip and the axis.
  std::vector<std::vector<Item>> rows(3);
  rows[0].push_back({"", "Blocks:"});
  std::size_t listed = 0;
  for (const auto& [stream, index] : p.streams) {
    if (++listed > kHues) {
      rows[0].push_back({"", "(further streams repeat these hues)"});
      break;
    }
    rows[0].push_back(
        {box(kStreamHues[index % kHues]),
         absl::StrCat(listed == 1 ? "in use on stream " : "stream ",
                      StreamName(stream))});
  }
  rows[0].push_back(
      {"", "(three shades of each, so that neighbouring blocks stay apart)"});
  if (p.pending) {
    rows[0].push_back({box("url(#pending)"),
                       "free, waiting for its stream's work to finish"});
  }
  if (p.asleep) {
    rows[0].push_back(
        {box("url(#asleep)"), "asleep (memory given back, addresses kept)"});
  }
  if (p.merged) {
    rows[0].push_back(
        {box(kMergedFill), "blocks narrower than a pixel, merged"});
  }
  rows[1].push_back({"", "Around them:"});
  rows[1].push_back({box(kFree), "reserved and free"});
  rows[1].push_back({box("#fcfcfc"), "not reserved at that moment"});
  if (p.outlines) {
    rows[1].push_back({box("none", " stroke-dasharray=\"3 2\""),
                       "one region (a device allocation) over its lifetime"});
  }
  rows[2].push_back({"", "Strip above each picture:"});
  rows[2].push_back({line(kReservedLine), "bytes reserved"});
  rows[2].push_back({line(kInUseLine), "bytes in use, over the same ops."});
  rows[2].push_back({"",
                     "y axis: bytes into the address ranges drawn; hover "
                     "over a range's bar or a block for its addresses."});
  double y = 6;
  for (const std::vector<Item>& row : rows) {
    double x = 8;
    for (const Item& item : row) {
      if (!item.swatch.empty()) {
        absl::StrAppend(
            &out,
            absl::StrReplaceAll(item.swatch,
                                {{"%X", absl::StrFormat("%.1f", x)},
                                 {"%Y", absl::StrFormat("%.1f", y)},
                                 {"%M", absl::StrFormat("%.1f", y + 6)},
                                 {"%R", absl::StrFormat("%.1f", x + 12)}}),
            "\n");
        x += 16;
      }
      absl::StrAppendFormat(
          &out, "<text x=\"%.1f\" y=\"%.1f\" class=\"s\">%s</text>\n", x,
          y + 10, Escape(item.text));
      // 11px sans is about 5.8 pixels a character.
      x += 5.8 * static_cast<double>(item.text.size()) + 14;
    }
    y += kLegendRow;
  }
  return y + 8;
}

// `exact_peak`: the replay's peak reserved; the samples may fall between the
// moments it was reached (platform mode frees at once), so the label says the
// exact value and the dot sits on the highest sample.
void AppendChart(const Timeline& t, std::uint64_t exact_peak, double x0,
                 double y0, double xscale, const Unit& unit, std::string& out) {
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
  line(t.sample_reserved, kReservedLine);
  line(t.sample_in_use, kInUseLine);
  const double px = x0 + static_cast<double>(t.sample_ops[peak]) * xscale;
  const double py =
      y0 + kChartHeight - static_cast<double>(t.sample_reserved[peak]) * ys;
  absl::StrAppendFormat(
      &out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px, py,
      kReservedLine);
  // The label sits on the side of the peak with more room.
  const bool left = px > x0 + kPlotWidth * 0.7;
  absl::StrAppendFormat(
      &out,
      "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" text-anchor=\"%s\">peak "
      "reserved %s</text>\n",
      left ? px - 6 : px + 6, std::max(py + 4, y0 + 12), left ? "end" : "start",
      Escape(InUnit(
          static_cast<double>(std::max(exact_peak, t.sample_reserved[peak])),
          unit)));
  // Legend and scale.
  absl::StrAppendFormat(
      &out,
      "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" text-anchor=\"end\">"
      "<tspan fill=\"%s\">reserved</tspan> / <tspan "
      "fill=\"%s\">in use</tspan></text>\n",
      x0 - 6, y0 + 12, kReservedLine, kInUseLine);
  absl::StrAppendFormat(&out,
                        "<text x=\"%.1f\" y=\"%.1f\" class=\"s\" "
                        "text-anchor=\"end\">%s</text>\n",
                        x0 - 6, y0 + 26,
                        Escape(InUnit(static_cast<double>(top), unit)));
}

// The panel's two caption lines: what it shows and what to look for; then
// the y extent against the peak reserved, and what the regions are and how
// many there were.
// `text` in lines of at most `width` characters, broken at spaces.
std::vector<std::string> Wrap(absl::string_view text, std::size_t width) {
  std::vector<std::string> lines(1);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view word = text.substr(start, end - start);
    if (!lines.back().empty() && lines.back().size() + 1 + word.size() > width)
      lines.emplace_back();
    if (!lines.back().empty()) lines.back() += ' ';
    absl::StrAppend(&lines.back(), word);
    start = end + 1;
  }
  return lines;
}

// What the panel shows and what to look for; then the regions and the
// extent. Sizes in `unit`; memory is said to have been unmapped or given
// back only when it was (Releases).
std::pair<std::string, std::string> CaptionText(const ReplayResult& r,
                                                const std::vector<Band>& bands,
                                                const Unit& unit) {
  const Timeline& t = r.timeline;
  // Regions by base (an expandable run has a record per size), and the most
  // alive at once: records of one base never overlap in time.
  std::set<std::uint64_t> bases;
  std::vector<std::pair<std::uint64_t, int>> events;
  for (const TimelineRegion& g : t.regions) {
    bases.insert(g.base);
    events.emplace_back(g.from_op, 1);
    events.emplace_back(std::max(g.to_op, g.from_op + 1), -1);
  }
  std::sort(events.begin(), events.end());  // ends (-1) first at one op
  std::int64_t alive = 0, most = 0;
  for (const auto& [op, delta] : events) most = std::max(most, alive += delta);
  std::uint64_t span = 0;
  for (const Band& b : bands) span += b.hi - b.lo;
  // The replay's own peak; a hand-made timeline may have only samples.
  std::uint64_t peak = r.peak_bytes_reserved;
  for (std::uint64_t v : t.sample_reserved) peak = std::max(peak, v);
  const auto size = [&unit](std::uint64_t bytes) {
    return InUnit(static_cast<double>(bytes), unit);
  };
  const std::uint64_t releases = Releases(r);
  const std::string at_once =
      static_cast<std::uint64_t>(most) == bases.size()
          ? ""
          : absl::StrCat(" (at most ", most, " at once)");
  std::string what, extent;
  if (t.mode == "snapshot") {
    what =
        "One moment: each band is a region as the snapshot lists them (with "
        "expandable regions, a mapped run of the one reserved range), each "
        "block a chunk. Look for grey: free memory, and how it is split.";
    extent = absl::StrFormat(
        "%d region%s, %s reserved (the y extent); peak reserved %s.",
        bases.size(), bases.size() == 1 ? "" : "s", size(span), size(peak));
    return {what, extent};
  }
  if (t.expandable) {
    what =
        "One reserved address range; grey is memory mapped into it and free, "
        "one piece wherever free memory touches. Look for grey between "
        "blocks.";
    extent = absl::StrFormat(
        "The mapped memory formed %d run%s over the replay%s (a run is a "
        "stretch of mapped addresses); %s. ",
        bases.size(), bases.size() == 1 ? "" : "s", at_once,
        releases > 0
            ? absl::StrCat(releases, " unmap", releases == 1 ? "" : "s",
                           " over the replay (unmapping a piece splits a run, "
                           "mapping a hole joins two)")
            : std::string("nothing was unmapped over the replay: free memory "
                          "stayed mapped"));
  } else if (t.mode == "platform") {
    what = absl::StrCat(
        "Each block is its own device allocation",
        releases > 0 ? ", given back when freed" : ", none given back",
        ": what is reserved is exactly what is live, at a device call per "
        "operation.");
    extent =
        absl::StrFormat("%d allocations over the replay%s, %d given back. ",
                        bases.size(), at_once, releases);
  } else if (t.mode == "async") {
    what =
        "Each block is its own allocation from the device's stream-ordered "
        "pool; the pool's reserve beyond the live blocks is in the strip "
        "above, not drawn here.";
    extent = absl::StrFormat("%d allocations over the replay%s. ", bases.size(),
                             at_once);
  } else {
    what =
        "Each dashed box is one region (a separate device allocation) over its "
        "lifetime; grey is reserved and free. Look for small long-lived "
        "blocks that keep a large region from being returned.";
    extent = absl::StrFormat(
        "%d region%s over the replay%s, %s. ", bases.size(),
        bases.size() == 1 ? "" : "s", at_once,
        releases > 0 ? absl::StrCat(releases, " given back to the device")
                     : std::string("none given back"));
  }
  if (t.mode == "async") {
    absl::StrAppend(&extent, "y: the ", size(span),
                    " of addresses handed out at some moment.");
  } else if (span > peak + peak / 200) {
    absl::StrAppend(
        &extent, "y: the ", size(span),
        " of addresses reserved at some moment; at most ", size(peak),
        " at once (the peak reserved)",
        releases == 0 ? "."
        : t.expandable
            ? ": free pieces were unmapped, and memory was mapped again at "
              "other addresses of the range."
            : ": memory given back was reserved again at other addresses.");
  } else {
    absl::StrAppend(&extent, "y: ", size(span),
                    ", the addresses reserved; peak reserved ", size(peak),
                    ".");
  }
  return {what, extent};
}

std::vector<std::string> Caption(const ReplayResult& r,
                                 const std::vector<Band>& bands,
                                 const Unit& unit) {
  // 11px italic sans is about 5.6 pixels a character.
  constexpr std::size_t kWidth = 200;
  const auto [what, extent] = CaptionText(r, bands, unit);
  std::vector<std::string> lines = Wrap(what, kWidth);
  for (std::string& line : Wrap(extent, kWidth)) {
    lines.push_back(std::move(line));
  }
  if (lines.size() > 3) lines.resize(3);
  return lines;
}

}  // namespace gpualloc::replay::svg_internal
