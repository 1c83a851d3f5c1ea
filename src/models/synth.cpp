#include "models/synth.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/safetensors_write.h"
#include "models/gguf_export.h"

namespace basalt {

namespace {

using ojson = nlohmann::ordered_json;

ojson llama_config(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                   int64_t vocab, double theta, int64_t max_pos, bool tied, double rope_factor,
                   int64_t orig_ctx) {
  ojson c = {{"architectures", {"LlamaForCausalLM"}},
             {"model_type", "llama"},
             {"hidden_size", hidden},
             {"intermediate_size", inter},
             {"num_hidden_layers", layers},
             {"num_attention_heads", heads},
             {"num_key_value_heads", kv},
             {"head_dim", hidden / heads},
             {"vocab_size", vocab},
             {"max_position_embeddings", max_pos},
             {"rms_norm_eps", 1e-5},
             {"rope_theta", theta},
             {"hidden_act", "silu"},
             {"attention_bias", false},
             {"mlp_bias", false},
             {"tie_word_embeddings", tied},
             {"bos_token_id", 128000},
             {"eos_token_id", {128001, 128008, 128009}},
             {"torch_dtype", "bfloat16"}};
  if (rope_factor > 0)
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_factor},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", orig_ctx}};
  return c;
}

ojson qwen3_config(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                   int64_t head_dim, int64_t vocab, int64_t max_pos, bool tied) {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"hidden_size", hidden},
          {"intermediate_size", inter},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", kv},
          {"head_dim", head_dim},
          {"vocab_size", vocab},
          {"max_position_embeddings", max_pos},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"tie_word_embeddings", tied},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645},
          {"torch_dtype", "bfloat16"}};
}

// Qwen3-MoE (Qwen3-30B-A3B style): Qwen3 attention, routed experts on every layer.
ojson qwen3_moe_config(int64_t hidden, int64_t layers, int64_t heads, int64_t kv, int64_t head_dim,
                       int64_t experts, int64_t top_k, int64_t moe_inter, int64_t vocab) {
  ojson c = qwen3_config(hidden, moe_inter * 8, layers, heads, kv, head_dim, vocab, 40960, false);
  c["architectures"] = {"Qwen3MoeForCausalLM"};
  c["model_type"] = "qwen3_moe";
  c["num_experts"] = experts;
  c["num_experts_per_tok"] = top_k;
  c["moe_intermediate_size"] = moe_inter;
  c["norm_topk_prob"] = true;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = ojson::array();
  return c;
}

// Qwen3.5 text models: 3 Gated-DeltaNet layers to every gated-attention layer; dense MLP
// (inter > 0) or routed experts with a shared expert (experts > 0).
ojson qwen3_5_config(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                     int64_t head_dim, int64_t lin_k_heads, int64_t lin_v_heads, int64_t experts,
                     int64_t top_k, int64_t moe_inter, int64_t vocab) {
  ojson types = ojson::array();
  for (int64_t l = 0; l < layers; ++l)
    types.push_back((l + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  ojson c = {{"architectures", {experts > 0 ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM"}},
             {"model_type", experts > 0 ? "qwen3_5_moe_text" : "qwen3_5_text"},
             {"hidden_size", hidden},
             {"num_hidden_layers", layers},
             {"num_attention_heads", heads},
             {"num_key_value_heads", kv},
             {"head_dim", head_dim},
             {"vocab_size", vocab},
             {"max_position_embeddings", 262144},
             {"rms_norm_eps", 1e-6},
             {"rope_parameters",
              {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}}},
             {"hidden_act", "silu"},
             {"attention_bias", false},
             {"tie_word_embeddings", false},
             {"layer_types", types},
             {"linear_conv_kernel_dim", 4},
             {"linear_key_head_dim", 128},
             {"linear_value_head_dim", 128},
             {"linear_num_key_heads", lin_k_heads},
             {"linear_num_value_heads", lin_v_heads},
             {"bos_token_id", 248044},
             {"eos_token_id", 248044},
             {"torch_dtype", "bfloat16"}};
  if (inter > 0) c["intermediate_size"] = inter;
  if (experts > 0) {
    c["num_experts"] = experts;
    c["num_experts_per_tok"] = top_k;
    c["moe_intermediate_size"] = moe_inter;
    c["shared_expert_intermediate_size"] = moe_inter;
  }
  return c;
}

uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

const float kAmp = 0.02f * std::sqrt(3.0f);  // uniform [-a, a] has std a / sqrt(3)

// Element i of the random tensor keyed by `key` (the same value in both file formats).
float synth_value(uint64_t key, int64_t i) {
  const double u = double(mix(key + uint64_t(i)) >> 11) * 0x1.0p-53;
  return float(2.0 * u - 1.0) * kAmp;
}

uint64_t tensor_key(uint64_t seed, const std::string& hf_name) {
  return mix(seed ^ name_hash(hf_name));
}

}  // namespace

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> p = {
      {"llama-3.1-8b", "Llama 3.1 8B shapes (GQA 32/8, llama3 rope scaling)",
       llama_config(4096, 14336, 32, 32, 8, 128256, 500000.0, 131072, false, 8.0, 8192)},
      {"llama-3.2-1b", "Llama 3.2 1B shapes (tied embeddings)",
       llama_config(2048, 8192, 16, 32, 8, 128256, 500000.0, 131072, true, 32.0, 8192)},
      {"qwen3-8b", "Qwen3 8B shapes",
       qwen3_config(4096, 12288, 36, 32, 8, 128, 151936, 40960, false)},
      {"qwen3-0.6b", "Qwen3 0.6B shapes (tied embeddings)",
       qwen3_config(1024, 3072, 28, 16, 8, 128, 151936, 40960, true)},
      {"qwen3-30b-a3b", "Qwen3 30B-A3B shapes (128 experts, top-8)",
       qwen3_moe_config(2048, 48, 32, 4, 128, 128, 8, 768, 151936)},
      {"qwen3.5-27b",
       "Qwen3.5 27B text shapes (64 layers, 3 Gated-DeltaNet : 1 gated attention; GDN heads "
       "16/48 from public descriptions)",
       qwen3_5_config(5120, 17408, 64, 24, 4, 256, 16, 48, 0, 0, 0, 248320)},
      {"qwen3.5-35b-a3b", "Qwen3.5 35B-A3B text shapes (hybrid, 256 experts, top-8, shared expert)",
       qwen3_5_config(2048, 0, 40, 16, 2, 256, 16, 32, 256, 8, 512, 248320)},
      {"tiny-qwen3.5-moe", "a 4-layer Qwen3.5-MoE hybrid for tests",
       qwen3_5_config(64, 0, 4, 4, 2, 32, 2, 4, 8, 2, 32, 256)},
      {"tiny-llama", "a 2-layer Llama for tests",
       llama_config(64, 128, 2, 4, 2, 256, 10000.0, 512, false, 0.0, 0)},
      {"tiny-qwen3", "a 2-layer Qwen3 for tests",
       qwen3_config(64, 128, 2, 4, 2, 32, 256, 512, true)},
  };
  return p;
}

const SynthPreset& synth_preset(const std::string& name) {
  std::string names;
  for (const SynthPreset& p : synth_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  fail("[synth] unknown preset '{}' (presets: {})", name, names);
}

void synth_write(const SynthPreset& preset, DType dtype, const std::string& out_dir,
                 uint64_t seed) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    fail("[synth] dtype {} is not supported (f32, f16, bf16)", dtype_name(dtype));
  const ojson& c = preset.config;
  const std::string type = c["model_type"];
  const bool qwen3 = type != "llama", hybrid = c.contains("layer_types");
  const bool zero_centred = hybrid;  // Qwen3.5 norms scale by (1 + w): store w = 0
  const int64_t E = c["hidden_size"], L = c["num_hidden_layers"], H = c["num_attention_heads"],
                Hkv = c["num_key_value_heads"], D = c["head_dim"], V = c["vocab_size"],
                F = c.value("intermediate_size", int64_t(0)),
                n_experts = c.value("num_experts", int64_t(0)),
                Fe = c.value("moe_intermediate_size", int64_t(0)),
                Fs = c.value("shared_expert_intermediate_size", int64_t(0));
  std::vector<io::TensorToWrite> ts;
  auto filled = [&](const std::string& name, std::vector<int64_t> shape, float value) {
    ts.push_back({name, dtype, std::move(shape), [dtype, value](int64_t, int64_t cnt, uint8_t* out) {
                    const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(value) : f32_to_f16(value);
                    for (int64_t i = 0; i < cnt; ++i) {
                      if (dtype == DType::F32)
                        std::memcpy(out + 4 * i, &value, 4);
                      else
                        std::memcpy(out + 2 * i, &h, 2);
                    }
                  }});
  };
  auto random = [&](const std::string& name, std::vector<int64_t> shape) {
    const uint64_t key = tensor_key(seed, name);
    ts.push_back({name, dtype, std::move(shape), [key, dtype](int64_t first, int64_t n, uint8_t* out) {
                    for (int64_t i = 0; i < n; ++i) {
                      const float v = synth_value(key, first + i);
                      if (dtype == DType::F32)
                        std::memcpy(out + 4 * i, &v, 4);
                      else {
                        const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
                        std::memcpy(out + 2 * i, &h, 2);
                      }
                    }
                  }});
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    random(name, {rows, cols});
  };
  auto norm = [&](const std::string& name, int64_t n) {
    filled(name, {n}, zero_centred ? 0.0f : 1.0f);
  };
  matrix("model.embed_tokens.weight", V, E);
  norm("model.norm.weight", E);
  if (!c["tie_word_embeddings"].get<bool>()) matrix("lm_head.weight", V, E);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight", E);
    norm(p + "post_attention_layernorm.weight", E);
    if (hybrid && c["layer_types"][size_t(l)] == "linear_attention") {
      const int64_t Hk = c["linear_num_key_heads"], Hv = c["linear_num_value_heads"],
                    Dk = c["linear_key_head_dim"], Dv = c["linear_value_head_dim"],
                    K = c["linear_conv_kernel_dim"], C = 2 * Hk * Dk + Hv * Dv;
      const std::string a = p + "linear_attn.";
      matrix(a + "in_proj_qkv.weight", C, E);
      matrix(a + "in_proj_z.weight", Hv * Dv, E);
      matrix(a + "in_proj_b.weight", Hv, E);
      matrix(a + "in_proj_a.weight", Hv, E);
      random(a + "conv1d.weight", {C, 1, K});
      random(a + "A_log", {Hv});
      random(a + "dt_bias", {Hv});
      filled(a + "norm.weight", {Dv}, 1.0f);
      matrix(a + "out_proj.weight", E, Hv * Dv);
    } else {
      matrix(p + "self_attn.q_proj.weight", (hybrid ? 2 : 1) * H * D, E);
      matrix(p + "self_attn.k_proj.weight", Hkv * D, E);
      matrix(p + "self_attn.v_proj.weight", Hkv * D, E);
      matrix(p + "self_attn.o_proj.weight", E, H * D);
      if (qwen3) {
        norm(p + "self_attn.q_norm.weight", D);
        norm(p + "self_attn.k_norm.weight", D);
      }
    }
    if (n_experts > 0) {
      matrix(p + "mlp.gate.weight", n_experts, E);
      for (int64_t e = 0; e < n_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        matrix(x + "gate_proj.weight", Fe, E);
        matrix(x + "up_proj.weight", Fe, E);
        matrix(x + "down_proj.weight", E, Fe);
      }
      if (Fs > 0) {
        matrix(p + "mlp.shared_expert.gate_proj.weight", Fs, E);
        matrix(p + "mlp.shared_expert.up_proj.weight", Fs, E);
        matrix(p + "mlp.shared_expert.down_proj.weight", E, Fs);
        matrix(p + "mlp.shared_expert_gate.weight", 1, E);
      }
    } else {
      matrix(p + "mlp.gate_proj.weight", F, E);
      matrix(p + "mlp.up_proj.weight", F, E);
      matrix(p + "mlp.down_proj.weight", E, F);
    }
  }
  std::filesystem::create_directories(out_dir);
  ojson cfg = c;
  cfg["torch_dtype"] = dtype == DType::F32   ? "float32"
                       : dtype == DType::F16 ? "float16"
                                             : "bfloat16";
  std::ofstream(out_dir + "/config.json") << cfg.dump(2) << "\n";
  const ojson gen = {{"bos_token_id", c["bos_token_id"]}, {"eos_token_id", c["eos_token_id"]}};
  std::ofstream(out_dir + "/generation_config.json") << gen.dump(2) << "\n";
  io::safetensors_write(out_dir + "/model.safetensors", std::move(ts),
                        {{"format", "pt"}, {"basalt_synth", preset.name}});
}

void synth_write_gguf(const SynthPreset& preset, const GgufScheme& scheme,
                      const std::string& out_file, uint64_t seed, int threads) {
  const std::string type = preset.config["model_type"];
  if (type != "llama" && type != "qwen3")
    fail("[synth] preset '{}' ({}): GGUF output is only written for Llama and Qwen3 models",
         preset.name, type);
  const ModelConfig c = gguf_config_from_hf(preset.config, preset.name);
  // The values synth_write stores, by HF name: norm weights 1, the rest random.
  auto hf = [seed](const std::string& name, int64_t first, int64_t n, int64_t cols, float* out) {
    if (name.ends_with("norm.weight")) return std::fill(out, out + n * cols, 1.0f);
    const uint64_t key = tensor_key(seed, name);
    for (int64_t i = 0; i < n * cols; ++i) out[i] = synth_value(key, first * cols + i);
  };
  const auto sources = gguf_sources_from_hf(c, hf, [](const std::string&) { return false; });
  io::GgufMetadata meta = gguf_model_metadata(c, preset.name, scheme.base);
  for (auto& kv : gguf_synthetic_vocab(c)) meta.push_back(std::move(kv));
  meta.emplace_back("basalt.synth.preset", io::gguf_str(preset.name));
  meta.emplace_back("basalt.synth.seed", io::gguf_u64(seed));
  const std::filesystem::path dir = std::filesystem::path(out_file).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  gguf_write_model(out_file, std::move(meta), sources, scheme, threads);
}

}  // namespace basalt
