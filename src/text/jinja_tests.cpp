// Jinja2's tests (`x is defined`, `x is not none`, `n is divisibleby 3`, select('equalto', 1)).
#include <algorithm>
#include <map>

#include "text/jinja_error.h"
#include "text/jinja_filters.h"
#include "text/jinja_ops.h"
#include "text/jinja_strings.h"

namespace specrun::jinja {

namespace {

using TestFn = bool (*)(const Value& v, const CallArgs& args, const std::string& name);

Value argument(const CallArgs& args, const std::string& name) {
  args.check(name, 1, {});
  if (args.positional.empty()) throw TemplateError("test '" + name + "' needs an argument");
  return args.positional[0];
}

void no_arguments(const CallArgs& args, const std::string& name) {
  args.check(name, 0, {});
}

bool t_defined(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return !v.is_undefined();
}
bool t_undefined(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_undefined();
}
bool t_none(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_none();
}
bool t_boolean(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_bool();
}
bool t_true(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_bool() && v.as_bool();
}
bool t_false(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_bool() && !v.as_bool();
}
bool t_string(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_string();
}
bool t_number(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_number();
}
bool t_integer(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_int();
}
bool t_float(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_float();
}
bool t_mapping(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_dict();
}
// Python's iter() and len()+__getitem__ succeed on str, list, tuple, dict and (Jinja2's)
// Undefined.
bool t_iterable(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_callable(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return v.is_callable();
}
bool t_escaped(const Value&, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return false;  // nothing is Markup with autoescape off
}
bool t_lower(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return is_lower(to_str(v));
}
bool t_upper(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return is_upper(to_str(v));
}
bool remainder_is(const Value& v, const Value& divisor, std::int64_t r) {
  return equals(binary_op(BinaryExpr::Op::kMod, v, divisor), Value::integer(r));
}
bool t_odd(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return remainder_is(v, Value::integer(2), 1);
}
bool t_even(const Value& v, const CallArgs& a, const std::string& n) {
  no_arguments(a, n);
  return remainder_is(v, Value::integer(2), 0);
}
bool t_divisibleby(const Value& v, const CallArgs& a, const std::string& n) {
  return remainder_is(v, argument(a, n), 0);
}
bool t_eq(const Value& v, const CallArgs& a, const std::string& n) {
  return equals(v, argument(a, n));
}
bool t_ne(const Value& v, const CallArgs& a, const std::string& n) {
  return !equals(v, argument(a, n));
}
bool t_lt(const Value& v, const CallArgs& a, const std::string& n) {
  return compare(v, argument(a, n)) < 0;
}
bool t_le(const Value& v, const CallArgs& a, const std::string& n) {
  return compare(v, argument(a, n)) <= 0;
}
bool t_gt(const Value& v, const CallArgs& a, const std::string& n) {
  return compare(v, argument(a, n)) > 0;
}
bool t_ge(const Value& v, const CallArgs& a, const std::string& n) {
  return compare(v, argument(a, n)) >= 0;
}
bool t_in(const Value& v, const CallArgs& a, const std::string& n) {
  return contains(argument(a, n), v);
}
bool t_sameas(const Value& v, const CallArgs& a, const std::string& n) {
  return v.same_object(argument(a, n));
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = {
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"float", t_float},
      {"ge", t_ge},
      {">=", t_ge},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"<=", t_le},
      {"lessthan", t_lt},
      {"lower", t_lower},
      {"lt", t_lt},
      {"<", t_lt},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"!=", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_iterable},
      {"string", t_string},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return table;
}

}  // namespace

void check_test(const std::string& name) {
  if (tests().count(name)) return;
  if (name == "filter" || name == "test")
    throw TemplateError("test '" + name + "' is not supported by the chat-template engine");
  throw TemplateError("unknown test '" + name + "'");
}

bool apply_test(const std::string& name, const Value& operand, const CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) check_test(name);
  return it->second(operand, args, name);
}

}  // namespace specrun::jinja
