// Engine: the serving core. Requests are submitted from any thread; one engine thread runs
// forward passes and delivers each request's tokens through its callback, in order.
// (First cut: requests run one at a time; continuous batching over a paged KV cache replaces
// the loop behind this same interface.)
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/sampler.h"
#include "models/model.h"

namespace basalt {

struct EngineRequest {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 256;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // besides the model's EOS ids (unless ignore_eos)
  bool ignore_eos = false;
  int top_logprobs = 0;           // > 0: report that many alternatives per token
  // Test-only: when non-empty, these tokens are emitted instead of sampled ones (the forward
  // passes still run). Lets end-to-end tests fix the model's output (e.g. a tool call).
  std::vector<int32_t> forced_output;
};

struct TokenEvent {
  int32_t token = -1;   // -1 on the final event when no token comes with it
  float logprob = 0.0f;                          // log-softmax of the chosen token
  std::vector<std::pair<int32_t, float>> top;    // top_logprobs alternatives, best first
  bool finished = false;
  std::string finish_reason;  // "stop" (EOS/stop id), "length", "cancelled", "error"
  std::string error;          // set when finish_reason == "error"
  int64_t prompt_tokens = 0, completion_tokens = 0;  // on the final event
  int64_t cached_prompt_tokens = 0;                  // prompt tokens served from the prefix cache
};

struct EngineConfig {
  int64_t max_context = 0;  // 0: the model's
  int max_batch = 8;        // sequences decoded together (--parallel)
  int64_t prefill_chunk = 256;
};

struct EngineStats {
  int64_t queued = 0, running = 0;
  int64_t requests_total = 0, prompt_tokens_total = 0, completion_tokens_total = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;
};

class Engine {
 public:
  using Callback = std::function<void(const TokenEvent&)>;
  Engine(Model& model, Backend& backend, EngineConfig cfg);
  ~Engine();  // stops the engine thread; pending requests finish with "cancelled"

  // Thread-safe. The callback runs on the engine thread; it must not block for long.
  // Throws basalt::Error for requests that cannot run (empty prompt, over the context).
  uint64_t submit(EngineRequest req, Callback cb);
  void cancel(uint64_t id);  // thread-safe; the request ends with finish_reason "cancelled"
  EngineStats stats() const;
  const Model& model() const { return model_; }
  int64_t max_context() const { return max_context_; }

 private:
  struct Job {
    uint64_t id;
    EngineRequest req;
    Callback cb;
  };
  void loop();
  void run_job(Job& job);

  Model& model_;
  Backend& be_;
  EngineConfig cfg_;
  int64_t max_context_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::map<uint64_t, bool> cancelled_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace basalt
