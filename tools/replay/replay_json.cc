// SPDX-License-Identifier: Apache-2.0
// tools/replay/replay_json.cc: a replay's result as one line of JSON (ToJson,
// replay.h): the run's fields, one object per repetition and the statistics.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "gpualloc/core/snapshot_json.h"
#include "gpualloc/core/stats_fields.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay {
namespace {

// JSON has no NaN or infinity; every ratio here is finite by construction,
// but a 0 is safer than an unparsable line.
std::string JsonDouble(double v) {
  if (!std::isfinite(v)) return "0";
  return absl::StrFormat("%.9g", v);
}

// Appends "k":v to the JSON object being built in *object ("{" and the
// fields so far).
void AppendNumberField(std::string* object, absl::string_view k,
                       std::uint64_t v) {
  if (object->size() > 1) object->push_back(',');
  AppendJsonString(object, k);
  absl::StrAppend(object, ":", v);
}

// One pass's counts and peaks as a JSON object.
std::string RepetitionJson(const ReplayRepetition& p) {
  std::string rep = "{";
  auto rnum = [&rep](absl::string_view k, std::uint64_t v) {
    AppendNumberField(&rep, k, v);
  };
  rnum("ops", p.ops);
  rnum("frees", p.frees);
  rnum("ooms", p.ooms);
  rnum("peak_bytes_in_use", p.peak_bytes_in_use);
  rnum("peak_bytes_requested", p.peak_bytes_requested);
  rnum("peak_bytes_reserved", p.peak_bytes_reserved);
  rnum("backend_allocs", p.backend_allocs);
  rnum("backend_frees", p.backend_frees);
  rnum("backend_calls", p.backend_calls);
  rnum("modeled_backend_ns", p.modeled_backend_ns);
  rnum("events_recorded", p.events_recorded);
  rnum("host_waits", p.host_waits);
  rnum("stream_waits", p.stream_waits);
  rnum("completion_calls", p.completion_calls);
  absl::StrAppend(&rep, ",\"stream_waits_per_100_frees\":",
                  JsonDouble(Per100Frees(p.stream_waits, p.frees)),
                  ",\"completion_calls_per_100_frees\":",
                  JsonDouble(Per100Frees(p.completion_calls, p.frees)));
  rnum("hazards", p.hazards);
  rep.push_back('}');
  return rep;
}

// One way of serving the host rows (HostFigures) as a JSON object.
std::string HostFiguresJson(const HostFigures& h) {
  std::string o = "{";
  AppendNumberField(&o, "ops", h.ops);
  AppendNumberField(&o, "peak_bytes_reserved", h.peak_bytes_reserved);
  AppendNumberField(&o, "peak_bytes_in_use", h.peak_bytes_in_use);
  AppendNumberField(&o, "host_allocs", h.host_allocs);
  AppendNumberField(&o, "host_frees", h.host_frees);
  AppendNumberField(&o, "host_waits", h.host_waits);
  AppendNumberField(&o, "modeled_ns", h.modeled_ns);
  AppendNumberField(&o, "hazards", h.hazards);
  AppendNumberField(&o, "access_violations", h.access_violations);
  absl::StrAppend(&o, ",\"ns_per_op\":", JsonDouble(h.ns_per_op),
                  ",\"repetitions\":[");
  for (std::size_t i = 0; i < h.repetitions.size(); ++i) {
    const HostPassFigures& p = h.repetitions[i];
    std::string rep = "{";
    AppendNumberField(&rep, "host_allocs", p.host_allocs);
    AppendNumberField(&rep, "host_frees", p.host_frees);
    AppendNumberField(&rep, "host_waits", p.host_waits);
    AppendNumberField(&rep, "modeled_ns", p.modeled_ns);
    AppendNumberField(&rep, "peak_bytes_reserved", p.peak_bytes_reserved);
    absl::StrAppend(&o, i > 0 ? "," : "", rep, "}");
  }
  o += "]}";
  return o;
}

// The statistics at the end of the trace: every Stats field (the rows of
// gpualloc/core/stats_fields.h) under its own name.
std::string StatsJson(const Stats& s) {
  std::string inner = "{";
  ForEachStatsField([&](absl::string_view name, auto member, StatsFieldAge) {
    const auto v = s.*member;
    if constexpr (std::is_same_v<decltype(v), const double>) {
      absl::StrAppend(&inner, ",\"", name, "\":", JsonDouble(v));
    } else {
      AppendNumberField(&inner, name, v);
    }
  });
  inner.push_back('}');
  return inner;
}

}  // namespace

std::string ToJson(const ReplayResult& r) {
  std::string out = "{";
  auto key = [&out](absl::string_view k) {
    if (out.size() > 1) out.push_back(',');
    AppendJsonString(&out, k);
    out.push_back(':');
  };
  auto str = [&](absl::string_view k, absl::string_view v) {
    key(k);
    AppendJsonString(&out, v);
  };
  auto num = [&](absl::string_view k, std::uint64_t v) {
    key(k);
    absl::StrAppend(&out, v);
  };
  auto dbl = [&](absl::string_view k, double v) {
    key(k);
    out += JsonDouble(v);
  };
  str("trace", r.trace);
  str("config", r.config);
  str("label", r.label);
  if (!r.reference.empty()) str("reference", r.reference);
  str("device", r.device);
  num("ops", r.ops);
  num("frees", r.frees);
  num("ooms", r.ooms);
  key("failed_ids");
  out.push_back('[');
  for (std::size_t i = 0; i < r.failed_ids.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, r.failed_ids[i]);
  }
  out.push_back(']');
  num("peak_bytes_in_use", r.peak_bytes_in_use);
  num("peak_bytes_requested", r.peak_bytes_requested);
  num("peak_bytes_reserved", r.peak_bytes_reserved);
  num("final_bytes_reserved", r.final_bytes_reserved);
  dbl("utilization", r.utilization);
  dbl("fragmentation_at_peak", r.fragmentation_at_peak);
  num("largest_free_block_bytes", r.largest_free_block_bytes);
  num("backend_allocs", r.backend_allocs);
  num("backend_frees", r.backend_frees);
  num("backend_calls", r.backend_calls);
  num("modeled_backend_ns", r.modeled_backend_ns);
  num("events_recorded", r.events_recorded);
  num("host_waits", r.host_waits);
  num("stream_waits", r.stream_waits);
  num("completion_calls", r.completion_calls);
  dbl("stream_waits_per_100_frees", Per100Frees(r.stream_waits, r.frees));
  dbl("completion_calls_per_100_frees",
      Per100Frees(r.completion_calls, r.frees));
  num("hazards", r.hazards);
  dbl("ns_per_op", r.ns_per_op);
  num("timed_page_faults", r.timed_page_faults);
  num("repeat", r.repeat);
  num("complete_every", r.complete_every);
  str("progress_model", r.progress_model);
  num("work_us", r.work_us);
  auto optional_num = [&](absl::string_view k,
                          const std::optional<std::uint64_t>& v) {
    key(k);
    if (v.has_value()) {
      absl::StrAppend(&out, *v);
    } else {
      out += "null";
    }
  };
  optional_num("nowait_bound_bytes", r.nowait_bound_bytes);
  key("one_stream");
  out += r.one_stream ? "true" : "false";
  optional_num("one_stream_peak_bytes_reserved",
               r.one_stream_peak_bytes_reserved);
  key("repetitions");
  out.push_back('[');
  for (std::size_t i = 0; i < r.repetitions.size(); ++i) {
    const ReplayRepetition& p = r.repetitions[i];
    if (i > 0) out.push_back(',');
    out += RepetitionJson(p);
  }
  out.push_back(']');
  key("stats");
  out += StatsJson(r.stats);
  // Only for traces with host rows: the others' lines stay as they were.
  if (r.host.has_value()) {
    key("host");
    std::string host = "{";
    AppendNumberField(&host, "peak_bytes_requested",
                      r.host->peak_bytes_requested);
    absl::StrAppend(&host, ",\"pool\":", HostFiguresJson(r.host->pool),
                    ",\"no_host_cache\":", HostFiguresJson(r.host->no_cache),
                    "}");
    out += host;
  }
  out.push_back('}');
  return out;
}

}  // namespace gpualloc::replay
