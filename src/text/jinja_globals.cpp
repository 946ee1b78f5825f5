#include "text/jinja_globals.h"

#include "text/jinja_error.h"
#include "text/jinja_ops.h"

namespace specrun::jinja {

namespace {

constexpr std::int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

std::int64_t int_argument(const Value& v, const char* function) {
  if (!v.is_int() && !v.is_bool())
    throw TemplateError(std::string(function) + "(): '" + v.type_name() +
                        "' object cannot be interpreted as an integer");
  return v.as_int();
}

Value range(CallArgs& args) {
  if (!args.keyword.empty()) throw TemplateError("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    throw TemplateError("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  std::int64_t start = 0, stop = 0, step = 1;
  if (p.size() == 1) {
    stop = int_argument(p[0], "range");
  } else {
    start = int_argument(p[0], "range");
    stop = int_argument(p[1], "range");
    if (p.size() == 3) step = int_argument(p[2], "range");
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  std::vector<Value> items;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<std::int64_t>(items.size()) >= kMaxRange)
      throw TemplateError(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

// The entries of namespace(...) and dict(...): an optional mapping or list of pairs, then the
// keyword arguments.
DictData entries(CallArgs& args, const char* function) {
  if (args.positional.size() > 1)
    throw TemplateError(std::string(function) + " expected at most 1 positional argument, got " +
                        std::to_string(args.positional.size()));
  DictData data;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict() || source.is_namespace()) {
      data = source.is_dict() ? source.as_dict() : source.namespace_attrs();
    } else {
      for (const Value& pair : iterate(source)) {
        if (!pair.is_list() || pair.as_list().items.size() != 2 ||
            !pair.as_list().items[0].is_string())
          throw TemplateError(std::string(function) +
                              ": expected a mapping or a sequence of (name, value) pairs");
        data.set(pair.as_list().items[0].as_string(), pair.as_list().items[1]);
      }
    }
  }
  for (auto& [key, value] : args.keyword) data.set(key, value);
  return data;
}

}  // namespace

std::vector<std::pair<std::string, Value>> default_globals() {
  return {
      {"range", Value::callable("range", range)},
      {"namespace", Value::callable("namespace",
                                    [](CallArgs& args) {
                                      return Value::new_namespace(entries(args, "namespace"));
                                    })},
      {"dict",
       Value::callable("dict", [](CallArgs& args) { return Value::dict(entries(args, "dict")); })},
  };
}

Value raise_exception_function() {
  return Value::callable("raise_exception", [](CallArgs& args) -> Value {
    args.check("raise_exception", 1, {});
    throw RaisedError(args.positional.empty() ? "" : to_str(args.positional[0]));
  });
}

Value strftime_now_function(std::function<std::time_t()> now) {
  return Value::callable("strftime_now", [now = std::move(now)](CallArgs& args) {
    args.check("strftime_now", 1, {});
    if (args.positional.empty() || !args.positional[0].is_string())
      throw TemplateError("strftime_now(format) needs a format string");
    const std::string& format = args.positional[0].as_string();
    if (format.empty()) return Value::string("");
    const std::time_t t = now();
    std::tm local{};
    localtime_r(&t, &local);
    std::string out(format.size() * 8 + 64, '\0');
    const std::size_t n = std::strftime(out.data(), out.size(), format.c_str(), &local);
    if (n == 0) throw TemplateError("strftime_now: the format " + format + " gives no text");
    out.resize(n);
    return Value::string(std::move(out));
  });
}

}  // namespace specrun::jinja
