#include "text/chat_template.h"

#include <ctime>
#include <filesystem>

#include "common/error.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "text/jinja_error.h"
#include "text/jinja_globals.h"
#include "text/jinja_template.h"

namespace specrun {

namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& path, const InputFileKind& kind) {
  const std::string text = read_input_file(path.string(), kind);
  const std::string depth_error = json_depth_error(text, path.string());
  SPEC_INPUT_CHECK(depth_error.empty(), depth_error);
  nlohmann::json json = parse_json_or_discarded(text);
  SPEC_INPUT_CHECK(!json.is_discarded(), path.string() << " is not valid JSON");
  return json;
}

// A special token as tokenizer_config.json writes it: a string, null, or an AddedToken object.
std::string token_text(const nlohmann::json& config, const char* key, const std::string& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  SPEC_INPUT_FAIL(file << ": \"" << key
                       << "\" must be a string, null or an object with a string \"content\"");
}

// tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"}.
bool template_from_config(const nlohmann::json& config, const std::string& file,
                          const std::string& name, ChatTemplate& t) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return false;
  const std::string key = file + ": chat_template";
  if (it->is_string()) {
    SPEC_INPUT_CHECK(name.empty() || name == "default",
                     key << " is a single template, not a list of named ones: there is no template "
                            "named '"
                         << name << "' (leave out the name)");
    t.source = it->get<std::string>();
    t.origin = key;
    return true;
  }
  SPEC_INPUT_CHECK(it->is_array(),
                   key << " must be a string or a list of {\"name\": ..., \"template\": ...}");
  const std::string wanted = name.empty() ? "default" : name;
  std::string names;
  for (const auto& entry : *it) {
    SPEC_INPUT_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                         entry.contains("template") && entry["template"].is_string(),
                     key << ": every entry must be {\"name\": string, \"template\": string}");
    const std::string entry_name = entry["name"].get<std::string>();
    if (entry_name == wanted) {
      t.source = entry["template"].get<std::string>();
      t.origin = key + "[name=" + entry_name + "]";
      return true;
    }
    names += (names.empty() ? "" : ", ") + entry_name;
  }
  SPEC_INPUT_FAIL(key << " has no template named '" << wanted << "' (it has: " << names
                      << "); choose one by name");
}

}  // namespace

ChatTemplate load_chat_template(const std::string& model_dir, const std::string& template_file,
                                const std::string& name) {
  ChatTemplate t;
  const fs::path dir(model_dir);
  const fs::path config_file = dir / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  if (!model_dir.empty()) {
    SPEC_INPUT_CHECK(fs::is_directory(dir), model_dir << " is not a folder");
    if (input_exists(config_file.string())) {
      config = read_json(config_file, kTokenizerConfigFile);
      SPEC_INPUT_CHECK(config.is_object(), config_file.string() << " must hold a JSON object");
      t.bos_token = token_text(config, "bos_token", config_file.string());
      t.eos_token = token_text(config, "eos_token", config_file.string());
    }
  }
  if (!template_file.empty()) {
    t.source = read_input_file(template_file, kChatTemplateFile);
    t.origin = template_file;
    return t;
  }
  SPEC_INPUT_CHECK(!model_dir.empty(),
                   "no model folder and no template file to read a chat "
                   "template from");
  const bool named = !name.empty() && name != "default";
  const fs::path jinja_file =
      named ? dir / "additional_chat_templates" / (name + ".jinja") : dir / "chat_template.jinja";
  if (input_exists(jinja_file.string())) {
    t.source = read_input_file(jinja_file.string(), kChatTemplateFile);
    t.origin = jinja_file.string();
    return t;
  }
  if (template_from_config(config, config_file.string(), name, t)) return t;
  const fs::path json_file = dir / "chat_template.json";
  if (!named && input_exists(json_file.string())) {
    const nlohmann::json json = read_json(json_file, kChatTemplateJsonFile);
    SPEC_INPUT_CHECK(
        json.is_object() && json.contains("chat_template") && json["chat_template"].is_string(),
        json_file.string() << " must hold {\"chat_template\": \"...\"}");
    t.source = json["chat_template"].get<std::string>();
    t.origin = json_file.string() + ": chat_template";
    return t;
  }
  SPEC_INPUT_FAIL(model_dir << " has no chat template" << (named ? " named '" + name + "'" : "")
                            << ": looked for " << jinja_file.string() << ", \"chat_template\" in "
                            << config_file.string() << (named ? "" : ", and " + json_file.string())
                            << " (give the template with --template FILE)");
}

namespace {

template <typename Json>
std::string render(const ChatTemplate& t, const Json& messages, bool add_generation_prompt,
                   const Json& extra) {
  SPEC_INPUT_CHECK(messages.is_array(), "the messages to render with " << t.origin
                                                                       << " must be a list, not "
                                                                       << messages.type_name());
  SPEC_INPUT_CHECK(extra.is_object(),
                   "the extra variables for " << t.origin << " must be an object");
  const jinja::Template tmpl(t.source, t.origin);
  std::vector<std::pair<std::string, jinja::Value>> context;
  try {
    context = {
        {"raise_exception", jinja::raise_exception_function()},
        {"strftime_now", jinja::strftime_now_function([] { return std::time(nullptr); })},
        {"messages", jinja::from_json(messages)},
        {"tools", jinja::Value::none()},
        {"documents", jinja::Value::none()},
        {"add_generation_prompt", jinja::Value::boolean(add_generation_prompt)},
    };
    if (!t.bos_token.empty()) context.emplace_back("bos_token", jinja::Value::string(t.bos_token));
    if (!t.eos_token.empty()) context.emplace_back("eos_token", jinja::Value::string(t.eos_token));
    for (auto it = extra.begin(); it != extra.end(); ++it)
      context.emplace_back(it.key(), jinja::from_json(it.value()));
  } catch (const jinja::TemplateError& e) {
    SPEC_INPUT_FAIL("the conversation to render with " << t.origin << ": " << e.what());
  }
  return tmpl.render(context);
}

}  // namespace

std::string render_chat_template(const ChatTemplate& t, const nlohmann::ordered_json& messages,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra) {
  return render(t, messages, add_generation_prompt, extra);
}

std::string render_chat_template(const ChatTemplate& t, const nlohmann::json& messages,
                                 bool add_generation_prompt, const nlohmann::json& extra) {
  return render(t, messages, add_generation_prompt, extra);
}

}  // namespace specrun
