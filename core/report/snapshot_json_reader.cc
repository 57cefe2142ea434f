// SPDX-License-Identifier: Apache-2.0
// core/report/snapshot_json_reader.cc: SnapshotFromJson (see
// gpualloc/core/snapshot_json.h).
//
// The reader is a small recursive-descent JSON parser into a value tree
// (snapshots are read by tools, not on a hot path), then a typed walk that
// names the field path in every error.
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
#include "core/report/quote.h"
#include "core/report/snapshot_json_format.h"
#include "gpualloc/core/snapshot_json.h"
#include "gpualloc/core/stats_fields.h"

namespace gpualloc {
namespace {

using core::ClipInput;
using core::QuoteInput;
using snapshot_json_internal::kFormat;
using snapshot_json_internal::kVersion;

// ---- Reading -------------------------------------------------------------

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // a number's literal, or a string's decoded bytes
  std::vector<JsonValue> items;  // an array's elements
  // An object's members, in order: keys[i] names values[i]. (Two vectors, not
  // pairs: std::pair of a type still being defined does not compile with
  // clang and libstdc++ 12.)
  std::vector<std::string> keys;
  std::vector<JsonValue> values;

  const JsonValue* Find(absl::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &values[i];
    }
    return nullptr;
  }
};

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue v;
    if (absl::Status s = ParseValue(&v, 0); !s.ok()) return s;
    SkipSpace();
    if (pos_ != text_.size()) return Error("end of the document");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::Status Error(absl::string_view expected) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot JSON: expected ", expected, " at byte ", pos_,
        pos_ < text_.size() ? absl::StrCat(" ('", text_.substr(pos_, 1), "')")
                            : std::string(" (end of text)")));
  }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::Status ParseValue(JsonValue* v, int depth) {
    if (depth > kMaxDepth) return Error("less nesting");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("a value");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(v, depth);
    if (c == '[') return ParseArray(v, depth);
    if (c == '"') {
      v->kind = JsonValue::Kind::kString;
      return ParseString(&v->text);
    }
    if (Consume("true")) {
      v->kind = JsonValue::Kind::kBool;
      v->boolean = true;
      return absl::OkStatus();
    }
    if (Consume("false")) {
      v->kind = JsonValue::Kind::kBool;
      return absl::OkStatus();
    }
    if (Consume("null")) return absl::OkStatus();
    return ParseNumber(v);
  }

  absl::Status ParseNumber(JsonValue* v) {
    const std::size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    const std::size_t digits = pos_;
    while (pos_ < text_.size() &&
           ((text_[pos_] >= '0' && text_[pos_] <= '9') || text_[pos_] == '.' ||
            text_[pos_] == 'e' || text_[pos_] == 'E' || text_[pos_] == '+' ||
            text_[pos_] == '-')) {
      ++pos_;
    }
    if (pos_ == digits) {
      pos_ = start;
      return Error("a value");
    }
    v->kind = JsonValue::Kind::kNumber;
    v->text = std::string(text_.substr(start, pos_ - start));
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // the opening quote
    while (true) {
      if (pos_ >= text_.size()) return Error("the end of a string");
      const char c = text_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        return Error("no control character inside a string");
      }
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return Error("an escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return Error("four hex digits");
          unsigned code = 0;
          const char* first = text_.data() + pos_;
          auto [ptr, ec] = std::from_chars(first, first + 4, code, 16);
          if (ec != std::errc() || ptr != first + 4) {
            return Error("four hex digits");
          }
          pos_ += 4;
          // UTF-8; a lone surrogate half is kept as its own code (names in a
          // snapshot are ASCII in practice).
          if (code < 0x80) {
            out->push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (code >> 6)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
          } else {
            out->push_back(static_cast<char>(0xE0 | (code >> 12)));
            out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
          }
          break;
        }
        default:
          --pos_;
          return Error("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
      }
    }
  }

  absl::Status ParseArray(JsonValue* v, int depth) {
    v->kind = JsonValue::Kind::kArray;
    ++pos_;
    SkipSpace();
    if (Consume("]")) return absl::OkStatus();
    while (true) {
      v->items.emplace_back();
      if (absl::Status s = ParseValue(&v->items.back(), depth + 1); !s.ok()) {
        return s;
      }
      SkipSpace();
      if (Consume("]")) return absl::OkStatus();
      if (!Consume(",")) return Error("',' or ']'");
    }
  }

  absl::Status ParseObject(JsonValue* v, int depth) {
    v->kind = JsonValue::Kind::kObject;
    ++pos_;
    SkipSpace();
    if (Consume("}")) return absl::OkStatus();
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("a key");
      std::string key;
      if (absl::Status s = ParseString(&key); !s.ok()) return s;
      SkipSpace();
      if (!Consume(":")) return Error("':'");
      JsonValue value;
      if (absl::Status s = ParseValue(&value, depth + 1); !s.ok()) return s;
      v->keys.push_back(std::move(key));
      v->values.push_back(std::move(value));
      SkipSpace();
      if (Consume("}")) return absl::OkStatus();
      if (!Consume(",")) return Error("',' or '}'");
    }
  }

  absl::string_view text_;
  std::size_t pos_ = 0;
};

absl::Status FieldError(absl::string_view path, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("snapshot JSON: ", path, ": expected ", expected));
}

// The member `key` of object `v`, of kind `kind`; `path` names `v`.
absl::StatusOr<const JsonValue*> Member(const JsonValue& v,
                                        absl::string_view path,
                                        absl::string_view key,
                                        JsonValue::Kind kind,
                                        absl::string_view kind_name) {
  const std::string where =
      path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  const JsonValue* m = v.Find(key);
  if (m == nullptr) return FieldError(where, "a field (missing)");
  if (m->kind != kind) return FieldError(where, kind_name);
  return m;
}

absl::StatusOr<std::uint64_t> Unsigned(const JsonValue& v,
                                       absl::string_view path,
                                       absl::string_view key) {
  absl::StatusOr<const JsonValue*> m =
      Member(v, path, key, JsonValue::Kind::kNumber, "a number");
  if (!m.ok()) return m.status();
  const std::string& t = (*m)->text;
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), value, 10);
  if (ec != std::errc() || ptr != t.data() + t.size()) {
    return FieldError(
        path.empty() ? std::string(key) : absl::StrCat(path, ".", key),
        absl::StrCat("an unsigned 64-bit integer, got ", ClipInput(t)));
  }
  return value;
}

absl::StatusOr<double> Fraction(const JsonValue& v, absl::string_view path,
                                absl::string_view key) {
  absl::StatusOr<const JsonValue*> m =
      Member(v, path, key, JsonValue::Kind::kNumber, "a number");
  if (!m.ok()) return m.status();
  const std::string& t = (*m)->text;
  double value = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc() || ptr != t.data() + t.size() ||
      !std::isfinite(value)) {
    return FieldError(absl::StrCat(path, ".", key),
                      absl::StrCat("a finite number, got ", ClipInput(t)));
  }
  return value;
}

#define GPUALLOC_JSON_ASSIGN(lhs, expr)                 \
  do {                                                  \
    auto json_value_ = (expr);                          \
    if (!json_value_.ok()) return json_value_.status(); \
    lhs = *json_value_;                                 \
  } while (false)

// The "stats" object into *out: every row of GPUALLOC_STATS_FIELDS, those of
// the first format required, later ones when present; the counts first, then
// the fractions (the writer's order, so the first missing field is named).
absl::Status ParseStats(const JsonValue& stats, Stats* out) {
  absl::Status status;
  for (const bool fractions : {false, true}) {
    ForEachStatsField(
        [&](absl::string_view name, auto member, StatsFieldAge age) {
          using T = std::remove_reference_t<decltype(out->*member)>;
          if (!status.ok() || std::is_same_v<T, double> != fractions) return;
          if (age == StatsFieldAge::kAdded && stats.Find(name) == nullptr)
            return;
          absl::StatusOr<T> value;
          if constexpr (std::is_same_v<T, double>) {
            value = Fraction(stats, "stats", name);
          } else {
            value = Unsigned(stats, "stats", name);
          }
          if (value.ok()) {
            out->*member = *value;
          } else {
            status = value.status();
          }
        });
  }
  return status;
}

}  // namespace

namespace {

absl::StatusOr<std::vector<RegionSnapshot>> ParseRegions(
    const JsonValue& regions, absl::string_view where) {
  std::vector<RegionSnapshot> out;
  for (std::size_t i = 0; i < regions.items.size(); ++i) {
    const JsonValue& r = regions.items[i];
    const std::string path = absl::StrCat(where, "[", i, "]");
    if (r.kind != JsonValue::Kind::kObject) {
      return FieldError(path, "an object");
    }
    RegionSnapshot region;
    GPUALLOC_JSON_ASSIGN(region.base, Unsigned(r, path, "base"));
    GPUALLOC_JSON_ASSIGN(region.size, Unsigned(r, path, "size"));
    const JsonValue* chunks = nullptr;
    GPUALLOC_JSON_ASSIGN(
        chunks, Member(r, path, "chunks", JsonValue::Kind::kArray, "an array"));
    for (std::size_t j = 0; j < chunks->items.size(); ++j) {
      const JsonValue& c = chunks->items[j];
      const std::string cpath = absl::StrCat(path, ".chunks[", j, "]");
      if (c.kind != JsonValue::Kind::kObject) {
        return FieldError(cpath, "an object");
      }
      ChunkSnapshot chunk;
      GPUALLOC_JSON_ASSIGN(chunk.address, Unsigned(c, cpath, "address"));
      GPUALLOC_JSON_ASSIGN(chunk.size, Unsigned(c, cpath, "size"));
      GPUALLOC_JSON_ASSIGN(chunk.requested, Unsigned(c, cpath, "requested"));
      std::uint64_t stream = 0;
      GPUALLOC_JSON_ASSIGN(stream, Unsigned(c, cpath, "stream"));
      chunk.stream = static_cast<std::uintptr_t>(stream);
      if (c.Find("pool") != nullptr) {
        GPUALLOC_JSON_ASSIGN(chunk.pool, Unsigned(c, cpath, "pool"));
      }
      if (c.Find("tag") != nullptr) {
        std::uint64_t tag = 0;
        GPUALLOC_JSON_ASSIGN(tag, Unsigned(c, cpath, "tag"));
        chunk.tag = static_cast<std::uint32_t>(tag);
      }
      if (c.Find("asleep") != nullptr) {
        const JsonValue* asleep = nullptr;
        GPUALLOC_JSON_ASSIGN(
            asleep,
            Member(c, cpath, "asleep", JsonValue::Kind::kBool, "a boolean"));
        chunk.asleep = asleep->boolean;
      }
      const JsonValue* state = nullptr;
      GPUALLOC_JSON_ASSIGN(state, Member(c, cpath, "state",
                                         JsonValue::Kind::kString, "a string"));
      if (state->text == "in_use") {
        chunk.in_use = true;
      } else if (state->text != "free") {
        return FieldError(absl::StrCat(cpath, ".state"),
                          absl::StrCat("\"in_use\" or \"free\", got ",
                                       QuoteInput(state->text)));
      }
      region.chunks.push_back(chunk);
    }
    out.push_back(std::move(region));
  }
  return out;
}

absl::StatusOr<PoolSnapshot> ParsePool(const JsonValue& p,
                                       const std::string& path) {
  if (p.kind != JsonValue::Kind::kObject) return FieldError(path, "an object");
  PoolSnapshot pool;
  GPUALLOC_JSON_ASSIGN(pool.id, Unsigned(p, path, "id"));
  std::uint64_t references = 0;
  GPUALLOC_JSON_ASSIGN(references, Unsigned(p, path, "references"));
  pool.references = static_cast<std::uint32_t>(references);
  GPUALLOC_JSON_ASSIGN(pool.bytes_reserved,
                       Unsigned(p, path, "bytes_reserved"));
  GPUALLOC_JSON_ASSIGN(pool.bytes_in_use, Unsigned(p, path, "bytes_in_use"));
  if (p.Find("tag") != nullptr) {  // a tag's memory (Allocator::Sleep)
    std::uint64_t tag = 0;
    GPUALLOC_JSON_ASSIGN(tag, Unsigned(p, path, "tag"));
    pool.tag = static_cast<std::uint32_t>(tag);
    const JsonValue* asleep = nullptr;
    GPUALLOC_JSON_ASSIGN(
        asleep, Member(p, path, "asleep", JsonValue::Kind::kBool, "a boolean"));
    pool.asleep = asleep->boolean;
    if (p.Find("bytes_sleeping") != nullptr) {
      GPUALLOC_JSON_ASSIGN(pool.bytes_sleeping,
                           Unsigned(p, path, "bytes_sleeping"));
    }
  }
  const JsonValue* streams = nullptr;
  GPUALLOC_JSON_ASSIGN(
      streams, Member(p, path, "streams", JsonValue::Kind::kArray, "an array"));
  for (std::size_t k = 0; k < streams->items.size(); ++k) {
    JsonValue holder;
    holder.kind = JsonValue::Kind::kObject;
    holder.keys.push_back("stream");
    holder.values.push_back(streams->items[k]);
    std::uint64_t stream = 0;
    GPUALLOC_JSON_ASSIGN(
        stream,
        Unsigned(holder, absl::StrCat(path, ".streams[", k, "]"), "stream"));
    pool.streams.push_back(static_cast<std::uintptr_t>(stream));
  }
  const JsonValue* regions = nullptr;
  GPUALLOC_JSON_ASSIGN(
      regions, Member(p, path, "regions", JsonValue::Kind::kArray, "an array"));
  GPUALLOC_JSON_ASSIGN(pool.regions,
                       ParseRegions(*regions, absl::StrCat(path, ".regions")));
  return pool;
}

// The "history" object AppendHistory wrote, into `snapshot`.
absl::Status ParseHistory(const JsonValue& doc, Snapshot& snapshot) {
  const JsonValue* h = nullptr;
  GPUALLOC_JSON_ASSIGN(
      h, Member(doc, "", "history", JsonValue::Kind::kObject, "an object"));
  GPUALLOC_JSON_ASSIGN(snapshot.history_recorded,
                       Unsigned(*h, "history", "recorded"));
  GPUALLOC_JSON_ASSIGN(snapshot.history_dropped,
                       Unsigned(*h, "history", "dropped"));
  const JsonValue* events = nullptr;
  GPUALLOC_JSON_ASSIGN(events, Member(*h, "history", "events",
                                      JsonValue::Kind::kArray, "an array"));
  for (std::size_t i = 0; i < events->items.size(); ++i) {
    const JsonValue& v = events->items[i];
    const std::string path = absl::StrCat("history.events[", i, "]");
    if (v.kind != JsonValue::Kind::kObject)
      return FieldError(path, "an object");
    HistoryEvent e;
    const JsonValue* action = nullptr;
    GPUALLOC_JSON_ASSIGN(action, Member(v, path, "action",
                                        JsonValue::Kind::kString, "a string"));
    int a = 0;
    while (a <= static_cast<int>(HistoryAction::kOom) &&
           HistoryActionName(static_cast<HistoryAction>(a)) != action->text) {
      ++a;
    }
    if (a > static_cast<int>(HistoryAction::kOom)) {
      return FieldError(absl::StrCat(path, ".action"),
                        absl::StrCat("an action such as \"alloc\", got ",
                                     QuoteInput(action->text)));
    }
    e.action = static_cast<HistoryAction>(a);
    GPUALLOC_JSON_ASSIGN(e.address, Unsigned(v, path, "address"));
    GPUALLOC_JSON_ASSIGN(e.size, Unsigned(v, path, "size"));
    std::uint64_t stream = 0;
    GPUALLOC_JSON_ASSIGN(stream, Unsigned(v, path, "stream"));
    e.stream = static_cast<std::uintptr_t>(stream);
    GPUALLOC_JSON_ASSIGN(e.time_ns, Unsigned(v, path, "time_ns"));
    const JsonValue* context = nullptr;
    GPUALLOC_JSON_ASSIGN(context, Member(v, path, "context",
                                         JsonValue::Kind::kString, "a string"));
    e.context = context->text;
    snapshot.history.push_back(std::move(e));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Snapshot> SnapshotFromJson(absl::string_view json) {
  absl::StatusOr<JsonValue> doc = Parser(json).ParseDocument();
  if (!doc.ok()) return doc.status();
  if (doc->kind != JsonValue::Kind::kObject) {
    return FieldError("the document", "an object");
  }
  const JsonValue* format = nullptr;
  GPUALLOC_JSON_ASSIGN(
      format, Member(*doc, "", "format", JsonValue::Kind::kString, "a string"));
  if (format->text != kFormat) {
    return FieldError("format", absl::StrCat("\"", kFormat, "\", got ",
                                             QuoteInput(format->text)));
  }
  std::uint64_t version = 0;
  GPUALLOC_JSON_ASSIGN(version, Unsigned(*doc, "", "version"));
  if (version != kVersion) {
    return FieldError(
        "version", absl::StrCat(kVersion, " (this reader's), got ", version));
  }

  Snapshot snapshot;
  const JsonValue* stats = nullptr;
  GPUALLOC_JSON_ASSIGN(
      stats, Member(*doc, "", "stats", JsonValue::Kind::kObject, "an object"));
  if (absl::Status s = ParseStats(*stats, &snapshot.stats); !s.ok()) return s;

  const JsonValue* regions = nullptr;
  GPUALLOC_JSON_ASSIGN(regions, Member(*doc, "", "regions",
                                       JsonValue::Kind::kArray, "an array"));
  GPUALLOC_JSON_ASSIGN(snapshot.regions, ParseRegions(*regions, "regions"));
  if (doc->Find("pools") != nullptr) {
    const JsonValue* pools = nullptr;
    GPUALLOC_JSON_ASSIGN(
        pools, Member(*doc, "", "pools", JsonValue::Kind::kArray, "an array"));
    for (std::size_t i = 0; i < pools->items.size(); ++i) {
      PoolSnapshot pool;
      GPUALLOC_JSON_ASSIGN(
          pool, ParsePool(pools->items[i], absl::StrCat("pools[", i, "]")));
      snapshot.pools.push_back(std::move(pool));
    }
  }
  if (doc->Find("history") != nullptr) {
    if (absl::Status s = ParseHistory(*doc, snapshot); !s.ok()) return s;
  }
  if (doc->Find("region_kind") != nullptr) {
    const JsonValue* kind = nullptr;
    GPUALLOC_JSON_ASSIGN(kind, Member(*doc, "", "region_kind",
                                      JsonValue::Kind::kString, "a string"));
    if (kind->text == RegionKindName(RegionKind::kExpandable)) {
      snapshot.region_kind = RegionKind::kExpandable;
    } else if (kind->text != RegionKindName(RegionKind::kSeparate)) {
      return FieldError("region_kind",
                        absl::StrCat("\"separate\" or \"expandable\", got ",
                                     QuoteInput(kind->text)));
    }
  } else {
    // An older document: only expandable regions map and unmap.
    for (const HistoryEvent& e : snapshot.history) {
      if (e.action == HistoryAction::kSegmentMap ||
          e.action == HistoryAction::kSegmentUnmap) {
        snapshot.region_kind = RegionKind::kExpandable;
      }
    }
  }
  return snapshot;
}

}  // namespace gpualloc
