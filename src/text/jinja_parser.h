// The Jinja parser: tokens (jinja_lexer.h) -> syntax tree (jinja_ast.h), following Jinja2's
// grammar and operator precedence (lowest first): `a if c else b`, or, and, not, comparisons
// and `in` (chained as in Python), + -, ~, * / // %, **, unary - +, then primaries with
// `.attr`, `[index]`, `[a:b:c]`, calls, `| filter` and `is test`.
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (name, tuple,
// namespace attribute, block set with filters), macro, filter blocks, break/continue,
// transformers' generation blocks; raw blocks come from the lexer. Anything else (include,
// import, extends, block, call, with, do, recursive loops, *args) is refused with a
// TemplateError naming the construct and its line, as are unknown filters and tests (Jinja2 too
// refuses those when it compiles the template; inside an `if`, as in Jinja2 3.x, they fail only
// when evaluated).
#pragma once

#include <string>

#include "text/jinja_ast.h"

namespace specrun::jinja {

// The statements of a template whose source went through normalize_source().
Body parse_template(const std::string& normalized);

}  // namespace specrun::jinja
