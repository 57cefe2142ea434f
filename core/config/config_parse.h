// SPDX-License-Identifier: Apache-2.0
// core/config/config_parse.h: the scalar parsers behind the configuration keys
// (core/config/config_keys.h): booleans, fractions, sizes, keywords,
// architecture names, and the error messages that name where a bad value came
// from; reading the environment (core/config/config_env.cc).
#ifndef GPUALLOC_CORE_CONFIG_PARSE_H_
#define GPUALLOC_CORE_CONFIG_PARSE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/layer.h"
#include "gpualloc/core/allocator.h"
#include "gpualloc/core/config.h"

namespace gpualloc {
namespace config_internal {

// Names the place a value came from in error messages: `name="value"place:
// why`, e.g. `GPUALLOC_MEM_FRACTION="1.5": not in (0, 1]` or
// `config string mem_fraction="1.5" (entry 2, column 9): not in (0, 1]`.
struct Where {
  std::string name;
  std::string place;  // empty, or " (entry 2, column 9)"
};

// `text` escaped (control characters and quotes as C escapes) and quoted for
// a message; long text is cut.
std::string Quoted(absl::string_view text);

// InvalidArgument `name="value"place: why`.
absl::Status Bad(const Where& where, absl::string_view value,
                 absl::string_view why);

absl::StatusOr<bool> ParseBool(absl::string_view value, const Where& where);
absl::Status CheckFraction(double f, absl::string_view value,
                           const Where& where);
absl::StatusOr<double> ParseFraction(absl::string_view value,
                                     const Where& where);
// The shortest text that reads back as the same double, with no exponent
// for |f| <= 1 (what ParseFraction reads back).
std::string FormatFraction(double f);

// A size with an optional unit, after trimming (ParseSize's core).
absl::StatusOr<std::uint64_t> ParseSizeAt(absl::string_view text,
                                          const Where& where);
absl::Status CheckPositiveSize(std::uint64_t bytes, absl::string_view value,
                               const Where& where);
absl::StatusOr<std::uint64_t> ParsePositiveSize(absl::string_view value,
                                                const Where& where);
absl::Status CheckMinBlock(std::uint64_t bytes, absl::string_view value,
                           const Where& where);
absl::Status CheckGranularity(std::uint64_t bytes, absl::string_view value,
                              const Where& where);
absl::StatusOr<std::uint64_t> ParseMinBlock(absl::string_view value,
                                            const Where& where);
// size_divisions: 0 (off) or a power of two from 2 to 64, in decimal.
absl::Status CheckSizeDivisions(std::uint64_t n, absl::string_view value,
                                const Where& where);
absl::StatusOr<std::uint32_t> ParseSizeDivisions(absl::string_view value,
                                                 const Where& where);
// history: 0 (off) to 2^24 entries, in decimal.
absl::Status CheckHistory(std::uint64_t n, absl::string_view value,
                          const Where& where);
absl::StatusOr<std::uint64_t> ParseHistory(absl::string_view value,
                                           const Where& where);
// "auto" or a profile name, in the profile's own spelling.
absl::StatusOr<std::string> ParseArch(absl::string_view value,
                                      const Where& where);
absl::StatusOr<std::string> ParseName(absl::string_view value, const Where&);

// The names of the variables `env` holds; empty for a lookup other than
// ProcessEnvironment's and MapEnvironment's (a function can only be asked for
// names it is given).
std::vector<std::string> VariableNames(const EnvLookup& env);

// The value of `variable`, trimmed; nullopt when it is not set, an error
// when it is set but empty.
absl::StatusOr<std::optional<std::string>> ReadTrimmed(
    const EnvLookup& env, absl::string_view variable);

// Edit distance between two names (insertions, deletions, substitutions).
std::size_t Distance(absl::string_view a, absl::string_view b);

// Writes `line` and a newline to stderr unless this process already wrote
// the same line.
void WarnOncePerProcess(const std::string& line);

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

inline constexpr std::array<std::pair<absl::string_view, AllocatorMode>, 3>
    kModes = {{{"bfc", AllocatorMode::kBfc},
               {"platform", AllocatorMode::kPlatform},
               {"async", AllocatorMode::kAsync}}};
inline constexpr std::array<std::pair<absl::string_view, BackendKind>, 4>
    kBackends = {{{"auto", BackendKind::kAuto},
                  {"sim", BackendKind::kSim},
                  {"cuda", BackendKind::kCuda},
                  {"hip", BackendKind::kHip}}};
inline constexpr std::array<std::pair<absl::string_view, Tristate>, 5>
    kTristates = {{{"true", Tristate::kOn},
                   {"false", Tristate::kOff},
                   {"auto", Tristate::kAuto},
                   {"1", Tristate::kOn},
                   {"0", Tristate::kOff}}};
inline constexpr std::array<std::pair<absl::string_view, CrossStreamReuse>, 4>
    kCrossStream = {{{"when_complete", CrossStreamReuse::kWhenComplete},
                     {"stream_wait", CrossStreamReuse::kStreamWait},
                     {"before_growth", CrossStreamReuse::kBeforeGrowth},
                     {"best_fit", CrossStreamReuse::kBestFit}}};
inline constexpr std::array<std::pair<absl::string_view, GrowthPolicy>, 2>
    kGrowth = {{{"exact", GrowthPolicy::kExact},
                {"doubling", GrowthPolicy::kDoubling}}};
inline constexpr std::array<std::pair<absl::string_view, MemoryKind>, 2>
    kMemoryKinds = {
        {{"coarse", MemoryKind::kCoarse}, {"fine", MemoryKind::kFine}}};

// JAX's XLA_PYTHON_CLIENT_ALLOCATOR values. "address" is XLA's synchronous
// passthrough allocator (one device allocation per request, no caching):
// what allocator=platform is. "vmm" is XLA's allocator over CUDA's virtual
// memory management: gpualloc's BFC over expandable regions (the variable
// also sets expandable; config_variables.cc, kXlaVmm).
inline constexpr std::array<std::pair<absl::string_view, AllocatorMode>, 6>
    kXlaModes = {{{"default", AllocatorMode::kBfc},
                  {"bfc", AllocatorMode::kBfc},
                  {"platform", AllocatorMode::kPlatform},
                  {"cuda_async", AllocatorMode::kAsync},
                  {"address", AllocatorMode::kPlatform},
                  {"vmm", AllocatorMode::kBfc}}};

// ------------------------------------------------------------------ PyTorch

// PyTorch's allocator configuration variables, in the order PyTorch reads
// them: PYTORCH_ALLOC_CONF (the generic name), then the older
// PYTORCH_CUDA_ALLOC_CONF and, on ROCm, PYTORCH_HIP_ALLOC_CONF.
inline constexpr std::array<absl::string_view, 3> kPytorchVariables = {
    "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"};

// One "key:value" entry of a PyTorch configuration; the value may be a
// bracketed list ("[256:1,>:8]"), kept as written.
struct PytorchEntry {
  std::string key;
  std::string value;
  int entry = 0;  // 1-based, counting empty entries
};

// Splits PyTorch's "key:value[,key:value...]" (commas inside brackets do not
// split; spaces around keys and values are ignored; empty entries, such as a
// trailing comma, are skipped as PyTorch skips them). An entry without ':',
// an empty key or value, unbalanced brackets or a repeated key is
// InvalidArgument naming `variable`.
absl::StatusOr<std::vector<PytorchEntry>> SplitPytorchConf(
    absl::string_view text, absl::string_view variable);

// What gpualloc does with a key of PyTorch's allocator configuration.
enum class PytorchKeyKind {
  // It sets a gpualloc key (`key`, its value through `translate`).
  kMapped,
  // PyTorch's caching allocator has it and gpualloc has no equivalent: it is
  // named in a warning with `why` (why, and the nearest gpualloc setting).
  kUnsupported,
  // PyTorch's pinned host-memory allocator reads it; a device allocator does
  // not replace that one, so it still takes effect: the warning says so.
  kHost,
};

// A key of PyTorch's allocator configuration (c10's AllocatorConfig and
// CUDAAllocatorConfig). For kMapped, `translate` reads the value as the
// gpualloc key's (configuration-string text), with PyTorch's spellings; it
// answers Unimplemented for a form of the value gpualloc cannot honour
// (roundup_power2_divisions' list form): the entry is then reported as not
// supported, with the message.
struct PytorchKey {
  absl::string_view name;  // "expandable_segments"
  PytorchKeyKind kind = PytorchKeyKind::kMapped;
  absl::string_view key;  // kMapped: "expandable"
  absl::StatusOr<std::string> (*translate)(absl::string_view value,
                                           const Where& where) = nullptr;
  absl::string_view why;  // kUnsupported
};
// Every key PyTorch knows (docs/REFERENCE.md, "PyTorch's variables"); any
// other is reported as no PyTorch key, with the closest one.
const std::vector<PytorchKey>& PytorchKeys();

// JAX's XLA_PYTHON_CLIENT_* variables gpualloc does not read, with why (the
// ones it reads are the aliases of config.h's table).
struct JaxVariable {
  absl::string_view name;
  absl::string_view why;
};
const std::vector<JaxVariable>& UnreadJaxVariables();

// ---------------------------------------------------- naming what was set

// The setting of `key` in `config`; null when there is none.
const ConfigSetting* FindSetting(const Config& config, absl::string_view key);
// The setting as the user wrote it, for messages:
// `GPUALLOC_GRANULARITY="4KiB"`, `config string granularity="4KiB"`,
// `PYTORCH_CUDA_ALLOC_CONF garbage_collection_threshold:0.8`; a default as
// `granularity=profile (the default)`.
std::string AsSet(const ConfigSetting& s);
// The name a fix changes: "GPUALLOC_GRANULARITY", "granularity in the config
// string", "garbage_collection_threshold in PYTORCH_CUDA_ALLOC_CONF"; for a
// default, the key and its variable ("granularity (GPUALLOC_GRANULARITY)").
std::string NameToChange(const ConfigSetting& s);
// How to take the default instead: "unset GPUALLOC_GRANULARITY", "remove
// granularity from the config string", "remove garbage_collection_threshold
// from PYTORCH_CUDA_ALLOC_CONF", "leave option granularity unset".
std::string HowToReset(const ConfigSetting& s);

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

}  // namespace config_internal
}  // namespace gpualloc

#endif  // GPUALLOC_CORE_CONFIG_PARSE_H_
