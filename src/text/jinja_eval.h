// Runs a parsed template (jinja_ast.h) with Jinja2's scoping: the context and the globals are the
// outermost frame; every for-loop iteration and every macro call has a frame of its own, so a
// `set` inside a loop body is gone at the next iteration and after the loop (hence `namespace`),
// while `if` blocks share their surrounding frame; a macro sees the frame it was defined in (at
// call time), not its caller's.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_ast.h"

namespace specrun::jinja {

// Renders `body` with `variables` (later entries win) as the outermost frame, within the bounds
// of jinja_budget.h (the rendered text is one string: at most kMaxStringBytes). Throws
// TemplateError with the line of the innermost statement or expression and the loops and macros
// it was in.
std::string evaluate(const Body& body, const std::vector<std::pair<std::string, Value>>& variables);

}  // namespace specrun::jinja
