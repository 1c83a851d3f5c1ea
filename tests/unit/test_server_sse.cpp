// SSE framing, the API error shapes and the Prometheus rendering of the server.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "server/api_error.h"
#include "server/metrics.h"
#include "server/sse.h"

namespace basalt::server {
namespace {

using json = nlohmann::json;

// Parses an SSE stream the way clients do: events split by blank lines, "event:" and "data:"
// fields; returns (event name, data) pairs.
std::vector<std::pair<std::string, std::string>> parse_sse(const std::string& s) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string event, data;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) {
      if (!data.empty() || !event.empty()) out.emplace_back(event, data);
      event.clear(), data.clear();
    } else if (line.rfind("event: ", 0) == 0) {
      event = line.substr(7);
    } else if (line.rfind("data: ", 0) == 0) {
      if (!data.empty()) data += "\n";
      data += line.substr(6);
    }
  }
  return out;
}

TEST(ServerSse, DataAndEventFrames) {
  const json j = {{"text", "line one\nline two\r\n"}, {"n", 1}};
  const std::string d = sse_data(j);
  EXPECT_EQ(d.rfind("data: ", 0), 0u);
  EXPECT_EQ(d.substr(d.size() - 2), "\n\n");
  EXPECT_EQ(std::count(d.begin(), d.end(), '\n'), 2) << "newlines inside strings are escaped";
  const std::string e = sse_event("content_block_delta", j);
  auto evs = parse_sse(d + e + sse_done());
  ASSERT_EQ(evs.size(), 3u);
  EXPECT_EQ(evs[0].first, "");
  EXPECT_EQ(json::parse(evs[0].second), j);
  EXPECT_EQ(evs[1].first, "content_block_delta");
  EXPECT_EQ(json::parse(evs[1].second), j);
  EXPECT_EQ(evs[2].second, "[DONE]");
}

TEST(ServerSse, CommentsAreIgnoredByParsers) {
  const std::string c = sse_comment("wait\ning");
  EXPECT_EQ(c, ": wait ing\n\n");
  EXPECT_TRUE(parse_sse(c).empty());
}

TEST(ServerSse, InvalidUtf8IsReplacedNotThrown) {
  const std::string s = json_line(json{{"t", std::string("a\xFF")}});
  EXPECT_NE(s.find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(ServerErrors, Shapes) {
  json o = error_body(ApiFlavor::OpenAI, 400, "bad", "max_tokens", "invalid_value");
  EXPECT_EQ(o["error"]["message"], "bad");
  EXPECT_EQ(o["error"]["type"], "invalid_request_error");
  EXPECT_EQ(o["error"]["param"], "max_tokens");
  EXPECT_EQ(o["error"]["code"], "invalid_value");
  json o2 = error_body(ApiFlavor::OpenAI, 401, "key");
  EXPECT_EQ(o2["error"]["type"], "authentication_error");
  EXPECT_TRUE(o2["error"]["param"].is_null());
  json a = error_body(ApiFlavor::Anthropic, 413, "big");
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "request_too_large");
  EXPECT_EQ(a["error"]["message"], "big");
  EXPECT_EQ(error_body(ApiFlavor::Anthropic, 404, "m")["error"]["type"], "not_found_error");
}

TEST(ServerMetrics, PrometheusText) {
  Metrics m;
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/v1/messages", 400);
  m.generation_started();
  m.generation_finished("stop");
  m.count_tokens(10, 5);
  m.observe_ttft(0.02);
  m.observe_ttft(7.0);
  m.observe_itl(0.004);
  EngineStats es;
  es.queued = 2;
  es.running = 3;
  es.kv_blocks_used = 7;
  es.kv_blocks_total = 64;
  es.prefix_cache_hit_tokens = 48;
  const std::string t = m.render(es);
  auto has = [&](const std::string& s) { return t.find(s) != std::string::npos; };
  EXPECT_TRUE(
      has("basalt_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n"));
  EXPECT_TRUE(has("basalt_http_requests_total{endpoint=\"/v1/messages\",status=\"400\"} 1\n"));
  EXPECT_TRUE(has("basalt_generations_total{reason=\"stop\"} 1\n"));
  EXPECT_TRUE(has("basalt_generations_active 0\n"));
  EXPECT_TRUE(has("basalt_prompt_tokens_total 10\n"));
  EXPECT_TRUE(has("basalt_completion_tokens_total 5\n"));
  EXPECT_TRUE(has("basalt_requests_queued 2\n"));
  EXPECT_TRUE(has("basalt_requests_running 3\n"));
  EXPECT_TRUE(has("basalt_kv_blocks_used 7\n"));
  EXPECT_TRUE(has("basalt_kv_blocks_total 64\n"));
  EXPECT_TRUE(has("basalt_prefix_cache_hit_tokens_total 48\n"));
  EXPECT_TRUE(has("# TYPE basalt_time_to_first_token_seconds histogram\n"));
  // cumulative buckets: 0.02 falls in le=0.025, 7.0 in le=10
  EXPECT_TRUE(has("basalt_time_to_first_token_seconds_bucket{le=\"0.01\"} 0\n"));
  EXPECT_TRUE(has("basalt_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"));
  EXPECT_TRUE(has("basalt_time_to_first_token_seconds_bucket{le=\"10\"} 2\n"));
  EXPECT_TRUE(has("basalt_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
  EXPECT_TRUE(has("basalt_time_to_first_token_seconds_count 2\n"));
  EXPECT_TRUE(has("basalt_inter_token_latency_seconds_count 1\n"));
}

}  // namespace
}  // namespace basalt::server
