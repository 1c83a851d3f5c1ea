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

#include "backends/cuda/kernels.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/pdl.cuh"

namespace basalt::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block; one warp per (t, h) or (t, h, chunk)

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

// Workspace: [T, H, max_chunks] partials of (D + 2) floats: acc[D], m, l.
template <int DPL, class Src>
__global__ void __launch_bounds__(32 * kWarps)
    attn_split_chunks_kernel(AttnArgs a, int64_t max_chunks) {
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
  float* w = a.workspace + item * (D + 2);
#pragma unroll
  for (int d = 0; d < DPL; ++d) w[lane * DPL + d] = pc.acc[d];
  if (lane == 0) {
    w[D] = pc.m;
    w[D + 1] = pc.l;
  }
}

template <int DPL>
__global__ void __launch_bounds__(32 * kWarps)
    attn_split_merge_kernel(AttnArgs a, int64_t max_chunks) {
  pdl_trigger();
  constexpr int D = 32 * DPL;
  const int lane = threadIdx.x & 31;
  const int64_t th = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (th >= a.T * a.H) return;
  const int64_t p = row_pos(a, th / a.H);
  auto load = [&](int64_t c) {
    const float* w = a.workspace + (th * max_chunks + c) * (D + 2);
    Partial<DPL> pc;
#pragma unroll
    for (int d = 0; d < DPL; ++d) pc.acc[d] = w[lane * DPL + d];
    pc.m = w[D];
    pc.l = w[D + 1];
    return pc;
  };
  // Loads are issued a batch of chunks ahead of the merges (a chain of one load per chunk
  // spent a memory round trip per chunk: 354 µs at 32K context); the merge order is unchanged.
  constexpr int kBatch = DPL >= 8 ? 4 : 8;
  const int64_t nc = n_chunks(p);
  Partial<DPL> st = load(0);
  for (int64_t c0 = 1; c0 < nc; c0 += kBatch) {
    Partial<DPL> pc[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (c0 + b < nc) pc[b] = load(c0 + b);
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (c0 + b < nc) merge(st, pc[b]);
  }
  write_out(st, a.out + th * D, lane);
}

// --- The tensor-core path: bf16 cache, D = 64 or 128 -------------------------------------
// The rows of KV head hk are r = t · G + g (query head hk · G + g, G = H / Hkv); a warp owns a
// tile of 16 consecutive r and computes the partial of chunk c for all of them with
// mma.m16n8k16 (bf16 in, f32 accumulate), each row's bits independent of the other rows':
//  - scores S = Σ_d q·k: the query split as q_hi = bf16(q), q_lo = bf16(q - q_hi), one mma chain
//    over D for q_hi then on over D for q_lo; s = S · scale; keys past the row's position -inf;
//  - the chunk max (exact), e_j = exp(s_j - m), l = Σ e_j: each lane its 16 values in key order,
//    then a butterfly over the quad that shares the row;
//  - Σ e_j·v_j as one chain over the 64 keys for bf16(e_j) and on for bf16(e_j - bf16(e_j));
//  - chunk partials merged left to right by merge()'s formula (Fused in the warp, Split through
//    the workspace and attn_split_merge_kernel).
// A row's partial of a chunk is the same whatever other rows share its tile (keys a row may not
// see enter with weight 0, rows past the chunk's last key are zeros in shared memory), so a
// query's bits do not depend on T, on the batch, or on the kernel.
constexpr int kMmaRows = 16;
// Split when fewer (KV head, tile) warps than this would walk the chunks.
constexpr int64_t kMmaSplitMaxTiles = 1024;

__host__ __device__ __forceinline__ bool mma_path(bool fp8, int64_t D) {
  return !fp8 && (D == 64 || D == 128);
}
__host__ __device__ __forceinline__ int64_t mma_tiles(int64_t T, int64_t G) {
  return (T * G + kMmaRows - 1) / kMmaRows;
}

// Shared memory of one warp: q_hi, q_lo [16][D], then K and V of a chunk [64][D], all bf16 in
// rows of 16-byte units placed at unit ^ (row & 7) (ldmatrix without bank conflicts).
template <int D>
struct MmaSmem {
  static constexpr int kBytes = (2 * kMmaRows + 2 * kAttnChunk) * D * 2;
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

// q of the tile's rows as q_hi, q_lo (zeros past T).
template <int D>
__device__ __forceinline__ void mma_load_q(const AttnArgs& a, const MmaTile& m, bf16_bits* qs,
                                           int lane) {
  for (int i = lane; i < kMmaRows * D / 2; i += 32) {
    const int row = i / (D / 2), d = 2 * (i % (D / 2));
    float2 q = make_float2(0.0f, 0.0f);
    if ((m.valid >> row) & 1) {
      const int64_t rr = m.tile * kMmaRows + row, tt = rr / m.G;
      q = *reinterpret_cast<const float2*>(a.q + (tt * a.H + m.hk * m.G + rr % m.G) * D + d);
    }
    const int o = MmaSmem<D>::at(row, d >> 3) + (d & 7);
    const uint32_t hi = bf16_pair(q.x, q.y);
    const uint32_t lo = bf16_pair(__fsub_rn(q.x, __uint_as_float(hi << 16)),
                                  __fsub_rn(q.y, __uint_as_float(hi & 0xffff0000u)));
    *reinterpret_cast<uint32_t*>(qs + o) = hi;
    *reinterpret_cast<uint32_t*>(qs + kMmaRows * D + o) = lo;
  }
}

// K and V of keys j0 .. j0 + n - 1 of the run whose first row is table row `t_run`; rows n .. 63
// zero-filled.
template <int D>
__device__ __forceinline__ void mma_load_kv(const AttnArgs& a, const MmaTile& m, int64_t t_run,
                                            int64_t j0, int n, bf16_bits* ks, bf16_bits* vs,
                                            int lane) {
  const int64_t r0 = chunk_row(a, t_run, j0), stride = a.Hkv * D;
  const bf16_bits* kb = a.k + r0 * stride + m.hk * D;
  const bf16_bits* vb = a.v + r0 * stride + m.hk * D;
  const uint32_t ks_s = smem_addr(ks), vs_s = smem_addr(vs);
#pragma unroll 4
  for (int i = lane; i < kAttnChunk * D / 8; i += 32) {
    const int j = i / (D / 8), u = i % (D / 8);
    const int o = MmaSmem<D>::at(j, u) * 2;
    const bool in = j < n;
    const int64_t go = in ? j * stride + u * 8 : 0;
    cp_async16_s(ks_s + o, kb + go, in ? 16 : 0);
    cp_async16_s(vs_s + o, vb + go, in ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();
}

// One chunk's softmax statistics and weights for the tile: n[half] valid keys for row g + 8·half
// (0: the row takes no part). p_hi/p_lo: the A operands of Σ e·v (k16 slice kk of the keys).
template <int D>
__device__ __forceinline__ void mma_chunk_weights(const bf16_bits* qs, const bf16_bits* ks,
                                                  const int (&n)[2], float scale, int lane,
                                                  float (&m)[2], float (&l)[2],
                                                  uint32_t (&p_hi)[4][4], uint32_t (&p_lo)[4][4]) {
  float s[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
  for (int part = 0; part < 2; ++part) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      ldmatrix_x4(af, qs + part * kMmaRows * D + MmaSmem<D>::at(lane & 15, 2 * kk + (lane >> 4)));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ks + MmaSmem<D>::at(16 * np + (lane & 7) + ((lane >> 4) << 3),
                                           2 * kk + ((lane >> 3) & 1)));
        mma_bf16(s[2 * np], af, b[0], b[1]);
        mma_bf16(s[2 * np + 1], af, b[2], b[3]);
      }
    }
  }
  const int cq = 2 * (lane & 3);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = s[nt][2 * half + e];
        v = 8 * nt + cq + e < n[half] ? __fmul_rn(v, scale) : -INFINITY;
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

// Σ e·v of the chunk for output dims 8·dt .. 8·dt + 7, dt = 2·dp and 2·dp + 1: o[0], o[1] in the
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

// The chunk at j0 for the rows of `run` (table row t_run, last position `last`): K and V into
// shared memory, each row's visible keys n, and the softmax statistics and weights.
struct MmaChunk {
  int n[2];
  float m[2], l[2];
  uint32_t ph[4][4], pl[4][4];
};
template <int D>
__device__ __forceinline__ void mma_chunk(const AttnArgs& a, const MmaTile& m, uint32_t run,
                                          int64_t t_run, int last, int64_t j0,
                                          const bf16_bits* qs, bf16_bits* ks, bf16_bits* vs,
                                          int lane, MmaChunk& ch) {
  const int64_t nl = last - j0 + 1;
  __syncwarp();  // the previous chunk's K/V are no longer read
  mma_load_kv<D>(a, m, t_run, j0, int(nl < kAttnChunk ? nl : kAttnChunk), ks, vs, lane);
  mma_row_keys(m, run, j0, lane, ch.n);
  mma_chunk_weights<D>(qs, ks, ch.n, a.scale, lane, ch.m, ch.l, ch.ph, ch.pl);
}

// A warp's shared memory: q_hi, q_lo [16][D], K [64][D], V [64][D].
template <int D>
struct MmaWarpSmem {
  bf16_bits *qs, *ks, *vs;
  __device__ explicit MmaWarpSmem(bf16_bits* base)
      : qs(base), ks(base + 2 * kMmaRows * D), vs(base + 2 * kMmaRows * D + kAttnChunk * D) {}
};

template <int D>
__global__ void __launch_bounds__(32) attn_mma_fused_kernel(AttnArgs a, int64_t n_tiles) {
  pdl_trigger();
  extern __shared__ __align__(16) bf16_bits sm_mma[];
  const MmaWarpSmem<D> sm(sm_mma);
  const int lane = threadIdx.x;
  const MmaTile m = mma_tile(a, blockIdx.x / n_tiles, blockIdx.x % n_tiles, lane);
  mma_load_q<D>(a, m, sm.qs, lane);
  float st_m[2] = {-INFINITY, -INFINITY}, st_l[2] = {0.0f, 0.0f}, acc[D / 8][4];
  mma_runs(m, lane, [&](uint32_t run, int64_t t_run, int last) {
    for (int64_t c = 0; c <= last / kAttnChunk; ++c) {
      MmaChunk ch;
      mma_chunk<D>(a, m, run, t_run, last, c * kAttnChunk, sm.qs, sm.ks, sm.vs, lane, ch);
      const int(&n)[2] = ch.n;
      // merge(): st ⊕ chunk, or st = chunk for the row's first chunk.
      float fa[2], fb[2];
      bool first[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        first[half] = c == 0;
        if (n[half] == 0 || first[half]) {
          fa[half] = 0.0f, fb[half] = 1.0f;
          if (n[half] > 0) st_m[half] = ch.m[half], st_l[half] = ch.l[half];
          continue;
        }
        const float mn = fmaxf(st_m[half], ch.m[half]);
        fa[half] = expf(__fsub_rn(st_m[half], mn));
        fb[half] = expf(__fsub_rn(ch.m[half], mn));
        st_l[half] = __fadd_rn(__fmul_rn(st_l[half], fa[half]), __fmul_rn(ch.l[half], fb[half]));
        st_m[half] = mn;
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        float o[2][4];
        mma_chunk_values<D>(sm.vs, ch.ph, ch.pl, dp, lane, o);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int half = e >> 1;
            float& x = acc[2 * dp + i][e];
            if (n[half] == 0) continue;
            x = first[half] ? o[i][e]
                            : __fadd_rn(__fmul_rn(x, fa[half]), __fmul_rn(o[i][e], fb[half]));
          }
      }
    }
  });
  const int cq = 2 * (lane & 3);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (m.th[half] < 0) continue;
    const float inv = __fdiv_rn(1.0f, st_l[half]);
    bf16_bits* o = a.out + m.th[half] * D + cq;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(o + 8 * dt) =
          bf16_pair(__fmul_rn(acc[dt][2 * half], inv), __fmul_rn(acc[dt][2 * half + 1], inv));
  }
}

// One warp per (KV head, tile, chunk): the partials of the tile's rows that see chunk c, in the
// workspace layout of attn_split_chunks_kernel (merged by attn_split_merge_kernel).
template <int D>
__global__ void __launch_bounds__(32)
    attn_mma_split_kernel(AttnArgs a, int64_t n_tiles, int64_t max_chunks) {
  pdl_trigger();
  extern __shared__ __align__(16) bf16_bits sm_mma[];
  const MmaWarpSmem<D> sm(sm_mma);
  const int lane = threadIdx.x;
  const int64_t c = blockIdx.x % max_chunks, ht = blockIdx.x / max_chunks;
  const MmaTile m = mma_tile(a, ht / n_tiles, ht % n_tiles, lane);
  bool q_loaded = false;
  const int64_t j0 = c * kAttnChunk;
  mma_runs(m, lane, [&](uint32_t run, int64_t t_run, int last) {
    if (last < j0) return;
    if (!q_loaded) mma_load_q<D>(a, m, sm.qs, lane), q_loaded = true;
    MmaChunk ch;
    mma_chunk<D>(a, m, run, t_run, last, j0, sm.qs, sm.ks, sm.vs, lane, ch);
    const int(&n)[2] = ch.n;
    const int cq = 2 * (lane & 3);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      float o[2][4];
      mma_chunk_values<D>(sm.vs, ch.ph, ch.pl, dp, lane, o);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (n[half] == 0) continue;
        float* w = a.workspace + (m.th[half] * max_chunks + c) * (D + 2);
#pragma unroll
        for (int i = 0; i < 2; ++i)
          *reinterpret_cast<float2*>(w + 8 * (2 * dp + i) + cq) =
              make_float2(o[i][2 * half], o[i][2 * half + 1]);
        if (dp == 0 && (lane & 3) == 0) w[D] = ch.m[half], w[D + 1] = ch.l[half];
      }
    }
  });
}

template <int D>
cudaError_t launch_mma(const AttnArgs& a, cudaStream_t s, bool split) {
  constexpr int kSmem = MmaSmem<D>::kBytes;
  const int64_t n_tiles = mma_tiles(a.T, a.H / a.Hkv);
  if (!split) {
    attn_mma_fused_kernel<D><<<unsigned(a.Hkv * n_tiles), 32, kSmem, s>>>(a, n_tiles);
    return cudaGetLastError();
  }
  const int64_t max_chunks = n_chunks(max_pos_of(a));
  attn_mma_split_kernel<D>
      <<<unsigned(a.Hkv * n_tiles * max_chunks), 32, kSmem, s>>>(a, n_tiles, max_chunks);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  attn_split_merge_kernel<D / 32>
      <<<unsigned((a.T * a.H + kWarps - 1) / kWarps), 32 * kWarps, 0, s>>>(a, max_chunks);
  return cudaGetLastError();
}

template <int DPL, class Src>
cudaError_t launch(const AttnArgs& a, cudaStream_t s, bool split) {
  if (!split) {
    const int64_t blocks = (a.T * a.H + kWarps - 1) / kWarps;
    attn_fused_kernel<DPL, Src><<<unsigned(blocks), 32 * kWarps, 0, s>>>(a);
    return cudaGetLastError();
  }
  const int64_t max_chunks = n_chunks(max_pos_of(a));
  const int64_t blocks = (a.T * a.H * max_chunks + kWarps - 1) / kWarps;
  attn_split_chunks_kernel<DPL, Src><<<unsigned(blocks), 32 * kWarps, 0, s>>>(a, max_chunks);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  attn_split_merge_kernel<DPL>
      <<<unsigned((a.T * a.H + kWarps - 1) / kWarps), 32 * kWarps, 0, s>>>(a, max_chunks);
  return cudaGetLastError();
}

}  // namespace

bool attention_may_split(int64_t T, int64_t H, int64_t Hkv, int64_t D, bool fp8) {
  if (mma_path(fp8, D)) return Hkv * mma_tiles(T, H / Hkv) < kMmaSplitMaxTiles;
  return T * H < kAttnSplitMaxWarps;
}

size_t attention_workspace_bytes(int64_t T, int64_t H, int64_t D, int64_t n_pos) {
  return size_t(T) * H * size_t(n_chunks(n_pos - 1)) * (D + 2) * sizeof(float);
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
                      attention_may_split(a.T, a.H, a.Hkv, a.D, a.k8 != nullptr) &&
                      n_chunks(max_pos_of(a)) > 1);
  if (mma_path(a.k8 != nullptr, a.D))
    return a.D == 128 ? launch_mma<128>(a, s, split) : launch_mma<64>(a, s, split);
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
