// SPDX-License-Identifier: Apache-2.0
// tests/tools/snapshot_view_test.cc: an allocator snapshot drawn by the
// replay's SVG renderer (tools/replay/snapshot_view.h): a real allocator's
// snapshot, through its JSON, becomes a one-op timeline with one block per
// in-use chunk.
#include "tools/replay/snapshot_view.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpualloc/backends/sim_backend.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/snapshot_json.h"
#include "gtest/gtest.h"
#include "tools/replay/svg.h"

namespace gpualloc::replay {
namespace {

using ::testing::HasSubstr;
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

// Blocks are the only rectangles with a #rrggbb fill and no stroke attribute
// (as in svg_test.cc).
std::size_t BlockRects(const std::string& svg) {
  std::size_t n = 0;
  // After the patterns' own rectangles in <defs>.
  for (std::size_t at = svg.find("<rect ", svg.find("</defs>"));
       at != std::string::npos; at = svg.find("<rect ", at + 1)) {
    const std::string tag = svg.substr(at, svg.find('>', at) - at);
    const std::size_t fill = tag.find("fill=\"#");
    if (fill != std::string::npos && tag.size() > fill + 13 &&
        tag[fill + 13] == '"' && tag.find("class=\"r\"") == std::string::npos &&
        tag.find("stroke=") == std::string::npos) {
      ++n;
    }
  }
  return n;
}

TEST(SnapshotViewTest, ARealSnapshotThroughItsJson) {
  auto backend = SimBackend::Create(SimOptions()).value();
  Options options;
  options.preallocate = false;
  auto allocator = CreateAllocator(options, backend).value();
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) {
    blocks.push_back(allocator->Allocate((i + 1) * kMiB, Stream(i)).value());
  }
  ASSERT_TRUE(allocator->Deallocate(blocks[1], Stream(1)).ok());
  const Snapshot original = allocator->GetSnapshot();

  absl::StatusOr<Snapshot> read =
      SnapshotFromJson(SnapshotToJson(original, &allocator->device()));
  ASSERT_TRUE(read.ok()) << read.status();
  const ReplayResult r = SnapshotAsReplayResult(*read, "after-free");

  EXPECT_EQ(r.trace, "after-free");
  EXPECT_EQ(r.timeline.num_ops, 1u);
  EXPECT_EQ(r.timeline.regions.size(), original.regions.size());
  // Four in use, and the chunk freed on stream 1, whose work may still use
  // it: free, but pending on its stream.
  ASSERT_EQ(r.timeline.blocks.size(), 5u);
  std::uint64_t requested = 0;
  std::size_t pending = 0;
  for (const TimelineBlock& b : r.timeline.blocks) {
    EXPECT_EQ(b.alloc_op, 0u);
    EXPECT_EQ(b.free_op, 1u);
    if (b.state == TimelineBlock::State::kFreePending) {
      ++pending;
      EXPECT_EQ(b.stream, Stream(1).handle);
      continue;
    }
    EXPECT_EQ(b.state, TimelineBlock::State::kInUse);
    requested += b.size;
  }
  EXPECT_EQ(pending, 1u);
  EXPECT_EQ(requested, original.stats.bytes_requested);
  EXPECT_EQ(r.timeline.sample_reserved.back(), original.stats.bytes_reserved);
  EXPECT_EQ(r.peak_bytes_reserved, original.stats.peak_bytes_reserved);

  const std::string svg = RenderSvg({{"after-free / snapshot", &r}});
  EXPECT_THAT(svg, StartsWith("<svg"));
  EXPECT_EQ(BlockRects(svg), 4u);  // the pending one is hatched
  EXPECT_EQ(Count(svg, "fill=\"url(#pending)\""), 2u);  // and in the legend
  EXPECT_THAT(svg, HasSubstr("free, waiting for its stream&apos;s work"));
  EXPECT_THAT(svg, HasSubstr("after-free / snapshot"));
  EXPECT_THAT(svg, HasSubstr("5 blocks"));
  EXPECT_THAT(svg, HasSubstr("One moment: each band is a region"));
}

TEST(SnapshotViewTest, FileErrorsNameTheFile) {
  absl::StatusOr<ReplayResult> missing =
      LoadSnapshotAsReplayResult("/nonexistent/snap.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/snap.json"));
}

}  // namespace
}  // namespace gpualloc::replay
