// Jinja features against jinja2's documented behaviour in HF's environment (trim_blocks,
// lstrip_blocks, loopcontrols). Expected values are written by hand.
#include <gtest/gtest.h>

#include "text/template/template.h"

namespace tessera::text {
namespace {

using J = nlohmann::ordered_json;

std::string render(const std::string& src, const J& vars = J::object()) { return Template::parse(src).render(vars); }

std::string error_of(const std::string& src, const J& vars = J::object(), TemplateLimits limits = {}) {
  try {
    Template::parse(src, limits).render(vars);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "<no error>";
}

// ---- whitespace ------------------------------------------------------------------------------

TEST(Whitespace, TrimBlocksRemovesFirstNewlineAfterBlockTag) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nend"), "yes\nend");
  // Not after {{ }}.
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
  // Comments are trimmed too.
  EXPECT_EQ(render("{# c #}\nx"), "x");
}

TEST(Whitespace, LstripBlocksRemovesIndentBeforeBlockTag) {
  EXPECT_EQ(render("a\n    {% if true %}\n    b\n    {% endif %}\nc"), "a\n    b\nc");
  // Only whitespace from the line start: text before the tag on the same line stays.
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
  // Not before {{ }}.
  EXPECT_EQ(render("  {{ 'x' }}"), "  x");
}

TEST(Whitespace, ExplicitControl) {
  EXPECT_EQ(render("a \n {%- if true -%} \n b \n {%- endif -%} \n c"), "abc");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a \n{#- comment -#}\n b"), "ab");
  // `+` disables lstrip_blocks / trim_blocks for one tag.
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
}

TEST(Whitespace, OneTrailingNewlineIsDropped) {
  EXPECT_EQ(render("abc\n"), "abc");
  EXPECT_EQ(render("abc\n\n"), "abc\n");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(Whitespace, RawBlock) {
  EXPECT_EQ(render("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
  EXPECT_EQ(render("{%- raw -%}  {% x %}  {%- endraw %}\n!"), "{% x %}!");
}

// ---- statements ------------------------------------------------------------------------------

TEST(Statements, IfElifElse) {
  const char* t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, {{"x", 1}}), "one");
  EXPECT_EQ(render(t, {{"x", 2}}), "two");
  EXPECT_EQ(render(t, {{"x", 3}}), "many");
}

TEST(Statements, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ "
                   "loop.last }}{{ loop.length }}|{% endfor %}"),
            "103TrueFalse3|212FalseFalse3|321FalseTrue3|");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}"), "-2,1-3,2-,");
  EXPECT_EQ(render("{% for x in [1,2] %}{% for y in [3] %}{{ loop.depth }}{% endfor %}{{ loop.depth }}{% endfor %}"),
            "1111");
  EXPECT_EQ(render("{% for x in ['a','b','c'] %}{{ loop.cycle('o', 'e') }}{% endfor %}"), "oeo");
}

TEST(Statements, ForElseFilterAndUnpacking) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"), "2/2 4/2 ");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;");
  EXPECT_EQ(render("{% for a, (b, c) in [(1, (2, 3))] %}{{ a }}{{ b }}{{ c }}{% endfor %}"), "123");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", {{"d", {{"z", 1}, {"y", 2}}}}), "zy");
}

TEST(Statements, BreakAndContinue) {
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "012");
  EXPECT_EQ(render("{% for x in range(5) %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "024");
  EXPECT_EQ(render("{%- for idx in range(5, -1, -2) -%}{{ idx }}{%- break -%}{%- endfor -%}"), "5");
  EXPECT_NE(error_of("{% break %}").find("outside of a loop"), std::string::npos);
}

TEST(Statements, SetScoping) {
  // A set inside a for body does not leak out; namespaces do.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1,2] %}{% set x = 5 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1,2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"),
            "4");
  // An if block shares its parent's scope.
  EXPECT_EQ(render("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append(3) %}{{ ns.ids }}"), "[3]");
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.y = 2 %}").find("non-namespace"), std::string::npos);
}

TEST(Statements, BlockSetAndFilterBlock) {
  EXPECT_EQ(render("{% set x %}a{{ 1 }}b{% endset %}[{{ x }}]"), "[a1b]");
  EXPECT_EQ(render("{% set x | upper %}abc{% endset %}{{ x }}"), "ABC");
  EXPECT_EQ(render("{% filter upper %}hi {{ 'there' }}{% endfilter %}"), "HI THERE");
}

TEST(Statements, Macros) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ "
                   "greet('b', punct='?') }}"),
            "Hi a! Hi b?");
  // Macros see template-level variables at call time, not the caller's loop variables.
  EXPECT_EQ(
      render("{% macro m() %}{{ g }}{{ i }}{% endmacro %}{% set g = 'G' %}{% for i in [1] %}{{ m() }}{% endfor %}"),
      "G");
  // Recursion.
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "321");
  EXPECT_EQ(render("{% macro list() %}<{{ caller() }}>{% endmacro %}{% call list() %}inner{% endcall %}"), "<inner>");
  EXPECT_EQ(render("{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"), "[2]{'k': 3}");
}

TEST(Statements, With) { EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"), "3[]"); }

// ---- expressions -----------------------------------------------------------------------------

TEST(Expressions, Literals) {
  EXPECT_EQ(render("{{ 'a' 'b' \"c\" }}"), "abc");
  EXPECT_EQ(render("{{ 'tab\\there' }}|{{ \"q\\\"\" }}|{{ '\\u00e9' }}"), "tab\there|q\"|é");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(render("{{ {'k': 'v', 'n': [none]} }}"), "{'k': 'v', 'n': [None]}");
  EXPECT_EQ(render("{{ (1,) }} {{ (1, 2) }} {{ () }}"), "(1,) (1, 2) ()");
  EXPECT_EQ(render("{{ True }}{{ False }}{{ None }}{{ 1_000 }}"), "TrueFalseNone1000");
}

TEST(Expressions, PythonStringification) {
  EXPECT_EQ(render("{{ [\"it's\", 'a\"b', 'x\\ny'] }}"), "[\"it's\", 'a\"b', 'x\\ny']");
  EXPECT_EQ(render("{{ 1.0 }} {{ 2.50 }} {{ 1e20 }} {{ 1e-7 }} {{ 10 / 4 }} {{ 3.0 * 2 }}"),
            "1.0 2.5 1e+20 1e-07 2.5 6.0");
  EXPECT_EQ(render("{{ x }}", {{"x", nullptr}}), "None");
  EXPECT_EQ(render("{{ x }}", {{"x", J::parse(R"({"a": [1.5, null, "é"]})")}}), "{'a': [1.5, None, 'é']}");
}

TEST(Expressions, Arithmetic) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2 * 3 }}"),
            "3 -4 1 2 1024 3.5 7");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }}"), "a1None ababab [1, 2]");
  EXPECT_EQ(render("{{ -2 ** 2 }}"), "4");  // jinja2 binds unary minus tighter than **
  EXPECT_NE(error_of("{{ 1 / 0 }}").find("ZeroDivisionError"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("can only concatenate str (not \"int\") to str"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("OverflowError"), std::string::npos);
}

TEST(Expressions, LogicAndComparison) {
  EXPECT_EQ(render("{{ none or 'x' }} {{ 'a' and 'b' }} {{ 0 and 1 }} {{ not 0 }}"), "x b 0 True");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }}"), "True False True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 'y' if false else 'n' }}|{{ 'y' if false }}|"), "n||");
  EXPECT_NE(error_of("{{ 1 < 'a' }}").find("TypeError"), std::string::npos);
}

TEST(Expressions, AttributesSubscriptsSlices) {
  const J vars = {{"m", {{"role", "user"}, {"content", "hello"}}}, {"l", {1, 2, 3, 4}}};
  EXPECT_EQ(render("{{ m.role }} {{ m['content'] }} {{ m.missing is defined }} {{ m.get('x', 'd') }}", vars),
            "user hello False d");
  EXPECT_EQ(render("{{ l[-1] }} {{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ l[10] is defined }}", vars),
            "4 [2, 3, 4] [1, 2] [4, 3, 2, 1] [1, 3] False");
  EXPECT_EQ(render("{{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ 'héllo'|length }}"), "é olléh 5");
  EXPECT_EQ(render("{{ l.0 }}", vars), "1");
}

TEST(Expressions, Methods) {
  EXPECT_EQ(render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a'.lstrip() }}|{{ 'a '.rstrip() }}|"),
            "a b|a|a|a|");
  EXPECT_EQ(
      render(
          "{{ 'a,b,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ' a  b '.split() }} {{ 'a,b,c'.rsplit(',', 1) }}"),
      "['a', 'b', 'c'] ['a', 'b,c'] ['a', 'b'] ['a,b', 'c']");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'aaa'.replace('a', 'b', 2) }}"),
            "True True bba");
  EXPECT_EQ(render("{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"),
            "Hello World Hello ABab");
  EXPECT_EQ(render("{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", {{"d", {{"a", 1}}}}),
            "['a'] [1] [('a', 1)]");
  EXPECT_EQ(render("{% set l = [1, 2] %}{% set _ = l.append(3) %}{{ l.pop(0) }}{{ l }}"), "1[2, 3]");
  EXPECT_EQ(render("{{ '-'.join(['a', 'b']) }} {{ '{} {x}'.format(1, x=2) }}"), "a-b 1 2");
}

// ---- filters and tests -----------------------------------------------------------------------

TEST(Filters, Common) {
  EXPECT_EQ(render("{{ [1,2,3]|length }} {{ 'abc'|length }} {{ {'a':1}|length }} {{ missing|length }}"), "3 3 1 0");
  EXPECT_EQ(render("{{ '  x '|trim }}|{{ [1,2]|join(', ') }}|{{ [1,2]|first }}|{{ [1,2]|last }}|{{ 1|string }}"),
            "x|1, 2|1|2|1");
  EXPECT_EQ(render("{{ missing|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }}"), "d  d");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|items|list }} {{ {'b': 1, 'a': 2}|dictsort }}"),
            "[('b', 1), ('a', 2)] [('a', 2), ('b', 1)]");
  EXPECT_EQ(render("{{ ['b', 'A', 'c']|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['a', 'A', 'b']|unique|list }}"),
            "['A', 'b', 'c'] [3, 2, 1] ['a', 'b']");
  EXPECT_EQ(render("{{ '42'|int + 1 }} {{ 'x'|int }} {{ '3.7'|int }} {{ '2.5'|float }} {{ 3|float }} {{ -3|abs }} {{ "
                   "2.5|round }} {{ 2.567|round(2) }}"),
            "43 0 3 2.5 3.0 3 2.0 2.57");
  EXPECT_EQ(render("{{ 'ab'|upper }}{{ 'AB'|lower }} {{ 'hello world'|capitalize }} {{ 'aXa'|replace('a', 'b') }}"),
            "ABab Hello world bXb");
  EXPECT_EQ(render("{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, first=true) }}"), "a\n  b|  a\n  b");
  EXPECT_EQ(
      render("{{ [1, 2, 3]|sum }} {{ [3, 1]|min }} {{ [3, 1]|max }} {{ 'abc'|reverse }} {{ [1, 2]|reverse|list }}"),
      "6 1 3 cba [2, 1]");
  EXPECT_EQ(render("{{ '<&>'|e }} {{ 'x'|safe }} {{ 'a b c'|wordcount }} {{ '%s-%d'|format('a', 3) }}"),
            "&lt;&amp;&gt; x 3 a-3");
}

TEST(Filters, SelectionAndMapping) {
  const J vars = {
      {"ms", J::parse(R"([{"role": "system", "n": 1}, {"role": "user", "n": 2}, {"role": "user", "n": 3}])")}};
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='n')|list }}", vars), "[2, 3]");
  EXPECT_EQ(render("{{ ms|rejectattr('role', 'eq', 'user')|list|length }}", vars), "1");
  EXPECT_EQ(
      render(
          "{{ [0, 1, 2, 3]|select('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 2]|reject('even')|list }}"),
      "[1, 3] [1, 'a'] [1]");
  EXPECT_EQ(render("{{ ['a', 'b']|map('upper')|list }}"), "['A', 'B']");
}

TEST(Tests, TypeAndValueTests) {
  EXPECT_EQ(render("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"),
            "FalseTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ [] is iterable }}{{ 'a' is sequence }}{{ 1 is number }}{{ 1.0 is number }}{{ true is boolean "
                   "}}{{ 1 is boolean }}"),
            "TrueTrueTrueTrueTrueFalse");
  EXPECT_EQ(render("{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ 2 is even }}{{ 9 is "
                   "divisibleby 3 }}"),
            "TrueFalseTrueFalseTrueTrue");
  EXPECT_EQ(render("{{ 'a' is equalto 'a' }}{{ 'a' is in 'abc' }}{{ not x is defined }}{{ x is not defined }}{{ 1 is "
                   "integer }}{{ 1.0 is float }}"),
            "TrueTrueTrueTrueTrueTrue");
}

// ---- undefined and errors --------------------------------------------------------------------

TEST(Undefined, DefaultUndefinedSemantics) {
  EXPECT_EQ(render("[{{ x }}]{% if x %}t{% else %}f{% endif %}{% for i in x %}i{% endfor %}"), "[]f");
  EXPECT_EQ(render("{{ d.missing }}|{{ d['missing'] }}|{{ none.attr }}|", {{"d", J::object()}}), "|||");
  // Using an undefined value (attribute access, arithmetic, call) fails like jinja2.
  EXPECT_NE(error_of("{{ x.y }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ d.a.b }}", {{"d", J::object()}}).find("'dict object' has no attribute 'a'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x + 1 }}").find("undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ x() }}").find("undefined"), std::string::npos);
}

TEST(Errors, SyntaxAndRuntimeErrorsAreReported) {
  EXPECT_NE(error_of("{% if x %}").find("TemplateSyntaxError"), std::string::npos);
  EXPECT_NE(error_of("{{ x | nosuchfilter }}").find("No filter named 'nosuchfilter'"), std::string::npos);
  EXPECT_NE(error_of("{{ x is nosuchtest }}").find("No test named"), std::string::npos);
  EXPECT_NE(error_of("{% foo %}").find("unknown tag 'foo'"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc }}").find("TemplateSyntaxError"), std::string::npos);
  EXPECT_NE(error_of("{% for x in none %}{% endfor %}").find("'NoneType' object is not iterable"), std::string::npos);
  EXPECT_EQ(error_of("{{ raise_exception('Only user and assistant roles are supported!') }}"),
            "Only user and assistant roles are supported!");
  EXPECT_NE(error_of("{{ 'a'[::0] }}").find("slice step cannot be zero"), std::string::npos);
  EXPECT_NE(error_of("{{ [1][1:2, 0] }}").find("TemplateSyntaxError"), std::string::npos);  // found by fuzzing
  // Unknown filters fail even in branches that never run, as jinja2 compiles them eagerly.
  EXPECT_NE(error_of("{% if false %}{{ x|bogus }}{% endif %}").find("No filter named"), std::string::npos);
}

TEST(Errors, LimitsStopRunawayTemplates) {
  TemplateLimits small;
  small.max_steps = 100000;
  small.max_output_bytes = 1000;
  EXPECT_NE(error_of("{% for i in range(100000000) %}x{% endfor %}", J::object(), small).find("limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% for i in range(5000) %}xx{% endfor %}", J::object(), small).find("size limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("RecursionError"), std::string::npos);
  EXPECT_NE(error_of("{% set l = [] %}{% set _ = l.append(l) %}{{ l }}").find("RecursionError"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("limit"), std::string::npos);
}

TEST(Errors, DeeplyNestedInputDoesNotCrash) {
  const std::string deep_src = std::string(100000, '(') + "1" + std::string(100000, ')');
  EXPECT_NE(error_of("{{ " + deep_src + " }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(100000, '(') + " }}").find("TemplateSyntaxError"), std::string::npos);
  std::string deep_list;
  for (int i = 0; i < 5000; ++i) deep_list += "[";
  EXPECT_NE(error_of("{{ " + deep_list + " }}").find("TemplateSyntaxError"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).find("TemplateSyntaxError"), std::string::npos);
  // Deeply nested request data.
  // (Built by parsing and passed by reference: copying deep nlohmann::json recurses.)
  const J vars = J::parse("{\"x\": " + std::string(10000, '[') + std::string(10000, ']') + "}");
  EXPECT_NE(error_of("{{ x }}", vars).find("nested"), std::string::npos);
}

TEST(Globals, RangeNamespaceStrftime) {
  EXPECT_EQ(render("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}"),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
  EXPECT_EQ(render("{% set ns = namespace(a=1, b='x') %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}"), "1xFalse");
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
  EXPECT_EQ(render("{{ dict(a=1) }}"), "{'a': 1}");
}

}  // namespace
}  // namespace tessera::text
