#include "text/jinja_ops.h"

#include <algorithm>
#include <cmath>

#include "text/jinja_budget.h"
#include "text/jinja_error.h"
#include "text/jinja_strings.h"

namespace specrun::jinja {

namespace {

const char* op_symbol(BinaryExpr::Op op) {
  switch (op) {
    case BinaryExpr::Op::kAdd:
      return "+";
    case BinaryExpr::Op::kSub:
      return "-";
    case BinaryExpr::Op::kMul:
      return "*";
    case BinaryExpr::Op::kDiv:
      return "/";
    case BinaryExpr::Op::kFloorDiv:
      return "//";
    case BinaryExpr::Op::kMod:
      return "%";
    case BinaryExpr::Op::kPow:
      return "**";
    default:
      return "?";
  }
}

[[noreturn]] void unsupported(BinaryExpr::Op op, const Value& a, const Value& b) {
  throw TemplateError(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": '" +
                      a.type_name() + "' and '" + b.type_name() + "'");
}

void check_overflow(bool overflow) {
  if (overflow) throw TemplateError("integer overflow (the engine's integers have 64 bits)");
}

std::int64_t int_pow(std::int64_t base, std::int64_t exp) {
  std::int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
    exp >>= 1;
    if (exp > 0) check_overflow(__builtin_mul_overflow(base, base, &base));
  }
  return result;
}

// Python's float divmod: (floor quotient, remainder with the divisor's sign).
std::pair<double, double> float_divmod(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv = 0;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

Value numeric_op(BinaryExpr::Op op, const Value& a, const Value& b) {
  const bool as_float = a.is_float() || b.is_float();
  if (op == BinaryExpr::Op::kDiv || as_float || (op == BinaryExpr::Op::kPow && b.as_int() < 0)) {
    const double x = a.as_double(), y = b.as_double();
    switch (op) {
      case BinaryExpr::Op::kAdd:
        return Value::number(x + y);
      case BinaryExpr::Op::kSub:
        return Value::number(x - y);
      case BinaryExpr::Op::kMul:
        return Value::number(x * y);
      case BinaryExpr::Op::kDiv:
        if (y == 0) throw TemplateError("division by zero");
        return Value::number(x / y);
      case BinaryExpr::Op::kFloorDiv:
      case BinaryExpr::Op::kMod: {
        if (y == 0) throw TemplateError("float division by zero");
        const auto [q, r] = float_divmod(x, y);
        return Value::number(op == BinaryExpr::Op::kFloorDiv ? q : r);
      }
      case BinaryExpr::Op::kPow: {
        if (x == 0 && y < 0) throw TemplateError("0.0 cannot be raised to a negative power");
        const double p = std::pow(x, y);
        if (std::isnan(p) && !std::isnan(x) && !std::isnan(y))
          throw TemplateError("a negative number raised to a fractional power is complex");
        return Value::number(p);
      }
      default:
        break;
    }
  }
  const std::int64_t x = a.as_int(), y = b.as_int();
  std::int64_t r = 0;
  switch (op) {
    case BinaryExpr::Op::kAdd:
      check_overflow(__builtin_add_overflow(x, y, &r));
      return Value::integer(r);
    case BinaryExpr::Op::kSub:
      check_overflow(__builtin_sub_overflow(x, y, &r));
      return Value::integer(r);
    case BinaryExpr::Op::kMul:
      check_overflow(__builtin_mul_overflow(x, y, &r));
      return Value::integer(r);
    case BinaryExpr::Op::kFloorDiv:
    case BinaryExpr::Op::kMod: {
      if (y == 0) throw TemplateError("integer division or modulo by zero");
      check_overflow(x == INT64_MIN && y == -1);
      std::int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        --q;
      }
      return Value::integer(op == BinaryExpr::Op::kFloorDiv ? q : m);
    }
    case BinaryExpr::Op::kPow:
      return Value::integer(int_pow(x, y));
    default:
      break;
  }
  unsupported(op, a, b);
}

Value repeat(const Value& sequence, std::int64_t times) {
  if (times <= 0)
    return sequence.is_string() ? Value::string("") : Value::list({}, sequence.as_list().tuple);
  // Refused before it is built: 'x' * 10**12 would exhaust memory (Python would try).
  const std::size_t unit =
      sequence.is_string() ? sequence.as_string().size() : sequence.as_list().items.size();
  if (unit == 0) return sequence;  // '' * 10**12 without 10**12 iterations
  const auto n = static_cast<std::uint64_t>(times);
  if (sequence.is_string() && n > kMaxStringBytes / unit) check_string_bytes(kMaxStringBytes + 1);
  if (sequence.is_list() && n > kMaxItems / unit) check_items(kMaxItems + 1);
  if (sequence.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<std::size_t>(times));
    for (std::int64_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  for (std::int64_t i = 0; i < times; ++i)
    items.insert(items.end(), sequence.as_list().items.begin(), sequence.as_list().items.end());
  return Value::list(std::move(items), sequence.as_list().tuple);
}

std::string object_repr(const Value& object) {
  if (object.is_none()) return "None";
  if (object.is_namespace()) return "'jinja2.utils.Namespace object'";
  return "'" + object.type_name() + " object'";
}

Value no_attribute(const Value& object, const std::string& name) {
  return Value::undefined(object_repr(object) + " has no attribute " + string_repr(name));
}

bool is_unsafe(const Value& object, const std::string& name) {
  static constexpr std::string_view kList[] = {"append", "extend",  "insert", "pop",
                                               "remove", "reverse", "sort",   "clear"};
  static constexpr std::string_view kDict[] = {"pop", "popitem", "setdefault", "update", "clear"};
  if (object.is_list() && !object.as_list().tuple)
    return std::find(std::begin(kList), std::end(kList), name) != std::end(kList);
  if (object.is_dict())
    return std::find(std::begin(kDict), std::end(kDict), name) != std::end(kDict);
  return false;
}

Value unsafe(const Value& object, const std::string& name) {
  return Value::undefined("access to attribute " + string_repr(name) + " of " +
                          string_repr(object.type_name()) +
                          " object is unsafe: transformers renders chat templates in an immutable "
                          "sandbox, where lists and dicts cannot be modified (build a new one, or "
                          "use a namespace)");
}

// Python's slice index normalization: the [begin, end) walk of `length` items by `step`.
std::vector<std::size_t> slice_indices(std::size_t size, const Value& start, const Value& stop,
                                       std::int64_t step) {
  const auto length = static_cast<std::int64_t>(size);
  auto bound = [&](const Value& v, std::int64_t fallback, std::int64_t low, std::int64_t high) {
    if (v.is_none()) return fallback;
    std::int64_t i = v.as_int();
    if (i < 0) i += length;
    return std::clamp(i, low, high);
  };
  std::int64_t begin = 0, end = 0;
  if (step > 0) {
    begin = bound(start, 0, 0, length);
    end = bound(stop, length, 0, length);
  } else {
    begin = bound(start, length - 1, -1, length - 1);
    end = bound(stop, -1, -1, length - 1);
  }
  std::vector<std::size_t> indices;
  for (std::int64_t i = begin; step > 0 ? i < end : i > end; i += step)
    indices.push_back(static_cast<std::size_t>(i));
  return indices;
}

}  // namespace

Value binary_op(BinaryExpr::Op op, const Value& a, const Value& b) {
  if (op == BinaryExpr::Op::kConcat) {
    const std::string left = to_str(a), right = to_str(b);
    check_string_bytes(left.size() + right.size());  // before it is built
    return Value::string(left + right);
  }
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) return numeric_op(op, a, b);
  switch (op) {
    case BinaryExpr::Op::kAdd:
      if (a.is_string() && b.is_string()) {
        check_string_bytes(a.as_string().size() + b.as_string().size());
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
        check_items(a.as_list().items.size() + b.as_list().items.size());
        std::vector<Value> items = a.as_list().items;
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        return Value::list(std::move(items), a.as_list().tuple);
      }
      if (a.is_string() || a.is_list())
        throw TemplateError("can only concatenate " + a.type_name() + " (not \"" + b.type_name() +
                            "\") to " + a.type_name());
      break;
    case BinaryExpr::Op::kMul:
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
        return repeat(a, b.as_int());
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
        return repeat(b, a.as_int());
      break;
    case BinaryExpr::Op::kMod:
      if (a.is_string())
        throw TemplateError(
            "printf-style string formatting ('...' % values) is not supported by the "
            "chat-template engine");
      break;
    default:
      break;
  }
  unsupported(op, a, b);
}

Value unary_op(UnaryExpr::Op op, const Value& operand) {
  if (operand.is_undefined()) throw_undefined(operand);
  if (!operand.is_number())
    throw TemplateError(std::string("bad operand type for unary ") +
                        (op == UnaryExpr::Op::kNeg ? "-" : "+") + ": '" + operand.type_name() +
                        "'");
  if (operand.is_float())
    return Value::number(op == UnaryExpr::Op::kNeg ? -operand.as_double() : operand.as_double());
  if (op == UnaryExpr::Op::kPos) return Value::integer(operand.as_int());
  check_overflow(operand.as_int() == INT64_MIN);
  return Value::integer(-operand.as_int());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        throw TemplateError("'in <string>' requires string as left operand, not " +
                            item.type_name());
      count_bytes(container.as_string().size() + item.as_string().size());
      return find_bytes(container.as_string(), item.as_string(), 0) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list().items)
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      if (item.is_list() || item.is_dict())
        throw TemplateError("unhashable type: '" + item.type_name() + "'");
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) throw_undefined(object);
  if (object.is_namespace()) {
    const Value* v = object.namespace_attrs().find(name);
    return v ? *v : no_attribute(object, name);
  }
  if (auto method = bound_method(object, name)) return *method;
  if (is_unsafe(object, name)) return unsafe(object, name);
  if (object.is_dict()) {
    const Value* v = object.as_dict().find(name);
    if (v) return *v;
  }
  return no_attribute(object, name);
}

Value get_item(const Value& object, const Value& index) {
  if (object.is_undefined()) throw_undefined(object);
  if (object.is_dict() && index.is_string()) {
    const Value* v = object.as_dict().find(index.as_string());
    if (v) return *v;
  }
  if ((object.is_list() || object.is_string()) && (index.is_int() || index.is_bool())) {
    const std::size_t size =
        object.is_list() ? object.as_list().items.size() : code_point_count(object.as_string());
    std::int64_t i = index.as_int();
    if (i < 0) i += static_cast<std::int64_t>(size);
    if (i >= 0 && i < static_cast<std::int64_t>(size)) {
      if (object.is_list()) return object.as_list().items[static_cast<std::size_t>(i)];
      std::string out;
      append_utf8(out, decode_utf8(object.as_string())[static_cast<std::size_t>(i)]);
      return Value::string(std::move(out));
    }
    return Value::undefined(object_repr(object) + " has no element " +
                            std::to_string(index.as_int()));
  }
  if (index.is_string()) return get_attribute(object, index.as_string());
  return Value::undefined(object_repr(object) + " has no element " + to_repr(index));
}

Value slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  // Jinja2 compiles a slice to Python's own subscript, not the sandbox's forgiving getitem: a
  // bad object or bound is an error, not an undefined value.
  if (object.is_undefined()) throw_undefined(object);
  if (!object.is_list() && !object.is_string())
    throw TemplateError("'" + object.type_name() + "' object cannot be sliced");
  for (const Value* bound : {&start, &stop, &step})
    if (!bound->is_none() && !bound->is_int() && !bound->is_bool())
      throw TemplateError("slice indices must be integers or None or have an __index__ method");
  const std::int64_t by = step.is_none() ? 1 : step.as_int();
  if (by == 0) throw TemplateError("slice step cannot be zero");
  if (object.is_list()) {
    const auto& items = object.as_list().items;
    std::vector<Value> out;
    for (std::size_t i : slice_indices(items.size(), start, stop, by)) out.push_back(items[i]);
    return Value::list(std::move(out), object.as_list().tuple);
  }
  const std::vector<char32_t> cps = decode_utf8(object.as_string());
  std::string out;
  for (std::size_t i : slice_indices(cps.size(), start, stop, by)) append_utf8(out, cps[i]);
  return Value::string(std::move(out));
}

std::vector<Value> iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      count_steps(value.as_list().items.size());
      return value.as_list().items;
    case Value::Kind::kDict: {
      count_steps(value.as_dict().entries.size());
      std::vector<Value> keys;
      for (const auto& [k, v] : value.as_dict().entries) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      const std::size_t n = code_point_count(value.as_string());
      check_items(n);
      count_steps(n);
      std::vector<Value> chars;
      chars.reserve(n);
      for (char32_t cp : decode_utf8(value.as_string())) {
        std::string c;
        append_utf8(c, cp);
        chars.push_back(Value::string(std::move(c)));
      }
      return chars;
    }
    default:
      throw TemplateError("'" + value.type_name() + "' object is not iterable");
  }
}

}  // namespace specrun::jinja
