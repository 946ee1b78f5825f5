// The input layouts of `specrun prepare` and their conversion to token ids: one JSONL line in,
// one prompt (or, with every turn of a benchmark question, several) out.
//
// Layouts (docs/file-formats.md, "Preparing prompts"):
//  - jsonl: {"tokens": [...]} | {"text": "..."} | {"messages": [{"role", "content"}, ...]}, with
//    optional "id", "category" (and "text" next to "tokens", stored as given);
//  - mt-bench, spec-bench: {"question_id", "category", "turns": ["...", ...]} (FastChat's
//    question.jsonl, which Spec-Bench's data/spec_bench/question.jsonl follows);
//  - speed-bench: SPEED-Bench's rows as JSONL ({"question_id", "category", "sub_category",
//    "turns", "source", "src_id", "difficulty", "multiturn"}), e.g. the parquet split exported
//    with `datasets`' to_json.
// Text and messages need a tokenizer (`--model DIR`); messages and benchmark turns are rendered
// with the model's chat template (add_generation_prompt true) and encoded without adding
// special tokens (the template writes them), as transformers' apply_chat_template does; plain
// text is encoded with them (BOS).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace specrun {

enum class PromptLayout { kJsonl, kMtBench, kSpecBench, kSpeedBench };

// "jsonl", "mt-bench", "spec-bench", "speed-bench"; throws listing them for anything else.
PromptLayout parse_prompt_layout(const std::string& name);
const char* prompt_layout_name(PromptLayout layout);

// When a chat template wraps a prompt.
enum class ChatUse {
  kAuto,    // messages always; benchmark turns when the model has a template; text never
  kAlways,  // text and turns too (as one user message); an error when there is no template
  kNever,   // benchmark turns as plain text; messages are then an error
};

struct PrepareOptions {
  PromptLayout layout = PromptLayout::kJsonl;
  std::string model_dir;      // tokenizer and chat template; "" = token ids only
  std::string template_file;  // a Jinja file to use instead of the model's template
  std::string template_name;  // a named template of tokenizer_config.json
  ChatUse chat = ChatUse::kAuto;
  bool all_turns = false;     // benchmark questions: every turn a prompt (else the first)
  std::string system_prompt;  // a system message before templated text and turns
  bool overwrite = false;
};

// One prompt as it goes into the prompt file.
struct PreparedPrompt {
  std::vector<int32_t> tokens;
  bool has_id = false, has_category = false, has_text = false;
  std::string id, category, text;
};

class PromptConverter {
 public:
  // Loads the tokenizer and the chat template of options.model_dir when it is given (throws
  // naming the folder when it has no tokenizer that can encode).
  explicit PromptConverter(const PrepareOptions& options);
  ~PromptConverter();

  // Converts one non-blank line into `out` (cleared first). Returns "" or what is wrong with
  // the line (the caller adds the line number).
  std::string convert(const std::string& line, std::vector<PreparedPrompt>& out) const;

  // What the conversion used, for the prompt file's root attributes: {"layout", "tokenizer":
  // {format, files: [{path, bytes, fnv1a64}], fingerprint} or null, "chat_template": {origin,
  // fnv1a64, used} or null, "turns", "chat", "system_prompt"}.
  nlohmann::json provenance() const;
  // The template's source text ("" when none was loaded).
  std::string chat_template_source() const;
  // The token the tokenizer puts before plain text (BOS; -1 when none), and how many rendered
  // conversations converted so far do not start with it: a chat template that does not write
  // {{ bos_token }} for a model whose tokenizer adds BOS (kept as rendered, as transformers'
  // apply_chat_template(tokenize=True) does; `prepare` warns).
  int plain_bos() const { return plain_bos_; }
  std::int64_t templated_without_bos() const { return without_bos_; }

 private:
  std::string convert_object(const std::string& line, const nlohmann::json& j,
                             std::vector<PreparedPrompt>& out) const;
  std::string convert_turns(const nlohmann::json& j, std::vector<PreparedPrompt>& out) const;
  // Tokens of a rendered conversation or of plain text.
  std::string encode_messages(const nlohmann::ordered_json& messages, PreparedPrompt& p) const;
  std::string encode_text(const std::string& text, PreparedPrompt& p) const;

  PrepareOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  mutable bool template_used_ = false;
  int plain_bos_ = -1;
  mutable std::int64_t without_bos_ = 0;
};

// Fingerprint of a tokenizer's files and tokenizer_config.json beside them: {"format", "files":
// [{path, bytes, fnv1a64}], "fingerprint": fnv1a64 over every file's bytes, as 16 hex digits}.
nlohmann::json tokenizer_fingerprint(const Tokenizer& tokenizer, const std::string& model_dir);

// Checks that a prompt file's prompts were encoded by the tokenizer of the model in `model_dir`
// (named `key`, e.g. "target.path"): `prepared` is the file's `prepared` attribute (JSON, "" when
// absent). The tokenizer's own files (tokenizer.json, tokenizer.model) must have the same bytes;
// tokenizer_config.json is left out (a changed chat template does not change the ids). Nothing
// to check when the prompts were given as token ids, the attribute is not specrun's, or the folder
// has no readable tokenizer. Otherwise an input error naming both files and the way out: ids made
// by another tokenizer mean other text to this model, and were caught only when one exceeded
// the vocabulary.
void check_prompt_tokenizer(const std::string& prepared, const std::string& prompt_file,
                            const std::string& model_dir, const std::string& key);

}  // namespace specrun
