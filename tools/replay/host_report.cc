// SPDX-License-Identifier: Apache-2.0
// tools/replay/host_report.cc: gpualloc-replay's host section
// (FormatHostReport, report.h): the host rows' figures per configuration,
// and per trace what serving them with no host cache costs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "tools/replay/report.h"

namespace gpualloc::replay {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Gib(std::uint64_t bytes) {
  return absl::StrFormat("%.3f GiB", static_cast<double>(bytes) / kGiB);
}

// The cost figures a row shows: the last pass's when repeating.
HostPassFigures CostOf(const HostFigures& h, std::uint64_t repeat) {
  if (repeat > 1 && !h.repetitions.empty()) return h.repetitions.back();
  HostPassFigures cost;
  cost.host_allocs = h.host_allocs;
  cost.host_frees = h.host_frees;
  cost.host_waits = h.host_waits;
  cost.modeled_ns = h.modeled_ns;
  return cost;
}

std::vector<std::string> HostRow(const std::string& label, const HostFigures& h,
                                 const ReportOptions& options) {
  const HostPassFigures cost = CostOf(h, options.repeat);
  return {label,
          absl::StrCat(h.ops),
          Gib(h.peak_bytes_reserved),
          Gib(h.peak_bytes_in_use),
          absl::StrCat(cost.host_allocs, "/", cost.host_frees),
          absl::StrCat(cost.host_waits),
          absl::StrFormat("%.2f", static_cast<double>(cost.modeled_ns) / 1e6),
          absl::StrFormat("%.0f", h.ns_per_op)};
}

bool SameCosts(const HostFigures& a, const HostFigures& b) {
  return a.ops == b.ops && a.peak_bytes_reserved == b.peak_bytes_reserved &&
         a.host_allocs == b.host_allocs && a.host_frees == b.host_frees &&
         a.host_waits == b.host_waits && a.modeled_ns == b.modeled_ns;
}

constexpr absl::string_view kNoCache = "no host cache";

}  // namespace

std::string FormatHostReport(const std::vector<ReplayResult>& results,
                             const ReportOptions& options) {
  bool any = false;
  for (const ReplayResult& r : results) any |= r.host.has_value();
  if (!any) return "";
  const std::string last = options.repeat > 1 ? "*" : "";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"config", "host ops", "host peak reserved",
                  "host peak in use", absl::StrCat("host a/f", last),
                  absl::StrCat("host waits", last),
                  absl::StrCat("host modeled ms", last), "host ns/op"});
  // Per trace: a heading, the configurations' rows, then the no-cache row
  // (one per distinct figure: it depends on the device, not the allocator).
  for (std::size_t i = 0; i < results.size();) {
    std::size_t end = i;
    while (end < results.size() && results[end].trace == results[i].trace &&
           results[end].one_stream == results[i].one_stream) {
      ++end;
    }
    std::vector<const ReplayResult*> hosted;
    for (std::size_t j = i; j < end; ++j) {
      if (results[j].host.has_value()) hosted.push_back(&results[j]);
    }
    if (!hosted.empty()) {
      rows.push_back(
          {absl::StrCat(results[i].trace, " (host rows: peak requested ",
                        Gib(hosted.front()->host->peak_bytes_requested), ")")});
      for (const ReplayResult* r : hosted) {
        rows.push_back(HostRow(r->label, r->host->pool, options));
      }
      std::vector<const ReplayResult*> distinct;
      for (const ReplayResult* r : hosted) {
        bool seen = false;
        for (const ReplayResult* d : distinct) {
          seen |= SameCosts(d->host->no_cache, r->host->no_cache);
        }
        if (!seen) distinct.push_back(r);
      }
      for (const ReplayResult* d : distinct) {
        rows.push_back(HostRow(
            distinct.size() == 1 ? std::string(kNoCache)
                                 : absl::StrCat(kNoCache, " (", d->label, ")"),
            d->host->no_cache, options));
      }
    }
    i = end;
  }
  std::string out =
      "Host (page-locked) memory: the host rows, replayed beside the device "
      "rows on the same simulated device:\n";
  AppendTable(rows, out);
  if (options.repeat > 1) {
    absl::StrAppendFormat(&out, "* the last of %d passes\n", options.repeat);
  }
  const std::vector<std::pair<std::string, std::string>> definitions = {
      {"host ops", "host allocate and free calls replayed"},
      {"host peak reserved",
       "the most page-locked memory held at once (the pool's blocks, cached "
       "ones included)"},
      {"host peak in use",
       "the most of it handed out at once (a freed block still waiting for "
       "its streams' work counts)"},
      {"host a/f",
       "HostAllocate / HostFree calls made (cudaHostAlloc / cudaFreeHost: "
       "slow, and on CUDA\nsynchronizing)"},
      {"host waits",
       "times the host blocked until a stream's work on a freed host buffer "
       "was done"},
      {"host modeled ms",
       "the simulated device's time for the host side's calls by its "
       "profile's cost model, in ms"},
      {"host ns/op",
       "the host side's own wall time per allocate/free on this machine"},
      {std::string(kNoCache),
       "every host_alloc a HostAllocate and every host_free a HostFree: what "
       "an allocator without\na host cache pays"},
  };
  absl::StrAppend(&out, "\n", FormatDefinitions(definitions));
  return out;
}

}  // namespace gpualloc::replay
