// SPDX-License-Identifier: Apache-2.0
// tests/core/options_test.cc: resolving Options against a device; the
// bad-options table.
#include "core/config/options.h"

#include <cmath>
#include <optional>
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
  for (double t : {1.0, 1.5, -0.1, std::nan("")}) {
    add(
        "gc_threshold " + std::to_string(t),
        [t](Options& o) { o.gc_threshold = t; }, "Options.gc_threshold");
  }
  for (AllocatorMode mode : {AllocatorMode::kPlatform, AllocatorMode::kAsync}) {
    add(
        std::string("front_cache in ") + std::string(AllocatorModeName(mode)),
        [mode](Options& o) {
          o.mode = mode;
          o.front_cache = 4 * kMiB;
        },
        std::string("allocator=") + std::string(AllocatorModeName(mode)));
  }
  add(
      "gc_threshold in async",
      [](Options& o) {
        o.mode = AllocatorMode::kAsync;
        o.gc_threshold = 0.8;
      },
      "allocator=async");
  add(
      "gc_threshold without trim_before_growth",
      [](Options& o) {
        o.gc_threshold = 0.8;
        o.trim_before_growth = false;
      },
      "Options.trim_before_growth=false");
  for (const BadCase& c : cases) {
    auto r = ResolveOptions(c.options, H100());
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(r.status().message().find(c.field), std::string::npos)
        << c.name << ": " << r.status();
  }
}

// Every option error says how to fix it and carries its problem, so that the
// runtime layer can name the configuration keys instead of the fields.
TEST(OptionsTest, ErrorsCarryTheirProblem) {
  Options o;
  o.min_block_size = 4 * kMiB;  // the profile's granularity is 2 MiB
  auto r = ResolveOptions(o, H100());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "the device's growth_granularity=2097152 (Options."
            "growth_granularity left to its default) is not a multiple of "
            "Options.min_block_size=4194304: region sizes are whole minimum "
            "blocks; set Options.growth_granularity to a multiple of 4194304 "
            "bytes (4.00 MiB), or Options.min_block_size to a power of two "
            "that divides 2097152");
  const std::optional<OptionsProblem> problem = OptionsProblemOf(r.status());
  ASSERT_TRUE(problem.has_value());
  ASSERT_EQ(problem->fields.size(), 2u);
  EXPECT_EQ(problem->fields[0].field, "growth_granularity");
  EXPECT_EQ(problem->fields[0].value, "2097152");
  EXPECT_EQ(problem->fields[0].derived, "the device's");
  EXPECT_EQ(problem->fields[1].field, "min_block_size");
  EXPECT_EQ(problem->fields[1].value, "4194304");
  EXPECT_EQ(problem->fields[1].derived, "");
  // Rendered with other names.
  EXPECT_EQ(RenderOptionsProblem(
                *problem, [](std::size_t i) { return "S" + std::to_string(i); },
                [](std::size_t i) { return "N" + std::to_string(i); },
                [](std::size_t i) { return "R" + std::to_string(i); }),
            "S0 is not a multiple of S1: region sizes are whole minimum "
            "blocks; set N0 to a multiple of 4194304 bytes (4.00 MiB), or N1 "
            "to a power of two that divides 2097152");
  EXPECT_EQ(ConfigKeyOfField("growth_granularity"), "granularity");
  EXPECT_EQ(ConfigKeyOfField("trim_before_growth"), "");

  // The checks that need no device, on their own.
  o = Options();
  o.mode = AllocatorMode::kPlatform;
  o.history = 10;
  const absl::Status s = CheckOptions(o);
  EXPECT_EQ(s.message(),
            "Options.history=10: the allocation history belongs to "
            "allocator=bfc, but Options.mode=kPlatform (allocator=platform) "
            "records none; set Options.history to 0 (no history), or set "
            "Options.mode to AllocatorMode::kBfc");
  EXPECT_TRUE(OptionsProblemOf(s).has_value());
  EXPECT_FALSE(OptionsProblemOf(absl::InvalidArgumentError("x")).has_value());
  // Every key that belongs to allocator=bfc is refused the same way (the
  // modes column of the key table), front caches included; off is fine.
  o = Options();
  o.mode = AllocatorMode::kAsync;
  o.front_cache = 1024;
  EXPECT_EQ(CheckOptions(o).message(),
            "Options.front_cache=1024: a front cache belongs to "
            "allocator=bfc, but Options.mode=kAsync (allocator=async) keeps "
            "no freed blocks to cache; set Options.front_cache to 0 (off), or "
            "set Options.mode to AllocatorMode::kBfc");
  o.front_cache = 0;
  o.expandable = Tristate::kAuto;
  EXPECT_TRUE(CheckOptions(o).ok());
  o.expandable = Tristate::kOn;
  EXPECT_EQ(CheckOptions(o).message(),
            "Options.expandable=kOn belongs to allocator=bfc, but "
            "Options.mode=kAsync (allocator=async) manages no regions of its "
            "own to expand; set Options.expandable to Tristate::kAuto "
            "(expandable regions where they work), or set Options.mode to "
            "AllocatorMode::kBfc");
  EXPECT_TRUE(CheckOptions(Options()).ok());
}

}  // namespace
}  // namespace gpualloc::core
