// The filters; the tests are in jinja_tests.cpp.
#include "text/jinja_filters.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>

#include "text/jinja_budget.h"
#include "text/jinja_error.h"
#include "text/jinja_ops.h"
#include "text/jinja_strings.h"

namespace specrun::jinja {

namespace {

using FilterFn = Value (*)(const Value& v, const CallArgs& args);

std::string str_arg(const Value& v, std::string_view filter) {
  if (!v.is_string())
    throw TemplateError(std::string(filter) + ": expected a string argument, got " + v.type_name());
  return v.as_string();
}

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then index 0, as `x[part]` does.
Value get_path(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  Value v = item;
  for (const std::string& part : split(str_arg(attribute, "attribute"), std::string("."), -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
  }
  return v;
}

Value lowered(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(lower(v.as_string())) : v;
}

std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive,
                          const Value& attribute) {
  auto key = [&](const Value& v) {
    return lowered(attribute.is_undefined() || attribute.is_none() ? v : get_path(v, attribute),
                   case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int c = compare(key(a), key(b));
    return reverse ? c > 0 : c < 0;
  });
  return items;
}

// Python's float(str): optional whitespace and sign, digits with single underscores, a point,
// an exponent, or inf/infinity/nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = strip(text, std::nullopt, true, true);
  std::string lowered_text = lower(s);
  std::size_t i = (s.size() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  const std::string word = lowered_text.substr(i);
  if (word == "inf" || word == "infinity" || word == "nan") return std::strtod(s.c_str(), nullptr);
  std::string clean;
  bool digits = false, exponent = false, point = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '_' && i > 0 && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
               i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    } else if (c == '.' && !point && !exponent) {
      point = true;
    } else if ((c == 'e' || c == 'E') && digits && !exponent) {
      exponent = true;
      digits = false;
      if (i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-')) clean += s[i++];
    } else {
      return std::nullopt;
    }
    clean += s[i];
  }
  if (!digits) return std::nullopt;
  return std::strtod(((s.size() && s[0] == '-') ? "-" + clean : clean).c_str(), nullptr);
}

// Python's int(str, 10): optional whitespace and sign, digits with single underscores.
std::optional<std::int64_t> parse_int(const std::string& text) {
  const std::string s = strip(text, std::nullopt, true, true);
  std::size_t i = (s.size() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  std::int64_t v = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' && i > 0 && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))
      continue;
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v))
      throw TemplateError("int: " + text + " is out of range (64-bit)");
  }
  return s[0] == '-' ? -v : v;
}

std::int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<std::int64_t>(code_point_count(v.as_string()));
    case Value::Kind::kList:
      return static_cast<std::int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<std::int64_t>(v.as_dict().entries.size());
    default:
      throw TemplateError("object of type '" + v.type_name() + "' has no len()");
  }
}

Value f_abs(const Value& v, const CallArgs& args) {
  args.check("abs", 0, {});
  if (!v.is_number()) throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  return v.as_int() < 0 ? unary_op(UnaryExpr::Op::kNeg, v) : Value::integer(v.as_int());
}

Value f_attr(const Value& v, const CallArgs& args) {
  args.check("attr", 1, {});
  const std::string name = str_arg(args.get(0, "name", Value(), "attr"), "attr");
  if (v.is_namespace()) return get_attribute(v, name);
  if (auto method = bound_method(v, name)) return *method;
  return Value::undefined("'" + v.type_name() + " object' has no attribute " + string_repr(name));
}

Value f_length(const Value& v, const CallArgs& args) {
  args.check("length", 0, {});
  return Value::integer(length_of(v));
}

Value f_default(const Value& v, const CallArgs& args) {
  args.check("default", 2, {"default_value", "boolean"});
  const Value fallback = args.get(0, "default_value", Value::string(""), "default");
  const bool boolean = args.get(1, "boolean", Value::boolean(false), "default").truthy();
  return v.is_undefined() || (boolean && !v.truthy()) ? fallback : v;
}

Value f_dictsort(const Value& v, const CallArgs& args) {
  args.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw TemplateError("dictsort: expected a dict, got " + v.type_name());
  const bool case_sensitive =
      args.get(0, "case_sensitive", Value::boolean(false), "dictsort").truthy();
  const std::string by = str_arg(args.get(1, "by", Value::string("key"), "dictsort"), "dictsort");
  if (by != "key" && by != "value")
    throw TemplateError("dictsort: You can only sort by either 'key' or 'value'");
  const bool reverse = args.get(2, "reverse", Value::boolean(false), "dictsort").truthy();
  std::vector<Value> items;
  for (const auto& [k, value] : v.as_dict().entries)
    items.push_back(Value::list({Value::string(k), value}, true));
  return Value::list(
      sorted(std::move(items), reverse, case_sensitive, Value::integer(by == "key" ? 0 : 1)));
}

Value f_escape(const Value& v, const CallArgs& args) {
  args.check("escape", 0, {});
  return Value::string(html_escape(to_str(v)));
}

Value end_item(const Value& v, bool first) {
  if (v.is_undefined()) return v;
  const std::vector<Value> items = iterate(v);
  if (items.empty())
    return Value::undefined(std::string("No ") + (first ? "first" : "last") +
                            " item, sequence was empty.");
  return first ? items.front() : items.back();
}
Value f_first(const Value& v, const CallArgs& args) {
  args.check("first", 0, {});
  return end_item(v, true);
}
Value f_last(const Value& v, const CallArgs& args) {
  args.check("last", 0, {});
  return end_item(v, false);
}

Value f_float(const Value& v, const CallArgs& args) {
  args.check("float", 1, {"default"});
  const Value fallback = args.get(0, "default", Value::number(0.0), "float");
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value::number(*d);
  }
  return fallback;
}

Value f_int(const Value& v, const CallArgs& args) {
  args.check("int", 2, {"default", "base"});
  const Value fallback = args.get(0, "default", Value::integer(0), "int");
  const Value base = args.get(1, "base", Value::integer(10), "int");
  if (!base.is_int() || base.as_int() != 10)
    throw TemplateError("int: only base 10 is supported by the chat-template engine");
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = std::trunc(v.as_double());
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18)
      throw TemplateError("int: cannot convert " + float_repr(v.as_double()) + " to an integer");
    return Value::integer(static_cast<std::int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string())) return Value::integer(*i);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
      return Value::integer(static_cast<std::int64_t>(std::trunc(*d)));
  }
  return fallback;
}

Value f_indent(const Value& v, const CallArgs& args) {
  args.check("indent", 3, {"width", "first", "blank"});
  const Value width = args.get(0, "width", Value::integer(4), "indent");
  const bool first = args.get(1, "first", Value::boolean(false), "indent").truthy();
  const bool blank = args.get(2, "blank", Value::boolean(false), "indent").truthy();
  std::string indention;
  if (width.is_string())
    indention = width.as_string();
  else if (width.is_int() || width.is_bool())
    indention = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(
                                width.as_int(), 0, static_cast<std::int64_t>(kMaxStringBytes) + 1)),
                            ' ');
  else
    throw TemplateError("indent: width must be an integer or a string");
  std::vector<std::string> lines = splitlines(to_str(v) + "\n");
  std::string out;
  check_string_bytes(indention.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += indention;
    out += lines[i];
    check_string_bytes(out.size());
  }
  if (first) out = indention + out;
  return Value::string(std::move(out));
}

Value f_items(const Value& v, const CallArgs& args) {
  args.check("items", 0, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, value] : v.as_dict().entries)
    items.push_back(Value::list({Value::string(k), value}, true));
  return Value::list(std::move(items));
}

Value f_join(const Value& v, const CallArgs& args) {
  args.check("join", 2, {"d", "attribute"});
  const std::string separator = to_str(args.get(0, "d", Value::string(""), "join"));
  const Value attribute = args.get(1, "attribute", Value(), "join");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += separator;
    first = false;
    out += to_str(attribute.is_undefined() ? item : get_path(item, attribute));
    check_string_bytes(out.size());  // items may be one long string many times over
  }
  return Value::string(std::move(out));
}

Value f_list(const Value& v, const CallArgs& args) {
  args.check("list", 0, {});
  return Value::list(iterate(v));
}

Value string_filter(const Value& v, const CallArgs& args, const char* name,
                    std::string (*fn)(std::string_view)) {
  args.check(name, 0, {});
  return Value::string(fn(to_str(v)));
}
Value f_lower(const Value& v, const CallArgs& args) {
  return string_filter(v, args, "lower", lower);
}
Value f_upper(const Value& v, const CallArgs& args) {
  return string_filter(v, args, "upper", upper);
}
Value f_title(const Value& v, const CallArgs& args) {
  return string_filter(v, args, "title", title_filter);
}
Value f_capitalize(const Value& v, const CallArgs& args) {
  return string_filter(v, args, "capitalize", capitalize);
}

// The arguments after the first `skip` positional ones (a filter or test name, an attribute).
CallArgs rest_args(const CallArgs& args, std::size_t skip) {
  CallArgs rest;
  for (std::size_t i = skip; i < args.positional.size(); ++i)
    rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

Value f_map(const Value& v, const CallArgs& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    args.check("map", 0, {"attribute", "default"});
    const Value attribute = args.get(0, "attribute", Value(), "map");
    if (attribute.is_undefined()) throw TemplateError("map: expected a filter name or attribute=");
    const Value fallback = args.get(1, "default", Value(), "map");
    for (const Value& item : iterate(v)) {
      Value mapped = get_path(item, attribute);
      out.push_back(mapped.is_undefined() && !fallback.is_undefined() ? fallback : mapped);
    }
  } else {
    const std::string filter = str_arg(args.positional[0], "map");
    check_filter(filter);
    const CallArgs rest = rest_args(args, 1);
    for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, rest));
  }
  return Value::list(std::move(out));
}

Value extreme(const Value& v, const CallArgs& args, bool max) {
  const char* name = max ? "max" : "min";
  args.check(name, 2, {"case_sensitive", "attribute"});
  const bool case_sensitive = args.get(0, "case_sensitive", Value::boolean(false), name).truthy();
  const Value attribute = args.get(1, "attribute", Value(), name);
  const std::vector<Value> items = sorted(iterate(v), max, case_sensitive, attribute);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  return items.front();
}
Value f_max(const Value& v, const CallArgs& args) {
  return extreme(v, args, true);
}
Value f_min(const Value& v, const CallArgs& args) {
  return extreme(v, args, false);
}

// select/reject (by a test of the item) and selectattr/rejectattr (of an attribute).
Value choose(const Value& v, const CallArgs& args, bool by_attribute, bool keep) {
  const std::size_t skip = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty())
    throw TemplateError("selectattr/rejectattr: missing the attribute name");
  std::string test;
  if (args.positional.size() > skip) {
    test = str_arg(args.positional[skip], "select");
    check_test(test);
  }
  const CallArgs rest = rest_args(args, skip + 1);
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attribute ? get_path(item, args.positional[0]) : item;
    const bool pass = test.empty() ? subject.truthy() : apply_test(test, subject, rest);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, const CallArgs& args) {
  return choose(v, args, false, true);
}
Value f_reject(const Value& v, const CallArgs& args) {
  return choose(v, args, false, false);
}
Value f_selectattr(const Value& v, const CallArgs& args) {
  return choose(v, args, true, true);
}
Value f_rejectattr(const Value& v, const CallArgs& args) {
  return choose(v, args, true, false);
}

Value f_replace(const Value& v, const CallArgs& args) {
  args.check("replace", 3, {"old", "new", "count"});
  const Value count_arg = args.get(2, "count", Value::none(), "replace");
  return Value::string(jinja::replace(to_str(v), to_str(args.get(0, "old", Value(), "replace")),
                                      to_str(args.get(1, "new", Value(), "replace")),
                                      count_arg.is_none() ? -1 : count_arg.as_int()));
}

Value f_reverse(const Value& v, const CallArgs& args) {
  args.check("reverse", 0, {});
  if (v.is_string()) {
    std::vector<char32_t> cps = decode_utf8(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(encode_utf8(cps));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

// Python's round(x, ndigits) for a float: correctly rounded, ties to even.
double round_float(double x, std::int64_t precision) {
  if (!std::isfinite(x) || precision > 330) return x;
  if (precision >= 0) {
    char buffer[512];
    std::snprintf(buffer, sizeof buffer, "%.*f", static_cast<int>(precision), x);
    return std::strtod(buffer, nullptr);
  }
  if (precision < -330) return std::copysign(0.0, x);
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return std::nearbyint(x / scale) * scale;
}

Value f_round(const Value& v, const CallArgs& args) {
  args.check("round", 2, {"precision", "method"});
  const Value precision_arg = args.get(0, "precision", Value::integer(0), "round");
  if (!precision_arg.is_int() && !precision_arg.is_bool())
    throw TemplateError("round: precision must be an integer");
  const std::int64_t precision = precision_arg.as_int();
  const std::string method =
      str_arg(args.get(1, "method", Value::string("common"), "round"), "round");
  if (method != "common" && method != "ceil" && method != "floor")
    throw TemplateError("round: method must be common, ceil or floor");
  if (!v.is_number()) throw TemplateError("round: expected a number, got " + v.type_name());
  if (method == "common") {
    if (!v.is_float()) {
      if (precision >= 0) return Value::integer(v.as_int());
      return Value::integer(static_cast<std::int64_t>(round_float(v.as_double(), precision)));
    }
    return Value::number(round_float(v.as_double(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value f_safe(const Value& v, const CallArgs& args) {
  args.check("safe", 0, {});
  return Value::string(to_str(v));
}

Value f_sort(const Value& v, const CallArgs& args) {
  args.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  return Value::list(sorted(iterate(v),
                            args.get(0, "reverse", Value::boolean(false), "sort").truthy(),
                            args.get(1, "case_sensitive", Value::boolean(false), "sort").truthy(),
                            args.get(2, "attribute", Value(), "sort")));
}

Value f_string(const Value& v, const CallArgs& args) {
  args.check("string", 0, {});
  return Value::string(to_str(v));
}

Value f_sum(const Value& v, const CallArgs& args) {
  args.check("sum", 2, {"attribute", "start"});
  const Value attribute = args.get(0, "attribute", Value(), "sum");
  Value total = args.get(1, "start", Value::integer(0), "sum");
  for (const Value& item : iterate(v))
    total = binary_op(BinaryExpr::Op::kAdd, total,
                      attribute.is_undefined() ? item : get_path(item, attribute));
  return total;
}

Value f_tojson(const Value& v, const CallArgs& args) {
  args.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions options;
  options.ensure_ascii = args.get(0, "ensure_ascii", Value::boolean(false), "tojson").truthy();
  const Value indent = args.get(1, "indent", Value::none(), "tojson");
  if (indent.is_int() || indent.is_bool()) {
    options.has_indent = true;
    options.indent = std::string(
        static_cast<std::size_t>(std::clamp<std::int64_t>(indent.as_int(), 0, 256)), ' ');
  } else if (indent.is_string()) {
    options.has_indent = true;
    options.indent = indent.as_string();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    throw TemplateError("tojson: indent must be an integer, a string or none");
  }
  if (options.has_indent) options.item_separator = ",";
  const Value separators = args.get(2, "separators", Value::none(), "tojson");
  if (separators.is_list()) {
    const auto& items = separators.as_list().items;
    if (items.size() != 2 || !items[0].is_string() || !items[1].is_string())
      throw TemplateError("tojson: separators must be a pair of strings");
    options.item_separator = items[0].as_string();
    options.key_separator = items[1].as_string();
  } else if (!separators.is_none() && !separators.is_undefined()) {
    throw TemplateError("tojson: separators must be a pair of strings");
  }
  options.sort_keys = args.get(3, "sort_keys", Value::boolean(false), "tojson").truthy();
  return Value::string(to_json(v, options));
}

Value f_trim(const Value& v, const CallArgs& args) {
  args.check("trim", 1, {"chars"});
  const Value chars = args.get(0, "chars", Value::none(), "trim");
  std::optional<std::string> set;
  if (!chars.is_none() && !chars.is_undefined()) set = str_arg(chars, "trim");
  return Value::string(strip(to_str(v), set, true, true));
}

Value f_unique(const Value& v, const CallArgs& args) {
  args.check("unique", 2, {"case_sensitive", "attribute"});
  const bool case_sensitive =
      args.get(0, "case_sensitive", Value::boolean(false), "unique").truthy();
  const Value attribute = args.get(1, "attribute", Value(), "unique");
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    const Value key =
        lowered(attribute.is_undefined() ? item : get_path(item, attribute), case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); }))
      continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_wordcount(const Value& v, const CallArgs& args) {
  args.check("wordcount", 0, {});
  std::int64_t words = 0;
  bool in_word = false;
  for (char32_t cp : decode_utf8(to_str(v))) {
    const bool w = is_word(cp);
    words += w && !in_word;
    in_word = w;
  }
  return Value::integer(words);
}

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> table = {
      {"abs", f_abs},           {"attr", f_attr},       {"capitalize", f_capitalize},
      {"count", f_length},      {"d", f_default},       {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},        {"escape", f_escape},
      {"first", f_first},       {"float", f_float},     {"indent", f_indent},
      {"int", f_int},           {"items", f_items},     {"join", f_join},
      {"last", f_last},         {"length", f_length},   {"list", f_list},
      {"lower", f_lower},       {"map", f_map},         {"max", f_max},
      {"min", f_min},           {"reject", f_reject},   {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse}, {"round", f_round},
      {"safe", f_safe},         {"select", f_select},   {"selectattr", f_selectattr},
      {"sort", f_sort},         {"string", f_string},   {"sum", f_sum},
      {"title", f_title},       {"tojson", f_tojson},   {"trim", f_trim},
      {"unique", f_unique},     {"upper", f_upper},     {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

void check_filter(const std::string& name) {
  if (filters().count(name)) return;
  static constexpr std::string_view kJinjaOnly[] = {
      "batch",    "center",    "filesizeformat", "forceescape", "format",
      "groupby",  "pprint",    "random",         "slice",       "striptags",
      "truncate", "urlencode", "urlize",         "wordwrap",    "xmlattr"};
  if (std::find(std::begin(kJinjaOnly), std::end(kJinjaOnly), name) != std::end(kJinjaOnly))
    throw TemplateError("filter '" + name + "' is not supported by the chat-template engine");
  throw TemplateError("unknown filter '" + name + "'");
}

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) check_filter(name);
  if (operand.is_string()) count_bytes(operand.as_string().size());  // what string filters read
  return it->second(operand, args);
}

}  // namespace specrun::jinja
