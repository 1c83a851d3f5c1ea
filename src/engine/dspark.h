// A DSpark drafter's checkpoint (DeepSeek's DSpark, layout of its public DeepSpec code,
// Qwen3DSparkModel; docs/speculative.md). A parallel backbone of Qwen3 decoder layers drafts a
// whole block in one pass: its keys and values are the projected hidden states of tapped target
// layers (context, positions before the anchor) and the block itself, [anchor, mask, …, mask],
// which attends non-causally; slot k of the block predicts the token k + 1 positions after the
// anchor. A low-rank "Markov" head then makes the block's tokens sequential, and an optional
// confidence head scores each slot.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace basalt {

struct DSparkHead {
  enum class Markov { None, Vanilla, Gated, Rnn };

  std::shared_ptr<Model> backbone;  // layers.*, embed_tokens, norm, lm_head
  std::vector<int64_t> taps;        // target_layer_ids (Model::set_taps of the target)
  int64_t block = 0;                // block_size: slots (proposals) of a pass
  int32_t mask_id = 0;              // mask_token_id
  Markov markov = Markov::None;
  int64_t rank = 0;  // markov_rank
  bool confidence = false, confidence_markov = false;
  int64_t E = 0, V = 0;
  // Host f32 copies (small) of the drafter's own tensors.
  WeightRef fc;  // fc.weight [E, taps · E] (f32, owned below)
  std::vector<float> fc_data, hidden_norm;
  std::vector<float> w1;                // markov_w1 [V, r] (an embedding)
  std::vector<float> w2t;               // markov_w2 [V, r], transposed: [r, V]
  std::vector<float> gate_w, gate_b;    // gated: gate_proj [r, E + r], [r]
  std::vector<float> joint_w, joint_b;  // rnn: joint_proj [3r, 2r + E], [3r]
  std::vector<float> conf_w;            // confidence_head.proj [E (+ r)]
  float conf_b = 0.0f;

  // The block's greedy chain: base logits [B, V] and final hidden rows [B, E] (host f32) →
  // tokens[k] = argmax(base[k] + bias(prev, hidden[k])) (lowest index on ties), prev = the
  // anchor, then tokens[k - 1]. Optional outputs: the corrected rows [B, V] and the
  // confidence of each slot, sigmoid(proj([hidden[k]; w1[prev]])) (or of hidden[k] alone).
  void chain(const float* base, const float* hidden, int32_t anchor, int64_t B, int32_t* tokens,
             float* step_logits = nullptr, float* conf = nullptr) const;
};

// Loads the drafter at `path` for `target`: a Qwen3DSparkModel checkpoint with the target's
// vocabulary and hidden size, num_target_layers equal to the target's layers and taps in
// [-1, layers - 2]. Throws basalt::Error naming the file and the problem.
std::shared_ptr<DSparkHead> dspark_load(const std::string& path, const Model& target);

}  // namespace basalt
