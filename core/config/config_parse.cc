// SPDX-License-Identifier: Apache-2.0
// core/config/config_parse.cc: the scalar parsers of
// core/config/config_parse.h, the splitting and translation of PyTorch's
// allocator configuration, and the names of config.h's enumerations.
#include "core/config/config_parse.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/report/quote.h"
#include "core/status_macros.h"
#include "gpualloc/arch/profiles.h"
#include "gpualloc/core/config.h"

namespace gpualloc {

absl::string_view BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kSim:
      return "sim";
    case BackendKind::kCuda:
      return "cuda";
    case BackendKind::kHip:
      return "hip";
  }
  return "invalid";
}

absl::string_view MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kCoarse:
      return "coarse";
    case MemoryKind::kFine:
      return "fine";
  }
  return "invalid";
}

absl::string_view ValueOriginName(ValueOrigin origin) {
  switch (origin) {
    case ValueOrigin::kDefault:
      return "default";
    case ValueOrigin::kOption:
      return "option";
    case ValueOrigin::kVariable:
      return "variable";
    case ValueOrigin::kAlias:
      return "alias";
  }
  return "invalid";
}

namespace config_internal {

// Control characters and quotes as C escapes. Long text is cut, as trace
// errors cut long lines, so that one bad value cannot flood a terminal: the
// first 80 bytes, "...", and the whole length (core/report/quote.h).
std::string Quoted(absl::string_view text) { return core::QuoteInput(text); }

absl::Status Bad(const Where& where, absl::string_view value,
                 absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(where.name, "=", Quoted(value), where.place, ": ", why));
}

namespace {

// A plain decimal number split into its digit strings; both may be empty but
// not together.
struct Decimal {
  absl::string_view integer;
  absl::string_view fraction;
};

std::optional<Decimal> SplitDecimal(absl::string_view text) {
  const std::size_t dot = text.find('.');
  Decimal d;
  d.integer = text.substr(0, dot);
  d.fraction = dot == absl::string_view::npos ? absl::string_view()
                                              : text.substr(dot + 1);
  if (d.integer.empty() && d.fraction.empty()) return std::nullopt;
  for (absl::string_view part : {d.integer, d.fraction}) {
    for (char c : part) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
        return std::nullopt;
      }
    }
  }
  return d;
}

}  // namespace

absl::StatusOr<bool> ParseBool(absl::string_view value, const Where& where) {
  if (absl::EqualsIgnoreCase(value, "true") || value == "1") return true;
  if (absl::EqualsIgnoreCase(value, "false") || value == "0") return false;
  return Bad(where, value, "not a boolean (true, false, 1 or 0)");
}

absl::Status CheckFraction(double f, absl::string_view value,
                           const Where& where) {
  // !(f > 0) also catches NaN from programmatic options.
  if (!std::isfinite(f) || !(f > 0) || f > 1) {
    return Bad(where, value,
               "not in (0, 1] (a fraction of the device's total memory, e.g. "
               "0.75)");
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ParseFraction(absl::string_view value,
                                     const Where& where) {
  if (!SplitDecimal(value).has_value()) {
    return Bad(where, value,
               "not a decimal number in (0, 1] (e.g. 0.75 or .9)");
  }
  double f = 0;
  const auto [end, ec] =
      std::from_chars(value.data(), value.data() + value.size(), f);
  if (ec != std::errc() || end != value.data() + value.size()) {
    return Bad(where, value, "not a decimal number in (0, 1]");
  }
  GPUALLOC_RETURN_IF_ERROR(CheckFraction(f, value, where));
  return f;
}

namespace {

struct Unit {
  absl::string_view name;
  std::uint64_t bytes;
};
constexpr std::uint64_t kK = 1000;
constexpr std::uint64_t kKi = 1024;
constexpr std::array<Unit, 9> kUnits = {{
    {"B", 1},
    {"KB", kK},
    {"MB", kK* kK},
    {"GB", kK* kK* kK},
    {"TB", kK* kK* kK* kK},
    {"KiB", kKi},
    {"MiB", kKi* kKi},
    {"GiB", kKi* kKi* kKi},
    {"TiB", kKi* kKi* kKi* kKi},
}};

std::string UnitList() {
  std::vector<absl::string_view> names;
  for (const Unit& u : kUnits) names.push_back(u.name);
  return absl::StrJoin(names, ", ");
}

std::optional<std::uint64_t> Pow10(std::size_t digits) {
  std::uint64_t p = 1;
  for (std::size_t i = 0; i < digits; ++i) {
    if (p > std::numeric_limits<std::uint64_t>::max() / 10) return std::nullopt;
    p *= 10;
  }
  return p;
}

std::optional<std::uint64_t> ParseDigits(absl::string_view digits) {
  std::uint64_t v = 0;
  for (char c : digits) {
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
      return std::nullopt;
    }
    v = v * 10 + d;
  }
  return v;
}

std::optional<std::uint64_t> Multiply(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
    return std::nullopt;
  }
  return a * b;
}

}  // namespace

absl::StatusOr<std::uint64_t> ParseSizeAt(absl::string_view text,
                                          const Where& where) {
  // The number runs up to the first character that is neither a digit nor a
  // '.'; the unit follows, optionally after spaces.
  std::size_t n = 0;
  while (n < text.size() &&
         (absl::ascii_isdigit(static_cast<unsigned char>(text[n])) ||
          text[n] == '.')) {
    ++n;
  }
  const absl::string_view number = text.substr(0, n);
  const absl::string_view unit_text =
      absl::StripLeadingAsciiWhitespace(text.substr(n));
  const std::optional<Decimal> decimal = SplitDecimal(number);
  if (!decimal.has_value()) {
    return Bad(where, text,
               absl::StrCat("not a size (a number of bytes, optionally with "
                            "a unit: ",
                            UnitList(), ")"));
  }
  std::uint64_t unit = 1;
  if (!unit_text.empty()) {
    bool found = false;
    for (const Unit& u : kUnits) {
      if (absl::EqualsIgnoreCase(unit_text, u.name)) {
        unit = u.bytes;
        found = true;
        break;
      }
    }
    if (!found) {
      return Bad(where, text,
                 absl::StrCat("unknown unit ", Quoted(unit_text),
                              "; valid units: ", UnitList()));
    }
  }
  const auto overflow = [&] {
    return Bad(where, text,
               "does not fit in 64 bits of bytes (at most 16 EiB); give a "
               "smaller size");
  };
  const std::optional<std::uint64_t> integer = ParseDigits(decimal->integer);
  if (!integer.has_value()) return overflow();
  const std::optional<std::uint64_t> whole = Multiply(*integer, unit);
  if (!whole.has_value()) return overflow();

  // The fraction, exactly: frac / 10^k * unit bytes. Trailing zeros add
  // nothing; with g = gcd(unit, 10^k) the result is whole exactly when
  // 10^k / g divides frac (unit / g and 10^k / g share no factor).
  absl::string_view fraction = decimal->fraction;
  while (!fraction.empty() && fraction.back() == '0') {
    fraction.remove_suffix(1);
  }
  std::uint64_t part = 0;
  if (!fraction.empty()) {
    const std::optional<std::uint64_t> frac = ParseDigits(fraction);
    const std::optional<std::uint64_t> scale = Pow10(fraction.size());
    if (!frac.has_value() || !scale.has_value()) {
      return Bad(where, text,
                 "too many digits after the decimal point; give fewer");
    }
    const std::uint64_t g = std::gcd(unit, *scale);
    if (*frac % (*scale / g) != 0) {
      return Bad(where, text,
                 "not a whole number of bytes; give a size that is (1.5GiB, "
                 "not 1.5B)");
    }
    const std::optional<std::uint64_t> p =
        Multiply(*frac / (*scale / g), unit / g);
    if (!p.has_value()) return overflow();
    part = *p;
  }
  if (*whole > std::numeric_limits<std::uint64_t>::max() - part) {
    return overflow();
  }
  return *whole + part;
}

absl::Status CheckPositiveSize(std::uint64_t bytes, absl::string_view value,
                               const Where& where) {
  if (bytes == 0) {
    return Bad(where, value, "must be more than 0 bytes (unset it instead)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::uint64_t> ParsePositiveSize(absl::string_view value,
                                                const Where& where) {
  GPUALLOC_ASSIGN_OR_RETURN(std::uint64_t bytes, ParseSizeAt(value, where));
  GPUALLOC_RETURN_IF_ERROR(CheckPositiveSize(bytes, value, where));
  return bytes;
}

// The allocator would reject the same value at creation, but only here can
// the message name the variable or key that carried it.
absl::Status CheckMinBlock(std::uint64_t bytes, absl::string_view value,
                           const Where& where) {
  if (bytes < 16 || (bytes & (bytes - 1)) != 0) {
    return Bad(where, value,
               "not a power of two of at least 16 bytes (e.g. 256, 512 or "
               "4KiB)");
  }
  return absl::OkStatus();
}

// Region sizes are whole minimum blocks, and every minimum block is a power
// of two of at least 16 bytes: a granularity that is not a multiple of 16
// could never work, whatever the device.
absl::Status CheckGranularity(std::uint64_t bytes, absl::string_view value,
                              const Where& where) {
  if (bytes % 16 != 0) {
    return Bad(where, value,
               "not a multiple of 16 bytes (region sizes are whole minimum "
               "blocks, and min_block is a power of two of at least 16)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::uint64_t> ParseMinBlock(absl::string_view value,
                                            const Where& where) {
  GPUALLOC_ASSIGN_OR_RETURN(std::uint64_t bytes, ParseSizeAt(value, where));
  GPUALLOC_RETURN_IF_ERROR(CheckMinBlock(bytes, value, where));
  return bytes;
}

// "auto" or a profile name, in the profile's own spelling.
absl::StatusOr<std::string> ParseArch(absl::string_view value,
                                      const Where& where) {
  if (absl::EqualsIgnoreCase(value, "auto")) return std::string("auto");
  absl::StatusOr<const ArchProfile*> found = FindArchProfile(value);
  if (found.ok()) return std::string((*found)->name);
  std::vector<absl::string_view> names = {"auto"};
  for (const ArchProfile& p : AllArchProfiles()) names.push_back(p.name);
  return Bad(where, value,
             absl::StrCat("unknown architecture profile; valid names: ",
                          absl::StrJoin(names, ", ")));
}

namespace {

// Plain decimal digits; nullopt for anything else, or beyond 64 bits.
std::optional<std::uint64_t> Decimal(absl::string_view value) {
  if (value.empty() || !std::all_of(value.begin(), value.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return std::nullopt;
  }
  return ParseDigits(value);
}

constexpr absl::string_view kNotDivisions =
    "not 0 (off) or a power of two from 2 to 64";
constexpr absl::string_view kNotHistory =
    "not 0 (off) or a number of events up to 16777216 (2^24)";

}  // namespace

absl::Status CheckSizeDivisions(std::uint64_t n, absl::string_view value,
                                const Where& where) {
  if (n == 0 || (n >= 2 && n <= 64 && std::has_single_bit(n))) {
    return absl::OkStatus();
  }
  return Bad(where, value, kNotDivisions);
}

absl::StatusOr<std::uint32_t> ParseSizeDivisions(absl::string_view value,
                                                 const Where& where) {
  const std::optional<std::uint64_t> n = Decimal(value);
  if (!n.has_value()) return Bad(where, value, kNotDivisions);
  GPUALLOC_RETURN_IF_ERROR(CheckSizeDivisions(*n, value, where));
  return static_cast<std::uint32_t>(*n);
}

absl::Status CheckHistory(std::uint64_t n, absl::string_view value,
                          const Where& where) {
  if (n <= kMaxHistory) return absl::OkStatus();
  return Bad(where, value, kNotHistory);
}

absl::StatusOr<std::uint64_t> ParseHistory(absl::string_view value,
                                           const Where& where) {
  const std::optional<std::uint64_t> n = Decimal(value);
  if (!n.has_value()) return Bad(where, value, kNotHistory);
  GPUALLOC_RETURN_IF_ERROR(CheckHistory(*n, value, where));
  return *n;
}

absl::StatusOr<std::string> ParseName(absl::string_view value, const Where&) {
  return std::string(value);
}

std::string FormatFraction(double f) {
  // The shortest text that reads back as the same double: 0.75, not
  // 0.75000000000000000. Fractions (|f| <= 1) are written without an
  // exponent, which the parsers do not read: 0.0001, not 1e-04. The longest,
  // the smallest subnormal, takes 326 characters. Other values (only in
  // messages about them) may take the shorter scientific form.
  std::array<char, 400> buf;
  const bool fraction = std::isfinite(f) && std::fabs(f) <= 1;
  const auto [end, ec] =
      fraction ? std::to_chars(buf.data(), buf.data() + buf.size(), f,
                               std::chars_format::fixed)
               : std::to_chars(buf.data(), buf.data() + buf.size(), f);
  if (ec != std::errc()) return absl::StrCat(f);
  return std::string(buf.data(), end);
}

absl::StatusOr<std::vector<PytorchEntry>> SplitPytorchConf(
    absl::string_view text, absl::string_view variable) {
  std::vector<PytorchEntry> entries;
  const auto error = [&](int entry, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        variable, "=", Quoted(text), ": entry ", entry, ": ", why));
  };
  int entry = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    ++entry;
    // The entry runs to the first ',' outside brackets.
    std::size_t end = start;
    int depth = 0;
    for (; end < text.size(); ++end) {
      if (text[end] == '[') {
        ++depth;
      } else if (text[end] == ']') {
        if (--depth < 0) {
          return error(entry,
                       "']' without '[' (a list is written key:[a:b,c:d])");
        }
      } else if (text[end] == ',' && depth == 0) {
        break;
      }
    }
    if (depth != 0) {
      return error(entry, "'[' without ']' (a list is written key:[a:b,c:d])");
    }
    const absl::string_view item =
        absl::StripAsciiWhitespace(text.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    const std::size_t colon = item.find(':');
    if (colon == absl::string_view::npos) {
      return error(entry, absl::StrCat(Quoted(item),
                                       " has no ':' (expected key:value)"));
    }
    PytorchEntry e;
    e.key = std::string(absl::StripAsciiWhitespace(item.substr(0, colon)));
    e.value = std::string(absl::StripAsciiWhitespace(item.substr(colon + 1)));
    e.entry = entry;
    if (e.key.empty()) {
      return error(entry, "empty key before ':' (expected key:value)");
    }
    if (e.value.empty()) {
      return error(entry,
                   absl::StrCat("empty value for ", core::ClipInput(e.key),
                                " (expected key:value; remove the "
                                "entry to leave it out)"));
    }
    for (const PytorchEntry& seen : entries) {
      if (seen.key == e.key) {
        return error(entry,
                     absl::StrCat("duplicate key ", core::QuoteInput(e.key),
                                  " (first set by entry ", seen.entry,
                                  "); set it once"));
      }
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

namespace {

// PyTorch's booleans: True or False, exactly (c10's ConfigTokenizer::toBool).
absl::StatusOr<bool> PytorchTrueFalse(absl::string_view value,
                                      const Where& where) {
  if (value == "True") return true;
  if (value == "False") return false;
  return Bad(where, value,
             "not True or False (PyTorch takes only these two spellings)");
}

// expandable_segments:True|False -> expandable=true|false.
absl::StatusOr<std::string> PytorchExpandable(absl::string_view value,
                                              const Where& where) {
  GPUALLOC_ASSIGN_OR_RETURN(const bool b, PytorchTrueFalse(value, where));
  return std::string(b ? "true" : "false");
}

// garbage_collection_threshold:T, 0 < T < 1 (PyTorch's range) ->
// gc_threshold=T.
absl::StatusOr<std::string> PytorchGcThreshold(absl::string_view value,
                                               const Where& where) {
  const absl::StatusOr<double> t = ParseFraction(value, where);
  if (!t.ok() || *t >= 1) {
    return Bad(where, value,
               "not a decimal number in (0, 1), PyTorch's range (e.g. 0.8: "
               "give cached memory back before reserving more than 80% of "
               "the limit)");
  }
  return FormatFraction(*t);
}

// per_process_memory_fraction:F -> mem_fraction=F (of total memory in both).
// PyTorch takes [0, 1]; 0 would allow no memory at all, which gpualloc
// refuses as it refuses mem_fraction=0.
absl::StatusOr<std::string> PytorchFraction(absl::string_view value,
                                            const Where& where) {
  const absl::StatusOr<double> f = ParseFraction(value, where);
  if (!f.ok()) {
    if (SplitDecimal(value).has_value()) {  // 0, or above 1
      return Bad(where, value,
                 "not in (0, 1]: a fraction of the device's total memory "
                 "(PyTorch takes 0 too, but it allows no memory at all); set "
                 "a fraction such as 0.9, or remove the key for no cap");
    }
    return f.status();
  }
  return FormatFraction(*f);
}

// backend:native|cudaMallocAsync|hipMallocAsync -> allocator=bfc|async, in
// PyTorch's spelling exactly (ROCm builds take both async names).
absl::StatusOr<std::string> PytorchBackend(absl::string_view value,
                                           const Where& where) {
  if (value == "native") return std::string("bfc");
  if (value == "cudaMallocAsync" || value == "hipMallocAsync") {
    return std::string("async");
  }
  return Bad(where, value,
             "not native, cudaMallocAsync or hipMallocAsync (PyTorch's "
             "spellings; native is gpualloc's bfc, the others its async)");
}

// roundup_power2_divisions:N, a power of two as PyTorch requires ->
// size_divisions=N; 1, one division (no rounding), -> 0. The list form
// ("[256:1,512:2,>:8]", divisions per size range) is not supported.
absl::StatusOr<std::string> PytorchDivisions(absl::string_view value,
                                             const Where& where) {
  if (absl::StartsWith(value, "[")) {
    return absl::UnimplementedError(
        "its list form gives each size range its own number of divisions; "
        "gpualloc rounds every size with one number: use "
        "roundup_power2_divisions:N or GPUALLOC_SIZE_DIVISIONS");
  }
  const std::optional<std::uint64_t> n = Decimal(value);
  if (!n.has_value() || !std::has_single_bit(*n)) {
    return Bad(where, value,
               "not a power of two (PyTorch's rule; 1 is no rounding, 4 "
               "rounds each size up to a quarter of its power of two)");
  }
  if (*n == 1) return std::string("0");
  if (*n > 64) {
    return Bad(where, value,
               "more than 64 divisions, which gpualloc does not round to "
               "(its chunk rounding takes 2 to 64); use 64 or less");
  }
  return absl::StrCat(*n);
}

}  // namespace

const std::vector<PytorchKey>& PytorchKeys() {
  using K = PytorchKeyKind;
  static const std::vector<PytorchKey> keys = {
      {"expandable_segments", K::kMapped, "expandable", PytorchExpandable, ""},
      {"garbage_collection_threshold", K::kMapped, "gc_threshold",
       PytorchGcThreshold, ""},
      {"per_process_memory_fraction", K::kMapped, "mem_fraction",
       PytorchFraction, ""},
      {"backend", K::kMapped, "allocator", PytorchBackend, ""},
      {"roundup_power2_divisions", K::kMapped, "size_divisions",
       PytorchDivisions, ""},
      {"max_split_size_mb", K::kUnsupported, "", nullptr,
       "PyTorch never splits cached blocks above this size and keeps smaller "
       "requests out of them; gpualloc's BFC splits any free chunk and has "
       "no such size. The nearest setting, GPUALLOC_SPLIT_BOUND, keeps a "
       "surplus up to its size unsplit with each allocation, which is not "
       "the same"},
      {"max_non_split_rounding_mb", K::kUnsupported, "", nullptr,
       "PyTorch lets a request take a whole cached block up to this much "
       "larger when max_split_size_mb keeps the block from being split; "
       "gpualloc has no unsplit blocks. The nearest setting is "
       "GPUALLOC_SPLIT_BOUND (a surplus up to its size stays with the "
       "allocation)"},
      {"large_segment_size_mb", K::kUnsupported, "", nullptr,
       "PyTorch packs allocations of 1 to 10 MiB into segments of this size; "
       "gpualloc sizes regions by its growth granularity and policy "
       "(GPUALLOC_GRANULARITY, GPUALLOC_GROWTH)"},
      {"release_lock_on_cudamalloc", K::kUnsupported, "", nullptr,
       "PyTorch releases its allocator lock while cudaMalloc runs; "
       "gpualloc's locking has no such switch"},
      {"release_lock_on_hipmalloc", K::kUnsupported, "", nullptr,
       "PyTorch releases its allocator lock while hipMalloc runs; "
       "gpualloc's locking has no such switch"},
      {"graph_capture_record_stream_reuse", K::kUnsupported, "", nullptr,
       "a rule of PyTorch's allocator for blocks used on other streams "
       "during graph capture; gpualloc orders such reuse itself "
       "(GPUALLOC_CROSS_STREAM)"},
      {"throw_on_cudamalloc_oom", K::kUnsupported, "", nullptr,
       "PyTorch fails an allocation before cudaMalloc when it would likely "
       "fail; gpualloc checks its own limit before asking the device "
       "(GPUALLOC_MEM_LIMIT, GPUALLOC_MEM_FRACTION)"},
      {"expandable_segments_reserve", K::kUnsupported, "", nullptr,
       "the address space PyTorch's expandable segments reserve; gpualloc "
       "reserves four times the device's memory once, with no setting"},
      {"expandable_segments_reserve_by_class", K::kUnsupported, "", nullptr,
       "the address space PyTorch's expandable segments reserve per stream "
       "class; gpualloc reserves four times the device's memory once, with "
       "no setting"},
      {"pinned_use_cuda_host_register", K::kHost, "", nullptr, ""},
      {"pinned_use_hip_host_register", K::kHost, "", nullptr, ""},
      {"pinned_num_register_threads", K::kHost, "", nullptr, ""},
      {"pinned_use_background_threads", K::kHost, "", nullptr, ""},
      {"pinned_reserve_segment_size_mb", K::kHost, "", nullptr, ""},
      {"pinned_free_catch_all", K::kHost, "", nullptr, ""},
  };
  return keys;
}

const std::vector<JaxVariable>& UnreadJaxVariables() {
  static const std::vector<JaxVariable> variables = {
      {"XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB",
       "it sizes XLA's separate pool for collectives' user buffers (NCCL), "
       "not the device allocator gpualloc stands for"},
  };
  return variables;
}

// Edit distance between two names (insertions, deletions, substitutions).
std::size_t Distance(absl::string_view a, absl::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Writes `line` to stderr unless this process already wrote it.
void WarnOncePerProcess(const std::string& line) {
  static std::mutex mu;
  static auto* const written = new std::set<std::string>();
  const std::lock_guard<std::mutex> lock(mu);
  if (!written->insert(line).second) return;
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace config_internal
}  // namespace gpualloc
