// Sampler: logits → next token. Order of transforms (as transformers' generate applies
// them): repetition penalty, presence/frequency penalties, temperature, top-k, top-p, min-p,
// then a draw. temperature 0 (or top_k 1) is greedy: argmax, lowest id on ties.
// Each draw uses its own random number keyed by (seed, position), never a shared stream, so
// a sequence's samples do not depend on what else runs (EXACTNESS.md, sampling).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace basalt {

struct SamplingParams {
  float temperature = 0.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // HF: logit > 0 ? logit / p : logit * p, over seen tokens
  float presence_penalty = 0.0f;    // OpenAI: - p if the token occurred
  float frequency_penalty = 0.0f;   // OpenAI: - p · count
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

// Picks the next token. history: the tokens seen so far (prompt + generated), for penalties.
// position: the position the sampled token will take (keys the random draw).
// logits are modified in place (penalties, temperature).
int32_t sample_token(std::span<float> logits, const SamplingParams& p,
                     std::span<const int32_t> history, int64_t position);

int32_t argmax(std::span<const float> logits);
// Uniform in [0, 1) from (seed, position): splitmix64 of the pair.
double sample_uniform(uint64_t seed, int64_t position);

}  // namespace basalt
