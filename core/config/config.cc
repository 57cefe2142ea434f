// SPDX-License-Identifier: Apache-2.0
// core/config/config.cc: the configuration string, the environment and the
// defaults resolved into allocator Options.
//
// Parsing choices (the tests in tests/core/config_test.cc pin each one):
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
//  - PyTorch's allocator configuration is read at the level of the aliases,
//    with PyTorch's spellings exactly; config.h lists what its keys map to,
//    docs/REFERENCE.md ("PyTorch's variables") why the others cannot be.
//  - Every setting keeps how the user set it (ConfigSetting::set_by and
//    ::written), so that an error found later, against the device, can name
//    the variable or key and the value as written (runtime/backend_factory.cc
//    restates core/config/options.cc's problems with them).
//
// Adding a key: every place it must go today.
//  1. include/gpualloc/core/allocator.h: its Options field and default (or a
//     Config member in include/gpualloc/core/config.h for a key that is no
//     allocator option, as backend and device_memory are).
//  2. include/gpualloc/core/config.h: its ConfigOverrides field
//  (std::optional),
//     and its line in the table of keys in the header comment.
//  3. Here, kKeys: one Describe row (key, GPUALLOC_* variable, aliases, the
//     values for --help, and the modes column: ReadBy for a key some modes
//     ignore, BfcOnly with the refusal's words for one the other modes
//     refuse; core::CheckOptions then refuses it there with no code of its
//     own). A new kind of value also needs its ValueType here and its parser
//     in core/config/config_parse.h/.cc; a PyTorch key that maps to it, its row
//     in config_parse.cc's PytorchKeys().
//  4. core/config/options.cc, kFields: the Options field's key and its default
//  in
//     C++ terms (the runtime layer restates option errors with the key), and
//     CheckOptions / ResolveOptions for any check of the value's range.
//  5. README.md's and docs/REFERENCE.md's key tables, which
//     tests/core/config_test.cc checks against ConfigKeys(), and that test's
//     kAllKeys list; a test of the new key's parsing there.
//  6. A bfc-only key the other modes ignore: tools/info.cc, BfcOnlyKeys (the
//     "not used" line).
#include "gpualloc/core/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/config/config_parse.h"
#include "core/config/key_modes.h"
#include "core/status_macros.h"

namespace gpualloc {
namespace {

using config_internal::Bad;
using config_internal::Quoted;
using config_internal::ReadTrimmed;
using config_internal::VariableNames;
using config_internal::Where;

// ------------------------------------------------------------ value types

// How one kind of value is read from text, checked when a program gives it
// directly, and written back.
template <typename T>
struct ValueType {
  absl::StatusOr<T> (*parse)(absl::string_view value, const Where& where);
  // An alias's spelling where it differs (XLA_PYTHON_CLIENT_ALLOCATOR); null
  // when it does not.
  absl::StatusOr<T> (*parse_alias)(absl::string_view value, const Where& where);
  // Checks a programmatic value as strictly as a parsed one and brings it to
  // its canonical spelling; null when every value of T is valid.
  absl::Status (*check)(T& value, const Where& where);
  // The value in configuration-string form (sizes in bytes, so that
  // "key=value" reads back as the same setting).
  std::string (*print)(const T& value);
};

// One of a fixed list of keywords (config_parse.h's tables).
template <const auto& kNames>
constexpr auto Keyword() {
  using T =
      typename std::remove_cvref_t<decltype(kNames)>::value_type::second_type;
  return ValueType<T>{
      [](absl::string_view value, const Where& where) {
        return config_internal::ParseKeyword(value, where, kNames);
      },
      nullptr,
      [](T& value, const Where& where) {
        return config_internal::CheckKeyword(value, where, kNames);
      },
      [](const T& value) {
        return config_internal::KeywordName(value, kNames);
      }};
}
template <const auto& kNames>
inline constexpr auto kKeyword = Keyword<kNames>();

// The allocator's keywords, with JAX's own under its alias.
constexpr ValueType<AllocatorMode> AllocatorValues() {
  ValueType<AllocatorMode> values = Keyword<config_internal::kModes>();
  values.parse_alias = Keyword<config_internal::kXlaModes>().parse;
  return values;
}
constexpr ValueType<AllocatorMode> kAllocator = AllocatorValues();

constexpr ValueType<bool> kBool = {
    config_internal::ParseBool, nullptr, nullptr,
    [](const bool& b) -> std::string { return b ? "true" : "false"; }};

constexpr ValueType<double> kFraction = {
    config_internal::ParseFraction, nullptr,
    [](double& f, const Where& where) {
      return config_internal::CheckFraction(
          f, config_internal::FormatFraction(f), where);
    },
    [](const double& f) { return config_internal::FormatFraction(f); }};

// gc_threshold: 0 (off) or a fraction in (0, 1) of the limit.
constexpr absl::string_view kNotThreshold =
    "not 0 (off) or a decimal fraction of the limit in (0, 1), e.g. 0.8";
absl::Status CheckThreshold(double t, absl::string_view value,
                            const Where& where) {
  if (std::isfinite(t) && t >= 0 && t < 1) return absl::OkStatus();
  return Bad(where, value, kNotThreshold);
}
constexpr ValueType<double> kThreshold = {
    [](absl::string_view value, const Where& where) -> absl::StatusOr<double> {
      if (!value.empty() &&
          value.find_first_not_of("0.") == absl::string_view::npos &&
          std::count(value.begin(), value.end(), '.') <= 1 &&
          value.find('0') != absl::string_view::npos) {
        return 0.0;  // "0", "0.0", ".0"
      }
      const absl::StatusOr<double> t =
          config_internal::ParseFraction(value, where);
      if (!t.ok()) return Bad(where, value, kNotThreshold);
      GPUALLOC_RETURN_IF_ERROR(CheckThreshold(*t, value, where));
      return *t;
    },
    nullptr,
    [](double& t, const Where& where) {
      return CheckThreshold(t, config_internal::FormatFraction(t), where);
    },
    [](const double& t) { return config_internal::FormatFraction(t); }};

std::string SizeOr(std::uint64_t bytes, absl::string_view zero) {
  return bytes == 0 ? std::string(zero) : absl::StrCat(bytes);
}

absl::Status CheckPositive(std::uint64_t& bytes, const Where& where) {
  return config_internal::CheckPositiveSize(bytes, absl::StrCat(bytes), where);
}

// A size of more than 0 bytes; 0 in Options means unset.
constexpr ValueType<std::uint64_t> kPositiveSize = {
    config_internal::ParsePositiveSize, nullptr, CheckPositive,
    [](const std::uint64_t& bytes) { return SizeOr(bytes, "unset"); }};

absl::Status CheckGranularity(std::uint64_t& bytes, const Where& where) {
  GPUALLOC_RETURN_IF_ERROR(CheckPositive(bytes, where));
  return config_internal::CheckGranularity(bytes, absl::StrCat(bytes), where);
}

// Region sizes; 0 in Options means the profile's.
constexpr ValueType<std::uint64_t> kGranularity = {
    [](absl::string_view value,
       const Where& where) -> absl::StatusOr<std::uint64_t> {
      GPUALLOC_ASSIGN_OR_RETURN(
          std::uint64_t bytes,
          config_internal::ParsePositiveSize(value, where));
      GPUALLOC_RETURN_IF_ERROR(
          config_internal::CheckGranularity(bytes, value, where));
      return bytes;
    },
    nullptr, CheckGranularity,
    [](const std::uint64_t& bytes) { return SizeOr(bytes, "profile"); }};

// The chunk rounding; 0 in Options means the profile's.
constexpr ValueType<std::uint64_t> kMinBlock = {
    config_internal::ParseMinBlock, nullptr,
    [](std::uint64_t& bytes, const Where& where) {
      return config_internal::CheckMinBlock(bytes, absl::StrCat(bytes), where);
    },
    [](const std::uint64_t& bytes) { return SizeOr(bytes, "profile"); }};

// Any size, 0 included: 0 is a real setting (split_bound: always split).
constexpr ValueType<std::uint64_t> kSize = {
    config_internal::ParseSizeAt, nullptr, nullptr,
    [](const std::uint64_t& bytes) { return absl::StrCat(bytes); }};

// size_divisions: 0 (off) or a power of two from 2 to 64.
constexpr ValueType<std::uint32_t> kDivisions = {
    config_internal::ParseSizeDivisions, nullptr,
    [](std::uint32_t& n, const Where& where) {
      return config_internal::CheckSizeDivisions(n, absl::StrCat(n), where);
    },
    [](const std::uint32_t& n) { return absl::StrCat(n); }};

// history: 0 (off) to 2^24 entries.
constexpr ValueType<std::uint64_t> kHistory = {
    config_internal::ParseHistory, nullptr,
    [](std::uint64_t& n, const Where& where) {
      return config_internal::CheckHistory(n, absl::StrCat(n), where);
    },
    [](const std::uint64_t& n) { return absl::StrCat(n); }};

std::string PrintText(const std::string& text) { return text; }

constexpr ValueType<std::string> kArch = {
    config_internal::ParseArch, nullptr,
    [](std::string& arch, const Where& where) -> absl::Status {
      GPUALLOC_ASSIGN_OR_RETURN(arch, config_internal::ParseArch(arch, where));
      return absl::OkStatus();
    },
    PrintText};

constexpr ValueType<std::string> kText = {config_internal::ParseName, nullptr,
                                          nullptr, PrintText};

// ----------------------------------------------------------------- modes

// The modes column of kKeys (core/config/key_modes.h): the allocator modes that
// read a key, every mode unless its row says otherwise. The other modes either
// ignore the key (no `asks`: tools/info.cc names such settings "not used")
// or, with `asks`, refuse a value that asks for what only those modes have,
// in core::CheckOptions, with a message made of the row's words.
struct KeyModes {
  core::ModeSet modes = core::kAllModes;
  absl::string_view field;  // the Options field, for a refusal
  std::string (*asks)(const Options& options) = nullptr;
  absl::string_view feature;
  absl::string_view lacks;
  absl::string_view reset;
};

constexpr core::ModeSet kBfcMode = core::ModeBit(AllocatorMode::kBfc);

// Read by the modes in `modes` only, ignored by the others.
constexpr KeyModes ReadBy(core::ModeSet modes) {
  KeyModes m;
  m.modes = modes;
  return m;
}

// Read by allocator=bfc only and refused by the others when `asks` gives a
// value (core::ModeRefusal says what each word is).
constexpr KeyModes BfcOnly(absl::string_view field,
                           std::string (*asks)(const Options&),
                           absl::string_view feature, absl::string_view lacks,
                           absl::string_view reset) {
  return KeyModes{kBfcMode, field, asks, feature, lacks, reset};
}

// The value of Options field kField in C++ terms when it is not 0.
template <auto kField>
std::string NonZero(const Options& o) {
  return o.*kField != 0 ? absl::StrCat(o.*kField) : std::string();
}
std::string ExpandableOn(const Options& o) {
  return o.expandable == Tristate::kOn ? "kOn" : "";
}
std::string ThresholdOn(const Options& o) {
  return o.gc_threshold != 0 ? absl::StrFormat("%g", o.gc_threshold)
                             : std::string();
}

// ------------------------------------------------------------------ keys

// One configuration key: its names, and what it does with a ConfigOverrides
// field and the Config value it decides.
struct KeyDescriptor {
  absl::string_view name;                    // configuration-string key
  absl::string_view variable;                // GPUALLOC_*
  std::array<absl::string_view, 2> aliases;  // empty when fewer
  absl::string_view values;                  // for --help (ConfigKeys)
  // Parses `value` into the key's field of `out`; `alias` selects the
  // alias's spelling where it differs.
  absl::Status (*parse)(absl::string_view value, const Where& where, bool alias,
                        ConfigOverrides& out);
  // Checks the field of a programmatic ConfigOverrides (when set).
  absl::Status (*check)(ConfigOverrides& o, const Where& where);
  bool (*is_set)(const ConfigOverrides& o);
  void (*copy)(const ConfigOverrides& from, ConfigOverrides& to);
  // Sets the Config value from the field, when set.
  void (*apply)(const ConfigOverrides& from, Config& to);
  // The effective value in `c`, in configuration-string form.
  std::string (*print)(const Config& c);
  // The modes column: the allocator modes that read the key.
  KeyModes modes;
};

// object.*kMember, or object.*kMember.*kRest... (a member of Options inside
// Config).
template <auto kMember, auto... kRest>
constexpr auto& Member(auto& object) {
  if constexpr (sizeof...(kRest) == 0) {
    return object.*kMember;
  } else {
    return Member<kRest...>(object.*kMember);
  }
}

// A key whose ConfigOverrides field is kField, read as kValues, deciding the
// Config value at the member path kTarget.
template <auto kField, const auto& kValues, auto... kTarget>
constexpr KeyDescriptor Describe(absl::string_view name,
                                 absl::string_view variable,
                                 std::array<absl::string_view, 2> aliases,
                                 absl::string_view values,
                                 KeyModes modes = {}) {
  return KeyDescriptor{
      name,
      variable,
      aliases,
      values,
      [](absl::string_view value, const Where& where, bool alias,
         ConfigOverrides& out) -> absl::Status {
        const auto parse = alias && kValues.parse_alias != nullptr
                               ? kValues.parse_alias
                               : kValues.parse;
        GPUALLOC_ASSIGN_OR_RETURN(out.*kField, parse(value, where));
        return absl::OkStatus();
      },
      [](ConfigOverrides& o, const Where& where) {
        if (kValues.check == nullptr || !(o.*kField).has_value()) {
          return absl::OkStatus();
        }
        return kValues.check(*(o.*kField), where);
      },
      [](const ConfigOverrides& o) { return (o.*kField).has_value(); },
      [](const ConfigOverrides& from, ConfigOverrides& to) {
        to.*kField = from.*kField;
      },
      [](const ConfigOverrides& from, Config& to) {
        if ((from.*kField).has_value())
          Member<kTarget...>(to) = *(from.*kField);
      },
      [](const Config& c) { return kValues.print(Member<kTarget...>(c)); },
      modes};
}

using O = ConfigOverrides;

// The table of config.h, in its order (Config::settings follows it). A new
// key is one line here and its ConfigOverrides field.
constexpr std::array kKeys = {
    Describe<&O::mode, kAllocator, &Config::options, &Options::mode>(
        "allocator", "GPUALLOC_ALLOCATOR", {"XLA_PYTHON_CLIENT_ALLOCATOR"},
        "bfc|platform|async"),
    Describe<&O::preallocate, kBool, &Config::options, &Options::preallocate>(
        "preallocate", "GPUALLOC_PREALLOCATE",
        {"XLA_PYTHON_CLIENT_PREALLOCATE"}, "true|false", ReadBy(kBfcMode)),
    Describe<&O::memory_fraction, kFraction, &Config::options,
             &Options::memory_fraction>(
        "mem_fraction", "GPUALLOC_MEM_FRACTION",
        {"XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"},
        "(0, 1] of total memory"),
    Describe<&O::memory_limit, kPositiveSize, &Config::options,
             &Options::memory_limit>("mem_limit", "GPUALLOC_MEM_LIMIT", {},
                                     "a size: 40GiB, 512MB"),
    Describe<&O::expandable, kKeyword<config_internal::kTristates>,
             &Config::options, &Options::expandable>(
        "expandable", "GPUALLOC_EXPANDABLE", {}, "true|false|auto",
        BfcOnly("expandable", ExpandableOn, "",
                "manages no regions of its own to expand",
                "expandable regions where they work")),
    Describe<&O::arch, kArch, &Config::options, &Options::arch>(
        "arch", "GPUALLOC_ARCH", {}, "auto or a profile"),
    Describe<&O::garbage_collection, kBool, &Config::options,
             &Options::garbage_collection>(
        "gc", "GPUALLOC_GC", {"TF_ENABLE_GPU_GARBAGE_COLLECTION"}, "true|false",
        ReadBy(kBfcMode | core::ModeBit(AllocatorMode::kAsync))),
    Describe<&O::gc_threshold, kThreshold, &Config::options,
             &Options::gc_threshold>(
        "gc_threshold", "GPUALLOC_GC_THRESHOLD", {},
        "0 (off) or a fraction in (0, 1)",
        BfcOnly("gc_threshold", ThresholdOn,
                "giving free memory back before growth",
                "does not grow regions of its own", "off")),
    Describe<&O::backend, kKeyword<config_internal::kBackends>,
             &Config::backend>("backend", "GPUALLOC_BACKEND", {},
                               "auto|sim|cuda|hip"),
    Describe<&O::device_memory, kPositiveSize, &Config::device_memory>(
        "device_memory", "GPUALLOC_DEVICE_MEMORY", {}, "sim only: a size"),
    Describe<&O::cross_stream_reuse, kKeyword<config_internal::kCrossStream>,
             &Config::options, &Options::cross_stream_reuse>(
        "cross_stream", "GPUALLOC_CROSS_STREAM", {},
        "when_complete|stream_wait", ReadBy(kBfcMode)),
    Describe<&O::growth_policy, kKeyword<config_internal::kGrowth>,
             &Config::options, &Options::growth_policy>(
        "growth", "GPUALLOC_GROWTH", {}, "exact|doubling", ReadBy(kBfcMode)),
    Describe<&O::growth_granularity, kGranularity, &Config::options,
             &Options::growth_granularity>(
        "granularity", "GPUALLOC_GRANULARITY", {}, "a size: region sizes"),
    Describe<&O::min_block_size, kMinBlock, &Config::options,
             &Options::min_block_size>("min_block", "GPUALLOC_MIN_BLOCK", {},
                                       "power of two >= 16 B"),
    Describe<&O::max_internal_fragmentation, kSize, &Config::options,
             &Options::max_internal_fragmentation>(
        "split_bound", "GPUALLOC_SPLIT_BOUND", {}, "a size, 0 allowed",
        ReadBy(kBfcMode)),
    Describe<&O::size_divisions, kDivisions, &Config::options,
             &Options::size_divisions>(
        "size_divisions", "GPUALLOC_SIZE_DIVISIONS", {},
        "0 or a power of two 2..64",
        BfcOnly("size_divisions", NonZero<&Options::size_divisions>,
                "size rounding", "has no chunks of its own to round",
                "no rounding")),
    Describe<&O::history, kHistory, &Config::options, &Options::history>(
        "history", "GPUALLOC_HISTORY", {}, "0 or events kept, <= 2^24",
        BfcOnly("history", NonZero<&Options::history>, "the allocation history",
                "records none", "no history")),
    Describe<&O::front_cache, kSize, &Config::options, &Options::front_cache>(
        "front_cache", "GPUALLOC_FRONT_CACHE", {}, "a size per stream, 0 = off",
        BfcOnly("front_cache", NonZero<&Options::front_cache>, "a front cache",
                "keeps no freed blocks to cache", "off")),
    Describe<&O::name, kText, &Config::options, &Options::name>(
        "name", "GPUALLOC_NAME", {}, "a label"),
    Describe<&O::memory_kind, kKeyword<config_internal::kMemoryKinds>,
             &Config::memory_kind>("memory_kind", "GPUALLOC_MEMORY_KIND", {},
                                   "coarse|fine (hip)"),
};

// The index of the key `name` in kKeys; kKeys.size() when there is none.
constexpr std::size_t KeyIndex(absl::string_view name) {
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    if (kKeys[i].name == name) return i;
  }
  return kKeys.size();
}
// The keys ResolveConfig treats together.
constexpr std::size_t kFractionKey = KeyIndex("mem_fraction");
constexpr std::size_t kLimitKey = KeyIndex("mem_limit");
constexpr std::size_t kGranularityKey = KeyIndex("granularity");
constexpr std::size_t kMinBlockKey = KeyIndex("min_block");
constexpr std::size_t kPreallocateKey = KeyIndex("preallocate");
static_assert(kFractionKey < kKeys.size() && kLimitKey < kKeys.size() &&
              kGranularityKey < kKeys.size() && kMinBlockKey < kKeys.size() &&
              kPreallocateKey < kKeys.size());

// Per key of kKeys: a text, e.g. the value as written.
using PerKey = std::array<std::string, kKeys.size()>;

std::string KeyList() {
  std::vector<absl::string_view> names;
  for (const KeyDescriptor& k : kKeys) names.push_back(k.name);
  return absl::StrJoin(names, ", ");
}

// The name of `names` closest to `name` (edit distance; the first on ties).
template <typename Names>
std::string Closest(absl::string_view name, const Names& names) {
  std::string closest;
  std::size_t best = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : names) {
    const std::size_t d = config_internal::Distance(name, candidate);
    if (d < best) {
      best = d;
      closest = std::string(candidate);
    }
  }
  return closest;
}

// Checks a programmatic option (ConfigOverrides) as strictly as a parsed one
// and brings names to their canonical spelling.
absl::Status CheckOverrides(ConfigOverrides& o) {
  for (const KeyDescriptor& k : kKeys) {
    GPUALLOC_RETURN_IF_ERROR(
        k.check(o, Where{absl::StrCat("option ", k.name), ""}));
  }
  return absl::OkStatus();
}

// GPUALLOC_* variables that are not settings: the project's build and test
// scripts' own (tools/test.sh and tools/lib-build.sh, the randomized tests'
// seed, the meson test environment, tools/device-check.sh). They reach the
// programs those scripts run, so they are allowed here; the library reads
// none of them.
constexpr std::array<absl::string_view, 8> kNotSettings = {
    "GPUALLOC_SKIP_DEPS",
    "GPUALLOC_TEST_LABEL",
    "GPUALLOC_TEST_SEED",
    "GPUALLOC_SOURCE_ROOT",
    "GPUALLOC_ROOT",
    "GPUALLOC_BUILD_DIR",
    "GPUALLOC_DEVICE_CHECK_ASSUME_GPU",
    "GPUALLOC_DEVICE_CHECK_PREBUILT",
};

constexpr absl::string_view kJaxPrefix = "XLA_PYTHON_CLIENT_";

// Every GPUALLOC_* variable set in `env` names a setting (or is one of the
// scripts' own): a misspelt one would otherwise be ignored without a word,
// while the configuration string refuses an unknown key. JAX's
// XLA_PYTHON_CLIENT_* variables are JAX's namespace, where gpualloc only
// stands in: one it does not know is a warning line in `warnings` (with the
// closest one it reads), not an error, and so is one it knows but does not
// read.
absl::Status CheckUnknownVariables(const EnvLookup& env,
                                   std::vector<std::string>& warnings) {
  std::vector<std::string> names = VariableNames(env);
  std::sort(names.begin(), names.end());
  std::vector<absl::string_view> variables;
  std::vector<absl::string_view> jax;
  for (const KeyDescriptor& k : kKeys) {
    variables.push_back(k.variable);
    for (absl::string_view alias : k.aliases) {
      if (absl::StartsWith(alias, kJaxPrefix)) jax.push_back(alias);
    }
  }
  for (const config_internal::JaxVariable& v :
       config_internal::UnreadJaxVariables()) {
    jax.push_back(v.name);
  }
  std::vector<std::string> unknown;
  for (const std::string& name : names) {
    const std::optional<std::string> value = env(name);
    const std::string as_set =
        absl::StrCat(name, "=", Quoted(value.value_or("")));
    if (absl::StartsWith(name, kJaxPrefix)) {
      if (std::find(jax.begin(), jax.end(), name) != jax.end()) {
        for (const config_internal::JaxVariable& v :
             config_internal::UnreadJaxVariables()) {
          if (v.name == name) {
            warnings.push_back(absl::StrCat("gpualloc: ", as_set,
                                            ": not read by gpualloc: ", v.why));
          }
        }
        continue;
      }
      warnings.push_back(
          absl::StrCat("gpualloc: ", as_set,
                       ": no such JAX variable, ignored (did you mean ",
                       Closest(name, jax), "?)"));
      continue;
    }
    if (!absl::StartsWith(name, "GPUALLOC_")) continue;
    if (std::find(kNotSettings.begin(), kNotSettings.end(), name) !=
            kNotSettings.end() ||
        std::find(variables.begin(), variables.end(), name) !=
            variables.end()) {
      continue;
    }
    unknown.push_back(absl::StrCat(as_set, " (did you mean ",
                                   Closest(name, variables), "?)"));
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown GPUALLOC_* variable", unknown.size() == 1 ? " " : "s ",
      absl::StrJoin(unknown, ", "),
      ": no such setting; unset it, or see the variables in "
      "gpualloc/core/config.h"));
}

// Reads and parses one variable into `out`; returns its value as written
// (trimmed), nullopt when it is not set.
absl::StatusOr<std::optional<std::string>> ReadVariable(
    const EnvLookup& env, const KeyDescriptor& key, absl::string_view variable,
    bool alias, ConfigOverrides& out) {
  GPUALLOC_ASSIGN_OR_RETURN(std::optional<std::string> value,
                            ReadTrimmed(env, variable));
  if (!value.has_value()) return value;
  GPUALLOC_RETURN_IF_ERROR(
      key.parse(*value, Where{std::string(variable), ""}, alias, out));
  return value;
}

// ---------------------------------------------------------------- PyTorch

// What PyTorch's allocator configuration sets, at the level of the JAX/XLA/TF
// aliases.
struct PytorchSettings {
  std::string variable;  // the variable read; empty when none is set
  ConfigOverrides values;
  // Per key of kKeys: the PyTorch entry that set it ("expandable_segments:
  // True"), its key and its value; empty when none did.
  PerKey entry;
  PerKey key;
  PerKey written;
  // What the warning lines say about the other entries, in their order:
  // "max_split_size_mb:512 is not supported, ignored: ...".
  std::vector<std::string> notes;
};

// Reads PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF and
// PYTORCH_HIP_ALLOC_CONF. PyTorch reads the first of them that is set; two
// set to different text are an error (there is no telling which one the user
// meant for gpualloc), the same text is fine (scripts copy one into another).
absl::StatusOr<PytorchSettings> ReadPytorch(const EnvLookup& env) {
  PytorchSettings out;
  std::string text;
  for (absl::string_view variable : config_internal::kPytorchVariables) {
    GPUALLOC_ASSIGN_OR_RETURN(const std::optional<std::string> value,
                              ReadTrimmed(env, variable));
    if (!value.has_value()) continue;
    if (out.variable.empty()) {
      out.variable = std::string(variable);
      text = *value;
    } else if (*value != text) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s=%s and %s=%s are both set, to different values; PyTorch reads "
          "only %s: set only one, or both to the same text",
          out.variable, Quoted(text), variable, Quoted(*value), out.variable));
    }
  }
  if (out.variable.empty()) return out;
  GPUALLOC_ASSIGN_OR_RETURN(
      const std::vector<config_internal::PytorchEntry> entries,
      config_internal::SplitPytorchConf(text, out.variable));
  const auto& keys = config_internal::PytorchKeys();
  for (const config_internal::PytorchEntry& e : entries) {
    const std::string entry = absl::StrCat(e.key, ":", e.value);
    const auto known =
        std::find_if(keys.begin(), keys.end(),
                     [&](const auto& k) { return k.name == e.key; });
    if (known == keys.end()) {
      std::vector<absl::string_view> names;
      for (const config_internal::PytorchKey& k : keys) names.push_back(k.name);
      out.notes.push_back(absl::StrCat(
          entry, " is no PyTorch allocator key, ignored (did you mean ",
          Closest(e.key, names), "?)"));
      continue;
    }
    switch (known->kind) {
      case config_internal::PytorchKeyKind::kUnsupported:
        out.notes.push_back(
            absl::StrCat(entry, " is not supported, ignored: ", known->why));
        continue;
      case config_internal::PytorchKeyKind::kHost:
        out.notes.push_back(absl::StrCat(
            entry,
            " is read by PyTorch's pinned host-memory allocator, which "
            "gpualloc (a device allocator) does not replace: it still takes "
            "effect there"));
        continue;
      case config_internal::PytorchKeyKind::kMapped:
        break;
    }
    const std::size_t i = KeyIndex(known->key);
    const Where where{absl::StrCat(out.variable, " ", e.key),
                      absl::StrFormat(" (entry %d)", e.entry)};
    const absl::StatusOr<std::string> value = known->translate(e.value, where);
    if (absl::IsUnimplemented(value.status())) {  // a form it cannot honour
      out.notes.push_back(absl::StrCat(
          entry, " is not supported, ignored: ", value.status().message()));
      continue;
    }
    GPUALLOC_RETURN_IF_ERROR(value.status());
    GPUALLOC_RETURN_IF_ERROR(
        kKeys[i].parse(*value, where, /*alias=*/false, out.values));
    out.entry[i] = entry;
    out.key[i] = e.key;
    out.written[i] = e.value;
  }
  return out;
}

// The value `o` gives key `k`, in configuration-string form.
std::string EffectiveValue(const KeyDescriptor& k, const ConfigOverrides& o) {
  Config c;
  k.apply(o, c);
  return k.print(c);
}

// ParseConfigString; `written` (when not null) gets each key's value as
// written.
absl::StatusOr<ConfigOverrides> ParseString(absl::string_view text,
                                            PerKey* written) {
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
      return error("empty entry (expected key=value; remove the extra comma)");
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
    if (key.empty()) return error("empty key before '=' (expected key=value)");
    const KeyDescriptor* info = nullptr;
    std::size_t index = 0;
    for (std::size_t i = 0; i < kKeys.size(); ++i) {
      if (kKeys[i].name == key) {
        info = &kKeys[i];
        index = i;
      }
    }
    if (info == nullptr) {
      std::vector<absl::string_view> names;
      for (const KeyDescriptor& k : kKeys) names.push_back(k.name);
      return error(
          absl::StrFormat("unknown key %s (did you mean %s?); valid keys: %s",
                          Quoted(key), Closest(key, names), KeyList()));
    }
    if (set_by_entry[index] != 0) {
      return error(absl::StrFormat(
          "duplicate key \"%s\" (first set by entry %d); set it once", key,
          set_by_entry[index]));
    }
    set_by_entry[index] = entry;
    const Where where{absl::StrCat("config string ", key), place};
    if (value.empty()) {
      return Bad(where, value,
                 "empty value; give one, or remove the entry to take the "
                 "default");
    }
    GPUALLOC_RETURN_IF_ERROR(info->parse(value, where, /*alias=*/false, out));
    if (written != nullptr) (*written)[index] = std::string(value);
    if (end == text.size()) break;
    start = end + 1;
  }
  return out;
}

constexpr absl::string_view kPytorchDocs =
    " (docs/REFERENCE.md, \"PyTorch's variables\")";

// The two fraction aliases name the same setting at the same level: when
// both are set there is no telling which one the user meant, even when they
// agree today.
absl::Status CheckFractionAliases(const EnvLookup& env) {
  const KeyDescriptor& k = kKeys[kFractionKey];
  const std::optional<std::string> a = env(k.aliases[0]);
  const std::optional<std::string> b = env(k.aliases[1]);
  if (a.has_value() && b.has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s=%s and %s=%s are both set; they are aliases of %s: unset one",
        k.aliases[0], Quoted(*a), k.aliases[1], Quoted(*b), k.variable));
  }
  return absl::OkStatus();
}

// What the environment's GPUALLOC_* variables and JAX/XLA/TF aliases set.
struct EnvironmentSettings {
  ConfigOverrides variables;  // GPUALLOC_* values
  ConfigOverrides aliases;    // JAX/XLA/TF values
  PerKey variable_written;
  PerKey alias_used;
  PerKey alias_written;
};

absl::StatusOr<EnvironmentSettings> ReadEnvironment(const EnvLookup& env) {
  EnvironmentSettings out;
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    const KeyDescriptor& k = kKeys[i];
    GPUALLOC_ASSIGN_OR_RETURN(
        const std::optional<std::string> value,
        ReadVariable(env, k, k.variable, /*alias=*/false, out.variables));
    if (value.has_value()) out.variable_written[i] = *value;
    for (absl::string_view alias : k.aliases) {
      if (alias.empty()) continue;
      GPUALLOC_ASSIGN_OR_RETURN(
          const std::optional<std::string> alias_value,
          ReadVariable(env, k, alias, /*alias=*/true, out.aliases));
      if (alias_value.has_value()) {
        out.alias_used[i] = std::string(alias);
        out.alias_written[i] = *alias_value;
      }
    }
  }
  return out;
}

// The program's settings: from `source` ("option", or "config string" with
// `written` their text).
struct ProgramSettings {
  const ConfigOverrides& values;
  absl::string_view source;
  const PerKey* written;
};

// Every level merged, per key: option > variable > alias (JAX/XLA/TF or
// PyTorch) > default, with where each value came from.
struct Merged {
  ConfigOverrides values;
  std::array<ValueOrigin, kKeys.size()> origin = {};
  PerKey source;
  PerKey set_by;
  PerKey written;
  std::vector<std::string> notes;  // the PyTorch lines
};

// Key i of `merged` from the highest level that sets it.
absl::Status MergeKey(std::size_t i, const ProgramSettings& program,
                      const EnvironmentSettings& env,
                      const PytorchSettings& pytorch, Merged& merged) {
  const KeyDescriptor& k = kKeys[i];
  const bool from_pytorch = k.is_set(pytorch.values);
  const std::string pytorch_source =
      absl::StrCat(pytorch.variable, " ", pytorch.entry[i]);
  if (k.is_set(program.values)) {
    k.copy(program.values, merged.values);
    merged.origin[i] = ValueOrigin::kOption;
    merged.source[i] = std::string(program.source);
    merged.set_by[i] = absl::StrCat(program.source, " ", k.name);
    merged.written[i] = program.written != nullptr
                            ? (*program.written)[i]
                            : EffectiveValue(k, program.values);
  } else if (k.is_set(env.variables)) {
    k.copy(env.variables, merged.values);
    merged.origin[i] = ValueOrigin::kVariable;
    merged.source[i] = std::string(k.variable);
    merged.set_by[i] = std::string(k.variable);
    merged.written[i] = env.variable_written[i];
  } else if (k.is_set(env.aliases)) {
    // A JAX/XLA/TF alias and a PyTorch key are one level: they must agree.
    if (from_pytorch &&
        EffectiveValue(k, env.aliases) != EffectiveValue(k, pytorch.values)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s=%s gives %s=%s but %s gives %s=%s; both are compatibility "
          "variables of the same level: make them agree or unset one",
          env.alias_used[i], Quoted(env.alias_written[i]), k.name,
          EffectiveValue(k, env.aliases), pytorch_source, k.name,
          EffectiveValue(k, pytorch.values)));
    }
    k.copy(env.aliases, merged.values);
    merged.origin[i] = ValueOrigin::kAlias;
    merged.source[i] = env.alias_used[i];
    merged.set_by[i] = env.alias_used[i];
    merged.written[i] = env.alias_written[i];
    return absl::OkStatus();
  } else if (from_pytorch) {
    k.copy(pytorch.values, merged.values);
    merged.origin[i] = ValueOrigin::kAlias;
    merged.source[i] = pytorch_source;
    merged.set_by[i] = absl::StrCat(pytorch.variable, " ", pytorch.key[i]);
    merged.written[i] = pytorch.written[i];
    return absl::OkStatus();
  } else {
    merged.origin[i] = ValueOrigin::kDefault;
    merged.source[i] = "default";
    return absl::OkStatus();
  }
  // An option or a GPUALLOC_* variable decided: a PyTorch key it overrides
  // with another value is reported, as a fraction overriding a limit is.
  if (from_pytorch &&
      EffectiveValue(k, merged.values) != EffectiveValue(k, pytorch.values)) {
    merged.notes.push_back(absl::StrCat(
        pytorch.entry[i], " overridden by ",
        merged.origin[i] == ValueOrigin::kOption ? program.source
                                                 : merged.source[i],
        " (", k.name, "=", EffectiveValue(k, merged.values), ")"));
    absl::StrAppend(&merged.source[i], " (overrides ", pytorch_source, ")");
  }
  return absl::OkStatus();
}

// PyTorch's conventions (grow on demand, up to the whole device, where
// nobody set otherwise), then the limit as one setting with two spellings: a
// fraction from a higher level beats a limit from a lower one.
void ApplyDefaultsAndLimit(Conventions conventions, Merged& merged) {
  if (conventions == Conventions::kPytorch) {
    if (merged.origin[kPreallocateKey] == ValueOrigin::kDefault) {
      merged.values.preallocate = false;
      merged.source[kPreallocateKey] = "default (PyTorch's)";
    }
    if (merged.origin[kFractionKey] == ValueOrigin::kDefault) {
      merged.values.memory_fraction = 1.0;
      merged.source[kFractionKey] = "default (PyTorch's)";
    }
  }
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
  const std::size_t f = kFractionKey;
  const std::size_t l = kLimitKey;
  if (merged.values.memory_limit.has_value() &&
      rank(merged.origin[f]) > rank(merged.origin[l])) {
    merged.values.memory_limit.reset();
    merged.source[l] =
        absl::StrCat(merged.source[l], " (overridden by mem_fraction from ",
                     merged.source[f], ")");
  }
}

// Region sizes are whole minimum blocks: a granularity and a min_block that
// disagree could never allocate, on any device.
absl::Status CheckGranularityAndMinBlock(const ConfigOverrides& merged,
                                         const Config& config) {
  if (merged.growth_granularity && merged.min_block_size &&
      *merged.growth_granularity % *merged.min_block_size != 0) {
    const ConfigSetting& g = config.settings[kGranularityKey];
    const ConfigSetting& b = config.settings[kMinBlockKey];
    return absl::InvalidArgumentError(absl::StrCat(
        config_internal::AsSet(g), " is not a multiple of ",
        config_internal::AsSet(b),
        ": region sizes are whole minimum blocks; set ",
        config_internal::NameToChange(g), " to a multiple of ",
        *merged.min_block_size, " bytes, or ", config_internal::NameToChange(b),
        " to a power of two that divides ", *merged.growth_granularity));
  }
  return absl::OkStatus();
}

// ResolveConfig. The program's settings came from `option_source`
// ("option", or "config string" with `option_written` their text).
absl::StatusOr<Config> Resolve(const ConfigOverrides& overrides,
                               const EnvLookup& env,
                               absl::string_view option_source,
                               const PerKey* option_written,
                               Conventions conventions) {
  ConfigOverrides options = overrides;
  GPUALLOC_RETURN_IF_ERROR(CheckOverrides(options));
  std::vector<std::string> jax_warnings;
  GPUALLOC_RETURN_IF_ERROR(CheckUnknownVariables(env, jax_warnings));
  GPUALLOC_RETURN_IF_ERROR(CheckFractionAliases(env));
  GPUALLOC_ASSIGN_OR_RETURN(const EnvironmentSettings variables,
                            ReadEnvironment(env));
  GPUALLOC_ASSIGN_OR_RETURN(const PytorchSettings pytorch, ReadPytorch(env));

  const ProgramSettings program{options, option_source, option_written};
  Merged merged;
  merged.notes = pytorch.notes;
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    GPUALLOC_RETURN_IF_ERROR(MergeKey(i, program, variables, pytorch, merged));
  }
  ApplyDefaultsAndLimit(conventions, merged);

  Config config;
  for (const KeyDescriptor& k : kKeys) k.apply(merged.values, config);
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    config.settings.push_back(ConfigSetting{
        std::string(kKeys[i].name), kKeys[i].print(config), merged.origin[i],
        merged.source[i], merged.set_by[i], merged.written[i]});
  }
  GPUALLOC_RETURN_IF_ERROR(CheckGranularityAndMinBlock(merged.values, config));

  for (const std::string& note : merged.notes) {
    config.warnings.push_back(
        absl::StrCat("gpualloc: ", pytorch.variable, ": ", note, kPytorchDocs));
  }
  for (std::string& line : jax_warnings) {
    config.warnings.push_back(std::move(line));
  }
  for (const std::string& line : config.warnings) {
    config_internal::WarnOncePerProcess(line);
  }
  return config;
}

}  // namespace

namespace config_internal {

const ConfigSetting* FindSetting(const Config& config, absl::string_view key) {
  for (const ConfigSetting& s : config.settings) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

namespace {

// A PyTorch entry's variable and key ("PYTORCH_CUDA_ALLOC_CONF", "backend"),
// when `set_by` names one.
std::optional<std::pair<absl::string_view, absl::string_view>> PytorchEntryOf(
    absl::string_view set_by) {
  for (absl::string_view variable : kPytorchVariables) {
    absl::string_view rest = set_by;
    if (absl::ConsumePrefix(&rest, variable) &&
        absl::ConsumePrefix(&rest, " ")) {
      return std::make_pair(variable, rest);
    }
  }
  return std::nullopt;
}

}  // namespace

std::string AsSet(const ConfigSetting& s) {
  if (s.set_by.empty()) {
    return absl::StrCat(s.key, "=", s.value,
                        s.source == "default (PyTorch's)"
                            ? " (PyTorch's default)"
                            : " (the default)");
  }
  if (PytorchEntryOf(s.set_by).has_value()) {
    return absl::StrCat(s.set_by, ":", s.written);
  }
  return absl::StrCat(s.set_by, "=", Quoted(s.written));
}

std::string NameToChange(const ConfigSetting& s) {
  if (s.set_by.empty()) {
    const std::size_t i = KeyIndex(s.key);
    if (i == kKeys.size()) return s.key;
    return absl::StrCat(s.key, " (", kKeys[i].variable, ")");
  }
  absl::string_view rest = s.set_by;
  if (absl::ConsumePrefix(&rest, "config string ")) {
    return absl::StrCat(rest, " in the config string");
  }
  if (const auto entry = PytorchEntryOf(s.set_by)) {
    return absl::StrCat(entry->second, " in ", entry->first);
  }
  return s.set_by;
}

std::string HowToReset(const ConfigSetting& s) {
  if (s.set_by.empty()) return absl::StrCat("leave ", s.key, " as it is");
  absl::string_view rest = s.set_by;
  if (absl::ConsumePrefix(&rest, "config string ")) {
    return absl::StrCat("remove ", rest, " from the config string");
  }
  if (absl::StartsWith(s.set_by, "option ")) {
    return absl::StrCat("leave ", s.set_by, " unset");
  }
  if (const auto entry = PytorchEntryOf(s.set_by)) {
    return absl::StrCat("remove ", entry->second, " from ", entry->first);
  }
  return absl::StrCat("unset ", s.set_by);
}

}  // namespace config_internal

namespace core {

namespace {

// The rows of kKeys with a refusal, made at compile time.
constexpr std::size_t kRefusalCount = [] {
  std::size_t n = 0;
  for (const KeyDescriptor& k : kKeys) n += k.modes.asks != nullptr ? 1 : 0;
  return n;
}();
constexpr std::array<ModeRefusal, kRefusalCount> kRefusals = [] {
  std::array<ModeRefusal, kRefusalCount> out{};
  std::size_t i = 0;
  for (const KeyDescriptor& k : kKeys) {
    const KeyModes& m = k.modes;
    if (m.asks == nullptr) continue;
    out[i++] = ModeRefusal{k.name,    m.field, m.modes, m.asks,
                           m.feature, m.lacks, m.reset};
  }
  return out;
}();

}  // namespace

absl::Span<const ModeRefusal> ModeRefusals() { return kRefusals; }

std::string ModeSetName(ModeSet modes) {
  std::vector<std::string> names;
  for (AllocatorMode mode :
       {AllocatorMode::kBfc, AllocatorMode::kPlatform, AllocatorMode::kAsync}) {
    if ((modes & ModeBit(mode)) != 0) {
      names.push_back(absl::StrCat("allocator=", AllocatorModeName(mode)));
    }
  }
  return absl::StrJoin(names, " or ");
}

}  // namespace core

std::vector<ConfigKeyInfo> ConfigKeys() {
  std::vector<ConfigKeyInfo> keys;
  for (const KeyDescriptor& k : kKeys) {
    ConfigKeyInfo info{k.name, k.variable, k.values, {}};
    for (absl::string_view alias : k.aliases) {
      if (!alias.empty()) info.aliases.push_back(alias);
    }
    keys.push_back(std::move(info));
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
  return ParseString(text, nullptr);
}

absl::StatusOr<Config> ResolveConfig(const ConfigOverrides& overrides,
                                     const EnvLookup& env,
                                     Conventions conventions) {
  return Resolve(overrides, env, "option", nullptr, conventions);
}

absl::StatusOr<Config> ResolveConfig(absl::string_view config_string,
                                     const EnvLookup& env,
                                     Conventions conventions) {
  PerKey written;
  GPUALLOC_ASSIGN_OR_RETURN(ConfigOverrides overrides,
                            ParseString(config_string, &written));
  return Resolve(overrides, env, "config string", &written, conventions);
}

}  // namespace gpualloc
