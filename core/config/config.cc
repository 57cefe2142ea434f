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
// The keys are the table in core/config/config_keys.h (with the checklist for
// adding one); what the environment sets is read in
// core/config/config_variables.cc.
#include "gpualloc/core/config.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/config/config_keys.h"
#include "core/config/config_parse.h"
#include "core/config/config_variables.h"
#include "core/status_macros.h"

namespace gpualloc {
namespace {

using config_internal::Bad;
using config_internal::CheckFractionAliases;
using config_internal::CheckUnknownVariables;
using config_internal::Closest;
using config_internal::EnvironmentSettings;
using config_internal::kCrossStreamKey;
using config_internal::KeyDescriptor;
using config_internal::kFractionKey;
using config_internal::kGranularityKey;
using config_internal::kKeys;
using config_internal::kLimitKey;
using config_internal::kMinBlockKey;
using config_internal::kPreallocateKey;
using config_internal::PerKey;
using config_internal::PytorchSettings;
using config_internal::Quoted;
using config_internal::ReadEnvironment;
using config_internal::ReadPytorch;
using config_internal::Where;

std::string KeyList() {
  std::vector<absl::string_view> names;
  for (const KeyDescriptor& k : kKeys) names.push_back(k.name);
  return absl::StrJoin(names, ", ");
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
    merged.source[i] =
        env.alias_note[i].empty()
            ? env.alias_used[i]
            : absl::StrCat(env.alias_used[i], " (", env.alias_note[i], ")");
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

// PyTorch's conventions (grow on demand, up to the whole device, no stream
// waits with memory to spare, where nobody set otherwise), then the limit as
// one setting with two spellings: a fraction from a higher level beats a limit
// from a lower one.
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
    // PyTorch's allocator never hands a stream memory another stream's work
    // may still use: no dependency between a user's streams appears unless
    // memory runs short.
    if (merged.origin[kCrossStreamKey] == ValueOrigin::kDefault) {
      merged.values.cross_stream_reuse = CrossStreamReuse::kStreamWait;
      merged.source[kCrossStreamKey] = "default (PyTorch's)";
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
