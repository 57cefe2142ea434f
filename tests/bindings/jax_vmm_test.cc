// SPDX-License-Identifier: Apache-2.0
// JAX's XLA_PYTHON_CLIENT_ALLOCATOR=vmm (XLA's allocator over CUDA's virtual
// memory management). JAX has no allocator hook: a runtime embedding
// gpualloc reads JAX's variables, and the stand-in for JAX is its
// environment. vmm selects the BFC mode over expandable regions, with the
// reason in each setting's source (what gpualloc-info prints); an allocator
// made so allocates, frees on a stream and grows by mapping granules; a
// setting that contradicts it is refused naming both.
#include <algorithm>
#include <string>

#include "gmock/gmock.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/config.h"
#include "gpualloc/runtime/registry.h"
#include "gtest/gtest.h"

namespace gpualloc {
namespace {

using ::testing::HasSubstr;

const ConfigSetting& SettingOf(const Config& c, const std::string& key) {
  auto it = std::find_if(c.settings.begin(), c.settings.end(),
                         [&](const ConfigSetting& s) { return s.key == key; });
  EXPECT_NE(it, c.settings.end()) << key;
  return *it;
}

TEST(JaxVmmTest, SelectsBfcOverExpandableRegionsAndSaysWhy) {
  absl::StatusOr<Config> c =
      ResolveConfig("backend=sim,preallocate=false",
                    MapEnvironment({{"XLA_PYTHON_CLIENT_ALLOCATOR", "vmm"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.mode, AllocatorMode::kBfc);
  EXPECT_EQ(c->options.expandable, Tristate::kOn);
  for (const std::string key : {"allocator", "expandable"}) {
    const ConfigSetting& s = SettingOf(*c, key);
    EXPECT_EQ(s.origin, ValueOrigin::kAlias) << key;
    EXPECT_THAT(s.source, HasSubstr("XLA_PYTHON_CLIENT_ALLOCATOR")) << key;
    EXPECT_THAT(s.source, HasSubstr("expandable regions")) << key;
    EXPECT_EQ(s.set_by, "XLA_PYTHON_CLIENT_ALLOCATOR") << key;
    EXPECT_EQ(s.written, "vmm") << key;
  }
}

TEST(JaxVmmTest, AllocatesFreesOnAStreamAndGrowsByMappings) {
  absl::StatusOr<Config> c =
      ResolveConfig("backend=sim,device_memory=8GiB,preallocate=false",
                    MapEnvironment({{"XLA_PYTHON_CLIENT_ALLOCATOR", "vmm"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<DeviceRegistry>> registry =
      DeviceRegistry::Create(*c);
  ASSERT_TRUE(registry.ok()) << registry.status();
  absl::StatusOr<Allocator*> a = (*registry)->Get(0);
  ASSERT_TRUE(a.ok()) << a.status();
  const Stream stream(0x30);
  absl::StatusOr<void*> p = (*a)->Allocate(5 << 20, stream);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*a)->GetSnapshot().region_kind, RegionKind::kExpandable);
  ASSERT_TRUE((*a)->Deallocate(*p, stream).ok());
  const Stats stats = (*a)->GetStats();
  EXPECT_EQ(stats.num_allocs, 1u);
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_GE(stats.backend_allocs, 1u);  // granules mapped, not a region
  EXPECT_TRUE((*a)->Validate().ok());
}

TEST(JaxVmmTest, AGpuallocVariableStillWins) {
  absl::StatusOr<Config> c = ResolveConfig(
      "backend=sim", MapEnvironment({{"XLA_PYTHON_CLIENT_ALLOCATOR", "vmm"},
                                     {"GPUALLOC_EXPANDABLE", "false"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.mode, AllocatorMode::kBfc);
  EXPECT_EQ(c->options.expandable, Tristate::kOff);
  EXPECT_EQ(SettingOf(*c, "expandable").source, "GPUALLOC_EXPANDABLE");
}

TEST(JaxVmmTest, AContradictionIsRefusedNamingBoth) {
  absl::StatusOr<Config> c = ResolveConfig(
      "backend=sim", MapEnvironment({{"XLA_PYTHON_CLIENT_ALLOCATOR", "vmm"},
                                     {"PYTORCH_CUDA_ALLOC_CONF",
                                      "expandable_segments:False"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("XLA_PYTHON_CLIENT_ALLOCATOR=\"vmm\""));
  EXPECT_THAT(c.status().message(), HasSubstr("expandable_segments"));
  c = ResolveConfig("backend=sim", MapEnvironment({{"XLA_PYTHON_CLIENT_"
                                                    "ALLOCATOR",
                                                    "vmmm"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("vmm"));
}

}  // namespace
}  // namespace gpualloc
