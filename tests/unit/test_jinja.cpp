// The Jinja engine (text/jinja_template.h) and the chat-template front end
// (text/chat_template.h), one semantic at a time. Every expected string is derived by hand from
// Jinja2's documented behaviour under transformers' settings (trim_blocks, lstrip_blocks, an
// immutable sandbox) and Python's str(), ==, json.dumps; tests/e2e/chat_template_js.sh compares
// whole real templates with the JavaScript reference.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "text/chat_template.h"
#include "text/jinja_globals.h"
#include "text/jinja_template.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::vector<std::pair<std::string, jinja::Value>> context_of(const ordered_json& vars) {
  std::vector<std::pair<std::string, jinja::Value>> context = {
      {"raise_exception", jinja::raise_exception_function()}};
  for (auto it = vars.begin(); it != vars.end(); ++it)
    context.emplace_back(it.key(), jinja::from_json(it.value()));
  return context;
}

std::string render(const std::string& source, const ordered_json& vars = ordered_json::object()) {
  return jinja::Template(source, "test.jinja").render(context_of(vars));
}

// The message of the specrun::Error that parsing or rendering throws ("" when none is thrown).
std::string error_of(const std::string& source, const ordered_json& vars = ordered_json::object()) {
  try {
    render(source, vars);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage) << e.what();
    return e.message();
  }
  return "";
}

const ordered_json kMessages = ordered_json::parse(R"([
  {"role": "system", "content": "sys"},
  {"role": "user", "content": "hi"},
  {"role": "assistant", "content": "hello"},
  {"role": "user", "content": "bye"}])");

// ---- lexer: whitespace control, comments, raw, literals ----

TEST(JinjaWhitespace, MinusStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(render("a  \n {%- if true %}b{% endif %}"), "ab");
  EXPECT_EQ(render("{% if true -%}  \n\n b{% endif %}"), "b");
  EXPECT_EQ(render("a \n {{- 'x' -}} \n b"), "axb");
  EXPECT_EQ(render("a \n {#- comment -#} \n b"), "ab");
}

TEST(JinjaWhitespace, TrimBlocksRemovesOneNewlineAfterABlockTagOrComment) {
  EXPECT_EQ(render("{% if true %}\n\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("{# c #}\nx"), "x");
  // Not after an expression.
  EXPECT_EQ(render("{{ 'a' }}\nx"), "a\nx");
  // `+%}` keeps the newline.
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(JinjaWhitespace, LstripBlocksRemovesIndentationBeforeBlockTagsOnly) {
  EXPECT_EQ(render("a\n    {% if true %}\n    b\n    {% endif %}\nc"), "a\n    b\nc");
  // Text before the tag on the same line: kept.
  EXPECT_EQ(render("a {% if true %}b{% endif %}"), "a b");
  // Not before an expression.
  EXPECT_EQ(render("  {{ 'x' }}"), "  x");
  // Indentation of a comment line goes too; `{%+` keeps it.
  EXPECT_EQ(render("  {# c #}\nx"), "x");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  // At the start of the template, and after a tag whose trailing newline was trimmed.
  EXPECT_EQ(render("{% for i in [1, 2] %}\n  {% if true %}\n{{ i }}\n  {% endif %}\n{% endfor %}"),
            "1\n2\n");
}

TEST(JinjaWhitespace, OneTrailingNewlineIsDroppedAndLineEndingsBecomeNewlines) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("a\r\nb\rc\r\n"), "a\nb\nc");
  EXPECT_EQ(render("{% if true %}\r\nx{% endif %}"), "x");
}

TEST(JinjaLexer, CommentsVanishAndRawIsText) {
  EXPECT_EQ(render("a{# {{ x }} {% if %} #}b"), "ab");
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(render("{%- raw -%}  {{ x }}  {%- endraw -%}"), "{{ x }}");
}

TEST(JinjaLexer, StringLiteralsDecodeEscapesAsPython) {
  EXPECT_EQ(render(R"({{ 'a\nb\tc' }})"), "a\nb\tc");
  EXPECT_EQ(render(R"({{ '\x41\u00e9\U0001F600\101' }})"), "A\u00e9\U0001F600A");
  EXPECT_EQ(render(R"({{ 'it\'s' ~ "say \"hi\"" ~ '\\' }})"), "it'ssay \"hi\"\\");
  // An unknown escape stays as written, as Python's unicode-escape leaves it.
  EXPECT_EQ(render(R"({{ '\d+' }})"), "\\d+");
  // Adjacent literals concatenate.
  EXPECT_EQ(render(R"({{ 'a' "b" 'c' }})"), "abc");
  // Braces inside a dict literal do not end the expression.
  EXPECT_EQ(render("{{ {'a': {'b': 1}}['a'] }}"), "{'b': 1}");
}

TEST(JinjaLexer, Literals) {
  EXPECT_EQ(render("{{ 42 }} {{ 1_000 }} {{ 2.5 }} {{ 1e3 }} {{ -3 }}"), "42 1000 2.5 1000.0 -3");
  EXPECT_EQ(render("{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}"),
            "True True False None None");
  EXPECT_EQ(render("{{ [1, 'a', none] }} {{ ('x',) }} {{ (1, 2) }} {{ {'k': [true]} }}"),
            "[1, 'a', None] ('x',) (1, 2) {'k': [True]}");
}

// ---- printing (Python's str) ----

TEST(JinjaPrint, ValuesPrintAsPythonStrDoes) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 10 / 4 }} {{ 4 / 2 }}"),
            "1.0 0.30000000000000004 0.3333333333333333 2.5 2.0");
  EXPECT_EQ(render("{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 1.5e-7 }}"),
            "1e+16 1000000000000000.0 0.0001 1e-05 -0.0 1.5e-07");
  // repr() of strings inside containers: single quotes unless the text has one and no double.
  EXPECT_EQ(render(R"({{ ["it's", 'say "x"', 'both \' "', 'tab\t', 'é'] }})"),
            R"(["it's", 'say "x"', 'both \' "', 'tab\t', 'é'])");
  EXPECT_EQ(render("{{ x }}|{{ x.y }}|{{ none }}", {{"x", ordered_json::object()}}), "{}||None");
}

// ---- operators ----

TEST(JinjaOperators, ArithmeticFollowsPython) {
  EXPECT_EQ(
      render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"),
      "3 -4 2 -2 1024 0.5");
  EXPECT_EQ(
      render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 1 + 1.5 }} {{ true + 1 }}"),
      "7 9 5 2.5 2");
  EXPECT_EQ(render("{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ 'x' * 0 }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}"),
            "ababab|[1, 1]||ab|[1, 2]");
  // `~` joins str() of both sides; undefined is "".
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ nothing ~ [1] }}"), "a1None[1]");
  // Filters bind tighter than arithmetic.
  EXPECT_EQ(render("{{ messages|length - 1 }}", {{"messages", kMessages}}), "3");
}

TEST(JinjaOperators, ComparisonsMembershipAndLogic) {
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ true == 1 }} {{ [1, 2] == [1, 2] }} {{ (1,) == [1] }}"),
            "True True True False");
  EXPECT_EQ(
      render("{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}"),
      "True True True");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "True False");
  EXPECT_EQ(
      render(
          "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'z' not in 'abc' }}"),
      "True True True True");
  EXPECT_EQ(render("{{ 'x' in nothing }} {{ 'x' not in nothing }}"), "False True");
  // and/or give an operand, as in Python.
  EXPECT_EQ(render("{{ 0 or 'b' }}|{{ 'a' and 'b' }}|{{ [] and 1 }}|{{ not [] }}"), "b|b|[]|True");
  EXPECT_EQ(render("{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'only' if 0 }}]{{ 1 if 0 "
                   "else 2 if 0 else 3 }}"),
            "yn[]3");
}

// ---- statements ----

TEST(JinjaStatements, IfElifElse) {
  const std::string t = "{% if n > 2 %}big{% elif n > 0 %}small{% else %}none{% endif %}";
  EXPECT_EQ(render(t, {{"n", 3}}), "big");
  EXPECT_EQ(render(t, {{"n", 1}}), "small");
  EXPECT_EQ(render(t, {{"n", 0}}), "none");
}

TEST(JinjaStatements, LoopVariables) {
  EXPECT_EQ(
      render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
             "{{ loop.revindex0 }}{{ loop.length }}{{ loop.first }}{{ loop.last }};{% endfor %}"),
      "10323TrueFalse;21213FalseFalse;32103FalseTrue;");
  EXPECT_EQ(
      render(
          "{% for x in [1, 2, 3] %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }},{% endfor %}"),
      ">1>2,1>2>3,2>3>,");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "aba");
}

TEST(JinjaStatements, LoopElseFilterAndItems) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  // The loop variables count the items the `if` keeps.
  EXPECT_EQ(
      render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}:{{ loop.index }}/{{ loop.length }} "
             "{% endfor %}"),
      "2:1/2 4:2/2 ");
  EXPECT_EQ(render("{% for x in [1] if x > 5 %}x{% else %}none kept{% endfor %}"), "none kept");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", ordered_json::parse(R"({"b": 1, "a": [2]})")}}),
            "b=1;a=[2];");
  EXPECT_EQ(
      render("{% for k in d %}{{ k }}{% endfor %}{% for a, b in [[1, 2]] %}{{ a + b }}{% endfor %}",
             {{"d", ordered_json::parse(R"({"x": 1, "y": 2})")}}),
      "xy3");
}

TEST(JinjaStatements, BreakContinueAndRange) {
  EXPECT_EQ(render("{% for i in range(6) %}{% if i == 1 %}{% continue %}{% endif %}"
                   "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "023");
  EXPECT_EQ(
      render("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}"),
      "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
}

TEST(JinjaStatements, LoopBodiesHaveTheirOwnScopeEachIteration) {
  // A set inside the loop shadows the outer variable for that iteration only.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}({{ x }}){% endfor "
                   "%}{{ x }}"),
            "[0](1)[0](2)0");
  EXPECT_EQ(render("{% for i in [1, 2] %}{% set y = i %}{% endfor %}[{{ y }}]"), "[]");
  // `if` blocks do not: their sets stay.
  EXPECT_EQ(render("{% if true %}{% set w = 3 %}{% endif %}{{ w }}"), "3");
}

TEST(JinjaStatements, NamespaceCarriesValuesOutOfLoops) {
  EXPECT_EQ(render("{% set ns = namespace(found=false, n=0) %}{% for m in messages %}"
                   "{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.n = ns.n + 1 %}"
                   "{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }} {{ ns.missing }}",
                   {{"messages", kMessages}}),
            "True 2 ");
  EXPECT_EQ(
      render("{% set ns = namespace() %}{% set ns.x = [1] %}{% set ns.x = ns.x + [2] %}{{ ns.x }}"),
      "[1, 2]");
  EXPECT_EQ(error_of("line 1\n{% set ns = 3 %}{% set ns.a = 1 %}"),
            "test.jinja line 2: cannot assign attribute on non-namespace object ('ns' is a int; "
            "create it with namespace(...))");
}

TEST(JinjaStatements, SetForms) {
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{{ t }}"), "12(3, 4)");
  EXPECT_EQ(render("{% set block %}x={{ 1 + 1 }}{% endset %}[{{ block }}]"), "[x=2]");
  EXPECT_EQ(render("{% set up | upper %}abc{% endset %}{{ up }}"), "ABC");
}

TEST(JinjaStatements, Macros) {
  const std::string m =
      "{% macro greet(name, greeting='Hello', end='!') %}{{ greeting }}, {{ name }}"
      "{{ end }}{% endmacro %}";
  EXPECT_EQ(render(m + "{{ greet('Bo') }}|{{ greet('Al', 'Hi') }}|{{ greet('Cy', end='?') }}"),
            "Hello, Bo!|Hi, Al!|Hello, Cy?");
  // A macro sees the template's variables as they are when it is called, not its caller's.
  EXPECT_EQ(render("{% set x = 1 %}{% macro show() %}{{ x }}{% endmacro %}{% set x = 2 %}"
                   "{% for x in [9] %}{{ show() }}{% endfor %}"),
            "2");
  EXPECT_EQ(error_of(m + "{{ greet('a', 'b', 'c', 'd') }}"),
            "test.jinja line 1: macro 'greet' takes not more than 3 argument(s)");
}

TEST(JinjaStatements, FilterAndGenerationBlocks) {
  EXPECT_EQ(render("{% filter upper %}ab{{ 'c' }}{% endfilter %}"), "ABC");
  EXPECT_EQ(render("{% generation %}kept {{ 1 }}{% endgeneration %}"), "kept 1");
}

// ---- subscripts, attributes, undefined ----

TEST(JinjaAccess, SubscriptsAndSlices) {
  const ordered_json vars = {{"l", {1, 2, 3, 4}}, {"s", "h\u00e9llo"}};
  EXPECT_EQ(
      render("{{ l[0] }}{{ l[-1] }}{{ l[1:3] }}{{ l[::-1] }}{{ l[::2] }}{{ l[-2:] }}{{ l[:-3] }}",
             vars),
      "14[2, 3][4, 3, 2, 1][1, 3][3, 4][1]");
  // Strings index and slice by character, not byte.
  EXPECT_EQ(render("{{ s[1] }}{{ s[::-1] }}{{ s[1:3] }}{{ s | length }}", vars),
            "\u00e9oll\u00e9h\u00e9l5");
  // Out of range: undefined, not an error.
  EXPECT_EQ(render("[{{ l[10] }}][{{ s[10] }}]{{ l[10] is defined }}", vars), "[][]False");
  EXPECT_EQ(error_of("{{ l[::0] }}", vars), "test.jinja line 1: slice step cannot be zero");
}

TEST(JinjaAccess, AttributesAreItemsAndMethodsComeFirst) {
  const ordered_json vars = {{"m", {{"role", "user"}, {"items", "key"}, {"n", {{"k", 1}}}}}};
  EXPECT_EQ(render("{{ m.role }}{{ m['role'] }}{{ m.n.k }}{{ m['n']['k'] }}", vars), "useruser11");
  // As in Jinja2, `.items` is the dict method; ['items'] the key.
  EXPECT_EQ(render("{{ m['items'] }} {{ m.items() | list | length }}", vars), "key 3");
  EXPECT_EQ(render("{{ messages.0.role }}{{ messages[-1].content }}", {{"messages", kMessages}}),
            "systembye");
}

TEST(JinjaAccess, UndefinedValues) {
  const ordered_json vars = {{"m", {{"role", "user"}}}};
  EXPECT_EQ(
      render(
          "[{{ nothing }}][{{ m.content }}]{{ m.content is defined }}{{ m.content is undefined }}"
          "{{ nothing | length }}{% if m.content %}T{% else %}F{% endif %}"
          "{% for x in nothing %}x{% endfor %}{{ nothing | default('d') }}",
          vars),
      "[][]FalseTrue0Fd");
  EXPECT_EQ(error_of("\n{{ m.content.strip() }}", vars),
            "test.jinja line 2: 'dict object' has no attribute 'content'");
  EXPECT_EQ(error_of("{{ nothing + 1 }}"), "test.jinja line 1: 'nothing' is undefined");
}

// ---- filters ----

TEST(JinjaFilters, StringFilters) {
  EXPECT_EQ(
      render(
          "{{ '  a b \n' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'aB' | upper }}{{ 'aB' | lower }}"),
      "a b|a|ABab");
  EXPECT_EQ(render("{{ \"they're bill's\" | title }}|{{ 'hELLO wORLD' | capitalize }}"),
            "They're Bill's|Hello world");
  EXPECT_EQ(render("{{ 'aaa' | replace('a', 'b') }}{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'one two  "
                   "three' | wordcount }}"),
            "bbbbba|3");
  EXPECT_EQ(render("{{ '<a href=\"x\">&\\'</a>' | e }}|{{ '<b>' | safe }}"),
            "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;|<b>");
  EXPECT_EQ(render("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, first=true) }}"),
            "a\n  b\n\n  c|  a\n  b");
}

TEST(JinjaFilters, SequenceFilters) {
  const ordered_json vars = {{"l", {3, 1, 2}}, {"s", {"b", "A", "a"}}};
  EXPECT_EQ(
      render("{{ l | length }}{{ l | count }}{{ l | first }}{{ l | last }}{{ 'abc' | first }}",
             vars),
      "3332a");
  EXPECT_EQ(render("{{ l | sort }}{{ l | sort(reverse=true) }}{{ s | sort }}{{ s | "
                   "sort(case_sensitive=true) }}",
                   vars),
            "[1, 2, 3][3, 2, 1]['A', 'a', 'b']['A', 'a', 'b']");
  EXPECT_EQ(render("{{ l | reverse | list }}{{ 'abc' | reverse }}{{ [1, 2, 1, 3] | unique | list "
                   "}}{{ s | unique | list }}",
                   vars),
            "[2, 1, 3]cba[1, 2, 3]['b', 'A']");
  EXPECT_EQ(render("{{ l | join }}|{{ l | join(', ') }}|{{ 'ab' | list }}|{{ l | sum }}|{{ l | max "
                   "}}{{ l | min }}",
                   vars),
            "312|3, 1, 2|['a', 'b']|6|31");
  EXPECT_EQ(render("{{ {'a': 1} | items | list }}{{ {'b': 2, 'a': 1} | dictsort }}"),
            "[('a', 1)][('a', 1), ('b', 2)]");
}

TEST(JinjaFilters, SelectRejectAndMap) {
  const ordered_json vars = {{"messages", kMessages}};
  EXPECT_EQ(render("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') "
                   "| join(',') }}|"
                   "{{ messages | rejectattr('role', 'eq', 'user') | list | length }}|"
                   "{{ messages | selectattr('missing', 'undefined') | list | length }}",
                   vars),
            "hi,bye|2|4");
  EXPECT_EQ(
      render("{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(', "
             "') }}|"
             "{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [0, 1, '', 'x'] | select | list }}|"
             "{{ ['A', 'b'] | map('lower') | list }}"),
      "a, b|[1, 3]|[1, 'x']|['a', 'b']");
  EXPECT_EQ(render("{{ [{'a': 1}, {}] | map(attribute='a', default=0) | list }}"), "[1, 0]");
}

TEST(JinjaFilters, DefaultAndConversions) {
  EXPECT_EQ(
      render("{{ nothing | default('d') }}{{ '' | default('e') }}|{{ '' | default('f', true) }}"
             "{{ 0 | d('g', boolean=true) }}{{ none | default('h') }}"),
      "d|fgNone");
  EXPECT_EQ(render("{{ 3.7 | int }} {{ '42' | int }} {{ ' 7 ' | int }} {{ 'x' | int }} {{ 'x' | "
                   "int(5) }} {{ '3.9' | int }}"),
            "3 42 7 0 5 3");
  EXPECT_EQ(
      render(
          "{{ '2.5' | float }} {{ 5 | float }} {{ 'x' | float }} {{ -3 | abs }} {{ -2.5 | abs }}"),
      "2.5 5.0 0.0 3 2.5");
  // round: Python's, ties to even; ceil and floor.
  EXPECT_EQ(render("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.51 | round(1, "
                   "'floor') }} "
                   "{{ 2.51 | round(1, 'ceil') }} {{ 3 | round }}"),
            "2.0 4.0 2.57 2.5 2.6 3");
  EXPECT_EQ(
      render("{{ none | string }}{{ true | string }}{{ [1] | string }}{{ 5 | string | length }}"),
      "NoneTrue[1]1");
}

TEST(JinjaFilters, ToJsonAsTransformersDumps) {
  const ordered_json vars = {
      {"tool",
       ordered_json::parse(R"({"name": "f", "parameters": {"type": "object", "required": ["a"],
                                     "n": 1, "x": 0.5, "t": true, "z": null, "e": {}, "l": []}})")}};
  // json.dumps(ensure_ascii=False): separators ", " and ": ", keys in their order.
  EXPECT_EQ(
      render("{{ tool | tojson }}", vars),
      R"({"name": "f", "parameters": {"type": "object", "required": ["a"], "n": 1, "x": 0.5, )"
      R"("t": true, "z": null, "e": {}, "l": []}})");
  // With an indent: "," between items, newlines, empty containers stay [] and {}.
  EXPECT_EQ(render("{{ {'a': [1, 2], 'b': {}} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1, {'a': 2}] | "
                   "tojson(separators=(',', ':')) }}"),
            R"({"a": 2, "b": 1}|[1,{"a":2}])");
  EXPECT_EQ(
      render(R"({{ ('é😀 "q" \\ 	' ~ '\n\x01') | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }})"),
      R"("é😀 \"q\" \\ \t\n\u0001"|"\u00e9")");
  EXPECT_EQ(render("{{ 5.0 | tojson }} {{ 1e20 | tojson }} {{ none | tojson }}"), "5.0 1e+20 null");
  EXPECT_EQ(error_of("{{ nothing | tojson }}"),
            "test.jinja line 1: tojson: Object of type Undefined is not JSON serializable");
}

// ---- tests ----

TEST(JinjaTests, TypeAndValueTests) {
  EXPECT_EQ(render("{{ 'a' is string }}{{ 1 is string }}{{ 1 is number }}{{ 1.5 is number }}{{ "
                   "true is number }}"
                   "{{ 1 is integer }}{{ true is integer }}{{ 1.5 is float }}{{ true is boolean "
                   "}}{{ 1 is boolean }}"),
            "TrueFalseTrueTrueTrueTrueFalseTrueTrueFalse");
  EXPECT_EQ(
      render(
          "{{ none is none }}{{ 0 is none }}{{ true is true }}{{ 1 is true }}{{ false is false }}"
          "{{ 0 is false }}"),
      "TrueFalseTrueFalseTrueFalse");
  EXPECT_EQ(
      render("{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}"
             "{{ 1 is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ 'a' is sequence }}"),
      "TrueFalseTrueTrueFalseTrueTrueTrue");
  EXPECT_EQ(render("{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}"
                   "{{ 2 is eq 2 }}{{ 2 is equalto 3 }}{{ 2 is ne 3 }}{{ 2 is in [1, 2] }}"
                   "{{ 'ab' is lower }}{{ 'AB' is upper }}{{ range is callable }}"),
            "TrueFalseTrueFalseTrueFalseTrueTrueTrueTrueTrue");
  EXPECT_EQ(
      render("{{ x is defined }}{{ x is not defined }}{{ x is undefined }}{{ not x is defined }}"
             "{{ 1 is not none }}"),
      "FalseTrueTrueTrueTrue");
}

// ---- str and dict methods ----

TEST(JinjaMethods, StringMethods) {
  EXPECT_EQ(render("{{ 'Hello'.startswith('He') }}{{ 'Hello'.startswith(('x', 'H')) }}{{ "
                   "'Hello'.endswith('lo') }}"),
            "TrueTrueTrue");
  EXPECT_EQ(
      render(
          "[{{ '  a  '.strip() }}][{{ '\n\na b\n'.lstrip('\n') }}][{{ ' \na\n\n'.rstrip('\n') }}]"
          "[{{ '  a'.lstrip() }}][{{ 'xyx'.strip('x') }}]"),
      "[a][a b\n][ \na][a][y]");
  EXPECT_EQ(render("{{ 'a b  c'.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}"
                   "{{ 'a,b,c'.rsplit(',', 1) }}{{ ''.split() }}"),
            "['a', 'b', 'c']['a', 'b', '', 'c']['a', 'b,c']['a,b', 'c'][]");
  EXPECT_EQ(render("{{ 'x</think>y</think>\n\nz'.split('</think>')[-1].lstrip('\n') }}"), "z");
  EXPECT_EQ(
      render("{{ 'Hello World'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'aB'.upper() }}{{ "
             "'aB'.lower() }}"
             "|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'hello'.find('l') }}{{ 'hello'.find('z') }}"
             "{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ 'ß'.upper() }}"),
      "Hello World|Hello|ABab|bba|2-12|a-b|SS");
  EXPECT_EQ(render("{{ '{} and {name}'.format(1, name='x') }}"), "1 and x");
}

TEST(JinjaMethods, DictMethods) {
  const ordered_json vars = {{"d", ordered_json::parse(R"({"b": 1, "a": 2})")}};
  EXPECT_EQ(render("{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}", vars),
            "['b', 'a'][1, 2][('b', 1), ('a', 2)]");
  EXPECT_EQ(render("{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 'dflt') }}", vars), "2Nonedflt");
}

// ---- errors ----

TEST(JinjaErrors, UnsupportedConstructsNameTheLine) {
  EXPECT_EQ(error_of("a\nb\n{% include 'other.jinja' %}"),
            "test.jinja line 3: unsupported construct '{% include %}': the chat-template engine "
            "implements the Jinja subset that chat templates use");
  EXPECT_EQ(error_of("\n{% call m() %}x{% endcall %}"),
            "test.jinja line 2: unsupported construct '{% call %}': the chat-template engine "
            "implements the Jinja subset that chat templates use");
  EXPECT_EQ(error_of("{% for x in y recursive %}{% endfor %}"),
            "test.jinja line 1: unsupported construct: recursive for loops");
  EXPECT_EQ(error_of("\n\n{{ x | frobnicate }}"), "test.jinja line 3: unknown filter 'frobnicate'");
  EXPECT_EQ(error_of("{{ x | truncate(3) }}"),
            "test.jinja line 1: filter 'truncate' is not supported by the chat-template engine");
  EXPECT_EQ(error_of("{{ x is frobnicated }}"), "test.jinja line 1: unknown test 'frobnicated'");
  EXPECT_EQ(error_of("{{ [].append(1) }}"),
            "test.jinja line 1: access to attribute 'append' of 'list' object is unsafe: "
            "transformers renders chat templates in an immutable sandbox, where lists and dicts "
            "cannot be modified (build a new one, or use a namespace)");
}

TEST(JinjaErrors, SyntaxErrors) {
  EXPECT_EQ(error_of("{% for x in l %}\n{% endif %}"),
            "test.jinja line 2: unexpected '{% endif %}' (the 'for' of line 1 is still open: "
            "expected '{% endfor %}')");
  EXPECT_EQ(error_of("x\n{% if a %}\ny"),
            "test.jinja line 3: unexpected end of template: the 'if' of line 2 is not closed "
            "(expected '{% endif %}')");
  EXPECT_EQ(error_of("{{ 'abc }}"), "test.jinja line 1: unterminated string literal");
  EXPECT_EQ(error_of("{% break %}"), "test.jinja line 1: 'break' outside a for loop");
  EXPECT_EQ(error_of("{{ 1 + }}"), "test.jinja line 1: expected an expression, got '}}'");
}

TEST(JinjaErrors, RuntimeErrorsNameTheLoopItem) {
  EXPECT_EQ(error_of("{% for m in messages %}\n{{ m.content + 1 }}\n{% endfor %}",
                     {{"messages", kMessages}}),
            "test.jinja line 2: can only concatenate str (not \"int\") to str (in `for m in "
            "messages` at loop.index0 = 0)");
  EXPECT_EQ(
      error_of("{% for m in messages %}{% if m.role == 'assistant' %}"
               "{{ raise_exception('no assistant turns, please') }}{% endif %}{% endfor %}",
               {{"messages", kMessages}}),
      "test.jinja line 1: the template raised an error: no assistant turns, please (in `for m "
      "in messages` at loop.index0 = 2)");
  EXPECT_EQ(error_of("{{ 1 // 0 }}"), "test.jinja line 1: integer division or modulo by zero");
  EXPECT_EQ(error_of("{{ 'a' < 1 }}"),
            "test.jinja line 1: '<' not supported between instances of 'str' and 'int'");
}

TEST(JinjaGlobals, StrftimeNowFormatsTheGivenClockInLocalTime) {
  const char* saved = std::getenv("TZ");
  const std::string saved_tz = saved ? saved : "";
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  std::vector<std::pair<std::string, jinja::Value>> context = {
      {"strftime_now", jinja::strftime_now_function(
                           [] { return std::time_t{1721995200}; })}};  // 2024-07-26 12:00 UTC
  EXPECT_EQ(
      jinja::Template("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}", "t")
          .render(context),
      "26 Jul 2024|2024-07-26 12:00");
  if (saved)
    ::setenv("TZ", saved_tz.c_str(), 1);
  else
    ::unsetenv("TZ");
  ::tzset();
}

// ---- chat templates of model folders ----

class ChatTemplateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "specrun_chat_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories((fs::path(dir_) / name).parent_path());
    std::ofstream(fs::path(dir_) / name, std::ios::binary) << text;
  }
  std::string load_error(const std::string& file = "", const std::string& name = "") {
    try {
      load_chat_template(dir_, file, name);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  }
  std::string dir_;
};

TEST_F(ChatTemplateDir, ReadsTokenizerConfigStringAndTokens) {
  write("tokenizer_config.json",
        R"({"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
            "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>"})");
  const ChatTemplate t = load_chat_template(dir_);
  EXPECT_EQ(t.origin, dir_ + "/tokenizer_config.json: chat_template");
  EXPECT_EQ(t.bos_token, "<s>");
  EXPECT_EQ(t.eos_token, "</s>");
  EXPECT_EQ(
      render_chat_template(t, ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), false),
      "<s>hi");
}

TEST_F(ChatTemplateDir, NamedTemplatesInAList) {
  write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(load_chat_template(dir_).source, "D");
  const ChatTemplate tool = load_chat_template(dir_, "", "tool_use");
  EXPECT_EQ(tool.source, "T");
  EXPECT_EQ(tool.origin, dir_ + "/tokenizer_config.json: chat_template[name=tool_use]");
  EXPECT_EQ(load_error("", "rag"),
            dir_ +
                "/tokenizer_config.json: chat_template has no template "
                "named 'rag' (it has: default, tool_use); choose one by name");
}

TEST_F(ChatTemplateDir, JinjaFileWinsAndJsonFileIsTheFallback) {
  write("tokenizer_config.json", R"({"chat_template": "config", "eos_token": "E"})");
  write("chat_template.jinja", "jinja file\n");
  EXPECT_EQ(load_chat_template(dir_).source, "jinja file\n");
  EXPECT_EQ(load_chat_template(dir_).eos_token, "E");
  write("additional_chat_templates/extra.jinja", "extra");
  EXPECT_EQ(load_chat_template(dir_, "", "extra").source, "extra");
  fs::remove(fs::path(dir_) / "chat_template.jinja");
  write("tokenizer_config.json", R"({"bos_token": null})");
  write("chat_template.json", R"({"chat_template": "from json"})");
  const ChatTemplate t = load_chat_template(dir_);
  EXPECT_EQ(t.source, "from json");
  EXPECT_EQ(t.bos_token, "");
}

TEST_F(ChatTemplateDir, TemplateFileAndMissingTemplate) {
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_EQ(load_error(), dir_ + " has no chat template: looked for " + dir_ +
                              "/chat_template.jinja, "
                              "\"chat_template\" in " +
                              dir_ + "/tokenizer_config.json, and " + dir_ +
                              "/chat_template.json (give the template with --template FILE)");
  write("mine.jinja", "{{ bos_token }}!");
  const ChatTemplate t = load_chat_template(dir_, dir_ + "/mine.jinja");
  EXPECT_EQ(t.origin, dir_ + "/mine.jinja");
  EXPECT_EQ(render_chat_template(t, ordered_json::array(), false), "<s>!");
  write("tokenizer_config.json", "{not json");
  EXPECT_EQ(load_error(), dir_ + "/tokenizer_config.json is not valid JSON");
}

TEST(ChatTemplateRender, BindsWhatApplyChatTemplateBinds) {
  ChatTemplate t;
  t.origin = "t.jinja";
  t.source =
      "{{ tools is defined }}{{ tools is none }}{{ documents }}{{ add_generation_prompt }}"
      "{{ bos_token is defined }}{{ eos_token }}{{ enable_thinking }}{{ messages | length }}";
  t.eos_token = "</s>";
  EXPECT_EQ(render_chat_template(t, ordered_json::array({{{"role", "user"}, {"content", "x"}}}),
                                 true, {{"enable_thinking", false}}),
            "TrueTrueNoneTrueFalse</s>False1");
  // Keys keep the document's order with ordered_json; nlohmann::json sorts them.
  t.source = "{{ tools[0] | tojson }}";
  EXPECT_EQ(render_chat_template(
                t, ordered_json::array(), false,
                ordered_json::parse(R"({"tools": [{"name": "f", "description": "d"}]})")),
            R"({"name": "f", "description": "d"})");
  EXPECT_EQ(render_chat_template(
                t, nlohmann::json::array(), false,
                nlohmann::json::parse(R"({"tools": [{"name": "f", "description": "d"}]})")),
            R"({"description": "d", "name": "f"})");
}

TEST(ChatTemplateRender, ErrorsNameTheOriginLineAndMessage) {
  ChatTemplate t;
  t.origin = "DIR/tokenizer_config.json: chat_template";
  t.source =
      "{% for message in messages %}\n{% if message.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('unsupported role ' + message.role) }}{% endif %}{% endfor %}";
  try {
    render_chat_template(t, ordered_json::parse(R"([{"role": "user"}, {"role": "tool"}])"), false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "DIR/tokenizer_config.json: chat_template line 2: the template raised an error: "
              "unsupported role tool (in `for message in messages` at loop.index0 = 1)");
  }
}

}  // namespace
}  // namespace specrun
