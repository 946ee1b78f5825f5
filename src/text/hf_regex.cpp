#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/hf_regex.h"

#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include "common/error.h"
#include "text/hf_unicode.h"

namespace specrun::hf {

namespace {

constexpr std::string_view kWordChars = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";

bool is_ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char other_case(char c) {
  return c >= 'a' ? static_cast<char>(c - 32) : static_cast<char>(c + 32);
}
bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

std::string word_class(bool negated) {
  return std::string(negated ? "[^" : "[") + std::string(kWordChars) + "]";
}

std::string word_boundary(bool negated) {
  const std::string w = word_class(false);
  return negated ? "(?:(?<!" + w + ")(?!" + w + ")|(?<=" + w + ")(?=" + w + "))"
                 : "(?:(?<!" + w + ")(?=" + w + ")|(?<=" + w + ")(?!" + w + "))";
}

// The escape at p[i] == '\\' that PCRE2 understands as Oniguruma does, copied whole (\p{..},
// \x{..}, \xHH, \uHHHH rewritten as \x{HHHH}, or a backslash and one character). Sets `len`.
std::string copy_escape(std::string_view p, std::size_t i, std::size_t* len) {
  if (i + 1 >= p.size()) throw std::invalid_argument("the pattern ends with a backslash");
  const char d = p[i + 1];
  if ((d == 'p' || d == 'P' || d == 'x') && i + 2 < p.size() && p[i + 2] == '{') {
    const std::size_t close = p.find('}', i + 3);
    if (close == std::string_view::npos)
      throw std::invalid_argument(std::string("unterminated \\") + d + "{");
    *len = close + 1 - i;
    return std::string(p.substr(i, *len));
  }
  if (d == 'u') {
    if (i + 5 < p.size() && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4]) &&
        is_hex(p[i + 5])) {
      *len = 6;
      return "\\x{" + std::string(p.substr(i + 2, 4)) + "}";
    }
    throw std::invalid_argument("\\u must be followed by four hexadecimal digits");
  }
  if (d == 'x' && i + 3 < p.size() && is_hex(p[i + 2]) && is_hex(p[i + 3])) {
    *len = 4;
    return std::string(p.substr(i, 4));
  }
  if ((d == 'p' || d == 'P') && i + 2 < p.size()) {
    *len = 3;
    return std::string(p.substr(i, 3));
  }
  *len = 1 + utf8_length(static_cast<unsigned char>(d));
  return std::string(p.substr(i, *len));
}

// The class that starts at p[i] == '['; appends its PCRE2 form to `out` and returns the index
// after its closing bracket. `fold`: inside (?i:...).
std::size_t translate_class(std::string_view p, std::size_t i, bool fold, std::string& out) {
  const std::size_t n = p.size();
  std::string body;
  std::string folded;  // the other case of ASCII letters, under `fold`
  bool negated = false;
  ++i;
  if (i < n && p[i] == '^') {
    negated = true;
    ++i;
  }
  bool first = true;
  for (;;) {
    if (i >= n) throw std::invalid_argument("unterminated character class");
    const char c = p[i];
    if (c == ']' && !first) {
      ++i;
      break;
    }
    first = false;
    if (c == '[') {
      if (p.compare(i, 2, "[:") == 0) {
        const std::size_t close = p.find(":]", i + 2);
        if (close == std::string_view::npos)
          throw std::invalid_argument("unterminated POSIX class [:...:]");
        body.append(p.substr(i, close + 2 - i));
        i = close + 2;
        continue;
      }
      throw std::invalid_argument("nested character classes are not supported");
    }
    if (c == '&' && i + 1 < n && p[i + 1] == '&')
      throw std::invalid_argument("character class intersection (&&) is not supported");
    if (c == '\\') {
      if (i + 1 >= n) throw std::invalid_argument("the pattern ends with a backslash");
      const char d = p[i + 1];
      std::size_t len = 2;
      switch (d) {
        case 's':
          body += "\\p{White_Space}";
          break;
        case 'S':
          body += "\\P{White_Space}";
          break;
        case 'h':
          body += "0-9A-Fa-f";
          break;
        case 'w':
          body += kWordChars;
          break;
        case 'd':
          body += "\\p{Nd}";
          break;
        case 'D':
          body += "\\P{Nd}";
          break;
        case 'W':
        case 'H':
          throw std::invalid_argument(std::string("\\") + d +
                                      " inside a character class is not supported");
        default:
          body += copy_escape(p, i, &len);
      }
      i += len;
      continue;
    }
    const std::size_t len = utf8_length(static_cast<unsigned char>(c));
    const bool range = i + len + 1 < n && p[i + len] == '-' && p[i + len + 1] != ']' &&
                       p[i + len + 1] != '\\' && p[i + len + 1] != '[';
    if (range) {
      const std::size_t hi_at = i + len + 1;
      const std::size_t hi_len = utf8_length(static_cast<unsigned char>(p[hi_at]));
      body.append(p.substr(i, hi_at + hi_len - i));
      if (fold && len == 1 && hi_len == 1) {
        const char lo = c, hi = p[hi_at];
        const char lower_lo = std::max(lo, 'a'), lower_hi = std::min(hi, 'z');
        const char upper_lo = std::max(lo, 'A'), upper_hi = std::min(hi, 'Z');
        if (lower_lo <= lower_hi) folded += {other_case(lower_lo), '-', other_case(lower_hi)};
        if (upper_lo <= upper_hi) folded += {other_case(upper_lo), '-', other_case(upper_hi)};
      }
      i = hi_at + hi_len;
      continue;
    }
    body.append(p.substr(i, len));
    if (fold && len == 1 && is_ascii_letter(c)) folded.push_back(other_case(c));
    i += len;
  }
  out += negated ? "[^" : "[";
  out += body;
  out += folded;
  out += ']';
  return i;
}

// {n}, {n,}, {n,m} or {,m} at p[i]; false when p[i] does not start a valid interval.
bool parse_interval(std::string_view p, std::size_t i, std::string* body, std::size_t* len) {
  const std::size_t close = p.find('}', i);
  if (close == std::string_view::npos) return false;
  const std::string_view inner = p.substr(i + 1, close - i - 1);
  const std::size_t comma = inner.find(',');
  auto digits = [](std::string_view s) {
    for (char c : s)
      if (c < '0' || c > '9') return false;
    return true;
  };
  if (inner.empty()) return false;
  if (comma == std::string_view::npos) {
    if (!digits(inner)) return false;
    *body = std::string(inner);
  } else {
    const std::string_view lo = inner.substr(0, comma), hi = inner.substr(comma + 1);
    if (!digits(lo) || !digits(hi) || hi.find(',') != std::string_view::npos) return false;
    if (lo.empty() && hi.empty()) return false;
    *body = (lo.empty() ? std::string("0") : std::string(lo)) + "," + std::string(hi);
  }
  *len = close + 1 - i;
  return true;
}

}  // namespace

std::string oniguruma_to_pcre2(std::string_view p) {
  std::string out;
  struct Group {
    std::size_t start;
    bool fold;
  };
  std::vector<Group> groups;
  bool fold = false;
  std::size_t atom_start = std::string::npos;  // where the last quantifiable atom begins in out
  auto emit_atom = [&](std::string_view text) {
    atom_start = out.size();
    out.append(text);
  };
  const std::size_t n = p.size();
  for (std::size_t i = 0; i < n;) {
    const char c = p[i];
    switch (c) {
      case '\\': {
        if (i + 1 >= n) throw std::invalid_argument("the pattern ends with a backslash");
        const char d = p[i + 1];
        std::size_t len = 2;
        switch (d) {
          case 's':
            emit_atom("\\p{White_Space}");
            break;
          case 'S':
            emit_atom("\\P{White_Space}");
            break;
          case 'h':
            emit_atom("[0-9A-Fa-f]");
            break;
          case 'H':
            emit_atom("[^0-9A-Fa-f]");
            break;
          case 'w':
            emit_atom(word_class(false));
            break;
          case 'W':
            emit_atom(word_class(true));
            break;
          case 'd':
            emit_atom("\\p{Nd}");
            break;
          case 'D':
            emit_atom("\\P{Nd}");
            break;
          case 'b':
            emit_atom(word_boundary(false));
            break;
          case 'B':
            emit_atom(word_boundary(true));
            break;
          default:
            emit_atom(copy_escape(p, i, &len));
        }
        i += len;
        break;
      }
      case '[': {
        std::string cls;
        i = translate_class(p, i, fold, cls);
        emit_atom(cls);
        break;
      }
      case '(': {
        if (p.compare(i, 3, "(?#") == 0) {
          const std::size_t close = p.find(')', i);
          if (close == std::string_view::npos) throw std::invalid_argument("unterminated (?#");
          i = close + 1;
          break;
        }
        std::string prefix = "(";
        std::size_t consumed = 1;
        bool folding = fold;
        if (p.compare(i, 4, "(?i:") == 0) {
          prefix = "(?:";
          consumed = 4;
          folding = true;
        } else if (i + 1 < n && p[i + 1] == '?') {
          const std::string_view rest = p.substr(i + 2);
          std::size_t len = 0;
          if (!rest.empty() &&
              (rest[0] == ':' || rest[0] == '=' || rest[0] == '!' || rest[0] == '>'))
            len = 3;
          else if (rest.size() >= 2 && rest[0] == '<' && (rest[1] == '=' || rest[1] == '!'))
            len = 4;
          else if (!rest.empty() && (rest[0] == '<' || rest[0] == 'P' || rest[0] == '\'')) {
            const std::size_t close = p.find(rest[0] == '\'' ? '\'' : '>', i + 3);
            if (close == std::string_view::npos)
              throw std::invalid_argument("unterminated group name");
            len = close + 1 - i;  // a named group: copied with its name
          } else {
            throw std::invalid_argument("the group \"" + std::string(p.substr(i, 4)) +
                                        "...\" is not supported (of the inline flags only "
                                        "(?i:...) is)");
          }
          prefix = std::string(p.substr(i, len));
          consumed = len;
        }
        groups.push_back({out.size(), fold});
        out += prefix;
        fold = folding;
        atom_start = std::string::npos;
        i += consumed;
        break;
      }
      case ')':
        if (groups.empty()) throw std::invalid_argument("unbalanced )");
        out += ')';
        atom_start = groups.back().start;
        fold = groups.back().fold;
        groups.pop_back();
        ++i;
        break;
      case '|':
        out += '|';
        atom_start = std::string::npos;
        ++i;
        break;
      case '.':
        emit_atom("[^\\n]");
        ++i;
        break;
      case '{': {
        std::string body;
        std::size_t len = 0;
        if (atom_start == std::string::npos || !parse_interval(p, i, &body, &len)) {
          emit_atom("\\{");
          ++i;
          break;
        }
        i += len;
        const char next = i < n ? p[i] : '\0';
        const bool exact = body.find(',') == std::string::npos;
        if (next == '+' || next == '*' || (next == '?' && exact)) {
          // Oniguruma's Ruby syntax: X{2}+ is (X{2})+, and X{2}? is (X{2})?.
          out.insert(atom_start, "(?:");
          out += "{" + body + "})";
          out += next;
          ++i;
        } else {
          out += "{" + body + "}";
        }
        break;
      }
      case '}':
        emit_atom("\\}");
        ++i;
        break;
      case ']':
        emit_atom("\\]");
        ++i;
        break;
      case '*':
      case '+':
      case '?':
      case '^':
      case '$':
        out += c;
        ++i;
        break;
      default: {
        const std::size_t len = utf8_length(static_cast<unsigned char>(c));
        if (fold && len == 1 && is_ascii_letter(c))
          emit_atom(std::string{'[', c, other_case(c), ']'});
        else
          emit_atom(p.substr(i, len));
        i += len;
      }
    }
  }
  if (!groups.empty()) throw std::invalid_argument("unbalanced (");
  return out;
}

Regex::Regex(const std::string& pcre2_pattern, std::string where) : where_(std::move(where)) {
  pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
  SPEC_CHECK(ctx != nullptr, "out of memory creating a PCRE2 compile context");
  pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern.data()), pcre2_pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, ctx);
  pcre2_compile_context_free(ctx);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    SPEC_INPUT_FAIL(where_ << ": the regex does not compile (PCRE2: "
                           << reinterpret_cast<const char*>(message) << " at offset " << offset
                           << " of the rewritten pattern " << pcre2_pattern << ")");
  }
  // Without JIT (not built in, or no executable memory) pcre2_match interprets: same matches.
  (void)pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() {
  pcre2_code_free(code_);
}

void Regex::find_all(std::string_view text, std::vector<Match>* out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  SPEC_CHECK(data != nullptr, "out of memory creating PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
      rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      SPEC_INPUT_FAIL(where_ << ": matching the regex failed at byte " << pos
                             << " (PCRE2: " << reinterpret_cast<const char*>(message) << ")");
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const std::size_t start = ovector[0];
    const std::size_t end = std::max<std::size_t>(ovector[1], start);  // \K can invert them
    out->push_back({start, end});
    if (end > start) {
      pos = end;
    } else {
      if (end >= text.size()) return;
      pos = end + utf8_length(static_cast<unsigned char>(text[end]));
    }
  }
}

Pattern::Pattern(const JsonField& json) {
  json.expect_object();
  const JsonField literal = json.get("String");
  const JsonField regex = json.get("Regex");
  if (!literal.is_null()) {
    literal_ = json.string("String");
  } else if (!regex.is_null()) {
    const std::string source = json.string("Regex");
    std::string translated;
    try {
      translated = oniguruma_to_pcre2(source);
    } catch (const std::invalid_argument& e) {
      SPEC_INPUT_FAIL(regex.where() << " " << nlohmann::json(source).dump() << ": " << e.what());
    }
    regex_ = std::make_unique<Regex>(translated, regex.where());
  } else {
    SPEC_INPUT_FAIL(json.where() << " must be {\"String\": ...} or {\"Regex\": ...}");
  }
}

void Pattern::find_all(std::string_view text, std::vector<Match>* out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  for (std::size_t pos = text.find(literal_); pos != std::string_view::npos;
       pos = text.find(literal_, pos + literal_.size()))
    out->push_back({pos, pos + literal_.size()});
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<Match> matches;
  find_all(text, &matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t prev = 0;
  for (const Match& m : matches) {
    out.append(text.substr(prev, m.start - prev));
    out.append(content);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace specrun::hf
