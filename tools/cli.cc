// SPDX-License-Identifier: Apache-2.0
// tools/cli.cc: the tools' shared command-line parser (cli.h).
#include "tools/cli.h"

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpualloc::cli {

std::string Quote(absl::string_view text) {
  constexpr std::size_t kMax = 80;
  if (text.size() <= kMax) return absl::StrCat("\"", absl::CEscape(text), "\"");
  return absl::StrCat("\"", absl::CEscape(text.substr(0, kMax)), "...\" (",
                      text.size(), " bytes)");
}

Parser::Parser(Syntax syntax) : syntax_(syntax) {}

Parser& Parser::Flag(const std::string& name, FlagHandler on) {
  Declared d;
  d.on_flag = std::move(on);
  flags_[name] = std::move(d);
  last_ = name;
  return *this;
}

Parser& Parser::Flag(const std::string& name, bool* given) {
  return Flag(name, [given]() {
    *given = true;
    return absl::OkStatus();
  });
}

Parser& Parser::Value(const std::string& name, ValueHandler on,
                      std::optional<std::string> missing) {
  Declared d;
  d.takes_value = true;
  d.on_value = std::move(on);
  d.missing = std::move(missing);
  flags_[name] = std::move(d);
  last_ = name;
  return *this;
}

Parser& Parser::Once(const std::string& repeated) {
  flags_.at(last_).repeated = repeated;
  return *this;
}

Parser& Parser::Positional(ValueHandler on) {
  positional_ = std::move(on);
  return *this;
}

Parser& Parser::Missing(Message message) {
  missing_ = std::move(message);
  return *this;
}

Parser& Parser::Unknown(Message message) {
  unknown_ = std::move(message);
  return *this;
}

bool Parser::LooksLikeFlag(const std::string& arg) const {
  if (arg == "-") return syntax_.lone_dash_is_flag;
  return arg.size() > 1 && arg[0] == '-';
}

std::string Parser::MissingMessage(const std::string& flag,
                                   const Declared* declared) const {
  if (declared != nullptr && declared->missing.has_value()) {
    return *declared->missing;
  }
  if (missing_) return missing_(flag);
  return absl::StrCat(flag, " needs a value");
}

absl::StatusOr<Parsed> Parser::Parse(
    const std::vector<std::string>& args) const {
  std::set<std::string> seen;  // the Once flags given so far
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (std::find(help_.begin(), help_.end(), arg) != help_.end()) {
      return Parsed::kHelp;
    }
    std::string name = arg;
    std::optional<std::string> value;  // given as --flag=value
    auto it = flags_.find(name);
    if (it == flags_.end() && syntax_.equals_values) {
      const std::size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        it = flags_.find(arg.substr(0, eq));
        if (it != flags_.end() && it->second.takes_value) {
          name = it->first;
          value = arg.substr(eq + 1);
        } else {
          it = flags_.end();
        }
      }
    }
    if (it == flags_.end()) {
      if (LooksLikeFlag(arg) || !positional_) {
        if (syntax_.unknown_takes_value && i + 1 >= args.size()) {
          return absl::InvalidArgumentError(MissingMessage(arg, nullptr));
        }
        return absl::InvalidArgumentError(
            unknown_ ? unknown_(arg)
                     : absl::StrCat("unknown argument ", Quote(arg)));
      }
      if (absl::Status s = positional_(arg); !s.ok()) return s;
      continue;
    }
    const Declared& d = it->second;
    if (d.repeated.has_value() && !seen.insert(name).second) {
      return absl::InvalidArgumentError(*d.repeated);
    }
    if (!d.takes_value) {
      if (absl::Status s = d.on_flag(); !s.ok()) return s;
      continue;
    }
    if (!value.has_value()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(MissingMessage(name, &d));
      }
      value = args[++i];
    }
    if (absl::Status s = d.on_value(*value); !s.ok()) return s;
  }
  return Parsed::kRun;
}

absl::StatusOr<Parsed> Parser::Parse(int argc, const char* const* argv) const {
  return Parse(std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
}

}  // namespace gpualloc::cli
