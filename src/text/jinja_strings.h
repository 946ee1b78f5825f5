// Python's str methods on UTF-8 text, as the Jinja engine needs them: lengths, indices and
// slices count code points; whitespace is str.isspace()'s; case mapping is per code point
// (utf8proc's simple mappings: "ß".upper() stays "ß" where Python gives "SS").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specrun::jinja {

// Code points of UTF-8 `text` (ill-formed bytes decode to U+FFFD).
std::vector<char32_t> decode_utf8(std::string_view text);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(const std::vector<char32_t>& cps);
std::size_t code_point_count(std::string_view text);

// str.isspace() for one code point: \t \n \v \f \r, \x1c-\x1f, space, \x85, \xa0, the Unicode
// space separators, U+2028, U+2029.
bool is_space(char32_t cp);
// str.isprintable() for one code point (what repr() leaves unescaped).
bool is_printable(char32_t cp);
// Letters, digits and underscore: the code points of regex \w (wordcount).
bool is_word(char32_t cp);

// str.strip/lstrip/rstrip: whitespace when `chars` is empty (nullopt), else any of `chars`.
std::string strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                  bool right);
// The byte offset of the first `sub` in `text` at or after `from`, or npos; in linear time
// (glibc's two-way memmem; std::string_view::find can take |text| x |sub| steps).
std::size_t find_bytes(std::string_view text, std::string_view sub, std::size_t from);
// str.split(sep, maxsplit) (sep nullopt: runs of whitespace, no empty strings); throws
// TemplateError for an empty separator.
std::vector<std::string> split(std::string_view text, const std::optional<std::string>& sep,
                               std::int64_t maxsplit);
// str.rsplit(sep, maxsplit).
std::vector<std::string> rsplit(std::string_view text, const std::optional<std::string>& sep,
                                std::int64_t maxsplit);
// str.splitlines() (without keepends).
std::vector<std::string> splitlines(std::string_view text);
// str.replace(old, new, count): count < 0 replaces every occurrence.
std::string replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                    std::int64_t count);
// str.count(sub) and str.find(sub) (an index in code points, -1 when absent).
std::int64_t count(std::string_view text, std::string_view sub);
std::int64_t find(std::string_view text, std::string_view sub, bool reverse);

std::string upper(std::string_view text);
std::string lower(std::string_view text);
// str.title(): a cased character after an uncased one is title-cased, the others lowercased.
std::string title_method(std::string_view text);
// Jinja's `title` filter: the first character of each word (words begin after - ( { [ < or
// whitespace) uppercased, the rest lowercased.
std::string title_filter(std::string_view text);
// str.capitalize(): the first character title-cased, the rest lowercased.
std::string capitalize(std::string_view text);
// str.islower()/isupper(): at least one cased character and none of the other case.
bool is_lower(std::string_view text);
bool is_upper(std::string_view text);

// repr(text): quoted with ' (or " when the text has ' but no "), escapes as Python's.
std::string string_repr(std::string_view text);
// Jinja's escape filter: & < > " ' as HTML entities.
std::string html_escape(std::string_view text);

}  // namespace specrun::jinja
