// SPDX-License-Identifier: Apache-2.0
// tools/cli.h: the command-line parser the tools share (gpualloc-replay,
// gpualloc-tune, gpualloc-gen, gpualloc-soak, gpualloc-info,
// gpualloc-torch-snapshot).
//
// A tool declares its flags, each with a handler, and Parse walks the
// arguments in order, calling each handler as its flag comes:
//   - a flag without a value (--json), or with one: the next argument,
//     whatever it looks like (--config STRING); with Syntax::equals_values
//     also --config=STRING;
//   - a flag may repeat: its handler sees every occurrence, unless it is
//     declared Once, when a repetition is an error (reported before its
//     value is looked for);
//   - the help flags (--help and -h) stop the parse at once, whatever
//     follows;
//   - anything else that looks like a flag is unknown; the rest are
//     positional arguments, for the positional handler (without one they
//     are unknown too).
// The first error stops the parse. Its message is the tool's own: a flag's
// missing value and an unknown argument are worded by the tool (Missing,
// Unknown), and a handler's status is returned as it is. Each tool then
// prints the message and exits as it always has.
#ifndef GPUALLOC_TOOLS_CLI_H_
#define GPUALLOC_TOOLS_CLI_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/layer.h"

namespace gpualloc::cli {

// An argument (or any input) as a message quotes it: escaped, in quotes, at
// most its first 80 bytes and then its length ("xxx..." (5000000 bytes)), as
// the library's own messages quote input.
std::string Quote(absl::string_view text);

// What Parse found: run the tool, or print its help.
enum class Parsed { kRun, kHelp };

// The finer points of a tool's syntax, as it has always been.
struct Syntax {
  // --flag=value as well as --flag value, for flags with a value.
  bool equals_values = false;
  // "-" alone is an unknown flag, not a positional argument.
  bool lone_dash_is_flag = false;
  // Every argument but help is a flag followed by its value: an unknown one
  // takes its value before it is reported, and without one it is reported
  // as a flag missing its value.
  bool unknown_takes_value = false;
};

class Parser {
 public:
  using FlagHandler = std::function<absl::Status()>;
  using ValueHandler = std::function<absl::Status(const std::string& value)>;
  using Message = std::function<std::string(const std::string& arg)>;

  explicit Parser(Syntax syntax = {});

  // A flag without a value; `on` runs each time it is given.
  Parser& Flag(const std::string& name, FlagHandler on);
  // A flag without a value that sets *given.
  Parser& Flag(const std::string& name, bool* given);
  // A flag with a value; `on` gets the value each time the flag is given.
  // `missing`: the error when no value follows (default: Missing's).
  Parser& Value(const std::string& name, ValueHandler on,
                std::optional<std::string> missing = std::nullopt);
  // The flag declared last may be given once only: a repetition is the
  // error `repeated`.
  Parser& Once(const std::string& repeated);
  // The positional arguments, in order.
  Parser& Positional(ValueHandler on);
  // The error for a flag without its value (default: "FLAG needs a value").
  Parser& Missing(Message message);
  // The error for an unknown argument (default: "unknown argument \"ARG\"").
  Parser& Unknown(Message message);

  absl::StatusOr<Parsed> Parse(const std::vector<std::string>& args) const;
  // argv[1..argc).
  absl::StatusOr<Parsed> Parse(int argc, const char* const* argv) const;

 private:
  struct Declared {
    bool takes_value = false;
    FlagHandler on_flag;
    ValueHandler on_value;
    std::optional<std::string> missing;
    std::optional<std::string> repeated;
  };

  bool LooksLikeFlag(const std::string& arg) const;
  std::string MissingMessage(const std::string& flag,
                             const Declared* declared) const;

  Syntax syntax_;
  std::map<std::string, Declared> flags_;
  std::string last_;  // the flag Once applies to
  std::vector<std::string> help_ = {"--help", "-h"};
  ValueHandler positional_;
  Message missing_;
  Message unknown_;
};

}  // namespace gpualloc::cli

#endif  // GPUALLOC_TOOLS_CLI_H_
