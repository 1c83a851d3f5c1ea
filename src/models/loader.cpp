// Builds a Model from a checkpoint: picks the architecture, reads its config, binds tensors
// (shared HF / GGUF naming for the Llama family) and checks every shape against the config.
#include <fmt/ranges.h>

#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/log.h"
#include "models/arch.h"
#include "models/quant_config.h"
#include "ops/ref/scaled.h"

namespace basalt {
namespace models {

const std::vector<const ArchSpec*>& arch_all() {
  static const std::vector<const ArchSpec*> all = {&arch_llama(), &arch_qwen3(), &arch_qwen3_moe(),
                                                   &arch_qwen3_next(), &arch_qwen3_5()};
  return all;
}

// The checks every tensor read shares; `tag` and `file` open the messages ("[tag] file: …").
const TensorView& tensor_get(const io::TensorStore& ts, const std::string& name,
                             const std::string& tag, const std::string& file) {
  const TensorView* t = ts.find(name);
  if (!t) fail("[{}] {}: missing tensor '{}'", tag, file, name);
  return *t;
}

void tensor_check_shape(const TensorView& t, const std::vector<int64_t>& want,
                        const std::string& tag, const std::string& file) {
  if (t.shape != want)
    fail("[{}] {}: tensor '{}' has shape {}, the config implies {}", tag, file, t.name,
         shape_str(t.shape), shape_str(want));
}

std::vector<float> tensor_to_f32(const TensorView& t, const std::string& tag,
                                 const std::string& file) {
  if (!dtype_is_float(t.dtype))
    fail("[{}] {}: tensor '{}' has non-float dtype {}", tag, file, t.name, dtype_name(t.dtype));
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[size_t(i)] = float(dtype_read_f64(t.dtype, t.data, i));
  return out;
}

std::vector<float> tensor_floats(const io::TensorStore& ts, const std::string& name,
                                 const std::vector<int64_t>& shape, const std::string& tag,
                                 const std::string& file) {
  const TensorView& t = tensor_get(ts, name, tag, file);
  tensor_check_shape(t, shape, tag, file);
  return tensor_to_f32(t, tag, file);
}

namespace {

struct Names {  // tensor names of one format
  std::string embed, out_norm, lm_head;
  std::function<std::string(int64_t l, const char* part)> layer;
};

std::string hf_layer(const std::string& prefix, int64_t l, const char* part) {
  static const std::map<std::string, std::string> m = {
      {"attn_norm", "input_layernorm.weight"}, {"ffn_norm", "post_attention_layernorm.weight"},
      {"q", "self_attn.q_proj.weight"},        {"k", "self_attn.k_proj.weight"},
      {"v", "self_attn.v_proj.weight"},        {"o", "self_attn.o_proj.weight"},
      {"bq", "self_attn.q_proj.bias"},         {"bk", "self_attn.k_proj.bias"},
      {"bv", "self_attn.v_proj.bias"},         {"bo", "self_attn.o_proj.bias"},
      {"q_norm", "self_attn.q_norm.weight"},   {"k_norm", "self_attn.k_norm.weight"},
      {"gate", "mlp.gate_proj.weight"},        {"up", "mlp.up_proj.weight"},
      {"down", "mlp.down_proj.weight"}};
  auto it = m.find(part);
  return fmt::format("{}layers.{}.{}", prefix, l, it == m.end() ? std::string(part) : it->second);
}

std::string gguf_layer(int64_t l, const char* part) {
  static const std::map<std::string, std::string> m = {{"attn_norm", "attn_norm.weight"},
                                                       {"ffn_norm", "ffn_norm.weight"},
                                                       {"q", "attn_q.weight"},
                                                       {"k", "attn_k.weight"},
                                                       {"v", "attn_v.weight"},
                                                       {"o", "attn_output.weight"},
                                                       {"bq", "attn_q.bias"},
                                                       {"bk", "attn_k.bias"},
                                                       {"bv", "attn_v.bias"},
                                                       {"bo", "attn_output.bias"},
                                                       {"q_norm", "attn_q_norm.weight"},
                                                       {"k_norm", "attn_k_norm.weight"},
                                                       {"gate", "ffn_gate.weight"},
                                                       {"up", "ffn_up.weight"},
                                                       {"down", "ffn_down.weight"}};
  return fmt::format("blk.{}.{}", l, m.at(part));
}

class Binder {
 public:
  Binder(const io::TensorStore& ts, std::string arch, std::string file, ModelWeights& w,
         QuantConfig quant = {})
      : ts_(ts), arch_(std::move(arch)), file_(std::move(file)), w_(w), quant_(std::move(quant)) {}

  const TensorView& get(const std::string& name) const {
    return tensor_get(ts_, name, arch_, file_);
  }

  void check_shape(const TensorView& t, const std::vector<int64_t>& want) const {
    tensor_check_shape(t, want, arch_, file_);
  }

  // A [rows, cols] matrix, zero-copy where the matmul kernels read its dtype (the scaled
  // formats of quantised checkpoints included: ops/ref/scaled.h).
  WeightRef matrix(const std::string& name, int64_t rows, int64_t cols) {
    const TensorView& t = get(name);
    if (t.dtype == DType::U8 || t.dtype == DType::F8_E4M3) return scaled(name, t, rows, cols);
    check_shape(t, {rows, cols});
    WeightRef r{t.dtype, rows, cols, t.data};
    switch (t.dtype) {
      case DType::F32:
      case DType::F16:
      case DType::BF16:
        return r;
      case DType::Q8_0:
      case DType::Q4_0:
      case DType::Q4_K:
      case DType::Q5_K:
      case DType::Q6_K:
        if (cols % dtype_block_elems(t.dtype) != 0)
          fail("[{}] {}: {} tensor '{}' rows not whole blocks", arch_, file_, dtype_name(t.dtype),
               name);
        return r;
      case DType::F64:
      case DType::F8_E5M2: {
        auto buf = std::make_shared<std::vector<float>>(to_f32(t));
        w_.owned.push_back(buf);
        return WeightRef{DType::F32, rows, cols, buf->data()};
      }
      default:
        fail("[{}] {}: tensor '{}' has dtype {}, which cannot be a weight matrix", arch_, file_,
             name, dtype_name(t.dtype));
    }
  }

  std::vector<float> vec(const std::string& name, int64_t n) { return floats(name, {n}); }
  // Any tensor of this shape, as f32 values.
  std::vector<float> floats(const std::string& name, const std::vector<int64_t>& shape) {
    return tensor_floats(ts_, name, shape, arch_, file_);
  }

  // A matrix as plain f32 values (embedding tables, which no kernel reads scaled).
  WeightRef dense(const std::string& name, int64_t rows, int64_t cols) {
    const WeightRef w = matrix(name, rows, cols);
    if (!ref::is_scaled(w)) return w;
    auto buf = std::make_shared<std::vector<float>>(size_t(rows * cols));
    for (int64_t n = 0; n < rows; ++n) ref::scaled_dequant_row(w, n, buf->data() + n * cols);
    w_.owned.push_back(buf);
    return WeightRef{DType::F32, rows, cols, buf->data()};
  }

  // Rows `rows` (in this order) of the [n_rows, cols] matrix `name`, as a new matrix of the
  // same dtype (a copy owned by the model): regrouped projections.
  WeightRef gather_rows(const std::string& name, int64_t n_rows, int64_t cols,
                        const std::vector<int64_t>& rows) {
    const WeightRef w = matrix(name, n_rows, cols);
    if (ref::is_scaled(w)) return gather_scaled(name, w, rows);
    const size_t row_bytes = dtype_bytes(w.dtype, cols);
    auto buf = std::make_shared<std::vector<uint8_t>>(rows.size() * row_bytes);
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(buf->data() + i * row_bytes,
                  static_cast<const uint8_t*>(w.data) + size_t(rows[i]) * row_bytes, row_bytes);
    w_.owned.push_back(buf);
    return WeightRef{w.dtype, int64_t(rows.size()), cols, buf->data()};
  }

  // Columns [first, first + count) of the [rows, cols] matrix `name`, as a [rows, count]
  // matrix of its own (a copy; unquantised dtypes only).
  WeightRef columns(const std::string& name, int64_t rows, int64_t cols, int64_t first,
                    int64_t count) {
    const WeightRef w = matrix(name, rows, cols);
    if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16)
      fail("[{}] {}: tensor '{}' has dtype {}; only f32, f16 and bf16 can be split by columns",
           arch_, file_, name, dtype_name(w.dtype));
    const size_t eb = dtype_bytes(w.dtype, 1);
    auto buf = std::make_shared<std::vector<uint8_t>>(size_t(rows * count) * eb);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(buf->data() + size_t(r * count) * eb,
                  static_cast<const uint8_t*>(w.data) + size_t(r * cols + first) * eb,
                  size_t(count) * eb);
    w_.owned.push_back(buf);
    return WeightRef{w.dtype, rows, count, buf->data()};
  }

  // The [n, rows, cols] stack `name` as n matrices (fused expert weights), zero-copy where
  // the dtype allows. `first` / `count` pick a row range of each (gate and up share a stack).
  std::vector<WeightRef> stack(const std::string& name, int64_t n, int64_t rows, int64_t cols,
                               int64_t first, int64_t count) {
    const TensorView& t = get(name);
    check_shape(t, {n, rows, cols});
    DType dt = t.dtype;
    const void* base = t.data;
    if (quant_.method != QuantMethod::None && (dt == DType::U8 || dt == DType::F8_E4M3))
      fail(
          "[{}] {}: tensor '{}': quantised fused expert stacks are not supported yet (store "
          "the experts one tensor each, as ModelOpt and compressed-tensors export them)",
          arch_, file_, name);
    if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16) {
      if (!dtype_is_float(dt) || dtype_block_elems(dt) != 1)
        fail("[{}] {}: tensor '{}' has dtype {}, which cannot be an expert stack", arch_, file_,
             name, dtype_name(dt));
      auto buf = std::make_shared<std::vector<float>>(to_f32(t));
      w_.owned.push_back(buf);
      dt = DType::F32, base = buf->data();
    }
    const size_t row_bytes = dtype_bytes(dt, cols);
    std::vector<WeightRef> out;
    for (int64_t e = 0; e < n; ++e)
      out.push_back(
          WeightRef{dt, count, cols,
                    static_cast<const uint8_t*>(base) + size_t(e * rows + first) * row_bytes});
    return out;
  }
  bool has(const std::string& name) const { return ts_.contains(name); }

 private:
  std::vector<float> to_f32(const TensorView& t) const { return tensor_to_f32(t, arch_, file_); }
  // --- scaled formats (models/quant_config.h) -------------------------------------------
  std::vector<float> scale_values(const TensorView& t) const {
    if (!dtype_is_float(t.dtype) || dtype_block_elems(t.dtype) != 1)
      fail("[{}] {}: scale tensor '{}' has dtype {} (a float type expected)", arch_, file_, t.name,
           dtype_name(t.dtype));
    return to_f32(t);
  }
  float scalar(const std::string& name) const {
    const TensorView& t = get(name);
    if (t.numel() != 1)
      fail("[{}] {}: tensor '{}' has shape {}, a single per-tensor scale expected", arch_, file_,
           name, shape_str(t.shape));
    return scale_values(t)[0];
  }
  const float* owned_floats(std::vector<float> v) {
    auto buf = std::make_shared<std::vector<float>>(std::move(v));
    w_.owned.push_back(buf);
    return buf->data();
  }

  // NVFP4 (U8 codes + weight_scale + weight_scale_2) or FP8 (F8_E4M3 + weight_scale or
  // weight_scale_inv, or none when the checkpoint declares no quantisation).
  WeightRef scaled(const std::string& name, const TensorView& t, int64_t rows, int64_t cols) {
    const std::string base =
        name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    if (t.dtype == DType::U8) {
      if (quant_.method == QuantMethod::None)
        fail(
            "[{}] {}: tensor '{}' is U8 (packed NVFP4?) but the checkpoint declares no "
            "quantisation (no hf_quant_config.json or quantization_config)",
            arch_, file_, name);
      if (!has(base + ".weight_scale") || !has(base + ".weight_scale_2"))
        fail(
            "[{}] {}: NVFP4 weight '{}' has no '{}' ({} scales per 16 inputs and an f32 "
            "per-tensor weight_scale_2 are needed)",
            arch_, file_, name,
            has(base + ".weight_scale") ? base + ".weight_scale_2" : base + ".weight_scale",
            "E4M3");
      if (cols % 16)
        fail("[{}] {}: NVFP4 weight '{}': {} inputs are not whole groups of 16", arch_, file_, name,
             cols);
      check_shape(t, {rows, cols / 2});
      const TensorView& S = get(base + ".weight_scale");
      check_shape(S, {rows, cols / 16});
      if (S.dtype != DType::F8_E4M3)
        fail("[{}] {}: NVFP4 scale '{}' has dtype {} (F8_E4M3 expected)", arch_, file_, S.name,
             dtype_name(S.dtype));
      WeightRef r{DType::NVFP4, rows, cols, t.data};
      r.scales = S.data;
      r.scale = scalar(base + ".weight_scale_2");
      return r;
    }
    check_shape(t, {rows, cols});
    WeightRef r{DType::F8_E4M3, rows, cols, t.data};
    if (has(base + ".weight_scale_inv")) {  // fp8 (Qwen3 / DeepSeek): multiplies, despite the name
      const TensorView& s = get(base + ".weight_scale_inv");
      if (quant_.block <= 0 || (s.numel() == 1 && s.shape.size() < 2)) {  // one per tensor
        r.scale = scalar(s.name);
        return r;
      }
      const int64_t B = quant_.block;
      check_shape(s, {(rows + B - 1) / B, (cols + B - 1) / B});
      r.scales = owned_floats(scale_values(s));
      r.scale_block = int32_t(B);
      return r;
    }
    if (has(base + ".weight_scale")) {
      const TensorView& s = get(base + ".weight_scale");
      if (s.numel() == 1) {
        r.scale = scalar(s.name);
      } else if (s.shape == std::vector<int64_t>{rows, 1} ||
                 s.shape == std::vector<int64_t>{rows}) {
        r.scales = owned_floats(scale_values(s));  // per output channel
      } else {
        fail("[{}] {}: scale '{}' has shape {}; the weight [{}, {}] takes a scalar or [{}, 1]",
             arch_, file_, s.name, shape_str(s.shape), rows, cols, rows);
      }
      return r;
    }
    if (quant_.method != QuantMethod::None)
      fail(
          "[{}] {}: FP8 weight '{}' has no scale ('{}.weight_scale' or '{}.weight_scale_inv'; "
          "the checkpoint declares {})",
          arch_, file_, name, base, base, quant_.describe());
    return r;  // plain E4M3 values, scale 1
  }

  // Rows of a scaled matrix: codes and their scales move together. Block scales survive when
  // every run of B gathered rows is one whole block (Qwen3.5's q/gate heads of 256 rows do);
  // otherwise the matrix is dequantised to f32.
  WeightRef gather_scaled(const std::string& name, const WeightRef& w,
                          const std::vector<int64_t>& rows) {
    const int64_t K = w.cols, N = int64_t(rows.size());
    WeightRef r = w;
    r.rows = N;
    const size_t row_bytes = w.dtype == DType::NVFP4 ? size_t(K / 2) : size_t(K);
    auto data = std::make_shared<std::vector<uint8_t>>(size_t(N) * row_bytes);
    for (int64_t i = 0; i < N; ++i)
      std::memcpy(data->data() + i * row_bytes,
                  static_cast<const uint8_t*>(w.data) + size_t(rows[i]) * row_bytes, row_bytes);
    w_.owned.push_back(data);
    r.data = data->data();
    if (w.dtype == DType::NVFP4) {
      auto S = std::make_shared<std::vector<uint8_t>>(size_t(N * (K / 16)));
      for (int64_t i = 0; i < N; ++i)
        std::memcpy(S->data() + i * (K / 16),
                    static_cast<const uint8_t*>(w.scales) + rows[i] * (K / 16), size_t(K / 16));
      w_.owned.push_back(S);
      r.scales = S->data();
    } else if (w.scales && w.scale_block == 0) {
      std::vector<float> s(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) s[size_t(i)] = static_cast<const float*>(w.scales)[rows[i]];
      r.scales = owned_floats(std::move(s));
    } else if (w.scales) {
      const int64_t B = w.scale_block, kb = (K + B - 1) / B;
      bool aligned = N % B == 0;
      for (int64_t i = 0; aligned && i < N; ++i)
        aligned = rows[i] == rows[i - i % B] + i % B && rows[i - i % B] % B == 0;
      if (!aligned) {
        spdlog::info("[{}] {}: '{}' is regrouped across its {}x{} scale blocks: using f32 values",
                     arch_, file_, name, B, B);
        auto buf = std::make_shared<std::vector<float>>(size_t(N * K));
        for (int64_t i = 0; i < N; ++i) ref::scaled_dequant_row(w, rows[i], buf->data() + i * K);
        w_.owned.push_back(buf);
        return WeightRef{DType::F32, N, K, buf->data()};
      }
      std::vector<float> s(size_t(N / B * kb));
      for (int64_t i = 0; i < N; i += B)
        std::memcpy(s.data() + i / B * kb, static_cast<const float*>(w.scales) + rows[i] / B * kb,
                    size_t(kb) * 4);
      r.scales = owned_floats(std::move(s));
    }
    return r;
  }

  const io::TensorStore& ts_;
  std::string arch_, file_;
  ModelWeights& w_;
  QuantConfig quant_;
};

using PartName = std::function<std::string(const char*)>;

// Gated DeltaNet: Qwen3.5 stores in_proj_qkv / _z / _b / _a; Qwen3-Next stores in_proj_qkvz and
// in_proj_ba grouped per key head ([q k v z] and [b a] of each group), regrouped here.
void bind_gdn(Binder& b, const ModelConfig& c, int64_t l, const PartName& name, LayerWeights& L) {
  const GdnConfig& g = c.gdn;
  const int64_t E = c.hidden, C = g.channels(), Vd = g.value_dim(), Hv = g.v_heads;
  const std::string p = "linear_attn.";
  if (g.interleaved) {
    const int64_t r = g.v_heads / g.k_heads, per = 2 * g.k_dim + 2 * r * g.v_dim;
    std::vector<int64_t> q, k, v, z, bb, a;
    for (int64_t h = 0; h < g.k_heads; ++h) {
      const int64_t base = h * per;
      for (int64_t i = 0; i < g.k_dim; ++i) q.push_back(base + i), k.push_back(base + g.k_dim + i);
      for (int64_t i = 0; i < r * g.v_dim; ++i) {
        v.push_back(base + 2 * g.k_dim + i);
        z.push_back(base + 2 * g.k_dim + r * g.v_dim + i);
      }
      for (int64_t i = 0; i < r; ++i) bb.push_back(h * 2 * r + i), a.push_back(h * 2 * r + r + i);
    }
    std::vector<int64_t> qkv = q;
    qkv.insert(qkv.end(), k.begin(), k.end());
    qkv.insert(qkv.end(), v.begin(), v.end());
    const std::string qkvz = name((p + "in_proj_qkvz.weight").c_str());
    const std::string ba = name((p + "in_proj_ba.weight").c_str());
    L.gdn_qkv = b.gather_rows(qkvz, g.k_heads * per, E, qkv);
    L.gdn_z = b.gather_rows(qkvz, g.k_heads * per, E, z);
    L.gdn_b = b.gather_rows(ba, 2 * Hv, E, bb);
    L.gdn_a = b.gather_rows(ba, 2 * Hv, E, a);
  } else {
    L.gdn_qkv = b.matrix(name((p + "in_proj_qkv.weight").c_str()), C, E);
    L.gdn_z = b.matrix(name((p + "in_proj_z.weight").c_str()), Vd, E);
    L.gdn_b = b.matrix(name((p + "in_proj_b.weight").c_str()), Hv, E);
    L.gdn_a = b.matrix(name((p + "in_proj_a.weight").c_str()), Hv, E);
  }
  L.gdn_out = b.matrix(name((p + "out_proj.weight").c_str()), E, Vd);
  L.gdn_conv = b.floats(name((p + "conv1d.weight").c_str()), {C, 1, g.conv_kernel});
  L.gdn_A_log = b.vec(name((p + "A_log").c_str()), Hv);
  L.gdn_dt_bias = b.vec(name((p + "dt_bias").c_str()), Hv);
  L.gdn_norm = b.vec(name((p + "norm.weight").c_str()), g.v_dim);
  (void)l;
}

// Routed experts stored per expert (experts.N.gate_proj ...) or fused 3-D (experts.gate_up_proj
// [n, 2F, E] with gate rows first, experts.down_proj [n, E, F]); router and shared expert.
void bind_moe(Binder& b, const ModelConfig& c, const PartName& name, LayerWeights& L) {
  const MoeConfig& m = c.moe;
  const int64_t E = c.hidden, F = m.intermediate, n = m.n_experts;
  L.router = b.matrix(name("mlp.gate.weight"), n, E);
  if (b.has(name("mlp.experts.gate_up_proj"))) {
    L.ex_gate = b.stack(name("mlp.experts.gate_up_proj"), n, 2 * F, E, 0, F);
    L.ex_up = b.stack(name("mlp.experts.gate_up_proj"), n, 2 * F, E, F, F);
    L.ex_down = b.stack(name("mlp.experts.down_proj"), n, E, F, 0, E);
  } else {
    for (int64_t e = 0; e < n; ++e) {
      auto ex = [&](const char* proj) {
        return name(fmt::format("mlp.experts.{}.{}.weight", e, proj).c_str());
      };
      L.ex_gate.push_back(b.matrix(ex("gate_proj"), F, E));
      L.ex_up.push_back(b.matrix(ex("up_proj"), F, E));
      L.ex_down.push_back(b.matrix(ex("down_proj"), E, F));
    }
  }
  if (m.shared_intermediate > 0) {
    const int64_t S = m.shared_intermediate;
    L.shared_gate = b.matrix(name("mlp.shared_expert.gate_proj.weight"), S, E);
    L.shared_up = b.matrix(name("mlp.shared_expert.up_proj.weight"), S, E);
    L.shared_down = b.matrix(name("mlp.shared_expert.down_proj.weight"), E, S);
    L.shared_router = b.matrix(name("mlp.shared_expert_gate.weight"), 1, E);
  }
}

// One decoder layer's weights (`linear`: Gated DeltaNet instead of attention; `moe`: routed
// experts instead of the dense MLP), named by `name`: the model's layers and the MTP head's.
LayerWeights bind_layer(Binder& b, const ModelConfig& c, int64_t l, bool linear, bool moe,
                        bool gguf, const std::string& path, const PartName& name) {
  const int64_t E = c.hidden, D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, F = c.intermediate;
  LayerWeights L;
  L.attn_norm = b.vec(name("attn_norm"), E);
  L.ffn_norm = b.vec(name("ffn_norm"), E);
  if (linear) {
    bind_gdn(b, c, l, name, L);
  } else if (c.attn_output_gate) {
    // q_proj rows per head: D query rows, then D gate rows.
    std::vector<int64_t> q_rows, g_rows;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D; ++i) {
        q_rows.push_back(h * 2 * D + i);
        g_rows.push_back(h * 2 * D + D + i);
      }
    L.wq = b.gather_rows(name("q"), 2 * H * D, E, q_rows);
    L.wq_gate = b.gather_rows(name("q"), 2 * H * D, E, g_rows);
  } else {
    L.wq = b.matrix(name("q"), H * D, E);
  }
  if (!linear) {
    L.wk = b.matrix(name("k"), Hkv * D, E);
    L.wv = b.matrix(name("v"), Hkv * D, E);
    L.wo = b.matrix(name("o"), E, H * D);
    if (c.attention_bias || (gguf && b.has(name("bq")))) {
      L.bq = b.vec(name("bq"), H * D);
      L.bk = b.vec(name("bk"), Hkv * D);
      L.bv = b.vec(name("bv"), Hkv * D);
      if (b.has(name("bo"))) L.bo = b.vec(name("bo"), E);
    }
    if (c.qk_norm) {
      L.q_norm = b.vec(name("q_norm"), D);
      L.k_norm = b.vec(name("k_norm"), D);
    }
  }
  if (moe) {
    bind_moe(b, c, name, L);
  } else {
    if (F <= 0)
      fail("[{}] {}: layer {} has a dense MLP but intermediate_size is not set", c.arch, path, l);
    L.w_gate = b.matrix(name("gate"), F, E);
    L.w_up = b.matrix(name("up"), F, E);
    L.w_down = b.matrix(name("down"), E, F);
  }
  if (c.zero_centred_norms)  // (1 + w), as those models compute it, in f32
    for (auto* v : {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm})
      for (float& x : *v) x = 1.0f + x;
  return L;
}

// The MTP head (mtp.*), or null when the checkpoint has none. A head that cannot be used (a
// quantised fc, a missing tensor) is logged and left out: the model itself loads regardless.
std::shared_ptr<const MtpWeights> bind_mtp(Binder& b, const io::Checkpoint& ck,
                                           const ModelConfig& c) {
  if (!b.has("mtp.fc.weight")) {
    if (c.mtp_layers > 0)
      spdlog::info("{}: the config announces {} MTP layer(s); the checkpoint has no mtp.* tensors",
                   ck.path, c.mtp_layers);
    return nullptr;
  }
  try {
    const int64_t E = c.hidden;
    auto m = std::make_shared<MtpWeights>();
    m->fc_embed = b.columns("mtp.fc.weight", E, 2 * E, 0, E);
    m->fc_hidden = b.columns("mtp.fc.weight", E, 2 * E, E, E);
    m->norm_embed = b.vec("mtp.pre_fc_norm_embedding.weight", E);
    m->norm_hidden = b.vec("mtp.pre_fc_norm_hidden.weight", E);
    m->norm = b.vec("mtp.norm.weight", E);
    if (c.zero_centred_norms)
      for (auto* v : {&m->norm_embed, &m->norm_hidden, &m->norm})
        for (float& x : *v) x = 1.0f + x;
    m->moe = b.has("mtp.layers.0.mlp.gate.weight");
    if (m->moe && c.moe.n_experts == 0)
      fail("[{}] {}: the MTP layer is MoE but the model has no experts", c.arch, ck.path);
    m->layer = bind_layer(b, c, 0, false, m->moe, false, ck.path,
                          [](const char* part) { return hf_layer("mtp.", 0, part); });
    if (c.mtp_layers > 1)
      spdlog::info("{}: {} MTP layers; basalt drafts with mtp.layers.0", ck.path, c.mtp_layers);
    return m;
  } catch (const Error& e) {
    spdlog::warn("{}: MTP head not loaded ({}); --spec mtp is unavailable", ck.path, e.what());
    return nullptr;
  }
}

ModelWeights bind_weights(const io::Checkpoint& ck, const ModelConfig& c) {
  const bool gguf = ck.format == io::CheckpointFormat::Gguf;
  const std::string& px = c.tensor_prefix;
  Names nm = gguf ? Names{"token_embd.weight", "output_norm.weight", "output.weight", gguf_layer}
                  : Names{px + "embed_tokens.weight", px + "norm.weight", "lm_head.weight",
                          [&px](int64_t l, const char* part) { return hf_layer(px, l, part); }};
  ModelWeights w;
  QuantConfig quant;
  if (!gguf) {
    quant = quant_config_parse(ck.config, ck.hf_quant_config, ck.path);
    if (quant.method != QuantMethod::None)
      spdlog::info("{}: quantised checkpoint, {}", ck.path, quant.describe());
  }
  Binder b(ck.tensors, c.arch, ck.path, w, quant);
  const int64_t E = c.hidden, V = c.vocab;
  w.embed = b.dense(nm.embed, V, E);
  w.out_norm = b.vec(nm.out_norm, E);
  if (b.has(nm.lm_head) && !(c.tied_embeddings && !gguf)) {
    w.lm_head = b.matrix(nm.lm_head, V, E);
  } else if (c.tied_embeddings || gguf) {
    w.lm_head = w.embed;  // GGUF omits output.weight when tied
  } else {
    fail("[{}] {}: missing tensor '{}' (tie_word_embeddings is false)", c.arch, ck.path,
         nm.lm_head);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto name = [&](const char* part) { return nm.layer(l, part); };
    w.layers.push_back(bind_layer(b, c, l, c.is_linear(l), c.is_moe(l), gguf, ck.path, name));
  }
  if (c.zero_centred_norms)
    for (float& x : w.out_norm) x = 1.0f + x;
  if (!gguf) w.mtp = bind_mtp(b, ck, c);
  return w;
}

}  // namespace
}  // namespace models

namespace {
// dspark: the backbone of a DSpark drafter (Qwen3DSparkModel: Qwen3 decoder layers, tensors
// without the "model." prefix; src/engine/dspark.h), which is not a model of its own.
std::unique_ptr<Model> from_checkpoint(io::Checkpoint ck, bool dspark) {
  using namespace models;
  ModelConfig c;
  if (ck.format == io::CheckpointFormat::Gguf) {
    const std::string& arch = ck.gguf->get("general.architecture").as_string();
    const ArchSpec* spec = nullptr;
    for (const ArchSpec* s : arch_all())
      if (s->from_gguf && s->gguf_arch == arch) spec = s;
    if (!spec)
      fail("[models] {}: unknown architecture '{}' (supported: llama, qwen3)", ck.path, arch);
    spec->from_gguf(*ck.gguf, c);
    if (ck.tensors.size() == 0)
      fail("[models] {}: the file holds no tensors (vocab-only?)", ck.path);
    if (const TensorView* t = ck.tensors.find("token_embd.weight")) c.vocab = t->dim(0);
    if (const TensorView* t = ck.tensors.find("rope_freqs.weight")) {
      for (int64_t i = 0; i < t->numel(); ++i)
        c.rope.freq_factors.push_back(float(dtype_read_f64(t->dtype, t->data, i)));
    }
  } else {
    const std::string file = ck.path + "/config.json";
    if (!ck.config.is_object() || ck.config.empty()) fail("[models] {}: no config.json", ck.path);
    std::string cls;
    if (auto it = ck.config.find("architectures");
        it != ck.config.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
      cls = (*it)[0].get<std::string>();
    else
      fail("[config] {}: missing key 'architectures'", file);
    if (dspark && cls != "Qwen3DSparkModel")
      fail("[spec] {}: '{}' is not a DSpark drafter (Qwen3DSparkModel)", file, cls);
    if (!dspark && cls == "Qwen3DSparkModel")
      fail("[models] {}: '{}' is a DSpark drafter, not a model: use it with --spec dspark:PATH",
           file, cls);
    if (dspark) cls = "Qwen3ForCausalLM";
    const ArchSpec* spec = nullptr;
    for (const ArchSpec* s : arch_all())
      for (const auto& n : s->hf_classes)
        if (n == cls) spec = s;
    if (!spec)
      fail(
          "[models] {}: unknown architecture '{}' (supported: LlamaForCausalLM, "
          "Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen3NextForCausalLM, Qwen3_5ForCausalLM, "
          "Qwen3_5MoeForCausalLM, Qwen3_5(Moe)ForConditionalGeneration)",
          file, cls);
    c.hf_class = dspark ? "Qwen3DSparkModel" : cls;
    spec->from_hf(ck.config, file, c);
    if (dspark) c.tensor_prefix = "";
    if (ck.tensors.size() == 0) fail("[models] {}: no model.safetensors", ck.path);
    // generation_config.json's eos list wins over config.json's (as in transformers).
    auto gen_eos = cfg_token_ids(ck.generation_config, "eos_token_id");
    if (!gen_eos.empty()) c.eos_ids = gen_eos;
  }
  if (c.rope.dim > c.head_dim || c.rope.dim % 2 != 0)
    fail("[models] {}: rope dimension {} invalid for head_dim {}", ck.path, c.rope.dim, c.head_dim);
  ModelWeights w = bind_weights(ck, c);
  spdlog::info("loaded {} ({}): {} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}", ck.path,
               c.hf_class, c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab);
  return std::make_unique<Model>(std::move(c), std::move(w), std::move(ck));
}

}  // namespace

std::unique_ptr<Model> model_from_checkpoint(io::Checkpoint ck) {
  return from_checkpoint(std::move(ck), false);
}

std::unique_ptr<Model> dspark_backbone(io::Checkpoint ck) {
  return from_checkpoint(std::move(ck), true);
}

std::unique_ptr<Model> model_load(const std::string& path) {
  return model_from_checkpoint(io::checkpoint_open(path));
}

}  // namespace basalt
