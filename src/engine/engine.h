// Engine: the serving core. Requests are submitted from any thread; one engine thread runs
// continuous batching: every step, waiting requests join (up to max_batch sequences), each
// running sequence contributes its next prefill chunk or its one decode token to a single
// forward pass, finished or cancelled sequences leave at once. KV lives in a paged pool with a
// prefix cache (a repeated system prompt is not prefilled again); when blocks run out the
// youngest sequence is preempted and later recomputed. Kernels keep each row's arithmetic
// independent of the batch, and each draw is keyed by (seed, position), so a request's output
// does not depend on what else runs (EXACTNESS.md).
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

#include "engine/drafter.h"
#include "engine/spec_policy.h"
#include "engine/sampler.h"
#include "models/model.h"

namespace basalt {

struct EngineRequest {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 256;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // besides the model's EOS ids (unless ignore_eos)
  bool ignore_eos = false;
  bool logprobs = false;  // report each token's log-probability (a log-sum-exp over V per token)
  int top_logprobs = 0;   // > 0: also that many alternatives per token
  // Test-only: when non-empty, these tokens are emitted instead of sampled ones (the forward
  // passes still run). Lets end-to-end tests fix the model's output (e.g. a tool call).
  std::vector<int32_t> forced_output;
};

struct TokenEvent {
  int32_t token = -1;                          // -1 on the final event when no token comes with it
  float logprob = 0.0f;                        // log-softmax of the chosen token (if asked)
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
  bool finished = false;
  std::string finish_reason;  // "stop" (EOS/stop id), "length", "cancelled", "error"
  std::string error;          // set when finish_reason == "error"
  int64_t prompt_tokens = 0, completion_tokens = 0;  // on the final event
  int64_t cached_prompt_tokens = 0;                  // prompt tokens served from the prefix cache
};

struct EngineConfig {
  int64_t max_context = 0;    // 0: the model's
  int max_batch = 8;          // sequences running together (--parallel)
  int64_t step_tokens = 256;  // most tokens in one forward pass (prefill chunks + decodes)
  int64_t kv_tokens = 0;      // KV pool size in positions; 0: max_context × max_batch
  int64_t block_size = 16;    // positions per KV block
  // Speculative decoding (docs/speculative.md): "ngram" drafts up to spec_tokens tokens after
  // each decoding sequence's last token and the same pass verifies them; a request's output is
  // what it would be without. Models with recurrent state run without it (for now).
  std::string spec;
  int64_t spec_tokens = 4;
  // Adaptive draft length: spec_tokens is the most a pass drafts; each sequence's SpecPolicy
  // (engine/spec_policy.h) picks k from its own acceptance and the measured cost of the
  // engine's passes (each pass's wall time, whatever else it carried). Speed only.
  bool spec_adaptive = false;
  float spec_min_confidence = 0.0f;  // dspark:PATH: DSparkDrafter's threshold (0: off)
};

struct EngineStats {
  int64_t queued = 0, running = 0;
  int64_t requests_total = 0, prompt_tokens_total = 0, completion_tokens_total = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t preemptions = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;
  // Where the engine thread's time goes: steps, their wall time, the forward passes in them.
  int64_t steps = 0;
  double step_seconds = 0, forward_seconds = 0;
  // Speculative decoding: sequences verified with drafts, tokens drafted and accepted; the
  // time spent drafting (the verification is part of the forward passes).
  int64_t spec_verifications = 0, spec_drafted = 0, spec_accepted = 0;
  double spec_draft_seconds = 0;
  // spec_adaptive: passes that asked for drafts, and the draft lengths they asked for.
  int64_t spec_adaptive_passes = 0, spec_adaptive_k_total = 0;
  // draft:PATH: steps whose sequences drafted together, and the sequences in them.
  int64_t spec_draft_batches = 0, spec_draft_batch_rows = 0;
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
  // Zeroes the cumulative counters (requests, tokens, prefix-cache hits, preemptions, steps and
  // their time, speculative decoding's); the gauges (queued, running, KV blocks) stay. For a
  // server's start-up warmup request, which no client sent.
  void reset_counters();
  // Thread-safe: runs one request to its end and returns its tokens; throws basalt::Error where
  // it cannot run or ends with an error (or is cancelled).
  std::vector<int32_t> run(EngineRequest req);
  const Model& model() const { return model_; }
  int64_t max_context() const { return max_context_; }

 private:
  struct Seq {
    uint64_t id = 0;
    EngineRequest req;
    Callback cb;
    KvSequence kv;
    std::vector<int32_t> history;  // prompt + generated tokens
    int64_t generated = 0, cached = 0;
    bool prompt_counted = false;
    std::vector<int32_t> spec_in;  // this step's verified tokens: the last one and the drafts
    // Hybrid models: a state slot per draft of this step (the state after each verified row
    // but the last: rollback points) and the pass's per-row slots (-1 for the last row).
    std::vector<KvSequence> points;
    std::vector<int32_t> snaps;
    // Drafted this step with the other sequences' drafters (draft_together): the tokens, the
    // draft length asked for (before this step's budget), the drafting time's share.
    bool ahead = false;
    std::vector<int32_t> ahead_tokens;
    int64_t want = 0;
    double ahead_s = 0;
    std::unique_ptr<Drafter> drafter;  // draft:PATH, mtp: this sequence's (KV in draft_pool_)
    std::unique_ptr<SpecPolicy> policy;  // spec_adaptive
    bool spec_asked = false;             // this step asked its drafter (for the policy)
    double draft_s = 0;                  // and drafting took this long
  };
  void loop();
  bool step();  // one forward pass over the running sequences; false when idle
  void admit();
  void release_points(Seq& s);  // the rollback points' slots go back to the pool
  void ensure_drafter(Seq& s);  // draft:PATH, mtp, dspark: the sequence's drafter, made once
  int64_t wanted_drafts(Seq& s, const Drafter& dr);  // spec_tokens, or the policy's k
  bool may_draft(const Seq& s) const;
  int64_t draft_limit(const Seq& s, int64_t want, int64_t budget) const;
  void draft_together();  // draft:PATH: every decoding sequence's drafts in shared passes
  void finish(Seq& s, const std::string& reason, const std::string& error = "");
  void preempt_youngest();

  Model& model_;
  Backend& be_;
  EngineConfig cfg_;
  int64_t max_context_;
  std::unique_ptr<KvPool> pool_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> queue_;     // waiting (guarded by mu_)
  std::vector<std::unique_ptr<Seq>> running_;  // engine thread only
  std::map<uint64_t, bool> cancelled_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  EngineStats stats_;
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;
  std::unique_ptr<Drafter> drafter_;  // cfg_.spec ngram (one for all sequences)
  std::shared_ptr<Model> draft_model_;  // cfg_.spec draft:PATH / mtp (the MTP head), with one
  std::shared_ptr<KvPool> draft_pool_;  // KV pool for the sequences' drafters
  bool mtp_ = false;
  std::shared_ptr<DSparkHead> dspark_;  // cfg_.spec dspark:PATH (its backbone: draft_model_)
  bool hidden_drafters_ = false;        // the drafters read the target's hidden rows (mtp, dspark)
  std::thread thread_;
};

}  // namespace basalt
