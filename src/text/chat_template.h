// Chat templates of Hugging Face model folders: where transformers finds them, and rendering a
// conversation with them as tokenizer.apply_chat_template(messages, tokenize=False, ...) does
// (jinja_template.h is the engine).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace specrun {

struct ChatTemplate {
  std::string source;  // the Jinja text
  // Where it came from, for errors: "DIR/tokenizer_config.json: chat_template",
  // "DIR/tokenizer_config.json: chat_template[name=tool_use]", "DIR/chat_template.jinja", or the
  // template file given.
  std::string origin;
  // Special tokens from tokenizer_config.json ("" when absent or null: then, as in transformers,
  // the template does not see the variable at all).
  std::string bos_token, eos_token;
};

// The chat template of a model folder and its special tokens. With `template_file`, the template
// is that file's raw Jinja text (and `model_dir`, when not empty, still gives the tokens).
// Otherwise, in transformers' order: DIR/chat_template.jinja (newer transformers save it there;
// with `name`, DIR/additional_chat_templates/NAME.jinja), tokenizer_config.json's
// "chat_template" (a string, or a list of {"name", "template"}: "default", or `name`), then
// DIR/chat_template.json's "chat_template". bos_token/eos_token may be strings, null, or
// AddedToken objects {"content": ...}. Throws specrun::Error (exit code 2) naming the files and
// keys looked at when there is no template, a named template is missing (listing the names), or
// a file is unreadable or not valid JSON.
ChatTemplate load_chat_template(const std::string& model_dir, const std::string& template_file = "",
                                const std::string& name = "");

// The text of `messages` (a list of {"role", "content", ...}) rendered with `t`, as
// apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders it: the
// template sees messages, add_generation_prompt, tools and documents (none unless `extra` has
// them), bos_token and eos_token (when not empty), every key of `extra` (e.g. tools,
// enable_thinking, date_string), and the functions raise_exception(msg) and strftime_now(fmt)
// (local time). Use ordered_json to keep the order of object keys, which tojson prints (an
// nlohmann::json sorts them). Throws specrun::Error (exit code 2) naming t.origin and the
// template line, with the loop and message index where the error happened, or the message the
// template raised.
std::string render_chat_template(
    const ChatTemplate& t, const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());
std::string render_chat_template(const ChatTemplate& t, const nlohmann::json& messages,
                                 bool add_generation_prompt,
                                 const nlohmann::json& extra = nlohmann::json::object());

}  // namespace specrun
