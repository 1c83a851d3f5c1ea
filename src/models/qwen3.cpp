// Qwen3ForCausalLM: Llama's block plus a per-head RMSNorm on q and k (before RoPE),
// rotate_half RoPE in both HF and GGUF files, head_dim given explicitly.
#include "models/arch.h"

namespace basalt::models {
namespace {

void qwen3_from_hf(const nlohmann::json& config, const std::string& file, ModelConfig& c) {
  c.arch = "qwen3";
  hf_common(config, file, c);
  c.qk_norm = true;
  c.attention_bias = cfg_bool_or(config, "attention_bias", false, file);
  c.tied_embeddings = cfg_bool_or(config, "tie_word_embeddings", false, file);
  c.rope.style = RopeStyle::NeoX;
}

void qwen3_from_gguf(const io::GgufFile& g, ModelConfig& c) {
  c.arch = "qwen3";
  c.hf_class = "Qwen3ForCausalLM";
  gguf_common(g, "qwen3", c);
  c.qk_norm = true;
  c.rope.style = RopeStyle::NeoX;
}

}  // namespace

const ArchSpec& arch_qwen3() {
  static const ArchSpec spec{
      "qwen3", {"Qwen3ForCausalLM"}, "qwen3", qwen3_from_hf, qwen3_from_gguf};
  return spec;
}

}  // namespace basalt::models
