// SPDX-License-Identifier: Apache-2.0
// tests/tools/cli_test.cc: the tools' shared command-line parser
// (tools/cli.h).
#include "tools/cli.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpualloc::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A parser with a flag, two flags with values (one of them repeatable into
// a list) and positional arguments.
struct Fixture {
  bool json = false;
  std::string out;
  std::vector<std::string> configs;
  std::vector<std::string> positional;
  Parser parser;

  explicit Fixture(Syntax syntax = {}) : parser(syntax) {
    parser.Flag("--json", &json)
        .Value("-o",
               [this](const std::string& v) {
                 out = v;
                 return absl::OkStatus();
               })
        .Value("--config", [this](const std::string& v) {
          configs.push_back(v);
          return absl::OkStatus();
        });
  }
  Fixture& WithPositional() {
    parser.Positional([this](const std::string& v) {
      positional.push_back(v);
      return absl::OkStatus();
    });
    return *this;
  }
};

std::string Message(const absl::StatusOr<Parsed>& p) {
  return std::string(p.status().message());
}

TEST(CliTest, FlagsValuesRepeatsAndPositionalsInOrder) {
  Fixture f;
  f.WithPositional();
  absl::StatusOr<Parsed> p =
      f.parser.Parse({"a.csv", "--config", "x=1", "--json", "-o", "out",
                      "--config", "--json", "-", "", "b.csv"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, Parsed::kRun);
  EXPECT_TRUE(f.json);
  EXPECT_EQ(f.out, "out");
  // A value is the next argument, whatever it looks like.
  EXPECT_THAT(f.configs, ElementsAre("x=1", "--json"));
  // "-" and "" are positional unless Syntax says otherwise.
  EXPECT_THAT(f.positional, ElementsAre("a.csv", "-", "", "b.csv"));
}

TEST(CliTest, NoArgumentsIsARun) {
  Fixture f;
  absl::StatusOr<Parsed> p = f.parser.Parse(std::vector<std::string>{});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, Parsed::kRun);
  const char* argv[] = {"tool"};
  EXPECT_EQ(*f.parser.Parse(1, argv), Parsed::kRun);
}

TEST(CliTest, ArgvSkipsTheProgramName) {
  Fixture f;
  f.WithPositional();
  const char* argv[] = {"tool", "--json", "t.csv"};
  ASSERT_TRUE(f.parser.Parse(3, argv).ok());
  EXPECT_TRUE(f.json);
  EXPECT_THAT(f.positional, ElementsAre("t.csv"));
}

TEST(CliTest, HelpStopsTheParseWhereItComes) {
  for (const char* help : {"--help", "-h"}) {
    Fixture f;
    absl::StatusOr<Parsed> p = f.parser.Parse({"--json", help, "--bogus"});
    ASSERT_TRUE(p.ok()) << help;
    EXPECT_EQ(*p, Parsed::kHelp);
    EXPECT_TRUE(f.json);
  }
  // An error before it wins.
  Fixture f;
  EXPECT_EQ(Message(f.parser.Parse({"--bogus", "--help"})),
            "unknown argument \"--bogus\"");
  // As a value it is only a value.
  Fixture g;
  EXPECT_EQ(*g.parser.Parse({"-o", "--help"}), Parsed::kRun);
  EXPECT_EQ(g.out, "--help");
}

TEST(CliTest, MissingValueMessages) {
  Fixture f;
  EXPECT_EQ(Message(f.parser.Parse({"-o"})), "-o needs a value");
  f.parser.Missing([](const std::string& flag) { return flag + "?"; });
  EXPECT_EQ(Message(f.parser.Parse({"--config"})), "--config?");
  // A flag's own message wins over Missing's.
  f.parser.Value(
      "--n", [](const std::string&) { return absl::OkStatus(); },
      "--n needs N");
  EXPECT_EQ(Message(f.parser.Parse({"--json", "--n"})), "--n needs N");
  EXPECT_TRUE(absl::IsInvalidArgument(f.parser.Parse({"--n"}).status()));
}

TEST(CliTest, UnknownArguments) {
  Fixture f;
  // Without a positional handler everything undeclared is unknown.
  EXPECT_EQ(Message(f.parser.Parse({"t.csv"})), "unknown argument \"t.csv\"");
  f.WithPositional();
  EXPECT_EQ(Message(f.parser.Parse({"--bogus"})),
            "unknown argument \"--bogus\"");
  f.parser.Unknown([](const std::string& a) { return "unknown option " + a; });
  EXPECT_EQ(Message(f.parser.Parse({"-x", "t.csv"})), "unknown option -x");
  EXPECT_THAT(f.positional, IsEmpty());
  // --flag=value is not a form unless Syntax says so.
  EXPECT_EQ(Message(f.parser.Parse({"--config=x"})),
            "unknown option --config=x");
}

TEST(CliTest, LoneDashAsAFlag) {
  Fixture f(Syntax{.lone_dash_is_flag = true});
  f.WithPositional();
  EXPECT_EQ(Message(f.parser.Parse({"-"})), "unknown argument \"-\"");
  // A long argument is quoted cut, with its length.
  const std::string huge(5000000, 'x');
  const std::string m = Message(f.parser.Parse({"-" + huge}));
  EXPECT_LT(m.size(), 200u);
  EXPECT_NE(m.find("(5000001 bytes)"), std::string::npos) << m;
  EXPECT_TRUE(f.parser.Parse({""}).ok());
  EXPECT_THAT(f.positional, ElementsAre(""));
}

TEST(CliTest, EqualsValues) {
  Fixture f(Syntax{.equals_values = true});
  ASSERT_TRUE(f.parser.Parse({"--config=a=b", "--config", "c", "-o="}).ok());
  EXPECT_THAT(f.configs, ElementsAre("a=b", "c"));
  EXPECT_EQ(f.out, "");
  // Flags without a value, help and undeclared names take no "=".
  EXPECT_EQ(Message(f.parser.Parse({"--json=1"})),
            "unknown argument \"--json=1\"");
  EXPECT_EQ(Message(f.parser.Parse({"--help=1"})),
            "unknown argument \"--help=1\"");
  EXPECT_EQ(Message(f.parser.Parse({"--configs=1"})),
            "unknown argument \"--configs=1\"");
}

TEST(CliTest, UnknownTakesValue) {
  Fixture f(Syntax{.unknown_takes_value = true});
  EXPECT_EQ(Message(f.parser.Parse({"--bogus"})), "--bogus needs a value");
  EXPECT_EQ(Message(f.parser.Parse({"--bogus", "1"})),
            "unknown argument \"--bogus\"");
  EXPECT_EQ(Message(f.parser.Parse({"word"})), "word needs a value");
}

TEST(CliTest, OnceIsCheckedBeforeTheValue) {
  Fixture f;
  f.parser
      .Value(
          "--base", [](const std::string&) { return absl::OkStatus(); },
          "--base needs a CONFIG")
      .Once("--base given twice");
  EXPECT_TRUE(f.parser.Parse({"--base", "x"}).ok());
  EXPECT_EQ(Message(f.parser.Parse({"--base", "x", "--base"})),
            "--base given twice");
  EXPECT_EQ(Message(f.parser.Parse({"--base"})), "--base needs a CONFIG");
  // Other flags repeat freely.
  EXPECT_TRUE(f.parser.Parse({"--json", "--json", "-o", "a", "-o", "b"}).ok());
  EXPECT_EQ(f.out, "b");
}

TEST(CliTest, AHandlersErrorIsReturnedAsItIsAndStopsTheParse) {
  bool later = false;
  Parser parser;
  parser
      .Value("--n",
             [](const std::string& v) {
               return absl::OutOfRangeError("bad --n " + v);
             })
      .Flag("--later", &later);
  const absl::StatusOr<Parsed> p = parser.Parse({"--n", "7", "--later"});
  EXPECT_TRUE(absl::IsOutOfRange(p.status()));
  EXPECT_EQ(p.status().message(), "bad --n 7");
  EXPECT_FALSE(later);
  // A flag handler's too.
  Parser flags;
  flags.Flag("--x", []() { return absl::FailedPreconditionError("no --x"); });
  EXPECT_EQ(flags.Parse({"--x"}).status().message(), "no --x");
}

}  // namespace
}  // namespace gpualloc::cli
