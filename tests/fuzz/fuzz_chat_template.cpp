// libFuzzer target: bytes as a chat template (Jinja), rendered over a fixed conversation with
// tools, as apply_chat_template binds it. Every render ends within a budget of 2,000,000 steps
// and 256 MiB (a runaway loop or string is refused, not run for ever); an accepted template
// renders the same text twice.
#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "text/jinja_budget.h"
#include "text/jinja_globals.h"
#include "text/jinja_template.h"

namespace {

using specrun::jinja::Value;

const std::vector<std::pair<std::string, Value>>& conversation() {
  static const std::vector<std::pair<std::string, Value>> context = [] {
    const auto messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2 + 2? {{ not a tag }}"},
      {"role": "assistant", "content": "<think>add</think>4",
       "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2}}}]},
      {"role": "tool", "content": "4"},
      {"role": "user", "content": "\u00fcn\u00efc\u00f8d\u00e9 \ud83d\ude00 and 'quotes' \"too\""}])");
    const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function":
      {"name": "add", "description": "Adds.", "parameters": {"type": "object",
       "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}])");
    return std::vector<std::pair<std::string, Value>>{
        {"raise_exception", specrun::jinja::raise_exception_function()},
        {"strftime_now", specrun::jinja::strftime_now_function([] { return std::time_t{0}; })},
        {"messages", specrun::jinja::from_json(messages)},
        {"tools", specrun::jinja::from_json(tools)},
        {"add_generation_prompt", Value::boolean(true)},
        {"bos_token", Value::string("<s>")},
        {"eos_token", Value::string("</s>")}};
  }();
  return context;
}

std::string render(const specrun::jinja::Template& t) {
  // Far below the defaults, so that a runaway input ends in well under libFuzzer's timeout.
  specrun::jinja::RenderBudget budget(2'000'000, std::uint64_t{256} << 20);
  return t.render(conversation());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const specrun::jinja::Template t(std::string(reinterpret_cast<const char*>(data), size),
                                     "chat_template.jinja");
    const std::string first = render(t);
    if (first.size() > specrun::jinja::kMaxStringBytes) __builtin_trap();
    if (render(t) != first) __builtin_trap();
  } catch (const specrun::Error&) {
  }
  return 0;
}
