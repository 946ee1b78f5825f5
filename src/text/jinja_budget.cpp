#include "text/jinja_budget.h"

#include <string>

#include "text/jinja_error.h"

namespace specrun::jinja {

namespace {

thread_local RenderBudget* t_budget = nullptr;

std::string mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

void check_string_bytes(std::size_t bytes) {
  if (bytes > kMaxStringBytes)
    throw TemplateError("a string longer than " + mib(kMaxStringBytes) + " (a runaway template?)");
}

void check_items(std::size_t count) {
  if (count > kMaxItems)
    throw TemplateError("a list or dict of more than " + std::to_string(kMaxItems) +
                        " items (a runaway template?)");
}

RenderBudget::RenderBudget(std::uint64_t max_steps, std::uint64_t max_bytes)
    : outer_(t_budget), max_steps_(max_steps), max_bytes_(max_bytes) {
  t_budget = this;
}

RenderBudget::~RenderBudget() {
  t_budget = outer_;
}

RenderBudget* RenderBudget::current() {
  return t_budget;
}

void count_steps(std::uint64_t steps) {
  RenderBudget* b = t_budget;
  if (!b) return;
  b->steps_ += steps;
  if (b->steps_ > b->max_steps_)
    throw TemplateError("the render took more than " + std::to_string(b->max_steps_) +
                        " steps (statements, expressions and loop iterations): a runaway loop?");
}

void count_bytes(std::uint64_t bytes) {
  RenderBudget* b = t_budget;
  if (!b) return;
  b->bytes_ += bytes;
  if (b->bytes_ > b->max_bytes_)
    throw TemplateError("the render built or scanned more than " + mib(b->max_bytes_) +
                        " of strings and lists: a runaway template?");
}

}  // namespace specrun::jinja
