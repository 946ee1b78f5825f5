// `specrun chat-template (--model DIR | --template FILE) [--name N] IN.json`: prints a
// conversation rendered with a model's chat template, as transformers'
// apply_chat_template(tokenize=False) renders it (no newline added). A serial command: run it
// without mpirun (under mpirun, rank 0 does the work and the others wait).
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "dist/mpi_comm.h"
#include "text/chat_template.h"

namespace po = boost::program_options;

namespace specrun {

namespace {

// IN.json as an ordered_json object: tool schemas keep their key order, which tojson prints.
nlohmann::ordered_json read_conversation(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPEC_INPUT_CHECK(in, "cannot read " << path);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string depth_error = json_depth_error(text.str(), path);
  SPEC_INPUT_CHECK(depth_error.empty(), depth_error);
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(text.str(), nullptr, false);
  SPEC_INPUT_CHECK(!json.is_discarded(), path << " is not valid JSON");
  SPEC_INPUT_CHECK(json.is_object() && json.contains("messages") && json["messages"].is_array(),
                   path << " must hold an object with a \"messages\" list");
  return json;
}

}  // namespace

int cmd_chat_template(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cli("specrun chat-template (--model DIR | --template FILE) [--name N] IN.json");
  cli.add_options()(
      "model", po::value<std::string>(),
      "model folder: its chat template (chat_template.jinja or tokenizer_config.json) and tokens")(
      "template", po::value<std::string>(),
      "a Jinja template file to use instead of the folder's (bos/eos still come from --model)")(
      "chat-template", po::value<std::string>(),
      "the same as --template (the spelling of `specrun prepare`)")(
      "name", po::value<std::string>()->default_value(""),
      "which of several named templates (tokenizer_config.json lists them; default: \"default\")");
  cli.positional("input", po::value<std::string>());
  if (!cli.parse(ctx, args,
                 "\nIN.json: {\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, ...], "
                 "\"add_generation_prompt\": true, ...}\nEvery other key is a template variable "
                 "(tools, enable_thinking, date_string, ...).\nThe rendered text goes to stdout "
                 "byte for byte, with no newline added.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  SPEC_INPUT_CHECK(!(vm.count("template") && vm.count("chat-template")),
                   "--template and --chat-template both given: they are the same option; give "
                   "one");
  const std::string template_file = vm.count("template") ? vm["template"].as<std::string>()
                                    : vm.count("chat-template")
                                        ? vm["chat-template"].as<std::string>()
                                        : "";
  SPEC_INPUT_CHECK(vm.count("input") && (vm.count("model") || !template_file.empty()),
                   "usage: specrun chat-template (--model DIR | --template FILE) [--name N] "
                   "IN.json");
  if (ctx.mpi.rank() != 0) return 0;

  const ChatTemplate chat_template =
      load_chat_template(vm.count("model") ? vm["model"].as<std::string>() : "", template_file,
                         vm["name"].as<std::string>());
  nlohmann::ordered_json conversation = read_conversation(vm["input"].as<std::string>());
  const nlohmann::ordered_json messages = conversation["messages"];
  bool add_generation_prompt = false;
  if (conversation.contains("add_generation_prompt")) {
    SPEC_INPUT_CHECK(conversation["add_generation_prompt"].is_boolean(),
                     "\"add_generation_prompt\" must be true or false");
    add_generation_prompt = conversation["add_generation_prompt"].get<bool>();
  }
  conversation.erase("messages");
  conversation.erase("add_generation_prompt");
  const std::string text =
      render_chat_template(chat_template, messages, add_generation_prompt, conversation);
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cout.flush();
  return 0;
}

}  // namespace specrun
