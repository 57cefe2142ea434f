// SPDX-License-Identifier: Apache-2.0
// tests/tools/svg_test.cc: the address-space picture (tools/replay/svg.h) on
// synthetic timelines: well-formed XML, one rectangle per block, escaped
// titles, empty and huge timelines.
#include "tools/replay/svg.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/replay/svg_parts.h"

namespace gpualloc::replay {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::uint64_t kMiB = 1024 * 1024;

std::size_t Count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// A small well-formedness check: tags balance and nest, attribute values are
// quoted, no raw '&' or '<' in text. Enough for what RenderSvg writes (no
// comments, CDATA or processing instructions).
::testing::AssertionResult WellFormed(const std::string& xml) {
  std::vector<std::string> open;
  std::size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] == '&') {
      const std::size_t semi = xml.find(';', i);
      if (semi == std::string::npos || semi - i > 6) {
        return ::testing::AssertionFailure() << "raw & at " << i;
      }
      i = semi + 1;
      continue;
    }
    if (xml[i] != '<') {
      if (xml[i] == '>') {
        return ::testing::AssertionFailure() << "raw > at " << i;
      }
      ++i;
      continue;
    }
    // A tag: find its end, skipping quoted attribute values.
    std::size_t j = i + 1;
    char quote = 0;
    while (j < xml.size() && (quote != 0 || xml[j] != '>')) {
      if (quote == 0 && (xml[j] == '"' || xml[j] == '\'')) {
        quote = xml[j];
      } else if (quote != 0 && xml[j] == quote) {
        quote = 0;
      } else if (quote != 0 && xml[j] == '<') {
        return ::testing::AssertionFailure() << "raw < in attribute at " << j;
      }
      ++j;
    }
    if (j >= xml.size()) {
      return ::testing::AssertionFailure() << "unterminated tag at " << i;
    }
    const std::string tag = xml.substr(i + 1, j - i - 1);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) {
        return ::testing::AssertionFailure()
               << "</" << name << "> closes "
               << (open.empty() ? "nothing" : open.back());
      }
      open.pop_back();
    } else if (tag.empty() || tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
    i = j + 1;
  }
  if (!open.empty()) {
    return ::testing::AssertionFailure() << "<" << open.back() << "> open";
  }
  return ::testing::AssertionSuccess();
}

// Two regions far apart, three blocks, samples.
ReplayResult Small() {
  ReplayResult r;
  r.trace = "t";
  Timeline& t = r.timeline;
  t.num_ops = 6;
  t.regions = {{0x7f0000000000, 4 * kMiB, 0, 6}, {0x100000000, 2 * kMiB, 1, 4}};
  t.blocks = {{1, 0x7f0000000000, kMiB, 0, 3, 0},
              {2, 0x7f0000000000 + kMiB, 3 * kMiB, 1, 6, 0},
              {3, 0x100000000, 100, 2, 4, 1}};
  t.sample_ops = {0, 1, 2, 3, 4, 5};
  t.sample_reserved = {4 * kMiB, 6 * kMiB, 6 * kMiB,
                       6 * kMiB, 4 * kMiB, 4 * kMiB};
  t.sample_in_use = {kMiB, 4 * kMiB, 4 * kMiB, 3 * kMiB, 3 * kMiB, 3 * kMiB};
  return r;
}

std::size_t BlockRects(const std::string& svg) {
  // Blocks are the only rectangles with a #rrggbb fill and no stroke
  // attribute (the backgrounds have one; outlines are class "r").
  std::size_t n = 0;
  // After the patterns' own rectangles in <defs>.
  for (std::size_t at = svg.find("<rect ", svg.find("</defs>"));
       at != std::string::npos; at = svg.find("<rect ", at + 1)) {
    const std::size_t end = svg.find('>', at);
    const std::string tag = svg.substr(at, end - at);
    const std::size_t fill = tag.find("fill=\"#");
    if (fill != std::string::npos && tag.size() > fill + 13 &&
        tag[fill + 13] == '"' && tag.find("class=\"r\"") == std::string::npos &&
        tag.find("stroke=") == std::string::npos) {
      ++n;
    }
  }
  return n;
}

TEST(SvgTest, WellFormedWithOneRectPerBlock) {
  const ReplayResult r = Small();
  const std::string svg = RenderSvg({{"small / h100", &r}});
  EXPECT_THAT(svg, StartsWith("<svg"));
  EXPECT_THAT(svg, ::testing::EndsWith("</svg>\n"));
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(BlockRects(svg), 3u);
  EXPECT_EQ(Count(svg, "class=\"r\""), 2u);  // dashed region outlines
  // The strip's peak label in the y axis's unit.
  EXPECT_THAT(svg, HasSubstr("peak reserved 6.0 MiB"));
  EXPECT_THAT(svg, HasSubstr("small / h100"));
  EXPECT_THAT(svg, HasSubstr("operation index"));
  EXPECT_THAT(svg, HasSubstr("address"));
  EXPECT_THAT(svg, Not(HasSubstr("merged")));
  EXPECT_THAT(svg, Not(HasSubstr("<script")));
}

TEST(SvgTest, SameIdSameColour) {
  ReplayResult a = Small();
  ReplayResult b = Small();
  const std::string sa = RenderSvg({{"a", &a}});
  const std::string sb = RenderSvg({{"b", &b}});
  // Equal but for the title (after the legend).
  const auto after_title = [](const std::string& svg) {
    return svg.substr(svg.find("</text>", svg.find("class=\"t\"")));
  };
  EXPECT_EQ(after_title(sa), after_title(sb));
}

TEST(SvgTest, TitlesAreEscaped) {
  const ReplayResult r = Small();
  const std::string svg =
      RenderSvg({{"a<b & \"c\" 'd' > e", &r}, {"second & <x>", &r}});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_THAT(svg,
              HasSubstr("a&lt;b &amp; &quot;c&quot; &apos;d&apos; &gt; e"));
  EXPECT_THAT(svg, HasSubstr("second &amp; &lt;x&gt;"));
  EXPECT_EQ(BlockRects(svg), 6u);
}

TEST(SvgTest, EmptyTimelineAndNoPanels) {
  ReplayResult empty;
  std::string svg = RenderSvg({{"empty", &empty}, {"null", nullptr}});
  EXPECT_THAT(svg, StartsWith("<svg"));
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_THAT(svg, HasSubstr("empty timeline"));
  EXPECT_THAT(svg, HasSubstr("no result"));
  EXPECT_EQ(BlockRects(svg), 0u);

  svg = RenderSvg({});
  EXPECT_THAT(svg, StartsWith("<svg"));
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_THAT(svg, HasSubstr("nothing to draw"));
}

TEST(SvgTest, BlockOutsideEveryRegionIsLeftOutAndSaid) {
  ReplayResult r = Small();
  r.timeline.blocks.push_back({9, 0x10, 16, 0, 1, 0});
  const std::string svg = RenderSvg({{"x", &r}});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(BlockRects(svg), 3u);
  EXPECT_THAT(svg, HasSubstr("1 blocks outside every region"));
}

TEST(SvgTest, ManyTinyBlocksAreMergedAndTheFileStaysSmall) {
  ReplayResult r;
  Timeline& t = r.timeline;
  const std::uint64_t n = 200000;
  t.num_ops = 2 * n;
  t.regions = {{0x1000000, n * 4096, 0, 2 * n}};
  for (std::uint64_t i = 0; i < n; ++i) {
    // Each lives for one op: far narrower than a pixel.
    t.blocks.push_back({i, 0x1000000 + i * 4096, 4096, 2 * i, 2 * i + 1, 0});
  }
  // One long-lived block stays exact.
  t.blocks.push_back({n, 0x1000000, 4096, 0, 2 * n, 0});
  const std::string svg = RenderSvg({{"big", &r}});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_THAT(svg, HasSubstr("200000 blocks narrower than a pixel drawn "
                             "merged"));
  EXPECT_LT(svg.size(), 2u * 1024 * 1024);
}

// The caption's lines joined by spaces (it wraps at about 200 characters).
std::string CaptionOf(const std::string& svg) {
  std::string out;
  const std::string open = "class=\"c\">";
  for (std::size_t at = svg.find(open); at != std::string::npos;
       at = svg.find(open, at + 1)) {
    const std::size_t from = at + open.size();
    if (!out.empty()) out += ' ';
    out += svg.substr(from, svg.find("</text>", from) - from);
  }
  return out;
}

// The value of attribute `name` in the tag at `at`.
double Attribute(const std::string& svg, std::size_t at,
                 const std::string& name) {
  const std::string key = " " + name + "=\"";
  const std::size_t from = svg.find(key, at) + key.size();
  return std::stod(svg.substr(from, svg.find('"', from) - from));
}

// The text outside tooltips: what is seen without hovering.
std::string Visible(std::string svg) {
  for (std::size_t at = svg.find("<title>"); at != std::string::npos;
       at = svg.find("<title>")) {
    svg.erase(at, svg.find("</title>", at) + 8 - at);
  }
  return svg;
}

// The picture explains itself: a legend of what each colour means, a
// caption per panel, and a y axis in bytes, the addresses in tooltips only.
TEST(SvgTest, LegendCaptionAndOffsets) {
  ReplayResult r = Small();
  r.timeline.mode = "bfc";
  const std::string svg = RenderSvg({{"small / regions", &r}});
  EXPECT_TRUE(WellFormed(svg));
  for (const char* legend :
       {"Blocks:", "in use on stream 0", ">stream 1<", "reserved and free",
        "not reserved at that moment",
        "one region (a device allocation) over its lifetime", "bytes reserved",
        "bytes in use"}) {
    EXPECT_THAT(svg, HasSubstr(legend));
  }
  // Stream 0 and stream 1 blocks have different hues.
  EXPECT_THAT(svg, HasSubstr("fill=\"#4e79a7\" stroke"));
  EXPECT_THAT(svg, HasSubstr("fill=\"#f28e2b\"><title>0x100000000, 100 B"));
  EXPECT_THAT(svg, HasSubstr("Each dashed box is one region"));
  EXPECT_THAT(svg, HasSubstr("2 regions over the replay"));
  // Offsets on the axis, addresses only when hovering.
  EXPECT_THAT(svg, HasSubstr(">2 MiB</text>"));
  EXPECT_THAT(svg, HasSubstr(">6 MiB</text>"));
  EXPECT_THAT(svg, HasSubstr("<title>range 2 of 2: 0x7f0000000000 to "
                             "0x7f0000400000 (4.0 MiB)"));
  EXPECT_THAT(Visible(svg), Not(HasSubstr("0x")));
}

// An expandable range: a run that shrinks and a run mapped elsewhere later.
// The y axis spans the addresses mapped at some moment (6 MiB), more than
// was ever mapped at once (4 MiB, the peak): the caption says so and why,
// and counts the runs; the runs are not outlined.
TEST(SvgTest, ExpandableRangeCaptionExplainsTheExtent) {
  ReplayResult r;
  r.peak_bytes_reserved = 4 * kMiB;
  Timeline& t = r.timeline;
  t.mode = "bfc";
  t.expandable = true;
  t.num_ops = 6;
  const std::uint64_t base = 0x200000000;
  t.regions = {{base, 4 * kMiB, 0, 3},
               {base, 2 * kMiB, 3, 6},
               {base + 6 * kMiB, 2 * kMiB, 4, 6}};
  t.blocks = {{1, base, kMiB, 0, 6, 0}, {2, base + 6 * kMiB, kMiB, 4, 6, 0}};
  t.sample_ops = {0, 1, 2, 3, 4, 5};
  t.sample_reserved = {4 * kMiB, 4 * kMiB, 4 * kMiB,
                       2 * kMiB, 4 * kMiB, 4 * kMiB};
  t.sample_in_use = {kMiB, kMiB, kMiB, kMiB, 2 * kMiB, 2 * kMiB};
  const std::string svg = RenderSvg({{"x / expandable", &r}});
  EXPECT_TRUE(WellFormed(svg));
  const std::string caption = CaptionOf(svg);
  EXPECT_THAT(caption, HasSubstr("One reserved address range"));
  EXPECT_THAT(caption, HasSubstr("formed 2 runs over the replay"));
  // The run shrank once (op 3): an unmap, counted from the timeline.
  EXPECT_THAT(caption, HasSubstr("; 1 unmap over the replay"));
  EXPECT_THAT(caption, HasSubstr("y: the 6.0 MiB of addresses reserved at "
                                 "some moment;"));
  EXPECT_THAT(caption, HasSubstr("at most 4.0 MiB at once (the peak "
                                 "reserved): free pieces were unmapped"));
  EXPECT_EQ(Count(svg, "class=\"r\""), 0u);
  EXPECT_THAT(svg, Not(HasSubstr("one region (a device allocation)")));
  EXPECT_EQ(BlockRects(svg), 2u);
}

// A 256-byte block living one op of 100000, in an 8 GiB region: a
// thousandth of a pixel each way, drawn at least a pixel each way, inside
// the plot.
TEST(SvgTest, EveryBlockShowsAtLeastAPixel) {
  ReplayResult r;
  Timeline& t = r.timeline;
  t.num_ops = 100000;
  const std::uint64_t base = 0x300000000;
  t.regions = {{base, 8192 * kMiB, 0, 100000}};
  t.blocks = {{1, base + 4096 * kMiB, 256, 50000, 50001, 0},
              {2, base + 8192 * kMiB - 256, 256, 99999, 100000, 0}};
  const std::string svg = RenderSvg({{"tiny", &r}});
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_EQ(BlockRects(svg), 2u);
  for (const char* title : {"<title>0x400000000, 256 B, ops 50000 to 50001",
                            "<title>0x4ffffff00, 256 B, ops 99999 to 100000"}) {
    SCOPED_TRACE(title);
    const std::size_t at = svg.rfind("<rect ", svg.find(title));
    ASSERT_NE(at, std::string::npos);
    EXPECT_GE(Attribute(svg, at, "width"), 1.0);
    EXPECT_GE(Attribute(svg, at, "height"), 1.0);
    // Inside the plot (x from 130 to 1330) and the address area (y from
    // 232 to 652 in this one-panel picture without streams' rows).
    EXPECT_LE(Attribute(svg, at, "x") + Attribute(svg, at, "width"),
              1330.0 + 1e-9);
    const std::size_t area = svg.find("fill=\"#fcfcfc\" stroke=\"#bbb\"");
    const double area_top = Attribute(svg, svg.rfind("<rect ", area), "y");
    EXPECT_LE(Attribute(svg, at, "y") + Attribute(svg, at, "height"),
              area_top + 420 + 1e-9);
  }
}

// The x ticks of the ops at a nice step, evenly spaced from 0: 1003 ops get
// 0, 200, ..., 1000 (not 0, 251, 502, 752, 1003).
TEST(SvgTest, XTicksAreNiceAndEvenlySpaced) {
  ReplayResult r = Small();
  r.timeline.num_ops = 1003;
  const std::string svg = RenderSvg({{"ticks", &r}});
  const std::string axis = svg.substr(svg.rfind("</g>"));
  std::vector<std::uint64_t> labels;
  std::vector<double> xs;
  const std::string mark = "text-anchor=\"middle\">";
  for (std::size_t at = axis.find(mark); at != std::string::npos;
       at = axis.find(mark, at + 1)) {
    const std::size_t from = at + mark.size();
    const std::string text = axis.substr(from, axis.find('<', from) - from);
    if (text.empty() || text[0] < '0' || text[0] > '9') continue;
    labels.push_back(std::stoull(text));
    xs.push_back(Attribute(axis, axis.rfind("<text ", at), "x"));
  }
  EXPECT_EQ(labels, (std::vector<std::uint64_t>{0, 200, 400, 600, 800, 1000}));
  ASSERT_EQ(xs.size(), 6u);
  for (std::size_t i = 1; i < xs.size(); ++i) {
    EXPECT_NEAR(xs[i] - xs[i - 1], 1200.0 * 200 / 1003, 0.1);
  }
  // A nice step is 1, 2 or 5 x 10^k.
  EXPECT_DOUBLE_EQ(svg_internal::NiceStep(125.4), 200);
  EXPECT_DOUBLE_EQ(svg_internal::NiceStep(0.75), 1);
  EXPECT_DOUBLE_EQ(svg_internal::NiceStep(3), 5);
  EXPECT_DOUBLE_EQ(svg_internal::NiceStep(0.3), 0.5);
  EXPECT_DOUBLE_EQ(svg_internal::NiceStep(50), 50);
}

// The strip's peak label and scale, the y axis and the caption use one unit:
// GiB for a panel of gigabytes, MiB for one under a GiB (where the peak label
// said "0.59 GiB" beside an axis in MiB).
TEST(SvgTest, PeakLabelAxisAndCaptionShareAUnit) {
  for (const bool big : {false, true}) {
    SCOPED_TRACE(big ? "GiB" : "MiB");
    const std::uint64_t unit = big ? 1024 * kMiB : kMiB;
    ReplayResult r;
    r.peak_bytes_reserved = 600 * unit;
    Timeline& t = r.timeline;
    t.mode = "bfc";
    t.num_ops = 4;
    t.regions = {{0x100000000, 600 * unit, 0, 4}};
    t.blocks = {{1, 0x100000000, 300 * unit, 0, 4, 0}};
    t.sample_ops = {0, 1, 2, 3};
    t.sample_reserved = {600 * unit, 600 * unit, 600 * unit, 600 * unit};
    t.sample_in_use = {300 * unit, 300 * unit, 300 * unit, 300 * unit};
    const std::string svg = Visible(RenderSvg({{"unit", &r}}));
    const std::string name = big ? " GiB" : " MiB";
    const std::string other = big ? " MiB" : " GiB";
    EXPECT_THAT(svg, HasSubstr(absl::StrCat("peak reserved 600.",
                                            big ? "00" : "0", name)));
    EXPECT_THAT(svg, HasSubstr(absl::StrCat(">100", name, "</text>")));
    EXPECT_THAT(svg, HasSubstr(absl::StrCat(">600", name, "</text>")));
    EXPECT_THAT(CaptionOf(svg),
                HasSubstr(absl::StrCat("peak reserved 600.", big ? "00" : "0",
                                       name, ".")));
    EXPECT_THAT(svg, Not(HasSubstr(other)));
  }
}

// The caption says memory was unmapped or given back only when it was.
TEST(SvgTest, CaptionSaysUnmappedOnlyWhenItWas) {
  // An expandable range that only grew: one run, mapped at 2 then 4 MiB.
  ReplayResult r;
  r.peak_bytes_reserved = 4 * kMiB;
  Timeline& t = r.timeline;
  t.mode = "bfc";
  t.expandable = true;
  t.num_ops = 4;
  const std::uint64_t base = 0x200000000;
  t.regions = {{base, 2 * kMiB, 0, 2}, {base, 4 * kMiB, 2, 4}};
  t.blocks = {{1, base, kMiB, 0, 4, 0}, {2, base + 2 * kMiB, kMiB, 2, 3, 0}};
  std::string caption = CaptionOf(RenderSvg({{"grew", &r}}));
  EXPECT_THAT(caption, HasSubstr("nothing was unmapped over the replay: free "
                                 "memory stayed mapped"));
  EXPECT_THAT(caption, Not(HasSubstr("were unmapped")));
  EXPECT_THAT(caption, Not(HasSubstr("unmapped when")));
  EXPECT_THAT(caption, Not(HasSubstr("unmapping")));
  // The replay's own count, when it has one.
  r.backend_frees = 3;
  caption = CaptionOf(RenderSvg({{"unmapped", &r}}));
  EXPECT_THAT(caption, HasSubstr("; 3 unmaps over the replay"));
  EXPECT_THAT(caption, Not(HasSubstr("nothing was unmapped")));

  // Separate regions, and platform mode: none given back, or how many.
  ReplayResult regions = Small();
  regions.timeline.mode = "bfc";
  regions.timeline.regions[1].to_op = 6;  // kept to the end
  EXPECT_THAT(CaptionOf(RenderSvg({{"kept", &regions}})),
              HasSubstr("2 regions over the replay, none given back."));
  regions.timeline.mode = "platform";
  EXPECT_THAT(CaptionOf(RenderSvg({{"kept", &regions}})),
              HasSubstr("Each block is its own device allocation, none given "
                        "back"));
  regions.backend_frees = 2;
  EXPECT_THAT(CaptionOf(RenderSvg({{"freed", &regions}})),
              HasSubstr("allocations over the replay, 2 given back."));
}

}  // namespace
}  // namespace gpualloc::replay
