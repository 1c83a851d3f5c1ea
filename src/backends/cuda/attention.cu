// Causal GQA attention over the KV cache (bf16, or E4M3 codes with a scale per row), in fixed
// chunks of kAttnChunk key positions.
//
// Exactness: the query at position p visits chunks c = 0 .. p / 64 (keys 64c .. 64c+63, absolute).
// chunk_partial() reduces one chunk in one order (lane j owns keys 64c+j and 64c+32+j; scores are
// sequential fmas over D; the chunk max is exact; the exp-sum is a fixed butterfly; Σ e_j·v_j runs
// in key order per output dim); merge() folds chunk partials left to right. Fused walks the chunks
// of one (t, h) in one warp; Split computes every chunk in its own warp, stores the partial (f32,
// exact) and merges in order in a second kernel. Both call the same two functions with explicit
// round-to-nearest intrinsics (no contraction choices left to the compiler), so a query's bits do
// not depend on T, on pos0, or on the kernel chosen (tests/gpu checks all three).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <type_traits>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/pdl.cuh"

namespace basalt::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block; one warp per (t, h) or (t, h, chunk)
bool small_pdl(bool decode_sized) {
  return pdl_small(kPdlSmallAttention, decode_sized);
}

__device__ __forceinline__ float bf(uint32_t b16) {
  return __uint_as_float(b16 << 16);
}

template <int DPL>  // dims per lane: D = 32 * DPL
struct Partial {
  float m, l, acc[DPL];
};

// Where a chunk's keys and values are: the head's row at the chunk start, rows `stride`
// elements apart. Bf16Rows: the bf16 cache. Fp8Rows: E4M3 codes with an f32 scale per row
// (kernels.h AttnArgs::k8), a score being (Σ q·e4m3(k)) · s_k · scale and a value row weighted
// by e_j · s_v: the codes enter the sums exactly, each scale costs one multiply.
struct Bf16Rows {
  const bf16_bits* k;
  const bf16_bits* v;
  int64_t stride;
  template <int D>
  __device__ __forceinline__ float dot(const float* qs, int jj) const {
    const uint4* kr = reinterpret_cast<const uint4*>(k + jj * stride);
    float d = 0.0f;
#pragma unroll
    for (int d8 = 0; d8 < D / 8; ++d8) {
      const uint4 u = kr[d8];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        d = __fmaf_rn(qs[d8 * 8 + 2 * e], bf(w[e] & 0xffffu), d);
        d = __fmaf_rn(qs[d8 * 8 + 2 * e + 1], bf(w[e] >> 16), d);
      }
    }
    return d;
  }
  // acc[d] += w · v[jj][lane * DPL + d]
  template <int DPL>
  __device__ __forceinline__ void axpy(float (&acc)[DPL], float w, int jj, int lane) const {
    const bf16_bits* vr = v + jj * stride + lane * DPL;
    if constexpr (DPL == 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(vr);
      const uint32_t x[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[2 * e] = __fmaf_rn(w, bf(x[e] & 0xffffu), acc[2 * e]);
        acc[2 * e + 1] = __fmaf_rn(w, bf(x[e] >> 16), acc[2 * e + 1]);
      }
    } else if constexpr (DPL == 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(vr);
      acc[0] = __fmaf_rn(w, bf(u.x & 0xffffu), acc[0]);
      acc[1] = __fmaf_rn(w, bf(u.x >> 16), acc[1]);
      acc[2] = __fmaf_rn(w, bf(u.y & 0xffffu), acc[2]);
      acc[3] = __fmaf_rn(w, bf(u.y >> 16), acc[3]);
    } else if constexpr (DPL == 2) {
      const uint32_t u = *reinterpret_cast<const uint32_t*>(vr);
      acc[0] = __fmaf_rn(w, bf(u & 0xffffu), acc[0]);
      acc[1] = __fmaf_rn(w, bf(u >> 16), acc[1]);
    } else {
      acc[0] = __fmaf_rn(w, bf(vr[0]), acc[0]);
    }
  }
};

// Two E4M3 codes (low byte first) as f32, exactly (through f16, which holds every E4M3 value).
__device__ __forceinline__ float2 e4m3x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

struct Fp8Rows {
  const uint8_t* k;
  const uint8_t* v;
  const float* ks;
  const float* vs;
  int64_t stride, sstride;
  template <int D>
  __device__ __forceinline__ float dot(const float* qs, int jj) const {
    const uint4* kr = reinterpret_cast<const uint4*>(k + jj * stride);
    float d = 0.0f;
#pragma unroll
    for (int d16 = 0; d16 < D / 16; ++d16) {
      const uint4 u = kr[d16];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 a = e4m3x2(w[e]), b = e4m3x2(w[e] >> 16);
        const float* q = qs + d16 * 16 + 4 * e;
        d = __fmaf_rn(q[0], a.x, d);
        d = __fmaf_rn(q[1], a.y, d);
        d = __fmaf_rn(q[2], b.x, d);
        d = __fmaf_rn(q[3], b.y, d);
      }
    }
    return d;
  }
  __device__ __forceinline__ float key_scale(int jj) const { return ks[jj * sstride]; }
  __device__ __forceinline__ float value_scale(int jj) const { return vs[jj * sstride]; }
  template <int DPL>
  __device__ __forceinline__ void axpy(float (&acc)[DPL], float w, int jj, int lane) const {
    const uint8_t* vr = v + jj * stride + lane * DPL;
    if constexpr (DPL == 8) {
      const uint2 u = *reinterpret_cast<const uint2*>(vr);
      const uint32_t x[2] = {u.x, u.y};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float2 a = e4m3x2(x[e]), b = e4m3x2(x[e] >> 16);
        acc[4 * e] = __fmaf_rn(w, a.x, acc[4 * e]);
        acc[4 * e + 1] = __fmaf_rn(w, a.y, acc[4 * e + 1]);
        acc[4 * e + 2] = __fmaf_rn(w, b.x, acc[4 * e + 2]);
        acc[4 * e + 3] = __fmaf_rn(w, b.y, acc[4 * e + 3]);
      }
    } else if constexpr (DPL == 4) {
      const uint32_t u = *reinterpret_cast<const uint32_t*>(vr);
      const float2 a = e4m3x2(u), b = e4m3x2(u >> 16);
      acc[0] = __fmaf_rn(w, a.x, acc[0]);
      acc[1] = __fmaf_rn(w, a.y, acc[1]);
      acc[2] = __fmaf_rn(w, b.x, acc[2]);
      acc[3] = __fmaf_rn(w, b.y, acc[3]);
    } else if constexpr (DPL == 2) {
      const float2 a = e4m3x2(*reinterpret_cast<const uint16_t*>(vr));
      acc[0] = __fmaf_rn(w, a.x, acc[0]);
      acc[1] = __fmaf_rn(w, a.y, acc[1]);
    } else {
      acc[0] = __fmaf_rn(w, e4m3x2(vr[0]).x, acc[0]);
    }
  }
};

// One chunk: keys j0 .. j0+n-1 (1 <= n <= 64) at `src` (its row 0 = key j0). qs: the query in
// shared memory, f32 [D].
template <int DPL, class Src>
__device__ __forceinline__ Partial<DPL> chunk_partial(const float* qs, const Src& src, int n,
                                                      float scale, int lane) {
  constexpr int D = 32 * DPL;
  float s[2], vscale[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int jj = lane + 32 * half;
    s[half] = -INFINITY;
    vscale[half] = 1.0f;
    if (jj < n) {
      const float dot = src.template dot<D>(qs, jj);
      if constexpr (std::is_same_v<Src, Bf16Rows>) {
        s[half] = __fmul_rn(dot, scale);
      } else {
        s[half] = __fmul_rn(__fmul_rn(dot, src.key_scale(jj)), scale);
        vscale[half] = src.value_scale(jj);
      }
    }
  }
  float m = fmaxf(s[0], s[1]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const float e0 = lane < n ? expf(__fsub_rn(s[0], m)) : 0.0f;
  const float e1 = lane + 32 < n ? expf(__fsub_rn(s[1], m)) : 0.0f;
  float l = __fadd_rn(e0, e1);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, o));
  // The weight of a value row: e_j (bf16) or e_j · s_v (fp8).
  const float w0 = std::is_same_v<Src, Bf16Rows> ? e0 : __fmul_rn(e0, vscale[0]);
  const float w1 = std::is_same_v<Src, Bf16Rows> ? e1 : __fmul_rn(e1, vscale[1]);

  Partial<DPL> p;
  p.m = m;
  p.l = l;
#pragma unroll
  for (int d = 0; d < DPL; ++d) p.acc[d] = 0.0f;
#pragma unroll 16
  for (int jj = 0; jj < n; ++jj) {
    const float wj = __shfl_sync(0xffffffffu, jj < 32 ? w0 : w1, jj & 31);
    src.template axpy<DPL>(p.acc, wj, jj, lane);
  }
  return p;
}

// st <- st ⊕ c, the online-softmax merge; always applied left to right in chunk order.
template <int DPL>
__device__ __forceinline__ void merge(Partial<DPL>& st, const Partial<DPL>& c) {
  const float mn = fmaxf(st.m, c.m);
  const float a = expf(__fsub_rn(st.m, mn)), b = expf(__fsub_rn(c.m, mn));
  st.l = __fadd_rn(__fmul_rn(st.l, a), __fmul_rn(c.l, b));
#pragma unroll
  for (int d = 0; d < DPL; ++d)
    st.acc[d] = __fadd_rn(__fmul_rn(st.acc[d], a), __fmul_rn(c.acc[d], b));
  st.m = mn;
}

template <int DPL>
__device__ __forceinline__ void write_out(const Partial<DPL>& st, bf16_bits* o, int lane) {
  const float inv = __fdiv_rn(1.0f, st.l);
#pragma unroll
  for (int d = 0; d < DPL; ++d)
    o[lane * DPL + d] = __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(st.acc[d], inv)));
}

// Floats of one chunk partial in the split workspace (attention_workspace_bytes).
template <int D>
constexpr int kPartFloats = D + 4;

__host__ __device__ __forceinline__ int64_t n_chunks(int64_t pos) {
  return pos / kAttnChunk + 1;
}

__device__ __forceinline__ int64_t row_pos(const AttnArgs& a, int64_t t) {
  return a.pos ? int64_t(a.pos[t]) : a.pos0 + t;
}

// The cache row of key j0 (a chunk start) for query row t.
__device__ __forceinline__ int64_t chunk_row(const AttnArgs& a, int64_t t, int64_t j0) {
  if (!a.tables) return j0;
  const int32_t* tb = a.tables + int64_t(a.row_table[t]) * a.table_stride;
  return int64_t(tb[j0 / a.block_size]) * a.block_size + j0 % a.block_size;
}

// The K/V rows of head hk for the chunk of row t starting at key j0.
template <class Src>
__device__ __forceinline__ Src chunk_rows(const AttnArgs& a, int64_t t, int64_t hk, int64_t j0) {
  const int64_t r = chunk_row(a, t, j0), D = a.D;
  if constexpr (std::is_same_v<Src, Bf16Rows>) {
    const int64_t o = r * a.Hkv * D + hk * D;
    return Bf16Rows{a.k + o, a.v + o, a.Hkv * D};
  } else {  // a block: codes [block_size, Hkv, D], then f32 scales [block_size, Hkv]
    const int64_t blk = r / a.block_size, slot = r % a.block_size;
    const int64_t base = blk * a.block_size * a.Hkv * (D + 4), row = slot * a.Hkv + hk;
    const int64_t so = base + a.block_size * a.Hkv * D + row * 4;
    return Fp8Rows{a.k8 + base + row * D, a.v8 + base + row * D,
                   reinterpret_cast<const float*>(a.k8 + so),
                   reinterpret_cast<const float*>(a.v8 + so), a.Hkv * D, a.Hkv};
  }
}

__host__ __forceinline__ int64_t max_pos_of(const AttnArgs& a) {
  return a.max_pos >= 0 ? a.max_pos : a.pos0 + a.T - 1;
}

template <int DPL, class Src>
__global__ void __launch_bounds__(32 * kWarps) attn_fused_kernel(AttnArgs a) {
  pdl_wait();
  pdl_trigger();
  constexpr int D = 32 * DPL;
  __shared__ float qs_all[kWarps][D];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int64_t th = int64_t(blockIdx.x) * kWarps + wi;  // t * H + h
  if (th >= a.T * a.H) return;
  const int64_t t = th / a.H, h = th % a.H, hk = h / (a.H / a.Hkv);
  float* qs = qs_all[wi];
  for (int d = lane; d < D; d += 32) qs[d] = a.q[th * D + d];
  __syncwarp();
  const int64_t p = row_pos(a, t);
  Partial<DPL> st = chunk_partial<DPL>(qs, chunk_rows<Src>(a, t, hk, 0), int(p < 63 ? p + 1 : 64),
                                       a.scale, lane);
  for (int64_t c = 1; c < n_chunks(p); ++c) {
    const int64_t j0 = c * kAttnChunk;
    const int n = int(p - j0 + 1 < kAttnChunk ? p - j0 + 1 : kAttnChunk);
    merge(st, chunk_partial<DPL>(qs, chunk_rows<Src>(a, t, hk, j0), n, a.scale, lane));
  }
  write_out(st, a.out + th * D, lane);
}

// Workspace: [T, H, max_chunks] partials of kPartFloats<D> floats: acc[D], m, l, 2 unused (a
// partial starts on 16 bytes).
template <int DPL, class Src>
__global__ void __launch_bounds__(32 * kWarps)
    attn_split_chunks_kernel(AttnArgs a, int64_t max_chunks) {
  pdl_wait();
  pdl_trigger();
  constexpr int D = 32 * DPL;
  __shared__ float qs_all[kWarps][D];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int64_t item = int64_t(blockIdx.x) * kWarps + wi;  // (t * H + h) * max_chunks + c
  if (item >= a.T * a.H * max_chunks) return;
  const int64_t th = item / max_chunks, c = item % max_chunks;
  const int64_t t = th / a.H, h = th % a.H, hk = h / (a.H / a.Hkv);
  const int64_t p = row_pos(a, t);
  if (c >= n_chunks(p)) return;
  float* qs = qs_all[wi];
  for (int d = lane; d < D; d += 32) qs[d] = a.q[th * D + d];
  __syncwarp();
  const int64_t j0 = c * kAttnChunk;
  const int n = int(p - j0 + 1 < kAttnChunk ? p - j0 + 1 : kAttnChunk);
  const Partial<DPL> pc = chunk_partial<DPL>(qs, chunk_rows<Src>(a, t, hk, j0), n, a.scale, lane);
  float* w = a.workspace + item * kPartFloats<D>;
#pragma unroll
  for (int d = 0; d < DPL; ++d) w[lane * DPL + d] = pc.acc[d];
  if (lane == 0) {
    w[D] = pc.m;
    w[D + 1] = pc.l;
  }
}

// The merge of a split pass: one warp per (t, h) and 32 of its output dims (a block each, so
// the D / 32 warps of a row spread over the SMs: with a block of D threads per row a decode
// step's 32 rows kept 32 SMs busy and the merge took half of 32K decode attention). Lane d folds
// output dim d over the row's chunk partials left to right with merge()'s arithmetic, so the
// bits are those of the fused kernels' in-warp merge. Stages of 32 partials (the warp's 32 dims
// and the (m, l) pair) stream through shared memory kStages - 1 ahead. merge()'s coefficients
// a = exp(M' - M), b = exp(m - M) depend only on the running max M, which is exact (a prefix
// max, taken by a warp scan), so lane i computes those of a stage's chunk i and leaves them in
// shared memory; each lane's chain is then two multiplies and an add per chunk, from three
// shared-memory loads. A decode step has one such warp an SM (H100 at 32K: 513 chunks, ncu
// 25 instructions a chunk at one issue per 2.9 cycles before the coefficients were shared and
// the full stages unrolled; 4 stages in flight measured 18.5 µs, 8 stages 15.2 µs; 24 stages
// for contexts past 16K measured no faster end to end).
template <int D>
__global__ void __launch_bounds__(32) attn_split_merge_kernel(AttnArgs a, int64_t max_chunks) {
  pdl_wait();
  pdl_trigger();
  constexpr int kP = kPartFloats<D>, kStages = 8, kC = 32;  // kC: chunks a stage, one a lane
  constexpr int kW = 36;  // floats of a staged chunk: 32 dims, m, l, 2 unused
  constexpr int kSlices = D / 32;
  constexpr unsigned kAll = 0xffffffffu;
  __shared__ __align__(16) float part[kStages][kC * kW];
  __shared__ float2 coef[kC];
  const int lane = threadIdx.x;
  const int64_t th = blockIdx.x / kSlices;
  const int slice = int(blockIdx.x % kSlices);
  const int64_t nc = n_chunks(row_pos(a, th / a.H));
  const float* src = a.workspace + th * max_chunks * kP;
  auto issue = [&](int64_t stage) {
    const int64_t c0 = stage * kC;
    if (c0 < nc) {
      const int cnt = int(nc - c0 < kC ? nc - c0 : kC);
      const uint32_t dst = smem_addr(part[stage % kStages]);
      for (int u = lane; u < cnt * 9; u += 32) {  // 9 pieces of 16 bytes a chunk
        const int i = u / 9, q = u % 9;
        cp_async16_s(dst + (i * kW + q * 4) * 4,
                     src + (c0 + i) * kP + (q < 8 ? slice * 32 + q * 4 : D), 16);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) issue(st);
  float m_run = 0.0f, l = 0.0f, acc = 0.0f;
  // st <- st ⊕ chunk i of the stage (merge()'s formula with the chunk's coefficients).
  auto fold = [&](const float* ps, int i) {
    const float2 f = coef[i];
    l = __fadd_rn(__fmul_rn(l, f.x), __fmul_rn(ps[i * kW + 33], f.y));
    acc = __fadd_rn(__fmul_rn(acc, f.x), __fmul_rn(ps[i * kW + lane], f.y));
  };
  for (int64_t stage = 0; stage * kC < nc; ++stage) {
    cp_async_wait<kStages - 2>();
    __syncwarp();  // the stage landed for every lane; the previous stage's slot and coef are free
    issue(stage + kStages - 1);
    const int64_t c0 = stage * kC;
    const int cnt = int(nc - c0 < kC ? nc - c0 : kC);
    const float* ps = part[stage % kStages];
    // Lane i: the running max after chunk c0 + i (a scan; lanes past cnt hold -inf), the one
    // before it, and merge()'s coefficients for that chunk.
    const float mc = lane < cnt ? ps[lane * kW + 32] : -INFINITY;
    float after = mc;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float v = __shfl_up_sync(kAll, after, o);
      if (lane >= o) after = fmaxf(after, v);
    }
    if (c0 > 0) after = fmaxf(m_run, after);
    float before = __shfl_up_sync(kAll, after, 1);
    if (lane == 0) before = m_run;
    coef[lane] = make_float2(expf(__fsub_rn(before, after)), expf(__fsub_rn(mc, after)));
    m_run = __shfl_sync(kAll, after, cnt - 1);
    __syncwarp();  // coef written
    if (cnt == kC && c0 > 0) {
#pragma unroll
      for (int i = 0; i < kC; ++i) fold(ps, i);
    } else {
      int i = 0;
      if (c0 == 0) acc = ps[lane], l = ps[33], i = 1;  // the first chunk is the state
#pragma unroll 4
      for (; i < cnt; ++i) fold(ps, i);
    }
    __syncwarp();  // coef read
  }
  cp_async_wait<0>();
  a.out[th * D + slice * 32 + lane] =
      __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(acc, __fdiv_rn(1.0f, l))));
}

template <int D>
cudaError_t launch_merge(const AttnArgs& a, cudaStream_t s, int64_t max_chunks) {
  static_assert(D % 32 == 0);
  return launch_pdl(attn_split_merge_kernel<D>, dim3(unsigned(a.T * a.H * (D / 32))), dim3(32), 0,
                    s, small_pdl(a.T <= kPdlRows), a, max_chunks);
}

// --- The tensor-core path: D = 64 or 128, bf16 or FP8 cache -------------------------------
// The rows of KV head hk are r = t · G + g (query head hk · G + g, G = H / Hkv); a warp owns a
// tile of 16 consecutive r and computes the partial of chunk c for all of them with
// mma.m16n8k16 (bf16 in, f32 accumulate), each row's bits independent of the other rows':
//  - scores S = Σ_d q·k: the query split as q_hi = bf16(q), q_lo = bf16(q - q_hi), one mma chain
//    over D for q_hi then on over D for q_lo; s = S · scale (FP8: (S · s_k) · scale, S over the
//    codes, which bf16 holds exactly); keys past the row's position -inf;
//  - the chunk max (exact), e_j = exp(s_j - m), l = Σ e_j: each lane its 16 values in key order,
//    then a butterfly over the quad that shares the row;
//  - Σ w_j·v_j as one chain over the 64 keys for bf16(w_j) and on for bf16(w_j - bf16(w_j)),
//    w_j = e_j (FP8: e_j · s_v, v the codes);
//  - chunk partials merged left to right by merge()'s formula (Fused in the warp, Split through
//    the workspace and attn_split_merge_kernel).
// A row's partial of a chunk is the same whatever other rows share its tile (keys a row may not
// see enter with weight 0, rows past the chunk's last key are zeros in shared memory), so a
// query's bits do not depend on T, on the batch, or on the kernel.
constexpr int kMmaRows = 16;
// Split when fewer (KV head, tile) warps than this would walk the chunks.
constexpr int64_t kMmaSplitMaxTiles = 1024;

__host__ __device__ __forceinline__ bool mma_path(int64_t D) {
  return D == 64 || D == 128;
}
__host__ __device__ __forceinline__ int64_t mma_tiles(int64_t T, int64_t G) {
  return (T * G + kMmaRows - 1) / kMmaRows;
}

// Shared memory of one warp: q_hi, q_lo [16][D] bf16, then `bufs` chunk buffers (a chunk's
// copy lands in one while the previous chunk is computed from the other): bf16 cache, K and V
// [64][D] bf16; FP8 cache, the codes of K and V [64][D] as copied and their row scales [2][64],
// plus one K, V [64][D] bf16 pair the codes are widened into. bf16 tiles keep rows of 16-byte
// units at unit ^ (row & 7) (ldmatrix without bank conflicts).
template <int D>
struct MmaSmem {
  static constexpr int kQBytes = 2 * kMmaRows * D * 2, kTileBytes = 2 * kAttnChunk * D * 2;
  __host__ __device__ static constexpr int buf_bytes(bool f8) {
    return f8 ? 2 * kAttnChunk * (D + 4) : kTileBytes;
  }
  __host__ __device__ static constexpr int bytes(bool f8, int bufs) {
    return kQBytes + bufs * buf_bytes(f8) + (f8 ? kTileBytes : 0);
  }
  __device__ static __forceinline__ int at(int row, int unit) {
    return row * D + ((unit ^ (row & 7)) << 3);
  }
};

__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}
__device__ __forceinline__ float bf16_round(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}
// Two E4M3 codes (low byte first) as a bf16 pair: exact, bf16 holds every E4M3 value.
__device__ __forceinline__ uint32_t e4m3x2_bf16x2(uint32_t two) {
  const float2 f = e4m3x2(two);
  return bf16_pair(f.x, f.y);
}

// A warp's shared memory, laid out as MmaSmem says.
template <int D, bool F8>
struct MmaWarpSmem {
  using L = MmaSmem<D>;
  bf16_bits* qs;
  char* bufs;
  bf16_bits* wide;  // FP8: the widened K, V
  __device__ MmaWarpSmem(char* base, int n_bufs)
      : qs(reinterpret_cast<bf16_bits*>(base)),
        bufs(base + L::kQBytes),
        wide(reinterpret_cast<bf16_bits*>(base + L::kQBytes + n_bufs * L::buf_bytes(F8))) {}
  // A warp's q tiles at `q`, with chunk buffers (and FP8's wide tiles after them) shared with
  // the other warps of its block.
  __device__ MmaWarpSmem(char* q, char* shared_bufs, int n_bufs)
      : qs(reinterpret_cast<bf16_bits*>(q)),
        bufs(shared_bufs),
        wide(reinterpret_cast<bf16_bits*>(shared_bufs + n_bufs * L::buf_bytes(F8))) {}
  // The bf16 K and V tiles chunks of buffer b are computed from.
  __device__ bf16_bits* ks(int b) const {
    return F8 ? wide : reinterpret_cast<bf16_bits*>(bufs + b * L::buf_bytes(F8));
  }
  __device__ bf16_bits* vs(int b) const { return ks(b) + kAttnChunk * D; }
  // FP8: buffer b's codes and scales (0 past the chunk's last key).
  __device__ uint8_t* kc(int b) const {
    return reinterpret_cast<uint8_t*>(bufs + b * L::buf_bytes(F8));
  }
  __device__ uint8_t* vc(int b) const { return kc(b) + kAttnChunk * D; }
  __device__ float* ksc(int b) const { return reinterpret_cast<float*>(vc(b) + kAttnChunk * D); }
  __device__ float* vsc(int b) const { return ksc(b) + kAttnChunk; }
};

// What a lane knows of its tile: rows g = lane / 4 and g + 8 of the mma layout.
struct MmaTile {
  int64_t hk, tile, G;
  int64_t th[2];  // t · H + h of rows g, g + 8 (-1: past T)
  int pos[2];     // their positions (-1: past T)
  uint32_t valid;  // rows < T · G, bit r
  int my_pos;      // lanes 0..15: row `lane`'s position (-1: none), its table row in my_seq
  int my_seq;
  int64_t my_t;
};

__device__ __forceinline__ MmaTile mma_tile(const AttnArgs& a, int64_t hk, int64_t tile,
                                            int lane) {
  MmaTile m;
  m.hk = hk, m.tile = tile, m.G = a.H / a.Hkv;
  const int64_t r = tile * kMmaRows + (lane & 15);
  const int64_t t = r / m.G;
  const bool ok = lane < kMmaRows && t < a.T;
  m.my_t = ok ? t : 0;
  m.my_pos = ok ? int(row_pos(a, t)) : -1;
  m.my_seq = ok && a.tables ? a.row_table[t] : 0;
  m.valid = __ballot_sync(0xffffffffu, ok) & 0xffffu;
  const int g = lane >> 2;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = g + 8 * half;
    m.pos[half] = __shfl_sync(0xffffffffu, m.my_pos, row);
    const int64_t rr = tile * kMmaRows + row, tt = rr / m.G;
    m.th[half] = (m.valid >> row) & 1 ? tt * a.H + hk * m.G + rr % m.G : -1;
  }
  return m;
}

// q of the tile's rows as q_hi, q_lo (zeros past T). Every load is issued before the first is
// used (a rolled loop paid a memory round trip per few pairs: most of a split warp's time).
// store(row, d, hi, lo) puts dims d, d + 1 of tile row `row` (bf16 pairs) where the caller's
// layout wants them.
template <int D, class Store>
__device__ __forceinline__ void mma_load_q_to(const AttnArgs& a, const MmaTile& m, int lane,
                                              Store&& store) {
  constexpr int kPerLane = kMmaRows * D / 2 / 32;  // f32 pairs; pair k of a lane is in row
  static_assert(D / 2 >= 32);                      // 32 k / (D / 2), the same for every lane
  int64_t my_row = -1;  // lanes 0..15: row `lane`'s offset in q (-1: past T)
  if (lane < kMmaRows && ((m.valid >> lane) & 1)) {
    const int64_t rr = m.tile * kMmaRows + lane, tt = rr / m.G;
    my_row = (tt * a.H + m.hk * m.G + rr % m.G) * D;
  }
  float2 qv[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t row = __shfl_sync(0xffffffffu, my_row, 32 * k / (D / 2));
    const int d = 2 * ((lane + 32 * k) % (D / 2));
    qv[k] = row >= 0 ? *reinterpret_cast<const float2*>(a.q + row + d) : make_float2(0.0f, 0.0f);
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int i = lane + 32 * k, row = i / (D / 2), d = 2 * (i % (D / 2));
    const float2 q = qv[k];
    const uint32_t hi = bf16_pair(q.x, q.y);
    const uint32_t lo = bf16_pair(__fsub_rn(q.x, __uint_as_float(hi << 16)),
                                  __fsub_rn(q.y, __uint_as_float(hi & 0xffff0000u)));
    store(row, d, hi, lo);
  }
}
// The same into a warp's q_hi, q_lo tiles (MmaSmem layout).
template <int D>
__device__ __forceinline__ void mma_load_q(const AttnArgs& a, const MmaTile& m, bf16_bits* qs,
                                           int lane) {
  mma_load_q_to<D>(a, m, lane, [&](int row, int d, uint32_t hi, uint32_t lo) {
    const int o = MmaSmem<D>::at(row, d >> 3) + (d & 7);
    *reinterpret_cast<uint32_t*>(qs + o) = hi;
    *reinterpret_cast<uint32_t*>(qs + kMmaRows * D + o) = lo;
  });
}

// Starts the copy of K and V of keys j0 .. j0 + n - 1 of the run whose first row is table row
// `t_run` into buffer b (one cp.async group); rows n .. 63 are zero-filled. Thread `tid` of the
// kThreads that share the copy (a warp's lanes, or a block's threads).
template <int D, bool F8, int kThreads = 32>
__device__ __forceinline__ void mma_issue_kv(const AttnArgs& a, const MmaTile& m, int64_t t_run,
                                             int64_t j0, int n, const MmaWarpSmem<D, F8>& sm, int b,
                                             int tid) {
  if constexpr (!F8) {
    const Bf16Rows src = chunk_rows<Bf16Rows>(a, t_run, m.hk, j0);
    const uint32_t ks_s = smem_addr(sm.ks(b)), vs_s = smem_addr(sm.vs(b));
#pragma unroll 4
    for (int i = tid; i < kAttnChunk * D / 8; i += kThreads) {
      const int j = i / (D / 8), u = i % (D / 8);
      const int o = MmaSmem<D>::at(j, u) * 2;
      const bool in = j < n;
      const int64_t go = in ? j * src.stride + u * 8 : 0;
      cp_async16_s(ks_s + o, src.k + go, in ? 16 : 0);
      cp_async16_s(vs_s + o, src.v + go, in ? 16 : 0);
    }
  } else {
    const Fp8Rows src = chunk_rows<Fp8Rows>(a, t_run, m.hk, j0);
    const uint32_t kc_s = smem_addr(sm.kc(b)), vc_s = smem_addr(sm.vc(b));
#pragma unroll 4
    for (int i = tid; i < kAttnChunk * D / 16; i += kThreads) {
      const int j = i / (D / 16), u = i % (D / 16);
      const bool in = j < n;
      const int64_t go = in ? j * src.stride + u * 16 : 0;
      cp_async16_s(kc_s + i * 16, src.k + go, in ? 16 : 0);
      cp_async16_s(vc_s + i * 16, src.v + go, in ? 16 : 0);
    }
    const uint32_t ksc_s = smem_addr(sm.ksc(b)), vsc_s = smem_addr(sm.vsc(b));
    for (int j = tid; j < kAttnChunk; j += kThreads) {
      const int64_t go = j < n ? j * src.sstride : 0;
      cp_async4_s(ksc_s + j * 4, src.ks + go, j < n ? 4 : 0);
      cp_async4_s(vsc_s + j * 4, src.vs + go, j < n ? 4 : 0);
    }
  }
  cp_async_commit();
}

// FP8: buffer b's codes widened to the bf16 tiles (exact). The caller has waited for the copy
// and synchronised the kThreads threads that share it (thread `tid` of them).
template <int D, int kThreads = 32>
__device__ __forceinline__ void mma_widen_kv(const MmaWarpSmem<D, true>& sm, int b, int tid) {
  const uint8_t *kc = sm.kc(b), *vc = sm.vc(b);
  bf16_bits *ks = sm.ks(b), *vs = sm.vs(b);
#pragma unroll 4
  for (int i = tid; i < kAttnChunk * D / 8; i += kThreads) {
    const int j = i / (D / 8), u = i % (D / 8);
    const uint2 ck = *reinterpret_cast<const uint2*>(kc + i * 8);
    const uint2 cv = *reinterpret_cast<const uint2*>(vc + i * 8);
    *reinterpret_cast<uint4*>(ks + MmaSmem<D>::at(j, u)) =
        make_uint4(e4m3x2_bf16x2(ck.x), e4m3x2_bf16x2(ck.x >> 16), e4m3x2_bf16x2(ck.y),
                   e4m3x2_bf16x2(ck.y >> 16));
    *reinterpret_cast<uint4*>(vs + MmaSmem<D>::at(j, u)) =
        make_uint4(e4m3x2_bf16x2(cv.x), e4m3x2_bf16x2(cv.x >> 16), e4m3x2_bf16x2(cv.y),
                   e4m3x2_bf16x2(cv.y >> 16));
  }
}

// A chunk's softmax statistics and weights for the tile from its scores s (the S = Σ q·k chains,
// m16n8 accumulator layout over 8 n8 key tiles): n[half] valid keys for row g + 8·half (0: the
// row takes no part); FP8: ksc / vsc the chunk's key and value row scales. p_hi/p_lo: the A
// operands of Σ w·v (k16 slice kk of the keys).
template <bool F8>
__device__ __forceinline__ void mma_chunk_softmax(float (&s)[8][4], const int (&n)[2], float scale,
                                                  const float* ksc, const float* vsc, int lane,
                                                  float (&m)[2], float (&l)[2],
                                                  uint32_t (&p_hi)[4][4], uint32_t (&p_lo)[4][4]) {
  const int cq = 2 * (lane & 3);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = s[nt][2 * half + e];
        const int j = 8 * nt + cq + e;
        if constexpr (F8) v = __fmul_rn(v, ksc[j]);
        v = j < n[half] ? __fmul_rn(v, scale) : -INFINITY;
        mx = fmaxf(mx, v);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = s[nt][2 * half + e];
        v = n[half] > 0 ? expf(__fsub_rn(v, mx)) : 0.0f;
        sum = __fadd_rn(sum, v);
      }
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
    m[half] = mx;
    l[half] = sum;
    if constexpr (F8)  // w_j = e_j · s_v (0 past the row's keys: e_j = 0)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          s[nt][2 * half + e] = __fmul_rn(s[nt][2 * half + e], vsc[8 * nt + cq + e]);
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float* e = &s[2 * kk + (i >> 1)][2 * (i & 1)];
      p_hi[kk][i] = bf16_pair(e[0], e[1]);
      p_lo[kk][i] = bf16_pair(__fsub_rn(e[0], bf16_round(e[0])), __fsub_rn(e[1], bf16_round(e[1])));
    }
}

// The S chains of key tiles 2·np0 .. 2·(np0 + NP) - 1 of a chunk (n8 tiles of 8 keys) for the
// tile's rows: q_hi's chain over D continued by q_lo's, from q at qs and K at ks in MmaSmem's
// layout; s[i] the m16n8 accumulator of key tile 2·np0 + i. Every kernel's scores come from here.
template <int D, int NP>
__device__ __forceinline__ void mma_chunk_scores(const bf16_bits* qs, const bf16_bits* ks, int np0,
                                                 int lane, float (&s)[2 * NP][4]) {
#pragma unroll
  for (int nt = 0; nt < 2 * NP; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
  for (int part = 0; part < 2; ++part) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      ldmatrix_x4(af, qs + part * kMmaRows * D + MmaSmem<D>::at(lane & 15, 2 * kk + (lane >> 4)));
#pragma unroll
      for (int np = 0; np < NP; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, ks + MmaSmem<D>::at(16 * (np0 + np) + (lane & 7) + ((lane >> 4) << 3),
                                            2 * kk + ((lane >> 3) & 1)));
        mma_bf16(s[2 * np], af, bk[0], bk[1]);
        mma_bf16(s[2 * np + 1], af, bk[2], bk[3]);
      }
    }
  }
}

// One chunk's scores for the tile (mma.sync chains from shared memory), then its softmax
// statistics and weights (mma_chunk_softmax).
template <int D, bool F8>
__device__ __forceinline__ void mma_chunk_weights(const MmaWarpSmem<D, F8>& sm, int b,
                                                  const int (&n)[2], float scale, int lane,
                                                  float (&m)[2], float (&l)[2],
                                                  uint32_t (&p_hi)[4][4], uint32_t (&p_lo)[4][4]) {
  float s[8][4];
  mma_chunk_scores<D, 4>(sm.qs, sm.ks(b), 0, lane, s);
  mma_chunk_softmax<F8>(s, n, scale, F8 ? sm.ksc(b) : nullptr, F8 ? sm.vsc(b) : nullptr, lane, m, l,
                        p_hi, p_lo);
}

// Σ w·v of the chunk for output dims 8·dt .. 8·dt + 7, dt = 2·dp and 2·dp + 1: o[0], o[1] in the
// mma accumulator layout.
template <int D>
__device__ __forceinline__ void mma_chunk_values(const bf16_bits* vs, const uint32_t (&p_hi)[4][4],
                                                 const uint32_t (&p_lo)[4][4], int dp, int lane,
                                                 float (&o)[2][4]) {
  uint32_t b[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    ldmatrix_x4_trans(b[kk], vs + MmaSmem<D>::at(16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                 2 * dp + (lane >> 4)));
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[i][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    mma_bf16(o[0], p_hi[kk], b[kk][0], b[kk][1]);
    mma_bf16(o[1], p_hi[kk], b[kk][2], b[kk][3]);
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    mma_bf16(o[0], p_lo[kk], b[kk][0], b[kk][1]);
    mma_bf16(o[1], p_lo[kk], b[kk][2], b[kk][3]);
  }
}

// Calls f(run mask, table row of the run, last position of the run) for each group of the
// tile's rows that share a sequence (one group without tables), in order of first row.
template <class F>
__device__ __forceinline__ void mma_runs(const MmaTile& m, int lane, F&& f) {
  uint32_t pending = m.valid;
  while (pending) {
    const int lead = __ffs(pending) - 1;
    const int seq = __shfl_sync(0xffffffffu, m.my_seq, lead);
    const int64_t t_run = __shfl_sync(0xffffffffu, m.my_t, lead);
    const bool mine = lane < kMmaRows && ((pending >> lane) & 1) && m.my_seq == seq;
    const uint32_t run = __ballot_sync(0xffffffffu, mine) & 0xffffu;
    int last = mine ? m.my_pos : -1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    pending &= ~run;
    f(run, t_run, last);
  }
}

// Keys of chunk j0 visible to row g + 8·half when it is in `run`.
__device__ __forceinline__ void mma_row_keys(const MmaTile& m, uint32_t run, int64_t j0, int lane,
                                             int (&n)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = (lane >> 2) + 8 * half;
    const int64_t k = (run >> row) & 1 ? m.pos[half] - j0 + 1 : 0;
    n[half] = int(k < 0 ? 0 : k > kAttnChunk ? kAttnChunk : k);
  }
}

// A chunk's per-row results: visible keys n, softmax statistics, the weights as A operands.
struct MmaChunk {
  int n[2];
  float m[2], l[2];
  uint32_t ph[4][4], pl[4][4];
};

// Walks chunks c_begin .. c_end - 1 of the rows of `run` (table row t_run, last position
// `last`): with kBufs = 2 chunk c + 1's copy is in flight while chunk c is computed. first()
// runs once while the first copy is in flight; f(c, chunk, V tile) takes each chunk's results.
template <int D, bool F8, int kBufs, class First, class F>
__device__ __forceinline__ void mma_walk(const AttnArgs& a, const MmaTile& m, uint32_t run,
                                         int64_t t_run, int last, int64_t c_begin, int64_t c_end,
                                         const MmaWarpSmem<D, F8>& sm, int lane, First&& first,
                                         F&& f) {
  auto issue = [&](int64_t c, int b) {
    const int64_t nl = last - c * kAttnChunk + 1;
    mma_issue_kv<D, F8>(a, m, t_run, c * kAttnChunk, int(nl < kAttnChunk ? nl : kAttnChunk), sm, b,
                        lane);
  };
  __syncwarp();  // the buffers are no longer read (a previous run)
  issue(c_begin, 0);
  first();
  for (int64_t c = c_begin; c < c_end; ++c) {
    const int b = kBufs == 1 ? 0 : int((c - c_begin) & 1);
    if (kBufs == 2 && c + 1 < c_end) {
      issue(c + 1, b ^ 1);  // buffer b ^ 1 was chunk c - 1's, no longer read
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncwarp();
    if constexpr (F8) {
      mma_widen_kv<D>(sm, b, lane);
      __syncwarp();
    }
    MmaChunk ch;
    mma_row_keys(m, run, c * kAttnChunk, lane, ch.n);
    mma_chunk_weights<D, F8>(sm, b, ch.n, a.scale, lane, ch.m, ch.l, ch.ph, ch.pl);
    f(c, static_cast<const MmaChunk&>(ch), static_cast<const bf16_bits*>(sm.vs(b)));
    __syncwarp();  // chunk c's buffer (and FP8's wide tiles) no longer read
    if (kBufs == 1 && c + 1 < c_end) issue(c + 1, 0);
  }
}

// A tile's running softmax state (rows g, g + 8 of the mma layout) and output accumulators.
template <int D>
struct MmaState {
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, acc[D / 8][4];
};

// merge()'s coefficients of chunk c for the tile's two rows (fa for the state, fb for the
// chunk; first: the row's first chunk, c = 0), the state's statistics updated; rows that see no
// key of the chunk keep their state.
struct MmaFoldCoef {
  float fa[2], fb[2];
  bool first[2];
};
template <int D>
__device__ __forceinline__ MmaFoldCoef mma_fold_stats(MmaState<D>& st, int64_t c,
                                                      const MmaChunk& ch) {
  MmaFoldCoef f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    f.first[half] = c == 0;
    if (ch.n[half] == 0 || f.first[half]) {
      f.fa[half] = 0.0f, f.fb[half] = 1.0f;
      if (ch.n[half] > 0) st.m[half] = ch.m[half], st.l[half] = ch.l[half];
      continue;
    }
    const float mn = fmaxf(st.m[half], ch.m[half]);
    f.fa[half] = expf(__fsub_rn(st.m[half], mn));
    f.fb[half] = expf(__fsub_rn(ch.m[half], mn));
    st.l[half] = __fadd_rn(__fmul_rn(st.l[half], f.fa[half]), __fmul_rn(ch.l[half], f.fb[half]));
    st.m[half] = mn;
  }
  return f;
}
// acc element x (accumulator slot e: row half e / 2) <- x ⊕ o.
__device__ __forceinline__ void mma_fold_elem(float& x, float o, int e, const MmaChunk& ch,
                                              const MmaFoldCoef& f) {
  const int half = e >> 1;
  if (ch.n[half] == 0) return;
  x = f.first[half] ? o : __fadd_rn(__fmul_rn(x, f.fa[half]), __fmul_rn(o, f.fb[half]));
}

// st <- st ⊕ chunk c (merge()'s formula), or st = chunk for a row's first chunk (c = 0); rows
// that see no key of the chunk keep their state.
template <int D>
__device__ __forceinline__ void mma_fold(MmaState<D>& st, int64_t c, const MmaChunk& ch,
                                         const bf16_bits* vs, int lane) {
  const MmaFoldCoef f = mma_fold_stats<D>(st, c, ch);
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp) {
    float o[2][4];
    mma_chunk_values<D>(vs, ch.ph, ch.pl, dp, lane, o);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) mma_fold_elem(st.acc[2 * dp + i][e], o[i][e], e, ch, f);
  }
}

// The tile's rows of out: acc / l, rounded to bf16.
template <int D>
__device__ __forceinline__ void mma_write_out(const AttnArgs& a, const MmaTile& m,
                                              const MmaState<D>& st, int lane) {
  const int cq = 2 * (lane & 3);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (m.th[half] < 0) continue;
    const float inv = __fdiv_rn(1.0f, st.l[half]);
    bf16_bits* o = a.out + m.th[half] * D + cq;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(o + 8 * dt) =
          bf16_pair(__fmul_rn(st.acc[dt][2 * half], inv), __fmul_rn(st.acc[dt][2 * half + 1], inv));
  }
}

// One warp per (KV head, tile) walks the chunks, one chunk buffer (two measured 1.35× slower
// for bf16 prefill: 3 warps an SM instead of 5).
template <int D, bool F8>
__global__ void __launch_bounds__(32) attn_mma_fused_kernel(AttnArgs a, int64_t n_tiles) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) char sm_mma[];
  const MmaWarpSmem<D, F8> sm(sm_mma, 1);
  const int lane = threadIdx.x;
  const MmaTile m = mma_tile(a, blockIdx.x / n_tiles, blockIdx.x % n_tiles, lane);
  mma_load_q<D>(a, m, sm.qs, lane);
  MmaState<D> st;
  mma_runs(m, lane, [&](uint32_t run, int64_t t_run, int last) {
    mma_walk<D, F8, 1>(
        a, m, run, t_run, last, 0, last / kAttnChunk + 1, sm, lane, [] {},
        [&](int64_t c, const MmaChunk& ch, const bf16_bits* vs) {
          mma_fold<D>(st, c, ch, vs, lane);
        });
  });
  mma_write_out<D>(a, m, st, lane);
}

// kBlockTiles warps a block, one per tile of kMmaRows consecutive rows of one KV head, share
// each chunk's K / V: the block copies it once (two buffers, the next chunk's copy in flight)
// where Fused copies it once a warp. Each warp computes exactly Fused's chunk partials and
// folds (mma_chunk_weights, mma_fold), so the bits are Fused's. Rows of several sequences: the
// block takes one sequence at a time (in order of first row), as mma_runs does within a warp.
// The tile groups with the latest positions (the most chunks) are launched first.
constexpr int kBlockTiles = 4;

// The rows of a Block / BlockWG block, taken one sequence at a time (in order of first row, as
// mma_runs does within a warp): seq (-1: no row, or done), position and table row of each.
struct BlockRuns {
  static constexpr int kRows = kBlockTiles * kMmaRows;
  int seq[kRows], pos[kRows], last[kBlockTiles], lead;
  int64_t t[kRows];
};
__device__ __forceinline__ void block_runs_init(BlockRuns& r, const MmaTile& m, int warp,
                                                int lane) {
  if (lane < kMmaRows) {
    const bool ok = (m.valid >> lane) & 1;
    r.seq[warp * kMmaRows + lane] = ok ? m.my_seq : -1;
    r.pos[warp * kMmaRows + lane] = m.my_pos;
    r.t[warp * kMmaRows + lane] = m.my_t;
  }
}
// The next sequence's rows (false: none left): this warp's rows of it (`run`, mma_runs' mask),
// its table row t_run, the last position among the warp's rows (wlast, -1: none) and among the
// block's (last). Every thread of the block calls it; it synchronises them.
__device__ __forceinline__ bool block_runs_next(BlockRuns& r, int tid, int warp, int lane,
                                                uint32_t& run, int64_t& t_run, int& wlast,
                                                int& last) {
  __syncthreads();  // seq as the last run left it; that run's buffers no longer read
  if (tid == 0) {
    int lead = -1;
    for (int i = 0; i < BlockRuns::kRows && lead < 0; ++i)
      if (r.seq[i] >= 0) lead = i;
    r.lead = lead;
  }
  __syncthreads();
  const int lead = r.lead;
  if (lead < 0) return false;
  const int seq = r.seq[lead];
  t_run = r.t[lead];
  const bool mine = lane < kMmaRows && r.seq[warp * kMmaRows + lane] == seq;
  run = __ballot_sync(0xffffffffu, mine) & 0xffffu;
  wlast = mine ? r.pos[warp * kMmaRows + lane] : -1;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) wlast = max(wlast, __shfl_xor_sync(0xffffffffu, wlast, o));
  if (lane == 0) r.last[warp] = wlast;
  __syncthreads();  // every thread has read seq for this run
  last = -1;
#pragma unroll
  for (int w = 0; w < kBlockTiles; ++w) last = max(last, r.last[w]);
  if (tid < BlockRuns::kRows && r.seq[tid] == seq) r.seq[tid] = -1;
  return true;
}

// Walks chunks 0 .. c_end - 1 of a run through the block's two chunk buffers: issue(c, b) starts
// chunk c's copy into buffer b (one cp.async group a thread, every thread), chunk c + 1's is in
// flight while c is computed; ready(b) makes buffer b's copy visible to every thread (a block
// barrier, and whatever else the kernel needs); f(c, b) computes the chunk. A buffer is reused
// two chunks later, after every thread has passed a barrier.
template <class Issue, class Ready, class F>
__device__ __forceinline__ void block_walk(int64_t c_end, Issue&& issue, Ready&& ready, F&& f) {
  issue(0, 0);
  for (int64_t c = 0; c < c_end; ++c) {
    const int b = int(c & 1);
    if (c + 1 < c_end) {
      issue(c + 1, b ^ 1);  // buffer b ^ 1 held chunk c - 1, read by no warp any more
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    ready(b);
    f(c, b);
    __syncthreads();  // buffer b no longer read
  }
}

template <int D, bool F8>
struct MmaBlockSmem {
  using L = MmaSmem<D>;
  static constexpr int kBytes =
      kBlockTiles * L::kQBytes + 2 * L::buf_bytes(F8) + (F8 ? L::kTileBytes : 0);
};

template <int D, bool F8>
__global__ void __launch_bounds__(32 * kBlockTiles)
    attn_mma_block_kernel(AttnArgs a, int64_t n_groups) {
  pdl_wait();
  pdl_trigger();
  constexpr int kThreads = 32 * kBlockTiles;
  using L = MmaSmem<D>;
  extern __shared__ __align__(16) char sm_blk[];
  __shared__ BlockRuns br;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t hk = blockIdx.x % a.Hkv, group = n_groups - 1 - blockIdx.x / a.Hkv;
  const MmaWarpSmem<D, F8> sm(sm_blk + warp * L::kQBytes, sm_blk + kBlockTiles * L::kQBytes, 2);
  const MmaTile m = mma_tile(a, hk, group * kBlockTiles + warp, lane);
  mma_load_q<D>(a, m, sm.qs, lane);
  block_runs_init(br, m, warp, lane);
  MmaState<D> st;
  uint32_t run;
  int64_t t_run;
  int wlast, last;
  while (block_runs_next(br, tid, warp, lane, run, t_run, wlast, last)) {
    const int64_t c_end = last / kAttnChunk + 1, my_end = wlast >= 0 ? wlast / kAttnChunk + 1 : 0;
    auto issue = [&](int64_t c, int b) {
      const int64_t nl = last - c * kAttnChunk + 1;
      mma_issue_kv<D, F8, kThreads>(a, m, t_run, c * kAttnChunk,
                                    int(nl < kAttnChunk ? nl : kAttnChunk), sm, b, tid);
    };
    block_walk(
        c_end, issue,
        [&](int b) {
          __syncthreads();     // chunk c's copy is visible to every warp
          if constexpr (F8) {  // (the wide tiles: read by no warp since the last barrier)
            mma_widen_kv<D, kThreads>(sm, b, tid);
            __syncthreads();
          }
        },
        [&](int64_t c, int b) {
          if (c >= my_end) return;  // the chunks Fused walks for this warp's rows of the run
          MmaChunk ch;
          mma_row_keys(m, run, c * kAttnChunk, lane, ch.n);
          mma_chunk_weights<D, F8>(sm, b, ch.n, a.scale, lane, ch.m, ch.l, ch.ph, ch.pl);
          mma_fold<D>(st, c, ch, sm.vs(b), lane);
        });
  }
  mma_write_out<D>(a, m, st, lane);
}

// BlockWG (bf16 cache): the Block kernel with each chunk's scores computed by the block's warps
// as one warpgroup with wgmma (m64n64k16: the 4 tiles' 64 rows × the chunk's 64 keys, q_hi's
// chain over D continued by q_lo's, from zeroed accumulators: d = a·b + d from +0, as the mma
// chain starts), whose accumulator layout per warp is the m16n8 layout of mma_chunk_weights'
// scores, and a k16 step of which gives mma.sync's bits (bench/cuda/wgmma_probe). q and K sit in
// the 128-byte-swizzled K-major layout the matmuls' wgmma reads (rows of 64 d, 1024-byte groups
// of 8 rows, D / 64 such blocks), V in MmaSmem's layout for the mma.sync Σ w·v. Softmax, Σ w·v
// and the fold are the Block kernel's: the same bits.
// PV (BlockWGPV): Σ w·v on wgmma too. V sits in K's layout, which is wgmma's MN-major B operand
// (a row of 64 d per key, the keys as k); the weights stay in registers as wgmma's A (each warp's
// 16 rows: the mma.sync A fragments p_hi, p_lo); per 64 output dims one m64n64k16 chain of 8
// steps, p_hi's 4 then p_lo's 4, from zeroed accumulators: the mma.sync chain of
// mma_chunk_values, whose accumulator layout it has. Every warp of the warpgroup takes part in
// every chunk's products: a warp whose rows see none of the chunk passes zero weights and folds
// nothing.
template <int D>
struct WgSmem {
  static constexpr int kKBlocks = D / 64, kRows = kBlockTiles * kMmaRows;  // 64 rows
  static constexpr int kQPart = kKBlocks * kRows * 128;                    // bytes: one of hi/lo
  static constexpr int kKTile = kKBlocks * kAttnChunk * 128, kVTile = kAttnChunk * D * 2;
  static constexpr int kBuf = kKTile + kVTile;
  static constexpr int kBytes = 2 * kQPart + 2 * kBuf + 1024;  // + alignment slack
  // Byte offset of element (row, d) in a K-major swizzled tile of `rows` rows.
  __device__ static __forceinline__ int at(int rows, int row, int d) {
    return (d >> 6) * rows * 128 + row * 128 + ((((d >> 3) & 7) ^ (row & 7)) << 4) + (d & 7) * 2;
  }
};

// st <- st ⊕ chunk c as mma_fold, Σ w·v on wgmma from V in K's layout at vt (all 4 warps).
// An n64 product reads one 64-wide block of d, so the descriptor's block-to-block offset is never
// used: it is given the group stride too (1,024, as the stride byte offset), which leaves the
// result right whichever of the two offsets the hardware takes as the k-group stride.
template <int D>
__device__ __forceinline__ void mma_fold_wg(MmaState<D>& st, int64_t c, const MmaChunk& ch,
                                            const unsigned char* vt) {
  const MmaFoldCoef f = mma_fold_stats<D>(st, c, ch);
  constexpr uint32_t kNBlock = kAttnChunk * 128;  // bytes from one 64-wide d block to the next
#pragma unroll
  for (int h = 0; h < D / 64; ++h) {
    float o[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int part = 0; part < 2; ++part)  // p_hi's chain, then p_lo's
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_bf16_rs64_tb(o, part ? ch.pl[kk] : ch.ph[kk],
                           wgmma_desc_sw128_mn(vt + h * kNBlock + kk * 2048, 1024), 1);
    wgmma_commit();
    wgmma_wait<0>();
    // o[4j + e]: output dims 64h + 8j + 2·(lane % 4) (+ 1): acc tile 8h + j.
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) mma_fold_elem(st.acc[8 * h + j][e], o[4 * j + e], e, ch, f);
  }
}

template <int D, bool PV>
__global__ void __launch_bounds__(32 * kBlockTiles)
    attn_wg_block_kernel(AttnArgs a, int64_t n_groups) {
  pdl_wait();
  pdl_trigger();
  static_assert(kBlockTiles == 4, "one warpgroup");
  constexpr int kThreads = 32 * kBlockTiles, kRows = kBlockTiles * kMmaRows;
  using W = WgSmem<D>;
  extern __shared__ __align__(16) unsigned char sm_raw[];
  unsigned char* const sm = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(sm_raw) + 1023) & ~uintptr_t(1023));
  __shared__ BlockRuns br;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t hk = blockIdx.x % a.Hkv, group = n_groups - 1 - blockIdx.x / a.Hkv;
  unsigned char* const qt = sm;  // q_hi, then q_lo
  auto kt = [&](int b) { return sm + 2 * W::kQPart + b * W::kBuf; };
  auto vt = [&](int b) { return reinterpret_cast<bf16_bits*>(kt(b) + W::kKTile); };
  const MmaTile m = mma_tile(a, hk, group * kBlockTiles + warp, lane);

  // q of the warp's 16 rows (rows 16·warp .. of the warpgroup's 64) as q_hi, q_lo.
  mma_load_q_to<D>(a, m, lane, [&](int row, int d, uint32_t hi, uint32_t lo) {
    const int o = W::at(kRows, kMmaRows * warp + row, d);
    *reinterpret_cast<uint32_t*>(qt + o) = hi;
    *reinterpret_cast<uint32_t*>(qt + W::kQPart + o) = lo;
  });
  block_runs_init(br, m, warp, lane);
  MmaState<D> st;
  uint32_t run;
  int64_t t_run;
  int wlast, last;
  while (block_runs_next(br, tid, warp, lane, run, t_run, wlast, last)) {
    const int64_t c_end = last / kAttnChunk + 1, my_end = wlast >= 0 ? wlast / kAttnChunk + 1 : 0;
    // Chunk c's K (K-major swizzled) and V (MmaSmem layout) into buffer b; rows past the run's
    // last key zero-filled (mma_issue_kv's rule).
    auto issue = [&](int64_t c, int b) {
      const int64_t nl = last - c * kAttnChunk + 1;
      const int n = int(nl < kAttnChunk ? nl : kAttnChunk);
      const Bf16Rows src = chunk_rows<Bf16Rows>(a, t_run, hk, c * kAttnChunk);
      const uint32_t ks_s = smem_addr(kt(b)), vs_s = smem_addr(vt(b));
#pragma unroll 4
      for (int i = tid; i < kAttnChunk * D / 8; i += kThreads) {
        const int j = i / (D / 8), u = i % (D / 8);
        const bool in = j < n;
        const int64_t go = in ? j * src.stride + u * 8 : 0;
        cp_async16_s(ks_s + uint32_t(W::at(kAttnChunk, j, 8 * u)), src.k + go, in ? 16 : 0);
        cp_async16_s(vs_s + uint32_t(PV ? W::at(kAttnChunk, j, 8 * u) : MmaSmem<D>::at(j, u) * 2),
                     src.v + go, in ? 16 : 0);
      }
      cp_async_commit();
    };
    block_walk(
        c_end, issue,
        [](int) {
          fence_proxy_async();  // the copies (and q's stores) visible to wgmma
          __syncthreads();      // chunk c's copy is visible to every warp
        },
        [&](int64_t c, int b) {
          float sc[32];
#pragma unroll
          for (int i = 0; i < 32; ++i) sc[i] = 0.0f;
          wgmma_fence();
#pragma unroll
          for (int part = 0; part < 2; ++part)
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
              const int off = (kk >> 2) * 8192 + (kk & 3) * 32;  // k-block, then k16 step in it
              wgmma_bf16<64>(sc, wgmma_desc_sw128(qt + part * W::kQPart + off),
                             wgmma_desc_sw128(kt(b) + off), 1);
            }
          wgmma_commit();
          wgmma_wait<0>();
          MmaChunk ch;
          if (c >= my_end) {  // the chunks Fused walks for this warp's rows of the run
            if constexpr (!PV) {
              return;
            } else {
#pragma unroll
              for (int kk = 0; kk < 4; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i) ch.ph[kk][i] = ch.pl[kk][i] = 0u;
              ch.n[0] = ch.n[1] = 0;
            }
          } else {
            float s[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
              for (int e = 0; e < 4; ++e) s[nt][e] = sc[4 * nt + e];
            mma_row_keys(m, run, c * kAttnChunk, lane, ch.n);
            mma_chunk_softmax<false>(s, ch.n, a.scale, nullptr, nullptr, lane, ch.m, ch.l, ch.ph,
                                     ch.pl);
          }
          if constexpr (PV)
            mma_fold_wg<D>(st, c, ch, kt(b) + W::kKTile);
          else
            mma_fold<D>(st, c, ch, vt(b), lane);
        });
  }
  mma_write_out<D>(a, m, st, lane);
}

// Split: output dims 16·dp .. 16·dp + 15 of chunk c's partial (o from mma_chunk_values) for the
// tile's rows that see the chunk, and (dp == 0) its m and l, into the workspace.
template <int D>
__device__ __forceinline__ void mma_store_partial(const AttnArgs& a, const MmaTile& m,
                                                  int64_t max_chunks, int64_t c, int dp,
                                                  const MmaChunk& ch, const float (&o)[2][4],
                                                  int lane) {
  const int cq = 2 * (lane & 3);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (ch.n[half] == 0) continue;
    float* w = a.workspace + (m.th[half] * max_chunks + c) * kPartFloats<D>;
#pragma unroll
    for (int i = 0; i < 2; ++i)
      *reinterpret_cast<float2*>(w + 8 * (2 * dp + i) + cq) =
          make_float2(o[i][2 * half], o[i][2 * half + 1]);
    if (dp == 0 && (lane & 3) == 0) w[D] = ch.m[half], w[D + 1] = ch.l[half];
  }
}

// Group g of the n_groups split blocks of a (KV head, tile) takes chunks [b, e) of a run that
// sees c_seen chunks: an even share of the chunks the run actually sees. (The grid is sized for
// the pass's max_pos, which the backend buckets to a power of two of chunks so that a recorded
// decode step serves contexts up to twice the one recorded: sharing out max_pos's chunks left
// the groups past the context idle, half the warps at 32K.) Each chunk is in one group; how
// chunks are grouped changes no bits (each partial is computed alone).
__device__ __forceinline__ void split_group_chunks(int64_t g, int64_t n_groups, int64_t c_seen,
                                                   int64_t& b, int64_t& e) {
  b = g * c_seen / n_groups;
  e = (g + 1) * c_seen / n_groups;
}

// One warp per (KV head, tile, group of chunks), two chunk buffers (the next chunk's copy in
// flight while one is computed; one buffer and 5 warps an SM instead of 3 measured 85.3 against
// 80.5 µs at 32K): the partials of the tile's rows for each chunk of the group they see, in the
// workspace layout of attn_split_chunks_kernel (merged by attn_split_merge_kernel). How chunks
// are grouped changes no bits: each partial is computed alone.
template <int D, bool F8>
__global__ void __launch_bounds__(32)
    attn_mma_split_kernel(AttnArgs a, int64_t n_tiles, int64_t max_chunks, int64_t n_groups) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) char sm_mma[];
  const MmaWarpSmem<D, F8> sm(sm_mma, 2);
  const int lane = threadIdx.x;
  const int64_t g = blockIdx.x % n_groups, ht = blockIdx.x / n_groups;
  const MmaTile m = mma_tile(a, ht / n_tiles, ht % n_tiles, lane);
  bool q_loaded = false;
  mma_runs(m, lane, [&](uint32_t run, int64_t t_run, int last) {
    int64_t c_begin, c_end;
    split_group_chunks(g, n_groups, last / kAttnChunk + 1, c_begin, c_end);
    if (c_begin >= c_end) return;
    mma_walk<D, F8, 2>(
        a, m, run, t_run, last, c_begin, c_end, sm, lane,
        [&] {
          if (!q_loaded) mma_load_q<D>(a, m, sm.qs, lane), q_loaded = true;
        },
        [&](int64_t c, const MmaChunk& ch, const bf16_bits* vs) {
#pragma unroll
          for (int dp = 0; dp < D / 16; ++dp) {
            float o[2][4];
            mma_chunk_values<D>(vs, ch.ph, ch.pl, dp, lane, o);
            mma_store_partial<D>(a, m, max_chunks, c, dp, ch, o, lane);
          }
        });
  });
}

// Split over the 4 warps of a block: block (KV head, tile, group of chunks) computes the
// partials of its chunks for the tile's rows that attn_mma_split_kernel's warp computes, with the
// work spread: the 128 threads copy K and V, warp w runs the S chains of key tiles 2w, 2w + 1
// (mma_chunk_weights' chains for those tiles), the raw scores go through shared memory so that
// every warp runs mma_chunk_softmax on the chunk's whole score tile (the same inputs: the same m,
// l and weights), and warp w runs Σ w·v (mma_chunk_values) for its quarter of the output dims.
// The same partials, bit for bit; a warp's serial instruction stream, which set the one-warp
// kernel's time at short contexts (H100, ncu: 2,600 instructions a warp at 4.4 cycles each, one
// warp an SM), is a quarter as long. kBufs = 1 (Chunk4): a block a chunk, its copy then its
// compute. kBufs = 3 (Walk4): chunks c + 1 and c + 2 in flight while chunk c is computed, two
// blocks an SM; it pays on the FP8 cache, whose codes are widened once a block (launch_mma's
// table), not at 32K, where the one-warp kernel's 3 warps an SM with no barriers do better.
SplitKernel g_split_kernel = SplitKernel::Auto;  // set_attention_split_kernel (tests, benchmarks)
int64_t g_split_groups = 0;
constexpr int64_t kSplit4MaxChunks = 64;  // Auto: Chunk4 / Walk4 up to here, Warp1 above
constexpr int kWalkBufs = 3;
// The merge folded into a Split4 pass of one 16-row tile per KV head (AttnArgs::counters): the
// last of a KV head's n_groups blocks to finish (CUDA's last-block pattern: fences, a counter,
// set back to zero) merges the tile's rows with attn_split_merge_kernel's arithmetic: the running
// max is a prefix max (exact in any grouping), the coefficients exp(M - M'), exp(m - M'), l and
// acc folded left to right with the first chunk as the state, out = bf16(acc · (1 / l)): the
// same bits. One thread a row computes its coefficients and 1 / l into shared memory (`sm`, the
// kernel's own, free by then: 16 rows × max_chunks float2 and 16 floats); then each thread takes
// output dims, reading the partials through L2 (__ldcg).
template <int D>
__device__ __forceinline__ void split_fold_merge(const AttnArgs& a, int64_t hk, int64_t n_groups,
                                                 int64_t max_chunks, char* sm) {
  if (!last_block_arrive(a.counters + hk, unsigned(n_groups), true)) return;
  constexpr int kP = kPartFloats<D>;
  const int64_t G = a.H / a.Hkv;
  const int rows = int(a.T * G);  // <= kMmaRows: the tile's rows r = t · G + g
  auto* coef = reinterpret_cast<float2*>(sm);
  auto* linv = reinterpret_cast<float*>(coef + kMmaRows * max_chunks);
  auto th_of = [&](int r) { return int64_t(r / G) * a.H + hk * G + r % G; };
  if (int(threadIdx.x) < rows) {
    const int r = int(threadIdx.x);
    const float* src = a.workspace + th_of(r) * max_chunks * kP;
    const int64_t nc = n_chunks(row_pos(a, r / G));
    float M = __ldcg(src + D), l = __ldcg(src + D + 1);
    for (int64_t c = 1; c < nc; ++c) {
      const float mc = __ldcg(src + c * kP + D), lc = __ldcg(src + c * kP + D + 1);
      const float Mn = fmaxf(M, mc);
      const float2 f = make_float2(expf(__fsub_rn(M, Mn)), expf(__fsub_rn(mc, Mn)));
      coef[r * max_chunks + c] = f;
      l = __fadd_rn(__fmul_rn(l, f.x), __fmul_rn(lc, f.y));
      M = Mn;
    }
    linv[r] = __fdiv_rn(1.0f, l);
  }
  __syncthreads();
  for (int idx = int(threadIdx.x); idx < rows * D; idx += int(blockDim.x)) {
    const int r = idx / D, d = idx % D;
    const int64_t th = th_of(r), nc = n_chunks(row_pos(a, r / G));
    const float* src = a.workspace + th * max_chunks * kP + d;
    const float2* cf = coef + r * max_chunks;
    float acc = __ldcg(src);
#pragma unroll 8
    for (int64_t c = 1; c < nc; ++c) {
      const float2 f = cf[c];
      acc = __fadd_rn(__fmul_rn(acc, f.x), __fmul_rn(__ldcg(src + c * kP), f.y));
    }
    a.out[th * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(acc, linv[r])));
  }
}
// Whether a Split4 pass folds its merge (split_fold_merge): contexts of at most kSplit4MaxChunks
// chunks (a row's coefficients are one thread's chain), its shared memory within the kernel's.
__host__ __device__ __forceinline__ bool split_folds(const AttnArgs& a, int64_t max_chunks,
                                                     int smem) {
  return a.counters && a.Hkv <= kAttnFoldCounters && a.T * (a.H / a.Hkv) <= kMmaRows &&
         max_chunks <= kSplit4MaxChunks &&
         size_t(kMmaRows) * size_t(max_chunks) * 8 + kMmaRows * 4 <= size_t(smem);
}

template <int D, bool F8, int kBufs>
struct Split4Smem {
  using L = MmaSmem<D>;
  static constexpr int kBufOff = L::kQBytes;
  static constexpr int kScoreOff = L::kQBytes + kBufs * L::buf_bytes(F8) + (F8 ? L::kTileBytes : 0);
  static constexpr int kBytes = kScoreOff + 8 * 32 * 16;  // [8 key tiles][32 lanes] float4
};

template <int D, bool F8, int kBufs>
__global__ void __launch_bounds__(128)
    attn_mma_split4_kernel(AttnArgs a, int64_t n_tiles, int64_t max_chunks, int64_t n_groups) {
  pdl_wait();
  pdl_trigger();
  using S4 = Split4Smem<D, F8, kBufs>;
  extern __shared__ __align__(16) char sm4[];
  const MmaWarpSmem<D, F8> sm(sm4, sm4 + S4::kBufOff, kBufs);
  float4* const scores = reinterpret_cast<float4*>(sm4 + S4::kScoreOff);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t g = blockIdx.x % n_groups, ht = blockIdx.x / n_groups;
  const MmaTile m = mma_tile(a, ht / n_tiles, ht % n_tiles, lane);
  bool q_loaded = false;
  // (Every warp computes the same tile, runs and lasts: the control flow is the block's.)
  mma_runs(m, lane, [&](uint32_t run, int64_t t_run, int last) {
    int64_t c_begin, c_end;
    split_group_chunks(g, n_groups, last / kAttnChunk + 1, c_begin, c_end);
    if (c_begin >= c_end) return;
    // Chunk c's copy into buffer b, one cp.async group a thread (an empty one past c_end, so
    // every thread's group count is the same).
    auto issue = [&](int64_t c, int b) {
      if (c >= c_end) return cp_async_commit();
      const int64_t nl = last - c * kAttnChunk + 1;
      mma_issue_kv<D, F8, 128>(a, m, t_run, c * kAttnChunk, int(nl < kAttnChunk ? nl : kAttnChunk),
                               sm, b, tid);
    };
    __syncthreads();  // a previous run's buffers, tiles and scores are no longer read
#pragma unroll
    for (int b = 0; b < (kBufs > 1 ? kBufs - 1 : 1); ++b) issue(c_begin + b, b);
    if (!q_loaded) {
      if (warp == 0) mma_load_q<D>(a, m, sm.qs, lane);
      q_loaded = true;
    }
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int i = int(c - c_begin), b = i % kBufs;
      if constexpr (kBufs == 1) {
        if (i > 0) {
          __syncthreads();  // chunk c - 1's buffer is no longer read
          issue(c, 0);
        }
        cp_async_wait<0>();
      } else {
        cp_async_wait<kBufs - 2>();  // chunk c's group (kBufs - 2 later ones may be pending)
      }
      // Chunk c's copy is visible to every thread; every thread is done with chunk c - 1 (its
      // buffer, the widened tiles, the scores).
      __syncthreads();
      if constexpr (kBufs > 1) issue(c + kBufs - 1, (i + kBufs - 1) % kBufs);
      if constexpr (F8) {
        mma_widen_kv<D, 128>(sm, b, tid);
        __syncthreads();
      }
      // Key tiles 2w, 2w + 1 (mma_chunk_weights' chains for those tiles).
      float s2[2][4];
      mma_chunk_scores<D, 1>(sm.qs, sm.ks(b), warp, lane, s2);
#pragma unroll
      for (int i2 = 0; i2 < 2; ++i2)
        scores[(2 * warp + i2) * 32 + lane] =
            make_float4(s2[i2][0], s2[i2][1], s2[i2][2], s2[i2][3]);
      __syncthreads();
      float s[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const float4 v = scores[nt * 32 + lane];
        s[nt][0] = v.x, s[nt][1] = v.y, s[nt][2] = v.z, s[nt][3] = v.w;
      }
      MmaChunk ch;
      mma_row_keys(m, run, c * kAttnChunk, lane, ch.n);
      mma_chunk_softmax<F8>(s, ch.n, a.scale, F8 ? sm.ksc(b) : nullptr, F8 ? sm.vsc(b) : nullptr,
                            lane, ch.m, ch.l, ch.ph, ch.pl);
      constexpr int kDpPerWarp = D / 16 / 4;
#pragma unroll
      for (int i2 = 0; i2 < kDpPerWarp; ++i2) {
        const int dp = warp * kDpPerWarp + i2;
        float o[2][4];
        mma_chunk_values<D>(sm.vs(b), ch.ph, ch.pl, dp, lane, o);
        mma_store_partial<D>(a, m, max_chunks, c, dp, ch, o, lane);
      }
    }
  });
  // (a.counters is set only where split_folds: one tile per KV head, so ht is the KV head.)
  if (a.counters) {
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the shared memory the merge reuses
    split_fold_merge<D>(a, ht, n_groups, max_chunks, sm4);
  }
}

// One Split pass: Kern (a split kernel taking (a, n_tiles, max_chunks, groups)) on
// Hkv · n_tiles · groups blocks of `threads` with `smem` bytes of shared memory, then the merge.
// FOLD (the Split4 kernels): where split_folds, the kernel merges and no merge is launched.
template <auto Kern, int D, bool FOLD = false>
cudaError_t launch_split(const AttnArgs& a, cudaStream_t s, int smem, int threads, int64_t n_tiles,
                         int64_t max_chunks, int64_t groups) {
  cudaError_t e = allow_smem<Kern>(smem);
  if (e != cudaSuccess) return e;
  AttnArgs b = a;
  const bool fold = FOLD && split_folds(a, max_chunks, smem);
  if (!fold) b.counters = nullptr;
  e = launch_pdl(Kern, dim3(unsigned(a.Hkv * n_tiles * groups)), dim3(threads), smem, s,
                 small_pdl(a.T <= kPdlRows), b, n_tiles, max_chunks, groups);
  if (e != cudaSuccess || fold) return e;
  return launch_merge<D>(a, s, max_chunks);
}

// k: the kernel attention() resolved (not Auto); BlockWG / BlockWGPV run Block on an FP8 cache.
template <int D, bool F8>
cudaError_t launch_mma(const AttnArgs& a, cudaStream_t s, AttnKernel k) {
  const int64_t n_tiles = mma_tiles(a.T, a.H / a.Hkv);
  const bool wg = k == AttnKernel::BlockWG || k == AttnKernel::BlockWGPV;
  cudaError_t e;
  if (wg && !F8) {
    constexpr int kSmem = WgSmem<D>::kBytes;
    const int64_t n_groups = (n_tiles + kBlockTiles - 1) / kBlockTiles;
    const unsigned grid = unsigned(a.Hkv * n_groups);
    if (k == AttnKernel::BlockWGPV) {
      if ((e = allow_smem<attn_wg_block_kernel<D, true>>(kSmem)) != cudaSuccess) return e;
      attn_wg_block_kernel<D, true><<<grid, 32 * kBlockTiles, kSmem, s>>>(a, n_groups);
    } else {
      if ((e = allow_smem<attn_wg_block_kernel<D, false>>(kSmem)) != cudaSuccess) return e;
      attn_wg_block_kernel<D, false><<<grid, 32 * kBlockTiles, kSmem, s>>>(a, n_groups);
    }
    return cudaGetLastError();
  }
  if (k == AttnKernel::Block || wg) {
    constexpr int kSmem = MmaBlockSmem<D, F8>::kBytes;
    const int64_t n_groups = (n_tiles + kBlockTiles - 1) / kBlockTiles;
    if ((e = allow_smem<attn_mma_block_kernel<D, F8>>(kSmem)) != cudaSuccess) return e;
    attn_mma_block_kernel<D, F8>
        <<<unsigned(a.Hkv * n_groups), 32 * kBlockTiles, kSmem, s>>>(a, n_groups);
    return cudaGetLastError();
  }
  if (k != AttnKernel::Split) {
    constexpr int kSmem = MmaSmem<D>::bytes(F8, 1);
    if ((e = allow_smem<attn_mma_fused_kernel<D, F8>>(kSmem)) != cudaSuccess) return e;
    return launch_pdl(attn_mma_fused_kernel<D, F8>, dim3(unsigned(a.Hkv * n_tiles)), dim3(32),
                      kSmem, s, small_pdl(a.T <= kPdlRows), a, n_tiles);
  }
  const int64_t max_chunks = n_chunks(max_pos_of(a));
  // Auto (H100, `bench_cuda_kernels attention`, µs a decode step of llama-3.1-8b's shape,
  // Chunk4 / Walk4 / Warp1): bf16 cache 17.0 / 16.8 / 18.8 at context 512, 21.3 / 22.9 / 24.0
  // at 4,096, 101.4 / 83.8 / 80.5 at 32K; FP8 cache 18.0 / 18.1 / 21.7, 28.6 / 24.5 / 28.2,
  // 119.4 / 100.2 / 96.4.
  // A serving decode step of more than one tile a KV head (over 16 / G sequences), H100,
  // `bench_cuda_kernels attn-batch` (sequences at 512-600 positions), µs, Auto's choice below
  // against Warp1: bf16 cache 16 sequences 43.8 / 40.4, 64 sequences 114.0 / 99.7; FP8 56.1 / 46.1,
  // 125.0 / 111.3.
  const bool batch = a.rows_own_seq && n_tiles > 1;
  const SplitKernel sk = g_split_kernel != SplitKernel::Auto      ? g_split_kernel
                         : max_chunks > kSplit4MaxChunks || batch ? SplitKernel::Warp1
                         : F8                                     ? SplitKernel::Walk4
                                                                  : SplitKernel::Chunk4;
  // Walk4 and Warp1: as many groups of chunks a (KV head, tile) as fit on the chip at once (228 KB
  // of shared memory an SM, 1 KB of it reserved a block), so each block walks its chunks with
  // the next copies in flight; Chunk4: a group a chunk.
  auto groups_for = [&](int smem) {
    if (g_split_groups > 0) return g_split_groups;
    const int64_t resident = int64_t(sm_count()) * ((228 * 1024) / (smem + 1024));
    const int64_t gr = resident / (a.Hkv * n_tiles);
    return gr < 1 ? int64_t(1) : gr > max_chunks ? max_chunks : gr;
  };
  if (sk == SplitKernel::Walk4) {
    constexpr int kSmem = Split4Smem<D, F8, kWalkBufs>::kBytes;
    return launch_split<attn_mma_split4_kernel<D, F8, kWalkBufs>, D, true>(
        a, s, kSmem, 128, n_tiles, max_chunks, groups_for(kSmem));
  }
  if (sk == SplitKernel::Chunk4)
    return launch_split<attn_mma_split4_kernel<D, F8, 1>, D, true>(
        a, s, Split4Smem<D, F8, 1>::kBytes, 128, n_tiles, max_chunks, max_chunks);
  constexpr int kSmem = MmaSmem<D>::bytes(F8, 2);
  return launch_split<attn_mma_split_kernel<D, F8>, D>(a, s, kSmem, 32, n_tiles, max_chunks,
                                                       groups_for(kSmem));
}

template <int DPL, class Src>
cudaError_t launch(const AttnArgs& a, cudaStream_t s, bool split) {
  if (!split) {
    const int64_t blocks = (a.T * a.H + kWarps - 1) / kWarps;
    return launch_pdl(attn_fused_kernel<DPL, Src>, dim3(unsigned(blocks)), dim3(32 * kWarps), 0, s,
                      small_pdl(a.T <= kPdlRows), a);
  }
  const int64_t max_chunks = n_chunks(max_pos_of(a));
  const int64_t blocks = (a.T * a.H * max_chunks + kWarps - 1) / kWarps;
  const cudaError_t e =
      launch_pdl(attn_split_chunks_kernel<DPL, Src>, dim3(unsigned(blocks)), dim3(32 * kWarps), 0,
                 s, small_pdl(a.T <= kPdlRows), a, max_chunks);
  if (e != cudaSuccess) return e;
  return launch_merge<32 * DPL>(a, s, max_chunks);
}

}  // namespace

bool attention_may_split(int64_t T, int64_t H, int64_t Hkv, int64_t D) {
  if (mma_path(D)) return Hkv * mma_tiles(T, H / Hkv) < kMmaSplitMaxTiles;
  return T * H < kAttnSplitMaxWarps;
}

void set_attention_split_kernel(SplitKernel k, int64_t groups) {
  g_split_kernel = k;
  g_split_groups = groups;
}

size_t attention_workspace_bytes(int64_t T, int64_t H, int64_t D, int64_t n_pos) {
  return size_t(T) * H * size_t(n_chunks(n_pos - 1)) * (D + 4) * sizeof(float);
}

cudaError_t attention(const AttnArgs& a, cudaStream_t s, AttnKernel kernel) {
  if (a.T < 0 || a.H <= 0 || a.Hkv <= 0 || a.H % a.Hkv || (a.D != 32 && a.D != 64 && a.D != 128 && a.D != 256) ||
      a.pos0 < 0 || !a.q || !a.out || (a.pos && a.max_pos < 0) ||
      (a.k8 ? !a.v8 || !a.tables : !a.k || !a.v) ||
      (a.tables &&
       (!a.row_table || a.block_size <= 0 || a.block_size % kAttnChunk || a.table_stride <= 0)))
    return cudaErrorInvalidValue;
  if (a.T == 0) return cudaSuccess;
  const size_t ws = attention_workspace_bytes(a.T, a.H, a.D, max_pos_of(a) + 1);
  const bool ws_ok = a.workspace && a.workspace_bytes >= ws;
  if (kernel == AttnKernel::Split && !ws_ok) return cudaErrorInvalidValue;
  // Split when too few warps would walk the chunks and the context has several chunks.
  const bool split = kernel == AttnKernel::Split ||
                     (kernel == AttnKernel::Auto && ws_ok &&
                      attention_may_split(a.T, a.H, a.Hkv, a.D) && n_chunks(max_pos_of(a)) > 1);
  if (mma_path(a.D)) {
    // Auto runs passes of more than 64 rows that do not split (prefill) on BlockWGPV (Block on
    // an FP8 cache): H100, a 2,048-token prompt, µs a layer, 315 against Fused's 685 (BlockWG
    // 340), FP8 455 against 1,353; the same bits.
    const AttnKernel k = split                        ? AttnKernel::Split
                         : kernel != AttnKernel::Auto ? kernel
                         : a.T > 64                   ? AttnKernel::BlockWGPV
                                                      : AttnKernel::Fused;
    if (a.k8) return a.D == 128 ? launch_mma<128, true>(a, s, k) : launch_mma<64, true>(a, s, k);
    return a.D == 128 ? launch_mma<128, false>(a, s, k) : launch_mma<64, false>(a, s, k);
  }
  // (Block and BlockWG are Fused on the CUDA-core path: one warp a row and head.)
  if (a.k8)
    return a.D == 256   ? launch<8, Fp8Rows>(a, s, split)
           : a.D == 128 ? launch<4, Fp8Rows>(a, s, split)
           : a.D == 64  ? launch<2, Fp8Rows>(a, s, split)
                        : launch<1, Fp8Rows>(a, s, split);
  return a.D == 256   ? launch<8, Bf16Rows>(a, s, split)
         : a.D == 128 ? launch<4, Bf16Rows>(a, s, split)
         : a.D == 64 ? launch<2, Bf16Rows>(a, s, split)
                     : launch<1, Bf16Rows>(a, s, split);
}

}  // namespace basalt::cuda
