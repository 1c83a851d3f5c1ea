// `basalt quantize --to nvfp4|fp8|fp8-block`: an HF checkpoint directory rewritten with the
// decoder's linear weights in the layouts real quantised checkpoints use, so that basalt, vLLM
// and TensorRT-LLM read it like a downloaded one (models/quant_config.h, docs/formats.md):
//   nvfp4      ModelOpt NVFP4: weight U8 [N, K/2], weight_scale E4M3 [N, K/16],
//              weight_scale_2 and input_scale f32 scalars; hf_quant_config.json + config.json's
//              quantization_config (quant_method "modelopt")
//   fp8        ModelOpt FP8 per tensor: weight E4M3, weight_scale and input_scale f32 scalars
//   fp8-block  Qwen3-FP8 / DeepSeek layout: weight E4M3, weight_scale_inv f32 per 128×128 block
// Scales: the amax rules of ops/ref/scaled.h. input_scale is written as 1.0 (basalt quantises
// weights only; activations are not calibrated). Quantised: every 2-D `*_proj.weight` under
// `.layers.` (attention, MLP, experts stored one per tensor, shared expert, Gated-DeltaNet
// projections); kept as they are: embeddings, lm_head, norms, routers, the shared-expert gate,
// fused 3-D expert stacks, mtp.* and vision tensors, and (NVFP4) matrices whose K is not a
// multiple of 16 — the kept linear modules are listed in exclude_modules.
#pragma once
#include <functional>
#include <string>

#include "io/checkpoint.h"

namespace basalt {

enum class HfQuantTarget { Nvfp4, Fp8, Fp8Block };

// Parses "nvfp4", "fp8", "fp8-block"; false otherwise.
bool hf_quant_target_parse(const std::string& s, HfQuantTarget* out);

struct HfQuantStats {
  int64_t quantised = 0, kept = 0;  // tensors
  int64_t bytes_in = 0, bytes_out = 0;
};

// Writes out_dir (created; existing files of the same names replaced). ck: an HF directory or
// the embedded model; throws basalt::Error for GGUF input, an already quantised checkpoint, or
// I/O errors. progress(i, n, name) is called before each quantised tensor.
HfQuantStats hf_quant_write(
    const io::Checkpoint& ck, HfQuantTarget target, const std::string& out_dir, int threads,
    const std::function<void(size_t, size_t, const std::string&)>& progress);

}  // namespace basalt
