// Generation: one request's run through the engine as the HTTP layer sees it. Submits the
// request, receives its tokens (engine thread → a queue), and turns them on the handler's
// thread into events: tokens → UTF-8 text (StreamDecoder) → stop strings (StopMatcher) →
// content / reasoning / tool calls (OutputParser). Cancels the engine request when a stop
// string ends the text, when the server stops, and when the Generation dies unfinished (a
// client that went away).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/output_parser.h"
#include "server/server_context.h"
#include "server/stop_matcher.h"

namespace basalt::server {

struct TokenLogprob {
  std::string text;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

struct GenEvent {
  ParserEvent::Kind kind = ParserEvent::Content;
  std::string text;
  int index = 0;
  std::string id, name;
  std::vector<TokenLogprob> logprobs;  // Content only: tokens that completed up to here
};

struct GenSpec {
  EngineRequest req;
  std::vector<std::string> stop;
  std::optional<ParserOptions> parser;  // nullopt: raw text (completions)
  bool logprobs = false;
};

class Generation {
 public:
  // Throws ApiError(400) when the engine refuses the request (e.g. over the context).
  Generation(ServerContext& ctx, GenSpec spec);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Waits up to `wait` for tokens and appends the events they make. True once the generation
  // has finished (the last events are in `out`).
  bool poll(std::vector<GenEvent>& out, std::chrono::milliseconds wait);
  void run_to_end(std::vector<GenEvent>& out);  // polls until finished
  void cancel();
  bool finished() const { return finished_; }

  // Valid once finished: "stop" | "length" | "tool_calls" | "cancelled" | "error".
  const std::string& finish_reason() const { return finish_reason_; }
  const std::optional<std::string>& stop_string() const { return stop_.hit(); }
  const std::string& error() const { return error_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t reasoning_chars() const { return reasoning_chars_; }
  bool has_tool_calls() const { return tool_calls_ > 0; }

 private:
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<TokenEvent, std::chrono::steady_clock::time_point>> q;
  };
  void on_token(const TokenEvent& te, std::chrono::steady_clock::time_point t,
                std::vector<GenEvent>& out);
  void feed(const std::string& text, std::vector<GenEvent>& out);
  void parse(const std::string& text, bool end, std::vector<GenEvent>& out);
  void end_text(std::vector<GenEvent>& out);

  ServerContext& ctx_;
  std::shared_ptr<Channel> ch_;
  uint64_t id_ = 0;
  tok::StreamDecoder dec_;
  StopMatcher stop_;
  std::unique_ptr<OutputParser> parser_;
  bool want_logprobs_;
  std::vector<TokenLogprob> pending_lp_;
  bool text_ended_ = false, finished_ = false, cancelled_ = false;
  std::string finish_reason_, error_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0;
  int64_t reasoning_chars_ = 0;
  int tool_calls_ = 0;
  std::chrono::steady_clock::time_point start_, last_token_;
  bool got_token_ = false;
};

}  // namespace basalt::server
