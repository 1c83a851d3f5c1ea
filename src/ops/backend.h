// The backend contract: the ops a decoder-only transformer runs, on pointers into the
// backend's memory. Shapes use the glossary: T tokens in a pass, H query heads, Hkv KV heads,
// D head dim, E hidden size, F MLP size, V vocabulary, P KV positions, K/N a matmul's in/out
// sizes.
//
// Memory: every pointer an op takes lives in the backend's memory (Backend::alloc; host memory
// for the CPU backends, device memory for CUDA). Weights are made resident once with
// prepare_weight/prepare_vector. Data types: the residual stream, q/k/v and every matmul output
// are f32; a matmul *input* (the output of rmsnorm, swiglu and attention) is in act_dtype() (f32
// on the CPU, bf16 on CUDA); the KV cache is in kv_dtype().
//
// A forward pass: begin_pass(rows) hands the backend the pass's row metadata (ids, positions,
// block tables: host arrays valid until the pass ends); ops that need it (embedding, rope_angles,
// kv_write, attention) read it from there. run(key, program) executes the op sequence; a backend
// may record it the first time a key is seen and replay the recording later (CUDA graphs), so a
// program must issue the same ops on the same buffers whenever it runs with the same key.
//
// Exactness (EXACTNESS.md): every implementation computes each output element with one
// reduction order that depends only on the weight shape, never on T or the thread count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "ops/kernels.h"

namespace basalt {

// A weight matrix [N, K] row-major (PyTorch's nn.Linear layout). dtype: F32, F16, BF16, a
// GGUF block type (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K: blocks along K) on the CPU backends, or one of
// the scaled formats of HF quantized checkpoints (ops/ref/scaled.h, docs/formats.md):
//   NVFP4    W[n,k] = e2m1(data[n,k]) · e4m3(scales[n, k/16]) · scale
//   F8_E4M3  W[n,k] = e4m3(data[n,k]) · s(n,k) · scale, s from the f32 `scales`:
//            none (1); scale_block 0: per row, scales[n]; scale_block B: a grid of B×B blocks,
//            scales[(n/B) · ceil(K/B) + k/B].
// A matmul computes y[t,n] = factor(n) · Σ_k inner(n,k) · x[t,k] with inner/factor split as
// ref::scaled_inner_row / scaled_factor say, so the scales cost nothing per element.
struct WeightRef {
  DType dtype = DType::F32;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  const void* data = nullptr;
  const void* scales = nullptr;  // NVFP4: E4M3 [N, K/16]; F8_E4M3: f32 (see above) or none
  float scale = 1.0f;            // the per-tensor scale (NVFP4, F8_E4M3)
  int32_t scale_block = 0;       // F8_E4M3 with scales: 0 per row, else the block edge B
};

enum class RopeStyle : uint8_t {
  NeoX,        // HF rotate_half: pairs (i, i + rot/2)
  Interleaved  // GPT-J / llama.cpp "norm": pairs (2i, 2i + 1)
};

// The rows of one forward pass (host arrays). Row t is token ids[t] at position pos[t] of a
// sequence whose block table (block ids in position order, host) is tables[t]; rows of one
// sequence share the table pointer.
struct PassRows {
  int64_t T = 0;
  const int32_t* ids = nullptr;            // [T]
  const int64_t* pos = nullptr;            // [T]
  const int32_t* const* tables = nullptr;  // [T]
  const int64_t* table_sizes = nullptr;    // [T] blocks in tables[t]
  int64_t block_size = 0;
  // [T] the recurrent-state slot of the row's sequence (hybrid models; nullptr otherwise).
  const int32_t* slots = nullptr;
  // [T] or nullptr (hybrid models): a state slot per row (-1: none) that `gdn` also leaves the
  // row's conv and recurrent state in, as they are after the row: the points a speculative
  // verification pass can roll back to without running the kept rows again.
  const int32_t* snaps = nullptr;
};

// Causal attention of T query rows over a paged KV cache. Row t belongs to a sequence whose
// block table is block_tables[t]; it sits at position pos[t] and attends to keys 0..pos[t]
// (its own key included: K/V rows of the pass are written to the cache first), or, with
// block_last ≥ 0, to keys 0..block_last: a non-causal block (a DSpark drafter's block of draft
// rows sees all of itself; backends that can: Backend::supports_block_attention). block_tables
// and pos are the pass's host arrays (PassRows); a device backend uses its own copies.
// KV cache element types: the backend's native one (f32 on the CPU, bf16 on CUDA), bf16 on the
// CPU too (values rounded to nearest even as they are written, read back exactly), or
// F8_E4M3 with an f32 scale per (position, KV head): k ≈ e4m3(code) · s, s = amax / 448 of
// that head's D values (1 when all are 0), codes e4m3(k / s) rounded to nearest even. An
// F8_E4M3 block holds the codes [block_size, Hkv, D] then the scales [block_size, Hkv].
struct AttentionArgs {
  const float* q = nullptr;  // [T, H, D] f32
  void* out = nullptr;       // [T, H, D] act_dtype
  const void* k = nullptr;   // this layer's key blocks [n_blocks, block_size, Hkv, D] kv_dtype
  const void* v = nullptr;   // this layer's value blocks, same layout
  int64_t T = 0, H = 0, Hkv = 0, D = 0, block_size = 0;
  const int32_t* const* block_tables = nullptr;  // [T] → the row's block ids
  const int64_t* pos = nullptr;                  // [T]
  float scale = 1.0f;
  DType kv = DType::F32;    // the cache's element type (the backend's kv_dtype())
  int64_t block_last = -1;  // ≥ 0: every row attends keys 0..block_last (see above)

  // The keys row t attends: 0 .. keys(t) - 1.
  int64_t keys(int64_t t) const { return (block_last >= 0 ? block_last : pos[t]) + 1; }

  // Where position j of row t starts in the key (base k) or value (base v) cache, head 0 (head
  // hk starts hk·D elements on): elements of kv's type, f32 or bf16, or F8_E4M3 codes.
  const void* kv_row(const void* base, int64_t t, int64_t j) const {
    if (kv == DType::F8_E4M3) return fp8_codes(base, t, j, 0);
    return static_cast<const char*>(base) + kv_offset(t, j) * (kv == DType::BF16 ? 2 : 4);
  }
  int64_t kv_offset(int64_t t, int64_t j) const {
    return (int64_t(block_tables[t][j / block_size]) * block_size + j % block_size) * Hkv * D;
  }
  // F8_E4M3 caches: head hk of key/value j of row t: its D codes and its scale.
  const uint8_t* fp8_codes(const void* base, int64_t t, int64_t j, int64_t hk) const {
    return static_cast<const uint8_t*>(base) + fp8_block(t, j) + ((j % block_size) * Hkv + hk) * D;
  }
  // The D codes of that row as f32 values (before the scale), into out; returns out.
  float* fp8_decode(const void* base, int64_t t, int64_t j, int64_t hk, float* out) const {
    const uint8_t* c = fp8_codes(base, t, j, hk);
    for (int64_t i = 0; i < D; ++i) out[i] = fp8_e4m3_to_f32(c[i]);
    return out;
  }
  float fp8_scale(const void* base, int64_t t, int64_t j, int64_t hk) const {
    return fp8_scales(base, t, j)[hk];
  }
  // The scales of position j of row t, one per KV head.
  const float* fp8_scales(const void* base, int64_t t, int64_t j) const {
    const auto* s = reinterpret_cast<const float*>(static_cast<const uint8_t*>(base) +
                                                   fp8_block(t, j) + block_size * Hkv * D);
    return s + (j % block_size) * Hkv;
  }
  int64_t fp8_block(int64_t t, int64_t j) const {
    return int64_t(block_tables[t][j / block_size]) * block_size * Hkv * (D + 4);
  }
};

// Backend::rope_kv_write: q [T, H, D] and k [T, Hkv, D] f32, per-head RMSNorm'd with q_norm /
// k_norm [D] where given (eps), then rotated in place over their first `rot` dims (cos / sin
// [T, rot / 2]); k and v [T, Hkv, D] then go into one layer's cache at the pass's rows.
struct RopeKvArgs {
  float* q = nullptr;
  float* k = nullptr;
  const float* v = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t T = 0, H = 0, Hkv = 0, D = 0, rot = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
  RopeStyle style = RopeStyle::NeoX;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float eps = 0.0f;
};

// Mixture-of-experts feed-forward (Qwen3-MoE family), routing included. Per row t: p =
// softmax(router[t, :]) in f32; the top_k experts by p (largest first, the lower index on
// ties); when norm_topk their p are divided by their sum; then
//   out[t] = Σ_k p_k · down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t]))     (e = the k-th expert)
// summed in rank order k = 0, 1, …. Each expert's products are matmuls of this backend, so a
// row's result does not depend on which other rows share the pass.
struct MoeArgs {
  const void* x = nullptr;        // [T, E] act_dtype (the normed input)
  const float* router = nullptr;  // [T, n_experts] router logits
  float* out = nullptr;           // [T, E] f32, overwritten
  int64_t T = 0, E = 0, F = 0, n_experts = 0, top_k = 0;
  bool norm_topk = false;
  const WeightRef* gate = nullptr;  // [n_experts] expert matrices, each [F, E]
  const WeightRef* up = nullptr;    // [n_experts] each [F, E]
  const WeightRef* down = nullptr;  // [n_experts] each [E, F]
};

// Gated DeltaNet token mixer (Qwen3.5 / Qwen3-Next linear attention) of one layer, after its
// input projections. Channels of qkv: [q: Hk·Dk | k: Hk·Dk | v: Hv·Dv] (C in all). Per row t of
// a sequence, in position order (rows of one sequence are consecutive in a pass; the pass's
// `slots` name each row's state slot; a row at position 0 starts from zero state):
//   u = silu(causal depthwise conv over the last K inputs of each channel, conv_w [C, K]:
//       Σ_j conv_w[c, j] · input[t - K + 1 + j], j = 0..K-1; earlier inputs from conv_state)
//   q, k = l2norm per head (eps 1e-6, x · rsqrt(Σx² + eps)); q /= sqrt(Dk); v head h uses
//   key head h / (Hv / Hk); β = sigmoid(b[t, h]); g = -exp(A_log[h]) · softplus(a[t, h] +
//   dt_bias[h]);  S_h ← S_h · exp(g);  S_h += k ⊗ (β · (v - Sᵀ_h k));  out[t, h] = Sᵀ_h q
// with S_h [Dk, Dv] f32 in rec_state. The recurrence runs token by token for every T, so the
// result of a position never depends on how the prompt was chunked.
struct GdnArgs {
  const float* qkv = nullptr;      // [T, C] projections (conv input)
  const float* b = nullptr;        // [T, Hv] beta logits
  const float* a = nullptr;        // [T, Hv] decay logits
  const float* conv_w = nullptr;   // [C, K]
  const float* A_log = nullptr;    // [Hv]
  const float* dt_bias = nullptr;  // [Hv]
  float* conv_state = nullptr;     // this layer's [slots, C, K - 1] (oldest input first)
  float* rec_state = nullptr;      // this layer's [slots, Hv, Dk, Dv]
  float* out = nullptr;            // [T, Hv, Dv] f32
  int64_t T = 0, Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
  int64_t channels() const { return 2 * Hk * Dk + Hv * Dv; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual bool supports_weight(DType t) const = 0;
  virtual bool supports_head_dim(int64_t D) const { return D > 0; }

  // --- memory --------------------------------------------------------------------------------
  // Zero-filled memory of this backend, 256-byte aligned; throws basalt::Error when exhausted.
  virtual void* alloc(size_t bytes) = 0;
  virtual void dealloc(void* p) = 0;
  // Host → backend and backend → host copies (download waits for the queued work).
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Backend → backend copy (queued like an op; the default bounces through host memory).
  virtual void copy(void* dst, const void* src, size_t bytes);
  // `rows` runs of `bytes` bytes from src (one every src_stride bytes) to dst (one every
  // dst_stride bytes), in order on the queue. Default: one copy() a row.
  virtual void copy_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                         size_t bytes, int64_t rows);
  // y[n] (f32) = x[n] (act_dtype()), both in backend memory, queued like an op (the default
  // bounces through host memory).
  virtual void act_to_f32(const void* x, float* y, int64_t n);
  // y[n] (act_dtype(), rounded to nearest even) = x[n] (f32), the other way round (the default:
  // a copy for f32 activations, through host memory for bf16 ones).
  virtual void f32_to_act(const float* x, void* y, int64_t n);
  // True when backend memory is host memory (results can be written to the caller's arrays).
  virtual bool host_memory() const = 0;
  // The weight resident in this backend's memory and format (host backends: w itself). Each
  // call makes a new copy (the caller shares tied weights), owned by the backend and freed with
  // it: a host pointer says nothing about a model's lifetime, so there is no cache by address.
  virtual WeightRef prepare_weight(const WeightRef& w) = 0;
  // A vector of f32 (norm weights, biases, rotary frequencies) in backend memory, owned by it.
  virtual const float* prepare_vector(const float* data, int64_t n) = 0;
  virtual DType act_dtype() const = 0;  // matmul inputs
  virtual DType kv_dtype() const = 0;   // the KV cache
  // Chooses the KV cache type before any pool is made: the native one or F8_E4M3 (see
  // AttentionArgs); throws basalt::Error for a type this backend cannot keep.
  virtual void set_kv_dtype(DType t);
  // Bytes of one position of one KV head in the cache (F8_E4M3: D codes and the f32 scale).
  size_t kv_row_bytes(int64_t D) const {
    return kv_dtype() == DType::F8_E4M3 ? size_t(D) + 4 : dtype_bytes(kv_dtype(), D);
  }
  // KV block sizes must be a multiple of this (e.g. the attention chunk on CUDA).
  virtual int64_t kv_block_multiple() const { return 1; }
  // Peak bytes of backend memory in use since creation (weights, KV, scratch).
  virtual size_t peak_bytes() const = 0;

  // --- passes --------------------------------------------------------------------------------
  virtual void begin_pass(const PassRows& rows) = 0;
  // Runs `program` (the pass's ops). `key` identifies the op sequence and its buffers: the
  // backend may record the program under the key and replay it instead of calling it again.
  virtual void run(uint64_t key, const std::function<void()>& program) { (void)key, program(); }

  // --- ops -----------------------------------------------------------------------------------
  // y[T, N] = x[T, K] · W[N, K]ᵀ   (x act_dtype, y f32)
  virtual void matmul(const void* x, int64_t T, const WeightRef& w, float* y) = 0;
  // y[i] = x · w[i]ᵀ for n weights of the same K (q / k / v, gate / up): the same bits as n
  // matmul calls, which is what this does unless a backend runs them in one launch.
  virtual void matmul_n(const void* x, int64_t T, int n, const WeightRef* const* w,
                        float* const* y) {
    for (int i = 0; i < n; ++i) matmul(x, T, *w[i], y[i]);
  }
  // out = swiglu(x · gateᵀ, x · upᵀ)   (gate, up [F, K]; out act_dtype [T, F]), g and u f32
  // [T, F] scratch for the two products: the same bits as matmul_n then swiglu, which is what
  // this does unless a backend fuses them (then g and u may be left unwritten).
  virtual void matmul_swiglu(const void* x, int64_t T, const WeightRef& gate, const WeightRef& up,
                             float* g, float* u, void* out) {
    const WeightRef* w[] = {&gate, &up};
    float* y[] = {g, u};
    matmul_n(x, T, 2, w, y);
    swiglu(g, u, out, T * gate.rows);
  }
  // y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * w     (rows × n; x f32, y act_dtype)
  virtual void rmsnorm(const float* x, const float* w, void* y, int64_t rows, int64_t n,
                       float eps) = 0;
  // x[r, :] += delta[r, :]; then y = rmsnorm(x) as above. Same bits as add + rmsnorm.
  virtual void add_rmsnorm(float* x, const float* delta, const float* w, void* y, int64_t rows,
                           int64_t n, float eps) = 0;
  // In place, f32 → f32 (per-head q/k norm): x[r, :] = rmsnorm(x[r, :]) * w   (rows × n)
  virtual void head_rmsnorm(float* x, const float* w, int64_t rows, int64_t n, float eps) = 0;
  // out[T, E] = table[ids[t], :] (ids: the pass's)
  virtual void embedding(const WeightRef& table, float* out) = 0;
  // cos/sin [T, half] of angle pos[t] · inv_freq[i] for the pass's positions.
  virtual void rope_angles(const float* inv_freq, int64_t half, float* cos, float* sin) = 0;
  // x[T, heads, D] rotated in place over its first `rot` dims; cos/sin [T, rot/2].
  virtual void rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
                    const float* sin, RopeStyle style) = 0;
  // y[t, i] += b[i]   (y [T, n])
  virtual void add_bias(float* y, const float* b, int64_t T, int64_t n) = 0;
  // Writes the pass's K/V rows k, v f32 [T, Hkv, D] into one layer's cache at the rows'
  // positions (block tables of the pass), converting to kv_dtype.
  virtual void kv_write(const float* k, const float* v, void* k_cache, void* v_cache, int64_t Hkv,
                        int64_t D) = 0;
  // With q_norm / k_norm (Qwen3's per-head norms): head_rmsnorm(q, q_norm, …) and
  // head_rmsnorm(k, k_norm, …) first. Then rope(q, T, H, …), rope(k, T, Hkv, …) and
  // kv_write(k, v, …): the same bits as those calls, which is what this does unless a backend
  // runs them in one launch.
  virtual void rope_kv_write(const RopeKvArgs& a) {
    if (a.q_norm) head_rmsnorm(a.q, a.q_norm, a.T * a.H, a.D, a.eps);
    if (a.k_norm) head_rmsnorm(a.k, a.k_norm, a.T * a.Hkv, a.D, a.eps);
    rope(a.q, a.T, a.H, a.D, a.rot, a.cos, a.sin, a.style);
    rope(a.k, a.T, a.Hkv, a.D, a.rot, a.cos, a.sin, a.style);
    kv_write(a.k, a.v, a.k_cache, a.v_cache, a.Hkv, a.D);
  }
  // Causal GQA attention of T query rows over the paged KV cache.
  virtual void attention(const AttentionArgs& a) = 0;
  // out[i] = silu(gate[i]) * up[i]   (gate, up f32; out act_dtype)
  virtual void swiglu(const float* gate, const float* up, void* out, int64_t n) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // out[r] = the index of the largest of x[r, :] (lowest index on ties; rows × n f32). out is
  // in backend memory.
  virtual void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out) = 0;

  // --- hybrid and MoE models (Qwen3.5, Qwen3-Next, Qwen3-MoE) --------------------------------
  // A backend without them says so here; models that need them are refused at load.
  virtual bool supports_hybrid() const { return false; }
  virtual bool supports_moe() const { return false; }
  // AttentionArgs::block_last (non-causal blocks: DSpark drafters).
  virtual bool supports_block_attention() const { return false; }
  // Whether routed-expert matrices of this dtype can run (checked at load).
  virtual bool supports_expert_weight(DType t) const { return supports_weight(t); }
  // y[i] *= sigmoid(gate[i])   (y act_dtype, gate f32): the gated attention output.
  virtual void sigmoid_mul(void* y, const float* gate, int64_t n);
  // y[t, i] += sigmoid(g[t]) · s[t, i]   (y, s [T, n], g [T] f32): the gated shared expert.
  virtual void gated_add(float* y, const float* s, const float* g, int64_t T, int64_t n);
  virtual void moe(const MoeArgs& m);
  virtual void gdn(const GdnArgs& g);
  // y[r, :] = rmsnorm(x[r, :]) · w · silu(z[r, :])   (rows × n; x, z f32; y act_dtype).
  virtual void gated_rmsnorm(const float* x, const float* z, const float* w, void* y, int64_t rows,
                             int64_t n, float eps);

  // --- kernel variants and recipes (ops/kernels.h, kernels/, docs/tuning.md) --------------------
  // The device a recipe must have been measured on.
  virtual DeviceIdentity identity() const;  // default: {name(), name()}
  // The ops with more than one implementation on this backend (none: nothing to tune).
  virtual std::vector<OpKernels> kernel_registry() const { return {}; }
  // The dtype name kernels are chosen by for a weight (host WeightRef as loaded) as this backend
  // would run it (e.g. CUDA runs F32/F16 weights as "bf16").
  virtual std::string kernel_dtype(const WeightRef& w) const;
  // Runs variant `v` of `shape.op` on synthetic inputs (a fixed function of the shape, so every
  // variant of one shape sees the same inputs; weights rotated through more memory than the
  // last-level cache): `warmup` untimed runs, then `reps` timed ones (device events on a GPU),
  // under the choices in force for the other ops (e.g. the matmul_split of the weight shape).
  // The output of the first timed run is returned when `want_output`. Throws basalt::Error for a
  // shape or variant the registry does not support.
  virtual VariantRun run_variant(const OpShape& shape, const KernelVariant& v, int warmup, int reps,
                                 bool want_output);
  // The choices to run from now on (replacing earlier ones): shapes not listed run the default.
  virtual void set_kernel_choices(KernelChoices c) { choices_ = std::move(c); }
  const KernelChoices& kernel_choices() const { return choices_; }

  uint64_t id() const { return id_; }  // unique per backend object (never reused)

 protected:
  KernelChoices choices_;

 private:
  uint64_t id_ = next_id();
  static uint64_t next_id();
};

// The host-memory parts of a CPU backend: memory is host memory, weights are used in place,
// activations and the KV cache are f32, and the composite ops are built from the basic ones.
class HostBackend : public Backend {
 public:
  ~HostBackend() override;
  void* alloc(size_t bytes) override;
  void dealloc(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  bool host_memory() const override { return true; }
  WeightRef prepare_weight(const WeightRef& w) override { return w; }
  const float* prepare_vector(const float* data, int64_t) override { return data; }
  DType act_dtype() const override { return DType::F32; }
  DType kv_dtype() const override { return kv_; }
  void set_kv_dtype(DType t) override;  // F32, BF16 or F8_E4M3
  size_t peak_bytes() const override { return peak_; }

  void begin_pass(const PassRows& rows) override { rows_ = rows; }
  void add_rmsnorm(float* x, const float* delta, const float* w, void* y, int64_t rows, int64_t n,
                   float eps) override;
  void head_rmsnorm(float* x, const float* w, int64_t rows, int64_t n, float eps) override;
  void embedding(const WeightRef& table, float* out) override;
  void rope_angles(const float* inv_freq, int64_t half, float* cos, float* sin) override;
  void add_bias(float* y, const float* b, int64_t T, int64_t n) override;
  void kv_write(const float* k, const float* v, void* k_cache, void* v_cache, int64_t Hkv,
                int64_t D) override;
  void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out) override;
  bool supports_hybrid() const override { return true; }
  bool supports_moe() const override { return true; }
  bool supports_block_attention() const override { return true; }
  void sigmoid_mul(void* y, const float* gate, int64_t n) override;
  void gated_add(float* y, const float* s, const float* g, int64_t T, int64_t n) override;
  // Rows grouped by expert, each group one matmul of this backend (exact: a row's products do
  // not depend on the other rows of its group).
  void moe(const MoeArgs& m) override;
  void gdn(const GdnArgs& g) override;
  void gated_rmsnorm(const float* x, const float* z, const float* w, void* y, int64_t rows,
                     int64_t n, float eps) override;

 protected:
  PassRows rows_;
  DType kv_ = DType::F32;

 private:
  size_t live_ = 0, peak_ = 0;
  std::unordered_map<void*, size_t> sizes_;
};

}  // namespace basalt
