// SPDX-License-Identifier: Apache-2.0
// tests/core/config_test.cc: the configuration string, the environment and the
// defaults (docs/REFERENCE.md, "Configuration reference"): every variable
// and alias, precedence, strictness and the messages errors carry.
#include "gpualloc/core/config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace gpualloc {
namespace {

using ::testing::HasSubstr;
using testing::kGiB;
using testing::kKiB;
using testing::kMiB;
using ::testing::Not;

using Env = std::map<std::string, std::string>;

absl::StatusOr<Config> Resolve(const std::string& config_string,
                               const Env& env = {}) {
  return ResolveConfig(config_string, MapEnvironment(env));
}

const ConfigSetting& SettingOf(const Config& c, const std::string& key) {
  for (const ConfigSetting& s : c.settings) {
    if (s.key == key) return s;
  }
  static const ConfigSetting kMissing{"missing", "", ValueOrigin::kDefault,
                                      "",        "", ""};
  ADD_FAILURE() << "no setting " << key;
  return kMissing;
}

const std::vector<std::string> kAllKeys = {
    "allocator",        "preallocate",   "mem_fraction", "mem_limit",
    "expandable",       "arch",          "gc",           "gc_threshold",
    "backend",          "device_memory", "cross_stream", "growth",
    "granularity",      "min_block",     "split_bound",  "size_divisions",
    "history",          "front_cache",   "name",         "memory_kind",
    "host_memory_limit"};

TEST(ConfigTest, DefaultsAreJaxs) {
  auto c = Resolve("");
  ASSERT_TRUE(c.ok()) << c.status();
  const Options defaults;
  EXPECT_EQ(c->options.mode, AllocatorMode::kBfc);
  EXPECT_TRUE(c->options.preallocate);
  EXPECT_EQ(c->options.memory_fraction, 0.75);
  EXPECT_EQ(c->options.memory_limit, 0u);
  EXPECT_EQ(c->options.expandable, Tristate::kAuto);
  EXPECT_EQ(c->options.arch, "auto");
  EXPECT_TRUE(c->options.garbage_collection);
  EXPECT_EQ(c->options.cross_stream_reuse, CrossStreamReuse::kBeforeGrowth);
  EXPECT_EQ(c->options.name, "");
  EXPECT_EQ(c->options.growth_policy, defaults.growth_policy);
  EXPECT_EQ(c->backend, BackendKind::kAuto);
  EXPECT_EQ(c->device_memory, 0u);

  // Every key, in the table's order, from the defaults.
  ASSERT_EQ(c->settings.size(), kAllKeys.size());
  for (std::size_t i = 0; i < kAllKeys.size(); ++i) {
    EXPECT_EQ(c->settings[i].key, kAllKeys[i]);
    EXPECT_EQ(c->settings[i].origin, ValueOrigin::kDefault) << kAllKeys[i];
    EXPECT_EQ(c->settings[i].source, "default") << kAllKeys[i];
    EXPECT_EQ(c->settings[i].set_by, "") << kAllKeys[i];
    EXPECT_EQ(c->settings[i].written, "") << kAllKeys[i];
  }
  EXPECT_EQ(SettingOf(*c, "allocator").value, "bfc");
  EXPECT_EQ(SettingOf(*c, "preallocate").value, "true");
  EXPECT_EQ(SettingOf(*c, "mem_fraction").value, "0.75");
  EXPECT_EQ(SettingOf(*c, "mem_limit").value, "unset");
  EXPECT_EQ(SettingOf(*c, "expandable").value, "auto");
  EXPECT_EQ(SettingOf(*c, "arch").value, "auto");
  EXPECT_EQ(SettingOf(*c, "gc").value, "true");
  EXPECT_EQ(SettingOf(*c, "gc_threshold").value, "0");
  EXPECT_EQ(c->options.gc_threshold, 0);
  EXPECT_EQ(SettingOf(*c, "backend").value, "auto");
  EXPECT_EQ(SettingOf(*c, "device_memory").value, "unset");
  EXPECT_EQ(SettingOf(*c, "cross_stream").value, "before_growth");
  EXPECT_EQ(SettingOf(*c, "growth").value, "exact");
  EXPECT_EQ(SettingOf(*c, "granularity").value, "profile");
  EXPECT_EQ(SettingOf(*c, "min_block").value, "profile");
  EXPECT_EQ(SettingOf(*c, "split_bound").value, "0");
  EXPECT_EQ(SettingOf(*c, "size_divisions").value, "0");
  EXPECT_EQ(c->options.size_divisions, 0u);
  EXPECT_EQ(c->options.growth_granularity, defaults.growth_granularity);
  EXPECT_EQ(c->options.min_block_size, defaults.min_block_size);
  EXPECT_EQ(c->options.max_internal_fragmentation,
            defaults.max_internal_fragmentation);
  EXPECT_EQ(SettingOf(*c, "name").value, "");
  EXPECT_EQ(c->memory_kind, MemoryKind::kCoarse);
  EXPECT_EQ(SettingOf(*c, "memory_kind").value, "coarse");
}

// One variable set: the key takes the value, with the variable as its source.
struct VariableCase {
  std::string variable;
  std::string value;
  std::string key;
  std::string effective;  // the setting's value text
  ValueOrigin origin;
};

TEST(ConfigTest, EachVariableAndAlias) {
  const std::vector<VariableCase> cases = {
      {"GPUALLOC_ALLOCATOR", "platform", "allocator", "platform",
       ValueOrigin::kVariable},
      {"GPUALLOC_ALLOCATOR", "async", "allocator", "async",
       ValueOrigin::kVariable},
      {"GPUALLOC_ALLOCATOR", "BFC", "allocator", "bfc", ValueOrigin::kVariable},
      {"GPUALLOC_PREALLOCATE", "false", "preallocate", "false",
       ValueOrigin::kVariable},
      {"GPUALLOC_PREALLOCATE", "0", "preallocate", "false",
       ValueOrigin::kVariable},
      {"GPUALLOC_PREALLOCATE", "True", "preallocate", "true",
       ValueOrigin::kVariable},
      {"GPUALLOC_MEM_FRACTION", "0.5", "mem_fraction", "0.5",
       ValueOrigin::kVariable},
      {"GPUALLOC_MEM_FRACTION", "1", "mem_fraction", "1",
       ValueOrigin::kVariable},
      {"GPUALLOC_MEM_FRACTION", " .9 ", "mem_fraction", "0.9",
       ValueOrigin::kVariable},
      // Small fractions read back as written, never with an exponent (which
      // the configuration string would not read).
      {"GPUALLOC_MEM_FRACTION", "0.0001", "mem_fraction", "0.0001",
       ValueOrigin::kVariable},
      {"GPUALLOC_MEM_FRACTION", "0.00000125", "mem_fraction", "0.00000125",
       ValueOrigin::kVariable},
      {"GPUALLOC_MEM_LIMIT", "40GiB", "mem_limit", "42949672960",
       ValueOrigin::kVariable},
      {"GPUALLOC_MEM_LIMIT", "512 MB", "mem_limit", "512000000",
       ValueOrigin::kVariable},
      {"GPUALLOC_EXPANDABLE", "false", "expandable", "false",
       ValueOrigin::kVariable},
      {"GPUALLOC_EXPANDABLE", "1", "expandable", "true",
       ValueOrigin::kVariable},
      {"GPUALLOC_EXPANDABLE", "AUTO", "expandable", "auto",
       ValueOrigin::kVariable},
      {"GPUALLOC_ARCH", "MI300X", "arch", "mi300x", ValueOrigin::kVariable},
      {"GPUALLOC_ARCH", "generic-nvidia", "arch", "generic-nvidia",
       ValueOrigin::kVariable},
      {"GPUALLOC_ARCH", "auto", "arch", "auto", ValueOrigin::kVariable},
      {"GPUALLOC_GC", "0", "gc", "false", ValueOrigin::kVariable},
      {"GPUALLOC_GC_THRESHOLD", "0.8", "gc_threshold", "0.8",
       ValueOrigin::kVariable},
      {"GPUALLOC_GC_THRESHOLD", ".5", "gc_threshold", "0.5",
       ValueOrigin::kVariable},
      {"GPUALLOC_GC_THRESHOLD", "0", "gc_threshold", "0",
       ValueOrigin::kVariable},
      {"GPUALLOC_GC_THRESHOLD", "0.0", "gc_threshold", "0",
       ValueOrigin::kVariable},
      {"GPUALLOC_GC_THRESHOLD", "0.00005", "gc_threshold", "0.00005",
       ValueOrigin::kVariable},
      {"GPUALLOC_BACKEND", "sim", "backend", "sim", ValueOrigin::kVariable},
      {"GPUALLOC_BACKEND", "cuda", "backend", "cuda", ValueOrigin::kVariable},
      {"GPUALLOC_BACKEND", "hip", "backend", "hip", ValueOrigin::kVariable},
      {"GPUALLOC_BACKEND", "auto", "backend", "auto", ValueOrigin::kVariable},
      {"GPUALLOC_DEVICE_MEMORY", "80GB", "device_memory", "80000000000",
       ValueOrigin::kVariable},
      {"GPUALLOC_CROSS_STREAM", "stream_wait", "cross_stream", "stream_wait",
       ValueOrigin::kVariable},
      {"GPUALLOC_CROSS_STREAM", "when_complete", "cross_stream",
       "when_complete", ValueOrigin::kVariable},
      {"GPUALLOC_GROWTH", "doubling", "growth", "doubling",
       ValueOrigin::kVariable},
      {"GPUALLOC_GROWTH", "EXACT", "growth", "exact", ValueOrigin::kVariable},
      {"GPUALLOC_GRANULARITY", "32MiB", "granularity", "33554432",
       ValueOrigin::kVariable},
      {"GPUALLOC_MIN_BLOCK", "4096", "min_block", "4096",
       ValueOrigin::kVariable},
      {"GPUALLOC_MIN_BLOCK", "1KiB", "min_block", "1024",
       ValueOrigin::kVariable},
      {"GPUALLOC_SPLIT_BOUND", "1MiB", "split_bound", "1048576",
       ValueOrigin::kVariable},
      {"GPUALLOC_SPLIT_BOUND", "0", "split_bound", "0", ValueOrigin::kVariable},
      {"GPUALLOC_SIZE_DIVISIONS", "4", "size_divisions", "4",
       ValueOrigin::kVariable},
      {"GPUALLOC_SIZE_DIVISIONS", " 64 ", "size_divisions", "64",
       ValueOrigin::kVariable},
      {"GPUALLOC_SIZE_DIVISIONS", "0", "size_divisions", "0",
       ValueOrigin::kVariable},
      {"GPUALLOC_HISTORY", "100000", "history", "100000",
       ValueOrigin::kVariable},
      {"GPUALLOC_HISTORY", "16777216", "history", "16777216",
       ValueOrigin::kVariable},
      {"GPUALLOC_FRONT_CACHE", "4MiB", "front_cache", "4194304",
       ValueOrigin::kVariable},
      {"GPUALLOC_NAME", "train step", "name", "train step",
       ValueOrigin::kVariable},
      {"GPUALLOC_MEMORY_KIND", "fine", "memory_kind", "fine",
       ValueOrigin::kVariable},
      {"GPUALLOC_MEMORY_KIND", " Coarse ", "memory_kind", "coarse",
       ValueOrigin::kVariable},
      // JAX/XLA/TF aliases.
      {"XLA_PYTHON_CLIENT_ALLOCATOR", "default", "allocator", "bfc",
       ValueOrigin::kAlias},
      {"XLA_PYTHON_CLIENT_ALLOCATOR", "bfc", "allocator", "bfc",
       ValueOrigin::kAlias},
      {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform", "allocator", "platform",
       ValueOrigin::kAlias},
      {"XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async", "allocator", "async",
       ValueOrigin::kAlias},
      // XLA's synchronous passthrough allocator is allocator=platform.
      {"XLA_PYTHON_CLIENT_ALLOCATOR", "address", "allocator", "platform",
       ValueOrigin::kAlias},
      {"XLA_PYTHON_CLIENT_PREALLOCATE", "false", "preallocate", "false",
       ValueOrigin::kAlias},
      {"XLA_CLIENT_MEM_FRACTION", ".95", "mem_fraction", "0.95",
       ValueOrigin::kAlias},
      {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.3", "mem_fraction", "0.3",
       ValueOrigin::kAlias},
      {"TF_ENABLE_GPU_GARBAGE_COLLECTION", "false", "gc", "false",
       ValueOrigin::kAlias},
  };
  for (const VariableCase& t : cases) {
    SCOPED_TRACE(t.variable + "=" + t.value);
    auto c = Resolve("", {{t.variable, t.value}});
    ASSERT_TRUE(c.ok()) << c.status();
    const ConfigSetting& s = SettingOf(*c, t.key);
    EXPECT_EQ(s.value, t.effective);
    EXPECT_EQ(s.origin, t.origin);
    EXPECT_EQ(s.source, t.variable);
    // What the user set, as written (trimmed).
    EXPECT_EQ(s.set_by, t.variable);
    EXPECT_EQ(s.written, absl::StripAsciiWhitespace(t.value));
    // Every other key stays at its default.
    for (const ConfigSetting& other : c->settings) {
      if (other.key != t.key) {
        EXPECT_EQ(other.origin, ValueOrigin::kDefault) << other.key;
      }
    }
  }
}

TEST(ConfigTest, VariablesReachTheOptions) {
  auto c = Resolve("", {{"GPUALLOC_ALLOCATOR", "platform"},
                        {"GPUALLOC_PREALLOCATE", "false"},
                        {"GPUALLOC_MEM_FRACTION", "0.5"},
                        {"GPUALLOC_MEM_LIMIT", "40GiB"},
                        {"GPUALLOC_EXPANDABLE", "false"},
                        {"GPUALLOC_ARCH", "H100"},
                        {"GPUALLOC_GC", "false"},
                        {"GPUALLOC_GC_THRESHOLD", "0.7"},
                        {"GPUALLOC_BACKEND", "sim"},
                        {"GPUALLOC_DEVICE_MEMORY", "80GB"},
                        {"GPUALLOC_CROSS_STREAM", "stream_wait"},
                        {"GPUALLOC_GROWTH", "doubling"},
                        {"GPUALLOC_GRANULARITY", "2MiB"},
                        {"GPUALLOC_MIN_BLOCK", "512"},
                        {"GPUALLOC_SPLIT_BOUND", "1MiB"},
                        {"GPUALLOC_SIZE_DIVISIONS", "8"},
                        {"GPUALLOC_HISTORY", "1000"},
                        {"GPUALLOC_FRONT_CACHE", "4MiB"},
                        {"GPUALLOC_NAME", "job"},
                        {"GPUALLOC_MEMORY_KIND", "fine"},
                        {"GPUALLOC_HOST_MEMORY_LIMIT", "1GiB"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->memory_kind, MemoryKind::kFine);
  EXPECT_EQ(c->host_memory_limit, kGiB);
  EXPECT_EQ(c->options.mode, AllocatorMode::kPlatform);
  EXPECT_FALSE(c->options.preallocate);
  EXPECT_EQ(c->options.memory_fraction, 0.5);
  // Both are kept; the limit decides (Options::memory_limit).
  EXPECT_EQ(c->options.memory_limit, 40 * kGiB);
  EXPECT_EQ(c->options.expandable, Tristate::kOff);
  EXPECT_EQ(c->options.arch, "h100");
  EXPECT_FALSE(c->options.garbage_collection);
  EXPECT_EQ(c->options.gc_threshold, 0.7);
  EXPECT_EQ(c->backend, BackendKind::kSim);
  EXPECT_EQ(c->device_memory, 80'000'000'000u);
  EXPECT_EQ(c->options.cross_stream_reuse, CrossStreamReuse::kStreamWait);
  EXPECT_EQ(c->options.growth_policy, GrowthPolicy::kDoubling);
  EXPECT_EQ(c->options.growth_granularity, 2 * kMiB);
  EXPECT_EQ(c->options.min_block_size, 512u);
  EXPECT_EQ(c->options.max_internal_fragmentation, 1 * kMiB);
  EXPECT_EQ(c->options.size_divisions, 8u);
  EXPECT_EQ(c->options.history, 1000u);
  EXPECT_EQ(c->options.name, "job");
  for (const ConfigSetting& s : c->settings) {
    EXPECT_EQ(s.origin, ValueOrigin::kVariable) << s.key;
  }
}

// Precedence, per key: option > GPUALLOC_* variable > alias > default.
struct PrecedenceCase {
  std::string key;
  std::string variable;
  std::string alias;  // empty: the key has none
  // Three distinct valid values, written for the option, the variable and the
  // alias, and the effective value text each gives.
  std::string option_value, variable_value, alias_value;
  std::string option_effective, variable_effective, alias_effective;
};

TEST(ConfigTest, PrecedenceOptionVariableAliasDefault) {
  const std::vector<PrecedenceCase> cases = {
      {"allocator", "GPUALLOC_ALLOCATOR", "XLA_PYTHON_CLIENT_ALLOCATOR",
       "async", "platform", "default", "async", "platform", "bfc"},
      {"preallocate", "GPUALLOC_PREALLOCATE", "XLA_PYTHON_CLIENT_PREALLOCATE",
       "true", "false", "true", "true", "false", "true"},
      {"mem_fraction", "GPUALLOC_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION",
       "0.1", "0.2", "0.3", "0.1", "0.2", "0.3"},
      {"mem_fraction", "GPUALLOC_MEM_FRACTION",
       "XLA_PYTHON_CLIENT_MEM_FRACTION", "0.1", "0.2", "0.3", "0.1", "0.2",
       "0.3"},
      {"gc", "GPUALLOC_GC", "TF_ENABLE_GPU_GARBAGE_COLLECTION", "false", "true",
       "false", "false", "true", "false"},
      {"gc_threshold", "GPUALLOC_GC_THRESHOLD", "", "0.5", "0.75", "", "0.5",
       "0.75", ""},
      {"mem_limit", "GPUALLOC_MEM_LIMIT", "", "1GiB", "2GiB", "", "1073741824",
       "2147483648", ""},
      {"expandable", "GPUALLOC_EXPANDABLE", "", "false", "true", "", "false",
       "true", ""},
      {"arch", "GPUALLOC_ARCH", "", "h100", "mi250x", "", "h100", "mi250x", ""},
      {"backend", "GPUALLOC_BACKEND", "", "sim", "hip", "", "sim", "hip", ""},
      {"device_memory", "GPUALLOC_DEVICE_MEMORY", "", "1GB", "2GB", "",
       "1000000000", "2000000000", ""},
      {"cross_stream", "GPUALLOC_CROSS_STREAM", "", "stream_wait",
       "when_complete", "", "stream_wait", "when_complete", ""},
      {"size_divisions", "GPUALLOC_SIZE_DIVISIONS", "", "2", "16", "", "2",
       "16", ""},
      {"history", "GPUALLOC_HISTORY", "", "10", "20", "", "10", "20", ""},
      {"front_cache", "GPUALLOC_FRONT_CACHE", "", "1MiB", "2MiB", "", "1048576",
       "2097152", ""},
      {"name", "GPUALLOC_NAME", "", "a", "b", "", "a", "b", ""},
      {"memory_kind", "GPUALLOC_MEMORY_KIND", "", "fine", "coarse", "", "fine",
       "coarse", ""},
      {"host_memory_limit", "GPUALLOC_HOST_MEMORY_LIMIT", "", "1GiB", "2GiB",
       "", "1073741824", "2147483648", ""},
  };
  for (const PrecedenceCase& t : cases) {
    SCOPED_TRACE(t.key + " / " + t.variable + " / " + t.alias);
    Env all = {{t.variable, t.variable_value}};
    if (!t.alias.empty()) all[t.alias] = t.alias_value;
    const std::string option = t.key + "=" + t.option_value;

    auto c = Resolve(option, all);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(SettingOf(*c, t.key).value, t.option_effective);
    EXPECT_EQ(SettingOf(*c, t.key).origin, ValueOrigin::kOption);
    EXPECT_EQ(SettingOf(*c, t.key).source, "config string");
    EXPECT_EQ(SettingOf(*c, t.key).set_by, "config string " + t.key);
    EXPECT_EQ(SettingOf(*c, t.key).written, t.option_value);

    c = Resolve("", all);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(SettingOf(*c, t.key).value, t.variable_effective);
    EXPECT_EQ(SettingOf(*c, t.key).origin, ValueOrigin::kVariable);
    EXPECT_EQ(SettingOf(*c, t.key).source, t.variable);

    if (!t.alias.empty()) {
      c = Resolve("", {{t.alias, t.alias_value}});
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(SettingOf(*c, t.key).value, t.alias_effective);
      EXPECT_EQ(SettingOf(*c, t.key).origin, ValueOrigin::kAlias);
      EXPECT_EQ(SettingOf(*c, t.key).source, t.alias);
    }
  }
}

// A fraction set by a program prints without an exponent, so that
// "key=value" reads back as the same setting, however small it is.
TEST(ConfigTest, SmallFractionsPrintAsDecimalsThatReadBack) {
  for (const double f : {1e-4, 1.25e-6, 3e-9, 0.75}) {
    SCOPED_TRACE(f);
    ConfigOverrides o;
    o.memory_fraction = f;
    o.gc_threshold = f;
    auto c = ResolveConfig(o, MapEnvironment({}));
    ASSERT_TRUE(c.ok()) << c.status();
    for (const char* key : {"mem_fraction", "gc_threshold"}) {
      const std::string value = SettingOf(*c, key).value;
      EXPECT_EQ(value.find_first_of("eE"), std::string::npos) << value;
      auto back = ParseConfigString(absl::StrCat(key, "=", value));
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(std::string(key) == "mem_fraction" ? *back->memory_fraction
                                                   : *back->gc_threshold,
                f);
    }
  }
}

TEST(ConfigTest, OverridesStructIsOptionOrigin) {
  ConfigOverrides o;
  o.memory_fraction = 0.25;
  o.arch = "MI250X";
  o.backend = BackendKind::kSim;
  auto c = ResolveConfig(o, MapEnvironment({{"GPUALLOC_MEM_FRACTION", "0.5"},
                                            {"GPUALLOC_GC", "false"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.memory_fraction, 0.25);
  EXPECT_EQ(c->options.arch, "mi250x");  // canonical spelling
  EXPECT_EQ(SettingOf(*c, "mem_fraction").origin, ValueOrigin::kOption);
  EXPECT_EQ(SettingOf(*c, "mem_fraction").source, "option");
  EXPECT_EQ(SettingOf(*c, "mem_fraction").set_by, "option mem_fraction");
  EXPECT_EQ(SettingOf(*c, "mem_fraction").written, "0.25");
  EXPECT_EQ(SettingOf(*c, "gc").origin, ValueOrigin::kVariable);
  EXPECT_EQ(SettingOf(*c, "gc").source, "GPUALLOC_GC");
  EXPECT_EQ(SettingOf(*c, "backend").value, "sim");
  EXPECT_EQ(SettingOf(*c, "allocator").origin, ValueOrigin::kDefault);
}

TEST(ConfigTest, BadOverridesAreRejectedLikeParsedOnes) {
  struct Case {
    std::string name;
    ConfigOverrides o;
    std::string needle;
  };
  std::vector<Case> cases;
  cases.push_back({"fraction", {}, "option mem_fraction=\"1.5\""});
  cases.back().o.memory_fraction = 1.5;
  cases.push_back({"nan fraction", {}, "option mem_fraction"});
  cases.back().o.memory_fraction = std::nan("");
  cases.push_back({"zero limit", {}, "option mem_limit=\"0\""});
  cases.back().o.memory_limit = 0;
  cases.push_back({"arch", {}, "option arch=\"h300\""});
  cases.back().o.arch = "h300";
  cases.push_back({"device memory", {}, "option device_memory=\"0\""});
  cases.back().o.device_memory = 0;
  cases.push_back({"growth enum", {}, "option growth"});
  cases.back().o.growth_policy = static_cast<GrowthPolicy>(7);
  cases.push_back({"zero granularity", {}, "option granularity=\"0\""});
  cases.back().o.growth_granularity = 0;
  cases.push_back({"min block", {}, "option min_block=\"100\""});
  cases.back().o.min_block_size = 100;
  cases.push_back({"backend enum", {}, "option backend"});
  cases.back().o.backend = static_cast<BackendKind>(42);
  cases.push_back({"size divisions", {}, "option size_divisions=\"3\""});
  cases.back().o.size_divisions = 3;
  cases.push_back({"size divisions 1", {}, "option size_divisions=\"1\""});
  cases.back().o.size_divisions = 1;
  cases.push_back({"history", {}, "option history=\"16777217\""});
  cases.back().o.history = (std::uint64_t{1} << 24) + 1;
  cases.push_back({"gc threshold", {}, "option gc_threshold=\"1\""});
  cases.back().o.gc_threshold = 1;
  cases.push_back(
      {"negative gc threshold", {}, "option gc_threshold=\"-0.5\""});
  cases.back().o.gc_threshold = -0.5;
  for (const Case& t : cases) {
    SCOPED_TRACE(t.name);
    auto c = ResolveConfig(t.o, MapEnvironment({}));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr(t.needle));
  }
}

TEST(ConfigTest, VariableWinsOverAliasButAliasIsStillParsed) {
  auto c = Resolve("", {{"GPUALLOC_PREALLOCATE", "true"},
                        {"XLA_PYTHON_CLIENT_PREALLOCATE", "false"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->options.preallocate);

  c = Resolve("", {{"GPUALLOC_PREALLOCATE", "true"},
                   {"XLA_PYTHON_CLIENT_PREALLOCATE", "maybe"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("XLA_PYTHON_CLIENT_PREALLOCATE=\"maybe\""));

  // An option does not hide a bad variable either.
  c = Resolve("mem_fraction=0.5", {{"GPUALLOC_MEM_FRACTION", "2"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("GPUALLOC_MEM_FRACTION=\"2\""));
}

TEST(ConfigTest, FractionFromAHigherLevelBeatsALimitFromALowerOne) {
  // The program's fraction beats the environment's limit ...
  auto c = ResolveConfig("mem_fraction=0.5",
                         MapEnvironment({{"GPUALLOC_MEM_LIMIT", "40GiB"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.memory_limit, 0u);
  EXPECT_EQ(c->options.memory_fraction, 0.5);
  EXPECT_NE(SettingOf(*c, "mem_limit").source.find("overridden"),
            std::string::npos);
  // ... while at one level the limit beats the fraction.
  c = ResolveConfig("", MapEnvironment({{"GPUALLOC_MEM_LIMIT", "40GiB"},
                                        {"GPUALLOC_MEM_FRACTION", "0.5"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.memory_limit, 40ull << 30);
  // And a variable's limit beats an alias's fraction.
  c = ResolveConfig("",
                    MapEnvironment({{"GPUALLOC_MEM_LIMIT", "40GiB"},
                                    {"XLA_PYTHON_CLIENT_MEM_FRACTION", ".9"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.memory_limit, 40ull << 30);
}

TEST(ConfigTest, BothFractionAliasesIsAnError) {
  for (const Env& env : {Env{{"XLA_CLIENT_MEM_FRACTION", "0.5"},
                             {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"}},
                         Env{{"XLA_CLIENT_MEM_FRACTION", "0.5"},
                             {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6"}},
                         Env{{"GPUALLOC_MEM_FRACTION", "0.4"},
                             {"XLA_CLIENT_MEM_FRACTION", "0.5"},
                             {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"}}}) {
    auto c = Resolve("", env);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("XLA_CLIENT_MEM_FRACTION=\""));
    EXPECT_THAT(c.status().message(),
                HasSubstr("XLA_PYTHON_CLIENT_MEM_FRACTION=\""));
  }
}

// A bad value for every variable: InvalidArgument naming the variable and
// quoting the value.
struct BadCase {
  std::string variable;
  std::string value;
  std::string why;  // a part of the explanation
};

TEST(ConfigTest, BadValueForEveryVariable) {
  std::vector<BadCase> cases = {
      {"GPUALLOC_ALLOCATOR", "cuda_async", "not one of bfc, platform, async"},
      {"GPUALLOC_ALLOCATOR", "", "empty"},
      {"XLA_PYTHON_CLIENT_ALLOCATOR", "async",
       "not one of default, bfc, platform, cuda_async"},
      {"GPUALLOC_PREALLOCATE", "yes", "not a boolean"},
      {"GPUALLOC_PREALLOCATE", "truee", "not a boolean"},
      {"XLA_PYTHON_CLIENT_PREALLOCATE", "2", "not a boolean"},
      {"GPUALLOC_MEM_FRACTION", "1.5", "not in (0, 1]"},
      {"GPUALLOC_MEM_FRACTION", "2", "not in (0, 1]"},
      {"GPUALLOC_MEM_FRACTION", "0", "not in (0, 1]"},
      {"GPUALLOC_MEM_FRACTION", "0.0", "not in (0, 1]"},
      {"GPUALLOC_MEM_FRACTION", "-0.5", "not a decimal number"},
      {"GPUALLOC_MEM_FRACTION", "nan", "not a decimal number"},
      {"GPUALLOC_MEM_FRACTION", "inf", "not a decimal number"},
      {"GPUALLOC_MEM_FRACTION", "0.5x", "not a decimal number"},
      {"GPUALLOC_MEM_FRACTION", "5e-1", "not a decimal number"},
      {"GPUALLOC_MEM_FRACTION", "0.5.1", "not a decimal number"},
      {"GPUALLOC_MEM_FRACTION", ".", "not a decimal number"},
      {"GPUALLOC_MEM_FRACTION", "50%", "not a decimal number"},
      {"GPUALLOC_MEM_FRACTION", "   ", "empty"},
      {"XLA_CLIENT_MEM_FRACTION", "1.01", "not in (0, 1]"},
      {"XLA_PYTHON_CLIENT_MEM_FRACTION", "abc", "not a decimal number"},
      {"GPUALLOC_MEM_LIMIT", "0", "more than 0 bytes"},
      {"GPUALLOC_MEM_LIMIT", "40G", "unknown unit"},
      {"GPUALLOC_MEM_LIMIT", "-1GB", "not a size"},
      {"GPUALLOC_MEM_LIMIT", "lots", "not a size"},
      {"GPUALLOC_MEM_LIMIT", "99999999999TB", "64 bits"},
      {"GPUALLOC_EXPANDABLE", "maybe", "not one of true, false, auto"},
      {"GPUALLOC_ARCH", "h300", "valid names: auto, h100"},
      {"GPUALLOC_ARCH", "sm_90", "unknown architecture profile"},
      {"GPUALLOC_GC", "2", "not a boolean"},
      {"TF_ENABLE_GPU_GARBAGE_COLLECTION", "off", "not a boolean"},
      {"GPUALLOC_BACKEND", "opencl", "not one of auto, sim, cuda, hip"},
      {"GPUALLOC_DEVICE_MEMORY", "1.5B", "whole number of bytes"},
      {"GPUALLOC_DEVICE_MEMORY", "0GiB", "more than 0 bytes"},
      {"GPUALLOC_CROSS_STREAM", "never",
       "not one of when_complete, stream_wait"},
      {"GPUALLOC_GROWTH", "linear", "not one of exact, doubling"},
      {"GPUALLOC_GROWTH", "", "empty"},
      {"GPUALLOC_GRANULARITY", "0", "more than 0 bytes"},
      {"GPUALLOC_GRANULARITY", "2M", "unknown unit"},
      {"GPUALLOC_MIN_BLOCK", "300", "power of two"},
      {"GPUALLOC_MIN_BLOCK", "8", "power of two"},
      {"GPUALLOC_MIN_BLOCK", "0", "power of two"},
      {"GPUALLOC_SPLIT_BOUND", "-1", "not a size"},
      {"GPUALLOC_SPLIT_BOUND", "1.5B", "whole number of bytes"},
      {"GPUALLOC_NAME", "", "empty"},
  };
  for (const char* t : {"1", "1.0", "1.5", "-0.5", "0.8x", "high", "00.."}) {
    cases.push_back({"GPUALLOC_GC_THRESHOLD", t,
                     "not 0 (off) or a decimal fraction of the limit in (0, "
                     "1)"});
  }
  for (const char* n : {"3", "1", "128", "-4", "4.0", "four", "0x4",
                        "99999999999999999999999"}) {
    cases.push_back({"GPUALLOC_SIZE_DIVISIONS", n,
                     "not 0 (off) or a power of two from 2 to 64"});
  }
  for (const char* n : {"16777217", "-1", "1e6", "10k", "0x10"}) {
    cases.push_back({"GPUALLOC_HISTORY", n,
                     "not 0 (off) or a number of events up to 16777216"});
  }
  for (const BadCase& t : cases) {
    SCOPED_TRACE(t.variable + "=" + t.value);
    auto c = Resolve("", {{t.variable, t.value}});
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(),
                HasSubstr(t.variable + "=\"" + t.value + "\""));
    EXPECT_THAT(c.status().message(), HasSubstr(t.why));
  }
}

TEST(ConfigTest, MessageFormat) {
  auto c = Resolve("", {{"GPUALLOC_MEM_FRACTION", "1.5"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "GPUALLOC_MEM_FRACTION=\"1.5\": not in (0, 1] (a fraction of "
            "the device's total memory, e.g. 0.75)");
}

// A long bad value is cut in the message, as trace errors cut long lines: the
// first 80 bytes, "..." and the whole length.
TEST(ConfigTest, LongBadValuesAreCut) {
  const std::string long_value(10000, 'x');
  const std::string cut = "\"" + std::string(80, 'x') + "...\" (10000 bytes)";
  auto c = Resolve("", {{"GPUALLOC_MEM_FRACTION", long_value}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "GPUALLOC_MEM_FRACTION=" + cut +
                ": not a decimal number in (0, 1] (e.g. 0.75 or .9)");

  c = Resolve("mem_limit=" + long_value);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("config string mem_limit=" + cut));
  EXPECT_LT(c.status().message().size(), 400u);

  // The config string itself and an unknown key are cut too.
  c = Resolve("backend=sim," + long_value + "=1");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("(10014 bytes): entry 2"));
  EXPECT_THAT(c.status().message(), HasSubstr("unknown key " + cut));
  EXPECT_LT(c.status().message().size(), 600u);

  // Control characters are escaped, and a value at the limit is whole.
  c = Resolve("", {{"GPUALLOC_GC", std::string(79, 'y') + "\x01"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("GPUALLOC_GC=\"" + std::string(79, 'y') + "\\001\": "));
}

TEST(ConfigTest, ConfigStringGood) {
  auto o = ParseConfigString(
      " allocator = platform , preallocate=false,mem_fraction=.5,"
      "mem_limit=40 GiB,expandable=auto,arch=mi300x,gc=0,backend=sim,"
      "device_memory=192GiB,cross_stream=stream_wait,name=my run ");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->mode, AllocatorMode::kPlatform);
  EXPECT_EQ(o->preallocate, false);
  EXPECT_EQ(o->memory_fraction, 0.5);
  EXPECT_EQ(o->memory_limit, 40 * kGiB);
  EXPECT_EQ(o->expandable, Tristate::kAuto);
  EXPECT_EQ(o->arch, "mi300x");
  EXPECT_EQ(o->garbage_collection, false);
  EXPECT_EQ(o->backend, BackendKind::kSim);
  EXPECT_EQ(o->device_memory, 192 * kGiB);
  EXPECT_EQ(o->cross_stream_reuse, CrossStreamReuse::kStreamWait);
  EXPECT_EQ(o->name, "my run");
}

TEST(ConfigTest, TuningKeysReachTheOptions) {
  auto c = Resolve(
      "growth=doubling,granularity=32MiB,min_block=4KiB,"
      "split_bound=1MiB",
      {{"GPUALLOC_SPLIT_BOUND", "2MiB"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.growth_policy, GrowthPolicy::kDoubling);
  EXPECT_EQ(c->options.growth_granularity, 32 * kMiB);
  EXPECT_EQ(c->options.min_block_size, 4 * kKiB);
  EXPECT_EQ(c->options.max_internal_fragmentation, 1 * kMiB);
  EXPECT_EQ(SettingOf(*c, "split_bound").source, "config string");
  // split_bound=0 is a setting (always split), not "unset": it beats the
  // variable.
  c = Resolve("split_bound=0", {{"GPUALLOC_SPLIT_BOUND", "2MiB"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.max_internal_fragmentation, 0u);
  EXPECT_EQ(SettingOf(*c, "split_bound").origin, ValueOrigin::kOption);
  auto bad = Resolve("granularity=0");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("config string granularity=\"0\""));
}

TEST(ConfigTest, ConfigStringEmptySetsNothing) {
  for (const char* text : {"", "   ", "\t"}) {
    auto o = ParseConfigString(text);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_FALSE(o->mode.has_value());
    EXPECT_FALSE(o->memory_fraction.has_value());
    EXPECT_FALSE(o->backend.has_value());
    EXPECT_FALSE(o->name.has_value());
  }
}

struct BadStringCase {
  std::string text;
  std::vector<std::string> needles;
};

TEST(ConfigTest, ConfigStringErrors) {
  const std::vector<BadStringCase> cases = {
      {"backend=sim,colour=blue",
       {"entry 2 at column 13", "unknown key \"colour\"",
        "valid keys: allocator, preallocate"}},
      {"arch=h100, arch=h200",
       {"entry 2 at column 12", "duplicate key \"arch\"",
        "first set by entry 1"}},
      {"backend=sim,gc", {"entry 2 at column 13", "\"gc\" has no '='"}},
      {"gc=", {"config string gc=\"\" (entry 1, column 1)", "empty value"}},
      {"gc=true,,arch=h100", {"entry 2 at column 9", "empty entry"}},
      {"gc=true,", {"entry 2 at column 9", "empty entry"}},
      {",gc=true", {"entry 1 at column 1", "empty entry"}},
      {"=true", {"entry 1 at column 1", "empty key"}},
      {"mem_fraction=1.5",
       {"config string mem_fraction=\"1.5\" (entry 1, column 1): not in (0, "
        "1]"}},
      {"backend=sim, mem_limit=12 parsecs",
       {"config string mem_limit=\"12 parsecs\" (entry 2, column 14)",
        "unknown unit"}},
      {"Backend=sim",
       {"unknown key \"Backend\" (did you mean backend?)", "valid keys:"}},
      {"prealocate=false",
       {"unknown key \"prealocate\" (did you mean "
        "preallocate?)"}},
      {"gc_treshold=0.8", {"(did you mean gc_threshold?)"}},
      {"allocator=cuda_async", {"config string allocator=\"cuda_async\""}},
  };
  for (const BadStringCase& t : cases) {
    SCOPED_TRACE(t.text);
    auto o = ParseConfigString(t.text);
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& needle : t.needles) {
      EXPECT_THAT(o.status().message(), HasSubstr(needle));
    }
    // ResolveConfig(string) reports the same error.
    auto c = Resolve(t.text);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status(), o.status());
  }
}

TEST(ConfigTest, SizesGood) {
  const std::vector<std::pair<std::string, std::uint64_t>> cases = {
      {"0", 0},
      {"4096", 4096},
      {"1B", 1},
      {"1KB", 1000},
      {"1MB", 1000 * 1000},
      {"1GB", 1000 * 1000 * 1000},
      {"1TB", 1000ull * 1000 * 1000 * 1000},
      {"1KiB", kKiB},
      {"1MiB", kMiB},
      {"1GiB", kGiB},
      {"1TiB", 1024 * kGiB},
      {"40GiB", 40 * kGiB},
      {"40 GiB", 40 * kGiB},
      {"40   GiB", 40 * kGiB},
      {" 40GiB ", 40 * kGiB},
      {"40gib", 40 * kGiB},
      {"512mb", 512'000'000},
      {"80GB", 80'000'000'000},
      {"1.5GiB", 3 * kGiB / 2},
      {"1.50GiB", 3 * kGiB / 2},
      {"0.5KB", 500},
      {".5KiB", 512},
      {"2.KiB", 2048},
      {"1.000000000000000000000000GB", 1'000'000'000},
      {"18446744073709551615", std::numeric_limits<std::uint64_t>::max()},
      {"16777215TiB", 16777215ull << 40},
      {"0.0009765625KiB", 1},  // 1/1024 KiB
  };
  for (const auto& [text, bytes] : cases) {
    SCOPED_TRACE(text);
    auto s = ParseSize(text, "size");
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(*s, bytes);
  }
}

TEST(ConfigTest, SizesBad) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"GiB", "not a size"},
      {"-1", "not a size"},
      {"+1", "not a size"},
      {"1e9", "unknown unit"},
      {"0x10", "unknown unit"},
      {"1.5B", "whole number of bytes"},
      {"0.25B", "whole number of bytes"},
      {"0.3KiB", "whole number of bytes"},
      {"1.0001KB", "whole number of bytes"},
      {"1..5GB", "not a size"},
      {"1.5.GB", "not a size"},
      {"40G", "unknown unit \"G\"; valid units: B, KB, MB, GB, TB, KiB"},
      {"40 Gb it", "unknown unit"},
      {"40GiBx", "unknown unit"},
      {"1 2GB", "unknown unit"},
      {"18446744073709551616", "64 bits"},
      {"17179869184GiB", "64 bits"},  // 2^34 GiB = 2^64
      {"16777216TiB", "64 bits"},     // 2^24 TiB = 2^64
      {"18446744073709551615.5KB", "64 bits"},
      {"0.00000000000000000000001TB", "too many digits"},
  };
  for (const auto& [text, why] : cases) {
    SCOPED_TRACE(text);
    auto s = ParseSize(text, "GPUALLOC_MEM_LIMIT");
    ASSERT_FALSE(s.ok()) << *s;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(),
                HasSubstr("GPUALLOC_MEM_LIMIT=\"" + text + "\""));
    EXPECT_THAT(s.status().message(), HasSubstr(why));
  }
}

TEST(ConfigTest, SettingsOriginsAndSources) {
  auto c = Resolve("arch=h100,name=x",
                   {{"GPUALLOC_PREALLOCATE", "false"},
                    {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
                    {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6"},
                    {"GPUALLOC_GC", "true"},
                    {"TF_ENABLE_GPU_GARBAGE_COLLECTION", "false"},
                    {"GPUALLOC_ARCH", "mi300x"}});
  ASSERT_TRUE(c.ok()) << c.status();
  struct Want {
    std::string key, value;
    ValueOrigin origin;
    std::string source;
  };
  const std::vector<Want> want = {
      {"allocator", "platform", ValueOrigin::kAlias,
       "XLA_PYTHON_CLIENT_ALLOCATOR"},
      {"preallocate", "false", ValueOrigin::kVariable, "GPUALLOC_PREALLOCATE"},
      {"mem_fraction", "0.6", ValueOrigin::kAlias,
       "XLA_PYTHON_CLIENT_MEM_FRACTION"},
      {"mem_limit", "unset", ValueOrigin::kDefault, "default"},
      {"expandable", "auto", ValueOrigin::kDefault, "default"},
      {"arch", "h100", ValueOrigin::kOption, "config string"},
      {"gc", "true", ValueOrigin::kVariable, "GPUALLOC_GC"},
      {"gc_threshold", "0", ValueOrigin::kDefault, "default"},
      {"backend", "auto", ValueOrigin::kDefault, "default"},
      {"device_memory", "unset", ValueOrigin::kDefault, "default"},
      {"cross_stream", "before_growth", ValueOrigin::kDefault, "default"},
      {"growth", "exact", ValueOrigin::kDefault, "default"},
      {"granularity", "profile", ValueOrigin::kDefault, "default"},
      {"min_block", "profile", ValueOrigin::kDefault, "default"},
      {"split_bound", "0", ValueOrigin::kDefault, "default"},
      {"size_divisions", "0", ValueOrigin::kDefault, "default"},
      {"history", "0", ValueOrigin::kDefault, "default"},
      {"front_cache", "0", ValueOrigin::kDefault, "default"},
      {"name", "x", ValueOrigin::kOption, "config string"},
      {"memory_kind", "coarse", ValueOrigin::kDefault, "default"},
      {"host_memory_limit", "unset", ValueOrigin::kDefault, "default"},
  };
  ASSERT_EQ(c->settings.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].key);
    EXPECT_EQ(c->settings[i].key, want[i].key);
    EXPECT_EQ(c->settings[i].value, want[i].value);
    EXPECT_EQ(c->settings[i].origin, want[i].origin);
    EXPECT_EQ(c->settings[i].source, want[i].source);
  }
}

TEST(ConfigTest, SettingValuesReadBackAsTheSameConfig) {
  auto c = Resolve(
      "mem_limit=1.5GiB,mem_fraction=0.3,device_memory=80GB,"
      "backend=sim,arch=H200,allocator=async,expandable=1,growth=doubling,"
      "granularity=32MiB,min_block=1KiB,split_bound=0.5MiB,"
      "size_divisions=8");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::string> parts;
  for (const ConfigSetting& s : c->settings) {
    if (s.origin != ValueOrigin::kDefault)
      parts.push_back(s.key + "=" + s.value);
  }
  const std::string again = absl::StrJoin(parts, ",");
  auto d = Resolve(again);
  ASSERT_TRUE(d.ok()) << again << ": " << d.status();
  for (std::size_t i = 0; i < c->settings.size(); ++i) {
    EXPECT_EQ(c->settings[i].value, d->settings[i].value);
  }
}

TEST(ConfigTest, ProcessEnvironmentReadsGetenv) {
  ::setenv("GPUALLOC_CONFIG_TEST_VARIABLE", "x", 1);
  ::unsetenv("GPUALLOC_CONFIG_TEST_UNSET");
  const EnvLookup env = ProcessEnvironment();
  EXPECT_EQ(env("GPUALLOC_CONFIG_TEST_VARIABLE"), "x");
  EXPECT_FALSE(env("GPUALLOC_CONFIG_TEST_UNSET").has_value());
  ::unsetenv("GPUALLOC_CONFIG_TEST_VARIABLE");
}

// A GPUALLOC_* variable that names no setting is an error naming it and the
// closest setting's variable, like an unknown key in the configuration string.
TEST(ConfigTest, UnknownVariableIsAnError) {
  auto c = Resolve("", {{"GPUALLOC_PREALOCATE", "false"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("GPUALLOC_PREALOCATE=\"false\" (did you mean "
                        "GPUALLOC_PREALLOCATE?)"));
  // Even when the program sets the key: the typo is reported, not shadowed.
  c = Resolve("preallocate=true",
              {{"GPUALLOC_MEMFRACTION", "0.5"}, {"GPUALLOC_BACKEND", "sim"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("GPUALLOC_MEMFRACTION=\"0.5\" (did you mean "
                        "GPUALLOC_MEM_FRACTION?)"));
  c = Resolve("", {{"GPUALLOC_X", "1"}, {"GPUALLOC_GROWHT", "exact"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("variables GPUALLOC_GROWHT"));
  EXPECT_THAT(c.status().message(), HasSubstr("GPUALLOC_X=\"1\""));

  // The project's scripts' own variables and other prefixes are left alone.
  c = Resolve("", {{"GPUALLOC_SKIP_DEPS", "1"},
                   {"GPUALLOC_TEST_LABEL", "tests"},
                   {"GPUALLOC_TEST_SEED", "42"},
                   {"GPUALLOC_SOURCE_ROOT", "/src"},
                   {"GPUALLOC_DEVICE_CHECK_ASSUME_GPU", "1"},
                   {"GPUALLOC_DEVICE_CHECK_PREBUILT", "1"},
                   {"GPUALLOCATOR", "x"},
                   {"XLA_FLAGS", "--xla_foo"}});
  EXPECT_TRUE(c.ok()) << c.status();

  // The process environment too.
  ::setenv("GPUALLOC_GRANULARTY", "8MiB", 1);
  c = ResolveConfig("", ProcessEnvironment());
  ::unsetenv("GPUALLOC_GRANULARTY");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("GPUALLOC_GRANULARTY=\"8MiB\" (did you mean "
                        "GPUALLOC_GRANULARITY?)"));
}

// A granularity no minimum block divides could never allocate, on any
// device: refused when the configuration is resolved.
TEST(ConfigTest, GranularityMustBeWholeMinimumBlocks) {
  auto c = Resolve("granularity=3");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("config string granularity=\"3\" (entry 1, column 1): "
                        "not a multiple of 16 bytes"));
  c = Resolve("", {{"GPUALLOC_GRANULARITY", "1000"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("GPUALLOC_GRANULARITY=\"1000\": not a multiple of 16"));
  ConfigOverrides o;
  o.growth_granularity = 24;
  c = ResolveConfig(o, MapEnvironment({}));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("option granularity=\"24\""));

  // Both named as the user wrote them, with the fix.
  c = Resolve("granularity=4KiB", {{"GPUALLOC_MIN_BLOCK", "8KiB"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "config string granularity=\"4KiB\" is not a multiple of "
            "GPUALLOC_MIN_BLOCK=\"8KiB\": region sizes are whole minimum "
            "blocks; set granularity in the config string to a multiple of "
            "8192 bytes, or GPUALLOC_MIN_BLOCK to a power of two that "
            "divides 4096");
  c = Resolve("granularity=48,min_block=16");
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(ConfigTest, Names) {
  EXPECT_EQ(BackendKindName(BackendKind::kAuto), "auto");
  EXPECT_EQ(BackendKindName(BackendKind::kSim), "sim");
  EXPECT_EQ(BackendKindName(BackendKind::kCuda), "cuda");
  EXPECT_EQ(BackendKindName(BackendKind::kHip), "hip");
  EXPECT_EQ(ValueOriginName(ValueOrigin::kDefault), "default");
  EXPECT_EQ(ValueOriginName(ValueOrigin::kOption), "option");
  EXPECT_EQ(ValueOriginName(ValueOrigin::kVariable), "variable");
  EXPECT_EQ(ValueOriginName(ValueOrigin::kAlias), "alias");
  EXPECT_EQ(MemoryKindName(MemoryKind::kCoarse), "coarse");
  EXPECT_EQ(MemoryKindName(MemoryKind::kFine), "fine");
}

// memory_kind: AMD's coarse- or fine-grained memory, parsed as strictly as
// every other keyword.
TEST(ConfigTest, MemoryKind) {
  auto c = Resolve("memory_kind=FINE");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->memory_kind, MemoryKind::kFine);
  EXPECT_EQ(SettingOf(*c, "memory_kind").value, "fine");

  c = Resolve("", {{"GPUALLOC_MEMORY_KIND", "fine"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->memory_kind, MemoryKind::kFine);
  EXPECT_EQ(SettingOf(*c, "memory_kind").source, "GPUALLOC_MEMORY_KIND");

  for (const char* bad : {"finegrained", "medium", "1", "coarse,"}) {
    SCOPED_TRACE(bad);
    auto v = Resolve("", {{"GPUALLOC_MEMORY_KIND", bad}});
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(v.status().message(), HasSubstr("GPUALLOC_MEMORY_KIND"));
    EXPECT_THAT(v.status().message(), HasSubstr("coarse, fine"));
  }
  auto v = Resolve("", {{"GPUALLOC_MEMORY_KIND", ""}});
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  v = Resolve("memory_kind=both");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("config string memory_kind"));

  ConfigOverrides o;
  o.memory_kind = static_cast<MemoryKind>(7);
  v = ResolveConfig(o, MapEnvironment({}));
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("option memory_kind"));
  o.memory_kind = MemoryKind::kFine;
  v = ResolveConfig(o, MapEnvironment({{"GPUALLOC_MEMORY_KIND", "coarse"}}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->memory_kind, MemoryKind::kFine);
  EXPECT_EQ(SettingOf(*v, "memory_kind").origin, ValueOrigin::kOption);
}

// PyTorch's allocator configuration: every key, what it sets, and the
// warning lines about the entries gpualloc does not honour.
struct PytorchCase {
  std::string variable;
  std::string conf;
  // The settings it decides, key -> effective value (origin alias, source
  // "VARIABLE key:value").
  std::map<std::string, std::string> settings;
  // A part of each warning line, in order; empty: no warning.
  std::vector<std::string> warnings;
};

// The line about one entry of `variable`.
std::string PytorchLine(const std::string& variable, const std::string& note) {
  return absl::StrCat("gpualloc: ", variable, ": ", note,
                      " (docs/REFERENCE.md, \"PyTorch's variables\")");
}

TEST(ConfigTest, EveryPytorchKey) {
  const std::string kCuda = "PYTORCH_CUDA_ALLOC_CONF";
  const std::string kListForm =
      "roundup_power2_divisions:[256:1,512:2,>:8] is not supported, ignored: "
      "its list form gives each size range its own number of divisions; "
      "gpualloc rounds every size with one number: use "
      "roundup_power2_divisions:N or GPUALLOC_SIZE_DIVISIONS";
  const std::string kPinned =
      " is read by PyTorch's pinned host-memory allocator, which gpualloc (a "
      "device allocator) does not replace: it still takes effect there";
  const std::vector<PytorchCase> cases = {
      {kCuda, "expandable_segments:True", {{"expandable", "true"}}, {}},
      {kCuda, "expandable_segments:False", {{"expandable", "false"}}, {}},
      {kCuda, " expandable_segments : True ", {{"expandable", "true"}}, {}},
      // PyTorch's threshold, kept.
      {kCuda,
       "garbage_collection_threshold:0.8",
       {{"gc_threshold", "0.8"}},
       {}},
      {kCuda,
       "garbage_collection_threshold:.05",
       {{"gc_threshold", "0.05"}},
       {}},
      {kCuda, "per_process_memory_fraction:0.5", {{"mem_fraction", "0.5"}}, {}},
      {kCuda, "per_process_memory_fraction:1", {{"mem_fraction", "1"}}, {}},
      // Below 1e-4: mapped as written, not reformatted with an exponent.
      {kCuda,
       "per_process_memory_fraction:0.0001",
       {{"mem_fraction", "0.0001"}},
       {}},
      {kCuda,
       "per_process_memory_fraction:0.0000005",
       {{"mem_fraction", "0.0000005"}},
       {}},
      {kCuda,
       "garbage_collection_threshold:0.00002",
       {{"gc_threshold", "0.00002"}},
       {}},
      {kCuda, "backend:native", {{"allocator", "bfc"}}, {}},
      {kCuda, "backend:cudaMallocAsync", {{"allocator", "async"}}, {}},
      {"PYTORCH_HIP_ALLOC_CONF",
       "backend:hipMallocAsync",
       {{"allocator", "async"}},
       {}},
      {kCuda, "roundup_power2_divisions:4", {{"size_divisions", "4"}}, {}},
      {kCuda, "roundup_power2_divisions:64", {{"size_divisions", "64"}}, {}},
      // 1 division is PyTorch's "no rounding".
      {kCuda, "roundup_power2_divisions:1", {{"size_divisions", "0"}}, {}},
      // No equivalent in gpualloc: named with the reason, nothing set.
      {kCuda,
       "max_split_size_mb:512",
       {},
       {"max_split_size_mb:512 is not supported, ignored: PyTorch never "
        "splits cached blocks above this size"}},
      // The list form (divisions per size range) is not supported.
      {kCuda, "roundup_power2_divisions:[256:1,512:2,>:8]", {}, {kListForm}},
      {kCuda,
       "max_non_split_rounding_mb:1024",
       {},
       {"max_non_split_rounding_mb:1024 is not supported, ignored: "}},
      {kCuda,
       "release_lock_on_cudamalloc:True",
       {},
       {"release_lock_on_cudamalloc:True is not supported, ignored: "}},
      {kCuda,
       "large_segment_size_mb:64",
       {},
       {"large_segment_size_mb:64 is not supported, ignored: "}},
      // The host allocator's keys still take effect in PyTorch.
      {kCuda,
       "pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
       "pinned_use_background_threads:True",
       {},
       {"pinned_use_cuda_host_register:True" + kPinned,
        "pinned_num_register_threads:8" + kPinned,
        "pinned_use_background_threads:True" + kPinned}},
      // No such key: the closest one.
      {kCuda,
       "expandable_segment:True",
       {},
       {"expandable_segment:True is no PyTorch allocator key, ignored (did "
        "you mean expandable_segments?)"}},
      {kCuda,
       "garbage_collect_threshold:0.8",
       {},
       {"(did you mean garbage_collection_threshold?)"}},
      // Keys are case-sensitive, as in PyTorch.
      {kCuda,
       "Expandable_Segments:True",
       {},
       {"Expandable_Segments:True is no PyTorch allocator key, ignored (did "
        "you mean expandable_segments?)"}},
      // The usual mix, under each variable name.
      {"PYTORCH_ALLOC_CONF",
       "expandable_segments:True,max_split_size_mb:512,"
       "garbage_collection_threshold:0.8,roundup_power2_divisions:4",
       {{"expandable", "true"},
        {"gc_threshold", "0.8"},
        {"size_divisions", "4"}},
       {"max_split_size_mb:512 is not supported"}},
      {kCuda,
       "expandable_segments:True,max_split_size_mb:512,"
       "garbage_collection_threshold:0.8,roundup_power2_divisions:[256:1,512:"
       "2,>:8]",
       {{"expandable", "true"}, {"gc_threshold", "0.8"}},
       {"max_split_size_mb:512 is not supported", kListForm}},
      {"PYTORCH_HIP_ALLOC_CONF",
       "expandable_segments:True,max_split_size_mb:512",
       {{"expandable", "true"}},
       {"max_split_size_mb:512 is not supported"}},
      // Empty entries (a leading or trailing comma) are skipped.
      {kCuda, ",expandable_segments:True,", {{"expandable", "true"}}, {}},
  };
  for (const PytorchCase& t : cases) {
    SCOPED_TRACE(t.variable + "=" + t.conf);
    auto c = Resolve("", {{t.variable, t.conf}});
    ASSERT_TRUE(c.ok()) << c.status();
    for (const ConfigSetting& s : c->settings) {
      auto it = t.settings.find(s.key);
      if (it == t.settings.end()) {
        EXPECT_EQ(s.origin, ValueOrigin::kDefault) << s.key;
        continue;
      }
      EXPECT_EQ(s.value, it->second) << s.key;
      EXPECT_EQ(s.origin, ValueOrigin::kAlias) << s.key;
      EXPECT_THAT(s.source, ::testing::StartsWith(t.variable + " ")) << s.key;
      EXPECT_THAT(s.set_by, ::testing::StartsWith(t.variable + " ")) << s.key;
    }
    ASSERT_EQ(c->warnings.size(), t.warnings.size())
        << absl::StrJoin(c->warnings, "\n");
    for (std::size_t i = 0; i < t.warnings.size(); ++i) {
      EXPECT_THAT(c->warnings[i],
                  ::testing::StartsWith("gpualloc: " + t.variable + ": "));
      EXPECT_THAT(c->warnings[i], HasSubstr(t.warnings[i]));
    }
  }
  // The source names the variable and the PyTorch entry; set_by and written
  // the key and the value as written.
  auto c = Resolve("", {{kCuda, "expandable_segments:True"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(SettingOf(*c, "expandable").source,
            "PYTORCH_CUDA_ALLOC_CONF expandable_segments:True");
  EXPECT_EQ(SettingOf(*c, "expandable").set_by,
            "PYTORCH_CUDA_ALLOC_CONF expandable_segments");
  EXPECT_EQ(SettingOf(*c, "expandable").written, "True");
  EXPECT_EQ(c->options.expandable, Tristate::kOn);
  c = Resolve("", {{kCuda,
                    "garbage_collection_threshold:0.6,"
                    "per_process_memory_fraction:0.4,"
                    "backend:cudaMallocAsync"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.gc_threshold, 0.6);
  EXPECT_TRUE(c->options.garbage_collection);  // gc is another key
  EXPECT_EQ(SettingOf(*c, "gc").origin, ValueOrigin::kDefault);
  EXPECT_EQ(c->options.memory_fraction, 0.4);
  EXPECT_EQ(c->options.mode, AllocatorMode::kAsync);
  EXPECT_EQ(SettingOf(*c, "mem_fraction").source,
            "PYTORCH_CUDA_ALLOC_CONF per_process_memory_fraction:0.4");
  EXPECT_EQ(SettingOf(*c, "gc_threshold").source,
            "PYTORCH_CUDA_ALLOC_CONF garbage_collection_threshold:0.6");
  c = Resolve("", {{kCuda, "roundup_power2_divisions:8"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.size_divisions, 8u);
  EXPECT_EQ(SettingOf(*c, "size_divisions").source,
            "PYTORCH_CUDA_ALLOC_CONF roundup_power2_divisions:8");
  // Every key PyTorch's parser knows is known here (mapped, not supported
  // with a reason, or the host allocator's), and each has its reason.
  for (const char* key : {"max_split_size_mb",
                          "max_non_split_rounding_mb",
                          "large_segment_size_mb",
                          "garbage_collection_threshold",
                          "roundup_power2_divisions",
                          "expandable_segments",
                          "pinned_use_background_threads",
                          "backend",
                          "release_lock_on_cudamalloc",
                          "release_lock_on_hipmalloc",
                          "pinned_use_cuda_host_register",
                          "pinned_use_hip_host_register",
                          "pinned_num_register_threads",
                          "pinned_reserve_segment_size_mb",
                          "graph_capture_record_stream_reuse",
                          "per_process_memory_fraction",
                          "pinned_free_catch_all",
                          "throw_on_cudamalloc_oom",
                          "expandable_segments_reserve",
                          "expandable_segments_reserve_by_class"}) {
    SCOPED_TRACE(key);
    c = Resolve("", {{kCuda, std::string(key) + ":[1]"}});
    if (!c.ok()) continue;  // a mapped key refuses the list
    for (const std::string& line : c->warnings) {
      EXPECT_THAT(line, Not(HasSubstr("no PyTorch allocator key")));
      EXPECT_THAT(line, Not(HasSubstr("ignored: (docs")));  // a reason
    }
  }
}

// A bad PYTORCH_CUDA_ALLOC_CONF and a part of the error.
struct PytorchBadCase {
  std::string conf;
  std::string why;
};

TEST(ConfigTest, BadPytorchConfigurations) {
  const std::vector<PytorchBadCase> cases = {
      {"expandable_segments:maybe",
       "PYTORCH_CUDA_ALLOC_CONF expandable_segments=\"maybe\" (entry 1): not "
       "True or False (PyTorch takes only these two spellings)"},
      {"max_split_size_mb:512,expandable_segments:[1]",
       "expandable_segments=\"[1]\" (entry 2): not True or False"},
      // PyTorch's spellings exactly: True and False only.
      {"expandable_segments:true", "not True or False"},
      {"expandable_segments:1", "not True or False"},
      {"expandable_segments:TRUE", "not True or False"},
      {"garbage_collection_threshold:1", "not a decimal number in (0, 1)"},
      {"garbage_collection_threshold:0", "not a decimal number in (0, 1)"},
      {"garbage_collection_threshold:high", "not a decimal number in (0, 1)"},
      {"per_process_memory_fraction:1.5",
       "per_process_memory_fraction=\"1.5\" (entry 1): not in (0, 1]"},
      {"per_process_memory_fraction:0",
       "not in (0, 1]: a fraction of the device's total memory (PyTorch "
       "takes 0 too, but it allows no memory at all)"},
      {"per_process_memory_fraction:most", "not a decimal number"},
      {"backend:cuda_async",
       "not native, cudaMallocAsync or hipMallocAsync (PyTorch's spellings"},
      // Case-sensitive, as PyTorch compares them.
      {"backend:Native", "not native, cudaMallocAsync or hipMallocAsync"},
      {"backend:cudamallocasync", "not native, cudaMallocAsync"},
      {"expandable_segments", "entry 1: \"expandable_segments\" has no ':'"},
      {"expandable_segments:True;max_split_size_mb:64",
       "expandable_segments=\"True;max_split_size_mb:64\""},
      {":True", "empty key before ':'"},
      {"expandable_segments:", "empty value for expandable_segments"},
      {"roundup_power2_divisions:3",
       "PYTORCH_CUDA_ALLOC_CONF roundup_power2_divisions=\"3\" (entry 1): not "
       "a power of two (PyTorch's rule"},
      // PyTorch refuses 0 in the integer form too; 1 is no rounding.
      {"roundup_power2_divisions:0", "not a power of two"},
      {"roundup_power2_divisions:128",
       "more than 64 divisions, which gpualloc does not round to"},
      {"roundup_power2_divisions:four", "not a power of two"},
      {"roundup_power2_divisions:-2", "not a power of two"},
      {"roundup_power2_divisions:[256:1,>:8", "'[' without ']'"},
      {"roundup_power2_divisions:256:1]", "']' without '['"},
      {"expandable_segments:True,max_split_size_mb:64,expandable_segments:"
       "True",
       "entry 3: duplicate key \"expandable_segments\" (first set by entry "
       "1)"},
      {"  ", "PYTORCH_CUDA_ALLOC_CONF=\"  \": set but empty"},
  };
  for (const PytorchBadCase& t : cases) {
    SCOPED_TRACE(t.conf);
    auto c = Resolve("", {{"PYTORCH_CUDA_ALLOC_CONF", t.conf}});
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr(t.why));
  }
  // The value of a key gpualloc does not support is not read.
  auto c = Resolve("", {{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:lots"}});
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(ConfigTest, PytorchVariablesAgreeOrAreAnError) {
  // PyTorch reads PYTORCH_ALLOC_CONF first; the same text under an older name
  // too is fine.
  auto c =
      Resolve("", {{"PYTORCH_ALLOC_CONF", "expandable_segments:True"},
                   {"PYTORCH_CUDA_ALLOC_CONF", " expandable_segments:True"},
                   {"PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(SettingOf(*c, "expandable").source,
            "PYTORCH_ALLOC_CONF expandable_segments:True");
  c = Resolve("", {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False"},
                   {"PYTORCH_HIP_ALLOC_CONF", "expandable_segments:False"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(SettingOf(*c, "expandable").source,
            "PYTORCH_CUDA_ALLOC_CONF expandable_segments:False");
  // PYTORCH_HIP_ALLOC_CONF alone is read, as on ROCm.
  c = Resolve("", {{"PYTORCH_HIP_ALLOC_CONF",
                    "expandable_segments:True,garbage_collection_threshold:"
                    "0.7,per_process_memory_fraction:0.5,backend:"
                    "hipMallocAsync"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.expandable, Tristate::kOn);
  EXPECT_EQ(c->options.gc_threshold, 0.7);
  EXPECT_EQ(c->options.memory_fraction, 0.5);
  EXPECT_EQ(c->options.mode, AllocatorMode::kAsync);
  EXPECT_EQ(SettingOf(*c, "allocator").source,
            "PYTORCH_HIP_ALLOC_CONF backend:hipMallocAsync");
  // Different text: an error naming both, even where the keys would agree.
  for (const Env& env :
       {Env{{"PYTORCH_ALLOC_CONF", "expandable_segments:True"},
            {"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False"}},
        Env{{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64"},
            {"PYTORCH_HIP_ALLOC_CONF", "max_split_size_mb:128"}},
        Env{{"PYTORCH_ALLOC_CONF", "expandable_segments:True"},
            {"PYTORCH_HIP_ALLOC_CONF", "expandable_segments:False"}}}) {
    c = Resolve("", env);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    for (const auto& [variable, value] : env) {
      EXPECT_THAT(c.status().message(), HasSubstr(variable + "=\""));
    }
    EXPECT_THAT(c.status().message(), HasSubstr("PyTorch reads only"));
  }
}

// A PyTorch key against an option, a GPUALLOC_* variable or a JAX/XLA/TF
// alias setting the same key.
struct PytorchConflictCase {
  std::string config_string;
  Env env;  // with PYTORCH_CUDA_ALLOC_CONF
  std::string key;
  std::string effective;
  std::string source;   // the setting's
  std::string warning;  // a part of the last warning line; empty: none
};

TEST(ConfigTest, PytorchKeysYieldToHigherLevelsAndConflictsAreReported) {
  const std::string kConf = "PYTORCH_CUDA_ALLOC_CONF";
  const std::vector<PytorchConflictCase> cases = {
      {"",
       {{"GPUALLOC_EXPANDABLE", "false"}, {kConf, "expandable_segments:True"}},
       "expandable",
       "false",
       "GPUALLOC_EXPANDABLE (overrides PYTORCH_CUDA_ALLOC_CONF "
       "expandable_segments:True)",
       "expandable_segments:True overridden by GPUALLOC_EXPANDABLE "
       "(expandable=false)"},
      {"",
       {{"GPUALLOC_EXPANDABLE", "true"}, {kConf, "expandable_segments:True"}},
       "expandable",
       "true",
       "GPUALLOC_EXPANDABLE",
       ""},
      {"gc_threshold=0",
       {{kConf, "garbage_collection_threshold:0.8"}},
       "gc_threshold",
       "0",
       "config string (overrides PYTORCH_CUDA_ALLOC_CONF "
       "garbage_collection_threshold:0.8)",
       "garbage_collection_threshold:0.8 overridden by config string "
       "(gc_threshold=0)"},
      {"",
       {{"GPUALLOC_GC_THRESHOLD", "0.8"},
        {kConf, "garbage_collection_threshold:0.8"}},
       "gc_threshold",
       "0.8",
       "GPUALLOC_GC_THRESHOLD",
       ""},
      {"allocator=bfc",
       {{kConf, "backend:native"}},
       "allocator",
       "bfc",
       "config string",
       ""},
      {"",
       {{"GPUALLOC_ALLOCATOR", "platform"}, {kConf, "backend:cudaMallocAsync"}},
       "allocator",
       "platform",
       "GPUALLOC_ALLOCATOR (overrides PYTORCH_CUDA_ALLOC_CONF "
       "backend:cudaMallocAsync)",
       "backend:cudaMallocAsync overridden by GPUALLOC_ALLOCATOR "
       "(allocator=platform)"},
      {"",
       {{"GPUALLOC_MEM_FRACTION", "0.9"},
        {kConf, "per_process_memory_fraction:0.5,max_split_size_mb:64"}},
       "mem_fraction",
       "0.9",
       "GPUALLOC_MEM_FRACTION (overrides PYTORCH_CUDA_ALLOC_CONF "
       "per_process_memory_fraction:0.5)",
       "per_process_memory_fraction:0.5 overridden by GPUALLOC_MEM_FRACTION "
       "(mem_fraction=0.9)"},
      {"size_divisions=0",
       {{kConf, "roundup_power2_divisions:4"}},
       "size_divisions",
       "0",
       "config string (overrides PYTORCH_CUDA_ALLOC_CONF "
       "roundup_power2_divisions:4)",
       "roundup_power2_divisions:4 overridden by config string "
       "(size_divisions=0)"},
      {"",
       {{"GPUALLOC_SIZE_DIVISIONS", "0"},
        {kConf, "roundup_power2_divisions:1"}},
       "size_divisions",
       "0",
       "GPUALLOC_SIZE_DIVISIONS",
       ""},
      // A JAX/XLA/TF alias that agrees: the alias is named.
      {"",
       {{"XLA_PYTHON_CLIENT_MEM_FRACTION", ".5"},
        {kConf, "per_process_memory_fraction:0.5"}},
       "mem_fraction",
       "0.5",
       "XLA_PYTHON_CLIENT_MEM_FRACTION",
       ""},
      // TensorFlow's collection switch is gc, not the threshold: both apply.
      {"",
       {{"TF_ENABLE_GPU_GARBAGE_COLLECTION", "false"},
        {kConf, "garbage_collection_threshold:0.5"}},
       "gc",
       "false",
       "TF_ENABLE_GPU_GARBAGE_COLLECTION",
       ""},
  };
  for (const PytorchConflictCase& t : cases) {
    SCOPED_TRACE(t.config_string + " " + t.env.begin()->first);
    auto c = Resolve(t.config_string, t.env);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(SettingOf(*c, t.key).value, t.effective);
    EXPECT_EQ(SettingOf(*c, t.key).source, t.source);
    if (t.warning.empty()) {
      for (const std::string& line : c->warnings) {
        EXPECT_THAT(line, Not(HasSubstr("overridden")));
      }
    } else {
      ASSERT_FALSE(c->warnings.empty());
      EXPECT_EQ(c->warnings.back(), PytorchLine(kConf, t.warning));
    }
  }

  // A program's ConfigOverrides is "option".
  ConfigOverrides o;
  o.expandable = Tristate::kAuto;
  auto c =
      ResolveConfig(o, MapEnvironment({{kConf, "expandable_segments:True"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(SettingOf(*c, "expandable").source,
            "option (overrides PYTORCH_CUDA_ALLOC_CONF expandable_segments:"
            "True)");
  EXPECT_THAT(c->warnings,
              ::testing::ElementsAre(HasSubstr("overridden by option")));

  // A limit from a higher level beats PyTorch's fraction, as any fraction of
  // a lower level.
  c = Resolve("", {{"GPUALLOC_MEM_LIMIT", "8GiB"},
                   {kConf, "per_process_memory_fraction:0.5"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.memory_limit, 8ull << 30);

  // A JAX/XLA/TF alias that gives the same key another value: an error (the
  // same level), naming both as written.
  for (const Env& env : {Env{{"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
                             {kConf, "backend:cudaMallocAsync"}},
                         Env{{"XLA_CLIENT_MEM_FRACTION", "0.9"},
                             {kConf, "per_process_memory_fraction:0.5"}}}) {
    c = Resolve("", env);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    // The map's last entry is the XLA variable.
    EXPECT_THAT(c.status().message(), HasSubstr(env.rbegin()->first + "=\"" +
                                                env.rbegin()->second + "\""));
    EXPECT_THAT(c.status().message(), HasSubstr(env.begin()->second));
    EXPECT_THAT(c.status().message(), HasSubstr("same level"));
    EXPECT_THAT(c.status().message(), HasSubstr("make them agree or unset"));
  }

  // A higher level does not hide a bad PyTorch value.
  c = Resolve("expandable=true", {{kConf, "expandable_segments:maybe"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("expandable_segments=\"maybe\""));
}

TEST(ConfigTest, PytorchWarningIsWrittenOncePerProcess) {
  const Env env = {{"PYTORCH_CUDA_ALLOC_CONF",
                    "expandable_segments:True,only_in_this_test_a:1,"
                    "max_split_size_mb:99999"}};
  const std::vector<std::string> lines = {
      PytorchLine("PYTORCH_CUDA_ALLOC_CONF",
                  "only_in_this_test_a:1 is no PyTorch allocator key, ignored "
                  "(did you mean max_split_size_mb?)"),
      PytorchLine(
          "PYTORCH_CUDA_ALLOC_CONF",
          "max_split_size_mb:99999 is not supported, ignored: PyTorch never "
          "splits cached blocks above this size and keeps smaller requests "
          "out of them; gpualloc's BFC splits any free chunk and has no such "
          "size. The nearest setting, GPUALLOC_SPLIT_BOUND, keeps a surplus "
          "up to its size unsplit with each allocation, which is not the "
          "same")};
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    auto c = Resolve("", env);
    ASSERT_TRUE(c.ok()) << c.status();
    // Every resolution returns them ...
    EXPECT_THAT(c->warnings, ::testing::ElementsAreArray(lines));
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  // ... but stderr gets each once.
  EXPECT_EQ(err, lines[0] + "\n" + lines[1] + "\n");
}

// JAX's XLA_PYTHON_CLIENT_* namespace: a variable gpualloc does not know is
// a warning with the closest one it reads (JAX ignores unknown ones too), not
// an error as a GPUALLOC_* typo is.
TEST(ConfigTest, UnknownJaxVariableIsAWarningWithTheClosestName) {
  ::testing::internal::CaptureStderr();
  auto c = Resolve("", {{"XLA_PYTHON_CLIENT_PREALOCATE", "false"},
                        {"XLA_PYTHON_CLIENT_MEM_FRACTON", ".5"},
                        {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(
      c->warnings,
      ::testing::ElementsAre(
          "gpualloc: XLA_PYTHON_CLIENT_MEM_FRACTON=\".5\": no such JAX "
          "variable, ignored (did you mean XLA_PYTHON_CLIENT_MEM_FRACTION?)",
          "gpualloc: XLA_PYTHON_CLIENT_PREALOCATE=\"false\": no such JAX "
          "variable, ignored (did you mean XLA_PYTHON_CLIENT_PREALLOCATE?)"));
  EXPECT_THAT(err, HasSubstr("did you mean XLA_PYTHON_CLIENT_PREALLOCATE?"));
  // The setting it meant is not taken from it.
  EXPECT_EQ(SettingOf(*c, "preallocate").origin, ValueOrigin::kDefault);
  EXPECT_EQ(SettingOf(*c, "allocator").value, "platform");
  // A JAX variable gpualloc knows but does not read says why.
  c = Resolve("", {{"XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB", "2048"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->warnings,
              ::testing::ElementsAre(HasSubstr(
                  "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB=\"2048\": not "
                  "read by gpualloc: it sizes XLA's separate pool")));
  // Other XLA_* variables are XLA's own business.
  c = Resolve("", {{"XLA_FLAGS", "--xla_gpu_autotune_level=0"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->warnings, ::testing::IsEmpty());
}

// PyTorch's conventions (gpualloc_create_pytorch, the PyTorch hook): grow on
// demand up to the whole device, unless something a user sets says
// otherwise.
TEST(ConfigTest, PytorchConventionsChangeOnlyTheDefaults) {
  auto c = ResolveConfig("", MapEnvironment({}), Conventions::kPytorch);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->options.preallocate);
  EXPECT_EQ(c->options.memory_fraction, 1.0);
  EXPECT_EQ(c->options.memory_limit, 0u);
  EXPECT_EQ(SettingOf(*c, "preallocate").value, "false");
  EXPECT_EQ(SettingOf(*c, "preallocate").origin, ValueOrigin::kDefault);
  EXPECT_EQ(SettingOf(*c, "preallocate").source, "default (PyTorch's)");
  EXPECT_EQ(SettingOf(*c, "mem_fraction").value, "1");
  EXPECT_EQ(SettingOf(*c, "mem_fraction").source, "default (PyTorch's)");
  // PyTorch's allocator never makes one of a user's streams wait for
  // another: no stream waits with memory to spare.
  EXPECT_EQ(c->options.cross_stream_reuse, CrossStreamReuse::kStreamWait);
  EXPECT_EQ(SettingOf(*c, "cross_stream").value, "stream_wait");
  EXPECT_EQ(SettingOf(*c, "cross_stream").source, "default (PyTorch's)");
  // The rest is as with JAX's conventions.
  auto jax = ResolveConfig("", MapEnvironment({}));
  ASSERT_TRUE(jax.ok()) << jax.status();
  EXPECT_TRUE(jax->options.preallocate);
  EXPECT_EQ(jax->options.memory_fraction, 0.75);
  EXPECT_EQ(jax->options.cross_stream_reuse, CrossStreamReuse::kBeforeGrowth);
  for (std::size_t i = 0; i < c->settings.size(); ++i) {
    if (c->settings[i].key == "preallocate" ||
        c->settings[i].key == "mem_fraction" ||
        c->settings[i].key == "cross_stream") {
      continue;
    }
    EXPECT_EQ(c->settings[i].value, jax->settings[i].value)
        << c->settings[i].key;
    EXPECT_EQ(c->settings[i].source, "default") << c->settings[i].key;
  }

  // Everything a user sets wins over them.
  struct Case {
    std::string config;
    Env env;
    bool preallocate;
    double fraction;
    std::uint64_t limit;
  };
  const std::vector<Case> cases = {
      {"", {{"GPUALLOC_PREALLOCATE", "true"}}, true, 1.0, 0},
      {"", {{"XLA_PYTHON_CLIENT_PREALLOCATE", "true"}}, true, 1.0, 0},
      {"preallocate=true", {}, true, 1.0, 0},
      {"", {{"GPUALLOC_MEM_FRACTION", "0.6"}}, false, 0.6, 0},
      {"",
       {{"PYTORCH_CUDA_ALLOC_CONF", "per_process_memory_fraction:0.5"}},
       false,
       0.5,
       0},
      {"",
       {{"PYTORCH_ALLOC_CONF", "per_process_memory_fraction:0.25"}},
       false,
       0.25,
       0},
      {"mem_limit=8GiB", {}, false, 1.0, 8 * kGiB},
  };
  for (const Case& t : cases) {
    SCOPED_TRACE(t.config);
    c = ResolveConfig(t.config, MapEnvironment(t.env), Conventions::kPytorch);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->options.preallocate, t.preallocate);
    EXPECT_EQ(c->options.memory_fraction, t.fraction);
    EXPECT_EQ(c->options.memory_limit, t.limit);
  }
  // ConfigOverrides take them too.
  ConfigOverrides o;
  o.preallocate = true;
  c = ResolveConfig(o, MapEnvironment({}), Conventions::kPytorch);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->options.preallocate);
  EXPECT_EQ(c->options.memory_fraction, 1.0);
}

// A document's configuration table under `heading`, one row per key: `| key
// | variable | values | default | alias |`, each cell as written.
std::map<std::string, std::vector<std::string>> ConfigRows(
    const std::string& path, absl::string_view heading) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::map<std::string, std::vector<std::string>> rows;
  std::string line;
  bool in_section = false;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "#")) in_section = line == heading;
    // The table runs from its header to the first line that is no row.
    if (!absl::StartsWith(line, "|")) in_table = false;
    if (in_section && line == "| key | variable | values | default | alias |") {
      in_table = true;
    }
    if (!in_table || !absl::StartsWith(line, "| `")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    // "| a | b |" splits into "", " a ", " b ", "".
    if (cells.size() < 3) continue;
    cells.erase(cells.begin());
    cells.pop_back();
    for (std::string& cell : cells) {
      cell = std::string(absl::StripAsciiWhitespace(cell));
    }
    absl::string_view key = cells[0];
    if (!absl::ConsumePrefix(&key, "`") || !absl::ConsumeSuffix(&key, "`")) {
      ADD_FAILURE() << path << ": configuration row without a `key`: " << line;
      continue;
    }
    cells[0] = std::string(key);
    EXPECT_EQ(cells.size(), 5u) << line;
    EXPECT_TRUE(rows.emplace(cells[0], cells).second)
        << path << " lists " << cells[0] << " twice";
  }
  return rows;
}

// The user's table (README.md) and the reference's (docs/REFERENCE.md)
// list every key with its variable and aliases, and nothing else.
void ExpectTableMatchesTheKeys(const std::string& path,
                               absl::string_view heading) {
  SCOPED_TRACE(path);
  const auto rows = ConfigRows(path, heading);
  ASSERT_FALSE(rows.empty()) << "no configuration table under " << heading;
  std::vector<std::string> keys;
  for (const ConfigKeyInfo& k : ConfigKeys()) {
    const std::string key(k.key);
    keys.push_back(key);
    auto it = rows.find(key);
    if (it == rows.end()) {
      ADD_FAILURE() << "the configuration table has no row for " << key;
      continue;
    }
    const std::vector<std::string>& cells = it->second;
    ASSERT_EQ(cells.size(), 5u) << key;
    EXPECT_EQ(cells[1], absl::StrCat("`", k.variable, "`"))
        << "the variable of " << key;
    for (absl::string_view alias : k.aliases) {
      EXPECT_THAT(cells[4], HasSubstr(absl::StrCat("`", alias, "`")))
          << "the aliases of " << key;
    }
  }
  for (const auto& [key, cells] : rows) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end())
        << "the table lists " << key << ", which is no configuration key";
  }
}

TEST(ConfigTest, ReadmeTableMatchesTheKeys) {
  ExpectTableMatchesTheKeys(std::string(GPUALLOC_SOURCE_DIR) + "/README.md",
                            "## Configuration");
}

TEST(ConfigTest, ReferenceTableMatchesTheKeys) {
  ExpectTableMatchesTheKeys(
      std::string(GPUALLOC_SOURCE_DIR) + "/docs/REFERENCE.md", "### Keys");
}

}  // namespace
}  // namespace gpualloc

namespace gpualloc {
namespace {

// host_memory_limit: the pinned host pool's limit, a positive size.
TEST(ConfigTest, HostMemoryLimitIsAPositiveSize) {
  auto c = ResolveConfig("host_memory_limit=2GiB", MapEnvironment({}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host_memory_limit, std::uint64_t{2} << 30);
  c = ResolveConfig("",
                    MapEnvironment({{"GPUALLOC_HOST_MEMORY_LIMIT", "1GB"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host_memory_limit, 1'000'000'000u);
  c = ResolveConfig("", MapEnvironment({}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host_memory_limit, 0u);
  c = ResolveConfig("host_memory_limit=0", MapEnvironment({}));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()),
              ::testing::HasSubstr("host_memory_limit"));
}

}  // namespace
}  // namespace gpualloc
