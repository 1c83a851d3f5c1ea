// Synthetic checkpoints: random weights in the real shapes of well-known models, written as a
// Hugging Face directory (config.json, generation_config.json, model.safetensors) or as one
// GGUF file, so benchmarks (ours and llama.cpp's llama-bench) need no download. Weights: uniform
// with std 0.02 (norm weights 1), from a counter-based generator keyed by (seed, tensor, element):
// the same bytes on every machine.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/gguf_export.h"

namespace basalt {

struct SynthPreset {
  std::string name;
  std::string description;
  nlohmann::ordered_json config;  // as transformers writes config.json
};

const std::vector<SynthPreset>& synth_presets();
const SynthPreset& synth_preset(const std::string& name);  // throws listing the names
// Writes the checkpoint into out_dir (created). dtype: F32, F16 or BF16.
void synth_write(const SynthPreset& preset, DType dtype, const std::string& out_dir, uint64_t seed);
// The same weights as one GGUF file (models/gguf_export.h: llama.cpp's names and keys, q/k of
// llama permuted): matrices as the scheme says (a DType: every matrix F32, F16, BF16, Q8_0,
// Q4_K, Q5_K or Q6_K; or Q4_K_M / Q5_K_M; rows that are not whole blocks fall back, see
// gguf_storage_type), 1-D tensors F32, and a synthetic byte-level vocabulary
// (gguf_synthetic_vocab). Encoded on `threads` threads (≤ 0: all cores).
void synth_write_gguf(const SynthPreset& preset, const GgufScheme& scheme,
                      const std::string& out_file, uint64_t seed, int threads = 0);

}  // namespace basalt
