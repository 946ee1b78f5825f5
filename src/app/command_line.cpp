#include "app/command_line.h"

#include <iostream>
#include <sstream>

#include "app/commands.h"
#include "dist/mpi_comm.h"

namespace po = boost::program_options;

namespace specrun {

CommandLine::CommandLine(const std::string& usage, const char* help) : options_(usage) {
  options_.add_options()("help,h", help);
}

CommandLine& CommandLine::positional(const char* name, const po::value_semantic* value,
                                     int max_count) {
  hidden_.add_options()(name, value);
  positional_.add(name, max_count);
  has_positional_ = true;
  return *this;
}

bool CommandLine::parse_words(const std::vector<std::string>& args) {
  po::options_description all;
  all.add(options_).add(hidden_);
  po::command_line_parser parser(args);
  parser.options(all);
  if (has_positional_) parser.positional(positional_);
  po::store(parser.run(), values_);
  po::notify(values_);
  return has("help");
}

std::string CommandLine::help() const {
  std::ostringstream out;
  out << options_;
  return out.str();
}

bool CommandLine::parse(const CommandContext& ctx, const std::vector<std::string>& args,
                        std::string_view tail) {
  if (!parse_words(args)) return true;
  if (ctx.mpi.rank() == 0) std::cout << help() << tail << std::flush;
  return false;
}

bool CommandLine::parse(const CommandContext& ctx, const std::vector<std::string>& args,
                        const std::function<std::string()>& tail) {
  if (!parse_words(args)) return true;
  if (ctx.mpi.rank() == 0) std::cout << help() << tail() << std::flush;
  return false;
}

bool CommandLine::parse(const std::vector<std::string>& args, std::string_view tail) {
  if (!parse_words(args)) return true;
  std::cout << help() << tail << std::flush;
  return false;
}

}  // namespace specrun
