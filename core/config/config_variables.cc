// SPDX-License-Identifier: Apache-2.0
// core/config/config_variables.cc: reading what the environment sets: the
// GPUALLOC_* variables (and refusing unknown ones), the JAX/XLA/TF aliases
// and PyTorch's allocator configuration (see config_variables.h).
#include "core/config/config_variables.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/config/config_keys.h"
#include "core/config/config_parse.h"
#include "core/report/quote.h"
#include "core/status_macros.h"
#include "gpualloc/core/config.h"

namespace gpualloc {
namespace config_internal {
namespace {

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

}  // namespace

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
        absl::StrCat(core::ClipInput(name), "=", Quoted(value.value_or("")));
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

// ---------------------------------------------------------------- PyTorch

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
    // (Cut in the warnings, as any input they show.)
    const std::string entry =
        core::ClipInput(absl::StrCat(e.key, ":", e.value));
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

namespace {

// XLA_PYTHON_CLIENT_ALLOCATOR=vmm is XLA's allocator over CUDA's virtual
// memory management (GpuAllocatorConfig::Kind::kVmm): the allocator alias
// reads it as bfc (kXlaModes), and here it also sets expandable, at the
// level of the aliases, so that a GPUALLOC_* variable or the program still
// wins over either.
constexpr absl::string_view kXlaVmm = "vmm";
constexpr absl::string_view kXlaVmmNote =
    "XLA's VMM allocator: gpualloc's BFC over expandable regions";

absl::Status ApplyXlaVmm(EnvironmentSettings& out) {
  constexpr std::size_t kAllocator = KeyIndex("allocator");
  constexpr std::size_t kExpandable = KeyIndex("expandable");
  static_assert(kAllocator < kKeys.size() && kExpandable < kKeys.size());
  if (out.alias_written[kAllocator] != kXlaVmm) return absl::OkStatus();
  const std::string& variable = out.alias_used[kAllocator];
  GPUALLOC_RETURN_IF_ERROR(kKeys[kExpandable].parse(
      "true", Where{variable, ""}, /*alias=*/true, out.aliases));
  out.alias_used[kExpandable] = variable;
  out.alias_written[kExpandable] = std::string(kXlaVmm);
  out.alias_note[kAllocator] = std::string(kXlaVmmNote);
  out.alias_note[kExpandable] = std::string(kXlaVmmNote);
  return absl::OkStatus();
}

}  // namespace

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
  GPUALLOC_RETURN_IF_ERROR(ApplyXlaVmm(out));
  return out;
}

}  // namespace config_internal
}  // namespace gpualloc
