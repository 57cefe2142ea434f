// SPDX-License-Identifier: Apache-2.0
// core/report/snapshot_json.cc: SnapshotToJson (see
// gpualloc/core/snapshot_json.h), and the names it writes that the reader
// shares (RegionKindName, AppendJsonString); the reader is
// core/report/snapshot_json_reader.cc.
#include "gpualloc/core/snapshot_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/report/snapshot_json_format.h"
#include "gpualloc/core/stats_fields.h"

namespace gpualloc {
namespace {

using snapshot_json_internal::kFormat;
using snapshot_json_internal::kVersion;

}  // namespace

absl::string_view RegionKindName(RegionKind kind) {
  switch (kind) {
    case RegionKind::kSeparate:
      return "separate";
    case RegionKind::kExpandable:
      return "expandable";
  }
  return "invalid";
}

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

namespace {

void AppendRegions(std::string* out,
                   const std::vector<RegionSnapshot>& regions) {
  *out += "[";
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const RegionSnapshot& r = regions[i];
    absl::StrAppend(out, i == 0 ? "" : ",", "{\"base\":", r.base,
                    ",\"size\":", r.size, ",\"chunks\":[");
    for (std::size_t j = 0; j < r.chunks.size(); ++j) {
      const ChunkSnapshot& c = r.chunks[j];
      absl::StrAppend(out, j == 0 ? "" : ",", "{\"address\":", c.address,
                      ",\"size\":", c.size, ",\"requested\":", c.requested,
                      ",\"state\":\"", c.in_use ? "in_use" : "free",
                      "\",\"stream\":", c.stream);
      if (c.pool != 0) absl::StrAppend(out, ",\"pool\":", c.pool);
      if (c.tag != 0) absl::StrAppend(out, ",\"tag\":", c.tag);
      if (c.asleep) *out += ",\"asleep\":true";
      *out += "}";
    }
    *out += "]}";
  }
  *out += "]";
}

// ,"history":{"recorded":N,"dropped":N,"events":[{"action":"alloc",
// "address":N,"size":N,"stream":N,"time_ns":N,"context":"..."},...]}
void AppendHistory(std::string* out, const Snapshot& snapshot) {
  out->reserve(out->size() + 120 * snapshot.history.size());
  absl::StrAppend(out, ",\"history\":{\"recorded\":", snapshot.history_recorded,
                  ",\"dropped\":", snapshot.history_dropped, ",\"events\":[");
  for (std::size_t i = 0; i < snapshot.history.size(); ++i) {
    const HistoryEvent& e = snapshot.history[i];
    absl::StrAppend(out, i == 0 ? "" : ",", "{\"action\":\"",
                    HistoryActionName(e.action), "\",\"address\":", e.address,
                    ",\"size\":", e.size, ",\"stream\":", e.stream,
                    ",\"time_ns\":", e.time_ns, ",\"context\":");
    AppendJsonString(out, e.context);
    *out += "}";
  }
  *out += "]}";
}

}  // namespace

std::string SnapshotToJson(const Snapshot& snapshot, const DeviceInfo* device) {
  std::string out;
  // About 100 bytes per chunk.
  std::size_t chunks = 0;
  for (const RegionSnapshot& r : snapshot.regions) chunks += r.chunks.size();
  out.reserve(512 + 48 * snapshot.regions.size() + 100 * chunks);
  absl::StrAppend(&out, "{\"format\":\"", kFormat, "\",\"version\":", kVersion);
  if (device != nullptr) {
    absl::StrAppend(&out, ",\"device\":{\"ordinal\":", device->ordinal,
                    ",\"backend\":");
    AppendJsonString(&out, device->backend);
    out += ",\"name\":";
    AppendJsonString(&out, device->name);
    absl::StrAppend(&out, ",\"total_bytes\":", device->total_bytes, "}");
  }
  out += ",\"stats\":{";
  // Every row of GPUALLOC_STATS_FIELDS: the counts, then the fractions.
  for (const bool fractions : {false, true}) {
    ForEachStatsField([&](absl::string_view name, auto member, StatsFieldAge) {
      const auto value = snapshot.stats.*member;
      if (std::is_same_v<decltype(value), const double> != fractions) return;
      if (out.back() != '{') out += ",";
      if constexpr (std::is_same_v<decltype(value), const double>) {
        absl::StrAppendFormat(&out, "\"%s\":%.9g", name,
                              std::isfinite(value) ? value : 0.0);
      } else {
        absl::StrAppend(&out, "\"", name, "\":", value);
      }
    });
  }
  out += "}";
  absl::StrAppend(&out, ",\"region_kind\":\"",
                  RegionKindName(snapshot.region_kind), "\",\"regions\":");
  AppendRegions(&out, snapshot.regions);
  if (!snapshot.pools.empty()) {
    out += ",\"pools\":[";
    for (std::size_t i = 0; i < snapshot.pools.size(); ++i) {
      const PoolSnapshot& p = snapshot.pools[i];
      absl::StrAppend(&out, i == 0 ? "" : ",", "{\"id\":", p.id,
                      ",\"references\":", p.references, ",\"streams\":[",
                      absl::StrJoin(p.streams, ","),
                      "],\"bytes_reserved\":", p.bytes_reserved,
                      ",\"bytes_in_use\":", p.bytes_in_use);
      if (p.tag != 0) {
        absl::StrAppend(&out, ",\"tag\":", p.tag,
                        ",\"asleep\":", p.asleep ? "true" : "false",
                        ",\"bytes_sleeping\":", p.bytes_sleeping);
      }
      out += ",\"regions\":";
      AppendRegions(&out, p.regions);
      out += "}";
    }
    out += "]";
  }
  if (snapshot.history_recorded != 0 || !snapshot.history.empty()) {
    AppendHistory(&out, snapshot);
  }
  out += "}";
  return out;
}

}  // namespace gpualloc
