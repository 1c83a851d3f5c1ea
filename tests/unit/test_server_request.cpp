// Request parsing and validation of the HTTP server (src/server/request_parse.h): every bad
// field is a 400 naming the field; good requests map onto the engine's parameters.
#include <gtest/gtest.h>

#include "server/request_parse.h"
#include "server/stop_matcher.h"

namespace basalt::server {
namespace {

ParseLimits limits() {
  return ParseLimits{1024, json::object()};
}

// Runs fn and returns the ApiError it throws (fails the test if none).
template <typename Fn>
ApiError api_error(Fn&& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an ApiError";
  return ApiError(0, "");
}

TEST(ServerRequest, Utf8Validation) {
  EXPECT_FALSE(utf8_invalid_at("plain ascii"));
  EXPECT_FALSE(utf8_invalid_at("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_EQ(utf8_invalid_at("ab\xFF"), 2u);
  EXPECT_EQ(utf8_invalid_at("\xC3"), 0u);              // truncated
  EXPECT_EQ(utf8_invalid_at("x\xC0\xAF"), 1u);         // overlong '/'
  EXPECT_EQ(utf8_invalid_at("\xED\xA0\x80"), 0u);      // surrogate U+D800
  EXPECT_EQ(utf8_invalid_at("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(utf8_invalid_at("ok\xE2\x82"), 2u);        // cut in the middle
}

TEST(ServerRequest, BodyErrors) {
  EXPECT_EQ(api_error([] { parse_body("{\"a\": "); }).status, 400);
  EXPECT_EQ(api_error([] { parse_body("{\"a\": "); }).code, "invalid_json");
  EXPECT_EQ(api_error([] { parse_body("{\"max_tokens\": 1e999}"); }).code, "invalid_json");
  EXPECT_EQ(api_error([] { parse_body("[1]"); }).status, 400);
  ApiError e = api_error([] { parse_body("{\"a\": \"\xFF\"}"); });
  EXPECT_EQ(e.code, "invalid_utf8");
  EXPECT_NE(std::string(e.what()).find("byte 7"), std::string::npos) << e.what();
  EXPECT_EQ(parse_body("{\"a\": 1}")["a"], 1);
}

TEST(ServerRequest, TypedReaders) {
  const json o = json::parse(R"({"i": 3, "f": 2.0, "g": 2.5, "s": "x", "b": true, "n": null})");
  EXPECT_EQ(get_int(o, "i"), 3);
  EXPECT_EQ(get_int(o, "f"), 2);  // 2.0 is an integer to JavaScript clients
  EXPECT_EQ(api_error([&] { get_int(o, "g"); }).param, "g");
  EXPECT_EQ(api_error([&] { get_int(o, "s"); }).param, "s");
  EXPECT_FALSE(get_int(o, "n"));
  EXPECT_FALSE(get_int(o, "missing"));
  EXPECT_EQ(get_string(o, "s"), "x");
  EXPECT_EQ(api_error([&] { get_bool(o, "i"); }).param, "i");
  EXPECT_EQ(api_error([&] { get_array(o, "s"); }).param, "s");
  EXPECT_EQ(get_number(o, "g"), 2.5);
}

TEST(ServerRequest, MaxTokensPerApi) {
  auto parse = [](const char* body, Api api) {
    return parse_gen_params(json::parse(body), api, limits());
  };
  EXPECT_EQ(parse(R"({"max_tokens": 5})", Api::Chat).max_tokens, 5);
  EXPECT_EQ(parse(R"({"max_tokens": 5, "max_completion_tokens": 7})", Api::Chat).max_tokens, 7);
  EXPECT_EQ(parse(R"({})", Api::Chat).max_tokens, 0);  // all the context allows
  EXPECT_EQ(parse(R"({})", Api::Completions).max_tokens, 16);
  EXPECT_EQ(parse(R"({"max_output_tokens": 9})", Api::Responses).max_tokens, 9);
  EXPECT_EQ(api_error([&] { parse(R"({})", Api::Messages); }).param, "max_tokens");
  EXPECT_EQ(api_error([&] { parse(R"({"max_tokens": 0})", Api::Chat); }).param, "max_tokens");
  EXPECT_EQ(api_error([&] { parse(R"({"max_tokens": -3})", Api::Messages); }).status, 400);
  ApiError huge = api_error([&] { parse(R"({"max_tokens": 1000000})", Api::Chat); });
  EXPECT_NE(std::string(huge.what()).find("1024"), std::string::npos) << huge.what();
  EXPECT_EQ(api_error([&] { parse(R"({"max_tokens": 18446744073709551615})", Api::Chat); }).status,
            400);
  EXPECT_EQ(api_error([&] { parse(R"({"max_output_tokens": "x"})", Api::Responses); }).param,
            "max_output_tokens");
}

TEST(ServerRequest, Sampling) {
  const json gc = json::parse(R"({"temperature": 0.8, "top_k": 40, "top_p": 0.95})");
  GenParams d = parse_gen_params(json::object(), Api::Chat, {1024, gc});
  EXPECT_FLOAT_EQ(d.sampling.temperature, 0.8f);  // the checkpoint's defaults
  EXPECT_EQ(d.sampling.top_k, 40);
  GenParams g = parse_gen_params(
      json::parse(R"({"temperature": 0, "top_p": 0.5, "top_k": -1, "min_p": 0.1, "seed": 42,
                      "presence_penalty": 1.5, "frequency_penalty": -1, "repetition_penalty": 1.2})"),
      Api::Chat, {1024, gc});
  EXPECT_TRUE(g.sampling.greedy());
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.5f);
  EXPECT_EQ(g.sampling.top_k, 0);  // -1 = off
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.1f);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(g.sampling.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(g.sampling.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.2f);
  GenParams nodo =
      parse_gen_params(json::object(), Api::Chat, {1024, json::parse(R"({"do_sample": false})")});
  EXPECT_TRUE(nodo.sampling.greedy());
  for (const char* bad :
       {R"({"temperature": -1})", R"({"temperature": 3})", R"({"top_p": 0})", R"({"top_p": 1.5})",
        R"({"min_p": 2})", R"({"presence_penalty": 3})", R"({"repetition_penalty": 0})",
        R"({"top_k": -5})", R"({"temperature": "hot"})", R"({"seed": 1.5})"})
    EXPECT_EQ(api_error([&] { parse_gen_params(json::parse(bad), Api::Chat, limits()); }).status,
              400)
        << bad;
}

TEST(ServerRequest, StopAndN) {
  auto parse = [](const char* body, Api api) {
    return parse_gen_params(json::parse(body), api, limits());
  };
  EXPECT_EQ(parse(R"({"stop": "x"})", Api::Chat).stop, std::vector<std::string>{"x"});
  EXPECT_EQ(parse(R"({"stop": ["a", "", "b"]})", Api::Completions).stop,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parse(R"({"max_tokens": 1, "stop_sequences": ["END"]})", Api::Messages).stop,
            std::vector<std::string>{"END"});
  EXPECT_EQ(api_error([&] { parse(R"({"stop": 3})", Api::Chat); }).param, "stop");
  EXPECT_EQ(api_error([&] { parse(R"({"stop": [3]})", Api::Chat); }).param, "stop");
  ApiError n = api_error([&] { parse(R"({"n": 2})", Api::Chat); });
  EXPECT_STREQ(n.what(), "n > 1 is not supported");
  EXPECT_EQ(parse(R"({"n": 1})", Api::Completions).max_tokens, 16);
}

TEST(ServerRequest, LogprobsAndStream) {
  auto parse = [](const char* body, Api api) {
    return parse_gen_params(json::parse(body), api, limits());
  };
  GenParams c = parse(R"({"logprobs": true, "top_logprobs": 3, "stream": true,
                          "stream_options": {"include_usage": true}})",
                      Api::Chat);
  EXPECT_TRUE(c.logprobs && c.stream && c.include_usage);
  EXPECT_EQ(c.top_logprobs, 3);
  EXPECT_EQ(api_error([&] { parse(R"({"top_logprobs": 3})", Api::Chat); }).param, "top_logprobs");
  EXPECT_EQ(
      api_error([&] { parse(R"({"logprobs": true, "top_logprobs": 21})", Api::Chat); }).status,
      400);
  GenParams l = parse(R"({"logprobs": 2})", Api::Completions);
  EXPECT_TRUE(l.logprobs);
  EXPECT_EQ(l.top_logprobs, 2);
  EXPECT_EQ(api_error([&] { parse(R"({"logprobs": true})", Api::Completions); }).param, "logprobs");
  EXPECT_EQ(parse(R"({"basalt_forced_output": "hi"})", Api::Chat).forced_output, "hi");
}

TEST(ServerRequest, ContentText) {
  EXPECT_EQ(content_text(json("hi"), "c"), "hi");
  EXPECT_EQ(content_text(json(), "c"), "");
  EXPECT_EQ(
      content_text(
          json::parse(R"([{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}])"),
          "c"),
      "ab");
  EXPECT_EQ(
      api_error([] { content_text(json::parse(R"([{"type": "image_url"}])"), "m.content"); }).param,
      "m.content");
  EXPECT_EQ(api_error([] { content_text(json(5), "m.content"); }).status, 400);
}

TEST(ServerStopMatcher, HoldsBackPrefixesAndNeverEmitsTheStop) {
  StopMatcher m({"STOP", "end"});
  std::string out;
  for (const char* piece : {"Hel", "lo S", "T", "O", "P more"}) out += m.push(piece);
  EXPECT_EQ(out, "Hello ");
  ASSERT_TRUE(m.hit());
  EXPECT_EQ(*m.hit(), "STOP");
  EXPECT_EQ(m.push("again"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(ServerStopMatcher, ReleasesAFalseStart) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("a ST"), "a ");
  EXPECT_EQ(m.push("ART"), "START");
  EXPECT_EQ(m.push("x S"), "x ");
  EXPECT_EQ(m.flush(), "S");
  EXPECT_FALSE(m.hit());
}

TEST(ServerStopMatcher, FirstToCompleteWinsWhateverTheSplit) {
  // "bc" completes before "abcd" does, in one push or byte by byte.
  StopMatcher whole({"abcd", "bc"});
  EXPECT_EQ(whole.push("xabcd"), "xa");
  EXPECT_EQ(*whole.hit(), "bc");
  StopMatcher bytes({"abcd", "bc"});
  std::string out;
  for (char c : std::string("xabcd")) out += bytes.push(std::string(1, c));
  EXPECT_EQ(out, "xa");
  EXPECT_EQ(*bytes.hit(), "bc");
  StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

}  // namespace
}  // namespace basalt::server
