#include "text/jinja_lexer.h"

#include <algorithm>
#include <optional>

#include "text/jinja_error.h"
#include "text/jinja_strings.h"

namespace specrun::jinja {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool all_space(std::string_view text) {
  for (char32_t cp : decode_utf8(text))
    if (!is_space(cp)) return false;
  return true;
}

// The code point at `pos` and its length in bytes (1 for a stray byte).
std::pair<char32_t, std::size_t> code_point_at(const std::string& s, std::size_t pos) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  const std::size_t len = lead < 0x80    ? 1
                          : lead >= 0xF0 ? 4
                          : lead >= 0xE0 ? 3
                          : lead >= 0xC0 ? 2
                                         : 1;
  if (pos + len > s.size()) return {0xFFFD, 1};
  const std::vector<char32_t> cps = decode_utf8(std::string_view(s).substr(pos, len));
  if (cps.size() != 1) return {0xFFFD, 1};
  return {cps[0], len};
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    std::size_t pos = 0;
    while (pos < src_.size()) {
      const std::size_t at = find_tag_start(pos);
      std::string text = src_.substr(pos, at - pos);
      if (at == src_.size()) {
        emit_text(std::move(text), pos, at);
        break;
      }
      const char kind = src_[at + 1];
      const char sign =
          at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : 0;
      emit_text(strip_before_tag(std::move(text), kind, sign), pos, at);
      if (kind == '#') {
        pos = lex_comment(at, sign);
      } else if (kind == '%' && raw_begin_end(at, sign)) {
        pos = lex_raw(at, *raw_begin_end(at, sign));
      } else {
        pos = lex_tag(at, kind, sign);
      }
    }
    tokens_.push_back({Token::Type::kEnd, "", line_of(src_.size()), src_.size(), src_.size()});
    return std::move(tokens_);
  }

 private:
  int line_of(std::size_t offset) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) -
                            line_starts_.begin());
  }
  [[noreturn]] void fail(std::size_t offset, const std::string& message) const {
    throw TemplateError(message, line_of(offset));
  }

  std::size_t find_tag_start(std::size_t pos) const {
    for (std::size_t at = src_.find('{', pos); at != std::string::npos; at = src_.find('{', at + 1))
      if (at + 1 < src_.size() &&
          (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#'))
        return at;
    return src_.size();
  }

  std::size_t skip_space(std::size_t pos) const {
    while (pos < src_.size()) {
      const auto [cp, len] = code_point_at(src_, pos);
      if (!is_space(cp)) break;
      pos += len;
    }
    return pos;
  }

  void emit(Token::Type type, std::string value, std::size_t begin, std::size_t end) {
    tokens_.push_back({type, std::move(value), line_of(begin), begin, end});
  }
  void emit_text(std::string text, std::size_t begin, std::size_t end) {
    if (!text.empty()) emit(Token::Type::kText, std::move(text), begin, end);
  }

  // Whitespace control of the text before a tag: `-` strips all trailing whitespace; otherwise
  // lstrip_blocks strips the indentation before a block tag or comment standing at the start of
  // a line (after a newline of the text, or at the start of the template or after a tag whose
  // match ended with a newline).
  std::string strip_before_tag(std::string text, char kind, char sign) const {
    if (sign == '-') return strip(text, std::nullopt, false, true);
    if (sign == '+' || kind == '{') return text;
    const std::size_t newline = text.rfind('\n');
    const std::size_t line_begin = newline == std::string::npos ? 0 : newline + 1;
    if ((line_begin > 0 || line_starting_) && line_begin < text.size() &&
        all_space(std::string_view(text).substr(line_begin)))
      text.resize(line_begin);
    return text;
  }

  // After a tag end at `pos` (just past `%}`, `}}` or `#}`) with its sign: where the next text
  // starts.
  std::size_t after_tag_end(std::size_t pos, char end_sign, bool trim_newline) {
    std::size_t next = pos;
    if (end_sign == '-')
      next = skip_space(pos);
    else if (end_sign != '+' && trim_newline && next < src_.size() && src_[next] == '\n')
      ++next;
    line_starting_ = next > 0 && src_[next - 1] == '\n';
    return next;
  }

  std::size_t lex_comment(std::size_t at, char sign) {
    const std::size_t content = at + 2 + (sign ? 1 : 0);
    const std::size_t close = src_.find("#}", content);
    if (close == std::string::npos) fail(at, "unterminated comment: '{#' without '#}'");
    const char end_sign =
        close > content && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    return after_tag_end(close + 2, end_sign, true);
  }

  // If `{%` at `at` opens `{% raw %}`: the offset just past it and its end sign.
  std::optional<std::pair<std::size_t, char>> raw_begin_end(std::size_t at, char sign) const {
    std::size_t pos = skip_space(at + 2 + (sign ? 1 : 0));
    if (src_.compare(pos, 3, "raw") != 0 || (pos + 3 < src_.size() && is_name_char(src_[pos + 3])))
      return std::nullopt;
    pos = skip_space(pos + 3);
    if (src_.compare(pos, 3, "-%}") == 0) return std::make_pair(pos + 3, '-');
    if (src_.compare(pos, 2, "%}") == 0) return std::make_pair(pos + 2, '\0');
    return std::nullopt;
  }

  std::size_t lex_raw(std::size_t at, std::pair<std::size_t, char> begin_end) {
    std::size_t body = begin_end.first;
    if (begin_end.second == '-') body = skip_space(body);
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (std::size_t open = src_.find("{%", body); open != std::string::npos;
         open = src_.find("{%", open + 1)) {
      const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+')
                            ? src_[open + 2]
                            : 0;
      std::size_t pos = skip_space(open + 2 + (sign ? 1 : 0));
      if (src_.compare(pos, 6, "endraw") != 0) continue;
      pos = skip_space(pos + 6);
      char end_sign = 0;
      if (pos < src_.size() && (src_[pos] == '-' || src_[pos] == '+')) end_sign = src_[pos++];
      if (src_.compare(pos, 2, "%}") != 0) continue;
      emit_text(strip_before_tag(src_.substr(body, open - body), '%', sign), body, open);
      return after_tag_end(pos + 2, end_sign, true);
    }
    fail(at, "'{% raw %}' without '{% endraw %}'");
  }

  std::size_t lex_tag(std::size_t at, char kind, char sign) {
    const bool block = kind == '%';
    emit(block ? Token::Type::kBlockBegin : Token::Type::kVariableBegin, block ? "{%" : "{{", at,
         at + 2);
    line_starting_ = false;
    std::vector<char> brackets;  // closing brackets expected, innermost last
    std::size_t pos = at + 2 + (sign ? 1 : 0);
    while (true) {
      pos = skip_space(pos);
      if (pos >= src_.size())
        fail(at, std::string("unterminated tag: '") + (block ? "{%" : "{{") + "' without '" +
                     (block ? "%}" : "}}") + "'");
      if (brackets.empty()) {
        const char* close = block ? "%}" : "}}";
        const Token::Type end_type = block ? Token::Type::kBlockEnd : Token::Type::kVariableEnd;
        if (src_[pos] == '-' && src_.compare(pos + 1, 2, close) == 0) {
          emit(end_type, close, pos, pos + 3);
          return after_tag_end(pos + 3, '-', block);
        }
        if (block && src_.compare(pos, 3, "+%}") == 0) {
          emit(end_type, close, pos, pos + 3);
          return after_tag_end(pos + 3, '+', block);
        }
        if (src_.compare(pos, 2, close) == 0) {
          emit(end_type, close, pos, pos + 2);
          return after_tag_end(pos + 2, 0, block);
        }
      }
      const char c = src_[pos];
      if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        std::size_t end = pos;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        emit(Token::Type::kName, src_.substr(pos, end - pos), pos, end);
        pos = end;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, brackets);
      }
    }
  }

  std::size_t consume_digits(std::size_t pos) const {  // (\d+_)*\d+
    while (pos < src_.size() && is_digit(src_[pos])) {
      ++pos;
      if (pos + 1 < src_.size() && src_[pos] == '_' && is_digit(src_[pos + 1])) ++pos;
    }
    return pos;
  }

  std::size_t lex_number(std::size_t pos) {
    std::size_t end = consume_digits(pos);
    bool is_float = false;
    if (pos == 0 || src_[pos - 1] != '.') {  // `a.0.1` is a[0][1], not a[0.1]
      if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
        end = consume_digits(end + 1);
        is_float = true;
      }
      if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
        std::size_t exp = end + 1;
        if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-')) ++exp;
        if (exp < src_.size() && is_digit(src_[exp])) {
          end = consume_digits(exp);
          is_float = true;
        }
      }
    }
    std::string text = src_.substr(pos, end - pos);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    emit(is_float ? Token::Type::kFloat : Token::Type::kInteger, std::move(text), pos, end);
    return end;
  }

  std::size_t lex_string(std::size_t pos) {
    const char quote = src_[pos];
    std::size_t end = pos + 1;
    while (end < src_.size() && src_[end] != quote) end += src_[end] == '\\' ? 2 : 1;
    if (end >= src_.size()) fail(pos, "unterminated string literal");
    emit(Token::Type::kString, decode_escapes(pos + 1, end), pos, end + 1);
    return end + 1;
  }

  // Python's unicode-escape decoding of the literal's bytes [begin, end).
  std::string decode_escapes(std::size_t begin, std::size_t end) const {
    std::string out;
    for (std::size_t i = begin; i < end; ++i) {
      if (src_[i] != '\\') {
        out += src_[i];
        continue;
      }
      const std::size_t at = i++;
      const char e = src_[i];
      switch (e) {
        case '\n':
          continue;  // line continuation
        case '\\':
        case '\'':
        case '"':
          out += e;
          continue;
        case 'a':
          out += '\a';
          continue;
        case 'b':
          out += '\b';
          continue;
        case 'f':
          out += '\f';
          continue;
        case 'n':
          out += '\n';
          continue;
        case 'r':
          out += '\r';
          continue;
        case 't':
          out += '\t';
          continue;
        case 'v':
          out += '\v';
          continue;
        case 'N':
          fail(at, "\\N{...} escapes in string literals are not supported");
        default:
          break;
      }
      char32_t cp = 0;
      if (e >= '0' && e <= '7') {
        std::size_t n = 0;
        for (; n < 3 && i + n < end && src_[i + n] >= '0' && src_[i + n] <= '7'; ++n)
          cp = cp * 8 + static_cast<char32_t>(src_[i + n] - '0');
        i += n - 1;
      } else if (e == 'x' || e == 'u' || e == 'U') {
        const std::size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        for (std::size_t k = 1; k <= digits; ++k) {
          const int h = i + k < end ? hex_value(src_[i + k]) : -1;
          if (h < 0)
            fail(at, std::string("truncated \\") + e + " escape in a string literal (needs " +
                         std::to_string(digits) + " hex digits)");
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        i += digits;
        if (cp > 0x10FFFF) fail(at, "illegal Unicode character escape in a string literal");
      } else {
        out += '\\';  // unknown escape: kept as written
        out += e;
        continue;
      }
      if (cp >= 0xD800 && cp <= 0xDFFF)
        fail(at, "a surrogate escape in a string literal cannot be encoded as UTF-8");
      append_utf8(out, cp);
    }
    return out;
  }

  std::size_t lex_operator(std::size_t pos, std::vector<char>& brackets) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos, 2, op) == 0) {
        emit(Token::Type::kOperator, std::string(op), pos, pos + 2);
        return pos + 2;
      }
    }
    const char c = src_[pos];
    if (std::string_view("+-*/%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      const auto [cp, len] = code_point_at(src_, pos);
      std::string shown;
      append_utf8(shown, cp);
      fail(pos, "unexpected character '" + shown + "' in a tag");
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) fail(pos, std::string("unexpected '") + c + "'");
      if (brackets.back() != c)
        fail(pos, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
      brackets.pop_back();
    }
    emit(Token::Type::kOperator, std::string(1, c), pos, pos + 1);
    return pos + 1;
  }

  const std::string& src_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;
};

}  // namespace

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(const std::string& normalized) {
  return Lexer(normalized).run();
}

}  // namespace specrun::jinja
