// Synthetic checkpoints: random weights in the real shapes of well-known models, written as a
// Hugging Face directory (config.json, generation_config.json, model.safetensors), so
// benchmarks need no download. Weights: uniform with std 0.02 (norm weights 1), from a
// counter-based generator keyed by (seed, tensor, element): the same bytes on every machine.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"

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

}  // namespace basalt
