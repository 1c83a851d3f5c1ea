// LlamaForCausalLM (Llama 2, Llama 3/3.1 with llama3 rope scaling): GQA, optional attention
// bias, tied or untied embeddings. GGUF llama files store Q/K rows permuted for interleaved
// RoPE (llama.cpp's convert), so they rotate adjacent pairs; HF checkpoints use rotate_half.
#include "core/error.h"
#include "models/arch.h"

namespace basalt::models {
namespace {

void llama_from_hf(const nlohmann::json& config, const std::string& file, ModelConfig& c) {
  c.arch = "llama";
  hf_common(config, file, c);
  c.attention_bias = cfg_bool_or(config, "attention_bias", false, file);
  if (cfg_bool_or(config, "mlp_bias", false, file))
    fail("[llama] {}: mlp_bias=true is not supported", file);
  c.tied_embeddings = cfg_bool_or(config, "tie_word_embeddings", false, file);
  c.rope.style = RopeStyle::NeoX;
}

void llama_from_gguf(const io::GgufFile& g, ModelConfig& c) {
  c.arch = "llama";
  c.hf_class = "LlamaForCausalLM";
  gguf_common(g, "llama", c);
  c.rope.style = RopeStyle::Interleaved;
}

}  // namespace

const ArchSpec& arch_llama() {
  static const ArchSpec spec{
      "llama", {"LlamaForCausalLM"}, "llama", llama_from_hf, llama_from_gguf};
  return spec;
}

}  // namespace basalt::models
