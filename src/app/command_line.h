// A subcommand's command line (Boost.Program_options), the same for every command: the options
// that --help lists (-h/--help first), the positional arguments that it does not, and the help
// printed once. A malformed line (an unknown option, a missing value, too many words) throws
// po::error, which main prints as "specrun <command>: <what>" with a pointer to --help (exit 2);
// a command's own usage errors stay SPEC_INPUT_CHECKs with its message.
//
//   CommandLine cli("specrun compare BASE.h5 NEW.h5 [options]");
//   cli.add_options()("json", "print the comparison as one JSON object");
//   cli.positional("base", po::value<std::string>()).positional("new", po::value<std::string>());
//   if (!cli.parse(ctx, args, "\nExit code: ...\n")) return 0;  // --help was printed
//   if (cli.has("json")) ...
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace specrun {

struct CommandContext;

class CommandLine {
 public:
  // `usage`: the first line of the help ("specrun compare BASE.h5 NEW.h5 [options]");
  // `help`: what -h/--help is said to do.
  explicit CommandLine(const std::string& usage, const char* help = "show this help");

  // Adds options that --help lists, after -h/--help (options_description::add_options).
  boost::program_options::options_description_easy_init add_options() {
    return options_.add_options();
  }
  // A positional argument, after those declared before it; `max_count` -1 takes every remaining
  // word. Without any, words that are not options are ignored.
  CommandLine& positional(const char* name, const boost::program_options::value_semantic* value,
                          int max_count = 1);

  // Parses `args` (the words after the command name) and runs the options' notifiers (a
  // po::value with a target is filled), --help or not. Returns false when -h/--help was
  // given: the help (the usage line and options, then `tail`) went to stdout on rank 0 of ctx.mpi
  // only, and the command returns 0. `tail`: text after the options (start it with "\n", end it
  // with one).
  bool parse(const CommandContext& ctx, const std::vector<std::string>& args,
             std::string_view tail = {});
  // A tail worth computing only when --help was asked for.
  bool parse(const CommandContext& ctx, const std::vector<std::string>& args,
             const std::function<std::string()>& tail);
  // For a command that runs without MPI (a launcher): the help goes to stdout.
  bool parse(const std::vector<std::string>& args, std::string_view tail = {});

  bool has(const char* name) const { return values_.count(name) > 0; }
  template <class T>
  const T& get(const char* name) const {
    return values_[name].as<T>();
  }
  const boost::program_options::variables_map& values() const { return values_; }
  // The usage line and the options, as --help prints them before its tail.
  std::string help() const;

 private:
  // Parses and notifies; true when --help was given.
  bool parse_words(const std::vector<std::string>& args);

  boost::program_options::options_description options_;
  boost::program_options::options_description hidden_;
  boost::program_options::positional_options_description positional_;
  bool has_positional_ = false;
  boost::program_options::variables_map values_;
};

}  // namespace specrun
