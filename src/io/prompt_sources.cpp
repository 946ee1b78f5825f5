#include "io/prompt_sources.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <utility>

#include "common/error.h"
#include "common/hash.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "common/utf8.h"

namespace specrun {

namespace {

template <class Json>
std::string json_kind(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "an object";
}

std::string hex64(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Whether a model folder carries a chat template (tokenizer_config.json's chat_template, or the
// chat_template.jinja / chat_template.json that newer transformers save beside it).
bool model_has_chat_template(const std::string& dir) {
  if (input_exists(dir + "/chat_template.jinja") || input_exists(dir + "/chat_template.json"))
    return true;
  const std::string config = dir + "/tokenizer_config.json";
  if (!input_exists(config)) return false;
  const nlohmann::json j = parse_json_or_discarded(read_input_file(config, kTokenizerConfigFile));
  if (!j.is_object()) return false;
  auto it = j.find("chat_template");
  return it != j.end() && !it->is_null();
}

// "" and the id as text, or what is wrong.
std::string read_id(const nlohmann::json& j, const char* key, PreparedPrompt& p) {
  auto id = j.find(key);
  if (id == j.end() || id->is_null()) return "";
  if (id->is_string())
    p.id = id->get<std::string>();
  else if (id->is_number_integer())
    p.id = id->dump();
  else
    return "\"" + std::string(key) + "\" must be a string or an integer, got " + json_kind(*id);
  p.has_id = true;
  return "";
}

std::string read_string(const nlohmann::json& j, const char* key, bool* has, std::string* value) {
  auto v = j.find(key);
  if (v == j.end() || v->is_null()) return "";
  if (!v->is_string()) return "\"" + std::string(key) + "\" must be a string, got " + json_kind(*v);
  *value = v->get<std::string>();
  *has = true;
  return "";
}

// Edit distance between two short keys (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "; unknown keys \"txt\" (did you mean \"text\"?), \"src\"" for the keys of `j` not in `known`;
// "" when there are none.
std::string unknown_keys(const nlohmann::json& j, std::initializer_list<const char*> known) {
  std::string out;
  int n = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (std::any_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) continue;
    out += std::string(n++ ? ", " : "") + "\"" + key + "\"";
    for (const char* k : known)
      if (edit_distance(key, k) <= 2 && key.size() > 1) {
        out += std::string(" (did you mean \"") + k + "\"?)";
        break;
      }
  }
  return n == 0 ? "" : (n == 1 ? "; unknown key " : "; unknown keys ") + out;
}

std::string read_tokens(const nlohmann::json& list, std::vector<int32_t>& tokens) {
  if (!list.is_array()) return "\"tokens\" must be a list of token ids, got " + json_kind(list);
  if (list.empty()) return "\"tokens\" is empty; every prompt needs at least one token";
  tokens.clear();
  tokens.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& t = list[i];
    bool ok = t.is_number_integer();
    if (ok && t.is_number_unsigned())
      ok = t.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
    else if (ok)
      ok = t.get<int64_t>() >= 0 && t.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (!ok)
      return "\"tokens\"[" + std::to_string(i) + "] is " + t.dump() +
             "; token ids must be integers in [0, 2147483647]";
    tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return "";
}

// A prompt file's strings (HDF5 variable-length strings, h5py's too) end at their first NUL: a
// NUL in an id, a category or a text would cut what is stored short without a word. Refused,
// naming the field, so that what is stored is always what was given. "" or what is wrong.
std::string nul_in_strings(const PreparedPrompt& p) {
  for (auto [name, has, value] : {std::tuple{"\"id\"", p.has_id, &p.id},
                                  std::tuple{"\"category\"", p.has_category, &p.category},
                                  std::tuple{"the prompt's text", p.has_text, &p.text}}) {
    const std::size_t at = has ? value->find('\0') : std::string::npos;
    if (at != std::string::npos)
      return std::string(name) + " holds a NUL character (\\u0000) at byte " + std::to_string(at) +
             ": the strings of a prompt file end at the first NUL, so it would be stored cut "
             "short; remove it";
  }
  return "";
}

// The messages list of a chat: a list of objects with a string "role" and a string (or list)
// "content". "" or what is wrong.
std::string check_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return "\"messages\" must be a list, got " + json_kind(messages);
  if (messages.empty()) return "\"messages\" is empty";
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::ordered_json& m = messages[i];
    const std::string at = "\"messages\"[" + std::to_string(i) + "]";
    if (!m.is_object())
      return at + " must be an object {\"role\", \"content\"}, got " + json_kind(m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return at + " needs a string \"role\"";
    auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_array() && !content->is_null())
      return at + ".content must be a string, got " + json_kind(*content);
  }
  return "";
}

const char* chat_use_name(ChatUse use) {
  switch (use) {
    case ChatUse::kAlways:
      return "always";
    case ChatUse::kNever:
      return "never";
    default:
      return "auto";
  }
}

}  // namespace

PromptLayout parse_prompt_layout(const std::string& name) {
  if (name == "jsonl") return PromptLayout::kJsonl;
  if (name == "mt-bench") return PromptLayout::kMtBench;
  if (name == "spec-bench") return PromptLayout::kSpecBench;
  if (name == "speed-bench") return PromptLayout::kSpeedBench;
  SPEC_INPUT_FAIL("--format " << name
                              << " is not a prompt layout; use jsonl, mt-bench, spec-bench or "
                                 "speed-bench");
}

const char* prompt_layout_name(PromptLayout layout) {
  switch (layout) {
    case PromptLayout::kMtBench:
      return "mt-bench";
    case PromptLayout::kSpecBench:
      return "spec-bench";
    case PromptLayout::kSpeedBench:
      return "speed-bench";
    default:
      return "jsonl";
  }
}

nlohmann::json tokenizer_fingerprint(const Tokenizer& tokenizer, const std::string& model_dir) {
  // The tokenizer's own files (the largest limit of a tokenizer file for each), then the
  // folder's two small JSON files.
  std::vector<std::pair<std::string, InputFileKind>> paths;
  for (const std::string& path : tokenizer.files()) paths.emplace_back(path, kTokenizerJsonFile);
  if (!model_dir.empty()) {
    for (const auto& [name, kind] : {std::pair{"/tokenizer_config.json", kTokenizerConfigFile},
                                     std::pair{"/special_tokens_map.json", kSpecialTokensMapFile}})
      if (input_exists(model_dir + name)) paths.emplace_back(model_dir + name, kind);
  }
  nlohmann::json files = nlohmann::json::array();
  std::uint64_t all = kFnv1a64Basis;
  for (const auto& [path, kind] : paths) {
    const std::string bytes = read_input_file(path, kind);
    all = fnv1a64(bytes, all);
    files.push_back({{"path", path}, {"bytes", bytes.size()}, {"fnv1a64", hex64(fnv1a64(bytes))}});
  }
  return {{"format", tokenizer.format()}, {"files", files}, {"fingerprint", hex64(all)}};
}

PromptConverter::PromptConverter(const PrepareOptions& options) : options_(options) {
  if (options_.model_dir.empty()) {
    SPEC_INPUT_CHECK(options_.template_file.empty() && options_.chat != ChatUse::kAlways,
                     "a chat template needs a tokenizer: pass --model DIR");
    return;
  }
  tokenizer_ = load_tokenizer_for(options_.model_dir);
  SPEC_INPUT_CHECK(tokenizer_ != nullptr,
                   options_.model_dir << " has no tokenizer (tokenizer.json, tokenizer.model or "
                                         "tokenizer.bin): prompts need \"tokens\"");
  SPEC_INPUT_CHECK(tokenizer_->can_encode(),
                   options_.model_dir << ": its " << tokenizer_->format()
                                      << " tokenizer cannot encode text; give prompts as "
                                         "\"tokens\"");
  // The token the tokenizer puts before plain text (BOS), if any: what encode adds in front
  // beyond the text's own ids (an appended EOS does not count).
  const std::vector<int> with = tokenizer_->encode("a", /*add_special=*/true);
  const std::vector<int> without = tokenizer_->encode("a", /*add_special=*/false);
  if (with.size() > without.size() && (without.empty() || with.front() != without.front()))
    plain_bos_ = with.front();
  const bool has_template =
      !options_.template_file.empty() || model_has_chat_template(options_.model_dir);
  if (options_.chat == ChatUse::kAlways)
    SPEC_INPUT_CHECK(has_template, options_.model_dir
                                       << " has no chat template (tokenizer_config.json: "
                                          "chat_template); pass --chat-template FILE, or "
                                          "--chat never");
  if (has_template && options_.chat != ChatUse::kNever)
    template_ = std::make_unique<ChatTemplate>(
        load_chat_template(options_.model_dir, options_.template_file, options_.template_name));
}

PromptConverter::~PromptConverter() = default;

std::string PromptConverter::encode_text(const std::string& text, PreparedPrompt& p) const {
  if (!tokenizer_) return "has \"text\" but no \"tokens\": pass --model DIR to tokenize it";
  if (text.empty()) return "\"text\" is empty; every prompt needs at least one token";
  if (const std::size_t bad = invalid_utf8_at(text); bad != std::string::npos)
    return "the text is not valid UTF-8 (byte " + std::to_string(bad) + ")";
  if (template_ && options_.chat == ChatUse::kAlways) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!options_.system_prompt.empty())
      messages.push_back({{"role", "system"}, {"content", options_.system_prompt}});
    messages.push_back({{"role", "user"}, {"content", text}});
    return encode_messages(messages, p);
  }
  const std::vector<int> ids = tokenizer_->encode(text, /*add_special=*/true);
  if (ids.empty()) return "the text encodes to no tokens";
  p.tokens.assign(ids.begin(), ids.end());
  p.text = text;
  p.has_text = true;
  return "";
}

std::string PromptConverter::encode_messages(const nlohmann::ordered_json& messages,
                                             PreparedPrompt& p) const {
  if (!tokenizer_) return "has \"messages\" but no \"tokens\": pass --model DIR to render them";
  if (!template_)
    return options_.chat == ChatUse::kNever
               ? "has \"messages\", but --chat never turns chat templates off"
               : options_.model_dir +
                     " has no chat template (tokenizer_config.json: chat_template) to render "
                     "\"messages\"; pass --chat-template FILE";
  if (std::string what = check_messages(messages); !what.empty()) return what;
  std::string rendered;
  try {
    rendered = render_chat_template(*template_, messages, /*add_generation_prompt=*/true);
  } catch (const Error& e) {
    return std::string("the chat template failed: ") + e.what();
  }
  template_used_ = true;
  // The template writes BOS and the turn markers itself.
  const std::vector<int> ids = tokenizer_->encode(rendered, /*add_special=*/false);
  if (ids.empty()) return "the rendered conversation encodes to no tokens";
  if (plain_bos_ >= 0 && ids.front() != plain_bos_) ++without_bos_;
  p.tokens.assign(ids.begin(), ids.end());
  p.text = rendered;
  p.has_text = true;
  return "";
}

std::string PromptConverter::convert(const std::string& line,
                                     std::vector<PreparedPrompt>& out) const {
  out.clear();
  if (const std::size_t at = json_too_deep_at(line); at != std::string_view::npos)
    return "nested more than " + std::to_string(kMaxJsonDepth) + " levels deep (at column " +
           std::to_string(at + 1) + ")";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    std::string what = e.what();
    auto pos = what.find("parse error");
    if (pos == std::string::npos && what.find("] ") != std::string::npos)
      pos = what.find("] ") + 2;  // "[json.exception.out_of_range.406] number overflow ..."
    what = pos == std::string::npos ? what : what.substr(pos);
    // The parser sees one line at a time: its "line 1" would contradict our line number.
    if (auto at = what.find("at line 1, column "); at != std::string::npos)
      what.replace(at, 18, "at column ");
    return "not valid JSON (" + what + ")";
  }
  if (!j.is_object()) return "expected a JSON object, got " + json_kind(j);
  std::string what = options_.layout == PromptLayout::kJsonl ? convert_object(line, j, out)
                                                             : convert_turns(j, out);
  if (what.empty())
    for (const PreparedPrompt& p : out)
      if (what = nul_in_strings(p); !what.empty()) break;
  if (!what.empty()) out.clear();
  return what;
}

std::string PromptConverter::convert_object(const std::string& line, const nlohmann::json& j,
                                            std::vector<PreparedPrompt>& out) const {
  PreparedPrompt p;
  if (std::string what = read_id(j, "id", p); !what.empty()) return what;
  for (auto [key, has, value] : {std::tuple{"category", &p.has_category, &p.category},
                                 std::tuple{"text", &p.has_text, &p.text}})
    if (std::string what = read_string(j, key, has, value); !what.empty()) return what;
  auto tokens = j.find("tokens");
  auto messages = j.find("messages");
  if (tokens != j.end()) {
    if (messages != j.end()) return "has both \"tokens\" and \"messages\"; give one";
    if (std::string what = read_tokens(*tokens, p.tokens); !what.empty()) return what;
  } else if (messages != j.end()) {
    if (p.has_text) return "has both \"text\" and \"messages\"; give one";
    // Parsed again keeping the keys' order: a template's tojson prints them in that order.
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(line);
    if (std::string what = encode_messages(ordered["messages"], p); !what.empty()) return what;
  } else if (p.has_text) {
    const std::string text = p.text;
    if (std::string what = encode_text(text, p); !what.empty()) return what;
  } else {
    return "missing \"tokens\" (a list of token ids), \"text\" or \"messages\"" +
           unknown_keys(j, {"id", "category", "text", "tokens", "messages"});
  }
  out.push_back(std::move(p));
  return "";
}

std::string PromptConverter::convert_turns(const nlohmann::json& j,
                                           std::vector<PreparedPrompt>& out) const {
  const char* layout = prompt_layout_name(options_.layout);
  PreparedPrompt base;
  for (const char* key : {"question_id", "category", "turns"})
    if (!j.contains(key))
      return std::string("missing \"") + key + "\", which every " + layout +
             " question has ({\"question_id\", \"category\", \"turns\": [...]})";
  if (std::string what = read_id(j, "question_id", base); !what.empty()) return what;
  if (!base.has_id) return "\"question_id\" is null";
  if (std::string what = read_string(j, "category", &base.has_category, &base.category);
      !what.empty())
    return what;
  const nlohmann::json& turns = j["turns"];
  if (!turns.is_array() || turns.empty())
    return "\"turns\" must be a non-empty list of strings, got " + json_kind(turns);
  for (size_t t = 0; t < turns.size(); ++t)
    if (!turns[t].is_string())
      return "\"turns\"[" + std::to_string(t) + "] must be a string, got " + json_kind(turns[t]);
  if (!tokenizer_) return "benchmark questions are text: pass --model DIR to tokenize them";
  const size_t n = options_.all_turns ? turns.size() : 1;
  for (size_t t = 0; t < n; ++t) {
    PreparedPrompt p = base;
    if (options_.all_turns) p.id = base.id + "/t" + std::to_string(t + 1);
    const std::string turn = turns[t].get<std::string>();
    std::string what;
    if (template_) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!options_.system_prompt.empty())
        messages.push_back({{"role", "system"}, {"content", options_.system_prompt}});
      messages.push_back({{"role", "user"}, {"content", turn}});
      what = encode_messages(messages, p);
    } else {
      what = encode_text(turn, p);
    }
    if (!what.empty())
      return (n > 1 ? "turn " + std::to_string(t + 1) + ": " : std::string()) + what;
    out.push_back(std::move(p));
  }
  return "";
}

void check_prompt_tokenizer(const std::string& prepared, const std::string& prompt_file,
                            const std::string& model_dir, const std::string& key) {
  const nlohmann::json j = nlohmann::json::parse(prepared, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("tokenizer") || !j["tokenizer"].is_object()) return;
  // The tokenizer's own files: (file name, fnv1a64), sorted; "" when not specrun's layout.
  auto own_files = [](const nlohmann::json& fingerprint) {
    std::vector<std::pair<std::string, std::string>> out;
    if (!fingerprint.contains("files") || !fingerprint["files"].is_array()) return out;
    for (const nlohmann::json& f : fingerprint["files"]) {
      if (!f.is_object() || !f.contains("path") || !f["path"].is_string() ||
          !f.contains("fnv1a64") || !f["fnv1a64"].is_string())
        return decltype(out){};
      const std::string name =
          std::filesystem::path(f["path"].get<std::string>()).filename().string();
      if (name == "tokenizer_config.json" || name == "special_tokens_map.json") continue;
      out.emplace_back(name, f["fnv1a64"].get<std::string>());
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto prepared_files = own_files(j["tokenizer"]);
  if (prepared_files.empty()) return;
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_tokenizer_for(model_dir);
  } catch (const Error&) {
    return;  // a folder whose tokenizer cannot be read has nothing to compare with
  }
  if (!tokenizer) return;
  const auto model_files = own_files(tokenizer_fingerprint(*tokenizer, model_dir));
  if (model_files == prepared_files) return;
  auto describe = [](const std::vector<std::pair<std::string, std::string>>& files) {
    std::string out;
    for (const auto& [name, hash] : files) out += (out.empty() ? "" : ", ") + name + " " + hash;
    return out;
  };
  const std::string made_with =
      j.contains("model") && j["model"].is_string() ? j["model"].get<std::string>() : "";
  SPEC_INPUT_FAIL(prompt_file << " was prepared with another tokenizer than " << key << "'s ("
                              << model_dir << "): its token ids mean other text to this model. "
                              << "Prepared with " << (made_with.empty() ? "?" : made_with) << " ("
                              << describe(prepared_files) << " fnv1a64), the model has "
                              << describe(model_files)
                              << ". Run `specrun prepare` again with --model " << model_dir);
}

nlohmann::json PromptConverter::provenance() const {
  nlohmann::json j = {{"layout", prompt_layout_name(options_.layout)},
                      {"chat", chat_use_name(options_.chat)},
                      {"turns", options_.all_turns ? "all" : "first"},
                      {"system_prompt", options_.system_prompt},
                      {"model", options_.model_dir}};
  j["tokenizer"] =
      tokenizer_ ? tokenizer_fingerprint(*tokenizer_, options_.model_dir) : nlohmann::json(nullptr);
  if (template_)
    j["chat_template"] = {{"origin", template_->origin},
                          {"fnv1a64", hex64(fnv1a64(template_->source))},
                          {"used", template_used_}};
  else
    j["chat_template"] = nullptr;
  return j;
}

std::string PromptConverter::chat_template_source() const {
  return template_ ? template_->source : std::string();
}

}  // namespace specrun
