// Functions a template can call by name: Jinja2's range, namespace and dict (always there), and
// the two transformers adds for chat templates, raise_exception and strftime_now (the caller
// binds those, as apply_chat_template does).
#pragma once

#include <ctime>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_value.h"

namespace specrun::jinja {

// range (at most 100000 items, the limit of Jinja2's sandbox), namespace(...), dict(...).
std::vector<std::pair<std::string, Value>> default_globals();

// raise_exception(message): fails the render with RaisedError(message).
Value raise_exception_function();

// strftime_now(format): Python's datetime.now().strftime(format), the local time `now()`
// returns (std::time(nullptr) in production; a fixed time in tests).
Value strftime_now_function(std::function<std::time_t()> now);

}  // namespace specrun::jinja
