// SPDX-License-Identifier: Apache-2.0
// tools/replay/tune_lib.h: the parts of gpualloc-tune worth testing on their
// own: the grid of configurations, the ranking and the report formats.
#ifndef GPUALLOC_TOOLS_REPLAY_TUNE_LIB_H_
#define GPUALLOC_TOOLS_REPLAY_TUNE_LIB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/layer.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay {

// One --grid argument: a configuration key and the values it takes.
struct GridAxis {
  std::string key;
  std::vector<std::string> values;
};

// "KEY=V1|V2|..." -> GridAxis. Every value is checked as "KEY=V" with the
// configuration parser, so a typo fails before any replay starts.
// InvalidArgument on an empty key or value, a ',' in a value (it would smuggle
// in another key), a value given twice or a value the parser rejects.
absl::StatusOr<GridAxis> ParseGridAxis(absl::string_view text);

// Without --grid: both big profiles, both growth policies, preallocation on
// and off, split bound 0 and 1 MiB, granularity 2 MiB and 32 MiB (32
// configurations).
std::vector<GridAxis> DefaultGrid();

// The cross product, each combined with `base`: "base,k1=v,k2=w,...", the
// last axis varying fastest. InvalidArgument when two axes name the same key
// or an axis names a key `base` sets, or `base` does not parse.
absl::StatusOr<std::vector<std::string>> ExpandGrid(
    const std::string& base, const std::vector<GridAxis>& axes);

// One distinct label per trace, for the report's columns: the trace's name
// (its file stem) where that is unique, else its path as given, so that two
// traces never share a column. `names` and `paths` are parallel.
// InvalidArgument when the same path is given twice.
absl::StatusOr<std::vector<std::string>> TraceLabels(
    const std::vector<std::string>& names,
    const std::vector<std::string>& paths);

// The replay of one trace under one configuration, or why it could not run.
struct TuneRow {
  std::string config;
  std::string trace;
  absl::Status status;  // not OK: the allocator could not be created, etc.
  ReplayResult result;  // when status is OK
};

// One configuration's totals over every trace.
struct RankedConfig {
  std::string config;
  int rank = 0;         // 1 = best
  absl::Status status;  // the first failed row's; failed configs rank last
  std::uint64_t ooms = 0;
  std::vector<std::uint64_t> peak_reserved;  // per trace, in `traces` order
  std::uint64_t peak_reserved_total = 0;
  std::uint64_t modeled_backend_ns = 0;
  // Per trace, in `traces` order: whether it replayed (its row is OK), and
  // its OOMs and modeled backend time there.
  std::vector<std::uint8_t> replayed;
  std::vector<std::uint64_t> trace_ooms;
  std::vector<std::uint64_t> trace_modeled_ns;
};

// Groups rows by configuration (in `configs` order; `traces` gives the
// column order) and ranks them by total OOMs, then the sum of peak reserved
// bytes, then modeled backend time, all ascending; ties keep grid order and
// share a rank (1, 2, 2, 4: equal figures, equal rank). Configurations with a
// failed row come after every complete one, each with a rank of its own.
std::vector<RankedConfig> Rank(const std::vector<std::string>& configs,
                               const std::vector<std::string>& traces,
                               const std::vector<TuneRow>& rows);

// gpualloc-tune --reference: a reference model (reference.h) ranked among
// the configurations under the name "reference=NAME" (not a configuration
// string: it replays with ReplayOptions::reference). BestPerArch leaves
// these out (they have no architecture setting of their own).
inline constexpr absl::string_view kReferencePrefix = "reference=";
bool IsReferenceConfig(absl::string_view config);

// The best configuration on one trace: the fewest OOMs there, then the least
// peak reserved, then the least modeled backend time; among equals the best
// ranked. Configurations that failed on the trace are left out.
struct TraceBest {
  const RankedConfig* config = nullptr;  // null: nothing replayed the trace
  std::size_t equal = 0;  // other configurations with the same three figures
};
// One per trace, in `traces` order (`ranked` as Rank returns it).
std::vector<TraceBest> BestPerTrace(const std::vector<RankedConfig>& ranked,
                                    std::size_t num_traces);

// The best ranked complete configuration of each architecture profile swept
// (its arch= value; "" where the configuration sets none, the device's own
// profile), best first.
struct ArchBest {
  std::string arch;
  const RankedConfig* config = nullptr;  // null: all of them failed
  std::size_t configs = 0;               // configurations with that arch=
  std::size_t equal = 0;  // others of them with the same rank (equal figures)
};
std::vector<ArchBest> BestPerArch(const std::vector<RankedConfig>& ranked);

// The two summaries for a terminal: the best configuration per trace with
// its peak reserved, and per architecture profile over all traces.
std::string FormatBest(const std::vector<RankedConfig>& ranked,
                       const std::vector<std::string>& traces);

// The ranked table for a terminal, then FormatBest.
std::string FormatTable(const std::vector<RankedConfig>& ranked,
                        const std::vector<std::string>& traces);

// One line per (config, trace), header first; rows in rank order.
std::string FormatCsv(const std::vector<RankedConfig>& ranked,
                      const std::vector<TuneRow>& rows);
// One JSON object per line per (config, trace): ToJson's fields plus "rank"
// (and "error" for failed rows).
std::string FormatJson(const std::vector<RankedConfig>& ranked,
                       const std::vector<TuneRow>& rows);

}  // namespace gpualloc::replay

#endif  // GPUALLOC_TOOLS_REPLAY_TUNE_LIB_H_
