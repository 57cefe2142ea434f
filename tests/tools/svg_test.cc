// SPDX-License-Identifier: Apache-2.0
// tests/tools/svg_test.cc: the address-space picture (tools/replay/svg.h) on
// synthetic timelines: well-formed XML, one rectangle per block, escaped
// titles, empty and huge timelines.
#include "tools/replay/svg.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
  EXPECT_THAT(svg, HasSubstr("peak reserved 0.01 GiB"));
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
  EXPECT_THAT(svg, HasSubstr("One reserved address range"));
  EXPECT_THAT(svg, HasSubstr("formed 2 runs over the replay"));
  // The caption wraps: the extent, then the reason.
  EXPECT_THAT(svg, HasSubstr("y: the 6.0 MiB of addresses reserved at some "
                             "moment;"));
  EXPECT_THAT(svg, HasSubstr("at most 4.0 MiB at once (the peak reserved): "
                             "free pieces were unmapped"));
  EXPECT_EQ(Count(svg, "class=\"r\""), 0u);
  EXPECT_THAT(svg, Not(HasSubstr("one region (a device allocation)")));
  EXPECT_EQ(BlockRects(svg), 2u);
}

}  // namespace
}  // namespace gpualloc::replay
