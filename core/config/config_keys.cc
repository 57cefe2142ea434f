// SPDX-License-Identifier: Apache-2.0
// core/config/config_keys.cc: what the key table (core/config/config_keys.h)
// offers outside resolution: the list of keys (ConfigKeys), the modes'
// refusals (core::ModeRefusals) and how a setting is named in messages
// (config_internal::AsSet, NameToChange, HowToReset).
#include "core/config/config_keys.h"

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "core/config/config_parse.h"
#include "core/config/key_modes.h"
#include "gpualloc/core/config.h"

namespace gpualloc {
namespace {

using config_internal::KeyDescriptor;
using config_internal::KeyModes;
using config_internal::kKeys;

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
  for (const KeyDescriptor& k : kKeys) n += k.modes.refuses() ? 1 : 0;
  return n;
}();
constexpr std::array<ModeRefusal, kRefusalCount> kRefusals = [] {
  std::array<ModeRefusal, kRefusalCount> out{};
  std::size_t i = 0;
  for (const KeyDescriptor& k : kKeys) {
    const KeyModes& m = k.modes;
    if (!m.refuses()) continue;
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

}  // namespace gpualloc
