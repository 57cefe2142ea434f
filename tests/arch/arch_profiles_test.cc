// SPDX-License-Identifier: Apache-2.0
// tests/arch/arch_profiles_test.cc: the architecture profile table and its
// lookups.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/core/backend.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc::testing {
namespace {

// The profile `name` names, or a test failure.
const ArchProfile& Profile(absl::string_view name) {
  absl::StatusOr<const ArchProfile*> p = FindArchProfile(name);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? **p : AllArchProfiles().front();
}

// The profile name a (vendor, arch id, memory) lookup picks, or the status.
std::string Pick(Vendor vendor, absl::string_view arch_id,
                 std::uint64_t memory_bytes = 0) {
  absl::StatusOr<const ArchProfile*> p =
      FindArchProfile(vendor, arch_id, memory_bytes);
  return p.ok() ? std::string((*p)->name) : p.status().ToString();
}

TEST(ArchProfilesTest, ListsTheSpecProfilesInStableOrder) {
  std::vector<std::string> names;
  for (const ArchProfile& p : AllArchProfiles()) names.emplace_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"h100", "h200", "a100", "mi250x",
                                             "mi300x", "generic-nvidia",
                                             "generic-amd"}));
  // The same storage on every call: pointers stay valid.
  EXPECT_EQ(AllArchProfiles().data(), AllArchProfiles().data());
}

TEST(ArchProfilesTest, FindsByNameIgnoringCase) {
  for (const ArchProfile& p : AllArchProfiles()) {
    absl::StatusOr<const ArchProfile*> exact = FindArchProfile(p.name);
    ASSERT_TRUE(exact.ok()) << exact.status();
    EXPECT_EQ(*exact, &p);
    absl::StatusOr<const ArchProfile*> upper =
        FindArchProfile(absl::AsciiStrToUpper(p.name));
    ASSERT_TRUE(upper.ok()) << upper.status();
    EXPECT_EQ(*upper, &p);
  }
  EXPECT_EQ(Profile("H200").name, "h200");
  EXPECT_EQ(Profile("Generic-AMD").name, "generic-amd");
  EXPECT_EQ(Profile("Mi300X").name, "mi300x");
}

TEST(ArchProfilesTest, UnknownNameIsNotFoundListingValidNames) {
  for (absl::string_view bad : {"b200", "", "h200 ", "sm_90", "generic"}) {
    absl::StatusOr<const ArchProfile*> p = FindArchProfile(bad);
    ASSERT_TRUE(absl::IsNotFound(p.status())) << bad << ": " << p.status();
    const absl::string_view message = p.status().message();
    EXPECT_TRUE(absl::StrContains(message, absl::StrCat("\"", bad, "\"")))
        << message;
    for (const ArchProfile& valid : AllArchProfiles()) {
      EXPECT_TRUE(absl::StrContains(message, valid.name))
          << message << " lacks " << valid.name;
    }
  }
}

TEST(ArchProfilesTest, FindsByArchIdAndMemory) {
  // H100 and H200 share sm_90: the memory size decides, the first listed
  // without one.
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_90"), "h100");
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_90", 81559 * kMiB), "h100");
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_90", 143771 * kMiB), "h200");
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_90", 141'000'000'000), "h200");
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_90", 95830 * kMiB), "h100");  // H100 NVL
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_90", 1), "h100");
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_90", ~std::uint64_t{0}), "h200");
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_80"), "a100");
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_80", 40960 * kMiB), "a100");
  EXPECT_EQ(Pick(Vendor::kNvidia, "SM_90"), "h100");
  EXPECT_EQ(Pick(Vendor::kAmd, "gfx942"), "mi300x");
  EXPECT_EQ(Pick(Vendor::kAmd, "gfx90a"), "mi250x");
  // HIP reports target features after the processor name.
  EXPECT_EQ(Pick(Vendor::kAmd, "gfx90a:sramecc+:xnack-"), "mi250x");
  EXPECT_EQ(Pick(Vendor::kAmd, "gfx942:sramecc+:xnack-", 192 * kGiB), "mi300x");
}

TEST(ArchProfilesTest, UnknownArchIdFallsBackToTheVendorsGenericProfile) {
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_89"), "generic-nvidia");
  EXPECT_EQ(Pick(Vendor::kNvidia, "sm_100", 180 * kGiB), "generic-nvidia");
  EXPECT_EQ(Pick(Vendor::kNvidia, ""), "generic-nvidia");
  EXPECT_EQ(Pick(Vendor::kAmd, "gfx1100"), "generic-amd");
  EXPECT_EQ(Pick(Vendor::kAmd, ""), "generic-amd");
  // An id of the other vendor is not a match.
  EXPECT_EQ(Pick(Vendor::kAmd, "sm_90"), "generic-amd");
  EXPECT_EQ(Pick(Vendor::kNvidia, "gfx942"), "generic-nvidia");
}

TEST(ArchProfilesTest, UnknownVendorIsNotFound) {
  absl::StatusOr<const ArchProfile*> p =
      FindArchProfile(Vendor::kUnknown, "sm_90", 143771 * kMiB);
  EXPECT_TRUE(absl::IsNotFound(p.status())) << p.status();
  EXPECT_TRUE(absl::StrContains(p.status().message(), "sm_90")) << p.status();
}

TEST(ArchProfilesTest, EveryProfileIsConsistent) {
  std::set<std::string> names;
  for (const ArchProfile& p : AllArchProfiles()) {
    SCOPED_TRACE(std::string(p.name));
    EXPECT_TRUE(names.insert(std::string(p.name)).second) << "duplicate";
    EXPECT_EQ(absl::AsciiStrToLower(p.name), p.name);
    EXPECT_FALSE(p.description.empty());
    EXPECT_FALSE(p.sources.empty());
    // Completion counters have figures and say where they come from.
    EXPECT_FALSE(p.costs.counter_sources.empty());
    EXPECT_GT(p.costs.write_counter.call_ns, 0u);
    EXPECT_GT(p.costs.wait_counter.call_ns, 0u);
    EXPECT_GT(p.costs.create_counters.call_ns, 0u);
    EXPECT_GT(p.costs.destroy_counters.call_ns, 0u);
    EXPECT_NE(p.vendor, Vendor::kUnknown);
    const bool generic = absl::StartsWith(p.name, "generic-");
    EXPECT_EQ(generic, p.arch_ids.empty());
    EXPECT_EQ(generic, p.memory_bytes == 0);
    EXPECT_TRUE(std::has_single_bit(p.min_granularity)) << p.min_granularity;
    EXPECT_TRUE(std::has_single_bit(p.recommended_granularity));
    EXPECT_LE(p.min_granularity, p.recommended_granularity);
    EXPECT_TRUE(std::has_single_bit(p.allocation_alignment));
    EXPECT_TRUE(std::has_single_bit(p.min_block_size));
    EXPECT_EQ(p.min_block_size, 256u);
    ASSERT_FALSE(p.page_sizes.empty());
    for (std::size_t i = 0; i < p.page_sizes.size(); ++i) {
      EXPECT_TRUE(std::has_single_bit(p.page_sizes[i])) << p.page_sizes[i];
      if (i > 0) {
        EXPECT_LT(p.page_sizes[i - 1], p.page_sizes[i]);
      }
    }
    EXPECT_NE(
        std::find(p.page_sizes.begin(), p.page_sizes.end(), p.large_page_size),
        p.page_sizes.end())
        << "large_page_size " << p.large_page_size << " is not a page size";
    // Memory is a whole number of MiB, as drivers report it, and a whole
    // number of plain-allocation units (the simulator requires that).
    EXPECT_EQ(p.memory_bytes % kMiB, 0u);
    EXPECT_EQ(p.memory_bytes % p.allocation_alignment, 0u);
    // Every arch id leads back to a profile of the same vendor, and the
    // profile's own memory size leads back to this one.
    for (absl::string_view id : p.arch_ids) {
      absl::StatusOr<const ArchProfile*> back =
          FindArchProfile(p.vendor, id, p.memory_bytes);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, &p) << id;
    }
  }
}

TEST(ArchProfilesTest, NumbersMatchTheSpecTable) {
  for (absl::string_view name : {"h100", "h200", "a100", "generic-nvidia"}) {
    const ArchProfile& p = Profile(name);
    SCOPED_TRACE(std::string(name));
    EXPECT_EQ(p.vendor, Vendor::kNvidia);
    EXPECT_EQ(p.min_granularity, 2 * kMiB);
    EXPECT_EQ(p.recommended_granularity, 2 * kMiB);
    EXPECT_EQ(p.allocation_alignment, 256u);
    EXPECT_EQ(p.page_sizes, (std::vector<std::uint64_t>{4 * kKiB, 64 * kKiB,
                                                        2 * kMiB, 512 * kMiB}));
    EXPECT_EQ(p.large_page_size, 2 * kMiB);
  }
  for (absl::string_view name : {"mi250x", "mi300x", "generic-amd"}) {
    const ArchProfile& p = Profile(name);
    SCOPED_TRACE(std::string(name));
    EXPECT_EQ(p.vendor, Vendor::kAmd);
    EXPECT_EQ(p.min_granularity, 4 * kKiB);
    EXPECT_EQ(p.recommended_granularity, 2 * kMiB);
    EXPECT_EQ(p.allocation_alignment, 4 * kKiB);
    EXPECT_EQ(p.page_sizes, (std::vector<std::uint64_t>{4 * kKiB, 2 * kMiB}));
    EXPECT_EQ(p.large_page_size, 2 * kMiB);
  }
  EXPECT_EQ(Profile("h100").memory_bytes, 81559 * kMiB);
  EXPECT_EQ(Profile("h200").memory_bytes, 143771 * kMiB);
  EXPECT_EQ(Profile("a100").memory_bytes, 81920 * kMiB);
  EXPECT_EQ(Profile("mi250x").memory_bytes, 64 * kGiB);
  EXPECT_EQ(Profile("mi300x").memory_bytes, 192 * kGiB);
  EXPECT_EQ(Profile("h100").arch_ids,
            (std::vector<absl::string_view>{"sm_90"}));
  EXPECT_EQ(Profile("h200").arch_ids,
            (std::vector<absl::string_view>{"sm_90"}));
  EXPECT_EQ(Profile("a100").arch_ids,
            (std::vector<absl::string_view>{"sm_80"}));
  EXPECT_EQ(Profile("mi250x").arch_ids,
            (std::vector<absl::string_view>{"gfx90a"}));
  EXPECT_EQ(Profile("mi300x").arch_ids,
            (std::vector<absl::string_view>{"gfx942"}));
}

TEST(VendorNameTest, NamesEveryVendor) {
  EXPECT_EQ(VendorName(Vendor::kUnknown), "unknown");
  EXPECT_EQ(VendorName(Vendor::kNvidia), "nvidia");
  EXPECT_EQ(VendorName(Vendor::kAmd), "amd");
}

}  // namespace
}  // namespace gpualloc::testing
