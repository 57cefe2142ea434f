// SPDX-License-Identifier: Apache-2.0
// tools/replay/report.cc: see report.h.
#include "tools/replay/report.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace gpualloc::replay {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Definition {
  absl::string_view column;
  absl::string_view text;  // '\n' starts a continuation line
};

// Short and exact: what the figure is, and where it is easy to misread, why.
constexpr Definition kDefinitions[] = {
    {kColOps,
     "allocate and free calls replayed (the free of a refused "
     "allocation is skipped)"},
    {kColOoms, "allocations the allocator refused for lack of memory"},
    {kColPeakRequested,
     "the most bytes live at once, as the trace requested them: what any "
     "allocator must hold"},
    {kColPeakReserved,
     "the most device memory the allocator held at once (its regions, or "
     "with expandable\nregions the pieces mapped into its one address "
     "range)"},
    {kColNoWaitBound,
     "multi-stream traces: the most bytes live plus freed but still pending "
     "(their stream's work up\nto the free not yet complete under the "
     "progress model), a stream reusing its own pending\nbytes at once: "
     "what an allocator that never makes a stream or the host wait must "
     "hold,\nbefore fragmentation (the same for every configuration)"},
    {kColOneStreamPeak,
     "peak reserved of the same replay with every stream mapped to stream "
     "0: peak reserved minus\nit is what the streams cost in memory"},
    {kColFirstPassPeak, "peak reserved during the first pass"},
    {kColLastPassPeak,
     "peak reserved during the last pass: above pass 1 peak, the allocator "
     "held more memory as\nthe passes went on (the same work each pass)"},
    {kColUtilization,
     "peak requested / peak reserved: 100% means nothing held beyond the "
     "requests at the worst moment"},
    {kColFragAtPeak,
     "1 - largest free chunk / all free bytes, at the op where the requested "
     "bytes peaked. It says how\nscattered the free memory is, not how much "
     "there is: at 99% utilization at most ~1% of what is\nreserved is free "
     "then, and 0.46 only means the largest free piece is 54% of that 1%"},
    {kColBackendAllocsFrees,
     "device allocations / frees the allocator made (cudaMalloc/cudaFree, or "
     "with expandable regions\nthe mapping / unmapping of one physical "
     "piece)"},
    {kColHostWaits,
     "times the host blocked until a stream's work was done, to reuse memory "
     "freed on it"},
    {kColStreamWaits,
     "times a stream was made to wait for another stream's work, to reuse "
     "memory freed there"},
    {kColStreamWaitsPer100Frees,
     "stream waits per 100 frees (Deallocate calls), the driver pool's own "
     "waits included in the\nasync model's row"},
    {kColCompletionPer100Frees,
     "calls made to learn whether work completed (event records and event "
     "queries, the\nsimulator's count) per 100 frees"},
    {kColModeledMs,
     "the simulated device's time for the allocator's device calls (and host "
     "waits) by its\nprofile's cost model, in ms: a model, not a "
     "measurement"},
    {kColHazards,
     "uses of memory that another stream's unfinished work still used (the "
     "simulator's race\ndetector; must be 0)"},
    {kColNsPerOp,
     "the allocator's own wall time per allocate/free on this machine "
     "(varies between runs), measured\nafter an untimed run of the same "
     "trace, so that the first configuration pays no warm-up"},
    {kColOursPerPyTorch,
     "peak reserved / PyTorch's peak reserved on the same trace (in the "
     "trace's heading):\nbelow 1 is less memory than PyTorch's caching "
     "allocator needed"},
};

std::string Gib(std::uint64_t bytes) {
  return absl::StrFormat("%.3f GiB", static_cast<double>(bytes) / kGiB);
}

// The cost figures a row shows: the last pass's when repeating.
ReplayRepetition CostOf(const ReplayResult& r, std::uint64_t repeat) {
  if (repeat > 1 && !r.repetitions.empty()) return r.repetitions.back();
  ReplayRepetition cost;
  cost.frees = r.frees;
  cost.backend_allocs = r.backend_allocs;
  cost.backend_frees = r.backend_frees;
  cost.host_waits = r.host_waits;
  cost.stream_waits = r.stream_waits;
  cost.completion_calls = r.completion_calls;
  cost.modeled_backend_ns = r.modeled_backend_ns;
  return cost;
}

const std::uint64_t* BaselineOf(const ReplayResult& r,
                                const ReportOptions& options) {
  if (options.baseline == nullptr) return nullptr;
  auto it = options.baseline->find(r.trace);
  if (it == options.baseline->end() || it->second == 0) return nullptr;
  return &it->second;
}

}  // namespace

void AppendTable(const std::vector<std::vector<std::string>>& rows,
                 std::string& out) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (row.size() == 1) continue;
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    if (row.size() == 1) {
      absl::StrAppend(&out, row[0], "\n");
      continue;
    }
    std::string line = "  ";
    for (std::size_t c = 0; c < row.size(); ++c) {
      const int w = static_cast<int>(width[c]);
      if (c == 0) {
        absl::StrAppendFormat(&line, "%-*s", w, row[c]);  // the config
      } else {
        absl::StrAppendFormat(&line, "  %*s", w, row[c]);
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&out, line, "\n");
  }
}

namespace {

// "0.903x to 0.981x", or one number when both print the same.
std::string Range(double lo, double hi, int precision, absl::string_view unit) {
  const std::string a = absl::StrFormat("%.*f%s", precision, lo, unit);
  const std::string b = absl::StrFormat("%.*f%s", precision, hi, unit);
  return a == b ? a : absl::StrCat(a, " to ", b);
}

}  // namespace

absl::string_view ColumnDefinition(absl::string_view column) {
  for (const Definition& d : kDefinitions) {
    if (d.column == column) return d.text;
  }
  // "pass N peak" as shown, with the number of passes for N.
  std::uint64_t passes = 0;
  if (absl::ConsumePrefix(&column, "pass ") &&
      absl::ConsumeSuffix(&column, " peak") &&
      absl::SimpleAtoi(column, &passes) && passes > 1) {
    return ColumnDefinition(kColLastPassPeak);
  }
  return "";
}

std::string FormatDefinitions(
    const std::vector<std::pair<std::string, std::string>>& definitions) {
  std::size_t width = 0;
  for (const auto& [name, text] : definitions) {
    width = std::max(width, name.size());
  }
  std::string out = "Columns:\n";
  for (const auto& [name, text] : definitions) {
    std::size_t start = 0;
    bool first = true;
    while (start <= text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      absl::StrAppendFormat(&out, "  %-*s  %s\n", static_cast<int>(width),
                            first ? name : "", text.substr(start, end - start));
      first = false;
      start = end + 1;
    }
  }
  return out;
}

std::string FormatLegend(const std::vector<absl::string_view>& columns) {
  std::vector<std::pair<std::string, std::string>> definitions;
  for (absl::string_view c : columns) {
    const absl::string_view text = ColumnDefinition(c);
    if (!text.empty()) definitions.emplace_back(c, text);
  }
  return FormatDefinitions(definitions);
}

namespace {

// The report's columns, and what decided them.
struct ReportColumns {
  bool streams = false;          // the multi-stream columns
  bool baseline = false;         // ours / PyTorch
  bool bound = false;            // the no-wait bound
  bool one_stream_peak = false;  // the one-stream peak
  bool passes = false;           // the first and last pass's peaks
  std::vector<absl::string_view> columns;
};

ReportColumns ChooseColumns(const std::vector<ReplayResult>& results,
                            const ReportOptions& options) {
  ReportColumns c;
  // The multi-stream columns only where they say something.
  for (const ReplayResult& r : results) {
    const ReplayRepetition cost = CostOf(r, options.repeat);
    c.streams |= cost.host_waits != 0 || cost.stream_waits != 0 ||
                 cost.completion_calls != 0 || r.hazards != 0 ||
                 r.progress_model.size() > 0;
  }
  for (const ReplayResult& r : results) {
    c.baseline |= BaselineOf(r, options) != nullptr;
  }
  for (const ReplayResult& r : results) {
    c.bound |= r.nowait_bound_bytes.has_value();
    c.one_stream_peak |= r.one_stream_peak_bytes_reserved.has_value();
  }
  c.passes = options.repeat > 1;
  std::vector<absl::string_view>& columns = c.columns;
  columns = {kColOps, kColOoms, kColPeakRequested};
  if (c.bound) columns.push_back(kColNoWaitBound);
  columns.push_back(kColPeakReserved);
  if (c.one_stream_peak) columns.push_back(kColOneStreamPeak);
  if (c.passes) {
    columns.push_back(kColFirstPassPeak);
    columns.push_back(kColLastPassPeak);
  }
  for (absl::string_view col :
       {kColUtilization, kColFragAtPeak, kColBackendAllocsFrees}) {
    columns.push_back(col);
  }
  if (c.streams) {
    columns.push_back(kColHostWaits);
    columns.push_back(kColStreamWaits);
    columns.push_back(kColStreamWaitsPer100Frees);
    columns.push_back(kColCompletionPer100Frees);
  }
  columns.push_back(kColModeledMs);
  if (c.streams) columns.push_back(kColHazards);
  columns.push_back(kColNsPerOp);
  if (c.baseline) columns.push_back(kColOursPerPyTorch);
  return c;
}

// The name a column is shown under: "pass N peak" with N the passes.
std::string Shown(absl::string_view c, const ReportOptions& options) {
  return c == kColLastPassPeak ? absl::StrCat("pass ", options.repeat, " peak")
                               : std::string(c);
}

std::string GibOrDash(const std::optional<std::uint64_t>& v) {
  return v.has_value() ? Gib(*v) : std::string("-");
}

// One result's row, in the columns' order.
std::vector<std::string> ReportRow(const ReplayResult& r,
                                   const ReportColumns& c,
                                   const ReportOptions& options,
                                   const std::uint64_t* pytorch) {
  const ReplayRepetition cost = CostOf(r, options.repeat);
  std::vector<std::string> row = {r.label, absl::StrCat(r.ops),
                                  absl::StrCat(r.ooms),
                                  Gib(r.peak_bytes_requested)};
  if (c.bound) row.push_back(GibOrDash(r.nowait_bound_bytes));
  row.push_back(Gib(r.peak_bytes_reserved));
  if (c.one_stream_peak) {
    row.push_back(GibOrDash(r.one_stream_peak_bytes_reserved));
  }
  if (c.passes) {
    row.push_back(r.repetitions.empty()
                      ? std::string("-")
                      : Gib(r.repetitions.front().peak_bytes_reserved));
    row.push_back(r.repetitions.empty()
                      ? std::string("-")
                      : Gib(r.repetitions.back().peak_bytes_reserved));
  }
  row.push_back(absl::StrFormat("%.1f%%", 100 * r.utilization));
  row.push_back(absl::StrFormat("%.3f", r.fragmentation_at_peak));
  row.push_back(absl::StrCat(cost.backend_allocs, "/", cost.backend_frees));
  if (c.streams) {
    row.push_back(absl::StrCat(cost.host_waits));
    row.push_back(absl::StrCat(cost.stream_waits));
    row.push_back(
        absl::StrFormat("%.2f", Per100Frees(cost.stream_waits, cost.frees)));
    row.push_back(absl::StrFormat(
        "%.2f", Per100Frees(cost.completion_calls, cost.frees)));
  }
  row.push_back(absl::StrFormat(
      "%.2f", static_cast<double>(cost.modeled_backend_ns) / 1e6));
  if (c.streams) row.push_back(absl::StrCat(r.hazards));
  row.push_back(absl::StrFormat("%.0f", r.ns_per_op));
  if (c.baseline) {
    row.push_back(pytorch == nullptr
                      ? "-"
                      : absl::StrFormat(
                            "%.3f", static_cast<double>(r.peak_bytes_reserved) /
                                        static_cast<double>(*pytorch)));
  }
  return row;
}

// A trace's heading row, with PyTorch's peak and the one-stream note.
std::string TraceHeading(const ReplayResult& r, const std::uint64_t* pytorch) {
  std::vector<std::string> notes;
  if (pytorch != nullptr) {
    notes.push_back(absl::StrCat("PyTorch peak reserved ", Gib(*pytorch)));
  }
  if (r.one_stream) notes.push_back("every stream replayed as stream 0");
  return notes.empty()
             ? r.trace
             : absl::StrCat(r.trace, " (", absl::StrJoin(notes, "; "), ")");
}

}  // namespace

std::string FormatReplayReport(const std::vector<ReplayResult>& results,
                               const ReportOptions& options) {
  if (results.empty()) return "";
  const ReportColumns c = ChooseColumns(results, options);
  // Repeating, the costs are the last pass's (marked *).
  const std::string last = c.passes ? "*" : "";
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"config"};
  for (absl::string_view col : c.columns) {
    const bool cost = col == kColBackendAllocsFrees || col == kColHostWaits ||
                      col == kColStreamWaits ||
                      col == kColStreamWaitsPer100Frees ||
                      col == kColCompletionPer100Frees || col == kColModeledMs;
    header.push_back(absl::StrCat(Shown(col, options), cost ? last : ""));
  }
  rows.push_back(header);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const ReplayResult& r = results[i];
    const std::uint64_t* pytorch = BaselineOf(r, options);
    if (i == 0 || results[i - 1].trace != r.trace ||
        results[i - 1].one_stream != r.one_stream) {
      rows.push_back({TraceHeading(r, pytorch)});
    }
    rows.push_back(ReportRow(r, c, options, pytorch));
  }
  std::string out;
  AppendTable(rows, out);
  if (options.repeat > 1) {
    absl::StrAppendFormat(
        &out,
        "* the last of %d passes (each ends by freeing what the trace left "
        "live); pass 1 peak and pass %d peak\nare those passes' own; the "
        "other columns cover all passes\n",
        options.repeat, options.repeat);
  }
  if (!c.streams) {
    absl::StrAppend(
        &out,
        "host waits, stream waits and hazards are 0 on every row (one "
        "stream per trace): columns left out\n");
  }
  std::vector<std::string> names;
  for (absl::string_view col : c.columns) names.push_back(Shown(col, options));
  absl::StrAppend(&out, "\n", FormatLegend({names.begin(), names.end()}));
  return out;
}

std::string FormatComparisonWithPyTorch(
    const std::vector<ReplayResult>& results, const ReportOptions& options) {
  struct Totals {
    std::string label;
    std::uint64_t traces = 0, ooms = 0, calls = 0, modeled_ns = 0;
    double ratio_lo = 0, ratio_hi = 0, util_lo = 0, util_hi = 0;
  };
  std::vector<Totals> totals;
  std::map<std::string, std::size_t> index;
  for (const ReplayResult& r : results) {
    const std::uint64_t* pytorch = BaselineOf(r, options);
    if (pytorch == nullptr) continue;
    auto [it, added] = index.emplace(r.label, totals.size());
    if (added) totals.push_back(Totals{r.label});
    Totals& t = totals[it->second];
    const double ratio = static_cast<double>(r.peak_bytes_reserved) /
                         static_cast<double>(*pytorch);
    const ReplayRepetition cost = CostOf(r, options.repeat);
    if (t.traces == 0) {
      t.ratio_lo = t.ratio_hi = ratio;
      t.util_lo = t.util_hi = r.utilization;
    }
    t.ratio_lo = std::min(t.ratio_lo, ratio);
    t.ratio_hi = std::max(t.ratio_hi, ratio);
    t.util_lo = std::min(t.util_lo, r.utilization);
    t.util_hi = std::max(t.util_hi, r.utilization);
    ++t.traces;
    t.ooms += r.ooms;
    t.calls += cost.backend_allocs + cost.backend_frees;
    t.modeled_ns += cost.modeled_backend_ns;
  }
  if (totals.empty()) return "";
  std::uint64_t traces = 0;
  for (const Totals& t : totals) traces = std::max(traces, t.traces);
  std::string out = absl::StrFormat(
      "Compared with PyTorch on the same runs (peak reserved / PyTorch's peak "
      "reserved, lowest to highest\nover %d trace%s; utilization likewise; "
      "ooms, backend allocs+frees and modeled ms summed%s):\n",
      traces, traces == 1 ? "" : "s",
      options.repeat > 1 ? ", calls and time of the last pass" : "");
  std::vector<std::vector<std::string>> rows;
  for (const Totals& t : totals) {
    rows.push_back(
        {t.label,
         absl::StrCat(Range(t.ratio_lo, t.ratio_hi, 3, "x"), " PyTorch's"),
         absl::StrCat("utilization ",
                      Range(100 * t.util_lo, 100 * t.util_hi, 1, "%")),
         absl::StrCat(t.ooms, " ooms"),
         absl::StrCat(t.calls, " backend allocs+frees"),
         absl::StrFormat("%.1f modeled ms",
                         static_cast<double>(t.modeled_ns) / 1e6),
         t.traces == traces ? ""
                            : absl::StrCat("(", t.traces, " traces only)")});
  }
  // Left-aligned text columns.
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      absl::StrAppendFormat(&line, "  %-*s", static_cast<int>(width[c]),
                            row[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace gpualloc::replay
