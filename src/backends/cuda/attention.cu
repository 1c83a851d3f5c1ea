// Causal GQA attention over the bf16 KV cache, in fixed chunks of kAttnChunk key positions.
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

#include <cmath>

#include "backends/cuda/kernels.h"

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

// One chunk: keys j0 .. j0+n-1 (1 <= n <= 64). qs: the query in shared memory, f32 [D].
// kh, vh: the head's row 0 in the cache; rows are `stride` elements apart.
template <int DPL>
__device__ __forceinline__ Partial<DPL> chunk_partial(const float* qs, const bf16_bits* kh,
                                                      const bf16_bits* vh, int64_t stride,
                                                      int64_t j0, int n, float scale, int lane) {
  constexpr int D = 32 * DPL;
  float s[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int jj = lane + 32 * half;
    s[half] = -INFINITY;
    if (jj < n) {
      const uint4* kr = reinterpret_cast<const uint4*>(kh + (j0 + jj) * stride);
      float dot = 0.0f;
#pragma unroll
      for (int d8 = 0; d8 < D / 8; ++d8) {
        const uint4 u = kr[d8];
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          dot = __fmaf_rn(qs[d8 * 8 + 2 * e], bf(w[e] & 0xffffu), dot);
          dot = __fmaf_rn(qs[d8 * 8 + 2 * e + 1], bf(w[e] >> 16), dot);
        }
      }
      s[half] = __fmul_rn(dot, scale);
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

  Partial<DPL> p;
  p.m = m;
  p.l = l;
#pragma unroll
  for (int d = 0; d < DPL; ++d) p.acc[d] = 0.0f;
  const bf16_bits* vr = vh + j0 * stride + lane * DPL;
#pragma unroll 16
  for (int jj = 0; jj < n; ++jj) {
    const float ej = __shfl_sync(0xffffffffu, jj < 32 ? e0 : e1, jj & 31);
    if constexpr (DPL == 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(vr + jj * stride);
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p.acc[2 * e] = __fmaf_rn(ej, bf(w[e] & 0xffffu), p.acc[2 * e]);
        p.acc[2 * e + 1] = __fmaf_rn(ej, bf(w[e] >> 16), p.acc[2 * e + 1]);
      }
    } else if constexpr (DPL == 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(vr + jj * stride);
      p.acc[0] = __fmaf_rn(ej, bf(u.x & 0xffffu), p.acc[0]);
      p.acc[1] = __fmaf_rn(ej, bf(u.x >> 16), p.acc[1]);
      p.acc[2] = __fmaf_rn(ej, bf(u.y & 0xffffu), p.acc[2]);
      p.acc[3] = __fmaf_rn(ej, bf(u.y >> 16), p.acc[3]);
    } else if constexpr (DPL == 2) {
      const uint32_t u = *reinterpret_cast<const uint32_t*>(vr + jj * stride);
      p.acc[0] = __fmaf_rn(ej, bf(u & 0xffffu), p.acc[0]);
      p.acc[1] = __fmaf_rn(ej, bf(u >> 16), p.acc[1]);
    } else {
      p.acc[0] = __fmaf_rn(ej, bf(vr[jj * stride]), p.acc[0]);
    }
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

__host__ __forceinline__ int64_t max_pos_of(const AttnArgs& a) {
  return a.max_pos >= 0 ? a.max_pos : a.pos0 + a.T - 1;
}

template <int DPL>
__global__ void __launch_bounds__(32 * kWarps) attn_fused_kernel(AttnArgs a) {
  constexpr int D = 32 * DPL;
  __shared__ float qs_all[kWarps][D];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int64_t th = int64_t(blockIdx.x) * kWarps + wi;  // t * H + h
  if (th >= a.T * a.H) return;
  const int64_t t = th / a.H, h = th % a.H, hk = h / (a.H / a.Hkv);
  float* qs = qs_all[wi];
  for (int d = lane; d < D; d += 32) qs[d] = a.q[th * D + d];
  __syncwarp();
  const int64_t stride = a.Hkv * D, p = row_pos(a, t);
  const bf16_bits* kh = a.k + hk * D;
  const bf16_bits* vh = a.v + hk * D;
  Partial<DPL> st = chunk_partial<DPL>(qs, kh, vh, stride, chunk_row(a, t, 0),
                                       int(p < 63 ? p + 1 : 64), a.scale, lane);
  for (int64_t c = 1; c < n_chunks(p); ++c) {
    const int64_t j0 = c * kAttnChunk;
    const int n = int(p - j0 + 1 < kAttnChunk ? p - j0 + 1 : kAttnChunk);
    merge(st, chunk_partial<DPL>(qs, kh, vh, stride, chunk_row(a, t, j0), n, a.scale, lane));
  }
  write_out(st, a.out + th * D, lane);
}

// Workspace: [T, H, max_chunks] partials of (D + 2) floats: acc[D], m, l.
template <int DPL>
__global__ void __launch_bounds__(32 * kWarps)
    attn_split_chunks_kernel(AttnArgs a, int64_t max_chunks) {
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
  const int64_t stride = a.Hkv * D, j0 = c * kAttnChunk;
  const int n = int(p - j0 + 1 < kAttnChunk ? p - j0 + 1 : kAttnChunk);
  const Partial<DPL> pc = chunk_partial<DPL>(qs, a.k + hk * D, a.v + hk * D, stride,
                                             chunk_row(a, t, j0), n, a.scale, lane);
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

template <int DPL>
cudaError_t launch(const AttnArgs& a, cudaStream_t s, bool split) {
  if (!split) {
    const int64_t blocks = (a.T * a.H + kWarps - 1) / kWarps;
    attn_fused_kernel<DPL><<<unsigned(blocks), 32 * kWarps, 0, s>>>(a);
    return cudaGetLastError();
  }
  const int64_t max_chunks = n_chunks(max_pos_of(a));
  const int64_t blocks = (a.T * a.H * max_chunks + kWarps - 1) / kWarps;
  attn_split_chunks_kernel<DPL><<<unsigned(blocks), 32 * kWarps, 0, s>>>(a, max_chunks);
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
      a.pos0 < 0 || !a.q || !a.k || !a.v || !a.out || (a.pos && a.max_pos < 0) ||
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
  return a.D == 256   ? launch<8>(a, s, split)
         : a.D == 128 ? launch<4>(a, s, split)
         : a.D == 64 ? launch<2>(a, s, split)
                     : launch<1>(a, s, split);
}

}  // namespace basalt::cuda
