// SPDX-License-Identifier: Apache-2.0
// tests/tools/info_test.cc: gpualloc-info as a user runs it, in a clean
// environment (env -i) so that the caller's GPUALLOC_* variables cannot change
// the result.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifndef GPUALLOC_INFO_PATH
#error "GPUALLOC_INFO_PATH must name the gpualloc-info executable"
#endif
#ifndef GPUALLOC_REPLAY_PATH
#error "GPUALLOC_REPLAY_PATH must name the gpualloc-replay executable"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string out;  // stdout or stderr, as `streams` selects
};

// Runs TOOL ARGS in an environment of ENV only, through the shell. `streams`
// is a shell redirection choosing what is captured. The tool's path reaches
// it as an argument of /bin/sh, never as a word of env's own: env would take
// a path with '=' in it (a build directory named so) for one more variable.
Result RunTool(const std::string& tool, const std::string& env,
               const std::string& args, const std::string& streams) {
  const std::string command = "env -i " + env +
                              " /bin/sh -c 'exec \"$0\" \"$@\"' '" + tool +
                              "' " + args + " " + streams;
  Result run;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return run;
  }
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) {
    run.out.append(buf.data(), n);
  }
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// gpualloc-info.
Result RunInfo(const std::string& env, const std::string& args,
               const std::string& streams) {
  return RunTool(GPUALLOC_INFO_PATH, env, args, streams);
}

constexpr char kStdout[] = "2>/dev/null";
constexpr char kStderr[] = "2>&1 >/dev/null";

TEST(InfoTest, PrintsDeviceProfileAndConfiguration) {
  const Result run =
      RunInfo("", "--config backend=sim,device_memory=80GB,arch=h100", kStdout);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("Device"));
  EXPECT_THAT(run.out, HasSubstr("sm_90"));
  // The simulator's fake memory has no bytes to copy.
  EXPECT_THAT(run.out, HasSubstr("host accessible: no, host copy: no"));
  // Sharing with other processes and page-locked host memory, said either
  // way.
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "ipc handles: (yes|no), shareable handles: "
                           "(yes|no), host memory: (yes|no)"));
  // Completion counters: the simulator has them.
  EXPECT_THAT(run.out, HasSubstr(", completion counters: yes"));
  EXPECT_THAT(run.out, HasSubstr("80000000000 B (74.51 GiB)"));
  EXPECT_THAT(run.out, HasSubstr("Architecture profile"));
  EXPECT_THAT(run.out, HasSubstr("h100 (NVIDIA H100 80GB HBM3)"));
  EXPECT_THAT(run.out, HasSubstr("Configuration"));
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "device_memory +80000000000 B \\(74.51 GiB\\) +"
                           "option +config string"));
  EXPECT_THAT(run.out,
              ::testing::ContainsRegex("mem_fraction +0.75 +default +default"));
  EXPECT_THAT(run.out, HasSubstr("bytes limit"));
}

TEST(InfoTest, ShowsVariablesAndAliases) {
  const Result run = RunInfo(
      "GPUALLOC_BACKEND=sim XLA_PYTHON_CLIENT_MEM_FRACTION=.5 "
      "GPUALLOC_MEM_LIMIT=8GiB",
      "", kStdout);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "backend +sim +variable +GPUALLOC_BACKEND"));
  EXPECT_THAT(run.out,
              ::testing::ContainsRegex("mem_fraction +0.5 +alias +"
                                       "XLA_PYTHON_CLIENT_MEM_FRACTION"));
  EXPECT_THAT(run.out, HasSubstr("8589934592 B (8 GiB)"));
  EXPECT_THAT(run.out, HasSubstr("overrides mem_fraction"));
  // arch=auto on the simulated H200: detected.
  EXPECT_THAT(run.out,
              HasSubstr("backend sim: the simulator models profile h200"));
  EXPECT_THAT(run.out, HasSubstr("into one reserved address range"));
}

TEST(InfoTest, ShowsPytorchKeysAndWarnsAboutTheOthers) {
  const std::string env =
      "GPUALLOC_BACKEND=sim "
      "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True,max_split_size_mb:"
      "512,garbage_collection_threshold:0.8,roundup_power2_divisions:[256:1,>:"
      "8]'";
  Result run = RunInfo(env, "", kStdout);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "expandable +true +alias +PYTORCH_CUDA_ALLOC_CONF "
                           "expandable_segments:True"));
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "gc_threshold +0.8 +alias +PYTORCH_CUDA_ALLOC_CONF "
                           "garbage_collection_threshold:0.8"));
  // A warning line on stderr for each entry gpualloc cannot honour, with why.
  run = RunInfo(env, "", kStderr);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(run.out,
            "gpualloc: PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb:512 is not "
            "supported, ignored: PyTorch never splits cached blocks above "
            "this size and keeps smaller requests out of them; gpualloc's BFC "
            "splits any free chunk and has no such size. The nearest setting, "
            "GPUALLOC_SPLIT_BOUND, keeps a surplus up to its size unsplit "
            "with each allocation, which is not the same (docs/"
            "REFERENCE.md, \"PyTorch's variables\")\n"
            "gpualloc: PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions:"
            "[256:1,>:8] is not supported, ignored: its list form gives each "
            "size range its own number of divisions; gpualloc rounds every "
            "size with one number: use roundup_power2_divisions:N or "
            "GPUALLOC_SIZE_DIVISIONS (docs/REFERENCE.md, \"PyTorch's "
            "variables\")\n");

  // A GPUALLOC_* variable wins, and says what it overrides; the integer form
  // of roundup_power2_divisions sets size_divisions.
  run = RunInfo(
      "GPUALLOC_BACKEND=sim GPUALLOC_EXPANDABLE=false "
      "PYTORCH_ALLOC_CONF=expandable_segments:True,roundup_power2_divisions:4",
      "", "2>&1");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "size_divisions +4 +alias +PYTORCH_ALLOC_CONF "
                           "roundup_power2_divisions:4"));
  EXPECT_THAT(run.out, Not(HasSubstr("is not supported")));
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "expandable +false +variable +GPUALLOC_EXPANDABLE "
                           "\\(overrides PYTORCH_ALLOC_CONF "
                           "expandable_segments:True\\)"));
  EXPECT_THAT(run.out, HasSubstr("gpualloc: PYTORCH_ALLOC_CONF: "
                                 "expandable_segments:True overridden by "
                                 "GPUALLOC_EXPANDABLE (expandable=false)"));

  // JAX's XLA_PYTHON_CLIENT_ALLOCATOR=address, XLA's synchronous
  // passthrough allocator, is allocator=platform.
  run = RunInfo("GPUALLOC_BACKEND=sim XLA_PYTHON_CLIENT_ALLOCATOR=address", "",
                kStdout);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::ContainsRegex("allocator +platform +alias +"
                                                "XLA_PYTHON_CLIENT_ALLOCATOR"));

  // A bad value is an error naming the variable and the key.
  run = RunInfo(
      "GPUALLOC_BACKEND=sim PYTORCH_CUDA_ALLOC_CONF="
      "expandable_segments:maybe",
      "", kStderr);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("PYTORCH_CUDA_ALLOC_CONF expandable_segments="
                                 "\"maybe\" (entry 1): not True or False"));
}

// The limit section says what each mode enforces: bfc grows by granules
// (preallocate=true, the default, maps the whole limit at once); platform
// and async reserve nothing ahead of time, whatever preallocate says, and
// count live blocks in their own units.
// `text` from "\nLimit\n" on, with the wrapped rows' line breaks and indents
// made single spaces.
std::string LimitSection(const std::string& text) {
  std::string out;
  const std::size_t at = text.find("\nLimit\n");
  if (at == std::string::npos) return out;
  for (std::size_t i = at + 7; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == ' ') {
      if (out.empty() || out.back() != ' ') out += ' ';
    } else {
      out += text[i];
    }
  }
  return out;
}

TEST(InfoTest, LimitSaysWhatEachModeEnforces) {
  Result run = RunInfo("", "--sim h100 --config mem_limit=3000000", kStdout);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("2097152 B (2 MiB)"));
  EXPECT_THAT(run.out, HasSubstr("rounded down to whole growth granules "
                                 "(2 MiB)"));
  EXPECT_THAT(run.out, HasSubstr("the whole limit is mapped on the first "
                                 "allocation"));
  EXPECT_THAT(run.out, Not(HasSubstr("not used")));

  run = RunInfo("", "--sim h100 --config allocator=platform,mem_limit=3000000",
                kStdout);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  const std::string limit = LimitSection(run.out);
  EXPECT_THAT(limit, HasSubstr("2097152 B (2 MiB)"));
  EXPECT_THAT(limit, HasSubstr("rounded down to a multiple of the granularity "
                               "(2 MiB)"));
  EXPECT_THAT(limit, Not(HasSubstr("growth granules")));
  // preallocate=true is the default, but platform mode reserves nothing.
  EXPECT_THAT(limit, Not(HasSubstr("the whole limit")));
  EXPECT_THAT(limit, Not(HasSubstr("preallocate=true")));
  EXPECT_THAT(limit, HasSubstr("each its own device allocation"));
  EXPECT_THAT(limit, HasSubstr("minimum block (256 B)"));
  EXPECT_THAT(limit, HasSubstr("allocation alignment (256 B)"));
  EXPECT_THAT(limit, HasSubstr("every Allocate is one device allocation"));
  EXPECT_THAT(limit, HasSubstr("not used preallocate, expandable, gc,"));

  // Settings given that change nothing are named.
  run = RunInfo("", "--sim h100 --config allocator=async,growth=doubling",
                kStdout);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  const std::string async_limit = LimitSection(run.out);
  EXPECT_THAT(async_limit, HasSubstr("stream-ordered pool"));
  EXPECT_THAT(async_limit, Not(HasSubstr("the whole limit")));
  EXPECT_THAT(async_limit, HasSubstr("growth=doubling (config string)"));
  // async mode does read gc.
  EXPECT_THAT(async_limit, Not(HasSubstr(" gc,")));
}

TEST(InfoTest, BadVariableExitsOneNamingIt) {
  const Result run =
      RunInfo("GPUALLOC_MEM_FRACTION=2", "--config backend=sim", kStderr);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("GPUALLOC_MEM_FRACTION=\"2\""));
  EXPECT_THAT(run.out, HasSubstr("not in (0, 1]"));
}

TEST(InfoTest, BadConfigStringExitsOne) {
  const Result run = RunInfo("", "--config backend=sim,colour=blue", kStderr);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("unknown key \"colour\""));
}

TEST(InfoTest, BackendErrorsExitOne) {
  // backend=cuda: the reason when this build has no CUDA backend or the
  // machine no driver (libcuda.so.1); a GPU machine shows its device.
  Result run = RunInfo("", "--config backend=cuda", kStderr);
  if (run.exit_code != 0) {
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_THAT(run.out, ::testing::AnyOf(HasSubstr("no CUDA backend"),
                                          HasSubstr("libcuda.so.1"),
                                          HasSubstr("backend=cuda")));
  }
  run = RunInfo("", "--config backend=sim --device 1", kStderr);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("--device 1"));
}

// No arguments: backend=auto. Without a GPU that is an answer, not an error:
// it says so, names the way to the simulator and still shows the
// configuration (exit 0); with one, the device.
TEST(InfoTest, NoGpuIsAnAnswerWithExitZero) {
  const Result run = RunInfo("", "", "2>&1");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  if (run.out.find("No GPU found") != std::string::npos) {
    EXPECT_THAT(run.out, HasSubstr("found no GPU backend that works"));
    EXPECT_THAT(run.out, HasSubstr("gpualloc-info --sim PROFILE"));
    EXPECT_THAT(run.out, HasSubstr("Configuration"));
    EXPECT_THAT(run.out, Not(HasSubstr("\nDevice\n")));
  } else {
    EXPECT_THAT(run.out, HasSubstr("\nDevice\n"));
  }
}

// --sim PROFILE is backend=sim,arch=PROFILE; --config adds to it.
TEST(InfoTest, SimShowsTheSimulatedDevice) {
  Result run = RunInfo("GPUALLOC_BACKEND=cuda",
                       "--sim mi300x --config mem_fraction=0.5", kStdout);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("simulated AMD Instinct MI300X"));
  EXPECT_THAT(run.out,
              ::testing::ContainsRegex("backend +sim +option +config string"));
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "mem_fraction +0.5 +option +config string"));
  run = RunInfo("", "--sim b200", kStderr);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.out, HasSubstr("--sim \"b200\" is not a profile"));
  run = RunInfo("", "--sim h100 --config backend=cuda", kStderr);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.out, HasSubstr("--config must not set them"));
}

// Every tool says what it reads at the top of its --help; gpualloc-info also
// in its first line of output.
TEST(InfoTest, SaysWhatItReads) {
  Result run = RunInfo("", "--help", kStdout);
  EXPECT_THAT(run.out.substr(0, 400),
              HasSubstr("Reads: the command line and the environment"));
  run = RunInfo("", "--sim h100", kStdout);
  EXPECT_EQ(run.out.substr(0, run.out.find('\n')),
            "Settings from: the command line, then the environment "
            "(GPUALLOC_*, JAX/XLA/TF and PyTorch variables), then the "
            "defaults");
  run = RunTool(GPUALLOC_REPLAY_PATH, "", "--help", kStdout);
  EXPECT_THAT(run.out.substr(0, 400),
              HasSubstr("Reads: the command line only"));
}

TEST(InfoTest, HelpAndUsage) {
  Result run = RunInfo("", "--help", kStdout);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("usage: gpualloc-info"));
  run = RunInfo("", "--frobnicate", kStderr);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.out, HasSubstr("unknown argument \"--frobnicate\""));
  run = RunInfo("", "--device x", kStderr);
  EXPECT_EQ(run.exit_code, 2);
  run = RunInfo("", "--config", kStderr);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.out, Not(HasSubstr("Configuration")));
}

// Every key gpualloc/core/config.h documents, in its order.
const char* const kConfigKeys[] = {
    "allocator",    "preallocate", "mem_fraction",
    "mem_limit",    "expandable",  "arch",
    "gc",           "backend",     "device_memory",
    "cross_stream", "growth",      "granularity",
    "min_block",    "split_bound", "size_divisions",
    "history",      "name",        "memory_kind"};

TEST(InfoTest, HelpListsEveryConfigurationKey) {
  for (const char* tool : {GPUALLOC_INFO_PATH, GPUALLOC_REPLAY_PATH}) {
    SCOPED_TRACE(tool);
    const Result run = RunTool(tool, "", "--help", kStdout);
    EXPECT_EQ(run.exit_code, 0);
    std::size_t at = run.out.find("Configuration keys:");
    ASSERT_NE(at, std::string::npos) << run.out;
    for (const char* key : kConfigKeys) {
      // One line per key, in config.h's order.
      const std::size_t line =
          run.out.find(std::string("\n  ") + key + " ", at);
      EXPECT_NE(line, std::string::npos) << key << " missing in\n" << run.out;
      if (line != std::string::npos) at = line;
    }
  }
  // gpualloc-info also names each key's variable.
  const Result run = RunInfo("", "--help", kStdout);
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "\n  memory_kind +GPUALLOC_MEMORY_KIND +coarse"));
  EXPECT_THAT(run.out, ::testing::ContainsRegex(
                           "\n  split_bound +GPUALLOC_SPLIT_BOUND +"));
}

}  // namespace
