// SPDX-License-Identifier: Apache-2.0
// tools/replay/trace.cc: the trace formats (docs/REFERENCE.md,
// "Trace formats").
//
// Both parsers are strict: a trace that does not say exactly what happened
// would make every number the replay reports meaningless, so any malformed
// line is an InvalidArgument "NAME:LINE: expected <what>, got <text>".
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tools/replay/replay.h"

namespace gpualloc::replay {
namespace {

constexpr absl::string_view kProjectHeader =
    "seq,action,addr_or_id,size,stream";
constexpr absl::string_view kProjectTimedHeader =
    "seq,action,addr_or_id,size,stream,time_us";
constexpr absl::string_view kRmmHeader =
    "Thread,Time,Action,Pointer,Size,Stream";

// Long lines are cut in messages so one bad line cannot flood a terminal;
// control characters (a NUL in a binary file), quotes, backslashes and bytes
// above 0x7f are escaped (\x00) so that the message is one line of plain text.
std::string Quote(absl::string_view text) {
  constexpr size_t kMax = 80;
  if (text.size() > kMax)
    return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMax)), "...\"");
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

absl::Status Malformed(absl::string_view name, size_t line,
                       absl::string_view expected, absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, ":", line, ": expected ", expected, ", got ", got));
}

enum class Parsed { kOk, kMalformed, kOutOfRange };

// Plain decimal, no sign, no spaces inside (fields are trimmed first).
// kOutOfRange: digits only, but more than 64 bits hold.
Parsed ParseDecimal(absl::string_view text, std::uint64_t* value) {
  if (text.empty()) return Parsed::kMalformed;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value, 10);
  if (ptr != end) return Parsed::kMalformed;
  if (ec == std::errc::result_out_of_range) return Parsed::kOutOfRange;
  return ec == std::errc() ? Parsed::kOk : Parsed::kMalformed;
}

// "0x7f12..." (RMM writes pointers and streams this way) or plain decimal.
Parsed ParseHexOrDecimal(absl::string_view text, std::uint64_t* value) {
  if (absl::StartsWithIgnoreCase(text, "0x")) {
    text.remove_prefix(2);
    if (text.empty()) return Parsed::kMalformed;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, *value, 16);
    if (ptr != end) return Parsed::kMalformed;
    if (ec == std::errc::result_out_of_range) return Parsed::kOutOfRange;
    return ec == std::errc() ? Parsed::kOk : Parsed::kMalformed;
  }
  return ParseDecimal(text, value);
}

// A numeric field (decimal, or also 0x... hex when `hex` is set) of at most
// `max`. Not a number: Malformed naming `expected`; a number above `max` (or
// above 64 bits): a range error naming `what` and `max` (in hex when the field
// was written in hex).
absl::Status ReadNumber(absl::string_view name, size_t line,
                        absl::string_view text, bool hex,
                        absl::string_view expected, absl::string_view what,
                        std::uint64_t max, std::uint64_t* value) {
  const Parsed parsed =
      hex ? ParseHexOrDecimal(text, value) : ParseDecimal(text, value);
  if (parsed == Parsed::kMalformed) {
    return Malformed(name, line, expected, Quote(text));
  }
  if (parsed == Parsed::kOutOfRange || *value > max) {
    const bool in_hex = hex && absl::StartsWithIgnoreCase(text, "0x");
    return absl::InvalidArgumentError(absl::StrCat(
        name, ":", line, ": ", what, " ", Quote(text),
        " out of range: at most ",
        in_hex ? absl::StrCat("0x", absl::Hex(max)) : absl::StrCat(max)));
  }
  return absl::OkStatus();
}

// RMM's Time column: digit groups separated by ':' or '.' ("10:00:00.001",
// or seconds "12.5").
bool IsLogTime(absl::string_view text) {
  if (text.empty()) return false;
  bool digit_before = false;
  for (char c : text) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      digit_before = true;
    } else if ((c == ':' || c == '.') && digit_before) {
      digit_before = false;
    } else {
      return false;
    }
  }
  return digit_before;
}

// RMM's Time column in ns: the last group after a '.' is a fraction of a
// second; the groups before it are seconds, minutes:seconds or
// hours:minutes:seconds. Call only on text IsLogTime accepted.
std::uint64_t LogTimeNs(absl::string_view text) {
  std::uint64_t fraction_ns = 0;
  if (size_t dot = text.rfind('.'); dot != absl::string_view::npos) {
    absl::string_view digits = text.substr(dot + 1);
    std::uint64_t scale = 1'000'000'000;
    for (char c : digits) {
      scale /= 10;
      fraction_ns += static_cast<std::uint64_t>(c - '0') * scale;
    }
    text = text.substr(0, dot);
  }
  std::uint64_t seconds = 0;
  for (absl::string_view group : absl::StrSplit(text, absl::ByAnyChar(":."))) {
    std::uint64_t g = 0;
    (void)ParseDecimal(group, &g);
    seconds = seconds * 60 + g;
  }
  return seconds * 1'000'000'000 + fraction_ns;
}

// The largest RMM time LogTimeNs takes, in whole seconds: 2^64 ns.
constexpr std::uint64_t kMaxLogSeconds = UINT64_MAX / 1'000'000'000 - 1;

// Whether LogTimeNs(text) fits in 64 bits: its whole seconds (the groups
// before a last '.', as hours:minutes:seconds) are at most kMaxLogSeconds.
bool LogTimeFits(absl::string_view text) {
  if (size_t dot = text.rfind('.'); dot != absl::string_view::npos) {
    text = text.substr(0, dot);
  }
  std::uint64_t seconds = 0;
  for (absl::string_view group : absl::StrSplit(text, absl::ByAnyChar(":."))) {
    std::uint64_t g = 0;
    if (ParseDecimal(group, &g) != Parsed::kOk || g > kMaxLogSeconds ||
        seconds > (kMaxLogSeconds - g) / 60) {
      return false;
    }
    seconds = seconds * 60 + g;
  }
  return true;
}

// Times in ns from the first row, never going back (rows a logger wrote from
// several threads may be slightly out of order).
class Clock {
 public:
  std::uint64_t Since(std::uint64_t raw_ns) {
    if (!started_) {
      started_ = true;
      first_ = raw_ns;
    }
    const std::uint64_t t = raw_ns > first_ ? raw_ns - first_ : 0;
    last_ = std::max(last_, t);
    return last_;
  }

 private:
  bool started_ = false;
  std::uint64_t first_ = 0, last_ = 0;
};

// Splits `text` into lines, dropping a trailing '\r' (files written on
// Windows) and reporting 1-based line numbers.
struct Line {
  size_t number;
  absl::string_view text;
};
std::vector<Line> SplitLines(absl::string_view text) {
  std::vector<Line> lines;
  size_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
    lines.push_back({number, line});
  }
  // A final newline leaves one empty piece that is not a line.
  while (!lines.empty() && lines.back().text.empty()) lines.pop_back();
  return lines;
}

// Raw stream values become 0 (the default stream) or 1, 2, ... in order of
// first use, as in the project CSV; Trace::num_streams counts the distinct
// values.
class StreamNumbers {
 public:
  std::uint64_t Map(std::uint64_t raw) {
    if (raw == 0) {
      seen_default_ = true;
      return 0;
    }
    auto [it, inserted] = numbers_.try_emplace(raw, numbers_.size() + 1);
    return it->second;
  }
  std::uint64_t count() const {
    return numbers_.size() + (seen_default_ ? 1 : 0);
  }

 private:
  bool seen_default_ = false;
  absl::flat_hash_map<std::uint64_t, std::uint64_t> numbers_;
};

// The project CSV's ids, one space for device and host rows: an alloc row
// (alloc, host_alloc) introduces an id never seen before, and a free row
// (free, host_free) names a live allocation of its own kind. Dense ids count
// device and host allocations apart (0, 1, ... each), in order of their
// alloc rows, so a hand-written trace with sparse ids replays too.
class ProjectIds {
 public:
  ProjectIds(absl::string_view name) : name_(name) {}

  // The new allocation's dense id.
  absl::StatusOr<std::uint64_t> Alloc(size_t line, std::uint64_t id,
                                      std::uint64_t size, bool host) {
    if (!ever_.try_emplace(id, host).second) {
      return Malformed(name_, line, "a new allocation id",
                       absl::StrCat("id ", id, ", allocated before"));
    }
    std::vector<std::uint64_t>& sizes = sizes_[host ? 1 : 0];
    const std::uint64_t dense = sizes.size();
    live_.emplace(id, dense);
    sizes.push_back(size);
    return dense;
  }

  // The freed allocation's dense id; *size becomes its alloc's size.
  absl::StatusOr<std::uint64_t> Free(size_t line, std::uint64_t id,
                                     std::uint64_t* size, bool host) {
    auto kind = ever_.find(id);
    auto it = live_.find(id);
    if (it == live_.end() || kind->second != host) {
      std::string got = absl::StrCat("id ", id);
      if (kind == ever_.end()) {
        absl::StrAppend(&got, ", unknown");
      } else if (kind->second != host) {
        absl::StrAppend(&got, kind->second
                                  ? ", a host allocation (host_free frees it)"
                                  : ", a device allocation (free frees it)");
      } else {
        absl::StrAppend(&got, ", already freed");
      }
      return Malformed(name_, line,
                       host ? "the id of a live host allocation"
                            : "the id of a live allocation",
                       got);
    }
    const std::uint64_t dense = it->second;
    const std::uint64_t allocated = sizes_[host ? 1 : 0][dense];
    // A free row carries its alloc's size, or 0; another size means the
    // trace does not say what happened.
    if (*size != 0 && *size != allocated) {
      return Malformed(name_, line,
                       absl::StrCat("size 0 or ", allocated, " (the size id ",
                                    id, " was allocated with)"),
                       absl::StrCat("size ", *size));
    }
    *size = allocated;
    live_.erase(it);
    return dense;
  }

 private:
  absl::string_view name_;
  absl::flat_hash_map<std::uint64_t, std::uint64_t> live_;  // csv id -> dense
  absl::flat_hash_map<std::uint64_t, bool> ever_;  // csv id -> is a host id
  std::vector<std::uint64_t> sizes_[2];            // device, host
};

// One row's numbers: addr_or_id, size, stream and (timed) time_us.
struct ProjectRow {
  std::uint64_t id = 0, size = 0, stream = 0, us = 0;
};

absl::Status ReadProjectRow(absl::string_view name, size_t line,
                            const std::vector<absl::string_view>& f, bool timed,
                            ProjectRow* row) {
  if (absl::Status s =
          ReadNumber(name, line, f[2], false, "a decimal id in addr_or_id",
                     "id", UINT64_MAX, &row->id);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadNumber(name, line, f[3], false, "a decimal size in bytes",
                     "size in bytes", UINT64_MAX, &row->size);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadNumber(name, line, f[4], false, "a decimal stream number",
                     "stream number", UINT64_MAX, &row->stream);
      !s.ok()) {
    return s;
  }
  if (!timed) return absl::OkStatus();
  // At most what 64 bits hold in nanoseconds.
  return ReadNumber(name, line, f[5], false, "a decimal time in microseconds",
                    "time in microseconds", UINT64_MAX / 1000, &row->us);
}

// A host_alloc or host_free row, appended to trace->host_ops.
absl::Status AddHostRow(size_t line, bool alloc, const ProjectRow& row,
                        std::uint64_t stream, std::uint64_t time_ns,
                        ProjectIds& ids, Trace* trace) {
  HostTraceOp op;
  op.stream = stream;
  op.time_ns = time_ns;
  op.before = trace->ops.size();
  op.size = row.size;
  absl::StatusOr<std::uint64_t> dense =
      alloc ? ids.Alloc(line, row.id, row.size, true)
            : ids.Free(line, row.id, &op.size, true);
  if (!dense.ok()) return dense.status();
  op.id = *dense;
  op.kind = alloc ? HostTraceOp::Kind::kAlloc : HostTraceOp::Kind::kFree;
  ++(alloc ? trace->num_host_allocs : trace->num_host_frees);
  trace->host_ops.push_back(op);
  return absl::OkStatus();
}

absl::StatusOr<Trace> ParseProject(const std::vector<Line>& lines,
                                   absl::string_view name, bool timed) {
  Trace trace;
  trace.timed = timed;
  Clock clock;
  const size_t fields = timed ? 6 : 5;
  ProjectIds ids(name);
  StreamNumbers streams;
  // The streams of the device rows: Trace::num_streams counts those only.
  absl::flat_hash_set<std::uint64_t> device_streams;
  for (size_t i = 1; i < lines.size(); ++i) {
    const Line& line = lines[i];
    std::vector<absl::string_view> f = absl::StrSplit(line.text, ',');
    if (f.size() != fields) {
      return Malformed(
          name, line.number,
          absl::StrCat(fields, " fields (",
                       timed ? kProjectTimedHeader : kProjectHeader, ")"),
          absl::StrCat(f.size(), " in ", Quote(line.text)));
    }
    for (auto& field : f) field = absl::StripAsciiWhitespace(field);
    std::uint64_t seq = 0;
    if (ParseDecimal(f[0], &seq) != Parsed::kOk || seq != i - 1) {
      return Malformed(name, line.number, absl::StrCat("seq ", i - 1),
                       Quote(f[0]));
    }
    ProjectRow row;
    if (absl::Status s = ReadProjectRow(name, line.number, f, timed, &row);
        !s.ok()) {
      return s;
    }
    const std::uint64_t stream = streams.Map(row.stream);
    const std::uint64_t time_ns = timed ? clock.Since(row.us * 1000) : 0;
    if (f[1] == "host_alloc" || f[1] == "host_free") {
      if (absl::Status s = AddHostRow(line.number, f[1] == "host_alloc", row,
                                      stream, time_ns, ids, &trace);
          !s.ok()) {
        return s;
      }
      continue;
    }
    TraceOp op;
    op.stream = stream;
    op.time_ns = time_ns;
    op.size = row.size;
    if (f[1] == "alloc") {
      absl::StatusOr<std::uint64_t> dense =
          ids.Alloc(line.number, row.id, row.size, false);
      if (!dense.ok()) return dense.status();
      op.kind = TraceOp::Kind::kAlloc;
      op.id = *dense;
      ++trace.num_allocs;
    } else if (f[1] == "free") {
      absl::StatusOr<std::uint64_t> dense =
          ids.Free(line.number, row.id, &op.size, false);
      if (!dense.ok()) return dense.status();
      op.kind = TraceOp::Kind::kFree;
      op.id = *dense;
      ++trace.num_frees;
    } else {
      return Malformed(name, line.number,
                       "action alloc, free, host_alloc or host_free",
                       Quote(f[1]));
    }
    device_streams.insert(op.stream);
    trace.ops.push_back(op);
  }
  trace.num_streams = device_streams.size();
  return trace;
}

absl::StatusOr<Trace> ParseRmm(const std::vector<Line>& lines,
                               absl::string_view name) {
  Trace trace;
  trace.timed = true;
  Clock clock;
  // Pointers are reused after their free, so they name a live allocation
  // only: each allocate gets the next dense id.
  absl::flat_hash_map<std::uint64_t, std::uint64_t> live;  // pointer -> id
  std::vector<std::uint64_t> sizes;
  StreamNumbers streams;
  for (size_t i = 1; i < lines.size(); ++i) {
    const Line& line = lines[i];
    std::vector<absl::string_view> f = absl::StrSplit(line.text, ',');
    if (f.size() != 6) {
      return Malformed(name, line.number,
                       absl::StrCat("6 fields (", kRmmHeader, ")"),
                       absl::StrCat(f.size(), " in ", Quote(line.text)));
    }
    for (auto& field : f) field = absl::StripAsciiWhitespace(field);
    // Thread is not replayed, but a row whose Thread is not one is not a row
    // of RMM's log.
    std::uint64_t thread = 0;
    if (absl::Status s = ReadNumber(name, line.number, f[0], true,
                                    "a numeric thread id in Thread",
                                    "thread id", UINT64_MAX, &thread);
        !s.ok()) {
      return s;
    }
    if (!IsLogTime(f[1])) {
      return Malformed(name, line.number,
                       "a time in Time (digits separated by ':' or '.', e.g. "
                       "10:00:00.001)",
                       Quote(f[1]));
    }
    if (!LogTimeFits(f[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line.number, ": time in Time ", Quote(f[1]),
                       " out of range: at most ", kMaxLogSeconds, " seconds"));
    }
    const absl::string_view action = f[2];
    if (action == "allocate failure") continue;  // nothing was allocated
    const bool is_alloc = action == "allocate";
    if (!is_alloc && action != "free") {
      return Malformed(name, line.number,
                       "action allocate, free or \"allocate failure\"",
                       Quote(action));
    }
    std::uint64_t pointer = 0, size = 0, stream = 0;
    if (absl::Status s = ReadNumber(name, line.number, f[3], true,
                                    "a pointer like 0x7f0000000000", "pointer",
                                    UINT64_MAX, &pointer);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ReadNumber(name, line.number, f[4], false,
                                    "a decimal size in bytes", "size in bytes",
                                    UINT64_MAX, &size);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ReadNumber(name, line.number, f[5], true,
                                    "a stream (0x... or decimal)", "stream",
                                    UINT64_MAX, &stream);
        !s.ok()) {
      return s;
    }
    TraceOp op;
    op.stream = streams.Map(stream);
    op.time_ns = clock.Since(LogTimeNs(f[1]));
    if (is_alloc) {
      if (live.contains(pointer)) {
        return Malformed(
            name, line.number, "a pointer not live",
            absl::StrCat(Quote(f[3]), ", allocated and not freed"));
      }
      op.kind = TraceOp::Kind::kAlloc;
      op.id = sizes.size();
      op.size = size;
      live.emplace(pointer, op.id);
      sizes.push_back(size);
      ++trace.num_allocs;
    } else {
      auto it = live.find(pointer);
      if (it == live.end()) {
        return Malformed(name, line.number, "the pointer of a live allocation",
                         absl::StrCat(Quote(f[3]), ", not allocated"));
      }
      if (size != 0 && size != sizes[it->second]) {
        return Malformed(
            name, line.number,
            absl::StrCat("size 0 or ", sizes[it->second], " (the size ",
                         Quote(f[3]), " was allocated with)"),
            absl::StrCat("size ", size));
      }
      op.kind = TraceOp::Kind::kFree;
      op.id = it->second;
      op.size = sizes[op.id];
      live.erase(it);
      ++trace.num_frees;
    }
    trace.ops.push_back(op);
  }
  trace.num_streams = streams.count();
  return trace;
}

std::string Stem(const std::string& path) {
  std::string base = path;
  if (size_t slash = base.find_last_of('/'); slash != std::string::npos) {
    base = base.substr(slash + 1);
  }
  if (size_t dot = base.find_last_of('.');
      dot != std::string::npos && dot > 0) {
    base = base.substr(0, dot);
  }
  return base;
}

}  // namespace

absl::StatusOr<Trace> ParseTrace(absl::string_view text,
                                 absl::string_view name) {
  // A UTF-8 byte order mark (editors on Windows write one) is not text.
  absl::ConsumePrefix(&text, "\xEF\xBB\xBF");
  const std::vector<Line> lines = SplitLines(text);
  if (lines.empty()) {
    return Malformed(
        name, 1,
        absl::StrCat("header \"", kProjectHeader, "\" or \"", kRmmHeader, "\""),
        "an empty file");
  }
  const absl::string_view header = absl::StripAsciiWhitespace(lines[0].text);
  absl::StatusOr<Trace> trace;
  if (header == kProjectHeader || header == kProjectTimedHeader) {
    trace = ParseProject(lines, name, header == kProjectTimedHeader);
  } else if (header == kRmmHeader) {
    trace = ParseRmm(lines, name);
  } else {
    return Malformed(
        name, lines[0].number,
        absl::StrCat("header \"", kProjectHeader, "\" or \"", kRmmHeader, "\""),
        Quote(header));
  }
  if (trace.ok()) trace->name = std::string(name);
  return trace;
}

absl::StatusOr<Trace> LoadTrace(const std::string& path) {
  // A directory opens and reads as nothing on Linux: say what it is.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, not a trace file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open the trace"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read the trace"));
  }
  // Messages name the file as given (so a user can open it); the trace is
  // named by its stem, the key of the baseline table.
  absl::StatusOr<Trace> trace = ParseTrace(text.str(), path);
  if (trace.ok()) trace->name = Stem(path);
  return trace;
}

}  // namespace gpualloc::replay
