// Bounds on what one render of a chat template may do. A template is code that comes with a
// model folder: nested `range(100000)` loops would run for ever and a string doubled in a loop
// (`ns.s ~ ns.s`) would exhaust memory, so a render counts its work and fails, naming the
// template, the line and the loop it was in, when it goes past these bounds (real templates stay
// far below them: test_jinja_budget measures them on a long conversation).
//
//   - steps: statements executed, expressions evaluated, loop iterations, items iterated over
//     by loops and filters, comparisons made by sorting;
//   - bytes: the bytes of the strings, lists and dicts the render builds, and of the strings it
//     compares or searches (each operation costs at most its inputs' and its result's size);
//   - any one string at most kMaxStringBytes (the rendered text too), any one list or dict at
//     most kMaxItems items, checked while they grow, before they are allocated in full.
//
// The counts live in the RenderBudget of the calling thread (Template::render installs one);
// outside a render (parsing, values built from the conversation) only the size bounds apply.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specrun::jinja {

inline constexpr std::size_t kMaxStringBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxItems = std::size_t{1} << 20;  // ~110 bytes each
// A render of the real Qwen3 template over 3,001 messages with tools (~90,000 tokens, a full
// 128K context) takes 258,000 steps and 4.6 MB; a runaway one stops within seconds.
inline constexpr std::uint64_t kMaxRenderSteps = 10'000'000;
inline constexpr std::uint64_t kMaxRenderBytes = std::uint64_t{1} << 30;

// Throws TemplateError when a string of `bytes` bytes would be longer than kMaxStringBytes.
void check_string_bytes(std::size_t bytes);
// Throws TemplateError when a list or dict of `count` items would hold more than kMaxItems.
void check_items(std::size_t count);

// Adds to this thread's render's counts; throws TemplateError naming the bound when one is
// exceeded. Nothing happens outside a render.
void count_steps(std::uint64_t steps);
void count_bytes(std::uint64_t bytes);

// The counts of a render, for the calling thread while it lives. Template::render installs one
// unless the thread has one already: a test (or a caller rendering many templates under one
// bound) can install its own around render() and read what it counted.
class RenderBudget {
 public:
  // Lower bounds than the defaults suit callers that render many untrusted templates in a time
  // limit of their own (the fuzz target).
  explicit RenderBudget(std::uint64_t max_steps = kMaxRenderSteps,
                        std::uint64_t max_bytes = kMaxRenderBytes);
  // This thread's innermost budget, or nullptr.
  static RenderBudget* current();
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  std::uint64_t steps() const { return steps_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  friend void count_steps(std::uint64_t);
  friend void count_bytes(std::uint64_t);
  RenderBudget* outer_;
  std::uint64_t max_steps_, max_bytes_;
  std::uint64_t steps_ = 0;
  std::uint64_t bytes_ = 0;
};

}  // namespace specrun::jinja
