// The Jinja lexer, with the environment transformers renders chat templates in
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//  - line endings \r\n and \r become \n, and one trailing newline is dropped;
//  - `{%- `, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`, `-#}` all after it;
//    `{%+` keeps the indentation lstrip_blocks would strip, `+%}` the newline trim_blocks would;
//  - trim_blocks: the first newline after a block tag or a comment is removed;
//  - lstrip_blocks: spaces and tabs from the start of a line to a block tag or a comment are
//    removed (not when anything else precedes the tag on that line);
//  - comments `{# #}` vanish; `{% raw %}...{% endraw %}` is text;
//  - string literals decode their escapes as Python's unicode-escape does (\n, \t, \x41,
//    \u00e9, \U0001F600, octal, line continuations; an unknown escape such as \d stays as
//    written).
// Whitespace is Python's str.isspace().
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace specrun::jinja {

struct Token {
  enum class Type {
    kText,           // template text, with whitespace control applied
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kName,
    kString,  // value: the decoded string
    kInteger,
    kFloat,
    kOperator,  // + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } ;
    kEnd,       // end of the template
  };
  Type type;
  std::string value;
  int line;           // 1-based line of the token's first character
  std::size_t begin;  // byte offsets in the normalized source, for quoting a construct
  std::size_t end;
};

// The normalized source (newlines, trailing newline) the offsets of tokenize() refer to.
std::string normalize_source(std::string_view source);

// Tokens of a normalized source, ending with kEnd. Throws TemplateError with the line on a
// character that cannot start a token, an unterminated string, comment or tag, or unbalanced
// brackets.
std::vector<Token> tokenize(const std::string& normalized);

}  // namespace specrun::jinja
