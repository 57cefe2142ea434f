// SPDX-License-Identifier: Apache-2.0
// tests/tools/workload_gen_test.cc: gpualloc-gen's library: its command line,
// the three patterns' traces (well-formed, every allocation freed, the streams
// each pattern promises, deterministic) and the bundled gen-*.csv, which
// must be exactly what the commands in SOURCES.md write.
#include "tools/replay/workload_gen.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay {
namespace {

using ::testing::HasSubstr;

std::string TraceDir() { return GPUALLOC_TRACE_DIR; }

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

std::string Generate(const GenOptions& o, GenSummary* summary = nullptr) {
  absl::StatusOr<std::string> csv = GenerateTrace(o, summary);
  EXPECT_TRUE(csv.ok()) << csv.status();
  return csv.ok() ? *csv : std::string();
}

// The live requested bytes' peak, recomputed from the parsed trace.
std::uint64_t PeakLive(const Trace& t) {
  std::uint64_t live = 0, peak = 0;
  for (const TraceOp& op : t.ops) {
    if (op.kind == TraceOp::Kind::kAlloc) {
      live += op.size;
      peak = std::max(peak, live);
    } else {
      live -= op.size;
    }
  }
  return peak;
}

TEST(GenerateTrace, EveryPatternIsAWellFormedBalancedTrace) {
  struct Case {
    GenPattern pattern;
    std::uint64_t streams;
  };
  for (const Case& c :
       {Case{GenPattern::kPrefetch, 3}, Case{GenPattern::kFsdp, 3},
        Case{GenPattern::kServe, 4}}) {
    GenOptions o;
    o.pattern = c.pattern;
    o.steps = c.pattern == GenPattern::kServe ? 12 : 2;
    o.layers = 6;
    GenSummary summary;
    const std::string csv = Generate(o, &summary);
    absl::StatusOr<Trace> t = ParseTrace(csv, GenPatternName(c.pattern));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->num_allocs, t->num_frees) << GenPatternName(c.pattern);
    EXPECT_EQ(t->num_streams, c.streams) << GenPatternName(c.pattern);
    EXPECT_EQ(summary.ops, t->ops.size() + t->host_ops.size());
    EXPECT_EQ(summary.host_allocs, t->num_host_allocs);
    EXPECT_EQ(t->num_host_allocs, t->num_host_frees);
    // Only the prefetch pattern offloads to the host.
    EXPECT_EQ(t->num_host_allocs > 0, c.pattern == GenPattern::kPrefetch)
        << GenPatternName(c.pattern);
    EXPECT_EQ(summary.allocs, t->num_allocs);
    EXPECT_EQ(summary.streams, c.streams);
    EXPECT_EQ(summary.peak_live_bytes, PeakLive(*t));
    EXPECT_GT(summary.peak_live_bytes, 0u);
    // Streams are numbered as the parser numbers them: the CSV's values are
    // what a replay sees.
    std::istringstream in(csv);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "seq,action,addr_or_id,size,stream");
    std::size_t row = 0, host_row = 0;
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ',');
      ASSERT_EQ(f.size(), 5u) << line;
      if (absl::StartsWith(f[1], "host_")) {
        ASSERT_LT(host_row, t->host_ops.size()) << line;
        EXPECT_EQ(f[4], std::to_string(t->host_ops[host_row].stream)) << line;
        EXPECT_EQ(f[3], std::to_string(t->host_ops[host_row].size)) << line;
        EXPECT_EQ(t->host_ops[host_row].before, row) << line;
        ++host_row;
        continue;
      }
      ASSERT_LT(row, t->ops.size()) << line;
      EXPECT_EQ(f[4], std::to_string(t->ops[row].stream)) << line;
      // A free carries its allocation's size, as the bundled traces do.
      EXPECT_EQ(f[3], std::to_string(t->ops[row].size)) << line;
      ++row;
    }
  }
}

TEST(GenerateTrace, SideStreamsFollowTheOptions) {
  GenOptions o;
  o.layers = 8;
  o.steps = 1;
  o.copy_streams = 4;
  absl::StatusOr<Trace> t = ParseTrace(Generate(o), "prefetch");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_streams, 5u);  // compute + 4 copy streams
  o.pattern = GenPattern::kServe;
  o.streams = 7;
  o.steps = 30;
  t = ParseTrace(Generate(o), "serve");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_streams, 7u);
}

TEST(GenerateTrace, SameOptionsSameBytesOtherSeedOtherTrace) {
  for (GenPattern p :
       {GenPattern::kPrefetch, GenPattern::kFsdp, GenPattern::kServe}) {
    GenOptions o;
    o.pattern = p;
    o.layers = 4;
    o.steps = p == GenPattern::kServe ? 10 : 2;
    const std::string a = Generate(o);
    EXPECT_EQ(a, Generate(o)) << GenPatternName(p);
    o.seed = 2;
    EXPECT_NE(a, Generate(o)) << GenPatternName(p);
  }
}

TEST(GenerateTrace, ScaleMultipliesEverySize) {
  GenOptions o;
  o.pattern = GenPattern::kFsdp;
  o.layers = 4;
  o.steps = 1;
  GenSummary full, half;
  absl::StatusOr<Trace> a = ParseTrace(Generate(o, &full), "a");
  o.scale = 0.5;
  absl::StatusOr<Trace> b = ParseTrace(Generate(o, &half), "b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->ops.size(), b->ops.size());
  for (std::size_t i = 0; i < a->ops.size(); ++i) {
    EXPECT_EQ(b->ops[i].size, std::max<std::uint64_t>(1, a->ops[i].size / 2));
  }
  EXPECT_NEAR(static_cast<double>(half.peak_live_bytes),
              static_cast<double>(full.peak_live_bytes) / 2, 1e3);
}

TEST(GenerateTrace, OptionsOutOfRangeAreInvalidArgument) {
  GenOptions o;
  o.copy_streams = 0;
  EXPECT_THAT(Msg(GenerateTrace(o).status()), HasSubstr("--copy-streams"));
  o = GenOptions();
  o.pattern = GenPattern::kServe;
  o.streams = 65;
  EXPECT_THAT(Msg(GenerateTrace(o).status()), HasSubstr("--streams"));
  o = GenOptions();
  o.scale = 0;
  EXPECT_THAT(Msg(GenerateTrace(o).status()), HasSubstr("--scale"));
  o.scale = -1;
  EXPECT_EQ(GenerateTrace(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseGenCommand, ReadsEveryOptionAndRejectsBadOnes) {
  absl::StatusOr<GenCommand> c =
      ParseGenCommand({"--pattern", "serve", "--seed", "7", "--requests", "9",
                       "--layers", "3", "--streams", "5", "--copy-streams", "2",
                       "--scale", "0.25", "-o", "out.csv", "--summary"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.pattern, GenPattern::kServe);
  EXPECT_EQ(c->options.seed, 7u);
  EXPECT_EQ(c->options.steps, 9u);
  EXPECT_EQ(c->options.layers, 3u);
  EXPECT_EQ(c->options.streams, 5u);
  EXPECT_EQ(c->options.copy_streams, 2u);
  EXPECT_DOUBLE_EQ(c->options.scale, 0.25);
  EXPECT_EQ(c->output, "out.csv");
  EXPECT_TRUE(c->summary);
  EXPECT_TRUE(ParseGenCommand({"--help"})->help);
  EXPECT_THAT(Msg(ParseGenCommand({}).status()), HasSubstr("--pattern"));
  EXPECT_THAT(Msg(ParseGenCommand({"--pattern", "train"}).status()),
              HasSubstr("\"train\""));
  EXPECT_THAT(Msg(ParseGenCommand({"--pattern", "fsdp", "--steps"}).status()),
              HasSubstr("--steps needs a value"));
  EXPECT_THAT(
      Msg(ParseGenCommand({"--pattern", "fsdp", "--steps", "0"}).status()),
      HasSubstr("at least 1"));
  EXPECT_THAT(
      Msg(ParseGenCommand({"--pattern", "fsdp", "--layers", "x"}).status()),
      HasSubstr("--layers: expected a whole number"));
  EXPECT_THAT(Msg(ParseGenCommand({"--pattern", "fsdp", "--bogus"}).status()),
              HasSubstr("unknown argument \"--bogus\""));
}

// The prefetch pattern's host rows: the offloaded state (weights and
// optimizer state per layer) for the whole run, per step the token ids and
// each layer's gradient staging on its copy stream, at most K + 1 staging
// buffers live; the same options give the same rows.
TEST(GenerateTrace, PrefetchEmitsItsHostBuffersDeterministically) {
  for (std::uint64_t k : {1u, 2u}) {
    GenOptions o;
    o.layers = 4;
    o.steps = 3;
    o.copy_streams = k;
    GenSummary summary;
    const std::string csv = Generate(o, &summary);
    EXPECT_EQ(csv, Generate(o));
    absl::StatusOr<Trace> t = ParseTrace(csv, "prefetch");
    ASSERT_TRUE(t.ok()) << t.status();
    // 2 per layer at the start; per step the token ids and 4 stagings.
    EXPECT_EQ(t->num_host_allocs, 2 * 4 + 3 * (1 + 4)) << k;
    EXPECT_EQ(t->num_host_frees, t->num_host_allocs);
    constexpr std::uint64_t kWeights = 12ull * 4096 * 4096 * 2;
    std::uint64_t live = 0, peak = 0;
    for (const HostTraceOp& op : t->host_ops) {
      EXPECT_GE(op.stream, 1u);  // the copy streams, never compute
      EXPECT_LE(op.stream, k);
      if (op.kind == HostTraceOp::Kind::kAlloc) {
        live += op.size;
        peak = std::max(peak, live);
      } else {
        live -= op.size;
      }
    }
    EXPECT_EQ(live, 0u);
    EXPECT_EQ(summary.peak_host_live_bytes, peak);
    // The state (7 x the fp16 weights per layer), K + 1 gradient stagings
    // and one step's token ids (at most 8192 x 8 bytes).
    EXPECT_GE(peak, 4 * 7 * kWeights + (k + 1) * kWeights) << k;
    EXPECT_LE(peak, 4 * 7 * kWeights + (k + 1) * kWeights + 8192 * 8) << k;
    // The first rows are the state, before any device row.
    ASSERT_GE(t->host_ops.size(), 8u);
    EXPECT_EQ(t->host_ops[7].before, 0u);
  }
}

// The host rows change nothing of the device rows: the same allocations,
// sizes and streams as the same options' trace without them.
TEST(GenerateTrace, PrefetchDeviceRowsDoNotDependOnTheHostRows) {
  GenOptions o;
  o.layers = 5;
  o.steps = 2;
  absl::StatusOr<Trace> t = ParseTrace(Generate(o), "prefetch");
  ASSERT_TRUE(t.ok()) << t.status();
  // Drop the host rows from the text and renumber seq: the device trace.
  std::istringstream in(Generate(o));
  std::string line, device;
  std::getline(in, line);
  device = line + "\n";
  std::uint64_t seq = 0;
  while (std::getline(in, line)) {
    if (absl::StrContains(line, "host_")) continue;
    device += std::to_string(seq++) + line.substr(line.find(',')) + "\n";
  }
  absl::StatusOr<Trace> d = ParseTrace(device, "device");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->host_ops.empty());
  ASSERT_EQ(d->ops.size(), t->ops.size());
  for (std::size_t i = 0; i < d->ops.size(); ++i) {
    EXPECT_EQ(d->ops[i].kind, t->ops[i].kind) << i;
    EXPECT_EQ(d->ops[i].id, t->ops[i].id) << i;
    EXPECT_EQ(d->ops[i].size, t->ops[i].size) << i;
    EXPECT_EQ(d->ops[i].stream, t->ops[i].stream) << i;
  }
  EXPECT_EQ(d->num_streams, t->num_streams);
}

// SOURCES.md gives the command that wrote each bundled gen-*.csv; running
// the same arguments through the library must give the same bytes, so the
// files and the generator cannot drift apart.
TEST(BundledGeneratedTraces, EqualTheGeneratorsOutputForTheirCommands) {
  std::ifstream in(TraceDir() + "/SOURCES.md");
  ASSERT_TRUE(in);
  std::vector<std::string> checked;
  for (std::string line; std::getline(in, line);) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "build/tools/gpualloc-gen ")) continue;
    const std::vector<std::string> args =
        absl::StrSplit(rest, ' ', absl::SkipEmpty());
    absl::StatusOr<GenCommand> c = ParseGenCommand(args);
    ASSERT_TRUE(c.ok()) << line << ": " << c.status();
    ASSERT_FALSE(c->output.empty()) << line;
    const std::string name = c->output.substr(c->output.rfind('/') + 1);
    std::ifstream file(TraceDir() + "/" + name, std::ios::binary);
    ASSERT_TRUE(file) << name;
    std::ostringstream bundled;
    bundled << file.rdbuf();
    absl::StatusOr<std::string> csv = GenerateTrace(c->options);
    ASSERT_TRUE(csv.ok()) << csv.status();
    EXPECT_TRUE(*csv == bundled.str())
        << name << " differs from the output of: " << line;
    checked.push_back(name);
  }
  EXPECT_THAT(checked,
              ::testing::UnorderedElementsAre("gen-prefetch.csv",
                                              "gen-fsdp.csv", "gen-serve.csv"));
}

}  // namespace
}  // namespace gpualloc::replay
