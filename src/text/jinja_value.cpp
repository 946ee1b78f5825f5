#include "text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "text/jinja_budget.h"
#include "text/jinja_error.h"
#include "text/jinja_strings.h"

namespace specrun::jinja {

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.string_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.int_ = b ? 1 : 0;
  return v;
}

Value Value::integer(std::int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = d;
  return v;
}

Value Value::string(std::string s) {
  check_string_bytes(s.size());
  count_bytes(s.size());
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

namespace {

int nested_depth(int child_depth) {
  if (child_depth + 1 > kMaxValueDepth)
    throw TemplateError("lists and dicts nested deeper than " + std::to_string(kMaxValueDepth) +
                        " levels are not supported");
  return child_depth + 1;
}

}  // namespace

Value Value::list(std::vector<Value> items, bool tuple) {
  check_items(items.size());
  count_bytes(items.size() * sizeof(Value));
  Value v;
  v.kind_ = Kind::kList;
  int child = 0;
  for (const Value& item : items) child = std::max(child, item.depth_);
  v.depth_ = nested_depth(child);
  v.list_ = std::make_shared<const ListData>(ListData{std::move(items), tuple});
  return v;
}

Value Value::dict(DictData data) {
  check_items(data.entries.size());
  count_bytes(data.entries.size() * sizeof(Value));
  return loop_dict(std::move(data));
}

Value Value::loop_dict(DictData data) {
  Value v;
  v.kind_ = Kind::kDict;
  int child = 0;
  for (const auto& entry : data.entries) child = std::max(child, entry.second.depth_);
  v.depth_ = nested_depth(child);
  v.dict_ = std::make_shared<const DictData>(std::move(data));
  return v;
}

Value Value::new_namespace(DictData attrs) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.depth_ = 1;  // its attributes change; to_repr() bounds the recursion through namespaces
  v.namespace_ = std::make_shared<DictData>(std::move(attrs));
  return v;
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const std::string& Value::as_string() const {
  static const std::string kNoHint;
  return string_ ? *string_ : kNoHint;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !string_->empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return !dict_->entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list_->tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool Value::same_object(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return int_ == other.int_;
    case Kind::kList:
      return list_ == other.list_;
    case Kind::kDict:
      return dict_ == other.dict_;
    case Kind::kNamespace:
      return namespace_ == other.namespace_;
    case Kind::kCallable:
      return callable_ == other.callable_;
    default:
      return false;
  }
}

Value CallArgs::get(std::size_t index, std::string_view name, Value fallback,
                    std::string_view function) const {
  const Value* found = index < positional.size() ? &positional[index] : nullptr;
  for (const auto& [key, value] : keyword) {
    if (key != name) continue;
    if (found)
      throw TemplateError(std::string(function) + "() got multiple values for argument '" +
                          std::string(name) + "'");
    found = &value;
  }
  return found ? *found : fallback;
}

void CallArgs::check(std::string_view function, std::size_t max_positional,
                     std::initializer_list<std::string_view> names) const {
  if (positional.size() > max_positional)
    throw TemplateError(std::string(function) + "() takes at most " +
                        std::to_string(max_positional) + " positional argument(s) (" +
                        std::to_string(positional.size()) + " given)");
  for (const auto& [key, value] : keyword)
    if (std::find(names.begin(), names.end(), key) == names.end())
      throw TemplateError(std::string(function) + "() got an unexpected keyword argument '" + key +
                          "'");
}

void throw_undefined(const Value& value) {
  const std::string& hint = value.as_string();
  throw TemplateError(hint.empty() ? "an undefined value was used" : hint);
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buffer[64];
  // Shortest round-trip digits in scientific form: "-1.2345e+17".
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, d, std::chars_format::scientific);
  std::string text(buffer, result.ptr);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const std::size_t e = text.find('e');
  const int exponent = std::stoi(text.substr(e + 1));
  std::string digits = text.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int decimal_point = exponent + 1;  // digits before the point in positional notation
  const int n = static_cast<int>(digits.size());
  std::string out;
  if (decimal_point > -4 && decimal_point <= 16) {
    if (decimal_point <= 0) {
      out = "0." + std::string(static_cast<std::size_t>(-decimal_point), '0') + digits;
    } else if (decimal_point >= n) {
      out = digits + std::string(static_cast<std::size_t>(decimal_point - n), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<std::size_t>(decimal_point)) + "." +
            digits.substr(static_cast<std::size_t>(decimal_point));
    }
  } else {
    out = digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    std::snprintf(buffer, sizeof buffer, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += buffer;
  }
  return sign + out;
}

namespace {

std::string repr_at(const Value& value, int depth);

}  // namespace

std::string to_repr(const Value& value) {
  return repr_at(value, 0);
}

namespace {

std::string repr_at(const Value& value, int depth) {
  count_steps(1);
  if (depth > kMaxValueDepth)
    throw TemplateError("a value nested deeper than " + std::to_string(kMaxValueDepth) +
                        " levels (a namespace that holds itself?) cannot be printed");
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kString:
      return string_repr(value.as_string());
    case Value::Kind::kList: {
      const ListData& list = value.as_list();
      std::string out = list.tuple ? "(" : "[";
      for (std::size_t i = 0; i < list.items.size(); ++i) {
        if (i) out += ", ";
        out += repr_at(list.items[i], depth + 1);
        check_string_bytes(out.size());  // items may be one list many times over
      }
      if (list.tuple && list.items.size() == 1) out += ",";
      return out + (list.tuple ? ")" : "]");
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const DictData& dict = value.is_dict() ? value.as_dict() : value.namespace_attrs();
      std::string out = "{";
      for (std::size_t i = 0; i < dict.entries.size(); ++i) {
        if (i) out += ", ";
        out +=
            string_repr(dict.entries[i].first) + ": " + repr_at(dict.entries[i].second, depth + 1);
        check_string_bytes(out.size());
      }
      out += "}";
      return value.is_dict() ? out : "<Namespace " + out + ">";
    }
    default:
      return to_str(value);
  }
}

}  // namespace

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.as_int());
    case Value::Kind::kFloat:
      return float_repr(value.as_double());
    case Value::Kind::kString:
      return value.as_string();
    case Value::Kind::kCallable:
      return "<function " + value.as_callable().name + ">";
    default:
      return to_repr(value);
  }
}

bool equals(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  count_steps(1);  // lists compare item by item, and may share items: count each visit
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      if (a.as_string().size() != b.as_string().size()) return false;
      count_bytes(a.as_string().size());
      return a.as_string() == b.as_string();
    case Kind::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (std::size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Kind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, v] : x.entries) {
        const Value* other = y.find(key);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

int compare(const Value& a, const Value& b) {
  count_steps(1);
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    count_bytes(std::min(a.as_string().size(), b.as_string().size()));
    const int c = a.as_string().compare(b.as_string());  // UTF-8 order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw TemplateError("'<' not supported between instances of '" + a.type_name() + "' and '" +
                      b.type_name() + "'");
}

namespace {

void json_string(std::string& out, std::string_view text, bool ensure_ascii) {
  char buffer[16];
  out += '"';
  for (char32_t cp : decode_utf8(text)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20) {
      std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(cp));
      out += buffer;
    } else if (ensure_ascii && cp > 0x7E) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buffer, sizeof buffer, "\\u%04x\\u%04x",
                      static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buffer;
    } else {
      append_utf8(out, cp);
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& value, const JsonOptions& options, int level) {
  count_steps(1);
  check_string_bytes(out.size());  // items may be one list many times over
  auto newline = [&](int depth) {
    if (!options.has_indent) return;
    out += '\n';
    for (int i = 0; i < depth; ++i) {
      out += options.indent;
      check_string_bytes(out.size());
    }
  };
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += value.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(value.as_int());
      return;
    case Value::Kind::kFloat: {
      const double d = value.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d < 0 ? "-Infinity" : "Infinity";
      else
        out += float_repr(d);
      return;
    }
    case Value::Kind::kString:
      json_string(out, value.as_string(), options.ensure_ascii);
      return;
    case Value::Kind::kList: {
      const auto& items = value.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += options.item_separator;
        newline(level + 1);
        json_value(out, items[i], options, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.as_dict().entries) entries.push_back(&entry);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (options.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* x, const auto* y) { return x->first < y->first; });
      out += '{';
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (i) out += options.item_separator;
        newline(level + 1);
        json_string(out, entries[i]->first, options.ensure_ascii);
        out += options.key_separator;
        json_value(out, entries[i]->second, options, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      throw TemplateError("tojson: Object of type " + value.type_name() +
                          " is not JSON serializable");
  }
}

template <typename Json>
Value from_json_impl(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(json.template get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = json.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw TemplateError("integer " + std::to_string(u) + " is out of range (64-bit)");
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json_impl(item));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictData dict;
      for (auto it = json.begin(); it != json.end(); ++it)
        dict.entries.emplace_back(it.key(), from_json_impl(it.value()));
      return Value::dict(std::move(dict));
    }
    default:
      throw TemplateError("unsupported JSON value (binary)");
  }
}

}  // namespace

std::string to_json(const Value& value, const JsonOptions& options) {
  std::string out;
  json_value(out, value, options, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& json) {
  return from_json_impl(json);
}
Value from_json(const nlohmann::json& json) {
  return from_json_impl(json);
}

}  // namespace specrun::jinja
