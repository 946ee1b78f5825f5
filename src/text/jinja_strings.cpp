#include "text/jinja_strings.h"

#include <utf8proc.h>

#include <string.h>  // memmem

#include <algorithm>
#include <cstdio>

#include "text/jinja_budget.h"
#include "text/jinja_error.h"

namespace specrun::jinja {

namespace {

bool is_cased(char32_t cp) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT;
}
char32_t to_upper(char32_t cp) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_lower(char32_t cp) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_title(char32_t cp) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

std::string map_code_points(std::string_view text, char32_t (*fn)(char32_t)) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : decode_utf8(text)) append_utf8(out, fn(cp));
  return out;
}

bool in_set(char32_t cp, const std::vector<char32_t>& set) {
  return std::find(set.begin(), set.end(), cp) != set.end();
}

// The byte offset of each code point of `text`, and text.size() at the end.
std::vector<std::size_t> code_point_offsets(std::string_view text) {
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) offsets.push_back(i);
  offsets.push_back(text.size());
  return offsets;
}

}  // namespace

std::vector<char32_t> decode_utf8(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    utf8proc_int32_t cp = 0;
    const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i);
    const auto n = utf8proc_iterate(bytes, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(static_cast<char32_t>(cp));
      i += static_cast<std::size_t>(n);
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  utf8proc_uint8_t buffer[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(n));
}

std::string encode_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

std::size_t code_point_count(std::string_view text) {
  std::size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool is_word(char32_t cp) {
  if (cp == '_') return true;
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
         (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
}

std::string strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::vector<char32_t> cps = decode_utf8(text);
  const std::vector<char32_t> set = chars ? decode_utf8(*chars) : std::vector<char32_t>{};
  auto strippable = [&](char32_t cp) { return chars ? in_set(cp, set) : is_space(cp); };
  std::size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strippable(cps[begin])) ++begin;
  if (right)
    while (end > begin && strippable(cps[end - 1])) --end;
  return encode_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(begin),
                                           cps.begin() + static_cast<std::ptrdiff_t>(end)));
}

std::size_t find_bytes(std::string_view text, std::string_view sub, std::size_t from) {
  if (from > text.size()) return std::string_view::npos;
  if (sub.empty()) return from;
  const void* at = ::memmem(text.data() + from, text.size() - from, sub.data(), sub.size());
  return at ? static_cast<std::size_t>(static_cast<const char*>(at) - text.data())
            : std::string_view::npos;
}

std::vector<std::string> split(std::string_view text, const std::optional<std::string>& sep,
                               std::int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) throw TemplateError("empty separator");
    std::size_t start = 0;
    while (maxsplit != 0) {
      const std::size_t at = find_bytes(text, *sep, start);
      if (at == std::string_view::npos) break;
      check_items(parts.size() + 2);
      parts.emplace_back(text.substr(start, at - start));
      start = at + sep->size();
      if (maxsplit > 0) --maxsplit;
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  const std::vector<char32_t> cps = decode_utf8(text);
  std::size_t i = 0;
  while (true) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    std::size_t j = i;
    if (maxsplit == 0) {
      j = cps.size();
    } else {
      while (j < cps.size() && !is_space(cps[j])) ++j;
      if (maxsplit > 0) --maxsplit;
    }
    check_items(parts.size() + 1);
    parts.push_back(
        encode_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                          cps.begin() + static_cast<std::ptrdiff_t>(j))));
    i = j;
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view text, const std::optional<std::string>& sep,
                                std::int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    // Matches found from the right are those of the reversed text, found from the left (in
    // linear time, where repeated rfind calls are not).
    if (sep->empty()) throw TemplateError("empty separator");
    parts = split(std::string(text.rbegin(), text.rend()), std::string(sep->rbegin(), sep->rend()),
                  maxsplit);
    for (std::string& part : parts) std::reverse(part.begin(), part.end());
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  const std::vector<char32_t> cps = decode_utf8(text);
  std::size_t j = cps.size();
  while (true) {
    while (j > 0 && is_space(cps[j - 1])) --j;
    if (j == 0) break;
    std::size_t i = j;
    if (maxsplit == 0) {
      i = 0;
    } else {
      while (i > 0 && !is_space(cps[i - 1])) --i;
      if (maxsplit > 0) --maxsplit;
    }
    check_items(parts.size() + 1);
    parts.push_back(
        encode_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(i),
                                          cps.begin() + static_cast<std::ptrdiff_t>(j))));
    j = i;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view text) {
  const std::vector<char32_t> cps = decode_utf8(text);
  auto is_break = [](char32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
  };
  std::vector<std::string> lines;
  std::string line;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (!is_break(cps[i])) {
      append_utf8(line, cps[i]);
      continue;
    }
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    check_items(lines.size() + 1);
    lines.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

std::string replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                    std::int64_t count) {
  std::string out;
  if (old_text.empty()) {
    const std::vector<std::size_t> offsets = code_point_offsets(text);
    for (std::size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count != 0) {
        out += new_text;
        if (count > 0) --count;
      }
      out += text.substr(offsets[k], offsets[k + 1] - offsets[k]);
      check_string_bytes(out.size());
    }
    if (count != 0) out += new_text;
    return out;
  }
  std::size_t start = 0;
  while (count != 0) {
    const std::size_t at = find_bytes(text, old_text, start);
    if (at == std::string_view::npos) break;
    out += text.substr(start, at - start);
    out += new_text;
    check_string_bytes(out.size());
    start = at + old_text.size();
    if (count > 0) --count;
  }
  out += text.substr(start);
  return out;
}

std::int64_t count(std::string_view text, std::string_view sub) {
  if (sub.empty()) return static_cast<std::int64_t>(code_point_count(text)) + 1;
  std::int64_t n = 0;
  for (std::size_t at = find_bytes(text, sub, 0); at != std::string_view::npos;
       at = find_bytes(text, sub, at + sub.size()))
    ++n;
  return n;
}

std::int64_t find(std::string_view text, std::string_view sub, bool reverse) {
  std::size_t at = std::string_view::npos;
  if (!reverse) {
    at = find_bytes(text, sub, 0);
  } else if (sub.size() <= text.size()) {
    // The last match is the first one in the reversed text (linear time, unlike rfind).
    const std::size_t back = find_bytes(std::string(text.rbegin(), text.rend()),
                                        std::string(sub.rbegin(), sub.rend()), 0);
    if (back != std::string_view::npos) at = text.size() - back - sub.size();
  }
  if (at == std::string_view::npos) return -1;
  return static_cast<std::int64_t>(code_point_count(text.substr(0, at)));
}

namespace {

// Python's full case mappings where one character becomes several (SpecialCasing.txt, the
// unconditional ones templates could meet); nullptr for the others.
const char* special_upper(char32_t cp) {
  switch (cp) {
    case 0xDF:
      return "SS";
    case 0x149:
      return "\u02BCN";
    case 0xFB00:
      return "FF";
    case 0xFB01:
      return "FI";
    case 0xFB02:
      return "FL";
    case 0xFB03:
      return "FFI";
    case 0xFB04:
      return "FFL";
    case 0xFB05:
    case 0xFB06:
      return "ST";
    default:
      return nullptr;
  }
}

}  // namespace

std::string upper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : decode_utf8(text)) {
    if (const char* full = special_upper(cp))
      out += full;
    else
      append_utf8(out, to_upper(cp));
  }
  return out;
}
std::string lower(std::string_view text) {
  return map_code_points(text, to_lower);
}

std::string title_method(std::string_view text) {
  std::string out;
  bool previous_cased = false;
  for (char32_t cp : decode_utf8(text)) {
    append_utf8(out, previous_cased ? to_lower(cp) : to_title(cp));
    previous_cased = is_cased(cp);
  }
  return out;
}

std::string title_filter(std::string_view text) {
  auto separator = [](char32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_space(cp);
  };
  std::string out;
  bool word_start = true;
  for (char32_t cp : decode_utf8(text)) {
    if (separator(cp)) {
      append_utf8(out, cp);
      word_start = true;
    } else {
      append_utf8(out, word_start ? to_upper(cp) : to_lower(cp));
      word_start = false;
    }
  }
  return out;
}

std::string capitalize(std::string_view text) {
  std::string out;
  bool first = true;
  for (char32_t cp : decode_utf8(text)) {
    append_utf8(out, first ? to_title(cp) : to_lower(cp));
    first = false;
  }
  return out;
}

bool is_lower(std::string_view text) {
  bool cased = false;
  for (char32_t cp : decode_utf8(text)) {
    const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || category == UTF8PROC_CATEGORY_LL;
  }
  return cased;
}

bool is_upper(std::string_view text) {
  bool cased = false;
  for (char32_t cp : decode_utf8(text)) {
    const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || category == UTF8PROC_CATEGORY_LU;
  }
  return cased;
}

std::string string_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  char buffer[16];
  for (char32_t cp : decode_utf8(text)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(cp));
      out += buffer;
    } else if (cp < 0x7F || is_printable(cp)) {
      append_utf8(out, cp);
    } else {
      const char* format = cp <= 0xFF ? "\\x%02x" : cp <= 0xFFFF ? "\\u%04x" : "\\U%08x";
      std::snprintf(buffer, sizeof buffer, format, static_cast<unsigned>(cp));
      out += buffer;
    }
  }
  out += quote;
  return out;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace specrun::jinja
