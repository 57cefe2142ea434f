// SPDX-License-Identifier: Apache-2.0
// core/config/config_variables.h: what the environment's variables set
// (GPUALLOC_* variables, the JAX/XLA/TF aliases and PyTorch's allocator
// configuration), read per key of kKeys (core/config/config_keys.h); defined
// in core/config/config_variables.cc, merged in core/config/config.cc.
#ifndef GPUALLOC_CORE_CONFIG_VARIABLES_H_
#define GPUALLOC_CORE_CONFIG_VARIABLES_H_

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config/config_keys.h"
#include "core/config/config_parse.h"
#include "core/layer.h"
#include "gpualloc/core/config.h"

namespace gpualloc {
namespace config_internal {

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

// What the environment's GPUALLOC_* variables and JAX/XLA/TF aliases set.
struct EnvironmentSettings {
  ConfigOverrides variables;  // GPUALLOC_* values
  ConfigOverrides aliases;    // JAX/XLA/TF values
  PerKey variable_written;
  PerKey alias_used;
  PerKey alias_written;
  // Why an alias sets a key it does not name, for reports (gpualloc-info's
  // source column); empty for the others.
  PerKey alias_note;
};

// Every GPUALLOC_* variable set in `env` names a setting; JAX's unknown or
// unread variables are lines in `warnings`.
absl::Status CheckUnknownVariables(const EnvLookup& env,
                                   std::vector<std::string>& warnings);

// Reads PyTorch's allocator configuration variables.
absl::StatusOr<PytorchSettings> ReadPytorch(const EnvLookup& env);

// Refuses both JAX/XLA fraction aliases set at once.
absl::Status CheckFractionAliases(const EnvLookup& env);

// Reads every key's GPUALLOC_* variable and aliases.
absl::StatusOr<EnvironmentSettings> ReadEnvironment(const EnvLookup& env);

}  // namespace config_internal
}  // namespace gpualloc

#endif  // GPUALLOC_CORE_CONFIG_VARIABLES_H_
