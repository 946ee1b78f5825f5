// Runtime values of the Jinja engine (jinja_template.h) and the Python semantics they follow:
// transformers renders chat templates with Python's Jinja2, so printing, equality, ordering,
// arithmetic, truthiness and `tojson` are those of Python (str(), ==, <, +, bool(),
// json.dumps), not of JavaScript.
//
// Values are cheap to copy: strings and containers are shared and immutable (transformers uses
// Jinja2's ImmutableSandboxedEnvironment, so a template cannot modify a list or a dict), except a
// namespace, whose attributes `set ns.x = ...` changes in place (shared, as in Python).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specrun::jinja {

class Value;

// Deepest nesting of lists and dicts a value may have (real chat data nests a few levels): deeper
// values would overflow the stack when printed, compared or freed.
inline constexpr int kMaxValueDepth = 128;
struct CallArgs;

// A list, or a tuple (the same but printed as `(a, b)` and never equal to a list).
struct ListData {
  std::vector<Value> items;
  bool tuple = false;
};

// A dict with string keys in insertion order (Python 3.7+ dicts keep it; tojson prints it).
struct DictData {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  // Replaces the value of an existing key in place, else appends.
  void set(std::string key, Value value);
};

// A function callable from a template: a global (range, namespace, raise_exception, ...), a
// macro, or a method bound to its object ('a,b'.split). `fn` throws TemplateError on bad
// arguments.
struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind : std::uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined, with no hint
  // `hint` says what was looked up, for the message when an undefined value is used:
  // "'foo' is undefined", "'dict object' has no attribute 'role'".
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  // string(), list() and dict() throw TemplateError when the result would be longer than
  // jinja_budget.h allows, or nest deeper than kMaxValueDepth; inside a render they count the
  // bytes they hold.
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(DictData data);
  // A dict not counted in the render's bytes (jinja_budget.h): `loop`, which every iteration of
  // a for loop builds anew, and which the iteration's step counts.
  static Value loop_dict(DictData data);
  static Value new_namespace(DictData attrs);
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers.Number: bool, int and float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  // bool and int as int64 (Python's bool is an int).
  std::int64_t as_int() const { return int_; }
  // Any number as a double.
  double as_double() const { return is_float() ? float_ : static_cast<double>(int_); }
  // The string, or an undefined value's hint ("" when it has none).
  const std::string& as_string() const;
  const ListData& as_list() const { return *list_; }
  const DictData& as_dict() const { return *dict_; }
  DictData& namespace_attrs() const { return *namespace_; }
  const Callable& as_callable() const { return *callable_; }

  // Python's bool(): false for undefined, None, False, 0, 0.0, "", [], {}.
  bool truthy() const;
  // Python's type name as its error messages print it: 'str', 'int', 'list', 'dict', ...
  std::string type_name() const;
  // Same object (namespaces, containers): Python's `is` for mutable values.
  bool same_object(const Value& other) const;

 private:
  Kind kind_ = Kind::kUndefined;
  int depth_ = 0;         // nesting of lists and dicts: 0 for scalars
  std::int64_t int_ = 0;  // bool and int
  double float_ = 0;
  std::shared_ptr<const std::string> string_;  // string, or undefined's hint
  std::shared_ptr<const ListData> list_;
  std::shared_ptr<const DictData> dict_;
  std::shared_ptr<DictData> namespace_;
  std::shared_ptr<const Callable> callable_;
};

// Arguments of a call: positional, then keyword (in the order written).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, or `fallback` when neither was given; throws
  // when both were given.
  Value get(std::size_t index, std::string_view name, Value fallback,
            std::string_view function) const;
  // Throws unless every argument is among the first `max_positional` positions or `names`.
  void check(std::string_view function, std::size_t max_positional,
             std::initializer_list<std::string_view> names) const;
};

// Throws the TemplateError of using an undefined value: its hint ("'foo' is undefined").
[[noreturn]] void throw_undefined(const Value& value);

// Python's str(value): "None", "True", repr of lists and dicts, floats as repr; undefined -> "".
std::string to_str(const Value& value);
// Python's repr(value): strings quoted and escaped, as they print inside a list.
std::string to_repr(const Value& value);
// Python's repr(float): shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string float_repr(double d);

// Python's ==.
bool equals(const Value& a, const Value& b);
// Python's <, <=, >, >= for numbers, strings and lists; throws TemplateError otherwise.
// Returns negative, zero or positive.
int compare(const Value& a, const Value& b);

struct JsonOptions {
  bool ensure_ascii = false;
  std::string indent;  // the indentation unit; `has_indent` false: everything on one line
  bool has_indent = false;
  std::string item_separator = ", ";  // transformers passes separators=None: (", ", ": ")
  std::string key_separator = ": ";   // or (",", ": ") with an indent
  bool sort_keys = false;
};
// json.dumps(value, ...) as transformers' tojson filter calls it; throws TemplateError for
// values JSON cannot hold (undefined, namespaces, functions).
std::string to_json(const Value& value, const JsonOptions& options);

// A JSON document as a value: objects become dicts in their order (nlohmann::ordered_json keeps
// the document's order; nlohmann::json sorts keys), integers ints, other numbers floats.
Value from_json(const nlohmann::ordered_json& json);
Value from_json(const nlohmann::json& json);

}  // namespace specrun::jinja
