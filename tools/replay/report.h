// SPDX-License-Identifier: Apache-2.0
// tools/replay/report.h: gpualloc-replay's text report (the table grouped by
// trace, a legend defining every column shown, and the comparison with
// PyTorch), and the column names and definitions gpualloc-tune shares, so
// that the two tools call the same figure by the same name.
#ifndef GPUALLOC_TOOLS_REPLAY_REPORT_H_
#define GPUALLOC_TOOLS_REPLAY_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "tools/layer.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay {

// Column names of the text tables (gpualloc-replay's and gpualloc-tune's).
// The machine-readable outputs (replay --json, tune --csv/--json) use
// ToJson's field names instead: peak_bytes_reserved, modeled_backend_ns, ...
inline constexpr absl::string_view kColOps = "ops";
inline constexpr absl::string_view kColOoms = "ooms";
inline constexpr absl::string_view kColPeakRequested = "peak requested";
inline constexpr absl::string_view kColPeakReserved = "peak reserved";
inline constexpr absl::string_view kColNoWaitBound = "no-wait bound";
inline constexpr absl::string_view kColOneStreamPeak = "one-stream peak";
inline constexpr absl::string_view kColFirstPassPeak = "pass 1 peak";
// Shown with N the number of passes ("pass 3 peak").
inline constexpr absl::string_view kColLastPassPeak = "pass N peak";
inline constexpr absl::string_view kColUtilization = "utilization";
inline constexpr absl::string_view kColFragAtPeak = "frag@peak";
inline constexpr absl::string_view kColBackendAllocsFrees = "backend a/f";
inline constexpr absl::string_view kColHostWaits = "host waits";
inline constexpr absl::string_view kColStreamWaits = "stream waits";
inline constexpr absl::string_view kColStreamWaitsPer100Frees =
    "waits/100 frees";
inline constexpr absl::string_view kColCompletionPer100Frees =
    "completion/100 frees";
inline constexpr absl::string_view kColModeledMs = "modeled ms";
inline constexpr absl::string_view kColHazards = "hazards";
inline constexpr absl::string_view kColNsPerOp = "ns/op";
inline constexpr absl::string_view kColOursPerPyTorch = "ours/PyTorch";

// The one-line definition of a column above ("" for another name); a few
// take a second line.
absl::string_view ColumnDefinition(absl::string_view column);

// "Columns:" and one line per column, "  NAME  definition", names padded to
// the longest; a '\n' in a definition starts an indented continuation line.
std::string FormatDefinitions(
    const std::vector<std::pair<std::string, std::string>>& definitions);
// FormatDefinitions of the columns above; columns without a definition are
// left out.
std::string FormatLegend(const std::vector<absl::string_view>& columns);

struct ReportOptions {
  // PyTorch's peak reserved bytes per trace name (LoadBaseline), when
  // --baseline was given: the trace headings show it, and the table gets an
  // ours/PyTorch column.
  const std::map<std::string, std::uint64_t>* baseline = nullptr;
  std::uint64_t repeat = 1;  // ReplayOptions::repeat
};

// The table: one heading line per trace (its name, PyTorch's peak reserved
// with a baseline, and whether its streams were replayed as one), then a row
// per configuration, in `results` order (consecutive results of one trace
// share a heading). The host wait, stream wait (absolute and per 100
// frees), completion calls per 100 frees and hazard columns are left out
// when those figures are 0 on every row and no trace had several streams,
// which a line under the table says. The
// no-wait bound column is shown when a result has the bound (multi-stream
// traces; "-" on the rows of others), the one-stream peak column when a
// result has that figure, and with repeat > 1 the pass 1 and pass N peak
// columns. Then the legend of the columns shown.
std::string FormatReplayReport(const std::vector<ReplayResult>& results,
                               const ReportOptions& options);

// The host section, for traces with host rows (ReplayResult::host): per
// trace a heading with the host rows' peak requested, a row per
// configuration (host ops, peak reserved and in use, HostAllocate/HostFree
// calls, host waits, modeled ms, ns/op; with repeat > 1 the calls, waits
// and modeled time are the last pass's, marked *), then the "no host cache"
// row (one per distinct figure, labelled with the configuration when they
// differ), and its legend. "" when no result has host rows, so that the
// report of other traces is what it was.
std::string FormatHostReport(const std::vector<ReplayResult>& results,
                             const ReportOptions& options);

// With a baseline: per configuration (in first-seen order), over the traces
// that have a baseline, the range of ours/PyTorch and of utilization and the
// totals of ooms, backend calls and modeled time, one line each under a
// heading. "" without a baseline or without a trace that has one.
std::string FormatComparisonWithPyTorch(
    const std::vector<ReplayResult>& results, const ReportOptions& options);

// Appends `rows` as a table: columns padded to their widest cell, the first
// left-aligned and the rest right-aligned; a row with one cell is a heading,
// printed as it is and not counted in the widths. The device and host
// reports share it.
void AppendTable(const std::vector<std::vector<std::string>>& rows,
                 std::string& out);

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_REPORT_H_
