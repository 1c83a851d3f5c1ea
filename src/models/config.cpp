// Config readers shared by the architecture files: HF config.json keys and GGUF metadata.
#include <cmath>

#include "core/error.h"
#include "models/arch.h"

namespace basalt::models {

using nlohmann::json;

int64_t cfg_int(const json& c, const char* key, const std::string& file) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) fail("[config] {}: missing key '{}'", file, key);
  if (!it->is_number_integer()) fail("[config] {}: key '{}' must be an integer", file, key);
  return it->get<int64_t>();
}

int64_t cfg_int_or(const json& c, const char* key, int64_t dflt, const std::string& file) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return dflt;
  if (!it->is_number_integer()) fail("[config] {}: key '{}' must be an integer", file, key);
  return it->get<int64_t>();
}

double cfg_num_or(const json& c, const char* key, double dflt, const std::string& file) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return dflt;
  if (!it->is_number()) fail("[config] {}: key '{}' must be a number", file, key);
  return it->get<double>();
}

bool cfg_bool_or(const json& c, const char* key, bool dflt, const std::string& file) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) fail("[config] {}: key '{}' must be true or false", file, key);
  return it->get<bool>();
}

std::vector<int32_t> cfg_token_ids(const json& c, const char* key) {
  std::vector<int32_t> out;
  auto it = c.find(key);
  if (it == c.end()) return out;
  if (it->is_number_integer()) out.push_back(it->get<int32_t>());
  if (it->is_array())
    for (const auto& e : *it)
      if (e.is_number_integer()) out.push_back(e.get<int32_t>());
  return out;
}

namespace {

// rope_scaling (transformers ≤ 4) or rope_parameters (transformers 5).
void hf_rope(const json& config, const std::string& file, ModelConfig& c) {
  const json* params = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = config.find(key);
    if (it != config.end() && it->is_object()) {
      params = &*it;
      break;
    }
  }
  c.rope.theta = float(cfg_num_or(config, "rope_theta", 10000.0, file));
  if (!params) return;
  c.rope.theta = float(cfg_num_or(*params, "rope_theta", c.rope.theta, file));
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = params->find(key);
    if (it != params->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type == "default") return;
  c.rope.factor = float(cfg_num_or(*params, "factor", 1.0, file));
  if (type == "linear") {
    c.rope.scaling = "linear";
  } else if (type == "llama3") {
    c.rope.scaling = "llama3";
    c.rope.low_freq_factor = float(cfg_num_or(*params, "low_freq_factor", 1.0, file));
    c.rope.high_freq_factor = float(cfg_num_or(*params, "high_freq_factor", 4.0, file));
    c.rope.original_max_position = cfg_int(*params, "original_max_position_embeddings", file);
  } else {
    fail(
        "[config] {}: rope scaling type '{}' is not supported (supported: default, linear, "
        "llama3)",
        file, type);
  }
}

}  // namespace

void hf_common(const json& config, const std::string& file, ModelConfig& c) {
  c.vocab = cfg_int(config, "vocab_size", file);
  c.hidden = cfg_int(config, "hidden_size", file);
  c.n_layers = cfg_int(config, "num_hidden_layers", file);
  c.n_heads = cfg_int(config, "num_attention_heads", file);
  c.n_kv_heads = cfg_int_or(config, "num_key_value_heads", c.n_heads, file);
  c.intermediate = cfg_int_or(config, "intermediate_size", 0, file);  // MoE-only models: none
  c.max_context = cfg_int_or(config, "max_position_embeddings", 2048, file);
  c.rms_eps = float(cfg_num_or(config, "rms_norm_eps", 1e-6, file));
  if (c.n_heads <= 0 || c.hidden <= 0 || c.n_layers <= 0 || c.vocab <= 0 || c.intermediate < 0)
    fail("[config] {}: sizes must be positive", file);
  c.head_dim = cfg_int_or(config, "head_dim", c.hidden / c.n_heads, file);
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    fail("[config] {}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
         file, c.n_heads, c.n_kv_heads);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    fail("[config] {}: head_dim {} must be positive and even", file, c.head_dim);
  if (auto it = config.find("hidden_act");
      it != config.end() && it->is_string() && it->get<std::string>() != "silu")
    fail("[config] {}: hidden_act '{}' is not supported (SwiGLU MLPs use silu)", file,
         it->get<std::string>());
  c.rope.dim = c.head_dim;
  hf_rope(config, file, c);
  c.eos_ids = cfg_token_ids(config, "eos_token_id");
  if (auto it = config.find("bos_token_id"); it != config.end() && it->is_number_integer())
    c.bos_id = it->get<int32_t>();
}

void gguf_common(const io::GgufFile& g, const std::string& arch, ModelConfig& c) {
  auto key = [&](const char* k) { return arch + "." + k; };
  auto geti = [&](const char* k) { return g.get(key(k)).as_int(); };
  auto geti_or = [&](const char* k, int64_t d) {
    const io::GgufValue* v = g.find(key(k));
    return v ? v->as_int() : d;
  };
  auto getf_or = [&](const char* k, double d) {
    const io::GgufValue* v = g.find(key(k));
    return v ? v->as_float() : d;
  };
  c.hidden = geti("embedding_length");
  c.n_layers = geti("block_count");
  c.intermediate = geti("feed_forward_length");
  c.n_heads = geti("attention.head_count");
  c.n_kv_heads = geti_or("attention.head_count_kv", c.n_heads);
  c.max_context = geti_or("context_length", 2048);
  c.rms_eps = float(getf_or("attention.layer_norm_rms_epsilon", 1e-5));
  if (c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    fail("[gguf] {}: head_count {} is not a multiple of head_count_kv {}", g.name, c.n_heads,
         c.n_kv_heads);
  c.head_dim = geti_or("attention.key_length", c.hidden / c.n_heads);
  c.rope.dim = geti_or("rope.dimension_count", c.head_dim);
  c.rope.theta = float(getf_or("rope.freq_base", 10000.0));
  if (const io::GgufValue* t = g.find(key("rope.scaling.type"))) {
    const std::string& type = t->as_string();
    if (type == "linear") {
      c.rope.scaling = "linear";
      c.rope.factor = float(getf_or("rope.scaling.factor", 1.0));
    } else if (type != "none") {
      fail("[gguf] {}: rope scaling type '{}' is not supported", g.name, type);
    }
  }
  if (const io::GgufValue* v = g.find("tokenizer.ggml.tokens"))
    c.vocab = int64_t(v->as_array().size());
  if (const io::GgufValue* v = g.find("tokenizer.ggml.eos_token_id"))
    c.eos_ids.push_back(int32_t(v->as_int()));
  if (const io::GgufValue* v = g.find("tokenizer.ggml.eot_token_id"))
    c.eos_ids.push_back(int32_t(v->as_int()));
  if (const io::GgufValue* v = g.find("tokenizer.ggml.bos_token_id"))
    c.bos_id = int32_t(v->as_int());
}

}  // namespace basalt::models
