// Python's operators on template values, and Jinja2's sandboxed attribute and item access
// (transformers' ImmutableSandboxedEnvironment): what `a + b`, `x in y`, `obj.name`, `obj[i]`,
// `obj[a:b:c]` and `for x in obj` do. Errors are TemplateErrors with Python's wording.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "text/jinja_ast.h"
#include "text/jinja_value.h"

namespace specrun::jinja {

// + - * / // % ** ~ (not `and`/`or`, which the evaluator short-circuits). Python's rules: int
// arithmetic stays int (overflow of 64 bits is an error), `/` gives a float, `//` and `%` floor,
// str + str and list + list concatenate, str * int repeats, `~` joins str() of both sides.
Value binary_op(BinaryExpr::Op op, const Value& a, const Value& b);
// Unary - and + of a number.
Value unary_op(UnaryExpr::Op op, const Value& operand);
// `item in container`: substring, list element, dict key; false for an undefined container.
bool contains(const Value& container, const Value& item);

// `object.name`: a method of a str or dict (items, keys, values, get, split, strip, ...), else
// the dict's item, a namespace's attribute, or undefined. Methods that would modify a list or a
// dict (append, update, pop, ...) are undefined values that fail when called, as in the
// immutable sandbox. An undefined `object` is an error ("'x' is undefined").
Value get_attribute(const Value& object, const std::string& name);
// `object[index]`: a dict's item, a list's or str's element (negative indices count from the
// end), else a method named `index`, else undefined (missing keys and out-of-range indices are
// undefined, not errors, as in Jinja2).
Value get_item(const Value& object, const Value& index);
// `object[start:stop:step]` of a list, tuple or str (an omitted bound is none); an error for
// other objects and for bounds that are neither integers nor none.
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);
// The items `for` visits: a list's items, a dict's keys, a str's characters; none for an
// undefined value; an error for anything else.
std::vector<Value> iterate(const Value& value);

// The method `name` of a str, dict or list bound to `object`, or nullopt.
std::optional<Value> bound_method(const Value& object, const std::string& name);

}  // namespace specrun::jinja
