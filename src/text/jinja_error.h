// The error the Jinja engine throws while it parses or renders. It carries the template line
// (0 while unknown: the evaluator fills in the line of the statement or expression it was at);
// Template::render turns it into a specrun::Error naming the template and the line.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace specrun::jinja {

class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message, int line = 0)
      : std::runtime_error(message), line_(line) {}
  int line() const { return line_; }
  void set_line_if_unknown(int line) {
    if (line_ == 0) line_ = line;
  }
  // Where the error happened, innermost first: "in `for message in messages` at
  // loop.index0 = 2", "in macro 'render'".
  const std::vector<std::string>& context() const { return context_; }
  void add_context(std::string where) { context_.push_back(std::move(where)); }

 private:
  int line_;
  std::vector<std::string> context_;
};

// raise_exception(message) called by the template itself (e.g. "Conversation roles must
// alternate user/assistant/user/assistant/..."): the input does not suit the template.
class RaisedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

}  // namespace specrun::jinja
