// The quantisation a HF checkpoint declares (hf_quant_config.json and/or config.json's
// quantization_config) and how its scaled weight matrices are bound (docs/formats.md):
//   ModelOpt NVFP4   weight U8 [N, K/2], weight_scale F8_E4M3 [N, K/16], weight_scale_2 scalar
//   ModelOpt FP8     weight F8_E4M3 [N, K], weight_scale scalar
//   compressed-tensors FP8   weight F8_E4M3, weight_scale [N, 1] (channel) or scalar (tensor)
//   fp8 (Qwen3 / DeepSeek)   weight F8_E4M3, weight_scale_inv [ceil(N/B), ceil(K/B)] (multiplies)
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace basalt::models {

enum class QuantMethod { None, ModelOptNvfp4, ModelOptFp8, CompressedFp8, Fp8Block };

struct QuantConfig {
  QuantMethod method = QuantMethod::None;
  int64_t block = 0;                  // Fp8Block: the square block edge (128)
  std::vector<std::string> excluded;  // module names or patterns kept unquantised ("lm_head")
  std::string source;                 // the file that declared it, for messages
  std::string describe() const;       // "ModelOpt NVFP4 (group 16)", ...
};

// Parses what the checkpoint declares; throws basalt::Error naming the file for an unknown
// quant_algo / quant_method / format, a group size other than 16 for NVFP4, non-square blocks.
// config: config.json; hf_quant: hf_quant_config.json (empty object when absent).
QuantConfig quant_config_parse(const nlohmann::json& config, const nlohmann::json& hf_quant,
                               const std::string& dir);

}  // namespace basalt::models
