// What every handler needs: the engine, the model's tokenizer and prompt renderer, metrics,
// and the server's options. One instance lives for the server's lifetime.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/prompt.h"
#include "tokenizer/tokenizer.h"

namespace basalt::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;      // empty: no authentication
  std::string served_name;  // the one model name /v1/models lists and requests must use
  bool test_hooks = false;  // honour "basalt_forced_output" (tests only)
  int http_threads = 0;     // 0: enough for many concurrent streams
};

struct ServerContext {
  ServerContext(Engine& e, const tok::Tokenizer& t, ServerOptions o)
      : engine(e), model(e.model()), tok(t), prompt(e.model()), opt(std::move(o)) {}
  Engine& engine;
  const Model& model;
  const tok::Tokenizer& tok;
  PromptRenderer prompt;
  ServerOptions opt;
  Metrics metrics;
  std::vector<int32_t> end_of_turn_ids;  // <|im_end|>, <|eot_id|>…: stop ids besides EOS
  std::atomic<bool> stopping{false};     // set on SIGINT/SIGTERM: generations end
  int64_t created = 0;                   // server start (unix seconds), for /v1/models
};

}  // namespace basalt::server
