// The Jinja engine on small templates, one construct each. Expected outputs come from
// transformers' own jinja2 environment (tests/golden/chat/jinja.json, written by
// tools/make_chat_fixtures.py); errors, line numbers and limits are checked here by hand.
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace basalt::tok::jinja {
namespace {

using ojson = nlohmann::ordered_json;

DictObj vars_from(const ojson& j) {
  Value v = value_from_json(j);
  return v.dict();
}

std::string render(const std::string& src, const ojson& vars = ojson::object()) {
  return Template(src).render(vars_from(vars));
}

// The message and line of the TemplateError that parsing or rendering `src` throws.
std::pair<std::string, int> error_of(const std::string& src, const ojson& vars = ojson::object()) {
  try {
    render(src, vars);
  } catch (const TemplateError& e) {
    return {e.what(), e.line};
  }
  ADD_FAILURE() << "no error from: " << src;
  return {"", 0};
}

TEST(JinjaGolden, MatchesJinja2) {
  std::ifstream f(test::source_dir() + "/tests/golden/chat/jinja.json");
  ASSERT_TRUE(f.good()) << "missing tests/golden/chat/jinja.json";
  ojson g = ojson::parse(f);
  DictObj vars = vars_from(g["vars"]);
  int passed = 0, total = 0;
  for (const auto& c : g["cases"]) {
    ++total;
    std::string src = c["template"].get<std::string>();
    SCOPED_TRACE("template: " + src);
    try {
      std::string got = Template(src).render(vars);
      if (c.contains("error")) {
        ADD_FAILURE() << "jinja2 raised " << c["error"] << ", we rendered: " << got;
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>());
      if (got == c["expected"].get<std::string>()) ++passed;
    } catch (const TemplateError& e) {
      if (c.contains("error")) {
        ++passed;
      } else {
        ADD_FAILURE() << "error: " << e.what() << " at line " << e.line;
      }
    }
  }
  std::printf("[ jinja    ] %d/%d small templates match jinja2\n", passed, total);
}

TEST(Jinja, ErrorMessagesFollowJinja2) {
  ojson vars = {{"m", {{"a", 1}}}};
  EXPECT_EQ(error_of("{{ m.zz.yy }}", vars).first, "'dict object' has no attribute 'zz'");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}").first, "can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{{ 1 + 'a' }}").first, "unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(error_of("{{ m.zz|tojson }}", vars).first,
            "Object of type Undefined is not JSON serializable");
  EXPECT_EQ(error_of("{{ n.x }}").first, "'n' is undefined");
  EXPECT_EQ(error_of("{{ 1 / 0 }}").first, "division by zero");
  EXPECT_EQ(error_of("{% for x in none %}{% endfor %}").first, "'NoneType' object is not iterable");
  EXPECT_EQ(error_of("{{ [1]|nosuch }}").first, "no filter named 'nosuch'");
  EXPECT_EQ(error_of("{{ 1 is nosuch }}").first, "no test named 'nosuch'");
}

TEST(Jinja, ErrorsCarryTheLine) {
  EXPECT_EQ(error_of("a\nb\n{{ 1 + }}").second, 3);
  EXPECT_EQ(error_of("{% if true %}\n\n").second, 2);  // the trailing newline is dropped
  EXPECT_EQ(error_of("{% for x in [1] %}\n{% endif %}").second, 2);
  EXPECT_EQ(error_of("x\n{{ 'unterminated }}").second, 2);
  // an attribute of None is undefined, and printing it is fine
  EXPECT_EQ(render("{%- if true %}\n  {{- m.a.b }}\n{% endif %}", {{"m", {{"a", nullptr}}}}), "\n");
  auto [msg, line] = error_of("{% set x = 1 %}\n{% for i in [1] %}\n  {{ i + 'a' }}\n{% endfor %}");
  EXPECT_EQ(line, 3);
  EXPECT_NE(msg.find("unsupported operand"), std::string::npos) << msg;
}

TEST(Jinja, RaiseExceptionIsMarked) {
  try {
    render("{{ raise_exception('bad role: ' ~ r) }}", {{"r", "robot"}});
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_TRUE(e.raised);
    EXPECT_STREQ(e.what(), "bad role: robot");
  }
}

TEST(Jinja, UndefinedSemantics) {
  ojson vars = {{"m", {{"content", "x"}}}};
  EXPECT_EQ(render("[{{ m.nope }}]", vars), "[]");
  EXPECT_EQ(render("{{ m.nope is defined }}{{ m.content is defined }}", vars), "FalseTrue");
  EXPECT_EQ(render("{{ m.nope ~ 'a' }}{{ m.nope|length }}{{ 'a' in m.nope }}", vars), "a0False");
  EXPECT_EQ(render("{% for x in m.nope %}x{% else %}none{% endfor %}", vars), "none");
  EXPECT_EQ(render("{{ m.nope == none }}{{ m.nope is none }}{{ not m.nope }}", vars),
            "FalseFalseTrue");
  EXPECT_EQ(error_of("{{ m.nope.x }}", vars).first, "'dict object' has no attribute 'nope'");
  EXPECT_EQ(error_of("{{ m.content.nope() }}", vars).first, "'str object' has no attribute 'nope'");
}

TEST(Jinja, TojsonLikeTransformers) {
  // json.dumps(ensure_ascii=False): ", " and ": " separators, raw UTF-8, key order kept
  ojson v = ojson::parse(R"({"z": {"b": 1, "a": [1.5, true, null]}, "é": "\u00e9\n\u0001"})");
  EXPECT_EQ(render("{{ v|tojson }}", {{"v", v}}),
            "{\"z\": {\"b\": 1, \"a\": [1.5, true, null]}, \"é\": \"é\\n\\u0001\"}");
  EXPECT_EQ(render("{{ v.z|tojson(indent=1) }}", {{"v", v}}),
            "{\n \"b\": 1,\n \"a\": [\n  1.5,\n  true,\n  null\n ]\n}");
  EXPECT_EQ(render("{{ 1e16|tojson }} {{ 0.0001 }} {{ 123456789.0 }} {{ -0.0 }}"),
            "1e+16 0.0001 123456789.0 -0.0");
}

TEST(Jinja, ParseOnceRenderMany) {
  Template t("{% for m in messages %}{{ m }}{% endfor %}");
  for (int i = 0; i < 3; ++i) {
    ojson vars = {{"messages", ojson::array({i, i + 1})}};
    EXPECT_EQ(t.render(vars_from(vars)), std::to_string(i) + std::to_string(i + 1));
  }
}

TEST(Jinja, RunawayTemplatesStop) {
  EXPECT_NE(error_of("{{ range(10000000)|length }}").first.find("range"), std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").first.find("recursion"),
            std::string::npos);
}

TEST(Jinja, StrftimeNowFormatsToday) {
  std::string y = render("{{ strftime_now('%Y') }}");
  ASSERT_EQ(y.size(), 4u);
  EXPECT_GE(std::stoi(y), 2024);
  // Llama 3.1 style: a date_string default when the caller gives none
  EXPECT_EQ(render("{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}"
                   "{%- endif %}{{ date_string }}"),
            "26 Jul 2024");
  EXPECT_EQ(render("{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}"
                   "{%- endif %}{{ date_string }}",
                   {{"date_string", "1 Jan 2025"}}),
            "1 Jan 2025");
}

}  // namespace
}  // namespace basalt::tok::jinja
