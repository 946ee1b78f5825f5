// The subcommands' command-line helper (app/command_line.h): -h/--help listed first and the
// help printed with its tail, positional arguments in order (one, or all the rest), options bound
// to variables filled, and a malformed line (an unknown option, a missing value, a word too many)
// thrown as po::error, which main turns into the usage error naming the command.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/command_line.h"

namespace po = boost::program_options;
using namespace specrun;

namespace {

TEST(CommandLine, HelpListsHelpFirstThenTheOptionsAndTheTail) {
  int steps = 0;
  CommandLine cli("specrun demo IN [options]");
  cli.add_options()("steps", po::value(&steps)->default_value(3), "steps per round");
  cli.positional("in", po::value<std::string>());
  testing::internal::CaptureStdout();
  const bool go_on = cli.parse({"--help"}, "\nA tail.\n");
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(go_on);
  EXPECT_EQ(out, cli.help() + "\nA tail.\n");
  EXPECT_EQ(out.rfind("specrun demo IN [options]:\n", 0), 0u) << out;
  const std::size_t help = out.find("-h [ --help ]"), step = out.find("--steps");
  ASSERT_NE(help, std::string::npos) << out;
  EXPECT_LT(help, step) << out;
  EXPECT_EQ(out.find(" in "), std::string::npos) << "a positional is not an option: " << out;
  EXPECT_EQ(steps, 3) << "the notifiers run with --help too";
}

TEST(CommandLine, PositionalsInOrderAndBoundOptionsFilled) {
  std::string base, next;
  double threshold = 0;
  CommandLine cli("specrun demo BASE NEW [options]", "show this help and more");
  cli.add_options()("threshold", po::value(&threshold)->default_value(1.0), "percent");
  cli.positional("base", po::value(&base)).positional("new", po::value(&next));
  ASSERT_TRUE(cli.parse({"a.h5", "--threshold", "2.5", "b.h5"}));
  EXPECT_EQ(base, "a.h5");
  EXPECT_EQ(next, "b.h5");
  EXPECT_DOUBLE_EQ(threshold, 2.5);
  EXPECT_TRUE(cli.has("base"));
  EXPECT_FALSE(cli.has("help"));
  EXPECT_NE(cli.help().find("show this help and more"), std::string::npos);
}

TEST(CommandLine, ARepeatedPositionalTakesEveryRemainingWord) {
  CommandLine cli("specrun demo FILE... [options]");
  cli.add_options()("json", "as JSON");
  cli.positional("files", po::value<std::vector<std::string>>(), -1);
  ASSERT_TRUE(cli.parse({"a", "b", "--json", "c"}));
  EXPECT_EQ(cli.get<std::vector<std::string>>("files"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(cli.has("json"));
}

TEST(CommandLine, MalformedLinesThrowTheUsageError) {
  auto parsed = [](std::vector<std::string> args) {
    CommandLine cli("specrun demo IN [options]");
    cli.add_options()("seed", po::value<int>(), "seed");
    cli.positional("in", po::value<std::string>());
    return cli.parse(args);
  };
  EXPECT_THROW(parsed({"--no-such-option"}), po::error);
  EXPECT_THROW(parsed({"--seed"}), po::error);
  EXPECT_THROW(parsed({"--seed", "x"}), po::error);
  EXPECT_THROW(parsed({"in", "extra"}), po::error);
  EXPECT_TRUE(parsed({"in", "--seed", "4"}));
}

TEST(CommandLine, WithoutPositionalsOtherWordsAreIgnored) {
  CommandLine cli("specrun demo [options]");
  cli.add_options()("json", "as JSON");
  EXPECT_TRUE(cli.parse({"stray", "--json"}));
  EXPECT_TRUE(cli.has("json"));
}

}  // namespace
