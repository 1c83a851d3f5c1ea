// ChatTemplate against transformers' own renderings (tests/golden/chat/*.json, written by
// tools/make_chat_fixtures.py): byte-exact output for every case, an error where transformers
// raised one.
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace basalt::tok {
namespace {

using ojson = nlohmann::ordered_json;

ojson load_golden(const std::string& name) {
  std::ifstream f(test::source_dir() + "/tests/golden/chat/" + name + ".json");
  EXPECT_TRUE(f.good()) << "missing tests/golden/chat/" << name << ".json";
  return ojson::parse(f);
}

// "fixtures:qwen3-tokenizer" or "repo:models/default"; "" when the shared fixtures are absent.
std::string tokenizer_dir(const std::string& ref) {
  if (ref.rfind("repo:", 0) == 0) return test::source_dir() + "/" + ref.substr(5);
  std::string fx = test::fixtures_dir();
  if (fx.empty()) return "";
  std::string dir = fx + "/" + ref.substr(ref.find(':') + 1);
  return std::filesystem::exists(dir + "/tokenizer_config.json") ? dir : "";
}

void run_golden(const std::string& name) {
  ojson g = load_golden(name);
  std::string dir = tokenizer_dir(g["tokenizer_dir"].get<std::string>());
  if (dir.empty())
    GTEST_SKIP() << "shared fixture '" << g["tokenizer_dir"].get<std::string>()
                 << "' not found (set BASALT_FIXTURES to the folder holding ../shared/fixtures)";
  io::Checkpoint ckpt = io::checkpoint_open(dir);
  ChatTemplate ct = ChatTemplate::from_checkpoint(ckpt);
  EXPECT_FALSE(ct.is_fallback());
  int passed = 0, total = 0;
  for (const auto& c : g["cases"]) {
    ++total;
    std::string cname = c["name"].get<std::string>();
    SCOPED_TRACE(name + "/" + cname);
    const ojson& extra = c["extra"];
    if (c.contains("error")) {
      try {
        std::string got =
            ct.render(c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(), extra);
        ADD_FAILURE() << "expected an error like transformers' (" << c["error"] << "), got:\n"
                      << got;
      } catch (const ChatTemplateError& e) {
        EXPECT_NE(std::string(e.what()).find("[chat_template]"), std::string::npos) << e.what();
        ++passed;
      }
      continue;
    }
    std::string got;
    try {
      got = ct.render(c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(), extra);
    } catch (const basalt::Error& e) {
      ADD_FAILURE() << "render failed: " << e.what();
      continue;
    }
    std::string want = c["expected"].get<std::string>();
    EXPECT_EQ(got, want);
    if (got == want) ++passed;
  }
  std::printf("[ chat     ] %s: %d/%d cases match transformers\n", name.c_str(), passed, total);
}

TEST(ChatTemplateGolden, Qwen3) {
  run_golden("qwen3");
}
TEST(ChatTemplateGolden, Llama3) {
  run_golden("llama3");
}
TEST(ChatTemplateGolden, DefaultModel) {
  run_golden("default");
}

TEST(ChatTemplate, EmbeddedDefaultModelHasTemplate) {
  ChatTemplate ct = ChatTemplate::from_checkpoint(io::checkpoint_open(""));
  EXPECT_FALSE(ct.is_fallback());
  nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(ct.render(msgs, nullptr, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, FallbackIsChatML) {
  io::Checkpoint ckpt;  // no tokenizer_config, no GGUF
  ckpt.path = "nowhere";
  ckpt.tokenizer_config = nlohmann::json::object();
  ChatTemplate ct = ChatTemplate::from_checkpoint(ckpt);
  EXPECT_TRUE(ct.is_fallback());
  nlohmann::json msgs = nlohmann::json::array(
      {{{"role", "system"}, {"content", "S"}},
       {{"role", "user"},
        {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}});
  EXPECT_EQ(ct.render(msgs, nullptr, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nab<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, NamedTemplatesPickDefaultAndToolUse) {
  io::Checkpoint ckpt;
  ckpt.path = "named";
  ckpt.tokenizer_config = {{"chat_template",
                            {{{"name", "default"}, {"template", "D{{ messages|length }}"}},
                             {{"name", "tool_use"}, {"template", "T{{ tools|length }}"}}}},
                           {"bos_token", {{"content", "<s>"}, {"__type", "AddedToken"}}}};
  ChatTemplate ct = ChatTemplate::from_checkpoint(ckpt);
  EXPECT_TRUE(ct.has_tool_use_template());
  nlohmann::json msgs = {{{"role", "user"}, {"content", "x"}}};
  EXPECT_EQ(ct.render(msgs, nullptr, false), "D1");
  EXPECT_EQ(ct.render(msgs, nlohmann::json::array({{{"type", "function"}}}), false), "T1");
  ChatTemplate bos =
      ChatTemplate::from_string("{{ bos_token }}|{{ eos_token is defined }}", "<s>", "");
  EXPECT_EQ(bos.render(msgs, nullptr, false), "<s>|False");
}

TEST(ChatTemplate, MessagesAreNormalizedLikeTransformers) {
  // null keys dropped; reasoning offered as reasoning_content and thinking
  ChatTemplate ct = ChatTemplate::from_string(
      "{% for m in messages %}{{ m.content is defined }},{{ m.thinking }},"
      "{{ m.reasoning_content }};{% endfor %}",
      "", "");
  nlohmann::json msgs =
      nlohmann::json::array({{{"role", "assistant"}, {"content", nullptr}, {"reasoning", "r1"}},
                             {{"role", "user"}, {"content", "u"}}});
  EXPECT_EQ(ct.render(msgs, nullptr, false), "False,r1,r1;True,,;");
}

TEST(ChatTemplate, ToolSchemaKeyOrderKeptWithOrderedJson) {
  ChatTemplate ct = ChatTemplate::from_string("{{ tools[0]|tojson }}", "", "");
  ojson tools = ojson::parse(R"([{"type":"function","function":{"name":"f","b":1,"a":2}}])");
  EXPECT_EQ(ct.render(ojson::array({{{"role", "user"}, {"content", "x"}}}), tools, false),
            R"({"type": "function", "function": {"name": "f", "b": 1, "a": 2}})");
}

TEST(ChatTemplate, ErrorsNameTheLine) {
  test::expect_error([] { ChatTemplate::from_string("a\n{% if x %}\nb", "", ""); },
                     {"[chat_template]", "endif", "line 3"});
  ChatTemplate ct = ChatTemplate::from_string("x\n\n{{ messages[0].content + 1 }}", "", "");
  nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}}};
  test::expect_error([&] { ct.render(msgs, nullptr, false); },
                     {"[chat_template]", "can only concatenate str", "line 3"});
}

TEST(ChatTemplate, RaiseExceptionCarriesTheMessage) {
  ChatTemplate ct = ChatTemplate::from_string(
      "{% if messages[0].role != 'system' %}{{ raise_exception('Conversation roles must "
      "alternate user/assistant/user/assistant/...') }}{% endif %}",
      "", "");
  nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}}};
  try {
    ct.render(msgs, nullptr, false);
    FAIL() << "expected ChatTemplateError";
  } catch (const ChatTemplateError& e) {
    EXPECT_TRUE(e.from_template());
    EXPECT_STREQ(
        e.what(),
        "[chat_template] Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

TEST(ChatTemplate, BadInputsAreErrors) {
  ChatTemplate ct = ChatTemplate::from_string("{{ messages }}", "", "");
  test::expect_error([&] { ct.render(nlohmann::json::object(), nullptr, false); }, "array");
  test::expect_error([&] { ct.render(nlohmann::json::array({1}), nullptr, false); }, "object");
}

}  // namespace
}  // namespace basalt::tok
