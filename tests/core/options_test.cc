// SPDX-License-Identifier: Apache-2.0
// tests/core/options_test.cc: resolving Options against a device; the
// bad-options table.
#include "core/options.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::core {
namespace {

using testing::kGiB;
using testing::kMiB;

DeviceInfo H100() {
  DeviceInfo d;
  d.backend = "sim";
  d.vendor = Vendor::kNvidia;
  d.name = "test H100";
  d.arch_id = "sm_90";
  d.total_bytes = 80 * kGiB;
  d.min_granularity = 2 * kMiB;
  d.recommended_granularity = 2 * kMiB;
  d.allocation_alignment = 256;
  return d;
}

TEST(OptionsTest, DefaultsFollowJax) {
  auto r = ResolveOptions(Options(), H100());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->profile->name, "h100");
  EXPECT_EQ(r->min_block_size, 256u);
  EXPECT_EQ(r->granularity, 2 * kMiB);
  EXPECT_EQ(r->limit, 60 * kGiB);  // 75% of total
  EXPECT_TRUE(r->options.preallocate);
}

TEST(OptionsTest, TheBackendsProfileChoiceWins) {
  // A GH200 reports sm_90 and 96 GB: detection by memory alone could pick
  // another row; the backend that matched it by name says which profile.
  DeviceInfo d = H100();
  d.profile = "h200";
  d.profile_reason = "by name";
  auto r = ResolveOptions(Options(), d);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->profile->name, "h200");
  Options o;
  o.arch = "a100";  // an explicit arch still wins over the backend
  r = ResolveOptions(o, d);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->profile->name, "a100");
  d.profile = "no-such-profile";
  r = ResolveOptions(Options(), d);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("no-such-profile"), std::string::npos);
}

TEST(OptionsTest, ExpandableResolvesFromTheDevice) {
  DeviceInfo d = H100();
  auto off = ResolveOptions(Options(), d);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->expandable);  // no virtual memory
  EXPECT_EQ(off->large_page, 2 * kMiB);
  d.capabilities.virtual_memory = true;
  auto on = ResolveOptions(Options(), d);
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->expandable);
  Options o;
  o.expandable = Tristate::kOff;
  o.large_page_placement = false;
  auto forced = ResolveOptions(o, d);
  ASSERT_TRUE(forced.ok());
  EXPECT_FALSE(forced->expandable);
  EXPECT_EQ(forced->large_page, 0u);
  o.mode = AllocatorMode::kAsync;
  o.expandable = Tristate::kOn;
  EXPECT_EQ(ResolveOptions(o, d).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OptionsTest, LimitOverridesFractionAndRoundsDownToGranules) {
  Options o;
  o.memory_limit = 10 * kGiB + 12345;
  auto r = ResolveOptions(o, H100());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->limit, 10 * kGiB);
}

TEST(OptionsTest, SizeDivisionsArePowersOfTwoUpTo64) {
  Options o;
  auto r = ResolveOptions(o, H100());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size_divisions, 0u);  // off by default
  for (std::uint32_t n : {2u, 4u, 8u, 16u, 32u, 64u}) {
    o.size_divisions = n;
    r = ResolveOptions(o, H100());
    ASSERT_TRUE(r.ok()) << n << ": " << r.status();
    EXPECT_EQ(r->size_divisions, n);
  }
  // Platform and async take 0.
  o.size_divisions = 0;
  o.mode = AllocatorMode::kPlatform;
  EXPECT_TRUE(ResolveOptions(o, H100()).ok());
}

TEST(OptionsTest, ExplicitArchProfile) {
  Options o;
  o.arch = "mi300x";
  auto r = ResolveOptions(o, H100());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->profile->name, "mi300x");
}

struct BadCase {
  std::string name;
  Options options;
  std::string field;  // must appear in the message
};

TEST(OptionsTest, BadOptionsNameTheField) {
  std::vector<BadCase> cases;
  auto add = [&](std::string name, auto mutate, std::string field) {
    Options o;
    mutate(o);
    cases.push_back({std::move(name), o, std::move(field)});
  };
  add(
      "fraction zero", [](Options& o) { o.memory_fraction = 0; },
      "memory_fraction");
  add(
      "fraction negative", [](Options& o) { o.memory_fraction = -0.5; },
      "memory_fraction");
  add(
      "fraction above one", [](Options& o) { o.memory_fraction = 1.5; },
      "memory_fraction");
  add(
      "fraction NaN", [](Options& o) { o.memory_fraction = std::nan(""); },
      "memory_fraction");
  add(
      "fraction tiny", [](Options& o) { o.memory_fraction = 1e-12; },
      "memory_fraction");
  add(
      "limit above total", [](Options& o) { o.memory_limit = 81 * kGiB; },
      "memory_limit");
  add(
      "limit below a granule", [](Options& o) { o.memory_limit = kMiB; },
      "memory_limit");
  add(
      "block not a power of two", [](Options& o) { o.min_block_size = 384; },
      "min_block_size");
  add(
      "block too small", [](Options& o) { o.min_block_size = 8; },
      "min_block_size");
  add(
      "granularity not a multiple of the device's",
      [](Options& o) { o.growth_granularity = kMiB; }, "growth_granularity");
  add(
      "granularity not a multiple of the block",
      [](Options& o) {
        o.min_block_size = 4 * kMiB;
        o.growth_granularity = 2 * kMiB;
      },
      "growth_granularity");
  add(
      "unknown arch", [](Options& o) { o.arch = "h900"; }, "arch");
  add(
      "expandable without virtual memory",
      [](Options& o) { o.expandable = Tristate::kOn; }, "expandable");
  for (std::uint32_t n : {1u, 3u, 12u, 128u, 0x80000000u}) {
    add(
        "size_divisions " + std::to_string(n),
        [n](Options& o) { o.size_divisions = n; }, "Options.size_divisions");
  }
  for (AllocatorMode mode : {AllocatorMode::kPlatform, AllocatorMode::kAsync}) {
    add(
        std::string("size_divisions in ") +
            std::string(AllocatorModeName(mode)),
        [mode](Options& o) {
          o.mode = mode;
          o.size_divisions = 4;
        },
        std::string("allocator=") + std::string(AllocatorModeName(mode)));
  }
  for (const BadCase& c : cases) {
    auto r = ResolveOptions(c.options, H100());
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(r.status().message().find(c.field), std::string::npos)
        << c.name << ": " << r.status();
  }
}

}  // namespace
}  // namespace gpualloc::core
