// SPDX-License-Identifier: Apache-2.0
// core/config/config_env.cc: the environments config.h offers (the process's
// and a map), the names of the variables they hold, and reading one variable.
#include <unistd.h>  // environ

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "core/config/config_parse.h"
#include "gpualloc/core/config.h"

namespace gpualloc {
namespace {

// The two environments, as named types, so that ResolveConfig can list the
// variables they hold (EnvLookup::target).
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

}  // namespace

EnvLookup ProcessEnvironment() { return ProcessLookup{}; }

EnvLookup MapEnvironment(std::map<std::string, std::string> variables) {
  return MapLookup{std::move(variables)};
}

namespace config_internal {

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

absl::StatusOr<std::optional<std::string>> ReadTrimmed(
    const EnvLookup& env, absl::string_view variable) {
  const std::optional<std::string> raw = env(variable);
  if (!raw.has_value()) return std::nullopt;
  const absl::string_view value = absl::StripAsciiWhitespace(*raw);
  if (value.empty()) {
    return Bad(Where{std::string(variable), ""}, *raw,
               "set but empty; unset it to take the default");
  }
  return std::string(value);
}

}  // namespace config_internal
}  // namespace gpualloc
