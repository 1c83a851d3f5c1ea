// The API adapters (one file each: api_openai_chat.cpp, api_openai_completions.cpp,
// api_openai_responses.cpp, api_anthropic_messages.cpp) and what they share: model-name
// check, prompt encoding with the context check, the engine request, the output parser's
// options, and SSE streaming of a Generation through httplib's chunked content provider.
#pragma once
#include <httplib.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/request_parse.h"
#include "server/server_context.h"

namespace basalt::server {

void api_openai_chat(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void api_openai_completions(ServerContext& ctx, const httplib::Request& req,
                            httplib::Response& res);
void api_openai_responses(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void api_anthropic_messages(ServerContext& ctx, const httplib::Request& req,
                            httplib::Response& res);
void api_anthropic_count_tokens(ServerContext& ctx, const httplib::Request& req,
                                httplib::Response& res);

// For the request's log line (http_server.cpp): tokens of the request on this thread.
void note_request_tokens(int64_t prompt, int64_t completion);

// 404 model_not_found unless "model" is absent or the served name.
void check_model(const ServerContext& ctx, const json& body);
// Chat messages → prompt tokens through the chat template; 400 when over the context.
std::vector<int32_t> encode_chat(const ServerContext& ctx, const json& messages, const json& tools,
                                 const json& extra, std::string* rendered);
// Context check shared by every API: 400 with both counts.
void check_prompt_fits(const ServerContext& ctx, size_t prompt_tokens);
// The engine request for `prompt` and the parsed parameters (max tokens clamped to the
// context; the test hook tokenized when enabled).
EngineRequest engine_request(const ServerContext& ctx, const GenParams& g,
                             std::vector<int32_t> prompt);
// Parser options for a chat API: reasoning per model, tool format when tools are on.
ParserOptions parser_options(const ServerContext& ctx, const json& tools, bool tools_on,
                             const std::string& rendered_prompt);
// OpenAI function tools ({"type": "function", "function": {...}}) validated; [] when absent.
json openai_function_tools(const json& body);

// The events of a finished generation, gathered (non-streaming responses).
struct GenResult {
  std::string content, reasoning;
  struct Call {
    std::string id, name, arguments;
  };
  std::vector<Call> calls;
  std::vector<TokenLogprob> logprobs;
};
void gather(const std::vector<GenEvent>& evs, GenResult& r);
json parse_arguments(const std::string& args);  // tool arguments → object ({} if broken)

// Each API's SSE event format.
class StreamFormat {
 public:
  virtual ~StreamFormat() = default;
  virtual std::string begin() = 0;
  virtual std::string on_events(const std::vector<GenEvent>& evs) = 0;
  virtual std::string end(const Generation& g) = 0;
};
// Streams `gen` as text/event-stream; a failed write (client gone) cancels the generation.
void stream_sse(httplib::Response& res, std::shared_ptr<Generation> gen,
                std::shared_ptr<StreamFormat> fmt);

std::string random_id(const std::string& prefix, size_t n = 24);
int64_t unix_now();

}  // namespace basalt::server
