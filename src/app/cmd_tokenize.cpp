// `specrun tokenize (--model DIR | --tokenizer FILE) [--decode] [--no-special] [IN.jsonl]`:
// text -> token ids, or ids -> text with --decode, one JSON line per input line, for checking the
// tokenizers against a reference (tests/e2e/tokenizer_js.sh). A serial command: under mpirun,
// rank 0 does the work.
#include <boost/program_options.hpp>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "dist/mpi_comm.h"
#include "text/tokenizer.h"

namespace po = boost::program_options;

namespace specrun {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::unique_ptr<Tokenizer> open_tokenizer(const po::variables_map& vm) {
  if (vm.count("model")) {
    const std::string dir = vm["model"].as<std::string>();
    auto tokenizer = load_tokenizer_for(dir);
    SPEC_INPUT_CHECK(tokenizer != nullptr, dir << " has no tokenizer.json, tokenizer.model or "
                                                  "tokenizer.bin");
    return tokenizer;
  }
  const std::string file = vm["tokenizer"].as<std::string>();
  if (ends_with(file, ".json")) return load_hf_tokenizer(file);
  if (ends_with(file, ".model")) return load_sentencepiece_tokenizer(file);
  SPEC_INPUT_FAIL("--tokenizer " << file
                                 << ": expected a tokenizer.json or a sentencepiece "
                                    "*.model file (for a llama2.c tokenizer.bin use --model DIR)");
}

// Line `line_no` of the input: a JSON string or {"text": ...} (encode), a list of ids or
// {"ids": [...]} (decode).
nlohmann::json parse_line(const std::string& line, const std::string& source, long line_no,
                          const char* member) {
  const nlohmann::json j = parse_json_or_discarded(line);
  SPEC_INPUT_CHECK(!j.is_discarded(),
                   source << ":" << line_no << ": not a JSON value (or nested too deeply)");
  if (j.is_object()) {
    auto it = j.find(member);
    SPEC_INPUT_CHECK(it != j.end(),
                     source << ":" << line_no << ": the object has no \"" << member << "\"");
    return *it;
  }
  return j;
}

std::vector<int> ids_of(const nlohmann::json& j, const std::string& source, long line_no) {
  SPEC_INPUT_CHECK(j.is_array(), source << ":" << line_no << ": expected a list of token ids");
  std::vector<int> ids;
  ids.reserve(j.size());
  for (const auto& v : j) {
    SPEC_INPUT_CHECK(
        v.is_number_integer() && v.get<long long>() >= 0 && v.get<long long>() <= INT32_MAX,
        source << ":" << line_no << ": " << v.dump() << " is not a token id");
    ids.push_back(v.get<int>());
  }
  return ids;
}

}  // namespace

int cmd_tokenize(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cli(
      "specrun tokenize (--model DIR | --tokenizer FILE) [--decode] [--no-special] [IN.jsonl]");
  cli.add_options()("model", po::value<std::string>(),
                    "model folder (its tokenizer, as `run` picks it)")(
      "tokenizer", po::value<std::string>(), "a tokenizer.json or sentencepiece *.model file")(
      "decode", "input lines are id lists; print the decoded text")(
      "no-special", "encode without the special tokens the tokenizer adds (BOS)")(
      "stats", "print load time and encoding speed to stderr");
  cli.positional("input", po::value<std::string>());
  if (!cli.parse(ctx, args,
                 "\nEncode: each line of IN.jsonl is a JSON string or {\"text\": \"...\"}; prints "
                 "{\"ids\": [...]} per line.\nDecode (--decode): each line is a list of ids or "
                 "{\"ids\": [...]}; prints the text as a JSON string\n(special tokens skipped, "
                 "as transformers' decode(skip_special_tokens=True)). Blank lines are skipped.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  SPEC_INPUT_CHECK(vm.count("model") + vm.count("tokenizer") == 1,
                   "specrun tokenize: give one of --model DIR or --tokenizer FILE");
  if (ctx.mpi.rank() != 0) return 0;

  const auto t_load = SteadyClock::now();
  const std::unique_ptr<Tokenizer> tokenizer = open_tokenizer(vm);
  const double load_s = seconds_since(t_load);
  const bool decode = vm.count("decode") > 0;
  SPEC_INPUT_CHECK(decode || tokenizer->can_encode(), "the " << tokenizer->format() << " tokenizer "
                                                             << tokenizer->files().front()
                                                             << " can only decode (use --decode)");

  const std::string source = vm.count("input") ? vm["input"].as<std::string>() : "stdin";
  std::ifstream file;
  if (vm.count("input")) {
    file.open(source, std::ios::binary);
    SPEC_INPUT_CHECK(file.good(), "cannot open " << source);
  }
  std::istream& in = vm.count("input") ? static_cast<std::istream&>(file) : std::cin;

  long line_no = 0, lines = 0;
  std::size_t tokens = 0, bytes = 0;
  double work_s = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++lines;
    if (decode) {
      const std::vector<int> ids =
          ids_of(parse_line(line, source, line_no, "ids"), source, line_no);
      const auto t0 = SteadyClock::now();
      const std::string text = tokenizer->decode(ids);
      work_s += seconds_since(t0);
      tokens += ids.size();
      bytes += text.size();
      std::cout << nlohmann::json(text).dump() << '\n';
    } else {
      const nlohmann::json text = parse_line(line, source, line_no, "text");
      SPEC_INPUT_CHECK(text.is_string(), source << ":" << line_no << ": expected a JSON string");
      const std::string& s = text.get_ref<const std::string&>();
      const auto t0 = SteadyClock::now();
      const std::vector<int> ids = tokenizer->encode(s, !vm.count("no-special"));
      work_s += seconds_since(t0);
      tokens += ids.size();
      bytes += s.size();
      std::cout << nlohmann::json{{"ids", ids}}.dump() << '\n';
    }
  }
  std::cout.flush();
  if (vm.count("stats"))
    std::cerr << "tokenize: loaded " << tokenizer->files().front() << " in " << load_s << " s; "
              << (decode ? "decoded " : "encoded ") << lines << " lines, " << bytes << " bytes, "
              << tokens << " tokens in " << work_s << " s ("
              << (work_s > 0 ? static_cast<double>(tokens) / work_s : 0.0) << " tokens/s, "
              << (work_s > 0 ? static_cast<double>(bytes) / work_s / 1e6 : 0.0) << " MB/s)"
              << std::endl;
  return 0;
}

}  // namespace specrun
