// A Jinja template engine for Hugging Face chat templates: it renders them byte for byte as
// transformers does (Jinja2 in an ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, Python's semantics for values). The implemented subset, and what is refused, is
// listed in jinja_parser.h (statements), jinja_filters.h (filters and tests), jinja_ops.h and
// jinja_methods.cpp (operators, attribute access, str and dict methods); jinja_value.h has the
// values. Refused constructs fail when the template is parsed, naming the line.
//
//   Template t(source, "DIR/tokenizer_config.json: chat_template");
//   std::string text = t.render({{"messages", from_json(messages)}, ...});
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja_ast.h"
#include "text/jinja_value.h"

namespace specrun::jinja {

class Template {
 public:
  // Parses `source`; `name` says where it came from, for errors. Throws specrun::Error (exit code
  // 2) "NAME line N: message" on a syntax error or a construct the engine does not implement.
  Template(std::string_view source, std::string name);

  // Renders with the variables of `context` (later entries win over earlier ones and over the
  // globals range, namespace and dict). Thread-safe (a template is immutable). Throws
  // specrun::Error (exit code 2) "NAME line N: message (in `for message in messages` at
  // loop.index0 = 2)"; when the template calls raise_exception(msg), the message is
  // "NAME line N: the template raised an error: msg".
  std::string render(const std::vector<std::pair<std::string, Value>>& context) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const Body> body_;
};

}  // namespace specrun::jinja
