// Methods of str and dict values that templates call: 'text'.strip(), message.content.split(
// '</think>'), tool.items(), message.get('content', '')...
#include <algorithm>
#include <optional>

#include "text/jinja_budget.h"
#include "text/jinja_error.h"
#include "text/jinja_ops.h"
#include "text/jinja_strings.h"

namespace specrun::jinja {

namespace {

std::string method_name(const Value& self, std::string_view name) {
  return self.type_name() + "." + std::string(name);
}

std::optional<std::string> optional_string(const Value& v, std::string_view function) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string())
    throw TemplateError(std::string(function) + "() argument must be str or None, not " +
                        v.type_name());
  return v.as_string();
}

const std::string& string_arg(const Value& v, std::string_view function) {
  if (!v.is_string())
    throw TemplateError(std::string(function) + "() argument must be str, not " + v.type_name());
  return v.as_string();
}

std::int64_t int_arg(const Value& v, std::string_view function) {
  if (!v.is_int() && !v.is_bool())
    throw TemplateError(std::string(function) + "() argument must be an integer, not " +
                        v.type_name());
  return v.as_int();
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

Value strip_method(const Value& self, CallArgs& args, std::string_view name, bool left,
                   bool right) {
  args.check(name, 1, {"chars"});
  return Value::string(strip(
      self.as_string(), optional_string(args.get(0, "chars", Value(), name), name), left, right));
}

Value no_args(const Value& self, CallArgs& args, std::string_view name,
              std::string (*fn)(std::string_view)) {
  args.check(name, 0, {});
  return Value::string(fn(self.as_string()));
}

// startswith/endswith: a str or a tuple (or list) of str.
Value affix_method(const Value& self, CallArgs& args, std::string_view name, bool prefix) {
  args.check(name, 1, {});
  const Value affix = args.get(0, "", Value(), name);
  const std::string& text = self.as_string();
  auto matches = [&](const Value& a) {
    const std::string& s = string_arg(a, name);
    if (s.size() > text.size()) return false;
    return prefix ? text.compare(0, s.size(), s) == 0
                  : text.compare(text.size() - s.size(), s.size(), s) == 0;
  };
  if (affix.is_list()) {
    for (const Value& a : affix.as_list().items)
      if (matches(a)) return Value::boolean(true);
    return Value::boolean(false);
  }
  if (affix.is_undefined()) throw TemplateError(std::string(name) + "() takes at least 1 argument");
  return Value::boolean(matches(affix));
}

Value split_method(const Value& self, CallArgs& args, std::string_view name, bool reverse) {
  args.check(name, 2, {"sep", "maxsplit"});
  const auto sep = optional_string(args.get(0, "sep", Value(), name), name);
  const std::int64_t maxsplit = int_arg(args.get(1, "maxsplit", Value::integer(-1), name), name);
  return string_list(reverse ? rsplit(self.as_string(), sep, maxsplit)
                             : split(self.as_string(), sep, maxsplit));
}

// str.format: "{}", "{0}", "{name}" fields with an optional !r or !s conversion, and "{{" "}}"
// escapes; format specs and attribute or index access in fields are refused.
Value format_method(const std::string& text, const CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') throw TemplateError("Single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    const std::size_t close = text.find('}', i);
    if (close == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = text.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (const std::size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 'r' && field[bang + 1] != 's'))
        throw TemplateError("str.format: only the !r and !s conversions are supported");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find_first_of(":.[") != std::string::npos)
      throw TemplateError(
          "str.format: format specs and attribute or index access in fields are "
          "not supported by the chat-template engine");
    const Value* value = nullptr;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const std::size_t index = field.empty() ? auto_index++ : std::stoul(field);
      if (index >= args.positional.size())
        throw TemplateError("Replacement index " + std::to_string(index) +
                            " out of range for positional args tuple");
      value = &args.positional[index];
    } else {
      for (const auto& [key, v] : args.keyword)
        if (key == field) value = &v;
      if (!value) throw TemplateError("str.format: no argument named '" + field + "'");
    }
    out += conversion == 'r' ? to_repr(*value) : to_str(*value);
    check_string_bytes(out.size());  // '{0}{0}{0}...'.format(long_text)
  }
  return Value::string(std::move(out));
}

Value call_string_method(const Value& self, std::string_view name, CallArgs& args) {
  const std::string& text = self.as_string();
  count_bytes(text.size());  // what a method reads
  if (name == "strip") return strip_method(self, args, name, true, true);
  if (name == "lstrip") return strip_method(self, args, name, true, false);
  if (name == "rstrip") return strip_method(self, args, name, false, true);
  if (name == "upper") return no_args(self, args, name, upper);
  if (name == "lower") return no_args(self, args, name, lower);
  if (name == "title") return no_args(self, args, name, title_method);
  if (name == "capitalize") return no_args(self, args, name, capitalize);
  if (name == "startswith") return affix_method(self, args, name, true);
  if (name == "endswith") return affix_method(self, args, name, false);
  if (name == "split") return split_method(self, args, name, false);
  if (name == "rsplit") return split_method(self, args, name, true);
  if (name == "splitlines") {
    args.check(name, 0, {});
    return string_list(splitlines(text));
  }
  if (name == "replace") {
    args.check(name, 3, {"count"});
    const std::string& old_text = string_arg(args.get(0, "", Value(), name), name);
    const std::string& new_text = string_arg(args.get(1, "", Value(), name), name);
    const std::int64_t n = int_arg(args.get(2, "count", Value::integer(-1), name), name);
    return Value::string(jinja::replace(text, old_text, new_text, n));
  }
  if (name == "find" || name == "rfind") {
    args.check(name, 1, {});
    return Value::integer(
        jinja::find(text, string_arg(args.get(0, "", Value(), name), name), name == "rfind"));
  }
  if (name == "count") {
    args.check(name, 1, {});
    return Value::integer(jinja::count(text, string_arg(args.get(0, "", Value(), name), name)));
  }
  if (name == "join") {
    args.check(name, 1, {});
    std::string out;
    std::size_t i = 0;
    for (const Value& item : iterate(args.get(0, "", Value(), name))) {
      if (!item.is_string())
        throw TemplateError("sequence item " + std::to_string(i) + ": expected str instance, " +
                            item.type_name() + " found");
      if (i++) out += text;
      out += item.as_string();
      check_string_bytes(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "islower" || name == "isupper") {
    args.check(name, 0, {});
    return Value::boolean(name == "islower" ? is_lower(text) : is_upper(text));
  }
  if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum") {
    args.check(name, 0, {});
    const std::vector<char32_t> cps = decode_utf8(text);
    bool all = !cps.empty();
    for (char32_t cp : cps) {
      if (name == "isspace") all = all && is_space(cp);
      if (name == "isdigit") all = all && cp >= '0' && cp <= '9';
      if (name == "isalpha") all = all && is_word(cp) && cp != '_' && !(cp >= '0' && cp <= '9');
      if (name == "isalnum") all = all && is_word(cp) && cp != '_';
    }
    return Value::boolean(all);
  }
  if (name == "format") return format_method(text, args);
  throw TemplateError("str." + std::string(name) +
                      "() is not supported by the chat-template engine");
}

Value call_dict_method(const Value& self, std::string_view name, CallArgs& args) {
  const DictData& dict = self.as_dict();
  if (name == "items" || name == "keys" || name == "values") {
    args.check(name, 0, {});
    std::vector<Value> out;
    for (const auto& [k, v] : dict.entries) {
      if (name == "items")
        out.push_back(Value::list({Value::string(k), v}, true));
      else
        out.push_back(name == "keys" ? Value::string(k) : v);
    }
    return Value::list(std::move(out));
  }
  // get(key, default=None)
  args.check(name, 2, {});
  const Value key = args.get(0, "", Value(), name);
  if (key.is_undefined()) throw TemplateError("get() takes at least 1 argument");
  const Value* found = key.is_string() ? dict.find(key.as_string()) : nullptr;
  return found ? *found : args.get(1, "", Value::none(), name);
}

}  // namespace

std::optional<Value> bound_method(const Value& object, const std::string& name) {
  static constexpr std::string_view kStringMethods[] = {
      "strip",      "lstrip",     "rstrip",   "upper",   "lower",   "title",
      "capitalize", "startswith", "endswith", "split",   "rsplit",  "splitlines",
      "replace",    "find",       "rfind",    "count",   "join",    "islower",
      "isupper",    "isspace",    "isdigit",  "isalpha", "isalnum", "format"};
  static constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};
  auto known = [&](const auto& names) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
  };
  if (object.is_string() && known(kStringMethods))
    return Value::callable(method_name(object, name), [object, name](CallArgs& args) {
      return call_string_method(object, name, args);
    });
  if (object.is_dict() && known(kDictMethods))
    return Value::callable(method_name(object, name), [object, name](CallArgs& args) {
      return call_dict_method(object, name, args);
    });
  return std::nullopt;
}

}  // namespace specrun::jinja
