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
  // Split when too few (t, h) warps would fill the chip and the context has several chunks.
  const bool split =
      kernel == AttnKernel::Split ||
      (kernel == AttnKernel::Auto && ws_ok && a.T * a.H < kAttnSplitMaxWarps &&
       n_chunks(max_pos_of(a)) > 1);
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
