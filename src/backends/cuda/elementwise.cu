// Embedding, fused residual + RMSNorm, per-head RMSNorm, RoPE, SwiGLU, f32 -> bf16.
// Reductions (the norms' sums of squares) use one fixed order per row length: a thread's
// strided elements in index order, then a butterfly over lanes, then warps in index order.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdlib>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/pdl.cuh"

namespace basalt::cuda {
namespace {

__global__ void embedding_kernel(const bf16_bits* table, int64_t V, int64_t E, const int32_t* ids,
                                 float* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const int32_t id = ids[t];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < E;
       i += int64_t(gridDim.x) * blockDim.x)
    out[t * E + i] =
        (id >= 0 && id < V) ? bf(table[int64_t(id) * E + i]) : __int_as_float(0x7fc00000);
}

constexpr int kNormThreads = 1024;

// Each thread's elements i = tid, tid + 1024, ... are summed in that order, then a butterfly
// over lanes, then the 32 warps in order: one order per n. The loads are issued kNormUnroll at a
// time and, for rows up to 8192 values, kept in registers for the output (a decode row is a few
// memory round trips, not a chain of them).
constexpr int kNormUnroll = 8;

__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_residual_kernel(float* __restrict__ x, const float* __restrict__ delta,
                            const float* __restrict__ w, bf16_bits* __restrict__ y, int64_t n,
                            float eps) {
  pdl_wait();
  pdl_trigger();
  __shared__ float warp_ss[kNormThreads / 32];
  const int64_t r = blockIdx.x;
  float* xr = x + r * n;
  const bool cached = n <= int64_t(kNormThreads) * kNormUnroll;
  float v[kNormUnroll];
  float ss = 0.0f;
  for (int64_t base = threadIdx.x; base < n; base += int64_t(kNormThreads) * kNormUnroll) {
#pragma unroll
    for (int u = 0; u < kNormUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kNormThreads;
      v[u] = i < n ? xr[i] : 0.0f;
    }
    if (delta) {
#pragma unroll
      for (int u = 0; u < kNormUnroll; ++u) {
        const int64_t i = base + int64_t(u) * kNormThreads;
        if (i < n) {
          v[u] = __fadd_rn(v[u], delta[r * n + i]);
          xr[i] = v[u];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kNormUnroll; ++u)
      if (base + int64_t(u) * kNormThreads < n) ss = __fmaf_rn(v[u], v[u], ss);
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) warp_ss[threadIdx.x >> 5] = ss;
  __syncthreads();
  float tot = warp_ss[0];
#pragma unroll
  for (int i = 1; i < kNormThreads / 32; ++i) tot = __fadd_rn(tot, warp_ss[i]);
  const float inv = __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(tot, float(n)), eps)));
  if (cached) {
#pragma unroll
    for (int u = 0; u < kNormUnroll; ++u) {
      const int64_t i = threadIdx.x + int64_t(u) * kNormThreads;
      if (i < n) y[r * n + i] = to_bf(__fmul_rn(__fmul_rn(v[u], inv), w[i]));
    }
  } else {
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < n; i += kNormThreads)
      y[r * n + i] = to_bf(__fmul_rn(__fmul_rn(xr[i], inv), w[i]));
  }
}

// A head row's RMSNorm in place (x[i] = (x[i] · inv) · w[i]), one warp: each lane's strided
// squares in order, then warp_sum (head_rmsnorm_kernel and rope_kv_write_kernel).
__device__ __forceinline__ void head_rmsnorm_row(float* xr, const float* w, int64_t D, float eps,
                                                 int lane) {
  float ss = 0.0f;
  for (int64_t i = lane; i < D; i += 32) ss = __fmaf_rn(xr[i], xr[i], ss);
  ss = warp_sum(ss);
  const float inv = __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(D)), eps)));
  for (int64_t i = lane; i < D; i += 32) xr[i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i]);
}

__global__ void head_rmsnorm_kernel(float* x, const float* w, int64_t rows, int64_t D, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;  // whole warps leave together
  head_rmsnorm_row(x + r * D, w, D, eps, lane);
}

__device__ __forceinline__ void rope_pair(float* v, int64_t i, int64_t half, RopeLayout layout,
                                          float c, float s) {
  const int64_t a = layout == RopeLayout::NeoX ? i : 2 * i;
  const int64_t b = layout == RopeLayout::NeoX ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  v[b] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// One thread per (t, head, pair i).
__global__ void rope_kernel(float* x, int64_t T, int64_t heads, int64_t D, int64_t half,
                            const float* cos, const float* sin, const int32_t* pos,
                            const float* inv_freq, RopeLayout layout) {
  pdl_wait();
  pdl_trigger();
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= T * heads * half) return;
  const int64_t i = idx % half, th = idx / half, t = th / heads;
  float c, s;
  if (cos) {
    c = cos[t * half + i];
    s = sin[t * half + i];
  } else {
    sincosf(__fmul_rn(float(pos[t]), inv_freq[i]), &s, &c);
  }
  rope_pair(x + th * D, i, half, layout, c, s);
}

__global__ void swiglu_kernel(const float* gate, const float* up, bf16_bits* out, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = to_bf(silu_mul(gate[i], up[i]));
  }
}

__global__ void convert_kernel(const float* in, bf16_bits* out, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_bf(in[i]);
}

__global__ void widen_kernel(const bf16_bits* in, float* out, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = bf(in[i]);
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t T, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], b[i % n]);
}

__global__ void rope_angles_kernel(const int32_t* pos, const float* inv_freq, int64_t T,
                                   int64_t half, float* cos, float* sin) {
  pdl_wait();
  pdl_trigger();
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= T * half) return;
  const int64_t t = idx / half, i = idx % half;
  float sv, cv;
  sincosf(__fmul_rn(float(pos[t]), inv_freq[i]), &sv, &cv);
  cos[idx] = cv;
  sin[idx] = sv;
}

__global__ void kv_write_kernel(const float* k, const float* v, const int32_t* slots, int64_t T,
                                int64_t row, bf16_bits* kc, bf16_bits* vc) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const int64_t dst = int64_t(slots[t]) * row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < row;
       i += int64_t(gridDim.x) * blockDim.x) {
    kc[dst + i] = to_bf(k[t * row + i]);
    vc[dst + i] = to_bf(v[t * row + i]);
  }
}

// One warp per (t, head row): rows 0 .. H - 1 of a token are q's, then Hkv of k, then Hkv of v.
// q and k rows: head_rmsnorm_row with q_norm / k_norm if given, then pairs i < half rotated by
// rope_pair (rope_kernel's arithmetic), lane-strided; a k row's pairs then go to the cache row
// slots[t] as bf16 (kv_write_kernel's rounding), its dims past the rotated ones too (pair i >=
// half: dims 2i, 2i + 1 in both layouts); a v row is copied the same way.
__global__ void rope_kv_write_kernel(float* q, float* k, const float* v, const int32_t* slots,
                                     int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t half,
                                     const float* cos, const float* sin, RopeLayout layout,
                                     bf16_bits* kc, bf16_bits* vc, const float* q_norm,
                                     const float* k_norm, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t heads = H + 2 * Hkv;
  const int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (r >= T * heads) return;  // whole warps leave together
  const int64_t t = r / heads, h = r % heads;
  if (h >= H + Hkv) {  // v
    const int64_t hk = h - H - Hkv;
    const float* x = v + (t * Hkv + hk) * D;
    bf16_bits* o = vc + int64_t(slots[t]) * Hkv * D + hk * D;
    for (int64_t i = lane; i < D; i += 32) o[i] = to_bf(x[i]);
    return;
  }
  const bool is_k = h >= H;
  float* x = is_k ? k + (t * Hkv + (h - H)) * D : q + (t * H + h) * D;
  const float* w = is_k ? k_norm : q_norm;
  if (w) {
    head_rmsnorm_row(x, w, D, eps, lane);
    __syncwarp();  // the normed row, visible to every lane before pairs cross lanes
  }
  for (int64_t i = lane; i < D / 2; i += 32) {
    int64_t a = 2 * i, b = 2 * i + 1;
    if (i < half) {
      rope_pair(x, i, half, layout, cos[t * half + i], sin[t * half + i]);
      if (layout == RopeLayout::NeoX) a = i, b = i + half;
    }
    if (is_k) {
      bf16_bits* o = kc + int64_t(slots[t]) * Hkv * D + (h - H) * D;
      o[a] = to_bf(x[a]);
      o[b] = to_bf(x[b]);
    }
  }
}

// One warp per (row, head, k or v): the amax is a max (exact in any order), then each lane
// encodes its elements.
__global__ void kv_write_fp8_kernel(const float* k, const float* v, const int32_t* slots, int64_t T,
                                    int64_t Hkv, int64_t D, int64_t bs, uint8_t* kc, uint8_t* vc) {
  pdl_wait();
  pdl_trigger();
  const int64_t item = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (item >= T * Hkv * 2) return;
  const bool is_v = item & 1;
  const int64_t th = item >> 1, t = th / Hkv, h = th % Hkv;
  const float* x = (is_v ? v : k) + t * Hkv * D + h * D;
  float amax = 0.0f;
  for (int64_t i = lane; i < D; i += 32) amax = fmaxf(amax, fabsf(x[i]));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  const int64_t r = slots[t], blk = r / bs, slot = r % bs;
  uint8_t* base = (is_v ? vc : kc) + blk * bs * Hkv * (D + 4);
  uint8_t* codes = base + (slot * Hkv + h) * D;
  for (int64_t i = lane; i < D; i += 32)
    codes[i] = __nv_cvt_float_to_fp8(__fdiv_rn(x[i], s), __NV_SATFINITE, __NV_E4M3);
  if (lane == 0) reinterpret_cast<float*>(base + bs * Hkv * D)[slot * Hkv + h] = s;
}

// One block per row: each thread keeps its strided elements' (max, lowest index), then a tree
// over threads picks the larger value, the lower index on ties: the host's first-maximum rule.
constexpr int kArgmaxThreads = 1024;
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* __restrict__ x, int64_t n, int32_t* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  __shared__ float sv[kArgmaxThreads];
  __shared__ int32_t si[kArgmaxThreads];
  const float* row = x + int64_t(blockIdx.x) * n;
  float best = -INFINITY;
  int32_t bi = int32_t(n);  // "none yet": loses every tie
  for (int64_t i = threadIdx.x; i < n; i += kArgmaxThreads) {
    const float v = row[i];
    if (v > best || (bi == int32_t(n) && !(v < best))) best = v, bi = int32_t(i);
  }
  sv[threadIdx.x] = best;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int s = kArgmaxThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = sv[threadIdx.x + s];
      const int32_t oi = si[threadIdx.x + s];
      if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x]))
        sv[threadIdx.x] = ov, si[threadIdx.x] = oi;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = si[0] < int32_t(n) ? si[0] : 0;
}

bool small_pdl(bool decode_sized) {
  return pdl_small(kPdlSmallElementwise, decode_sized);
}

unsigned grid_1d(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace

cudaError_t embedding(const bf16_bits* table, int64_t V, int64_t E, const int32_t* ids, int64_t T,
                      float* out, cudaStream_t s) {
  if (T < 0 || E <= 0 || T > 65535) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  const dim3 grid(unsigned((E + 255) / 256 < 64 ? (E + 255) / 256 : 64), unsigned(T));
  return launch_pdl(embedding_kernel, grid, dim3(256), 0, s, small_pdl(T <= kPdlRows), table, V, E,
                    ids, out);
}

cudaError_t rmsnorm_residual(float* x, const float* delta, const float* w, bf16_bits* y,
                             int64_t rows, int64_t n, float eps, cudaStream_t s) {
  if (rows < 0 || n <= 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return launch_pdl(rmsnorm_residual_kernel, dim3(unsigned(rows)), dim3(kNormThreads), 0, s,
                    small_pdl(rows <= kPdlRows), x, delta, w, y, n, eps);
}

cudaError_t head_rmsnorm(float* x, const float* w, int64_t rows, int64_t D, float eps,
                         cudaStream_t s) {
  if (rows < 0 || D <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return launch_pdl(head_rmsnorm_kernel, dim3(unsigned((rows + 7) / 8)), dim3(256), 0, s,
                    small_pdl(rows <= kPdlRows * 128), x, w, rows, D, eps);
}

cudaError_t rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
                 const float* sin, RopeLayout layout, cudaStream_t s) {
  if (rot <= 0 || rot % 2 || rot > D || !cos || !sin) return cudaErrorInvalidValue;
  const int64_t n = T * heads * (rot / 2);
  if (n == 0) return cudaSuccess;
  return launch_pdl(rope_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, s,
                    small_pdl(T <= kPdlRows), x, T, heads, D, rot / 2, cos, sin,
                    static_cast<const int32_t*>(nullptr), static_cast<const float*>(nullptr),
                    layout);
}

cudaError_t rope_inv_freq(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot,
                          const int32_t* pos, const float* inv_freq, RopeLayout layout,
                          cudaStream_t s) {
  if (rot <= 0 || rot % 2 || rot > D || !pos || !inv_freq) return cudaErrorInvalidValue;
  const int64_t n = T * heads * (rot / 2);
  if (n == 0) return cudaSuccess;
  return launch_pdl(rope_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, s,
                    small_pdl(T <= kPdlRows), x, T, heads, D, rot / 2,
                    static_cast<const float*>(nullptr), static_cast<const float*>(nullptr), pos,
                    inv_freq, layout);
}

cudaError_t swiglu(const float* gate, const float* up, bf16_bits* out, int64_t n, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return launch_pdl(swiglu_kernel, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                    small_pdl(n <= kPdlElems), gate, up, out, n);
}

cudaError_t convert_f32_bf16(const float* in, bf16_bits* out, int64_t n, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  convert_kernel<<<grid_1d(n, 256), 256, 0, s>>>(in, out, n);
  return cudaGetLastError();
}

cudaError_t convert_bf16_f32(const bf16_bits* in, float* out, int64_t n, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  widen_kernel<<<grid_1d(n, 256), 256, 0, s>>>(in, out, n);
  return cudaGetLastError();
}

cudaError_t argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t s) {
  if (rows < 0 || n <= 0 || n > 0x7fffffff || rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return launch_pdl(argmax_kernel, dim3(unsigned(rows)), dim3(kArgmaxThreads), 0, s,
                    small_pdl(rows <= kPdlRows), x, n, out);
}

cudaError_t add_f32(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return launch_pdl(add_kernel, dim3(grid_1d(n, 256)), dim3(256), 0, s, small_pdl(n <= kPdlElems),
                    y, x, n);
}

cudaError_t add_bias(float* y, const float* b, int64_t T, int64_t n, cudaStream_t s) {
  if (T < 0 || n <= 0) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  add_bias_kernel<<<grid_1d(T * n, 256), 256, 0, s>>>(y, b, T, n);
  return cudaGetLastError();
}

cudaError_t rope_angles(const int32_t* pos, const float* inv_freq, int64_t T, int64_t half,
                        float* cos, float* sin, cudaStream_t s) {
  if (T < 0 || half <= 0) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  return launch_pdl(rope_angles_kernel, dim3(unsigned((T * half + 255) / 256)), dim3(256), 0, s,
                    small_pdl(T <= kPdlRows), pos, inv_freq, T, half, cos, sin);
}

cudaError_t kv_write_fp8(const float* k, const float* v, const int32_t* slots, int64_t T,
                         int64_t Hkv, int64_t D, int64_t block_size, uint8_t* k_cache,
                         uint8_t* v_cache, cudaStream_t s) {
  if (T < 0 || Hkv <= 0 || D <= 0 || D % 16 || block_size <= 0) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  const int64_t warps = T * Hkv * 2;
  return launch_pdl(kv_write_fp8_kernel, dim3(unsigned((warps + 7) / 8)), dim3(256), 0, s,
                    small_pdl(T <= kPdlRows), k, v, slots, T, Hkv, D, block_size, k_cache, v_cache);
}

cudaError_t rope_kv_write(float* q, float* k, const float* v, const int32_t* slots, int64_t T,
                          int64_t H, int64_t Hkv, int64_t D, int64_t rot, const float* cos,
                          const float* sin, RopeLayout layout, bf16_bits* k_cache,
                          bf16_bits* v_cache, cudaStream_t s, const float* q_norm,
                          const float* k_norm, float eps) {
  if (T < 0 || H <= 0 || Hkv <= 0 || D <= 0 || D % 2 || rot <= 0 || rot % 2 || rot > D || !cos ||
      !sin || !q_norm != !k_norm)
    return cudaErrorInvalidValue;
  const int64_t rows = T * (H + 2 * Hkv);
  if (rows == 0) return cudaSuccess;
  return launch_pdl(rope_kv_write_kernel, dim3(unsigned((rows + 7) / 8)), dim3(256), 0, s,
                    small_pdl(T <= kPdlRows), q, k, v, slots, T, H, Hkv, D, rot / 2, cos, sin,
                    layout, k_cache, v_cache, q_norm, k_norm, eps);
}

cudaError_t kv_write(const float* k, const float* v, const int32_t* slots, int64_t T, int64_t row,
                     bf16_bits* k_cache, bf16_bits* v_cache, cudaStream_t s) {
  if (T < 0 || row <= 0 || T > 65535) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  const dim3 grid(unsigned((row + 255) / 256 < 16 ? (row + 255) / 256 : 16), unsigned(T));
  return launch_pdl(kv_write_kernel, grid, dim3(256), 0, s, small_pdl(T <= kPdlRows), k, v, slots,
                    T, row, k_cache, v_cache);
}

namespace {
__global__ void stream_delay_kernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
}  // namespace

bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BASALT_CUDA_PDL");
    return !(v && v[0] == '0');
  }();
  return on;
}

int pdl_small_mask() {
  static const int mask = [] {
    const char* v = std::getenv("BASALT_CUDA_PDL_SMALL");
    return v ? std::atoi(v) : kPdlSmallDefault;
  }();
  return mask;
}

cudaError_t stream_delay(int64_t ns, cudaStream_t s) {
  if (ns < 0 || ns > 1000000000) return cudaErrorInvalidValue;
  stream_delay_kernel<<<1, 1, 0, s>>>(uint64_t(ns));
  return cudaGetLastError();
}

}  // namespace basalt::cuda
