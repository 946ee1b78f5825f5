// Code-point helpers shared by the tokenizer.json components. Every function expects valid UTF-8
// (the tokenizer validates its input once, up front).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace specrun::hf {

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
inline std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// The code point at `text[pos]`; advances `pos` past it.
char32_t next_code_point(std::string_view text, std::size_t& pos);

void append_utf8(std::string& out, char32_t cp);

// Unicode's White_Space property: what Rust's char::is_whitespace and Oniguruma's \s accept
// (U+0085 included; U+FEFF and U+180E not).
bool is_white_space(char32_t cp);

// Number of bytes of white space at the start / end of `text`.
std::size_t leading_white_space(std::string_view text);
std::size_t trailing_white_space(std::string_view text);

}  // namespace specrun::hf
