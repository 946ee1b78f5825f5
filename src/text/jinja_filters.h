// Jinja2's filters and tests that chat templates use, with Jinja2's semantics (and
// transformers' own `tojson`: json.dumps with ensure_ascii=False, no HTML escaping, options
// ensure_ascii, indent, separators, sort_keys).
//
// Filters: abs attr capitalize count d default dictsort e escape first float indent int items
// join last length list lower map max min reject rejectattr replace reverse round safe select
// selectattr sort string sum title tojson trim unique upper wordcount.
// Tests: boolean callable defined divisibleby eq equalto escaped even false float ge gt
// greaterthan in integer iterable le lessthan lower lt mapping ne none number odd sameas
// sequence string true undefined upper, and == != < <= > >= (for select/reject).
#pragma once

#include <string>

#include "text/jinja_value.h"

namespace specrun::jinja {

// Throw TemplateError unless the engine implements the filter (test) `name`: "unknown filter
// 'x'", or "... is not supported" for one of Jinja2's the engine lacks. The parser calls them,
// as Jinja2 refuses unknown filters when it compiles a template.
void check_filter(const std::string& name);
void check_test(const std::string& name);

// `operand | name(args)`.
Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);
// `operand is name(args)`.
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);

}  // namespace specrun::jinja
