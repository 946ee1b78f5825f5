// `specrun prepare IN.jsonl OUT.h5 [--model DIR] [--format F] [options]`: builds a prompt file
// from JSONL of token ids, text or chat messages, or from a benchmark's question file
// (io/prompt_sources.h). A serial command: run it without mpirun (under mpirun, rank 0 does the
// work and the others wait).
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/error.h"
#include "dist/mpi_comm.h"
#include "io/prompt_file.h"
#include "io/prompt_sources.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_prepare(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cli("specrun prepare IN.jsonl OUT.h5 [options]");
  std::string format = "jsonl", chat = "auto", turns = "first";
  PrepareOptions prepare;
  cli.add_options()(
      "model", po::value(&prepare.model_dir),
      "model folder whose tokenizer (tokenizer.json, tokenizer.model) encodes \"text\", "
      "\"messages\" and benchmark turns, and whose chat template renders them")(
      "format", po::value(&format)->default_value("jsonl"),
      "input layout: jsonl, mt-bench, spec-bench or speed-bench")(
      "turns", po::value(&turns)->default_value("first"),
      "benchmark questions with several turns: first, or all (each turn its own prompt, id "
      "QID/tN)")(
      "chat", po::value(&chat)->default_value("auto"),
      "chat template use: auto (messages, and benchmark turns when the model has a template), "
      "always (plain text too, as a user message), never")(
      "chat-template", po::value(&prepare.template_file),
      "a Jinja chat template file to use instead of the model's")(
      "template", po::value<std::string>(),
      "the same as --chat-template (the spelling of `specrun chat-template`)")(
      "template-name", po::value(&prepare.template_name),
      "one of the named templates of tokenizer_config.json (default: \"default\")")(
      "system", po::value(&prepare.system_prompt),
      "a system message before every templated text or benchmark turn")(
      "overwrite", "replace OUT.h5 if it exists (otherwise an existing file is an error)");
  cli.positional("input", po::value<std::string>()).positional("output", po::value<std::string>());
  if (!cli.parse(ctx, args,
                 "\nLayouts (--format):\n"
                 "  jsonl        one prompt per line: {\"tokens\": [1, 15043]} | {\"text\": "
                 "\"...\"} |\n"
                 "               {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}, "
                 "optional \"id\" (string or\n"
                 "               integer; all lines or none, unique) and \"category\"; "
                 "\"text\" beside \"tokens\"\n"
                 "               is stored as given\n"
                 "  mt-bench     FastChat's question.jsonl: {\"question_id\", \"category\", "
                 "\"turns\": [...]}\n"
                 "  spec-bench   Spec-Bench's data/spec_bench/question.jsonl (the same "
                 "layout)\n"
                 "  speed-bench  SPEED-Bench rows as JSONL (question_id, category, "
                 "sub_category, turns, ...)\n"
                 "Text is encoded with special tokens (BOS); rendered chats without (the "
                 "template writes\nthem). Bad lines are reported by number and nothing is "
                 "written. Layout of OUT.h5:\ndocs/file-formats.md.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  SPEC_INPUT_CHECK(
      vm.count("input") && vm.count("output"),
      "usage: specrun prepare IN.jsonl OUT.h5 [--model DIR] [--format F] [--overwrite]");
  if (vm.count("template")) {
    SPEC_INPUT_CHECK(!vm.count("chat-template"),
                     "--template and --chat-template both given: they are the same option; "
                     "give one");
    prepare.template_file = vm["template"].as<std::string>();
  }
  const std::string in = vm["input"].as<std::string>();
  const std::string out = vm["output"].as<std::string>();

  // Rank 0 converts. If it fails, main aborts every rank, so the others need not wait here.
  if (ctx.mpi.rank() != 0) return 0;
  prepare.overwrite = vm.count("overwrite") > 0;
  prepare.layout = parse_prompt_layout(format);
  SPEC_INPUT_CHECK(turns == "first" || turns == "all", "--turns " << turns << ": use first or all");
  prepare.all_turns = turns == "all";
  SPEC_INPUT_CHECK(chat == "auto" || chat == "always" || chat == "never",
                   "--chat " << chat << ": use auto, always or never");
  prepare.chat = chat == "always"  ? ChatUse::kAlways
                 : chat == "never" ? ChatUse::kNever
                                   : ChatUse::kAuto;
  PrepareSummary summary = prepare_prompt_file(in, out, prepare);
  std::cout << "wrote " << out << ": " << summary.prompts << " prompts, " << summary.tokens
            << " tokens (prompt length " << summary.min_len << " to " << summary.max_len << ")"
            << (summary.columns.ids ? ", ids" : "")
            << (summary.columns.categories ? ", categories" : "")
            << (summary.columns.text ? ", text" : "") << std::endl;
  if (summary.templated_without_bos > 0)
    std::cerr << "warning: " << summary.templated_without_bos
              << " rendered conversation(s) do not start with BOS (id " << summary.bos_id
              << "), which the tokenizer puts before plain text: the chat template does not "
                 "write {{ bos_token }}. Stored as rendered (as transformers' "
                 "apply_chat_template(tokenize=True) does); if the model expects BOS, add "
                 "{{ bos_token }} to the template's start (recorded in the file's `prepared` "
                 "attribute: templated_without_bos)"
              << std::endl;
  return 0;
}

}  // namespace specrun
