// OutputParser on model-style outputs (Qwen3 Hermes calls and <think>, Qwen3-Coder/Qwen3.5 XML
// calls, Llama 3.1 JSON calls), each checked one-shot and under every kind of split: the
// merged event sequence must not depend on how the text was cut into deltas.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "server/output_parser.h"
#include "test_util.h"

namespace basalt::server {
namespace {

using Pieces = std::vector<std::string>;

struct Result {
  std::vector<ParserEvent> events;
  std::string content, reasoning;
  std::vector<OutputParser::ToolCall> calls;
};

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

Result run(const ParserOptions& opt, const Pieces& pieces) {
  OutputParser p(opt);
  Result r;
  auto take = [&](std::vector<ParserEvent> ev) {
    for (auto& e : ev) {
      EXPECT_TRUE(valid_utf8(e.text)) << "event text splits a UTF-8 character";
      if (e.kind == ParserEvent::Content || e.kind == ParserEvent::Reasoning ||
          e.kind == ParserEvent::ToolCallArgs) {
        EXPECT_FALSE(e.text.empty()) << "empty delta event";
      }
      r.events.push_back(std::move(e));
    }
  };
  for (const auto& s : pieces) take(p.push(s));
  take(p.finish());
  r.content = p.content();
  r.reasoning = p.reasoning();
  r.calls = p.tool_calls();
  return r;
}

// Adjacent deltas of one kind merged, ids left out: "R[..] C[..] B0(name) A0[..] E0".
std::string show(const std::vector<ParserEvent>& events) {
  std::string s;
  int last = -1;  // the previous event's kind
  int last_index = -1;
  for (const auto& e : events) {
    bool delta = e.kind == ParserEvent::Content || e.kind == ParserEvent::Reasoning ||
                 e.kind == ParserEvent::ToolCallArgs;
    if (delta && last == int(e.kind) && last_index == e.index && !s.empty() && s.back() == ']') {
      s.insert(s.size() - 1, e.text);
      continue;
    }
    if (!s.empty()) s += ' ';
    std::string i = std::to_string(e.index);
    switch (e.kind) {  // appends one by one: "a" + b + "c" trips a GCC 12 -Wrestrict bug
      case ParserEvent::Content:
        s.append("C[").append(e.text).append("]");
        break;
      case ParserEvent::Reasoning:
        s.append("R[").append(e.text).append("]");
        break;
      case ParserEvent::ToolCallBegin:
        s.append("B").append(i).append("(").append(e.name) += ')';
        break;
      case ParserEvent::ToolCallArgs:
        s.append("A").append(i).append("[").append(e.text) += ']';
        break;
      case ParserEvent::ToolCallEnd:
        s.append("E").append(i);
        break;
    }
    last = int(e.kind);
    last_index = e.index;
  }
  return s;
}

std::string show_calls(const std::vector<OutputParser::ToolCall>& calls) {
  std::string s;
  for (const auto& c : calls) s += c.name + c.arguments + ";";
  return s;
}

Pieces split_every(std::string_view text, size_t n) {
  Pieces p;
  for (size_t i = 0; i < text.size(); i += n) p.emplace_back(text.substr(i, n));
  return p;
}

// Parses text one-shot, checks the expected events, then checks that 1-, 2- and 3-byte
// splits, every two-piece split and random splits give the same events and message.
Result expect_parse(const ParserOptions& opt, std::string_view text, const std::string& events) {
  Result one = run(opt, {std::string(text)});
  EXPECT_EQ(show(one.events), events) << "text: " << text;
  std::vector<Pieces> splits = {split_every(text, 1), split_every(text, 2), split_every(text, 3)};
  for (size_t cut = 1; cut < text.size(); ++cut)
    splits.push_back({std::string(text.substr(0, cut)), std::string(text.substr(cut))});
  std::mt19937 rng(1234);
  for (int r = 0; r < 50; ++r) {
    Pieces p;
    for (size_t i = 0; i < text.size();) {
      size_t n = std::uniform_int_distribution<size_t>(0, 9)(rng);
      p.emplace_back(text.substr(i, n));
      i += n;
    }
    splits.push_back(std::move(p));
  }
  for (const auto& pieces : splits) {
    Result r = run(opt, pieces);
    std::string how = "split into " + std::to_string(pieces.size()) + " pieces, first '" +
                      (pieces.empty() ? "" : pieces[0]) + "'";
    std::string got =
        show(r.events) + "|" + r.content + "|" + r.reasoning + "|" + show_calls(r.calls);
    std::string want =
        show(one.events) + "|" + one.content + "|" + one.reasoning + "|" + show_calls(one.calls);
    if (got != want) {  // the first differing split is enough to debug
      ADD_FAILURE() << how << "\n  got:  " << got << "\n  want: " << want;
      break;
    }
  }
  return one;
}

ParserOptions qwen3(bool reasoning = true) {
  ParserOptions o;
  o.tools = ToolCallFormat::Hermes;
  o.reasoning = reasoning;
  return o;
}
ParserOptions qwen_xml() {
  ParserOptions o;
  o.tools = ToolCallFormat::QwenXml;
  o.reasoning = true;
  return o;
}
ParserOptions llama3() {
  ParserOptions o;
  o.tools = ToolCallFormat::Llama3Json;
  return o;
}

// ---- Qwen3: reasoning and Hermes calls ----

TEST(OutputParser, Qwen3ThinkingThenContent) {
  auto r = expect_parse(qwen3(),
                        "<think>\nThe user asks for the capital of France. That is Paris.\n"
                        "</think>\n\nThe capital of France is **Paris**.",
                        "R[The user asks for the capital of France. That is Paris.] "
                        "C[The capital of France is **Paris**.]");
  EXPECT_EQ(r.reasoning, "The user asks for the capital of France. That is Paris.");
  EXPECT_EQ(r.content, "The capital of France is **Paris**.");
  EXPECT_TRUE(r.calls.empty());
}

TEST(OutputParser, Qwen3TwoToolCallsAfterContent) {
  std::string text =
      "<think>\nI need the weather in Paris and in London.\n\nI'll call get_weather twice.\n"
      "</think>\n\nLet me check both cities.\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
      "\"celsius\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"London\", \"unit\": "
      "\"celsius\"}}\n</tool_call>";
  auto r =
      expect_parse(qwen3(), text,
                   "R[I need the weather in Paris and in London.\n\nI'll call get_weather twice.] "
                   "C[Let me check both cities.] "
                   "B0(get_weather) A0[{\"city\":\"Paris\",\"unit\":\"celsius\"}] E0 "
                   "B1(get_weather) A1[{\"city\":\"London\",\"unit\":\"celsius\"}] E1");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].arguments, "{\"city\":\"London\",\"unit\":\"celsius\"}");
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  EXPECT_EQ(r.events[2].id, r.calls[0].id);  // the Begin event carries the call's id
}

TEST(OutputParser, Qwen3ToolCallOnlyNoThinking) {
  // enable_thinking=false: the template closed an empty <think> block in the prompt.
  expect_parse(qwen3(), "<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>",
               "B0(list_files) A0[{}] E0");
  expect_parse(qwen3(), "Hello! How can I help you today?", "C[Hello! How can I help you today?]");
}

TEST(OutputParser, EmptyThinkingAndTextAroundCalls) {
  expect_parse(qwen3(), "<think>\n\n</think>\n\nHi there.", "C[Hi there.]");
  // Whitespace between calls is layout; text after a call is content.
  expect_parse(qwen3(false),
               "Checking.\n<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>\nAll done.",
               "C[Checking.] B0(get_time) A0[{}] E0 C[\n\nAll done.]");
}

TEST(OutputParser, PromptOpenedThink) {
  // Templates that end the prompt with "<think>\n": the model starts inside the block...
  ParserOptions o = qwen3();
  o.starts_in_reasoning = true;
  expect_parse(o, "Okay, the user greets me.\n</think>\n\nHello!",
               "R[Okay, the user greets me.] C[Hello!]");
  // ...and versions where the model writes <think> itself anyway.
  expect_parse(o, "<think>\nOkay, the user greets me.\n</think>\n\nHello!",
               "R[Okay, the user greets me.] C[Hello!]");
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

TEST(OutputParser, ToolCallInsideReasoningIsReasoning) {
  expect_parse(qwen3(),
               "<think>\nI could write <tool_call>\n{\"name\": \"x\", \"arguments\": {}}\n"
               "</tool_call> but no tool is needed.\n</think>\n\nNo tools needed.",
               "R[I could write <tool_call>\n{\"name\": \"x\", \"arguments\": {}}\n</tool_call> "
               "but no tool is needed.] C[No tools needed.]");
}

TEST(OutputParser, HermesNonStreamingFormsAreParsedWhole) {
  // Keys in another order: held to </tool_call>, then parsed.
  expect_parse(qwen3(false),
               "<tool_call>\n{\"arguments\": {\"a\": 1}, \"name\": \"f\"}\n</tool_call>",
               "B0(f) A0[{\"a\":1}] E0");
  // Arguments as a JSON string holding JSON.
  expect_parse(qwen3(false),
               "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1, 2]}\"}\n"
               "</tool_call>",
               "B0(f) A0[{\"a\":[1,2]}] E0");
}

TEST(OutputParser, HermesInvalidJson) {
  // Not JSON at all: no call; the text is content, as written.
  expect_parse(qwen3(false), "Sure.\n<tool_call>\nget_weather(city=Paris)\n</tool_call>",
               "C[Sure.\n<tool_call>\nget_weather(city=Paris)\n</tool_call>]");
  // The arguments go wrong after the call began: it stays a call, its arguments are passed on
  // as written (not valid JSON: the client sees a parse error, nothing silently altered).
  auto r = expect_parse(
      qwen3(false),
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,}}\n</tool_call>\nDone.",
      "B0(f) A0[{\"a\":1,}] E0 C[Done.]");
  EXPECT_EQ(r.calls[0].arguments, "{\"a\":1,}");
  // A raw newline inside a string is escaped (models write code that way).
  expect_parse(qwen3(false),
               "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"text\": \"a\n\tb\"}}\n"
               "</tool_call>",
               "B0(w) A0[{\"text\":\"a\\n\\tb\"}] E0");
  // A missing outer brace is tolerated.
  expect_parse(qwen3(false),
               "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
               "B0(f) A0[{\"a\":1}] E0");
}

TEST(OutputParser, UnterminatedCallAtFinish) {
  // Before the name is known: content.
  expect_parse(qwen3(false), "Sure.\n<tool_call>\n{\"na", "C[Sure.\n<tool_call>\n{\"na]");
  expect_parse(qwen3(false), "Sure.\n<tool_c", "C[Sure.\n<tool_c]");
  // After: the call keeps what was streamed, unclosed (as OpenAI does at max_tokens).
  auto r = expect_parse(qwen3(false),
                        "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"hel",
                        "B0(write) A0[{\"text\":\"hel] E0");
  EXPECT_EQ(r.calls[0].arguments, "{\"text\":\"hel");
  // Complete arguments but no </tool_call> (end of generation right after): a full call.
  expect_parse(qwen3(false), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": true}}",
               "B0(f) A0[{\"a\":true}] E0");
}

// ---- Qwen3-Coder / Qwen3.5 XML calls ----

TEST(OutputParser, QwenXmlMultilineString) {
  auto r = expect_parse(qwen_xml(),
                        "<think>\nThe user wants a script.\n</think>\n\nI'll create the file.\n"
                        "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.py\n"
                        "</parameter>\n<parameter=content>\ndef main():\n    print(\"hi <b>\")\n\n"
                        "if __name__ == \"__main__\":\n    main()\n</parameter>\n</function>\n"
                        "</tool_call>",
                        "R[The user wants a script.] C[I'll create the file.] B0(write_file) "
                        "A0[{\"path\":\"src/main.py\",\"content\":\"def main():\\n    print(\\\"hi "
                        "<b>\\\")\\n\\nif __name__ == \\\"__main__\\\":\\n    main()\"}] E0");
  auto args = nlohmann::json::parse(r.calls[0].arguments);
  EXPECT_EQ(args["content"],
            "def main():\n    print(\"hi <b>\")\n\nif __name__ == \"__main__\":\n    main()");
}

TEST(OutputParser, QwenXmlStringParamsStreamWithSchema) {
  ParserOptions o = qwen_xml();
  add_tool_schema(o, "write_file", nlohmann::json::parse(R"({"type": "object", "properties": {
                    "path": {"type": "string"}, "content": {"type": "string"},
                    "mode": {"type": "integer"}}})"));
  std::string text =
      "<tool_call>\n<function=write_file>\n<parameter=path>\npackage.json\n</parameter>\n"
      "<parameter=content>\n{\"name\": \"app\",\n \"private\": true}\n\n</parameter>\n"
      "<parameter=mode>\n644\n</parameter>\n<parameter=empty>\n</parameter>\n</function>\n"
      "</tool_call>";
  // A JSON file's content stays a string (the schema says so); one trailing newline is layout.
  expect_parse(o, text,
               "B0(write_file) A0[{\"path\":\"package.json\",\"content\":\"{\\\"name\\\": "
               "\\\"app\\\",\\n \\\"private\\\": true}\\n\",\"mode\":644,\"empty\":\"\"}] E0");
  OutputParser p(o);
  EXPECT_EQ(show(p.push("<tool_call>\n<function=write_file>\n<parameter=content>\nline 1\n")),
            "B0(write_file) A0[{\"content\":\"line 1]");
  EXPECT_EQ(show(p.push("line 2\n</param")), "A0[\\nline 2]");
  EXPECT_EQ(show(p.push("eter>\n</function>")), "A0[\"}] E0");
}

TEST(OutputParser, QwenXmlJsonValues) {
  std::string text =
      "<tool_call>\n<function=search>\n<parameter=query>\nbasalt server\n</parameter>\n"
      "<parameter=limit>\n10\n</parameter>\n<parameter=exact>\ntrue\n</parameter>\n"
      "<parameter=filters>\n{\"lang\": [\"cpp\", \"md\"]}\n</parameter>\n"
      "<parameter=id>\n007\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n"
      "<parameter=none>\nnull\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=get_time>\n</function>\n</tool_call>";
  expect_parse(qwen_xml(), text,
               "B0(search) A0[{\"query\":\"basalt server\",\"limit\":10,\"exact\":true,"
               "\"filters\":{\"lang\":[\"cpp\",\"md\"]},\"id\":\"007\",\"ratio\":0.5,"
               "\"none\":null}] E0 B1(get_time) A1[{}] E1");
  // With the tool's schema, a string parameter stays a string.
  ParserOptions o = qwen_xml();
  add_tool_schema(o, "search", nlohmann::json::parse(R"({"type": "object", "properties": {
                    "query": {"type": "string"}, "limit": {"type": "string"},
                    "exact": {"type": ["boolean", "null"]}}})"));
  EXPECT_EQ(o.param_types["search"]["exact"], "boolean");
  auto r = run(o, {text});
  auto args = nlohmann::json::parse(r.calls.at(0).arguments);
  EXPECT_EQ(args["limit"], "10");
  EXPECT_EQ(args["exact"], true);
}

TEST(OutputParser, QwenXmlForgivingForms) {
  // No <tool_call> wrapper, and a forgotten </parameter> (vLLM accepts both).
  expect_parse(qwen_xml(),
               "<function=ls>\n<parameter=path>\n.\n<parameter=all>\nfalse\n</function>\n"
               "</tool_call>",
               "B0(ls) A0[{\"path\":\".\",\"all\":false}] E0");
  // Two functions in one block.
  expect_parse(qwen_xml(),
               "<tool_call>\n<function=a>\n</function>\n<function=b>\n<parameter=x>\n1\n"
               "</parameter>\n</function>\n</tool_call>",
               "B0(a) A0[{}] E0 B1(b) A1[{\"x\":1}] E1");
  // Hermes JSON inside a QwenXml model's <tool_call> is understood too.
  expect_parse(qwen_xml(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
               "B0(f) A0[{}] E0");
}

TEST(OutputParser, QwenXmlUnterminated) {
  // The value being written is dropped; the arguments stay unclosed.
  auto r = expect_parse(qwen_xml(),
                        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n"
                        "<parameter=b>\npartial text",
                        "B0(f) A0[{\"a\":1] E0");
  EXPECT_EQ(r.calls[0].arguments, "{\"a\":1");
  expect_parse(qwen_xml(), "Let me look.\n<tool_call>\n<function=rea",
               "C[Let me look.\n<tool_call>\n<function=rea]");
}

// ---- Llama 3.x JSON calls ----

TEST(OutputParser, Llama3Json) {
  expect_parse(llama3(),
               "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
               "B0(get_weather) A0[{\"city\":\"Paris\",\"days\":3}] E0");
  expect_parse(llama3(),
               "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
               "B0(get_weather) A0[{\"city\":\"Paris\"}] E0");
  expect_parse(llama3(),
               "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": "
               "{\"x\": [1, 2]}}",
               "B0(a) A0[{}] E0 B1(b) A1[{\"x\":[1,2]}] E1");
  // Llama 3.2 sometimes writes a "type" member first.
  expect_parse(llama3(), "{\"type\": \"function\", \"name\": \"f\", \"parameters\": {}}",
               "B0(f) A0[{}] E0");
}

TEST(OutputParser, Llama3PlainContent) {
  expect_parse(llama3(), "The weather in Paris is sunny. {\"name\": \"x\"}",
               "C[The weather in Paris is sunny. {\"name\": \"x\"}]");
  expect_parse(llama3(), "{\"answer\": 42}", "C[{\"answer\": 42}]");
  // A built-in tool call (code after <|python_tag|>) is not a JSON call.
  expect_parse(llama3(), "<|python_tag|>brave_search.call(query=\"weather\")",
               "C[brave_search.call(query=\"weather\")]");
}

// ---- UTF-8, pass-through (stop strings: StopMatcher, test_server_request.cpp) ----

TEST(OutputParser, Utf8SplitAnywhere) {
  expect_parse(qwen3(), "<think>\n思考中…🙂\n</think>\n\nRéponse : ça va 🙂 — 東京",
               "R[思考中…🙂] C[Réponse : ça va 🙂 — 東京]");
  expect_parse(qwen3(false),
               "<tool_call>\n{\"name\": \"traduire\", \"arguments\": {\"texte\": \"été 🌞\"}}\n"
               "</tool_call>",
               "B0(traduire) A0[{\"texte\":\"été 🌞\"}] E0");
  // An incomplete character at the very end becomes U+FFFD.
  OutputParser p({});
  EXPECT_EQ(show(p.push("a\xE6\x80")), "C[a]");
  EXPECT_EQ(show(p.finish()), "C[\xEF\xBF\xBD]");
}

TEST(OutputParser, PassThroughWithoutToolsOrReasoning) {
  // Nothing to parse: content verbatim, whitespace included.
  expect_parse({}, "  hello <tool_call>x</tool_call> <think>a</think>\n",
               "C[  hello <tool_call>x</tool_call> <think>a</think>\n]");
  expect_parse(qwen3(false), "a < b and <tool", "C[a < b and <tool]");
}

TEST(OutputParser, StreamingIsIncremental) {
  // Content and arguments come out as they are written, not at the end.
  OutputParser p(qwen3(false));
  EXPECT_EQ(show(p.push("Checking.\n<tool")), "C[Checking.]");
  EXPECT_EQ(show(p.push("_call>\n{\"name\": \"f\", ")), "");
  EXPECT_EQ(show(p.push("\"arguments\": {\"path\": \"/tm")), "B0(f) A0[{\"path\":\"/tm]");
  EXPECT_EQ(show(p.push("p\"}}\n</tool_call>")), "A0[p\"}] E0");
  EXPECT_EQ(show(p.finish()), "");
}

TEST(OutputParser, LongXmlValueIsLinear) {
  std::string value(400000, 'x');
  for (size_t i = 0; i < value.size(); i += 80) value[i] = '\n';
  std::string text = "<tool_call>\n<function=write>\n<parameter=content>\n" + value +
                     "\n</parameter>\n</function>\n</tool_call>";
  auto t0 = std::chrono::steady_clock::now();
  auto r = run(qwen_xml(), split_every(text, 3));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments)["content"], value);
  EXPECT_LT(s, 2.0);
}

// ---- detection and ids ----

TEST(OutputParser, FormatDetection) {
  EXPECT_EQ(tool_format_for_model("Qwen3ForCausalLM", "... <tool_call>\n{\"name\": ..."),
            ToolCallFormat::Hermes);
  EXPECT_EQ(
      tool_format_for_model("Qwen3MoeForCausalLM", "<tool_call>\n<function=example_function_name>"),
      ToolCallFormat::QwenXml);
  EXPECT_EQ(tool_format_for_model("LlamaForCausalLM", "{%- if message.role == \"ipython\" %}"),
            ToolCallFormat::Llama3Json);
  EXPECT_EQ(tool_format_for_model("LlamaForCausalLM", "{{ bos_token }}"), ToolCallFormat::None);
  EXPECT_EQ(tool_format_for_model("Qwen3_5ForConditionalGeneration", ""), ToolCallFormat::QwenXml);
  EXPECT_EQ(tool_format_for_model("qwen2", ""), ToolCallFormat::Hermes);
}

TEST(OutputParser, FormatDetectionOnRealTemplates) {
  BASALT_REQUIRE_FIXTURE(qwen, "qwen3-tokenizer/tokenizer_config.json");
  std::ifstream qf(qwen);
  auto qcfg = nlohmann::json::parse(qf);
  EXPECT_EQ(tool_format_for_model("Qwen3ForCausalLM", qcfg["chat_template"].get<std::string>()),
            ToolCallFormat::Hermes);
  BASALT_REQUIRE_FIXTURE(llama, "llama3-tokenizer/tokenizer_config.json");
  std::ifstream lf(llama);
  auto lcfg = nlohmann::json::parse(lf);
  // Llama 3 (not 3.1): its template has no tools.
  EXPECT_EQ(tool_format_for_model("LlamaForCausalLM", lcfg["chat_template"].get<std::string>()),
            ToolCallFormat::None);
}

TEST(OutputParser, ToolCallIds) {
  std::string a = make_tool_call_id(), b = make_tool_call_id();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 29u);
  EXPECT_EQ(a.substr(0, 5), "call_");
  for (char c : a.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << a;
}

}  // namespace
}  // namespace basalt::server
