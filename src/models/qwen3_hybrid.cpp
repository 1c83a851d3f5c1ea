// The Qwen3 mixture-of-experts and hybrid families:
//  - Qwen3MoeForCausalLM: Qwen3's attention block, routed-expert feed-forwards (top-k of a
//    softmax router, renormalised when norm_topk_prob) on the layers decoder_sparse_step and
//    mlp_only_layers select.
//  - Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM (and the text part of their
//    ...ForConditionalGeneration checkpoints, tensors under model.language_model.):
//    layer_types mixes Gated-DeltaNet ("linear_attention") and gated full attention (q_proj
//    also yields a sigmoid gate per head; partial rotary); zero-centred RMSNorms ((1 + w));
//    the MoE variant adds a sigmoid-gated shared expert and always renormalises the top-k.
//  - Qwen3NextForCausalLM: the same blocks with the GDN input projections interleaved per key
//    head (regrouped into the Qwen3.5 layout at load) and Qwen3-MoE's layer selection.
// HF checkpoints only (no GGUF reader for these yet).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "models/arch.h"

namespace basalt::models {
namespace {

using nlohmann::json;

// rope_parameters.partial_rotary_factor (transformers 5) or the top-level key (4.x).
void partial_rotary(const json& config, const std::string& file, ModelConfig& c, double dflt) {
  double f = cfg_num_or(config, "partial_rotary_factor", dflt, file);
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (auto it = config.find(key); it != config.end() && it->is_object())
      f = cfg_num_or(*it, "partial_rotary_factor", f, file);
  if (!(f > 0.0 && f <= 1.0)) fail("[config] {}: partial_rotary_factor {} not in (0, 1]", file, f);
  c.rope.dim = int64_t(double(c.head_dim) * f);
}

void read_moe(const json& config, const std::string& file, ModelConfig& c, bool shared,
              bool always_norm) {
  MoeConfig& m = c.moe;
  // "num_experts" in Qwen's files; transformers 5 writes its alias "num_local_experts".
  m.n_experts = config.contains("num_experts") ? cfg_int(config, "num_experts", file)
                                               : cfg_int(config, "num_local_experts", file);
  m.top_k = cfg_int(config, "num_experts_per_tok", file);
  m.intermediate = cfg_int(config, "moe_intermediate_size", file);
  m.norm_topk = always_norm || cfg_bool_or(config, "norm_topk_prob", false, file);
  if (shared) m.shared_intermediate = cfg_int_or(config, "shared_expert_intermediate_size", 0, file);
  if (m.n_experts <= 0 || m.top_k <= 0 || m.top_k > m.n_experts || m.intermediate <= 0)
    fail("[config] {}: num_experts {}, num_experts_per_tok {}, moe_intermediate_size {} invalid",
         file, m.n_experts, m.top_k, m.intermediate);
}

// Qwen3-MoE's rule: MoE unless the layer is in mlp_only_layers or off the sparse step.
void sparse_step_layers(const json& config, const std::string& file, ModelConfig& c) {
  const int64_t step = cfg_int_or(config, "decoder_sparse_step", 1, file);
  if (step <= 0) fail("[config] {}: decoder_sparse_step must be positive", file);
  std::vector<int64_t> dense;
  if (auto it = config.find("mlp_only_layers"); it != config.end() && it->is_array())
    for (const auto& v : *it) {
      if (!v.is_number_integer()) fail("[config] {}: mlp_only_layers must hold integers", file);
      dense.push_back(v.get<int64_t>());
    }
  c.moe_layers.assign(size_t(c.n_layers), false);
  for (int64_t l = 0; l < c.n_layers; ++l)
    c.moe_layers[size_t(l)] =
        std::find(dense.begin(), dense.end(), l) == dense.end() && (l + 1) % step == 0;
}

void read_hybrid(const json& config, const std::string& file, ModelConfig& c) {
  GdnConfig& g = c.gdn;
  g.k_heads = cfg_int(config, "linear_num_key_heads", file);
  g.v_heads = cfg_int(config, "linear_num_value_heads", file);
  g.k_dim = cfg_int(config, "linear_key_head_dim", file);
  g.v_dim = cfg_int(config, "linear_value_head_dim", file);
  g.conv_kernel = cfg_int_or(config, "linear_conv_kernel_dim", 4, file);
  if (g.k_heads <= 0 || g.v_heads <= 0 || g.k_dim <= 0 || g.v_dim <= 0 || g.conv_kernel <= 0 ||
      g.v_heads % g.k_heads != 0)
    fail("[config] {}: linear attention heads {}/{} (key/value), dims {}/{}, conv {} invalid",
         file, g.k_heads, g.v_heads, g.k_dim, g.v_dim, g.conv_kernel);
  c.linear_layers.assign(size_t(c.n_layers), false);
  auto it = config.find("layer_types");
  if (it == config.end() || it->is_null()) {
    const int64_t every = cfg_int_or(config, "full_attention_interval", 4, file);
    for (int64_t l = 0; l < c.n_layers; ++l) c.linear_layers[size_t(l)] = (l + 1) % every != 0;
  } else {
    if (!it->is_array() || int64_t(it->size()) != c.n_layers)
      fail("[config] {}: layer_types must list {} layer types", file, c.n_layers);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const json& t = (*it)[size_t(l)];
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s != "linear_attention" && s != "full_attention")
        fail("[config] {}: layer_types[{}] is '{}' (linear_attention or full_attention)", file, l,
             s);
      c.linear_layers[size_t(l)] = s == "linear_attention";
    }
  }
  c.attn_output_gate = true;
  c.zero_centred_norms = true;
  c.qk_norm = true;
  c.rope.style = RopeStyle::NeoX;
}

void qwen3_moe_from_hf(const json& config, const std::string& file, ModelConfig& c) {
  c.arch = "qwen3_moe";
  hf_common(config, file, c);
  c.qk_norm = true;
  c.attention_bias = cfg_bool_or(config, "attention_bias", false, file);
  c.tied_embeddings = cfg_bool_or(config, "tie_word_embeddings", false, file);
  c.rope.style = RopeStyle::NeoX;
  read_moe(config, file, c, false, false);
  sparse_step_layers(config, file, c);
}

void qwen3_next_from_hf(const json& config, const std::string& file, ModelConfig& c) {
  c.arch = "qwen3_next";
  hf_common(config, file, c);
  c.tied_embeddings = cfg_bool_or(config, "tie_word_embeddings", false, file);
  c.attention_bias = cfg_bool_or(config, "attention_bias", false, file);
  read_hybrid(config, file, c);
  c.gdn.interleaved = true;
  partial_rotary(config, file, c, 0.25);
  read_moe(config, file, c, true, false);
  sparse_step_layers(config, file, c);
  c.mtp_layers = cfg_int_or(config, "num_nextn_predict_layers", 0, file);
}

// Qwen3_5* (dense or MoE, text-only or the text part of a multimodal checkpoint).
void qwen3_5_from_hf(const json& config, const std::string& file, ModelConfig& c) {
  c.arch = "qwen3_5";
  const bool multimodal = config.contains("text_config") && config["text_config"].is_object();
  const json& tc = multimodal ? config["text_config"] : config;
  hf_common(tc, file, c);
  c.tied_embeddings = cfg_bool_or(config, "tie_word_embeddings",
                                  cfg_bool_or(tc, "tie_word_embeddings", false, file), file);
  c.attention_bias = cfg_bool_or(tc, "attention_bias", false, file);
  read_hybrid(tc, file, c);
  partial_rotary(tc, file, c, 0.25);
  c.mtp_layers = cfg_int_or(tc, "mtp_num_hidden_layers", 0, file);
  if (c.hf_class.find("Moe") != std::string::npos) {
    read_moe(tc, file, c, true, true);
    c.moe_layers.assign(size_t(c.n_layers), true);
  }
  if (multimodal) {
    c.tensor_prefix = "model.language_model.";
    if (c.eos_ids.empty()) c.eos_ids = cfg_token_ids(config, "eos_token_id");
    spdlog::info("[qwen3_5] {}: multimodal checkpoint, text model only (vision tower ignored)",
                 file);
  }
}

}  // namespace

const ArchSpec& arch_qwen3_moe() {
  static const ArchSpec spec{"qwen3_moe", {"Qwen3MoeForCausalLM"}, "", qwen3_moe_from_hf, nullptr};
  return spec;
}

const ArchSpec& arch_qwen3_next() {
  static const ArchSpec spec{
      "qwen3_next", {"Qwen3NextForCausalLM"}, "", qwen3_next_from_hf, nullptr};
  return spec;
}

const ArchSpec& arch_qwen3_5() {
  static const ArchSpec spec{"qwen3_5",
                             {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration",
                              "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"},
                             "",
                             qwen3_5_from_hf,
                             nullptr};
  return spec;
}

}  // namespace basalt::models
