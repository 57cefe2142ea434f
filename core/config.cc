// core/config.cc: the configuration string, the environment and the defaults
// (SPEC section 5), resolved into allocator Options.
//
// Parsing choices (the tests in tests/config_test.cc pin each one):
//  - Every value is trimmed of surrounding ASCII whitespace. A value that is
//    then empty is an error naming the variable or key: `VAR=` in a shell
//    script is far more often a variable that expanded to nothing than a wish
//    for the default, and an error says how to get the default (unset it).
//  - Keywords (booleans, allocator, backend, expandable, cross_stream, arch,
//    memory_kind and size units) are case-insensitive: Python writes str(True)
//    as "True", TensorFlow's own boolean variables are case-insensitive, and no
//    two valid spellings differ only in case. Configuration-string keys are
//    exact (lower case), like the variable names they stand for.
//  - Numbers are plain decimals: digits with at most one '.', at least one
//    digit (".95" is accepted: JAX's documentation writes fractions that way).
//    No sign, exponent, hex, "inf" or "nan".
//  - Sizes may have a fraction when the result is a whole number of bytes
//    ("1.5GiB" yes, "1.5B" and "0.3KiB" no); the arithmetic is exact integer
//    arithmetic, never floating point, and overflow of 64 bits is an error.
//  - Every variable that is set is parsed, even when a higher level (an
//    option, or the GPUALLOC_* variable over its alias) decides the value: a
//    typo in an environment someone believes is in effect is reported, not
//    silently shadowed.
//  - mem_limit and mem_fraction both set the limit, so the higher level wins
//    between them: a mem_fraction the program gives beats a GPUALLOC_MEM_LIMIT
//    in the environment (the variable is then reported as overridden). At one
//    level mem_limit beats mem_fraction, as Options::memory_limit does.
//  - A size of 0 is rejected for mem_limit, device_memory, granularity and
//    min_block: in Options 0 means "unset" (or "the profile's"), so accepting
//    it would silently mean something else. split_bound takes 0: there it
//    means "always split", which is also the default.
#include "gpualloc/config.h"

#include <unistd.h>  // environ

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "gpualloc/arch.h"

namespace gpualloc {
namespace {

// Names the place a value came from in error messages: `name="value"place:
// why`, e.g. `GPUALLOC_MEM_FRACTION="1.5": not in (0, 1]` or
// `config string mem_fraction="1.5" (entry 2, column 9): not in (0, 1]`.
struct Where {
  std::string name;
  std::string place;  // empty, or " (entry 2, column 9)"
};

// `text` escaped (control characters and quotes as C escapes) and quoted for
// a message. Long text is cut, as trace errors cut long lines, so one bad
// value cannot flood a terminal: the first kMaxEcho bytes, "...", and the
// whole length.
constexpr std::size_t kMaxEcho = 80;
std::string Quoted(absl::string_view text) {
  if (text.size() <= kMaxEcho)
    return absl::StrCat("\"", absl::CEscape(text), "\"");
  return absl::StrCat("\"", absl::CEscape(text.substr(0, kMaxEcho)), "...\" (",
                      text.size(), " bytes)");
}

absl::Status Bad(const Where& where, absl::string_view value,
                 absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(where.name, "=", Quoted(value), where.place, ": ", why));
}

// ---------------------------------------------------------------- scalars

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

absl::StatusOr<bool> ParseBool(absl::string_view value, const Where& where) {
  if (absl::EqualsIgnoreCase(value, "true") || value == "1") return true;
  if (absl::EqualsIgnoreCase(value, "false") || value == "0") return false;
  return Bad(where, value, "not a boolean (true, false, 1 or 0)");
}

absl::Status CheckFraction(double f, absl::string_view value,
                           const Where& where) {
  // !(f > 0) also catches NaN from programmatic options.
  if (!std::isfinite(f) || !(f > 0) || f > 1) {
    return Bad(where, value, "not in (0, 1]");
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
    return Bad(where, text, "does not fit in 64 bits of bytes");
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
      return Bad(where, text, "too many digits after the decimal point");
    }
    const std::uint64_t g = std::gcd(unit, *scale);
    if (*frac % (*scale / g) != 0) {
      return Bad(where, text, "not a whole number of bytes");
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
    return Bad(where, value, "not a power of two of at least 16 bytes");
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

// A keyword from a fixed list; the error lists the list.
template <typename T, std::size_t N>
absl::StatusOr<T> ParseKeyword(
    absl::string_view value, const Where& where,
    const std::array<std::pair<absl::string_view, T>, N>& names) {
  for (const auto& [name, v] : names) {
    if (absl::EqualsIgnoreCase(value, name)) return v;
  }
  std::vector<absl::string_view> valid;
  for (const auto& entry : names) valid.push_back(entry.first);
  return Bad(where, value,
             absl::StrCat("not one of ", absl::StrJoin(valid, ", ")));
}

constexpr std::array<std::pair<absl::string_view, AllocatorMode>, 3> kModes = {
    {{"bfc", AllocatorMode::kBfc},
     {"platform", AllocatorMode::kPlatform},
     {"async", AllocatorMode::kAsync}}};
// JAX's XLA_PYTHON_CLIENT_ALLOCATOR values.
constexpr std::array<std::pair<absl::string_view, AllocatorMode>, 4> kXlaModes =
    {{{"default", AllocatorMode::kBfc},
      {"bfc", AllocatorMode::kBfc},
      {"platform", AllocatorMode::kPlatform},
      {"cuda_async", AllocatorMode::kAsync}}};
constexpr std::array<std::pair<absl::string_view, BackendKind>, 4> kBackends = {
    {{"auto", BackendKind::kAuto},
     {"sim", BackendKind::kSim},
     {"cuda", BackendKind::kCuda},
     {"hip", BackendKind::kHip}}};
constexpr std::array<std::pair<absl::string_view, Tristate>, 5> kTristates = {
    {{"true", Tristate::kOn},
     {"false", Tristate::kOff},
     {"auto", Tristate::kAuto},
     {"1", Tristate::kOn},
     {"0", Tristate::kOff}}};
constexpr std::array<std::pair<absl::string_view, CrossStreamReuse>, 2>
    kCrossStream = {{{"when_complete", CrossStreamReuse::kWhenComplete},
                     {"stream_wait", CrossStreamReuse::kStreamWait}}};
constexpr std::array<std::pair<absl::string_view, GrowthPolicy>, 2> kGrowth = {
    {{"exact", GrowthPolicy::kExact}, {"doubling", GrowthPolicy::kDoubling}}};
constexpr std::array<std::pair<absl::string_view, MemoryKind>, 2> kMemoryKinds =
    {{{"coarse", MemoryKind::kCoarse}, {"fine", MemoryKind::kFine}}};

template <typename T, std::size_t N>
std::string KeywordName(
    T v, const std::array<std::pair<absl::string_view, T>, N>& names) {
  for (const auto& [name, value] : names) {
    if (value == v) return std::string(name);
  }
  return "invalid";
}

// `v` is one of the enumerators (programmatic options can hold anything).
template <typename T, std::size_t N>
absl::Status CheckKeyword(
    T v, const Where& where,
    const std::array<std::pair<absl::string_view, T>, N>& names) {
  for (const auto& entry : names) {
    if (entry.second == v) return absl::OkStatus();
  }
  return Bad(where, absl::StrCat(static_cast<int>(v)),
             "not a valid enumerator");
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

absl::StatusOr<std::string> ParseName(absl::string_view value, const Where&) {
  return std::string(value);
}

std::string FormatFraction(double f) {
  // The shortest text that reads back as the same double: 0.75, not
  // 0.75000000000000000.
  std::array<char, 64> buf;
  const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), f);
  if (ec != std::errc()) return absl::StrCat(f);
  return std::string(buf.data(), end);
}

// ------------------------------------------------------------------ keys

enum class Key {
  kAllocator,
  kPreallocate,
  kMemFraction,
  kMemLimit,
  kExpandable,
  kArch,
  kGc,
  kBackend,
  kDeviceMemory,
  kCrossStream,
  kGrowth,
  kGranularity,
  kMinBlock,
  kSplitBound,
  kName,
  kMemoryKind,
};

struct KeyInfo {
  Key key;
  absl::string_view name;                    // configuration-string key
  absl::string_view variable;                // GPUALLOC_*
  std::array<absl::string_view, 2> aliases;  // empty when fewer
  absl::string_view values;                  // for --help (ConfigKeys)
};

// The table of config.h, in its order (Config::settings follows it).
constexpr std::array<KeyInfo, 16> kKeys = {{
    {Key::kAllocator,
     "allocator",
     "GPUALLOC_ALLOCATOR",
     {"XLA_PYTHON_CLIENT_ALLOCATOR", ""},
     "bfc|platform|async"},
    {Key::kPreallocate,
     "preallocate",
     "GPUALLOC_PREALLOCATE",
     {"XLA_PYTHON_CLIENT_PREALLOCATE", ""},
     "true|false"},
    {Key::kMemFraction,
     "mem_fraction",
     "GPUALLOC_MEM_FRACTION",
     {"XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"},
     "(0, 1] of total memory"},
    {Key::kMemLimit,
     "mem_limit",
     "GPUALLOC_MEM_LIMIT",
     {"", ""},
     "a size: 40GiB, 512MB"},
    {Key::kExpandable,
     "expandable",
     "GPUALLOC_EXPANDABLE",
     {"", ""},
     "true|false|auto"},
    {Key::kArch, "arch", "GPUALLOC_ARCH", {"", ""}, "auto or a profile"},
    {Key::kGc,
     "gc",
     "GPUALLOC_GC",
     {"TF_ENABLE_GPU_GARBAGE_COLLECTION", ""},
     "true|false"},
    {Key::kBackend,
     "backend",
     "GPUALLOC_BACKEND",
     {"", ""},
     "auto|sim|cuda|hip"},
    {Key::kDeviceMemory,
     "device_memory",
     "GPUALLOC_DEVICE_MEMORY",
     {"", ""},
     "sim only: a size"},
    {Key::kCrossStream,
     "cross_stream",
     "GPUALLOC_CROSS_STREAM",
     {"", ""},
     "when_complete|stream_wait"},
    {Key::kGrowth, "growth", "GPUALLOC_GROWTH", {"", ""}, "exact|doubling"},
    {Key::kGranularity,
     "granularity",
     "GPUALLOC_GRANULARITY",
     {"", ""},
     "a size: region sizes"},
    {Key::kMinBlock,
     "min_block",
     "GPUALLOC_MIN_BLOCK",
     {"", ""},
     "power of two >= 16 B"},
    {Key::kSplitBound,
     "split_bound",
     "GPUALLOC_SPLIT_BOUND",
     {"", ""},
     "a size, 0 allowed"},
    {Key::kName, "name", "GPUALLOC_NAME", {"", ""}, "a label"},
    {Key::kMemoryKind,
     "memory_kind",
     "GPUALLOC_MEMORY_KIND",
     {"", ""},
     "coarse|fine (hip)"},
}};

std::string KeyList() {
  std::vector<absl::string_view> names;
  for (const KeyInfo& k : kKeys) names.push_back(k.name);
  return absl::StrJoin(names, ", ");
}

// Parses `value` for `key` into the matching field of `out`. `alias` selects
// the alias's spelling where it differs (XLA_PYTHON_CLIENT_ALLOCATOR).
absl::Status ParseInto(Key key, absl::string_view value, const Where& where,
                       bool alias, ConfigOverrides& out) {
  switch (key) {
    case Key::kAllocator: {
      absl::StatusOr<AllocatorMode> mode =
          alias ? ParseKeyword(value, where, kXlaModes)
                : ParseKeyword(value, where, kModes);
      GPUALLOC_RETURN_IF_ERROR(mode.status());
      out.mode = *mode;
      return absl::OkStatus();
    }
    case Key::kPreallocate: {
      GPUALLOC_ASSIGN_OR_RETURN(out.preallocate, ParseBool(value, where));
      return absl::OkStatus();
    }
    case Key::kMemFraction: {
      GPUALLOC_ASSIGN_OR_RETURN(out.memory_fraction,
                                ParseFraction(value, where));
      return absl::OkStatus();
    }
    case Key::kMemLimit: {
      GPUALLOC_ASSIGN_OR_RETURN(out.memory_limit,
                                ParsePositiveSize(value, where));
      return absl::OkStatus();
    }
    case Key::kExpandable: {
      GPUALLOC_ASSIGN_OR_RETURN(out.expandable,
                                ParseKeyword(value, where, kTristates));
      return absl::OkStatus();
    }
    case Key::kArch: {
      GPUALLOC_ASSIGN_OR_RETURN(out.arch, ParseArch(value, where));
      return absl::OkStatus();
    }
    case Key::kGc: {
      GPUALLOC_ASSIGN_OR_RETURN(out.garbage_collection,
                                ParseBool(value, where));
      return absl::OkStatus();
    }
    case Key::kBackend: {
      GPUALLOC_ASSIGN_OR_RETURN(out.backend,
                                ParseKeyword(value, where, kBackends));
      return absl::OkStatus();
    }
    case Key::kDeviceMemory: {
      GPUALLOC_ASSIGN_OR_RETURN(out.device_memory,
                                ParsePositiveSize(value, where));
      return absl::OkStatus();
    }
    case Key::kCrossStream: {
      GPUALLOC_ASSIGN_OR_RETURN(out.cross_stream_reuse,
                                ParseKeyword(value, where, kCrossStream));
      return absl::OkStatus();
    }
    case Key::kGrowth: {
      GPUALLOC_ASSIGN_OR_RETURN(out.growth_policy,
                                ParseKeyword(value, where, kGrowth));
      return absl::OkStatus();
    }
    case Key::kGranularity: {
      GPUALLOC_ASSIGN_OR_RETURN(out.growth_granularity,
                                ParsePositiveSize(value, where));
      return CheckGranularity(*out.growth_granularity, value, where);
    }
    case Key::kMinBlock: {
      GPUALLOC_ASSIGN_OR_RETURN(out.min_block_size,
                                ParseMinBlock(value, where));
      return absl::OkStatus();
    }
    case Key::kSplitBound: {
      // 0 is a real setting here (always split), not "unset".
      GPUALLOC_ASSIGN_OR_RETURN(out.max_internal_fragmentation,
                                ParseSizeAt(value, where));
      return absl::OkStatus();
    }
    case Key::kName: {
      GPUALLOC_ASSIGN_OR_RETURN(out.name, ParseName(value, where));
      return absl::OkStatus();
    }
    case Key::kMemoryKind: {
      GPUALLOC_ASSIGN_OR_RETURN(out.memory_kind,
                                ParseKeyword(value, where, kMemoryKinds));
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unhandled configuration key");
}

// Checks a programmatic option (ConfigOverrides) as strictly as a parsed one
// and brings names to their canonical spelling.
absl::Status CheckOverrides(ConfigOverrides& o) {
  const auto where = [](absl::string_view key) {
    return Where{absl::StrCat("option ", key), ""};
  };
  if (o.mode.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(CheckKeyword(*o.mode, where("allocator"), kModes));
  }
  if (o.memory_fraction.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(CheckFraction(*o.memory_fraction,
                                           FormatFraction(*o.memory_fraction),
                                           where("mem_fraction")));
  }
  if (o.memory_limit.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(CheckPositiveSize(
        *o.memory_limit, absl::StrCat(*o.memory_limit), where("mem_limit")));
  }
  if (o.expandable.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(
        CheckKeyword(*o.expandable, where("expandable"), kTristates));
  }
  if (o.arch.has_value()) {
    GPUALLOC_ASSIGN_OR_RETURN(o.arch, ParseArch(*o.arch, where("arch")));
  }
  if (o.backend.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(
        CheckKeyword(*o.backend, where("backend"), kBackends));
  }
  if (o.device_memory.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(CheckPositiveSize(*o.device_memory,
                                               absl::StrCat(*o.device_memory),
                                               where("device_memory")));
  }
  if (o.cross_stream_reuse.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(CheckKeyword(*o.cross_stream_reuse,
                                          where("cross_stream"), kCrossStream));
  }
  if (o.growth_policy.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(
        CheckKeyword(*o.growth_policy, where("growth"), kGrowth));
  }
  if (o.growth_granularity.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(CheckPositiveSize(
        *o.growth_granularity, absl::StrCat(*o.growth_granularity),
        where("granularity")));
    GPUALLOC_RETURN_IF_ERROR(CheckGranularity(
        *o.growth_granularity, absl::StrCat(*o.growth_granularity),
        where("granularity")));
  }
  if (o.min_block_size.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(CheckMinBlock(*o.min_block_size,
                                           absl::StrCat(*o.min_block_size),
                                           where("min_block")));
  }
  if (o.memory_kind.has_value()) {
    GPUALLOC_RETURN_IF_ERROR(
        CheckKeyword(*o.memory_kind, where("memory_kind"), kMemoryKinds));
  }
  return absl::OkStatus();
}

// Whether `key`'s field of `o` is set.
bool IsSet(Key key, const ConfigOverrides& o) {
  switch (key) {
    case Key::kAllocator:
      return o.mode.has_value();
    case Key::kPreallocate:
      return o.preallocate.has_value();
    case Key::kMemFraction:
      return o.memory_fraction.has_value();
    case Key::kMemLimit:
      return o.memory_limit.has_value();
    case Key::kExpandable:
      return o.expandable.has_value();
    case Key::kArch:
      return o.arch.has_value();
    case Key::kGc:
      return o.garbage_collection.has_value();
    case Key::kBackend:
      return o.backend.has_value();
    case Key::kDeviceMemory:
      return o.device_memory.has_value();
    case Key::kCrossStream:
      return o.cross_stream_reuse.has_value();
    case Key::kGrowth:
      return o.growth_policy.has_value();
    case Key::kGranularity:
      return o.growth_granularity.has_value();
    case Key::kMinBlock:
      return o.min_block_size.has_value();
    case Key::kSplitBound:
      return o.max_internal_fragmentation.has_value();
    case Key::kName:
      return o.name.has_value();
    case Key::kMemoryKind:
      return o.memory_kind.has_value();
  }
  return false;
}

// Copies `key`'s field from `from` to `to`.
void CopyField(Key key, const ConfigOverrides& from, ConfigOverrides& to) {
  switch (key) {
    case Key::kAllocator:
      to.mode = from.mode;
      return;
    case Key::kPreallocate:
      to.preallocate = from.preallocate;
      return;
    case Key::kMemFraction:
      to.memory_fraction = from.memory_fraction;
      return;
    case Key::kMemLimit:
      to.memory_limit = from.memory_limit;
      return;
    case Key::kExpandable:
      to.expandable = from.expandable;
      return;
    case Key::kArch:
      to.arch = from.arch;
      return;
    case Key::kGc:
      to.garbage_collection = from.garbage_collection;
      return;
    case Key::kBackend:
      to.backend = from.backend;
      return;
    case Key::kDeviceMemory:
      to.device_memory = from.device_memory;
      return;
    case Key::kCrossStream:
      to.cross_stream_reuse = from.cross_stream_reuse;
      return;
    case Key::kGrowth:
      to.growth_policy = from.growth_policy;
      return;
    case Key::kGranularity:
      to.growth_granularity = from.growth_granularity;
      return;
    case Key::kMinBlock:
      to.min_block_size = from.min_block_size;
      return;
    case Key::kSplitBound:
      to.max_internal_fragmentation = from.max_internal_fragmentation;
      return;
    case Key::kName:
      to.name = from.name;
      return;
    case Key::kMemoryKind:
      to.memory_kind = from.memory_kind;
      return;
  }
}

// The effective value of `key` in `c`, in configuration-string form (sizes in
// bytes, so that "key=value" reads back as the same setting).
std::string ValueText(Key key, const Config& c) {
  const Options& o = c.options;
  switch (key) {
    case Key::kAllocator:
      return KeywordName(o.mode, kModes);
    case Key::kPreallocate:
      return o.preallocate ? "true" : "false";
    case Key::kMemFraction:
      return FormatFraction(o.memory_fraction);
    case Key::kMemLimit:
      return o.memory_limit == 0 ? "unset" : absl::StrCat(o.memory_limit);
    case Key::kExpandable:
      return KeywordName(o.expandable, kTristates);
    case Key::kArch:
      return o.arch;
    case Key::kGc:
      return o.garbage_collection ? "true" : "false";
    case Key::kBackend:
      return std::string(BackendKindName(c.backend));
    case Key::kDeviceMemory:
      return c.device_memory == 0 ? "unset" : absl::StrCat(c.device_memory);
    case Key::kCrossStream:
      return KeywordName(o.cross_stream_reuse, kCrossStream);
    case Key::kGrowth:
      return KeywordName(o.growth_policy, kGrowth);
    case Key::kGranularity:
      return o.growth_granularity == 0 ? "profile"
                                       : absl::StrCat(o.growth_granularity);
    case Key::kMinBlock:
      return o.min_block_size == 0 ? "profile" : absl::StrCat(o.min_block_size);
    case Key::kSplitBound:
      return absl::StrCat(o.max_internal_fragmentation);
    case Key::kName:
      return o.name;
    case Key::kMemoryKind:
      return std::string(MemoryKindName(c.memory_kind));
  }
  return "";
}

// The two environments config.h offers, as named types, so that
// ResolveConfig can list the variables they hold (EnvLookup::target).
struct ProcessLookup {
  std::optional<std::string> operator()(absl::string_view name) const {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  }
};

struct MapLookup {
  std::map<std::string, std::string> variables;
  std::optional<std::string> operator()(absl::string_view name) const {
    auto it = variables.find(std::string(name));
    if (it == variables.end()) return std::nullopt;
    return it->second;
  }
};

// The names of the variables `env` holds; empty for a lookup of another kind
// (a function can only be asked for names it is given).
std::vector<std::string> VariableNames(const EnvLookup& env) {
  std::vector<std::string> names;
  if (const MapLookup* map = env.target<MapLookup>()) {
    for (const auto& [name, value] : map->variables) names.push_back(name);
  } else if (env.target<ProcessLookup>() != nullptr) {
    for (char** entry = environ; entry != nullptr && *entry != nullptr;
         ++entry) {
      const absl::string_view text(*entry);
      names.emplace_back(text.substr(0, text.find('=')));
    }
  }
  return names;
}

// GPUALLOC_* variables that are not settings: the project's build and test
// scripts' own (tools/test.sh and tools/lib-build.sh, the randomized tests'
// seed, the meson test environment, tools/device-check.sh). They reach the
// programs those scripts run, so they are allowed here; the library reads
// none of them.
constexpr std::array<absl::string_view, 7> kNotSettings = {
    "GPUALLOC_SKIP_DEPS",
    "GPUALLOC_TEST_LABEL",
    "GPUALLOC_TEST_SEED",
    "GPUALLOC_SOURCE_ROOT",
    "GPUALLOC_ROOT",
    "GPUALLOC_BUILD_DIR",
    "GPUALLOC_DEVICE_CHECK_ASSUME_GPU",
};

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

// Every GPUALLOC_* variable set in `env` names a setting (or is one of the
// scripts' own): a misspelt one would otherwise be ignored without a word,
// while the configuration string refuses an unknown key.
absl::Status CheckUnknownVariables(const EnvLookup& env) {
  std::vector<std::string> names = VariableNames(env);
  std::sort(names.begin(), names.end());
  std::vector<std::string> unknown;
  for (const std::string& name : names) {
    if (!absl::StartsWith(name, "GPUALLOC_")) continue;
    bool known = std::find(kNotSettings.begin(), kNotSettings.end(), name) !=
                 kNotSettings.end();
    absl::string_view closest;
    std::size_t best = std::numeric_limits<std::size_t>::max();
    for (const KeyInfo& k : kKeys) {
      if (k.variable == name) known = true;
      const std::size_t d = Distance(name, k.variable);
      if (d < best) {
        best = d;
        closest = k.variable;
      }
    }
    if (known) continue;
    const std::optional<std::string> value = env(name);
    unknown.push_back(absl::StrCat(name, "=", Quoted(value.value_or("")),
                                   " (did you mean ", closest, "?)"));
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown GPUALLOC_* variable", unknown.size() == 1 ? " " : "s ",
      absl::StrJoin(unknown, ", "),
      ": no such setting; unset it, or see the variables in "
      "gpualloc/config.h"));
}

// Reads and parses one variable into `out`; returns whether it was set.
absl::StatusOr<bool> ReadVariable(const EnvLookup& env, Key key,
                                  absl::string_view variable, bool alias,
                                  ConfigOverrides& out) {
  const std::optional<std::string> raw = env(variable);
  if (!raw.has_value()) return false;
  const absl::string_view value = absl::StripAsciiWhitespace(*raw);
  const Where where{std::string(variable), ""};
  if (value.empty()) {
    return Bad(where, *raw, "set but empty; unset it to take the default");
  }
  GPUALLOC_RETURN_IF_ERROR(ParseInto(key, value, where, alias, out));
  return true;
}

}  // namespace

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

EnvLookup ProcessEnvironment() { return ProcessLookup{}; }

EnvLookup MapEnvironment(std::map<std::string, std::string> variables) {
  return MapLookup{std::move(variables)};
}

std::vector<ConfigKeyInfo> ConfigKeys() {
  std::vector<ConfigKeyInfo> keys;
  for (const KeyInfo& k : kKeys) {
    keys.push_back(ConfigKeyInfo{k.name, k.variable, k.values});
  }
  return keys;
}

absl::StatusOr<std::uint64_t> ParseSize(absl::string_view text,
                                        absl::string_view what) {
  const Where where{std::string(what), ""};
  const absl::string_view value = absl::StripAsciiWhitespace(text);
  if (value.empty()) return Bad(where, text, "empty; expected a size");
  return ParseSizeAt(value, where);
}

absl::StatusOr<ConfigOverrides> ParseConfigString(absl::string_view text) {
  ConfigOverrides out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  std::array<int, kKeys.size()> set_by_entry = {};  // 0: not set yet
  std::size_t start = 0;
  for (int entry = 1;; ++entry) {
    std::size_t end = text.find(',', start);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view raw = text.substr(start, end - start);
    const absl::string_view item = absl::StripLeadingAsciiWhitespace(raw);
    // 1-based column of the entry's first non-space character.
    const std::size_t column = start + (raw.size() - item.size()) + 1;
    const std::string place =
        absl::StrFormat(" (entry %d, column %d)", entry, column);
    const auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrFormat("config string %s: entry %d at column %d: %s",
                          Quoted(text), entry, column, why));
    };

    const std::size_t eq = item.find('=');
    if (absl::StripTrailingAsciiWhitespace(item).empty()) {
      return error("empty entry (expected key=value)");
    }
    if (eq == absl::string_view::npos) {
      return error(
          absl::StrFormat("%s has no '=' (expected key=value)",
                          Quoted(absl::StripTrailingAsciiWhitespace(item))));
    }
    const absl::string_view key =
        absl::StripTrailingAsciiWhitespace(item.substr(0, eq));
    const absl::string_view value =
        absl::StripAsciiWhitespace(item.substr(eq + 1));
    if (key.empty()) return error("empty key before '='");
    const KeyInfo* info = nullptr;
    std::size_t index = 0;
    for (std::size_t i = 0; i < kKeys.size(); ++i) {
      if (kKeys[i].name == key) {
        info = &kKeys[i];
        index = i;
      }
    }
    if (info == nullptr) {
      return error(absl::StrFormat("unknown key %s; valid keys: %s",
                                   Quoted(key), KeyList()));
    }
    if (set_by_entry[index] != 0) {
      return error(
          absl::StrFormat("duplicate key \"%s\" (first set by entry %d)", key,
                          set_by_entry[index]));
    }
    set_by_entry[index] = entry;
    const Where where{absl::StrCat("config string ", key), place};
    if (value.empty()) {
      return Bad(where, value, "empty value");
    }
    GPUALLOC_RETURN_IF_ERROR(
        ParseInto(info->key, value, where, /*alias=*/false, out));
    if (end == text.size()) break;
    start = end + 1;
  }
  return out;
}

absl::StatusOr<Config> ResolveConfig(const ConfigOverrides& overrides,
                                     const EnvLookup& env) {
  ConfigOverrides options = overrides;
  GPUALLOC_RETURN_IF_ERROR(CheckOverrides(options));
  GPUALLOC_RETURN_IF_ERROR(CheckUnknownVariables(env));

  // The two fraction aliases name the same setting at the same level: when
  // both are set there is no telling which one the user meant, even when they
  // agree today.
  {
    const KeyInfo& k = kKeys[static_cast<std::size_t>(Key::kMemFraction)];
    const std::optional<std::string> a = env(k.aliases[0]);
    const std::optional<std::string> b = env(k.aliases[1]);
    if (a.has_value() && b.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s=%s and %s=%s are both set; they are aliases of %s, set "
          "only one",
          k.aliases[0], Quoted(*a), k.aliases[1], Quoted(*b), k.variable));
    }
  }

  ConfigOverrides variables;  // GPUALLOC_* values
  ConfigOverrides aliases;    // JAX/XLA/TF values
  std::array<std::string, kKeys.size()> alias_used;
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    const KeyInfo& k = kKeys[i];
    GPUALLOC_RETURN_IF_ERROR(
        ReadVariable(env, k.key, k.variable, /*alias=*/false, variables)
            .status());
    for (absl::string_view alias : k.aliases) {
      if (alias.empty()) continue;
      GPUALLOC_ASSIGN_OR_RETURN(
          const bool set,
          ReadVariable(env, k.key, alias, /*alias=*/true, aliases));
      if (set) alias_used[i] = std::string(alias);
    }
  }

  // Per key: option > variable > alias > default.
  ConfigOverrides merged;
  std::array<ValueOrigin, kKeys.size()> origin = {};
  std::array<std::string, kKeys.size()> source;
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    const KeyInfo& k = kKeys[i];
    if (IsSet(k.key, options)) {
      CopyField(k.key, options, merged);
      origin[i] = ValueOrigin::kOption;
      source[i] = "option";
    } else if (IsSet(k.key, variables)) {
      CopyField(k.key, variables, merged);
      origin[i] = ValueOrigin::kVariable;
      source[i] = std::string(k.variable);
    } else if (IsSet(k.key, aliases)) {
      CopyField(k.key, aliases, merged);
      origin[i] = ValueOrigin::kAlias;
      source[i] = alias_used[i];
    } else {
      origin[i] = ValueOrigin::kDefault;
      source[i] = "default";
    }
  }

  // The limit is one setting with two spellings: a fraction from a higher
  // level beats a limit from a lower one.
  auto rank = [](ValueOrigin v) {
    switch (v) {
      case ValueOrigin::kOption:
        return 3;
      case ValueOrigin::kVariable:
        return 2;
      case ValueOrigin::kAlias:
        return 1;
      case ValueOrigin::kDefault:
        break;
    }
    return 0;
  };
  {
    const std::size_t f = static_cast<std::size_t>(Key::kMemFraction);
    const std::size_t l = static_cast<std::size_t>(Key::kMemLimit);
    if (merged.memory_limit.has_value() && rank(origin[f]) > rank(origin[l])) {
      merged.memory_limit.reset();
      source[l] = absl::StrCat(source[l], " (overridden by mem_fraction from ",
                               source[f], ")");
    }
  }

  // Region sizes are whole minimum blocks: a granularity and a min_block
  // that disagree could never allocate, on any device.
  if (merged.growth_granularity && merged.min_block_size &&
      *merged.growth_granularity % *merged.min_block_size != 0) {
    const std::size_t g = static_cast<std::size_t>(Key::kGranularity);
    const std::size_t b = static_cast<std::size_t>(Key::kMinBlock);
    return absl::InvalidArgumentError(absl::StrCat(
        "granularity=", *merged.growth_granularity, " (", source[g],
        ") is not a multiple of min_block=", *merged.min_block_size, " (",
        source[b], "): region sizes are whole minimum blocks"));
  }

  Config config;
  Options& o = config.options;
  if (merged.mode) o.mode = *merged.mode;
  if (merged.preallocate) o.preallocate = *merged.preallocate;
  if (merged.memory_fraction) o.memory_fraction = *merged.memory_fraction;
  if (merged.memory_limit) o.memory_limit = *merged.memory_limit;
  if (merged.expandable) o.expandable = *merged.expandable;
  if (merged.arch) o.arch = *merged.arch;
  if (merged.garbage_collection)
    o.garbage_collection = *merged.garbage_collection;
  if (merged.cross_stream_reuse)
    o.cross_stream_reuse = *merged.cross_stream_reuse;
  if (merged.growth_policy) o.growth_policy = *merged.growth_policy;
  if (merged.growth_granularity)
    o.growth_granularity = *merged.growth_granularity;
  if (merged.min_block_size) o.min_block_size = *merged.min_block_size;
  if (merged.max_internal_fragmentation)
    o.max_internal_fragmentation = *merged.max_internal_fragmentation;
  if (merged.name) o.name = *merged.name;
  if (merged.backend) config.backend = *merged.backend;
  if (merged.device_memory) config.device_memory = *merged.device_memory;
  if (merged.memory_kind) config.memory_kind = *merged.memory_kind;

  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    config.settings.push_back(ConfigSetting{std::string(kKeys[i].name),
                                            ValueText(kKeys[i].key, config),
                                            origin[i], source[i]});
  }
  return config;
}

absl::StatusOr<Config> ResolveConfig(absl::string_view config_string,
                                     const EnvLookup& env) {
  GPUALLOC_ASSIGN_OR_RETURN(ConfigOverrides overrides,
                            ParseConfigString(config_string));
  GPUALLOC_ASSIGN_OR_RETURN(Config config, ResolveConfig(overrides, env));
  for (ConfigSetting& s : config.settings) {
    if (s.origin == ValueOrigin::kOption) s.source = "config string";
  }
  return config;
}

}  // namespace gpualloc
