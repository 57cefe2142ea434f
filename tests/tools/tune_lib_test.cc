// SPDX-License-Identifier: Apache-2.0
// tests/tools/tune_lib_test.cc: gpualloc-tune's grid expansion, ranking and
// report formats (tools/replay/tune_lib.h).
#include "tools/replay/tune_lib.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gpualloc/core/config.h"
#include "gtest/gtest.h"

namespace gpualloc::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(TuneLibTest, ParseGridAxis) {
  auto a = ParseGridAxis("split_bound=0|1MiB| 2MiB ");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->key, "split_bound");
  EXPECT_THAT(a->values, ElementsAre("0", "1MiB", "2MiB"));

  struct Bad {
    std::string text, needle;
  };
  for (const Bad& b : std::vector<Bad>{
           {"arch", "expected KEY=V1|V2"},
           {"=h100", "empty key"},
           {"arch=h100||mi300x", "empty value"},
           {"arch=h100,gc=false", "contains ','"},
           {"arch=h300", "unknown architecture profile"},
           {"colour=red", "unknown key"},
           {"granularity=0", "more than 0 bytes"},
           {"growth=exact|exact", "growth=exact is given twice"},
           {"split_bound=0| 1MiB |1MiB", "split_bound=1MiB is given twice"},
       }) {
    SCOPED_TRACE(b.text);
    auto r = ParseGridAxis(b.text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(b.needle));
  }
}

TEST(TuneLibTest, ExpandGridIsTheCrossProductLastAxisFastest) {
  auto c = ExpandGrid(
      "device_memory=80GB",
      {{"arch", {"h100", "mi300x"}}, {"growth", {"exact", "doubling"}}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(*c,
              ElementsAre("device_memory=80GB,arch=h100,growth=exact",
                          "device_memory=80GB,arch=h100,growth=doubling",
                          "device_memory=80GB,arch=mi300x,growth=exact",
                          "device_memory=80GB,arch=mi300x,growth=doubling"));
  c = ExpandGrid("", {{"gc", {"true"}}});
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(*c, ElementsAre("gc=true"));
  c = ExpandGrid("", {});
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(*c, ElementsAre(""));

  c = ExpandGrid("", DefaultGrid());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->size(), 32u);
  for (const std::string& s : *c) {
    EXPECT_TRUE(gpualloc::ParseConfigString(s).ok()) << s;
  }
}

TEST(TuneLibTest, ExpandGridRejectsRepeatedKeysAndBadBase) {
  auto c = ExpandGrid("arch=h100", {{"arch", {"mi300x"}}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("--grid arch"));
  c = ExpandGrid("", {{"gc", {"true"}}, {"gc", {"false"}}});
  ASSERT_FALSE(c.ok());
  c = ExpandGrid("device_memory=lots", {{"gc", {"true"}}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), StartsWith("--base: "));
  c = ExpandGrid("", {{"gc", {}}});
  ASSERT_FALSE(c.ok());
}

TEST(TuneLibTest, TraceLabelsAreDistinct) {
  auto l = TraceLabels({"a", "b"}, {"x/a.csv", "b.csv"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(*l, ElementsAre("a", "b"));
  // Two files with one stem: each is labelled by its path.
  l = TraceLabels({"ok", "ok", "b"}, {"ok.csv", "d2/ok.csv", "b.csv"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(*l, ElementsAre("ok.csv", "d2/ok.csv", "b"));
  // A path equal to another trace's name: paths throughout.
  l = TraceLabels({"b", "b", "b.csv"}, {"b.csv", "d/b.csv", "b.csv.x"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(*l, ElementsAre("b.csv", "d/b.csv", "b.csv.x"));
  // The same path twice is refused.
  l = TraceLabels({"ok", "ok"}, {"ok.csv", "ok.csv"});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr("ok.csv is given twice"));
}

TuneRow Row(const std::string& config, const std::string& trace,
            std::uint64_t ooms, std::uint64_t peak, std::uint64_t ns) {
  TuneRow r;
  r.config = config;
  r.trace = trace;
  r.result.trace = trace;
  r.result.config = config;
  r.result.ooms = ooms;
  r.result.peak_bytes_reserved = peak;
  r.result.modeled_backend_ns = ns;
  return r;
}

TEST(TuneLibTest, RankByOomsThenPeakThenBackendTime) {
  const std::vector<std::string> configs = {"a", "b", "c", "d", "e", "f"};
  const std::vector<std::string> traces = {"t1", "t2"};
  std::vector<TuneRow> rows = {
      Row("a", "t1", 1, 10, 1), Row("a", "t2", 0, 10, 1),  // 1 oom
      Row("b", "t1", 0, 30, 9), Row("b", "t2", 0, 30, 9),  // peak 60
      Row("c", "t1", 0, 20, 5), Row("c", "t2", 0, 20, 5),  // peak 40, 10 ns
      Row("d", "t1", 0, 20, 2), Row("d", "t2", 0, 20, 2),  // peak 40, 4 ns
      Row("e", "t1", 0, 1, 1),                             // fails on t2
      Row("f", "t1", 0, 20, 2), Row("f", "t2", 0, 20, 2),  // ties with d
  };
  TuneRow failed;
  failed.config = "e";
  failed.trace = "t2";
  failed.status = absl::FailedPreconditionError("no virtual memory");
  rows.push_back(failed);

  const std::vector<RankedConfig> ranked = Rank(configs, traces, rows);
  std::vector<std::string> order;
  for (const RankedConfig& r : ranked) order.push_back(r.config);
  EXPECT_THAT(order, ElementsAre("d", "f", "c", "b", "a", "e"));
  EXPECT_EQ(ranked[0].rank, 1);
  EXPECT_EQ(ranked[5].rank, 6);
  EXPECT_THAT(ranked[0].peak_reserved, ElementsAre(20u, 20u));
  EXPECT_EQ(ranked[0].peak_reserved_total, 40u);
  EXPECT_EQ(ranked[0].modeled_backend_ns, 4u);
  EXPECT_EQ(ranked[4].ooms, 1u);
  EXPECT_FALSE(ranked[5].status.ok());

  const std::string table = FormatTable(ranked, traces);
  EXPECT_THAT(table, HasSubstr("error: no virtual memory"));
  EXPECT_THAT(table, HasSubstr("peak[2]: peak reserved GiB of t2"));

  const std::string csv = FormatCsv(ranked, rows);
  EXPECT_THAT(csv, StartsWith("rank,config,trace,error,ops,ooms,"));
  EXPECT_THAT(csv, HasSubstr("\n1,d,t1,,"));
  EXPECT_THAT(csv, HasSubstr("\n6,e,t2,no virtual memory,"));
  // Every line has as many fields as the header (no field here has a comma).
  const std::size_t fields =
      std::count(csv.begin(), csv.begin() + csv.find('\n'), ',');
  std::size_t lines = 0;
  for (std::size_t at = 0; at < csv.size();) {
    const std::size_t end = csv.find('\n', at);
    EXPECT_EQ(std::count(csv.begin() + at, csv.begin() + end, ','), fields)
        << csv.substr(at, end - at);
    at = end + 1;
    ++lines;
  }
  EXPECT_EQ(lines, 1 + rows.size());

  const std::string json = FormatJson(ranked, rows);
  EXPECT_THAT(json, StartsWith("{\"rank\":1,"));
  EXPECT_THAT(json, HasSubstr("{\"rank\":6,\"config\":\"e\",\"trace\":\"t2\","
                              "\"error\":\"no virtual memory\"}"));
  EXPECT_EQ(std::count(json.begin(), json.end(), '\n'),
            static_cast<std::ptrdiff_t>(rows.size()));
}

// d and f have equal figures: they share rank 1, and c comes third.
TEST(TuneLibTest, EqualFiguresShareARank) {
  const std::vector<std::string> configs = {"c", "d", "f", "e"};
  std::vector<TuneRow> rows = {Row("c", "t", 0, 30, 5), Row("d", "t", 0, 20, 2),
                               Row("f", "t", 0, 20, 2)};
  TuneRow failed;
  failed.config = "e";
  failed.trace = "t";
  failed.status = absl::FailedPreconditionError("no");
  rows.push_back(failed);
  const std::vector<RankedConfig> ranked = Rank(configs, {"t"}, rows);
  std::vector<std::pair<std::string, int>> order;
  for (const RankedConfig& r : ranked) order.emplace_back(r.config, r.rank);
  EXPECT_THAT(order, ElementsAre(std::pair<std::string, int>("d", 1),
                                 std::pair<std::string, int>("f", 1),
                                 std::pair<std::string, int>("c", 3),
                                 std::pair<std::string, int>("e", 4)));
  const std::string csv = FormatCsv(ranked, rows);
  EXPECT_THAT(csv, HasSubstr("\n1,d,t,,"));
  EXPECT_THAT(csv, HasSubstr("\n1,f,t,,"));
}

constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr std::uint64_t kGiB = 1024 * kMiB;

// Configurations 3 MiB apart at 10 GiB print apart (GiB to three decimals).
TEST(TuneLibTest, TableSeparatesPeaksAFewMiBApart) {
  const std::vector<std::string> configs = {"a", "b"};
  const std::vector<TuneRow> rows = {Row("a", "t", 0, 10 * kGiB, 1),
                                     Row("b", "t", 0, 10 * kGiB + 3 * kMiB, 1)};
  const std::string table = FormatTable(Rank(configs, {"t"}, rows), {"t"});
  EXPECT_THAT(table,
              ::testing::ContainsRegex("\n   1 +0 +10\\.000 +10\\.000 "));
  EXPECT_THAT(table,
              ::testing::ContainsRegex("\n   2 +0 +10\\.003 +10\\.003 "));
}

// Per trace, the best configuration there (fewest ooms, least peak reserved,
// least modeled time on that trace); per arch= value, its best ranked
// configuration over all traces.
TEST(TuneLibTest, BestPerTraceAndPerArchitecture) {
  const std::string h_exact = "arch=h100,growth=exact";
  const std::string h_doubling = "arch=h100,growth=doubling";
  const std::string m_exact = "arch=mi300x,growth=exact";
  const std::string m_doubling = "arch=mi300x,growth=doubling";
  const std::vector<std::string> configs = {h_exact, h_doubling, m_exact,
                                            m_doubling};
  const std::vector<std::string> traces = {"t1", "t2"};
  const std::vector<TuneRow> rows = {
      // Totals: h_exact 4 GiB + 2 MiB, h_doubling 5 GiB, m_exact 4 GiB + 1
      // MiB, m_doubling 4 GiB + 1 MiB with an oom on t2.
      Row(h_exact, "t1", 0, kGiB + 2 * kMiB, 9),
      Row(h_exact, "t2", 0, 3 * kGiB, 9),
      Row(h_doubling, "t1", 0, kGiB, 9),  // the best on t1
      Row(h_doubling, "t2", 0, 4 * kGiB, 9),
      Row(m_exact, "t1", 0, kGiB + kMiB, 5),
      Row(m_exact, "t2", 0, 3 * kGiB, 5),  // best on t2: less modeled time
      Row(m_doubling, "t1", 0, kGiB + kMiB, 5),
      Row(m_doubling, "t2", 1, 3 * kGiB, 5),
  };
  const std::vector<RankedConfig> ranked = Rank(configs, traces, rows);
  const std::vector<TraceBest> per_trace = BestPerTrace(ranked, 2);
  ASSERT_EQ(per_trace.size(), 2u);
  ASSERT_NE(per_trace[0].config, nullptr);
  EXPECT_EQ(per_trace[0].config->config, h_doubling);
  EXPECT_EQ(per_trace[0].equal, 0u);
  ASSERT_NE(per_trace[1].config, nullptr);
  EXPECT_EQ(per_trace[1].config->config, m_exact);

  const std::vector<ArchBest> per_arch = BestPerArch(ranked);
  ASSERT_EQ(per_arch.size(), 2u);
  EXPECT_EQ(per_arch[0].arch, "mi300x");
  ASSERT_NE(per_arch[0].config, nullptr);
  EXPECT_EQ(per_arch[0].config->config, m_exact);
  EXPECT_EQ(per_arch[0].config->rank, 1);
  EXPECT_EQ(per_arch[0].configs, 2u);
  EXPECT_EQ(per_arch[1].arch, "h100");
  ASSERT_NE(per_arch[1].config, nullptr);
  EXPECT_EQ(per_arch[1].config->config, h_exact);
  EXPECT_EQ(per_arch[1].config->rank, 2);

  const std::string table = FormatTable(ranked, traces);
  EXPECT_THAT(table, HasSubstr("Best per trace"));
  EXPECT_THAT(table, HasSubstr("  peak[1] t1: 1.000 GiB peak reserved, 0 "
                               "ooms, rank 3: arch=h100,growth=doubling\n"));
  EXPECT_THAT(table, HasSubstr("  peak[2] t2: 3.000 GiB peak reserved, 0 "
                               "ooms, rank 1: arch=mi300x,growth=exact\n"));
  EXPECT_THAT(table, HasSubstr("Best per architecture profile"));
  EXPECT_THAT(table, HasSubstr("  arch=mi300x (2 configurations): rank 1, "
                               "total 4.001 GiB peak reserved, 0 ooms"));
  EXPECT_THAT(table, HasSubstr("  arch=h100 (2 configurations): rank 2, "
                               "total 4.002 GiB peak reserved, 0 ooms"));

  // Equal figures on a trace are counted; a configuration without arch= is
  // grouped as such; a failed trace is left out of its best.
  const std::vector<TuneRow> plain = {Row("gc=true", "t1", 0, kGiB, 1),
                                      Row("gc=false", "t1", 0, kGiB, 1)};
  const std::vector<RankedConfig> two =
      Rank({"gc=true", "gc=false"}, {"t1"}, plain);
  EXPECT_EQ(BestPerTrace(two, 1)[0].equal, 1u);
  const std::string best = FormatBest(two, {"t1"});
  EXPECT_THAT(best, HasSubstr("(1 more with equal figures)"));
  EXPECT_THAT(best, HasSubstr("  (arch not set) (2 configurations): rank 1,"));
}

TEST(TuneLibTest, CsvQuotesConfigsWithCommas) {
  const std::vector<std::string> configs = {"arch=h100,gc=false"};
  const std::vector<TuneRow> rows = {Row(configs[0], "t", 0, 1, 1)};
  const std::string csv = FormatCsv(Rank(configs, {"t"}, rows), rows);
  EXPECT_THAT(csv, HasSubstr("\n1,\"arch=h100,gc=false\",t,,"));
}

TEST(TuneLibTest, TracesWithOneStemKeepTheirOwnColumns) {
  const std::vector<std::string> configs = {"a"};
  auto labels = TraceLabels({"ok", "ok"}, {"ok.csv", "d2/ok.csv"});
  ASSERT_TRUE(labels.ok()) << labels.status();
  const std::vector<TuneRow> rows = {Row("a", (*labels)[0], 0, 10, 1),
                                     Row("a", (*labels)[1], 0, 20, 1)};
  const std::vector<RankedConfig> ranked = Rank(configs, *labels, rows);
  ASSERT_EQ(ranked.size(), 1u);
  EXPECT_THAT(ranked[0].peak_reserved, ElementsAre(10u, 20u));
  const std::string table = FormatTable(ranked, *labels);
  EXPECT_THAT(table, HasSubstr("peak[1]: peak reserved GiB of ok.csv\n"));
  EXPECT_THAT(table, HasSubstr("peak[2]: peak reserved GiB of d2/ok.csv\n"));
}

}  // namespace
}  // namespace gpualloc::replay
