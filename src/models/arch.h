// What an architecture file provides: how to read its config (HF config.json or GGUF
// metadata) into a ModelConfig. Tensor naming and the forward pass are shared
// (models/loader.cpp, models/transformer.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "models/model.h"

namespace basalt::models {

struct ArchSpec {
  std::string name;                     // "llama"
  std::vector<std::string> hf_classes;  // "LlamaForCausalLM"
  std::string gguf_arch;                // general.architecture value ("" and from_gguf null:
                                        // no GGUF reader)
  void (*from_hf)(const nlohmann::json& config, const std::string& file, ModelConfig& c);
  void (*from_gguf)(const io::GgufFile& g, ModelConfig& c);
};

const ArchSpec& arch_llama();
const ArchSpec& arch_qwen3();
const ArchSpec& arch_qwen3_moe();
const ArchSpec& arch_qwen3_next();
const ArchSpec& arch_qwen3_5();
const std::vector<const ArchSpec*>& arch_all();

// Shared config readers. Required keys missing or of the wrong type give
// "[config] FILE: missing key 'hidden_size'" / "... key 'x' must be an integer".
int64_t cfg_int(const nlohmann::json& c, const char* key, const std::string& file);
int64_t cfg_int_or(const nlohmann::json& c, const char* key, int64_t dflt, const std::string& file);
double cfg_num_or(const nlohmann::json& c, const char* key, double dflt, const std::string& file);
// An id or a list of ids (eos_token_id is either); empty when absent.
std::vector<int32_t> cfg_token_ids(const nlohmann::json& c, const char* key);
bool cfg_bool_or(const nlohmann::json& c, const char* key, bool dflt, const std::string& file);
// The keys every Llama-family config.json shares (sizes, heads, eps, rope incl. scaling).
void hf_common(const nlohmann::json& config, const std::string& file, ModelConfig& c);
// The same from GGUF "{arch}.*" keys.
void gguf_common(const io::GgufFile& g, const std::string& arch, ModelConfig& c);
// Tensor `name` of `ts` as f32 values, checked to exist, to have `shape` and a float dtype;
// errors begin "[tag] file: " (what the model binder reads norms and vectors with).
std::vector<float> tensor_floats(const io::TensorStore& ts, const std::string& name,
                                 const std::vector<int64_t>& shape, const std::string& tag,
                                 const std::string& file);

}  // namespace basalt::models
