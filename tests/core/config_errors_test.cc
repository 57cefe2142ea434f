// SPDX-License-Identifier: Apache-2.0
// tests/core/config_errors_test.cc: every configuration error and warning
// names what the user set (the GPUALLOC_* variable, the JAX/XLA/TF alias, the
// PyTorch variable and key, or the configuration-string key), shows the value
// as the user wrote it (units as written: "4KiB", not 4096), and says how to
// fix it; none names a C++ Options field. One table, on the simulated device,
// with the environment given as a map: the errors of ResolveConfig, those of
// DeviceRegistry::Create (what no device could ever take), and the ones found
// against the device, at creation on the simulator and at the device's first
// use (DeviceRegistry::Get, as on a GPU).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gpualloc/core/config.h"
#include "gpualloc/gpualloc.h"
#include "gpualloc/runtime/registry.h"
#include "gtest/gtest.h"

namespace gpualloc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Env = std::map<std::string, std::string>;

// Where a row's message comes from.
enum class Stage {
  kResolve,  // ResolveConfig fails
  kCreate,   // DeviceRegistry::Create fails (no device could take it)
  // Found against the device: DeviceRegistry::Create on the simulator, and
  // DeviceRegistry::Get at the device's first use (a registry whose backend
  // factory defers the device, as a GPU's does); both must say it.
  kDevice,
  kWarning,  // ResolveConfig succeeds with a warning line
};

struct Row {
  std::string what;
  Env env;
  std::string config;  // configuration string
  Stage stage;
  // The name the user set, the value as written, and the fix (or, for a
  // warning, what to do or why): each a part of the message.
  std::string name;
  std::string value;
  std::string fix;
};

std::vector<Row> Table() {
  const Env sim = {{"GPUALLOC_BACKEND", "sim"}};
  auto with = [&](Env env) {
    env.insert(sim.begin(), sim.end());
    return env;
  };
  return {
      // --- names nobody knows
      {"GPUALLOC_* typo",
       {{"GPUALLOC_PREALOCATE", "false"}},
       "",
       Stage::kResolve,
       "GPUALLOC_PREALOCATE",
       "\"false\"",
       "did you mean GPUALLOC_PREALLOCATE?"},
      {"JAX typo",
       {{"XLA_PYTHON_CLIENT_PREALOCATE", "false"}},
       "",
       Stage::kWarning,
       "XLA_PYTHON_CLIENT_PREALOCATE",
       "\"false\"",
       "did you mean XLA_PYTHON_CLIENT_PREALLOCATE?"},
      {"PyTorch key typo",
       {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segment:True"}},
       "",
       Stage::kWarning,
       "PYTORCH_CUDA_ALLOC_CONF",
       "expandable_segment:True",
       "did you mean expandable_segments?"},
      {"config string key typo",
       {},
       "backend=sim,prealocate=false",
       Stage::kResolve,
       "prealocate",
       "prealocate=false",
       "did you mean preallocate?"},
      // --- PyTorch keys gpualloc cannot honour: the reason
      {"PyTorch key without equivalent",
       {{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512"}},
       "",
       Stage::kWarning,
       "PYTORCH_CUDA_ALLOC_CONF",
       "max_split_size_mb:512",
       "The nearest setting, GPUALLOC_SPLIT_BOUND"},
      {"PyTorch host allocator key",
       {{"PYTORCH_ALLOC_CONF", "pinned_use_cuda_host_register:True"}},
       "",
       Stage::kWarning,
       "PYTORCH_ALLOC_CONF",
       "pinned_use_cuda_host_register:True",
       "does not replace: it still takes effect there"},
      // --- bad values
      {"fraction out of range",
       {{"GPUALLOC_MEM_FRACTION", "1.5"}},
       "",
       Stage::kResolve,
       "GPUALLOC_MEM_FRACTION",
       "\"1.5\"",
       "not in (0, 1] (a fraction of the device's total memory, e.g. 0.75)"},
      {"JAX fraction as a percentage",
       {{"XLA_PYTHON_CLIENT_MEM_FRACTION", "95%"}},
       "",
       Stage::kResolve,
       "XLA_PYTHON_CLIENT_MEM_FRACTION",
       "\"95%\"",
       "(e.g. 0.75 or .9)"},
      {"TensorFlow boolean",
       {{"TF_ENABLE_GPU_GARBAGE_COLLECTION", "off"}},
       "",
       Stage::kResolve,
       "TF_ENABLE_GPU_GARBAGE_COLLECTION",
       "\"off\"",
       "(true, false, 1 or 0)"},
      {"PyTorch boolean spelling",
       {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:true"}},
       "",
       Stage::kResolve,
       "PYTORCH_CUDA_ALLOC_CONF expandable_segments",
       "\"true\"",
       "not True or False"},
      {"PyTorch threshold out of range",
       {{"PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:1.2"}},
       "",
       Stage::kResolve,
       "PYTORCH_CUDA_ALLOC_CONF garbage_collection_threshold",
       "\"1.2\"",
       "in (0, 1), PyTorch's range (e.g. 0.8"},
      {"PyTorch divisions beyond gpualloc's",
       {{"PYTORCH_HIP_ALLOC_CONF", "roundup_power2_divisions:128"}},
       "",
       Stage::kResolve,
       "PYTORCH_HIP_ALLOC_CONF roundup_power2_divisions",
       "\"128\"",
       "use 64 or less"},
      {"PyTorch fraction 0",
       {{"PYTORCH_CUDA_ALLOC_CONF", "per_process_memory_fraction:0"}},
       "",
       Stage::kResolve,
       "PYTORCH_CUDA_ALLOC_CONF per_process_memory_fraction",
       "\"0\"",
       "remove the key for no cap"},
      {"PyTorch fraction below one granule",
       with({{"PYTORCH_CUDA_ALLOC_CONF",
              "per_process_memory_fraction:0.00001"}}),
       "", Stage::kDevice, "PYTORCH_CUDA_ALLOC_CONF",
       "per_process_memory_fraction:0.00001",
       "raise per_process_memory_fraction in PYTORCH_CUDA_ALLOC_CONF to at "
       "least 0.000014"},
      {"unit typo in the config string",
       {},
       "mem_limit=12 parsecs",
       Stage::kResolve,
       "config string mem_limit",
       "\"12 parsecs\"",
       "valid units: B, KB"},
      {"threshold as a percentage",
       {{"GPUALLOC_GC_THRESHOLD", "80%"}},
       "",
       Stage::kResolve,
       "GPUALLOC_GC_THRESHOLD",
       "\"80%\"",
       "e.g. 0.8"},
      {"min_block not a power of two",
       {{"GPUALLOC_MIN_BLOCK", "384"}},
       "",
       Stage::kResolve,
       "GPUALLOC_MIN_BLOCK",
       "\"384\"",
       "not a power of two of at least 16 bytes"},
      {"history too long",
       {},
       "history=20000000",
       Stage::kResolve,
       "config string history",
       "\"20000000\"",
       "not 0 (off) or a number of events up to 16777216"},
      // --- two settings that conflict: both named
      {"granularity and min_block",
       {{"GPUALLOC_MIN_BLOCK", "8KiB"}},
       "granularity=4KiB",
       Stage::kResolve,
       "config string granularity=\"4KiB\" is not a multiple of "
       "GPUALLOC_MIN_BLOCK",
       "\"8KiB\"",
       "or GPUALLOC_MIN_BLOCK to a power of two that divides 4096"},
      {"two fraction aliases",
       {{"XLA_CLIENT_MEM_FRACTION", "0.5"},
        {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6"}},
       "",
       Stage::kResolve,
       "XLA_PYTHON_CLIENT_MEM_FRACTION",
       "\"0.6\"",
       "unset one"},
      {"two PyTorch variables",
       {{"PYTORCH_ALLOC_CONF", "expandable_segments:True"},
        {"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False"}},
       "",
       Stage::kResolve,
       "PYTORCH_CUDA_ALLOC_CONF",
       "\"expandable_segments:False\"",
       "set only one"},
      {"JAX alias against a PyTorch key",
       {{"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
        {"PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"}},
       "",
       Stage::kResolve,
       "XLA_PYTHON_CLIENT_ALLOCATOR",
       "\"platform\"",
       "make them agree or unset one"},
      {"expandable with another allocator",
       with({{"GPUALLOC_EXPANDABLE", "true"},
             {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}}),
       "", Stage::kCreate,
       "GPUALLOC_EXPANDABLE=\"true\" belongs to allocator=bfc, but "
       "XLA_PYTHON_CLIENT_ALLOCATOR",
       "\"platform\"",
       "unset GPUALLOC_EXPANDABLE (expandable regions where they work), or "
       "unset XLA_PYTHON_CLIENT_ALLOCATOR"},
      {"PyTorch rounding with PyTorch's async backend",
       with({{"PYTORCH_CUDA_ALLOC_CONF",
              "backend:cudaMallocAsync,roundup_power2_divisions:4"}}),
       "", Stage::kCreate, "PYTORCH_CUDA_ALLOC_CONF roundup_power2_divisions",
       "roundup_power2_divisions:4",
       "remove roundup_power2_divisions from PYTORCH_CUDA_ALLOC_CONF (no "
       "rounding), or remove backend from PYTORCH_CUDA_ALLOC_CONF"},
      {"threshold with the async allocator",
       {},
       "backend=sim,allocator=async,gc_threshold=0.8",
       Stage::kCreate,
       "config string gc_threshold",
       "\"0.8\"",
       "remove gc_threshold from the config string (off), or remove "
       "allocator from the config string"},
      {"device_memory without the simulator",
       {{"GPUALLOC_BACKEND", "cuda"}, {"GPUALLOC_DEVICE_MEMORY", "80GB"}},
       "",
       Stage::kCreate,
       "GPUALLOC_DEVICE_MEMORY",
       "\"80GB\"",
       "set GPUALLOC_BACKEND to sim, or unset GPUALLOC_DEVICE_MEMORY"},
      {"fine memory without HIP", with({{"GPUALLOC_MEMORY_KIND", "fine"}}), "",
       Stage::kCreate, "GPUALLOC_MEMORY_KIND", "\"fine\"",
       "set GPUALLOC_BACKEND to hip, or unset GPUALLOC_MEMORY_KIND"},
      {"simulated size off the alignment",
       {},
       "backend=sim,device_memory=1000",
       Stage::kCreate,
       "config string device_memory",
       "\"1000\"",
       "set device_memory in the config string to a multiple of 256 bytes"},
      // --- against the device
      {"limit above the device",
       with({{"GPUALLOC_DEVICE_MEMORY", "16GiB"},
             {"GPUALLOC_MEM_LIMIT", "20GiB"}}),
       "", Stage::kDevice,
       "GPUALLOC_MEM_LIMIT=\"20GiB\" is more than the device's total memory",
       "GPUALLOC_DEVICE_MEMORY=\"16GiB\"",
       "set GPUALLOC_MEM_LIMIT to at most 17179869184 bytes, or unset "
       "GPUALLOC_MEM_LIMIT"},
      {"granularity not the device's multiple",
       with({{"GPUALLOC_GRANULARITY", "1MiB"}}), "", Stage::kDevice,
       "GPUALLOC_GRANULARITY", "\"1MiB\"",
       "not a multiple of the device's minimum granularity, 2097152 bytes "
       "(2.00 MiB); set GPUALLOC_GRANULARITY to a multiple of 2097152 bytes, "
       "or unset GPUALLOC_GRANULARITY"},
      {"granularity not whole profile blocks",
       {},
       "backend=sim,granularity=4112",
       Stage::kDevice,
       "config string granularity",
       "\"4112\"",
       "is not a multiple of the profile's min_block=256: region sizes are "
       "whole minimum blocks; set granularity in the config string to a "
       "multiple of 256 bytes"},
      {"min_block larger than the granule",
       with({{"GPUALLOC_MIN_BLOCK", "4MiB"}}), "", Stage::kDevice,
       "GPUALLOC_MIN_BLOCK", "\"4MiB\"",
       "set granularity (GPUALLOC_GRANULARITY) to a multiple of 4194304 "
       "bytes (4.00 MiB), or GPUALLOC_MIN_BLOCK to a power of two that "
       "divides 2097152"},
      {"fraction below one granule",
       with({{"GPUALLOC_MEM_FRACTION", "0.00001"}}), "", Stage::kDevice,
       "GPUALLOC_MEM_FRACTION", "\"0.00001\"",
       "smaller than one growth granule, the device's granularity=2097152; "
       "raise GPUALLOC_MEM_FRACTION to at least 0.000014"},
      {"simulated device smaller than a granule",
       with({{"GPUALLOC_DEVICE_MEMORY", "1MiB"}}), "", Stage::kDevice,
       "mem_fraction=0.75 (the default)", "GPUALLOC_DEVICE_MEMORY=\"1MiB\"",
       "use a device with more memory"},
  };
}

// The message a row's stage gives (for kDevice, at creation or, with
// `late`, at the first use); "" with a test failure when the stage succeeds.
std::string MessageOf(const Row& row, bool late) {
  absl::StatusOr<Config> config =
      ResolveConfig(row.config, MapEnvironment(row.env));
  if (row.stage == Stage::kResolve) {
    EXPECT_FALSE(config.ok()) << "resolved";
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(config.status().message());
  }
  if (!config.ok()) {
    ADD_FAILURE() << config.status();
    return "";
  }
  if (row.stage == Stage::kWarning) {
    EXPECT_EQ(config->warnings.size(), 1u);
    return absl::StrJoin(config->warnings, "\n");
  }
  absl::StatusOr<std::unique_ptr<DeviceRegistry>> registry;
  if (!late) {
    registry = DeviceRegistry::Create(*config);
  } else {
    // The device only at first use, as a GPU's: the options are checked in
    // DeviceRegistry::Get.
    const Config c = *config;
    registry = DeviceRegistry::Create(
        c, [c](int ordinal) { return CreateBackend(c, ordinal); }, 1);
    if (!registry.ok()) {
      ADD_FAILURE() << registry.status();
      return "";
    }
    absl::StatusOr<Allocator*> a = (*registry)->Get(0);
    EXPECT_FALSE(a.ok()) << "created at first use";
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(a.status().message());
  }
  EXPECT_FALSE(registry.ok()) << "created";
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(registry.status().message());
}

TEST(ConfigErrorsTest, EveryMessageNamesWhatWasSetAsWrittenAndTheFix) {
  const std::vector<Row> rows = Table();
  ASSERT_GE(rows.size(), 15u);
  for (const Row& row : rows) {
    for (bool late : {false, true}) {
      if (late && row.stage != Stage::kDevice) continue;
      SCOPED_TRACE(row.what + (late ? " (at first use)" : ""));
      const std::string message = MessageOf(row, late);
      EXPECT_THAT(message, HasSubstr(row.name));
      EXPECT_THAT(message, HasSubstr(row.value));
      EXPECT_THAT(message, HasSubstr(row.fix));
      // The user set keys and variables, never a C++ field.
      EXPECT_THAT(message, Not(HasSubstr("Options.")));
    }
  }
}

// The C API reports the same messages: at gpualloc_create_isolated for what
// the simulator can check at creation.
TEST(ConfigErrorsTest, TheCApiReportsTheSameMessages) {
  for (const Row& row : Table()) {
    if (!row.env.empty() || row.stage == Stage::kWarning) continue;
    SCOPED_TRACE(row.what);
    gpualloc_t* a = nullptr;
    EXPECT_EQ(gpualloc_create_isolated(row.config.c_str(), &a),
              GPUALLOC_INVALID_ARGUMENT);
    EXPECT_EQ(a, nullptr);
    const std::string message = gpualloc_last_error();
    EXPECT_THAT(message, HasSubstr(row.name));
    EXPECT_THAT(message, HasSubstr(row.value));
    EXPECT_THAT(message, HasSubstr(row.fix));
  }
}

// A program that builds Options itself gets the same problems named after the
// fields it set.
TEST(ConfigErrorsTest, OptionsBuiltByAProgramNameTheFields) {
  Options o;
  o.memory_limit = 20ull << 30;
  SimOptions so;
  so.total_bytes = 16ull << 30;
  absl::StatusOr<std::shared_ptr<SimBackend>> sim = SimBackend::Create(so);
  ASSERT_TRUE(sim.ok()) << sim.status();
  absl::StatusOr<std::unique_ptr<Allocator>> a = CreateAllocator(o, *sim);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(),
              HasSubstr("Options.memory_limit=21474836480 is more than the "
                        "device's total memory, 17179869184 bytes"));
  EXPECT_THAT(a.status().message(),
              HasSubstr("set Options.memory_limit to at most 17179869184 "
                        "bytes, or set Options.memory_limit to 0"));
}

// Warnings and errors quote at most about 80 bytes of what the user wrote,
// and its length: a 100 KB entry or name does not flood the terminal.
TEST(ConfigErrorsTest, LongInputIsQuotedCut) {
  const std::string huge(100'000, 'k');
  const auto bounded = [&](const std::string& line) {
    EXPECT_LT(line.size(), 600u) << line.substr(0, 600);
    EXPECT_THAT(line, HasSubstr("bytes)"));
  };
  // An unknown PyTorch key: a warning line.
  absl::StatusOr<Config> c = ResolveConfig(
      "", MapEnvironment({{"PYTORCH_CUDA_ALLOC_CONF", huge + ":1"}}));
  ASSERT_TRUE(c.ok()) << c.status().message().substr(0, 300);
  ASSERT_EQ(c->warnings.size(), 1u);
  bounded(c->warnings[0]);
  EXPECT_THAT(c->warnings[0], HasSubstr("(100002 bytes)"));
  // A duplicate key and an empty value: errors.
  for (const std::string& conf : {huge + ":1," + huge + ":2", huge + ":"}) {
    c = ResolveConfig("", MapEnvironment({{"PYTORCH_ALLOC_CONF", conf}}));
    ASSERT_FALSE(c.ok());
    bounded(std::string(c.status().message()));
  }
  // An unknown GPUALLOC_* variable with a long name and value.
  c = ResolveConfig("", MapEnvironment({{"GPUALLOC_" + huge, huge}}));
  ASSERT_FALSE(c.ok());
  bounded(std::string(c.status().message()));
  // An unknown key and an unknown profile in the configuration string.
  c = ResolveConfig(huge + "=1", MapEnvironment({}));
  ASSERT_FALSE(c.ok());
  bounded(std::string(c.status().message()));
  c = ResolveConfig("backend=sim,arch=" + huge, MapEnvironment({}));
  if (c.ok()) {
    auto r = DeviceRegistry::Create(*c);
    ASSERT_FALSE(r.ok());
    bounded(std::string(r.status().message()));
  } else {
    bounded(std::string(c.status().message()));
  }
}

}  // namespace
}  // namespace gpualloc
