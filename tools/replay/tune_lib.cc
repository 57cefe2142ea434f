// SPDX-License-Identifier: Apache-2.0
// tools/replay/tune_lib.cc: see tune_lib.h.
#include "tools/replay/tune_lib.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/config.h"
#include "tools/replay/report.h"

namespace gpualloc::replay {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The keys a configuration string sets, in order.
absl::StatusOr<std::vector<std::string>> KeysOf(const std::string& config) {
  // Parse first: an unknown key or a bad value is reported by the parser,
  // with its position.
  absl::StatusOr<ConfigOverrides> parsed = ParseConfigString(config);
  if (!parsed.ok()) return parsed.status();
  std::vector<std::string> keys;
  if (absl::StripAsciiWhitespace(config).empty()) return keys;
  for (absl::string_view entry : absl::StrSplit(config, ',')) {
    const absl::string_view key =
        absl::StripAsciiWhitespace(entry.substr(0, entry.find('=')));
    keys.emplace_back(key);
  }
  return keys;
}

std::string CsvField(absl::string_view text) {
  if (text.find_first_of(",\"\n") == absl::string_view::npos) {
    return std::string(text);
  }
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

// Bytes in GiB with three decimals (steps of about 1 MiB, so that
// configurations a few MiB apart differ in print), as gpualloc-replay shows
// them.
std::string Gib3(std::uint64_t bytes) {
  return absl::StrFormat("%.3f", static_cast<double>(bytes) / kGiB);
}

// Whether two complete configurations rank equal: the same OOMs, peak
// reserved total and modeled backend time.
bool SameFigures(const RankedConfig& a, const RankedConfig& b) {
  return a.status.ok() && b.status.ok() && a.ooms == b.ooms &&
         a.peak_reserved_total == b.peak_reserved_total &&
         a.modeled_backend_ns == b.modeled_backend_ns;
}

// Rows in rank order: configurations by rank, traces in row order within.
std::vector<std::pair<int, const TuneRow*>> RowsByRank(
    const std::vector<RankedConfig>& ranked, const std::vector<TuneRow>& rows) {
  std::vector<std::pair<int, const TuneRow*>> out;
  for (const RankedConfig& c : ranked) {
    for (const TuneRow& r : rows) {
      if (r.config == c.config) out.emplace_back(c.rank, &r);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<GridAxis> ParseGridAxis(absl::string_view text) {
  const std::size_t eq = text.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grid \"", text,
                     "\": expected KEY=V1|V2|..., e.g. growth=exact|"
                     "doubling"));
  }
  GridAxis axis;
  axis.key = std::string(absl::StripAsciiWhitespace(text.substr(0, eq)));
  if (axis.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grid \"", text, "\": empty key before '='"));
  }
  for (absl::string_view v : absl::StrSplit(text.substr(eq + 1), '|')) {
    const absl::string_view value = absl::StripAsciiWhitespace(v);
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--grid \"", text, "\": empty value"));
    }
    if (value.find(',') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--grid \"", text, "\": value \"", value,
                       "\" contains ','; give each key its own --grid"));
    }
    const std::string entry = absl::StrCat(axis.key, "=", value);
    absl::StatusOr<ConfigOverrides> parsed = ParseConfigString(entry);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--grid \"", text, "\": ", parsed.status().message()));
    }
    // A repeated value would list one configuration twice, and the ranking,
    // which groups rows by configuration, would add both runs into one entry.
    if (std::find(axis.values.begin(), axis.values.end(), value) !=
        axis.values.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--grid \"", text, "\": ", axis.key, "=", value, " is given twice"));
    }
    axis.values.emplace_back(value);
  }
  return axis;
}

std::vector<GridAxis> DefaultGrid() {
  return {
      {"arch", {"h100", "mi300x"}},       {"growth", {"exact", "doubling"}},
      {"preallocate", {"true", "false"}}, {"split_bound", {"0", "1MiB"}},
      {"granularity", {"2MiB", "32MiB"}},
  };
}

absl::StatusOr<std::vector<std::string>> ExpandGrid(
    const std::string& base, const std::vector<GridAxis>& axes) {
  absl::StatusOr<std::vector<std::string>> base_keys = KeysOf(base);
  if (!base_keys.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--base: ", base_keys.status().message()));
  }
  std::set<std::string> seen(base_keys->begin(), base_keys->end());
  for (const GridAxis& axis : axes) {
    if (axis.values.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--grid ", axis.key, ": no values"));
    }
    if (!seen.insert(axis.key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--grid ", axis.key,
                       ": the key is set twice (by another --grid or "
                       "by --base)"));
    }
  }
  std::vector<std::string> out;
  std::vector<std::size_t> index(axes.size(), 0);
  const std::string prefix = std::string(absl::StripAsciiWhitespace(base));
  while (true) {
    std::vector<std::string> parts;
    if (!prefix.empty()) parts.push_back(prefix);
    for (std::size_t a = 0; a < axes.size(); ++a) {
      parts.push_back(absl::StrCat(axes[a].key, "=", axes[a].values[index[a]]));
    }
    out.push_back(absl::StrJoin(parts, ","));
    // Odometer, last axis fastest.
    std::size_t a = axes.size();
    while (a > 0) {
      --a;
      if (++index[a] < axes[a].values.size()) break;
      index[a] = 0;
      if (a == 0) return out;
    }
    if (axes.empty()) return out;
  }
}

absl::StatusOr<std::vector<std::string>> TraceLabels(
    const std::vector<std::string>& names,
    const std::vector<std::string>& paths) {
  if (names.size() != paths.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TraceLabels: ", names.size(), " names for ", paths.size(), " paths"));
  }
  const auto distinct = [](const std::vector<std::string>& labels) {
    return std::set<std::string>(labels.begin(), labels.end()).size() ==
           labels.size();
  };
  // The same file named twice in the same way would replay twice into one
  // column: say so rather than guess which the user meant.
  std::set<std::string> seen_paths;
  for (const std::string& path : paths) {
    if (!seen_paths.insert(path).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("TRACE ", path, " is given twice"));
    }
  }
  if (distinct(names)) return names;
  // Traces that share a name are labelled by their path as given.
  std::map<std::string, int> count;
  for (const std::string& name : names) ++count[name];
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < names.size(); ++i) {
    labels.push_back(count[names[i]] > 1 ? paths[i] : names[i]);
  }
  if (distinct(labels)) return labels;
  return paths;  // a path equal to another trace's name: paths throughout
}

std::vector<RankedConfig> Rank(const std::vector<std::string>& configs,
                               const std::vector<std::string>& traces,
                               const std::vector<TuneRow>& rows) {
  std::vector<RankedConfig> ranked;
  std::map<std::string, std::size_t> at;
  for (const std::string& c : configs) {
    at.emplace(c, ranked.size());
    RankedConfig r;
    r.config = c;
    r.peak_reserved.assign(traces.size(), 0);
    r.replayed.assign(traces.size(), 0);
    r.trace_ooms.assign(traces.size(), 0);
    r.trace_modeled_ns.assign(traces.size(), 0);
    ranked.push_back(std::move(r));
  }
  for (const TuneRow& row : rows) {
    auto it = at.find(row.config);
    if (it == at.end()) continue;
    RankedConfig& r = ranked[it->second];
    if (!row.status.ok()) {
      if (r.status.ok()) r.status = row.status;
      continue;
    }
    r.ooms += row.result.ooms;
    r.peak_reserved_total += row.result.peak_bytes_reserved;
    r.modeled_backend_ns += row.result.modeled_backend_ns;
    const auto t = std::find(traces.begin(), traces.end(), row.trace);
    if (t != traces.end()) {
      const std::size_t i = static_cast<std::size_t>(t - traces.begin());
      r.peak_reserved[i] = row.result.peak_bytes_reserved;
      r.replayed[i] = 1;
      r.trace_ooms[i] = row.result.ooms;
      r.trace_modeled_ns[i] = row.result.modeled_backend_ns;
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const RankedConfig& a, const RankedConfig& b) {
                     if (a.status.ok() != b.status.ok()) return a.status.ok();
                     if (!a.status.ok()) return false;
                     if (a.ooms != b.ooms) return a.ooms < b.ooms;
                     if (a.peak_reserved_total != b.peak_reserved_total) {
                       return a.peak_reserved_total < b.peak_reserved_total;
                     }
                     return a.modeled_backend_ns < b.modeled_backend_ns;
                   });
  // Equal figures share a rank (the first of theirs); a failed
  // configuration has no figures to compare, so a rank of its own.
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    RankedConfig& r = ranked[i];
    r.rank = static_cast<int>(i + 1);
    if (i > 0 && SameFigures(ranked[i - 1], r)) r.rank = ranked[i - 1].rank;
  }
  return ranked;
}

std::vector<TraceBest> BestPerTrace(const std::vector<RankedConfig>& ranked,
                                    std::size_t num_traces) {
  std::vector<TraceBest> best(num_traces);
  for (std::size_t t = 0; t < num_traces; ++t) {
    const auto key = [t](const RankedConfig& c) {
      return std::make_tuple(c.trace_ooms[t], c.peak_reserved[t],
                             c.trace_modeled_ns[t]);
    };
    TraceBest& b = best[t];
    // In rank order: among equal figures the best ranked comes first.
    for (const RankedConfig& c : ranked) {
      if (t >= c.replayed.size() || !c.replayed[t]) continue;
      if (b.config == nullptr || key(c) < key(*b.config)) {
        b.config = &c;
        b.equal = 0;
      } else if (key(c) == key(*b.config)) {
        ++b.equal;
      }
    }
  }
  return best;
}

bool IsReferenceConfig(absl::string_view config) {
  return absl::StartsWith(config, kReferencePrefix);
}

std::vector<ArchBest> BestPerArch(const std::vector<RankedConfig>& ranked) {
  std::vector<ArchBest> out;
  std::map<std::string, std::size_t> at;
  // Rank order: the first complete configuration of an arch is its best.
  for (const RankedConfig& c : ranked) {
    if (IsReferenceConfig(c.config)) continue;
    absl::StatusOr<ConfigOverrides> parsed = ParseConfigString(c.config);
    const std::string arch =
        parsed.ok() && parsed->arch.has_value() ? *parsed->arch : "";
    auto [it, added] = at.emplace(arch, out.size());
    if (added) out.push_back(ArchBest{arch, nullptr, 0, 0});
    ArchBest& b = out[it->second];
    ++b.configs;
    if (!c.status.ok()) continue;
    if (b.config == nullptr) {
      b.config = &c;
    } else if (c.rank == b.config->rank) {
      ++b.equal;
    }
  }
  // Best first: by the rank of each one's best (all failed: last).
  std::stable_sort(
      out.begin(), out.end(), [](const ArchBest& a, const ArchBest& b) {
        if ((a.config == nullptr) != (b.config == nullptr)) {
          return a.config != nullptr;
        }
        return a.config != nullptr && a.config->rank < b.config->rank;
      });
  return out;
}

std::string FormatBest(const std::vector<RankedConfig>& ranked,
                       const std::vector<std::string>& traces) {
  const auto config_text = [](const RankedConfig& c) {
    return c.config.empty() ? std::string("(defaults)") : c.config;
  };
  const auto equal_text = [](std::size_t equal) {
    return equal == 0 ? std::string()
                      : absl::StrCat(" (", equal, " more with equal figures)");
  };
  std::string out =
      "Best per trace (fewest ooms there, then least peak reserved, then "
      "least modeled ms):\n";
  const std::vector<TraceBest> per_trace = BestPerTrace(ranked, traces.size());
  for (std::size_t t = 0; t < traces.size(); ++t) {
    const TraceBest& b = per_trace[t];
    if (b.config == nullptr) {
      absl::StrAppendFormat(&out,
                            "  peak[%d] %s: no configuration replayed it\n",
                            t + 1, traces[t]);
      continue;
    }
    absl::StrAppendFormat(
        &out, "  peak[%d] %s: %s GiB peak reserved, %d ooms, rank %d: %s%s\n",
        t + 1, traces[t], Gib3(b.config->peak_reserved[t]),
        b.config->trace_ooms[t], b.config->rank, config_text(*b.config),
        equal_text(b.equal));
  }
  out +=
      "Best per architecture profile (its best ranked configuration, over all "
      "traces):\n";
  for (const ArchBest& a : BestPerArch(ranked)) {
    const std::string name =
        a.arch.empty() ? "(arch not set)" : absl::StrCat("arch=", a.arch);
    if (a.config == nullptr) {
      absl::StrAppendFormat(&out, "  %s: all %d configurations failed\n", name,
                            a.configs);
      continue;
    }
    absl::StrAppendFormat(
        &out,
        "  %s (%d configuration%s): rank %d, total %s GiB peak reserved, %d "
        "ooms, %.3f modeled ms: %s%s\n",
        name, a.configs, a.configs == 1 ? "" : "s", a.config->rank,
        Gib3(a.config->peak_reserved_total), a.config->ooms,
        static_cast<double>(a.config->modeled_backend_ns) / 1e6,
        config_text(*a.config), equal_text(a.equal));
  }
  return out;
}

std::string FormatTable(const std::vector<RankedConfig>& ranked,
                        const std::vector<std::string>& traces) {
  // Peak reserved per trace in GiB; traces are numbered in the header and
  // named in a legend below, since their names are long. The shared columns
  // have gpualloc-replay's names (tools/replay/report.h).
  std::string out = absl::StrFormat("%4s  %5s", "rank", kColOoms);
  for (std::size_t t = 0; t < traces.size(); ++t) {
    absl::StrAppendFormat(&out, "  %9s", absl::StrCat("peak[", t + 1, "]"));
  }
  absl::StrAppendFormat(&out, "  %11s  %11s  %s\n", "total GiB", kColModeledMs,
                        "config");
  for (const RankedConfig& r : ranked) {
    if (!r.status.ok()) {
      // The config first: the message can be long.
      absl::StrAppendFormat(&out, "%4d  %5s  %s  error: %s\n", r.rank, "-",
                            r.config, r.status.message());
      continue;
    }
    absl::StrAppendFormat(&out, "%4d  %5d", r.rank, r.ooms);
    for (std::uint64_t p : r.peak_reserved) {
      absl::StrAppendFormat(&out, "  %9s", Gib3(p));
    }
    absl::StrAppendFormat(&out, "  %11s  %11.3f  %s\n",
                          Gib3(r.peak_reserved_total),
                          static_cast<double>(r.modeled_backend_ns) / 1e6,
                          r.config.empty() ? "(defaults)" : r.config);
  }
  for (std::size_t t = 0; t < traces.size(); ++t) {
    absl::StrAppendFormat(&out, "peak[%d]: peak reserved GiB of %s\n", t + 1,
                          traces[t]);
  }
  absl::StrAppend(&out, "\n", FormatBest(ranked, traces));
  absl::StrAppend(
      &out, "\n",
      FormatDefinitions(
          {{"rank",
            "by ooms, then total GiB, then modeled ms, all summed over "
            "the traces; equal figures\nshare a rank"},
           {std::string(kColOoms), std::string(ColumnDefinition(kColOoms))},
           {"peak[N]",
            absl::StrCat("peak reserved in GiB on trace N (named above):\n",
                         ColumnDefinition(kColPeakReserved))},
           {"total GiB", "the sum of the peak[N] columns"},
           {std::string(kColModeledMs),
            std::string(ColumnDefinition(kColModeledMs))}}));
  return out;
}

std::string FormatCsv(const std::vector<RankedConfig>& ranked,
                      const std::vector<TuneRow>& rows) {
  std::string out =
      "rank,config,trace,error,ops,ooms,peak_bytes_in_use,"
      "peak_bytes_requested,peak_bytes_reserved,final_bytes_reserved,"
      "utilization,fragmentation_at_peak,largest_free_block_bytes,"
      "backend_allocs,backend_frees,backend_calls,modeled_backend_ns,"
      "events_recorded,hazards,ns_per_op,device\n";
  for (const auto& [rank, row] : RowsByRank(ranked, rows)) {
    absl::StrAppend(&out, rank, ",", CsvField(row->config), ",",
                    CsvField(row->trace), ",",
                    CsvField(row->status.ok() ? "" : row->status.message()));
    if (!row->status.ok()) {
      out += ",,,,,,,,,,,,,,,,,\n";
      continue;
    }
    const ReplayResult& r = row->result;
    absl::StrAppendFormat(
        &out,
        ",%d,%d,%d,%d,%d,%d,%.6f,%.6f,%d,%d,%d,%d,%d,%d,"
        "%d,%.1f,%s\n",
        r.ops, r.ooms, r.peak_bytes_in_use, r.peak_bytes_requested,
        r.peak_bytes_reserved, r.final_bytes_reserved, r.utilization,
        r.fragmentation_at_peak, r.largest_free_block_bytes, r.backend_allocs,
        r.backend_frees, r.backend_calls, r.modeled_backend_ns,
        r.events_recorded, r.hazards, r.ns_per_op, CsvField(r.device));
  }
  return out;
}

std::string FormatJson(const std::vector<RankedConfig>& ranked,
                       const std::vector<TuneRow>& rows) {
  std::string out;
  for (const auto& [rank, row] : RowsByRank(ranked, rows)) {
    if (!row->status.ok()) {
      absl::StrAppend(&out, "{\"rank\":", rank,
                      ",\"config\":", JsonString(row->config),
                      ",\"trace\":", JsonString(row->trace),
                      ",\"error\":", JsonString(row->status.message()), "}\n");
      continue;
    }
    std::string object = ToJson(row->result);
    // ToJson writes one object; put the rank first.
    const std::size_t brace = object.find('{');
    if (brace == std::string::npos) continue;
    const bool empty =
        object.find_first_not_of(" \n}", brace + 1) == std::string::npos;
    object.insert(brace + 1, absl::StrCat("\"rank\":", rank, empty ? "" : ","));
    while (!object.empty() && object.back() == '\n') object.pop_back();
    absl::StrAppend(&out, object, "\n");
  }
  return out;
}

}  // namespace gpualloc::replay
