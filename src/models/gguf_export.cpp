#include "models/gguf_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "models/arch.h"
#include "ops/ref/quantize.h"
#include "ops/ref/ref_ops.h"

namespace basalt {

namespace {

using io::GgufMetadata;

// Row r of a GGUF q/k matrix of llama comes from HF row perm_qk(r): convert_hf_to_gguf.py's
// permute, which makes each head's rotate_half pairs (j, j + D/2) adjacent (2j, 2j + 1).
int64_t perm_qk(int64_t r, int64_t head_dim) {
  const int64_t h = r / head_dim, i = r % head_dim;
  return h * head_dim + (i % 2) * (head_dim / 2) + i / 2;
}

// convert_hf_to_gguf.py's llama3 rope factors (f32 arithmetic as there): the GGUF reader divides
// the default inverse frequencies by them.
std::vector<float> llama3_rope_factors(const RopeConfig& r) {
  std::vector<float> out;
  const float old_ctx = float(r.original_max_position);
  const float low_wavelen = old_ctx / r.low_freq_factor;
  const float high_wavelen = old_ctx / r.high_freq_factor;
  for (int64_t i = 0; i < r.dim / 2; ++i) {
    const float freq = 1.0f / std::pow(r.theta, float(2 * i) / float(r.dim));
    const float wavelen = float(2.0 * M_PI) / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(r.factor);
    } else {
      const float smooth =
          (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      out.push_back(1.0f / ((1.0f - smooth) / r.factor + smooth));
    }
  }
  return out;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order.
std::vector<std::string> byte_symbols() {
  std::vector<std::string> out(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    out[size_t(b)] = s;
  }
  return out;
}

// Rows of a checkpoint tensor (any float dtype basalt reads, GGUF blocks included) as f32.
void view_rows(const TensorView& t, int64_t first, int64_t n, float* out) {
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  if (ref::weight_dtype_supported(t.dtype)) {
    const WeightRef w{t.dtype, rows, cols, t.data};
    for (int64_t r = 0; r < n; ++r) ref::weight_row_f32(w, first + r, out + r * cols);
    return;
  }
  if (!dtype_is_float(t.dtype))
    fail("[gguf] tensor '{}' has non-float dtype {}", t.name, dtype_name(t.dtype));
  for (int64_t i = 0; i < n * cols; ++i)
    out[i] = float(dtype_read_f64(t.dtype, t.data, first * cols + i));
}

}  // namespace

bool gguf_dtype_parse(const std::string& name, DType* out) {
  static const std::pair<const char*, DType> kNames[] = {{"f32", DType::F32},
                                                         {"f16", DType::F16},
                                                         {"bf16", DType::BF16},
                                                         {"q8_0", DType::Q8_0},
                                                         {"q4_k", DType::Q4_K},
                                                         {"q5_k", DType::Q5_K},
                                                         {"q6_k", DType::Q6_K}};
  for (const auto& [n, t] : kNames)
    if (name == n) return *out = t, true;
  return false;
}

DType gguf_storage_type(DType want, const std::vector<int64_t>& shape) {
  if (shape.size() < 2) return DType::F32;
  const int64_t cols = shape.back();
  if (cols % dtype_block_elems(want) == 0) return want;
  return cols % 32 == 0 ? DType::Q8_0 : DType::F16;
}

uint32_t gguf_file_type(DType t) {
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q8_0:
      return 7;
    case DType::Q4_K:
      return 14;
    case DType::Q5_K:
      return 16;
    case DType::Q6_K:
      return 18;
    case DType::BF16:
      return 32;
    default:
      fail("[gguf] no GGUF file type for {} (f32, f16, bf16, q8_0, q4_k, q5_k, q6_k)",
           dtype_name(t));
  }
}

bool gguf_scheme_parse(const std::string& name, GgufScheme* out) {
  if (DType t; gguf_dtype_parse(name, &t)) return *out = GgufScheme(t), true;
  if (name == "q4_k_m") return *out = GgufScheme(DType::Q4_K, true), true;
  if (name == "q5_k_m") return *out = GgufScheme(DType::Q5_K, true), true;
  return false;
}

int64_t gguf_layer_of(const std::string& name) {
  return name.rfind("blk.", 0) == 0 ? std::atoll(name.c_str() + 4) : -1;
}

bool gguf_more_bits_layer(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

DType gguf_tensor_type(const GgufScheme& s, const std::string& name,
                       const std::vector<int64_t>& shape, int64_t n_layers, bool tied) {
  DType want = s.base;
  if (s.mixed && shape.size() >= 2) {
    const bool output = name == "output.weight" || (tied && name == "token_embd.weight");
    const int64_t layer = gguf_layer_of(name);
    const bool more = layer >= 0 && (name.ends_with(".attn_v.weight") ||
                                     name.ends_with(".ffn_down.weight")) &&
                      gguf_more_bits_layer(layer, n_layers);
    if (output || more) want = DType::Q6_K;
  }
  return gguf_storage_type(want, shape);
}

uint32_t gguf_file_type(const GgufScheme& s) {
  if (!s.mixed) return gguf_file_type(s.base);
  if (s.base == DType::Q4_K) return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  if (s.base == DType::Q5_K) return 17;  // LLAMA_FTYPE_MOSTLY_Q5_K_M
  fail("[gguf] no mixed preset over {} (q4_k_m, q5_k_m)", dtype_name(s.base));
}

ModelConfig gguf_config_from_hf(const nlohmann::json& config, const std::string& file) {
  std::string cls;
  if (auto it = config.find("architectures");
      it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    cls = (*it)[0].get<std::string>();
  else
    fail("[config] {}: missing key 'architectures'", file);
  for (const models::ArchSpec* s : models::arch_all())
    for (const std::string& n : s->hf_classes)
      if (n == cls) {
        ModelConfig c;
        c.hf_class = cls;
        s->from_hf(config, file, c);
        return c;
      }
  fail("[models] {}: unknown architecture '{}' (supported: LlamaForCausalLM, Qwen3ForCausalLM)",
       file, cls);
}

GgufMetadata gguf_model_metadata(const ModelConfig& c, const std::string& name, DType dtype) {
  const std::string& a = c.arch;
  GgufMetadata m = {
      {"general.architecture", io::gguf_str(a)},
      {"general.type", io::gguf_str("model")},
      {"general.name", io::gguf_str(name)},
      {"general.file_type", io::gguf_u32(gguf_file_type(dtype))},
      {a + ".vocab_size", io::gguf_u32(uint32_t(c.vocab))},
      {a + ".context_length", io::gguf_u32(uint32_t(c.max_context))},
      {a + ".embedding_length", io::gguf_u32(uint32_t(c.hidden))},
      {a + ".block_count", io::gguf_u32(uint32_t(c.n_layers))},
      {a + ".feed_forward_length", io::gguf_u32(uint32_t(c.intermediate))},
      {a + ".attention.head_count", io::gguf_u32(uint32_t(c.n_heads))},
      {a + ".attention.head_count_kv", io::gguf_u32(uint32_t(c.n_kv_heads))},
      {a + ".attention.key_length", io::gguf_u32(uint32_t(c.head_dim))},
      {a + ".attention.value_length", io::gguf_u32(uint32_t(c.head_dim))},
      {a + ".attention.layer_norm_rms_epsilon", io::gguf_f32(c.rms_eps)},
      {a + ".rope.dimension_count", io::gguf_u32(uint32_t(c.rope.dim))},
      {a + ".rope.freq_base", io::gguf_f32(c.rope.theta)},
  };
  if (c.rope.scaling == "linear") {
    m.emplace_back(a + ".rope.scaling.type", io::gguf_str("linear"));
    m.emplace_back(a + ".rope.scaling.factor", io::gguf_f32(c.rope.factor));
  }
  return m;
}

GgufMetadata gguf_synthetic_vocab(const ModelConfig& c) {
  const int64_t V = c.vocab;
  std::vector<std::string> tokens = byte_symbols();
  tokens.resize(size_t(std::max<int64_t>(V, 256)));
  std::vector<int32_t> types(tokens.size(), 1);  // NORMAL
  std::vector<std::string> merges;
  std::vector<bool> special(tokens.size(), false);
  auto mark = [&](int32_t id, const std::string& text) {
    if (id >= 256 && id < V && !special[size_t(id)]) {
      special[size_t(id)] = true;
      tokens[size_t(id)] = text;
      types[size_t(id)] = 3;  // CONTROL
    }
  };
  mark(c.bos_id, "<|synth_bos|>");
  for (size_t i = 0; i < c.eos_ids.size(); ++i)
    mark(c.eos_ids[i], i == 0 ? "<|synth_eos|>" : fmt::format("<|synth_eos_{}|>", i));
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  size_t pair = 0;
  for (int64_t id = 256; id < V; ++id) {
    if (special[size_t(id)]) continue;
    if (pair < letters.size() * letters.size()) {
      const char x = letters[pair / letters.size()], y = letters[pair % letters.size()];
      tokens[size_t(id)] = std::string{x, y};
      merges.push_back(std::string{x, ' ', y});
      ++pair;
    } else {
      tokens[size_t(id)] = fmt::format("[PAD{}]", id);
    }
  }
  tokens.resize(size_t(V));
  types.resize(size_t(V));
  GgufMetadata m = {
      {"tokenizer.ggml.model", io::gguf_str("gpt2")},
      {"tokenizer.ggml.pre", io::gguf_str("default")},
      {"tokenizer.ggml.tokens", io::gguf_strs(tokens)},
      {"tokenizer.ggml.token_type", io::gguf_i32s(types)},
      {"tokenizer.ggml.merges", io::gguf_strs(merges)},
  };
  const bool bos = c.bos_id >= 0 && c.bos_id < V;
  if (bos) m.emplace_back("tokenizer.ggml.bos_token_id", io::gguf_u32(uint32_t(c.bos_id)));
  if (!c.eos_ids.empty() && c.eos_ids[0] >= 0 && c.eos_ids[0] < V)
    m.emplace_back("tokenizer.ggml.eos_token_id", io::gguf_u32(uint32_t(c.eos_ids[0])));
  m.emplace_back("tokenizer.ggml.add_bos_token", io::gguf_bool(bos && c.arch == "llama"));
  return m;
}

std::vector<GgufSource> gguf_sources_from_hf(const ModelConfig& c, const HfRows& hf,
                                             const std::function<bool(const std::string&)>& has) {
  const int64_t E = c.hidden, D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, F = c.intermediate,
                V = c.vocab;
  const bool permute = c.arch == "llama";  // qwen3 files keep HF's rotate_half layout
  std::vector<GgufSource> out;
  auto add = [&](std::string gname, std::string hname, std::vector<int64_t> shape) {
    const int64_t cols = shape.back();
    out.push_back(
        {std::move(gname), std::move(shape),
         [hf, hname, cols](int64_t first, int64_t n, float* o) { hf(hname, first, n, cols, o); },
         hname});
  };
  // q/k: rows permuted; their 1-D biases the same way.
  auto add_qk = [&](std::string gname, std::string hname, std::vector<int64_t> shape) {
    if (!permute) return add(std::move(gname), std::move(hname), std::move(shape));
    const bool bias = shape.size() == 1;
    const int64_t rows = shape[0], cols = bias ? 1 : shape[1];
    out.push_back({std::move(gname), shape,
                   [hf, hname, bias, cols, rows, D](int64_t first, int64_t n, float* o) {
                     if (bias) {  // one row of `rows` values
                       std::vector<float> v(static_cast<size_t>(rows));
                       hf(hname, 0, 1, rows, v.data());
                       for (int64_t r = 0; r < rows; ++r) o[r] = v[size_t(perm_qk(r, D))];
                       return;
                     }
                     for (int64_t r = 0; r < n; ++r)
                       hf(hname, perm_qk(first + r, D), 1, cols, o + r * cols);
                   },
                   hname});
  };
  add("token_embd.weight", "model.embed_tokens.weight", {V, E});
  if (c.rope.scaling == "llama3") {
    const std::vector<float> f = llama3_rope_factors(c.rope);
    out.push_back({"rope_freqs.weight",
                   {int64_t(f.size())},
                   [f](int64_t, int64_t, float* o) { std::copy(f.begin(), f.end(), o); },
                   ""});
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l), p = fmt::format("model.layers.{}.", l);
    add(b + "attn_norm.weight", p + "input_layernorm.weight", {E});
    add_qk(b + "attn_q.weight", p + "self_attn.q_proj.weight", {H * D, E});
    add_qk(b + "attn_k.weight", p + "self_attn.k_proj.weight", {Hkv * D, E});
    add(b + "attn_v.weight", p + "self_attn.v_proj.weight", {Hkv * D, E});
    add(b + "attn_output.weight", p + "self_attn.o_proj.weight", {E, H * D});
    if (c.attention_bias) {
      add_qk(b + "attn_q.bias", p + "self_attn.q_proj.bias", {H * D});
      add_qk(b + "attn_k.bias", p + "self_attn.k_proj.bias", {Hkv * D});
      add(b + "attn_v.bias", p + "self_attn.v_proj.bias", {Hkv * D});
      if (has(p + "self_attn.o_proj.bias"))
        add(b + "attn_output.bias", p + "self_attn.o_proj.bias", {E});
    }
    if (c.qk_norm) {
      add(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight", {D});
      add(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight", {D});
    }
    add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", {E});
    add(b + "ffn_gate.weight", p + "mlp.gate_proj.weight", {F, E});
    add(b + "ffn_up.weight", p + "mlp.up_proj.weight", {F, E});
    add(b + "ffn_down.weight", p + "mlp.down_proj.weight", {E, F});
  }
  add("output_norm.weight", "model.norm.weight", {E});
  if (!c.tied_embeddings) add("output.weight", "lm_head.weight", {V, E});
  return out;
}

std::vector<GgufSource> gguf_sources_from_checkpoint(const io::Checkpoint& ck,
                                                     const ModelConfig& c) {
  const io::TensorStore& ts = ck.tensors;
  if (ck.format == io::CheckpointFormat::Gguf) {
    // As stored (already renamed and permuted), blocks in numeric order.
    auto order = [](const std::string& n) {
      const int64_t blk = gguf_layer_of(n);
      const int group = n.rfind("token_embd", 0) == 0 || n.rfind("rope_freqs", 0) == 0 ? 0
                        : blk >= 0                                                     ? 1
                                                                                       : 2;
      return std::tuple(group, blk, n);
    };
    std::vector<std::string> names = ts.names();
    std::sort(names.begin(), names.end(),
              [&](const auto& a, const auto& b) { return order(a) < order(b); });
    std::vector<GgufSource> out;
    for (const std::string& n : names) {
      const TensorView* t = &ts.get(n);
      out.push_back({n, t->shape,
                     [t](int64_t first, int64_t k, float* o) { view_rows(*t, first, k, o); }, n});
    }
    return out;
  }
  std::vector<GgufSource> out = gguf_sources_from_hf(
      c,
      [&ts](const std::string& name, int64_t first, int64_t n, int64_t, float* o) {
        view_rows(ts.get(name), first, n, o);
      },
      [&ts](const std::string& name) { return ts.contains(name); });
  // Every tensor the file needs, checked against the config before anything is written.
  for (const GgufSource& s : out) {
    if (s.from.empty()) continue;
    const TensorView* t = ts.find(s.from);
    if (!t) fail("[gguf] {}: missing tensor '{}'", ck.path, s.from);
    if (t->shape != s.shape)
      fail("[gguf] {}: tensor '{}' has shape {}, the config implies {}", ck.path, s.from,
           shape_str(t->shape), shape_str(s.shape));
  }
  std::set<std::string> used;
  for (const GgufSource& s : out) used.insert(s.from);
  for (const std::string& n : ts.names())
    if (!used.count(n) && !(n == "lm_head.weight" && c.tied_embeddings) &&
        !n.ends_with("rotary_emb.inv_freq"))
      spdlog::warn("[gguf] {}: tensor '{}' is not written (basalt's models do not use it)", ck.path,
                   n);
  return out;
}

void gguf_write_model(const std::string& path, io::GgufMetadata metadata,
                      const std::vector<GgufSource>& sources, const GgufScheme& scheme,
                      int threads, const GgufProgress& progress) {
  if (!ref::quantize_supported(scheme.base))
    fail("[gguf] {}: cannot write matrices as {}", path, dtype_name(scheme.base));
  std::erase_if(metadata, [](const auto& kv) {
    return kv.first == "general.file_type" || kv.first == "general.quantization_version";
  });
  metadata.emplace_back("general.file_type", io::gguf_u32(gguf_file_type(scheme)));
  metadata.emplace_back("general.quantization_version", io::gguf_u32(2));  // GGML_QNT_VERSION
  int64_t n_layers = 0;
  bool tied = true;
  for (const GgufSource& s : sources) {
    n_layers = std::max(n_layers, gguf_layer_of(s.name) + 1);
    if (s.name == "output.weight") tied = false;
  }
  ThreadPool pool(threads);
  std::vector<io::TensorToWrite> ts;
  for (size_t i = 0; i < sources.size(); ++i) {
    const GgufSource& s = sources[i];
    const DType st = gguf_tensor_type(scheme, s.name, s.shape, n_layers, tied);
    const int64_t cols = s.shape.empty() ? 1 : s.shape.back();
    const size_t row_bytes = dtype_bytes(st, cols);
    ts.push_back({s.name, st, s.shape,
                  [&, i, st, cols, row_bytes](int64_t first, int64_t count, uint8_t* out) {
                    if (first == 0 && progress) progress(i, sources.size(), sources[i], st);
                    const int64_t r0 = first / cols, rows = count / cols;
                    std::vector<float> buf(static_cast<size_t>(count));
                    // Rows are independent: each is read and encoded by one thread.
                    pool.parallel_ranges(rows, 1, [&](int64_t b, int64_t e) {
                      sources[i].rows(r0 + b, e - b, buf.data() + b * cols);
                      for (int64_t r = b; r < e; ++r)
                        ref::quantize(st, buf.data() + r * cols, cols, out + size_t(r) * row_bytes);
                    });
                  }});
  }
  io::gguf_write(path, metadata, ts);
}

}  // namespace basalt
