// The patterns of tokenizer.json (Split pre-tokenizer, Replace normalizer and decoder). The Rust
// library compiles {"Regex": ...} with Oniguruma; here they are rewritten for PCRE2 (UTF, UCP,
// JIT when available) so that they match what Oniguruma matches, as Hugging Face's tokenizers.js
// rewrites them for JavaScript:
//   \s \S        Unicode White_Space (PCRE2's own \s would also take U+180E)
//   \w \W \b \B  Oniguruma's word characters: Alphabetic, marks, Nd, Pc
//   \h \H        hexadecimal digits (PCRE2's \h is horizontal space)
//   \uHHHH       \x{HHHH};  .  any character but \n;  ^ $  line anchors (Oniguruma's default)
//   (?i:...)     ASCII letters match both cases, as tokenizers.js does (Oniguruma would also
//                fold U+017F to s and U+212A to k; the Llama 3 and Qwen contraction groups
//                differ only for "'ſ")
//   X{n,m}+      (?:X{n,m})+ and X{n}? (?:X{n})? (Oniguruma's Ruby syntax); {,n} is {0,n}
// Nested classes, class intersection (&&) and inline flags other than (?i:...) are refused.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/hf_json.h"

struct pcre2_real_code_8;

namespace specrun::hf {

struct Match {
  std::size_t start;
  std::size_t end;
};

// `pattern` (Oniguruma syntax) rewritten for PCRE2. Throws std::invalid_argument naming the
// construct it cannot rewrite.
std::string oniguruma_to_pcre2(std::string_view pattern);

// A compiled PCRE2 pattern. Thread-safe: matching allocates its own match data.
class Regex {
 public:
  // `pcre2_pattern` as oniguruma_to_pcre2 returns it; `where` names the field in errors.
  Regex(const std::string& pcre2_pattern, std::string where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-overlapping matches in `text` (valid UTF-8), leftmost first. After an empty
  // match the search resumes one character further on, as Oniguruma's and JavaScript's global
  // searches do.
  void find_all(std::string_view text, std::vector<Match>* out) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
  std::string where_;
};

// {"String": "literal"} or {"Regex": "oniguruma pattern"}.
class Pattern {
 public:
  explicit Pattern(const JsonField& json);
  // As Regex::find_all; an empty literal matches nothing (as in the Rust library).
  void find_all(std::string_view text, std::vector<Match>* out) const;
  // `text` with every match replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace specrun::hf
