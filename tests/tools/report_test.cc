// SPDX-License-Identifier: Apache-2.0
// tests/tools/report_test.cc: gpualloc-replay's text report
// (tools/replay/report.h): every column shown is defined in the legend under
// the table, the comparison with PyTorch is computed from the results, and
// gpualloc-tune calls the figures it shares with gpualloc-replay by the same
// names, in its table and in its CSV (whose header is ToJson's field names).
#include "tools/replay/report.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/replay/replay.h"
#include "tools/replay/tune_lib.h"

namespace gpualloc::replay {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

ReplayResult Result(const std::string& trace, const std::string& label,
                    std::uint64_t reserved, std::uint64_t requested) {
  ReplayResult r;
  r.trace = trace;
  r.label = label;
  r.config = label;
  r.ops = 10;
  r.peak_bytes_reserved = reserved;
  r.peak_bytes_requested = requested;
  r.utilization =
      static_cast<double>(requested) / static_cast<double>(reserved);
  r.fragmentation_at_peak = 0.463;
  r.backend_allocs = 5;
  r.backend_frees = 1;
  r.modeled_backend_ns = 2'000'000;
  return r;
}

// Two traces (a and b) under two configurations, trace-major as replayed.
std::vector<ReplayResult> Results() {
  return {Result("a", "grow", 9 * kGiB / 10, 8 * kGiB / 10),
          Result("a", "regions", kGiB, 8 * kGiB / 10),
          Result("b", "grow", 19 * kGiB / 10, 17 * kGiB / 10),
          Result("b", "regions", 2 * kGiB, 17 * kGiB / 10)};
}

// The header line: the line that starts with "  config".
std::vector<std::string> HeaderColumns(const std::string& report) {
  for (absl::string_view line : absl::StrSplit(report, '\n')) {
    if (absl::StartsWith(line, "  config")) {
      std::vector<std::string> columns;
      // Columns are separated by two spaces or more.
      for (absl::string_view c :
           absl::StrSplit(line, "  ", absl::SkipEmpty())) {
        columns.emplace_back(absl::StripAsciiWhitespace(c));
      }
      return columns;
    }
  }
  return {};
}

TEST(ReportTest, EveryColumnShownIsDefinedInTheLegend) {
  const std::map<std::string, std::uint64_t> baseline = {{"a", kGiB},
                                                         {"b", 2 * kGiB}};
  ReportOptions options;
  options.baseline = &baseline;
  const std::string report = FormatReplayReport(Results(), options);
  const std::vector<std::string> columns = HeaderColumns(report);
  ASSERT_GE(columns.size(), 10u) << report;
  const std::size_t legend = report.find("\nColumns:\n");
  ASSERT_NE(legend, std::string::npos) << report;
  for (const std::string& c : columns) {
    if (c == "config") continue;
    SCOPED_TRACE(c);
    EXPECT_FALSE(ColumnDefinition(c).empty());
    EXPECT_THAT(report.substr(legend), HasSubstr("\n  " + c + " "));
  }
  // The easily misread ones say what they are.
  EXPECT_THAT(report, HasSubstr("1 - largest free chunk / all free bytes"));
  EXPECT_THAT(report, HasSubstr("not how much there is"));
  EXPECT_THAT(report, HasSubstr("a model, not a measurement"));
  // Grouped by trace: a heading per trace with PyTorch's figure.
  EXPECT_THAT(report, HasSubstr("\na (PyTorch peak reserved 1.000 GiB)\n"));
  EXPECT_THAT(report, HasSubstr("\nb (PyTorch peak reserved 2.000 GiB)\n"));
  // One stream: the wait and hazard columns are left out, and it says so.
  EXPECT_THAT(report, Not(HasSubstr("host waits  ")));
  EXPECT_THAT(report, HasSubstr("0 on every row"));
}

// The multi-stream and repeat columns too: the no-wait bound, the one-stream
// replay's peak, and each of the first and the last pass's peak reserved.
TEST(ReportTest, EveryOptionalColumnIsDefinedInTheLegend) {
  std::vector<ReplayResult> results = Results();
  for (ReplayResult& r : results) {
    r.nowait_bound_bytes = kGiB / 2;
    r.one_stream_peak_bytes_reserved = kGiB / 2;
    r.repetitions.resize(3);
  }
  ReportOptions options;
  options.repeat = 3;
  const std::string report = FormatReplayReport(results, options);
  const std::vector<std::string> columns = HeaderColumns(report);
  for (const char* c :
       {"no-wait bound", "one-stream peak", "pass 1 peak", "pass 3 peak"}) {
    EXPECT_THAT(columns, ::testing::Contains(c)) << report;
  }
  const std::size_t legend = report.find("\nColumns:\n");
  ASSERT_NE(legend, std::string::npos) << report;
  for (const std::string& c : columns) {
    if (c == "config") continue;
    SCOPED_TRACE(c);
    EXPECT_FALSE(ColumnDefinition(absl::StripSuffix(c, "*")).empty());
    EXPECT_THAT(
        report.substr(legend),
        HasSubstr(absl::StrCat("\n  ", absl::StripSuffix(c, "*"), " ")));
  }
  EXPECT_EQ(ColumnDefinition("pass 1 peak"),
            ColumnDefinition(kColFirstPassPeak));
  EXPECT_EQ(ColumnDefinition("pass 7 peak"),
            ColumnDefinition(kColLastPassPeak));
  EXPECT_EQ(ColumnDefinition("pass x peak"), "");
}

TEST(ReportTest, MultiStreamColumnsShowWhenTheyMatter) {
  std::vector<ReplayResult> results = Results();
  results[1].stream_waits = 3;
  const std::string report = FormatReplayReport(results, ReportOptions());
  const std::vector<std::string> columns = HeaderColumns(report);
  EXPECT_THAT(columns, ::testing::Contains("host waits"));
  EXPECT_THAT(columns, ::testing::Contains("stream waits"));
  EXPECT_THAT(columns, ::testing::Contains("hazards"));
  EXPECT_THAT(columns, Not(::testing::Contains("ours/PyTorch")));
  EXPECT_THAT(report, HasSubstr("\n  hazards "));
}

// Beside the stream waits: stream waits and completion calls per 100
// frees, of the last pass when repeating (marked like the other costs).
TEST(ReportTest, PerFreeColumnsShowWithTheStreamColumns) {
  std::vector<ReplayResult> results = Results();
  results[1].progress_model = "ops";
  results[1].frees = 400;
  results[1].stream_waits = 6;
  results[1].completion_calls = 50;
  std::string report = FormatReplayReport(results, ReportOptions());
  std::vector<std::string> columns = HeaderColumns(report);
  ASSERT_THAT(columns, ::testing::Contains("waits/100 frees"));
  ASSERT_THAT(columns, ::testing::Contains("completion/100 frees"));
  // regions on trace a: 6 and 50 per 400 frees.
  EXPECT_THAT(report,
              ::testing::ContainsRegex("\n  regions[^\n]* 1\\.50 +12\\.50 "));
  EXPECT_THAT(report, HasSubstr("\n  completion/100 frees  calls made to "
                                "learn whether work completed"));
  // Repeating: the last pass's.
  results[1].repetitions.resize(2);
  results[1].repetitions[1].frees = 200;
  results[1].repetitions[1].completion_calls = 2;
  ReportOptions options;
  options.repeat = 2;
  report = FormatReplayReport(results, options);
  columns = HeaderColumns(report);
  EXPECT_THAT(columns, ::testing::Contains("completion/100 frees*"));
  EXPECT_THAT(report,
              ::testing::ContainsRegex("\n  regions[^\n]* 0\\.00 +1\\.00 "));
  // One stream and no completion calls: left out.
  report = FormatReplayReport(Results(), ReportOptions());
  EXPECT_THAT(HeaderColumns(report),
              Not(::testing::Contains("completion/100 frees")));
}

TEST(ReportTest, ComparisonWithPyTorchIsComputedFromTheResults) {
  const std::map<std::string, std::uint64_t> baseline = {{"a", kGiB},
                                                         {"b", 2 * kGiB}};
  ReportOptions options;
  options.baseline = &baseline;
  const std::string text = FormatComparisonWithPyTorch(Results(), options);
  EXPECT_THAT(text, HasSubstr("over 2 traces"));
  // grow: 0.9 on a, 0.95 on b; regions: 1.0 on both.
  EXPECT_THAT(text, HasSubstr("grow     0.900x to 0.950x PyTorch's"));
  EXPECT_THAT(text, HasSubstr("regions  1.000x PyTorch's"));
  EXPECT_THAT(text, HasSubstr("12 backend allocs+frees"));
  EXPECT_THAT(text, HasSubstr("4.0 modeled ms"));
  // Without a baseline there is nothing to compare.
  EXPECT_EQ(FormatComparisonWithPyTorch(Results(), ReportOptions()), "");
}

// gpualloc-tune's table uses gpualloc-replay's names for what they share,
// and its CSV header is ToJson's field names (plus rank and error).
TEST(ReportTest, TuneAndReplayUseTheSameNames) {
  const std::vector<std::string> traces = {"a"};
  std::vector<TuneRow> rows(1);
  rows[0].config = "grow";
  rows[0].trace = "a";
  rows[0].result = Results()[0];
  const std::vector<RankedConfig> ranked = Rank({"grow"}, traces, rows);
  const std::string table = FormatTable(ranked, traces);
  const std::string header = table.substr(table.find("rank"));
  EXPECT_THAT(header.substr(0, header.find('\n')),
              HasSubstr(std::string(kColModeledMs)));
  EXPECT_THAT(header.substr(0, header.find('\n')),
              HasSubstr(std::string(kColOoms)));
  EXPECT_THAT(table, Not(HasSubstr("backend ms")));
  const std::vector<std::string> replay_columns =
      HeaderColumns(FormatReplayReport(Results(), ReportOptions()));
  EXPECT_THAT(replay_columns, ::testing::Contains(std::string(kColModeledMs)));
  EXPECT_THAT(replay_columns, ::testing::Contains(std::string(kColOoms)));
  // tune's legend defines them as replay's does.
  EXPECT_THAT(table, HasSubstr(std::string(ColumnDefinition(kColOoms))));

  const std::string csv = FormatCsv(ranked, rows);
  const std::string json = ToJson(rows[0].result);
  for (absl::string_view field :
       absl::StrSplit(csv.substr(0, csv.find('\n')), ',')) {
    if (field == "rank" || field == "error") continue;
    SCOPED_TRACE(field);
    EXPECT_THAT(json, HasSubstr(absl::StrCat("\"", field, "\":")));
  }
}

}  // namespace
}  // namespace gpualloc::replay
