#include "text/jinja_template.h"

#include <optional>

#include "common/error.h"
#include "text/jinja_budget.h"
#include "text/jinja_error.h"
#include "text/jinja_eval.h"
#include "text/jinja_globals.h"
#include "text/jinja_lexer.h"
#include "text/jinja_parser.h"

namespace specrun::jinja {

namespace {

std::string describe(const std::string& name, const TemplateError& e) {
  std::string text = name;
  if (e.line() > 0) text += " line " + std::to_string(e.line());
  text += ": ";
  if (dynamic_cast<const RaisedError*>(&e)) text += "the template raised an error: ";
  text += e.what();
  if (!e.context().empty()) {
    text += " (";
    for (std::size_t i = 0; i < e.context().size(); ++i) {
      if (i) text += ", ";
      text += e.context()[i];
    }
    text += ")";
  }
  return text;
}

}  // namespace

Template::Template(std::string_view source, std::string name) : name_(std::move(name)) {
  try {
    body_ = std::make_shared<const Body>(parse_template(normalize_source(source)));
  } catch (const TemplateError& e) {
    SPEC_INPUT_FAIL(describe(name_, e));
  }
}

std::string Template::render(const std::vector<std::pair<std::string, Value>>& context) const {
  std::vector<std::pair<std::string, Value>> variables = default_globals();
  variables.insert(variables.end(), context.begin(), context.end());
  std::optional<RenderBudget> budget;
  if (!RenderBudget::current()) budget.emplace();
  try {
    return evaluate(*body_, variables);
  } catch (const TemplateError& e) {
    SPEC_INPUT_FAIL(describe(name_, e));
  }
}

}  // namespace specrun::jinja
