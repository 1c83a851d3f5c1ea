// Writing Llama-family models (llama, qwen3) as GGUF files that basalt's loader and llama.cpp
// both read: llama.cpp's tensor names and metadata keys, q/k rows of llama permuted for its
// interleaved RoPE (as convert_hf_to_gguf.py does), 1-D tensors in F32, matrices in the asked
// type, encoded on several threads while streamed to disk. Used by `basalt synth --format
// gguf` and `basalt quantize`; docs/formats.md lists the keys.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf_write.h"
#include "models/model.h"

namespace basalt {

// A tensor to write, produced as f32 rows.
struct GgufSource {
  std::string name;            // GGUF name: "blk.0.attn_q.weight"
  std::vector<int64_t> shape;  // row-major: [rows, cols] or [n]
  // Rows [first, first + n) as f32 into out[n · cols] (1-D: first = 0, n = 1, cols = shape[0]).
  // Called from several threads at once, for disjoint rows.
  std::function<void(int64_t first, int64_t n, float* out)> rows;
  std::string from;  // the HF tensor it is made from ("" if computed), for checks and messages
};

// "f32", "f16", "bf16", "q8_0", "q4_k", "q5_k", "q6_k" (the types written here) → DType;
// false otherwise.
bool gguf_dtype_parse(const std::string& name, DType* out);
// The type a tensor is stored as when `want` is asked for matrices: 1-D tensors F32; a matrix
// `want` if its rows are whole blocks of it, else Q8_0 if whole blocks of 32, else F16
// (llama.cpp's quantize falls back similarly, to types basalt cannot encode).
DType gguf_storage_type(DType want, const std::vector<int64_t>& shape);
// general.file_type (llama_ftype) for a file whose matrices are `t`: 0 F32, 1 F16, 7 Q8_0,
// 14 Q4_K, 16 Q5_K, 18 Q6_K (llama.cpp's "Q4_K - Small", "Q5_K - Small", "Q6_K"; here every
// matrix has the type, like llama-quantize --pure), 32 BF16.
uint32_t gguf_file_type(DType t);

// How a file's tensors are typed: every matrix `base` (like llama-quantize --pure), or, with
// mixed, llama.cpp's "_M" presets over base Q4_K (Q4_K_M) or Q5_K (Q5_K_M): Q6_K for the output
// matrix (the token embedding when the model ties them) and for attn_v and ffn_down of the
// layers gguf_more_bits_layer picks; every other matrix base. Implicit from a DType (pure).
struct GgufScheme {
  DType base = DType::F16;
  bool mixed = false;
  GgufScheme(DType t = DType::F16, bool m = false) : base(t), mixed(m) {}  // NOLINT
};
// gguf_dtype_parse's names (pure) plus "q4_k_m" and "q5_k_m"; false otherwise.
bool gguf_scheme_parse(const std::string& name, GgufScheme* out);
// The layer of a GGUF tensor name ("blk.12.attn_v.weight" -> 12), -1 for the others.
int64_t gguf_layer_of(const std::string& name);
// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer
// between them (layer - n/8 ≡ 2 mod 3), integer division as there.
bool gguf_more_bits_layer(int64_t layer, int64_t n_layers);
// The type tensor `name` (GGUF name, shape) is stored as under s in a model of n_layers layers
// (tied: no output.weight, the token embedding is the output matrix): the scheme's choice, then
// gguf_storage_type's fallbacks for rows that are not whole blocks and for 1-D tensors.
DType gguf_tensor_type(const GgufScheme& s, const std::string& name,
                       const std::vector<int64_t>& shape, int64_t n_layers, bool tied);
// general.file_type of a scheme: gguf_file_type(base) when pure; 15 Q4_K_M, 17 Q5_K_M.
uint32_t gguf_file_type(const GgufScheme& s);

// ModelConfig of an HF config.json (architectures[0] picks llama or qwen3).
ModelConfig gguf_config_from_hf(const nlohmann::json& config, const std::string& file);
// general.* and {arch}.* keys for c (no tokenizer keys); name goes to general.name.
io::GgufMetadata gguf_model_metadata(const ModelConfig& c, const std::string& name, DType dtype);
// A byte-level BPE vocabulary ("gpt2", pre "default") of exactly c.vocab tokens for models
// without a tokenizer: ids 0..255 the GPT-2 byte symbols, then letter pairs (with their merges),
// then "[PAD<id>]"; c.bos_id and c.eos_ids ≥ 256 become control tokens "<|synth_bos|>",
// "<|synth_eos|>" ("<|synth_eos_1|>", ...). llama adds BOS, qwen3 does not.
io::GgufMetadata gguf_synthetic_vocab(const ModelConfig& c);

// The tensors of an HF-layout model in GGUF form. hf(name, first, n, cols, out) gives rows
// [first, first + n) of an HF tensor ("model.layers.0.self_attn.q_proj.weight"; 1-D tensors are
// one row) as f32, from several threads at once; has(name) says whether an optional one exists.
// Renames, permutes q/k rows (and biases) of llama, omits lm_head when tied, and adds
// rope_freqs.weight for llama3 rope scaling (the factors convert_hf_to_gguf.py writes).
using HfRows = std::function<void(const std::string& name, int64_t first, int64_t n, int64_t cols,
                                  float* out)>;
std::vector<GgufSource> gguf_sources_from_hf(const ModelConfig& c, const HfRows& hf,
                                             const std::function<bool(const std::string&)>& has);
// Every tensor of a checkpoint basalt loads (HF directory or GGUF), as GGUF sources: HF via
// gguf_sources_from_hf (after checking each shape against c), GGUF tensors as they are. The
// sources read ck's tensors: keep ck alive while they are used.
std::vector<GgufSource> gguf_sources_from_checkpoint(const io::Checkpoint& ck,
                                                     const ModelConfig& c);

// Writes the file: sources stored as gguf_tensor_type(scheme, ...) (the layer count and whether
// the embedding is tied read from the sources' names), encoded on `threads` threads (≤ 0: all
// cores); metadata gets general.file_type and general.quantization_version (replacing any
// given).
// progress(i, n, source, type) is called as source i of n starts.
using GgufProgress = std::function<void(size_t i, size_t n, const GgufSource& s, DType type)>;
void gguf_write_model(const std::string& path, io::GgufMetadata metadata,
                      const std::vector<GgufSource>& sources, const GgufScheme& scheme,
                      int threads,
                      const GgufProgress& progress = {});

}  // namespace basalt
