// SPDX-License-Identifier: Apache-2.0
// core/config/config_keys.h: the table of configuration keys (kKeys): each
// key's names, the kind of value it takes (ValueType), the modes that read
// it, and what it does with a ConfigOverrides field and the Config value it
// decides. Resolving a configuration (core/config/config.cc), reading the
// environment's variables (core/config/config_variables.cc) and the key
// list, the modes' refusals and the messages' names for a setting
// (core/config/config_keys.cc) all walk it.
//
// Adding a key: every place it must go today.
//  1. include/gpualloc/core/allocator.h: its Options field and default (or a
//     Config member in include/gpualloc/core/config.h for a key that is no
//     allocator option, as backend and device_memory are).
//  2. include/gpualloc/core/config.h: its ConfigOverrides field
//     (std::optional), and its line in the table of keys in the header
//     comment.
//  3. Here, kKeys: one Describe row (key, GPUALLOC_* variable, aliases, the
//     values for --help, and the modes column: ReadBy for a key some modes
//     ignore, BfcOnly with the refusal's words for one the other modes
//     refuse; core::CheckOptions then refuses it there with no code of its
//     own). A new kind of value also needs its ValueType here and its parser
//     in core/config/config_parse.h/.cc; a PyTorch key that maps to it, its row
//     in config_parse.cc's PytorchKeys().
//  4. core/config/options.cc, kFields: the Options field's key and its
//     default in C++ terms (the runtime layer restates option errors with the
//     key), and CheckOptions / ResolveOptions for any check of the value's
//     range.
//  5. README.md's and docs/REFERENCE.md's key tables, which
//     tests/core/config_test.cc checks against ConfigKeys(), and that test's
//     kAllKeys list; a test of the new key's parsing there.
//  6. A bfc-only key the other modes ignore: tools/info.cc, BfcOnlyKeys (the
//     "not used" line).
#ifndef GPUALLOC_CORE_CONFIG_KEYS_H_
#define GPUALLOC_CORE_CONFIG_KEYS_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/config/config_parse.h"
#include "core/config/key_modes.h"
#include "core/layer.h"
#include "core/status_macros.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/config.h"

namespace gpualloc {
namespace config_internal {

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
inline constexpr ValueType<AllocatorMode> kAllocator = AllocatorValues();

inline constexpr ValueType<bool> kBool = {
    config_internal::ParseBool, nullptr, nullptr,
    [](const bool& b) -> std::string { return b ? "true" : "false"; }};

inline constexpr ValueType<double> kFraction = {
    config_internal::ParseFraction, nullptr,
    [](double& f, const Where& where) {
      return config_internal::CheckFraction(
          f, config_internal::FormatFraction(f), where);
    },
    [](const double& f) { return config_internal::FormatFraction(f); }};

// gc_threshold: 0 (off) or a fraction in (0, 1) of the limit.
inline constexpr absl::string_view kNotThreshold =
    "not 0 (off) or a decimal fraction of the limit in (0, 1), e.g. 0.8";
inline absl::Status CheckThreshold(double t, absl::string_view value,
                                   const Where& where) {
  if (std::isfinite(t) && t >= 0 && t < 1) return absl::OkStatus();
  return Bad(where, value, kNotThreshold);
}
inline constexpr ValueType<double> kThreshold = {
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

inline std::string SizeOr(std::uint64_t bytes, absl::string_view zero) {
  return bytes == 0 ? std::string(zero) : absl::StrCat(bytes);
}

inline absl::Status CheckPositive(std::uint64_t& bytes, const Where& where) {
  return config_internal::CheckPositiveSize(bytes, absl::StrCat(bytes), where);
}

// A size of more than 0 bytes; 0 in Options means unset.
inline constexpr ValueType<std::uint64_t> kPositiveSize = {
    config_internal::ParsePositiveSize, nullptr, CheckPositive,
    [](const std::uint64_t& bytes) { return SizeOr(bytes, "unset"); }};

inline absl::Status CheckGranularity(std::uint64_t& bytes, const Where& where) {
  GPUALLOC_RETURN_IF_ERROR(CheckPositive(bytes, where));
  return config_internal::CheckGranularity(bytes, absl::StrCat(bytes), where);
}

// Region sizes; 0 in Options means the profile's.
inline constexpr ValueType<std::uint64_t> kGranularity = {
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
inline constexpr ValueType<std::uint64_t> kMinBlock = {
    config_internal::ParseMinBlock, nullptr,
    [](std::uint64_t& bytes, const Where& where) {
      return config_internal::CheckMinBlock(bytes, absl::StrCat(bytes), where);
    },
    [](const std::uint64_t& bytes) { return SizeOr(bytes, "profile"); }};

// Any size, 0 included: 0 is a real setting (split_bound: always split).
inline constexpr ValueType<std::uint64_t> kSize = {
    config_internal::ParseSizeAt, nullptr, nullptr,
    [](const std::uint64_t& bytes) { return absl::StrCat(bytes); }};

// size_divisions: 0 (off) or a power of two from 2 to 64.
inline constexpr ValueType<std::uint32_t> kDivisions = {
    config_internal::ParseSizeDivisions, nullptr,
    [](std::uint32_t& n, const Where& where) {
      return config_internal::CheckSizeDivisions(n, absl::StrCat(n), where);
    },
    [](const std::uint32_t& n) { return absl::StrCat(n); }};

// history: 0 (off) to 2^24 entries.
inline constexpr ValueType<std::uint64_t> kHistory = {
    config_internal::ParseHistory, nullptr,
    [](std::uint64_t& n, const Where& where) {
      return config_internal::CheckHistory(n, absl::StrCat(n), where);
    },
    [](const std::uint64_t& n) { return absl::StrCat(n); }};

inline std::string PrintText(const std::string& text) { return text; }

inline constexpr ValueType<std::string> kArch = {
    config_internal::ParseArch, nullptr,
    [](std::string& arch, const Where& where) -> absl::Status {
      GPUALLOC_ASSIGN_OR_RETURN(arch, config_internal::ParseArch(arch, where));
      return absl::OkStatus();
    },
    PrintText};

inline constexpr ValueType<std::string> kText = {config_internal::ParseName,
                                                 nullptr, nullptr, PrintText};

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
  // Whether other modes refuse the key (BfcOnly). Asked through the field,
  // not `asks`: comparing an inline function's address with null is not a
  // constant expression to every compiler (g++ -O0 with sanitizers).
  constexpr bool refuses() const { return !field.empty(); }
};

inline constexpr core::ModeSet kBfcMode = core::ModeBit(AllocatorMode::kBfc);

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
inline std::string ExpandableOn(const Options& o) {
  return o.expandable == Tristate::kOn ? "kOn" : "";
}
inline std::string ThresholdOn(const Options& o) {
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
inline constexpr std::array kKeys = {
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
        "when_complete|stream_wait|before_growth|best_fit", ReadBy(kBfcMode)),
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
    Describe<&O::host_memory_limit, kPositiveSize, &Config::host_memory_limit>(
        "host_memory_limit", "GPUALLOC_HOST_MEMORY_LIMIT", {},
        "a size: the pinned host pool's limit"),
};

// The index of the key `name` in kKeys; kKeys.size() when there is none.
constexpr std::size_t KeyIndex(absl::string_view name) {
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    if (kKeys[i].name == name) return i;
  }
  return kKeys.size();
}
// The keys ResolveConfig treats together.
inline constexpr std::size_t kFractionKey = KeyIndex("mem_fraction");
inline constexpr std::size_t kLimitKey = KeyIndex("mem_limit");
inline constexpr std::size_t kGranularityKey = KeyIndex("granularity");
inline constexpr std::size_t kMinBlockKey = KeyIndex("min_block");
inline constexpr std::size_t kPreallocateKey = KeyIndex("preallocate");
inline constexpr std::size_t kCrossStreamKey = KeyIndex("cross_stream");
static_assert(kFractionKey < kKeys.size() && kLimitKey < kKeys.size() &&
              kGranularityKey < kKeys.size() && kMinBlockKey < kKeys.size() &&
              kPreallocateKey < kKeys.size() && kCrossStreamKey < kKeys.size());

// Per key of kKeys: a text, e.g. the value as written.
using PerKey = std::array<std::string, kKeys.size()>;

}  // namespace config_internal
}  // namespace gpualloc

#endif  // GPUALLOC_CORE_CONFIG_KEYS_H_
