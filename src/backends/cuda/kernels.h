// CUDA kernels of the Hopper backend (sm_90a), on raw device pointers and a stream. No engine
// types: the backend (later) owns buffers and calls these. Shapes use the glossary of
// ops/backend.h. Every launcher checks its arguments, launches, and returns the launch's
// cudaError_t (cudaErrorInvalidValue for bad arguments); none synchronizes.
//
// Data types (docs/cuda.md): weights bf16 (passed as uint16_t bit patterns); the residual stream
// and every matmul output f32; every matmul *input* bf16 (rmsnorm, swiglu and attention write
// bf16 for the next projection); KV cache bf16 [P_cap, Hkv, D]. Accumulation is fp32 everywhere.
//
// Exactness (../shared/EXACTNESS.md): each output element has one reduction order that depends on
// the shapes of weights/heads only, never on T, the position of a row in the pass, or the grid.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace basalt::cuda {

using bf16_bits = uint16_t;  // a bfloat16 value's bits (__nv_bfloat16 in device code)

// out[t, :] = table[ids[t], :]   table bf16 [V, E], out f32 [T, E]. An id outside [0, V)
// writes NaN (the caller validates ids on the host; a kernel cannot throw).
cudaError_t embedding(const bf16_bits* table, int64_t V, int64_t E, const int32_t* ids, int64_t T,
                      float* out, cudaStream_t s);

// Fused residual add + RMSNorm over rows of n: if delta != nullptr, x[r, :] += delta[r, :] (x f32,
// in place); then y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * w   (w f32 [n], y bf16).
// One block of 1024 threads per row; the sum of squares has one fixed order per n.
cudaError_t rmsnorm_residual(float* x, const float* delta, const float* w, bf16_bits* y,
                             int64_t rows, int64_t n, float eps, cudaStream_t s);

// Per-head RMSNorm in place (Qwen3 q/k norm): x f32 [rows, D], w f32 [D]. One warp per row.
cudaError_t head_rmsnorm(float* x, const float* w, int64_t rows, int64_t D, float eps,
                         cudaStream_t s);

enum class RopeLayout : uint8_t { NeoX, Interleaved };  // = basalt::RopeStyle

// RoPE in place over the first `rot` dims of each head: x f32 [T, heads, D]; cos/sin f32
// [T, rot/2] (the host computes them, llama3 scaling included).
cudaError_t rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
                 const float* sin, RopeLayout layout, cudaStream_t s);
// The same with angles computed on the device: angle(t, i) = float(pos[t]) * inv_freq[i]
// (f32 product, then sincosf), pos int32 [T], inv_freq f32 [rot/2].
cudaError_t rope_inv_freq(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot,
                          const int32_t* pos, const float* inv_freq, RopeLayout layout,
                          cudaStream_t s);

// out[i] = silu(gate[i]) * up[i]: gate, up f32 [n], out bf16 [n].
cudaError_t swiglu(const float* gate, const float* up, bf16_bits* out, int64_t n, cudaStream_t s);

// out[i] = bf16(in[i]): e.g. K/V rows of a pass into the cache (out = cache + pos0*Hkv*D).
cudaError_t convert_f32_bf16(const float* in, bf16_bits* out, int64_t n, cudaStream_t s);
cudaError_t convert_bf16_f32(const bf16_bits* in, float* out, int64_t n, cudaStream_t s);

// out[r] = index of the largest x[r, :] (f32 [rows, n]), the lowest index on ties.
cudaError_t argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t s);
// y[i] += x[i] (f32).
cudaError_t add_f32(float* y, const float* x, int64_t n, cudaStream_t s);
// y[t, i] += b[i]   (y f32 [T, n], b f32 [n]).
cudaError_t add_bias(float* y, const float* b, int64_t T, int64_t n, cudaStream_t s);
// cos/sin f32 [T, half] of the angle float(pos[t]) * inv_freq[i] (f32 product, sincosf).
cudaError_t rope_angles(const int32_t* pos, const float* inv_freq, int64_t T, int64_t half,
                        float* cos, float* sin, cudaStream_t s);
// Paged K/V write: cache row slots[t] (= block · block_size + pos % block_size) of k_cache and
// v_cache [rows, row] bf16 gets bf16(k[t, :]) and bf16(v[t, :]) (k, v f32 [T, row]).
cudaError_t kv_write(const float* k, const float* v, const int32_t* slots, int64_t T, int64_t row,
                     bf16_bits* k_cache, bf16_bits* v_cache, cudaStream_t s);
// With q_norm and k_norm (both or neither): head_rmsnorm(q, q_norm, T · H, D, eps) and
// head_rmsnorm(k, k_norm, T · Hkv, D, eps); then rope(q, T, H, …), rope(k, T, Hkv, …) and
// kv_write(k, v, slots, T, Hkv · D, …); all in one launch (a warp a head row) and the same bits
// (q and k normed and rotated in place, the cache rows as kv_write's).
cudaError_t rope_kv_write(float* q, float* k, const float* v, const int32_t* slots, int64_t T,
                          int64_t H, int64_t Hkv, int64_t D, int64_t rot, const float* cos,
                          const float* sin, RopeLayout layout, bf16_bits* k_cache,
                          bf16_bits* v_cache, cudaStream_t s, const float* q_norm = nullptr,
                          const float* k_norm = nullptr, float eps = 0.0f);
// The same into E4M3 caches (AttnArgs::k8 layout): per (row, head) s = amax / 448 (1 if 0),
// codes e4m3(x / s) round-to-nearest-even saturating: the host's ref::kv_fp8_encode, bit for bit.
cudaError_t kv_write_fp8(const float* k, const float* v, const int32_t* slots, int64_t T,
                         int64_t Hkv, int64_t D, int64_t block_size, uint8_t* k_cache,
                         uint8_t* v_cache, cudaStream_t s);

// Holds stream s for about `ns` nanoseconds (one thread polling the global timer): a timing
// harness queues the launches it times behind it, so they run back to back instead of each one
// waiting for the host's launch (Backend::run_variant). ns <= 1e9.
cudaError_t stream_delay(int64_t ns, cudaStream_t s);

// --- matmul -------------------------------------------------------------------------------
// y[T, N] = x[T, K] · W[N, K]ᵀ; x bf16, W bf16 row-major (nn.Linear), y f32. K % 8 == 0 and
// 16-byte aligned x, W. Within a K segment (below), every y[t, n] is one chain of
// mma.sync.m16n8k16 (bf16 → f32) over the segment's k16 slices in increasing order, starting
// from 0; the order depends on K alone. All variants compute exactly that; they differ in tiling.
// (The enum values of MatmulKernel, ScaledKernel and AttnKernel are recipe parameters: keep them.)
enum class MatmulKernel : uint8_t {
  Auto,           // T > 64: TileTMA, else RowsTMA (each falls back to a cp.async tiling where a
                  // tensor map cannot be made)
  Rows16x32,      // 16 rows (T padded) × 32 columns per block, 4 warps, k-stage 128: decode
  Rows16x16,      // 16 rows × 16 columns per block, 2 warps, k-stage 256: decode, more blocks
  Rows16x32Deep,  // as Rows16x32 with k-stage 256 and 6 stages: more bytes in flight per SM
  Tile128,        // 128 × 128 per block, 8 warps, k-stage 32, 4-stage cp.async: prefill
  Tile128K64,     // 128 × 128 per block, 8 warps, k-stage 64, 3-stage cp.async: prefill
  TileWG,         // 128 × 128 per block, two warpgroups on wgmma, k-stage 64, 5 stages
  TileWG2,        // the same with 3 stages (two blocks an SM)
  TileWG64,       // 64 × 64 per block, one warpgroup on wgmma, 6 stages, split-K blocks with a
                  // workspace: batches of 17-64 rows
  TileTMA,        // 128 × 128 per block, two consumer warpgroups on wgmma fed by TMA through
                  // 6 mbarrier stages, segments folded in registers: prefill
  TileTMA64,      // 64 × 128 per block, one consumer warpgroup fed by TMA, 4 stages, two blocks
                  // an SM, segments folded in registers: batches of 17-64 rows
  RowsTMA,        // T <= 64: W in wgmma's A (64 rows a block), the tokens in B, TMA-fed through
                  // 6 stages by a producer warp, split-K blocks with a workspace up to 16 rows
                  // (T > 64: Rows16x32)
  TileTMA256,     // TileTMA with 128 × 256 blocks (4 stages) for one-segment weights; others run
                  // TileTMA. Compiled, not yet measured on a device (2026-12-05)
  TileTMAP,       // TileTMA's blocks made persistent (one an SM walks the tiles; the producer
                  // fills the next tile's stages during the epilogue). Compiled, not yet run
                  // on a device (2026-12-05)
};
// Split-K fixed by the weight shape alone: segments of matmul_kseg(N, K) (the last shorter);
// y = ((c_0 + c_1) + c_2) + ... with c_s the chain over segment s. With a workspace of
// matmul_workspace_bytes(T, N, K) (zero-filled before its first use; the kernels leave its
// counters at zero), the Rows variants run the segments in separate blocks and add the partials
// in order; without one they fold as they go, as Tile128 always does. Same bits either way.
// The rule (measured on the H200 over the Llama, Qwen3, Qwen3.5 and MoE projection shapes,
// `bench_cuda_kernels decode`, docs/cuda.md): one segment for K <= 512; 512 for N <= 1024 (few
// column blocks); one segment for N > 65536 (LM heads) or K <= 1024; up to K = 4096, one for
// N > 8192 and 1024 otherwise; 2048 above K = 4096 (decode of 17408×5120: 84 → 65 µs, its
// prefill at T = 2048 1.74 → 2.02 ms).
int64_t matmul_kseg(int64_t N, int64_t K);
// Benchmarks only: every shape gets segments of `kseg` (a multiple of 256; 0 restores the rule).
void set_matmul_kseg_override(int64_t kseg);
// A call's segment length `kseg`: 0 = the rule above (matmul_kseg); otherwise a multiple of 256
// shorter than K, or any value >= K for one segment (else cudaErrorInvalidValue). A recipe picks
// it per weight shape (docs/cuda.md "Kernel variants"): it changes the bits, so it must never
// depend on T. The workspace is sized for the call's segments.
size_t matmul_workspace_bytes(int64_t T, int64_t N, int64_t K, int64_t kseg = 0);
cudaError_t matmul_bf16(const bf16_bits* x, int64_t T, const bf16_bits* w, int64_t N, int64_t K,
                        float* y, cudaStream_t s, MatmulKernel kernel = MatmulKernel::Auto,
                        void* workspace = nullptr, size_t workspace_bytes = 0, int64_t kseg = 0);
// out[t, f] = bf16(silu(g) · u) with g = (x · W_gateᵀ)[t, f] and u = (x · W_upᵀ)[t, f] (both
// [F, K], segments kseg as matmul_bf16's): the bits of matmul_bf16 on each weight, then swiglu,
// in one TMA launch that never writes g or u. kernel, T > 64 (prefill): TileTMA (blocks of 64
// gate + 64 up columns), TileTMA256 (128 + 128; one-segment weights, else TileTMA's) or Auto
// (TileTMA256's where the weights are one segment); T <= 64 (decode, serving batches): RowsTMA
// or Auto (blocks of 32 gate + 32 up weight rows; split-K with a workspace of
// matmul_swiglu_workspace_bytes, up to 16 rows, as matmul_bf16). cudaErrorNotSupported for
// another kernel, or where the device cannot make a tensor map: then run those three.
size_t matmul_swiglu_workspace_bytes(int64_t T, int64_t F, int64_t K, int64_t kseg = 0);
cudaError_t matmul_bf16_swiglu(const bf16_bits* x, int64_t T, const bf16_bits* w_gate,
                               const bf16_bits* w_up, int64_t F, int64_t K, bf16_bits* out,
                               cudaStream_t s, int64_t kseg = 0,
                               MatmulKernel kernel = MatmulKernel::Auto, void* workspace = nullptr,
                               size_t workspace_bytes = 0);
// y_i = x · W_iᵀ for n <= 3 weights of the same K in one launch (the RowsTMA tiling, T <= 64:
// q / k / v, gate / up), each with its own segments (kseg[i] as matmul_bf16's kseg; nullptr: the
// rule) and bitwise what matmul_bf16 gives it. y[i] is [T, N[i]]. With a workspace of
// matmul_group_workspace_bytes (zeroed before first use, as matmul_bf16's) the segments run in
// separate blocks. cudaErrorNotSupported where T > 64 or the device cannot make a tensor map:
// then run matmul_bf16 per weight.
size_t matmul_group_workspace_bytes(int64_t T, int n, const int64_t* N, int64_t K,
                                    const int64_t* kseg = nullptr);
cudaError_t matmul_bf16_group(const bf16_bits* x, int64_t T, int n, const bf16_bits* const* w,
                              const int64_t* N, int64_t K, float* const* y, const int64_t* kseg,
                              cudaStream_t s, void* workspace = nullptr,
                              size_t workspace_bytes = 0);

// --- matmul with scaled weights (HF quantized checkpoints; ops/ref/scaled.h) ----------------
// y[t, n] = factor(n) · Σ_k inner(n, k) · x[t, k], computed as exactly what matmul_bf16 gives
// for x and the bf16 matrix of inner values (same chain, same segments), times factor(n) in f32
// (one multiply of the final sum): bit for bit, whatever the path or T (matmul.cu):
//   NVFP4      codes [N, K/2] (two E2M1 a byte, low nibble first), scales E4M3 [N, K/16];
//              inner = e2m1 · e4m3 (exact in bf16), factor = scale
//   FP8        codes E4M3 [N, K]; inner = e4m3 (exact), factor = scale
//   FP8Rows    + f32 scales [N]: factor = scales[n] · scale
//   FP8Blocks  + f32 grid of B×B blocks [ceil(N/B), ceil(K/B)]: inner = bf16_rn(f32(e4m3 ·
//              s_block)) (the CPU keeps the f32 product), factor = scale
// E4M3 NaN codes (0x7f, 0xff) are read as ±480 (quantisers never write them).
enum class ScaledFormat : uint8_t { NVFP4, FP8, FP8Rows, FP8Blocks };
struct ScaledWeight {
  ScaledFormat format = ScaledFormat::NVFP4;
  const uint8_t* data = nullptr;  // the codes
  const void* scales = nullptr;   // see above (none for FP8)
  float scale = 1.0f;             // the per-tensor scale
  int64_t N = 0, K = 0;
  int64_t block = 0;  // FP8Blocks: B
  bool frag = false;  // NVFP4 only: codes and scales in the fragment layout (nvfp4_to_frag)
  bool wg = false;    // NVFP4, FP8, FP8Rows: the wgmma layout (scaled_to_wg; data holds it)
};
enum class ScaledKernel : uint8_t {
  Auto,     // Fused when T <= 64 and matmul_scaled_fused_ok, else Dequant
  Fused,    // the decode kernel: codes -> bf16 operands in registers before each mma; T <= 64
  Dequant,  // inner values into `scratch` (blocks of rows), then matmul_bf16's tilings
};
// The fused kernel's conditions: NVFP4 K % 64 == 0; FP8 K % 16 == 0 (blocks: B % 128 == 0);
// codes 16-byte aligned. Other shapes (K % 16 == 0 NVFP4, K % 8 == 0 FP8) run Dequant.
bool matmul_scaled_fused_ok(const ScaledWeight& w);
// The scratch the Dequant path prefers: the whole inner matrix (N·K bf16) up to 128 MiB; it
// runs with any scratch of at least min(N, 128) rows (K·2 bytes each).
size_t matmul_scaled_scratch_bytes(const ScaledWeight& w);
// x bf16 [T, K] (16-byte aligned), y f32 [T, N]. workspace: as matmul_bf16's
// (matmul_workspace_bytes(T, N, K, kseg); the Fused and the Rows tilings then run the segments
// in separate blocks: same bits). kseg: as matmul_bf16's. config: the fused kernel's stage shape
// at T <= 8 (0: the default; 1 .. 3: others, matmul.cu fused_stages; FP8 blocks have one; -1:
// set_matmul_scaled_config's). Every stage shape gives the same bits (tests/gpu).
cudaError_t matmul_scaled(const bf16_bits* x, int64_t T, const ScaledWeight& w, float* y,
                          cudaStream_t s, ScaledKernel kernel = ScaledKernel::Auto,
                          void* workspace = nullptr, size_t workspace_bytes = 0,
                          void* scratch = nullptr, size_t scratch_bytes = 0, int64_t kseg = 0,
                          int config = -1);
// Benchmarks only: the `config` of calls that pass -1.
void set_matmul_scaled_config(int config);
// The fused kernel's stage shape for T rows of w: k-stage BK (elements of a row a stage) and
// stages in flight. A config the format does not have, or whose BK does not divide the
// segments, runs the default (so configs 1 .. 3 are real alternatives only where this differs
// from config 0's). kseg, config as matmul_scaled's; {0, 0} where the fused kernel cannot run
// (T > 64, a bad kseg or config).
struct FusedStages {
  int bk = 0, stages = 0;
  bool operator==(const FusedStages& o) const { return bk == o.bk && stages == o.stages; }
  bool operator!=(const FusedStages& o) const { return !(*this == o); }
};
FusedStages matmul_scaled_fused_stages(const ScaledWeight& w, int64_t T, int64_t kseg = 0,
                                       int config = -1);
// NVFP4 in the fragment layout (matmul.cu describes it): what the CUDA backend keeps for NVFP4
// weights with K % 64 == 0 under BASALT_CUDA_NVFP4_FRAG=1 (opt-in: slower than the checkpoint
// layout's kernel on most shapes so far, docs/cuda.md). Its fused kernel streams each lane's
// codes straight into registers (T <= 64); the dequant path reads it too. Same bits as the
// checkpoint layout on every path. nvfp4_to_frag writes w's codes and scales (checkpoint layout,
// K % 64 == 0) in that layout into `codes` (16-byte aligned, nvfp4_frag_code_bytes) and `scales`
// (4-byte aligned, nvfp4_frag_scale_bytes); the result is w with frag = true and those pointers.
size_t nvfp4_frag_code_bytes(int64_t N, int64_t K);
size_t nvfp4_frag_scale_bytes(int64_t N, int64_t K);
cudaError_t nvfp4_to_frag(const ScaledWeight& w, uint8_t* codes, uint8_t* scales, cudaStream_t s);
// Scaled weights in the wgmma layout (matmul.cu; NVFP4: nvfp4_wg.h, FP8 per tensor or per row:
// fp8_wg.h): 64-row blocks × 128-k stages, each one contiguous blob (NVFP4 4,608 bytes: codes
// packed for a few-instruction decode and re-encoded group scales; FP8 8,192: the codes,
// bit-permuted), for a decode kernel that puts the weights in wgmma's register A operand.
// FP8's paths give the checkpoint layout's bits. NVFP4's compute matmul_bf16 over inner · 2^-7
// times factor · 2^7: the checkpoint layout's bits unless a product x · inner falls below 2^-119;
// its dequant_scaled writes inner · 2^-7. scaled_to_wg writes w (checkpoint layout, K % 128 ==
// 0) into `blobs` (16-byte aligned, scaled_wg_bytes); the result is w with wg = true, data =
// blobs (NVFP4: scales unused; FP8 per row: the row scales as before).
size_t scaled_wg_bytes(ScaledFormat f, int64_t N, int64_t K);
cudaError_t scaled_to_wg(const ScaledWeight& w, uint8_t* blobs, cudaStream_t s);
// Decode passes (1 <= T <= 64) over n <= 3 weights in the wgmma layout, one kernel format
// (NVFP4, or FP8 / FP8Rows) and the same K (q / k / v): y[i] [T, N_i] = matmul_scaled(x, w[i])
// in one launch, bitwise, each with its own segments (kseg[i] as matmul_scaled's; nullptr: the
// rule) and, with a workspace of matmul_scaled_group_workspace_bytes (zeroed before first use),
// split-K as matmul_scaled's. cudaErrorNotSupported where the weights or T do not fit that
// (the caller runs matmul_scaled per weight).
size_t matmul_scaled_group_workspace_bytes(int64_t T, int n, const ScaledWeight* w,
                                           const int64_t* kseg = nullptr);
cudaError_t matmul_scaled_group(const bf16_bits* x, int64_t T, int n, const ScaledWeight* w,
                                float* const* y, const int64_t* kseg, cudaStream_t s,
                                void* workspace = nullptr, size_t workspace_bytes = 0);
// out[t, f] = bf16(silu_mul(g, u)) with g = matmul_scaled(x, gate)[t, f], u the same of up (both
// [F, K] in the wgmma layout, one kernel format, segments kseg as matmul_scaled's): the bits of
// the two matmuls and swiglu in one launch that never writes g or u (blocks of 32 gate + 32 up
// rows; split-K with a workspace of matmul_scaled_swiglu_workspace_bytes up to 16 rows).
// cudaErrorNotSupported as matmul_scaled_group's, or where the shapes differ.
size_t matmul_scaled_swiglu_workspace_bytes(int64_t T, const ScaledWeight& gate, int64_t kseg = 0);
cudaError_t matmul_scaled_swiglu(const bf16_bits* x, int64_t T, const ScaledWeight& gate,
                                 const ScaledWeight& up, bf16_bits* out, cudaStream_t s,
                                 int64_t kseg = 0, void* workspace = nullptr,
                                 size_t workspace_bytes = 0);
// out[r, :] = the inner values of weight row row0 + r as bf16 (out [rows, K], 16-byte aligned).
cudaError_t dequant_scaled(const ScaledWeight& w, int64_t row0, int64_t rows, bf16_bits* out,
                           cudaStream_t s);

// --- attention ----------------------------------------------------------------------------
// Causal GQA over the KV cache. Query row t (position pos0 + t) visits keys 0..pos0+t in
// chunks of kAttnChunk positions aligned to absolute positions; chunk partials (max, sum, acc)
// are merged left to right in increasing chunk order. Within a chunk, for a bf16 cache with
// D = 64 or 128: tensor-core mma chains over 16-row tiles of a KV head's query rows (q and the
// weights e_j each split into bf16 hi + lo); otherwise: scores (sequential dot over D), chunk
// max, exp, a fixed 64-lane sum tree, Σ e_j·v_j in key order (attention.cu has the details).
// Fused (one warp walks the chunks) and Split (one warp per chunk, then an in-order merge) do
// the same arithmetic, so a query gives the same bits in any pass.
constexpr int kAttnChunk = 64;
// Block: the tensor-core path's fused walk with a block of warps (tiles of one KV head) sharing
// each chunk's K / V copy; BlockWG: the same with the scores on wgmma (bf16 cache; an E4M3
// cache runs Block); BlockWGPV: BlockWG with Σ w·v on wgmma too; on the CUDA-core path all
// three are Fused. Same bits as Fused.
enum class AttnKernel : uint8_t { Auto, Fused, Split, Block, BlockWG, BlockWGPV };
struct AttnArgs {
  const float* q = nullptr;              // [T, H, D] f32 (after q-norm and RoPE)
  const bf16_bits* k = nullptr;          // cache [rows, Hkv, D] bf16; keys 0 .. pos(t) written
  const bf16_bits* v = nullptr;          // cache [rows, Hkv, D] bf16
  bf16_bits* out = nullptr;              // [T, H, D] bf16
  int64_t T = 0, H = 0, Hkv = 0, D = 0;  // D in {32, 64, 128}
  int64_t pos0 = 0;                      // row t's position is pos0 + t, unless `pos` is given
  float scale = 1.0f;
  // Rows of several sequences (continuous batching): pos [T] (device) gives each row's
  // position. Paged cache: key j of row t is cache row
  //   tables[row_table[t] * table_stride + j / block_size] * block_size + j % block_size
  // (tables, row_table on the device; block_size a multiple of kAttnChunk, so a chunk never
  // straddles blocks). Without tables the cache is contiguous: key j is row j.
  const int32_t* pos = nullptr;
  const int32_t* tables = nullptr;
  const int32_t* row_table = nullptr;
  int64_t table_stride = 0, block_size = 0;
  // The largest position in the pass (sizes the split grid; rows beyond their own chunks
  // exit). -1: pos0 + T - 1. With `pos`, required.
  int64_t max_pos = -1;
  float* workspace = nullptr;  // Split only: attention_workspace_bytes(T, H, D, pos0 + T)
  size_t workspace_bytes = 0;
  // Split only, optional: kAttnFoldCounters zeros. With them, a tensor-core split pass whose rows
  // fit one 16-row tile per KV head (T · H / Hkv <= 16: decode) merges in its own last block of
  // each KV head (a counter each, left at zero again) instead of a merge launch: the same bits.
  unsigned* counters = nullptr;
  // An E4M3 cache instead of k/v (paged only): each block holds the codes [block_size, Hkv, D]
  // then the f32 scales [block_size, Hkv] (ops/backend.h AttentionArgs).
  const uint8_t* k8 = nullptr;
  const uint8_t* v8 = nullptr;
  // A hint, never the bits: every row is a sequence of its own (a serving decode step). Auto's
  // split kernel for such passes of more than one tile a KV head is Warp1 (see attention()).
  bool rows_own_seq = false;
};
constexpr int64_t kAttnFoldCounters = 256;  // KV heads a folded split pass may have
// Auto splits over the KV chunks only when fewer (row, head) warps than this would fill the chip
// (the CUDA-core kernels; the tensor-core path counts its 16-row tiles).
constexpr int64_t kAttnSplitMaxWarps = 2048;
// Whether Auto may split a pass of this shape (then it needs the workspace); the same for both
// cache types.
bool attention_may_split(int64_t T, int64_t H, int64_t Hkv, int64_t D);
size_t attention_workspace_bytes(int64_t T, int64_t H, int64_t D, int64_t n_pos);
// Split's kernels on the tensor-core path (D 64 / 128), the same bits each (tests/gpu runs every
// one): Chunk4, a block of four warps a chunk; Walk4, four warps walking a group of chunks through
// a three-stage copy pipeline; Warp1, one warp walking a group of chunks. Auto: where the pass's
// rows see at most 64 chunks (contexts up to 4,096), Chunk4 on a bf16 cache and Walk4 on an FP8
// one; Warp1 above. groups > 0: blocks a (KV head, tile) for Walk4 and Warp1, each walking an
// even share of the chunks (0: as many as fit on the chip at once). For tests and benchmarks.
enum class SplitKernel : uint8_t { Auto, Chunk4, Walk4, Warp1 };
void set_attention_split_kernel(SplitKernel k, int64_t groups = 0);
cudaError_t attention(const AttnArgs& a, cudaStream_t s, AttnKernel kernel = AttnKernel::Auto);

// --- hybrid models (Gated DeltaNet) and mixture-of-experts --------------------------------
// (hybrid.cu; basalt::ref's ops of the same names are the definitions.)

// y[i] = bf16(y[i] · sigmoid(gate[i]))   (y bf16 in place, gate f32 [n]).
cudaError_t sigmoid_mul(bf16_bits* y, const float* gate, int64_t n, cudaStream_t s);
// y[t, i] += sigmoid(g[t]) · x[t, i]   (y, x f32 [T, n], g f32 [T]).
cudaError_t gated_add(float* y, const float* x, const float* g, int64_t T, int64_t n,
                      cudaStream_t s);
// y[r, :] = bf16(rmsnorm(x[r, :]) · w · silu(z[r, :]))   (x, z f32 [rows, n], w f32 [n], y bf16).
// One warp per row: each lane's strided squares in order, then a butterfly (fixed by n).
cudaError_t gated_rmsnorm(const float* x, const float* z, const float* w, bf16_bits* y,
                          int64_t rows, int64_t n, float eps, cudaStream_t s);

// Gated DeltaNet of one layer (ops/backend.h GdnArgs; ref::gdn). Rows of one sequence are
// consecutive; a sequence's run of rows is found on the device (slots[t] != slots[t-1]), so
// nothing about the pass's layout is baked into a recorded graph but T. Three kernels:
//   conv:      one thread per (run, channel) walks the run's rows in order (window in
//              registers), u[t, c] = silu(Σ_j w[c, j] · in[t-K+1+j]) in j order; K <= 8;
//   prepare:   one warp per (row, q or k head): q, k in u l2-normalised in place (q also / √Dk);
//              one lane per (row, value head): the gates β = sigmoid(b), decay = exp(g);
//   recurrent: one warp per (run, value head, 8 value columns), 4 lanes per column, each lane
//              holding a quarter of S[:, j] (Dk <= 128) in registers, walking the run's rows in
//              position order; the sums over i (Sᵀk, Sᵀq) are each lane's terms in increasing i,
//              then a fixed butterfly over the 4 lanes. Explicit __f*_rn everywhere (no
//              contraction). The same arithmetic for every T: bits do not depend on the chunking
//              of a prompt, on decode vs prefill, or on the other sequences of the pass.
struct GdnKernelArgs {
  const float* qkv = nullptr;      // [T, C] conv input, C = 2·Hk·Dk + Hv·Dv
  const float* b = nullptr;        // [T, Hv]
  const float* a = nullptr;        // [T, Hv]
  const float* conv_w = nullptr;   // [C, K]
  const float* A_log = nullptr;    // [Hv]
  const float* dt_bias = nullptr;  // [Hv]
  float* conv_state = nullptr;     // [slots, C, K-1]
  float* rec_state = nullptr;      // [slots, Hv, Dk, Dv]
  float* out = nullptr;            // [T, Hv, Dv]
  const int32_t* slots = nullptr;  // [T] device: each row's state slot
  const int32_t* pos = nullptr;    // [T] device: each row's position (0 resets the state)
  // [T] device or null: a state slot per row (-1: none) that also gets the conv window and the
  // recurrent state as they are after the row (speculative decoding's rollback points)
  const int32_t* snaps = nullptr;
  float* u = nullptr;              // scratch: gdn_scratch_floats (u [T, C], gates [T, Hv, 2])
  int64_t T = 0, Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
};
constexpr int64_t kGdnMaxDk = 128, kGdnMaxK = 8;
size_t gdn_scratch_floats(int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv);
cudaError_t gdn(const GdnKernelArgs& a, cudaStream_t s);

// Mixture-of-experts feed-forward (ref::moe), with no host round trip:
//   route:   one warp per row: softmax (exact max, expf, the sum sequential in expert order as
//            in ref::moe_route), top-k by repeated warp argmax (larger p, lower index on ties),
//            renormalised by the sequential sum of the chosen p when norm_topk;
//   plan:    one warp: the (row, rank) pairs grouped by expert (stable), cut into tiles of up to
//            16 pairs of one expert (moe_max_tiles bounds their number by T alone);
//   experts: moe_matmul_swiglu (matmul.cu): gate and up for each tile and swiglu to bf16 in one
//            launch, then moe_matmul down:
//            every product is exactly matmul_bf16's chain for that expert's weight (the same
//            bits as a T=1 matmul of the row), so a row never depends on the rows sharing its
//            tile;
//   combine: out[t] = Σ_k p_k · y_k in rank order (f32 mul, then add); for passes routed and
//            planned in one launch, by the down product's last block of each column group
//            (moe_matmul_combine), else by a launch of its own.
// Passes of more than kMoeChunkRows rows run in chunks of that many rows (the workspace is
// bounded; rows are independent, so the bits are the same).
constexpr int64_t kMoeChunkRows = 1024, kMoeMaxExperts = 8192, kMoeMaxTopK = 64;
struct MoeKernelArgs {
  const bf16_bits* x = nullptr;   // [T, E]
  const float* router = nullptr;  // [T, n_experts] logits
  float* out = nullptr;           // [T, E]
  int64_t T = 0, E = 0, F = 0, n_experts = 0, top_k = 0;
  bool norm_topk = false;
  // Device arrays [n_experts] of device pointers to each expert's bf16 matrix: gate, up [F, E],
  // down [E, F].
  const bf16_bits* const* gate = nullptr;
  const bf16_bits* const* up = nullptr;
  const bf16_bits* const* down = nullptr;
  void* workspace = nullptr;  // moe_workspace_bytes(T, E, F, n_experts, top_k)
  size_t workspace_bytes = 0;
  MatmulKernel kernel = MatmulKernel::Auto;  // moe_matmul's tiling (tests, benchmarks)
  // false: the combine by a launch of its own even where route and plan ran in one launch
  // (A/B measurement; the same bits).
  bool combine_fold = true;
};
size_t moe_workspace_bytes(int64_t T, int64_t E, int64_t F, int64_t n_experts, int64_t top_k);
cudaError_t moe(const MoeKernelArgs& a, cudaStream_t s);
// The steps of moe, for tests. ids/weights [T, top_k].
cudaError_t moe_route(const float* logits, int64_t T, int64_t n_experts, int64_t top_k, bool norm,
                      int32_t* ids, float* weights, cudaStream_t s);
int64_t moe_max_tiles(int64_t pairs, int64_t n_experts);
// order [pairs]: pair indices grouped by expert, increasing within one; tiles [3, max_tiles]:
// (expert, first index into order, pairs 1..16) per tile, pairs = 0 for unused tiles.
cudaError_t moe_plan(const int32_t* ids, int64_t pairs, int64_t n_experts, int32_t* order,
                     int32_t* tiles, int64_t max_tiles, cudaStream_t s);
// For each tile and each m < (w1 ? 2 : 1): y_m[p, :] = x[p / row_div, :] · W_m[e]ᵀ for the
// tile's pairs p (expert e), W_m[e] = w0[e] / w1[e] (bf16 [N, K] each); x bf16 rows of K, y_m f32
// [pairs, N]. K % 8 == 0, 16-byte aligned rows. kernel: Rows16x32 (k-stage 128, 4 stages; also
// Auto) or Rows16x32Deep (256, 6 stages: slower on the H200 at every T measured, kept as a
// second tiling the tests compare bitwise). Same bits either way.
cudaError_t moe_matmul(const bf16_bits* x, int64_t row_div, const bf16_bits* const* w0,
                       const bf16_bits* const* w1, int64_t N, int64_t K, float* y0, float* y1,
                       const int32_t* order, const int32_t* tiles, int64_t max_tiles,
                       cudaStream_t s, MatmulKernel kernel = MatmulKernel::Auto);
// moe's down product with its combine folded in (decode-sized passes): moe_matmul(x, 1, w,
// nullptr, N, K, y, ...) (the same y), and out[t, c] = Σ_k weights[t·top_k + k] · y[t·top_k + k, c]
// in rank order from 0 (f32 mul, then add: moe's combine, the same bits) for t < rows, written by
// the last block of each column group to finish (the blocks count themselves in counters, which
// must be zero at the launch (moe's route-and-plan launch zeroes them): moe_combine_counters(N).
constexpr int64_t moe_combine_counters(int64_t N) {
  return (N + 15) / 16;
}
cudaError_t moe_matmul_combine(const bf16_bits* x, const bf16_bits* const* w, int64_t N, int64_t K,
                               float* y, const int32_t* order, const int32_t* tiles,
                               int64_t max_tiles, const float* weights, int64_t rows, int64_t top_k,
                               unsigned* counters, float* out, cudaStream_t s,
                               MatmulKernel kernel = MatmulKernel::Auto);
// act[p, :] = bf16(silu_mul(y_gate[p, :], y_up[p, :])) (swiglu's bits) for moe_matmul's y_gate,
// y_up of w0 = gate, w1 = up, without writing them: one block runs both chains of its columns.
cudaError_t moe_matmul_swiglu(const bf16_bits* x, int64_t row_div, const bf16_bits* const* gate,
                              const bf16_bits* const* up, int64_t N, int64_t K, bf16_bits* act,
                              const int32_t* order, const int32_t* tiles, int64_t max_tiles,
                              cudaStream_t s, MatmulKernel kernel = MatmulKernel::Auto);

}  // namespace basalt::cuda
