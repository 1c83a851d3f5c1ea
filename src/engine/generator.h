// Generator: one sequence through a model: chunked prefill, then sampled decode steps.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/drafter.h"
#include "engine/sampler.h"
#include "models/model.h"

namespace basalt {

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingParams sampling;
  int64_t prefill_chunk = 0;      // 0: the whole prompt in one pass
  std::vector<int32_t> stop_ids;  // besides the model's EOS ids
  bool ignore_eos = false;
  int64_t max_context = 0;  // 0: the model's context length
  // Speculative decoding: after each token, `drafter` proposes up to spec_tokens more and one
  // pass of the target verifies them all (T = 1 + drafts); the longest prefix equal to the
  // target's own tokens is kept, plus the target's next token, and the KV of the rest is
  // dropped. The output is bitwise plain decoding's, greedy or sampled with the same seed
  // (verification rows are exact: same bits as decode steps; docs/speculative.md), hybrid
  // models included (their recurrent state is restored and the kept tokens run again).
  Drafter* drafter = nullptr;
  int64_t spec_tokens = 4;
  // Adaptive draft length: each pass drafts the k ≤ spec_tokens that the measured acceptance
  // and pass costs say emits the most tokens per second (engine/spec_policy.h).
  bool spec_adaptive = false;
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated = 0;
  double prefill_s = 0, decode_s = 0;
  std::string stop_reason;  // "eos", "stop", "length", "context", "callback"
  // Speculative decoding: verification passes, tokens drafted and accepted, and the part of
  // decode_s spent in the drafter (the rest: verification passes and token picking).
  int64_t verify_passes = 0, drafted = 0, accepted = 0;
  double draft_s = 0;
  std::string spec_policy;  // spec_adaptive: what the policy measured and chose last
};

class Generator {
 public:
  Generator(Model& model, Backend& backend) : model_(model), be_(backend) {
    model_.check_backend(be_);
    model_.bind(be_);  // upload once, outside the timed prefill
  }

  // Calls on_token(id) for each generated token (EOS/stop tokens excluded); returning false
  // stops the generation. Throws basalt::Error if the prompt does not fit the context.
  GenerateStats generate(std::span<const int32_t> prompt, const GenerateOptions& opt,
                         const std::function<bool(int32_t)>& on_token);

  // Logits [T, V] at every position of tokens, prefilled in chunks of `chunk` (0 = whole).
  std::vector<float> logits(std::span<const int32_t> tokens, int64_t chunk);

 private:
  // The decode loop of speculative decoding (GenerateOptions::drafter), from the first token;
  // `emit` is the plain loop's per-token step (history, stops, the callback, the budget).
  void speculate(KvPool& pool, KvSequence& seq, int64_t capacity, int32_t first, bool greedy,
                 std::vector<int32_t>& history, const GenerateOptions& opt, GenerateStats& st,
                 const std::function<bool(int32_t)>& emit);
  // Runs tokens through the model in chunks; leaves the last row's logits in last_logits.
  // A drafter that reads hidden states sees every chunk.
  void prefill(std::span<const int32_t> tokens, int64_t chunk, KvPool& pool, KvSequence& seq,
               std::vector<float>& last_logits, Drafter* drafter = nullptr);
  Model& model_;
  Backend& be_;
};

}  // namespace basalt
