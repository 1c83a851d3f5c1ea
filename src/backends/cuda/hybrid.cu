// Kernels of the hybrid (Gated DeltaNet) and mixture-of-experts models: sigmoid_mul, gated_add,
// gated_rmsnorm, gdn (conv, q/k l2norm and gates, recurrence) and moe (routing, plan, combine;
// the expert products are moe_matmul in matmul.cu). kernels.h describes each; basalt::ref
// defines them.
//
// Exactness: every op is elementwise or has one reduction order per output element fixed by
// the shapes (the norms' lane-strided sums + butterfly; the GDN recurrence token by token with
// sums over Dk in an order fixed by Dk; the MoE softmax sum and the rank-order combination
// sequential), and every op is an explicit __f*_rn intrinsic, so nvcc cannot contract
// differently in different places. Nothing depends on T except which rows exist.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/pdl.cuh"

namespace basalt::cuda {
namespace {

// ref: 1 / (1 + exp(-x)),  x / (1 + exp(-x)),  x > 20 ? x : log1p(exp(x)) (torch's threshold).
__device__ __forceinline__ float sigmoid_f(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}
__device__ __forceinline__ float silu_f(float x) {
  return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
}
__device__ __forceinline__ float softplus_f(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

bool small_pdl(bool decode_sized) {
  return pdl_small(kPdlSmallHybrid, decode_sized);
}

unsigned grid_1d(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

// --- elementwise ---------------------------------------------------------------------------

__global__ void sigmoid_mul_kernel(bf16_bits* y, const float* gate, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = to_bf(__fmul_rn(bf(y[i]), sigmoid_f(gate[i])));
}

__global__ void gated_add_kernel(float* y, const float* x, const float* g, int64_t T, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], __fmul_rn(sigmoid_f(g[i / n]), x[i]));
}

// One warp per row (8 rows per block of 256).
__global__ void gated_rmsnorm_kernel(const float* x, const float* z, const float* w, bf16_bits* y,
                                     int64_t rows, int64_t n, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;  // whole warps leave together
  const float* xr = x + r * n;
  float ss = 0.0f;
  for (int64_t i = lane; i < n; i += 32) ss = __fadd_rn(ss, __fmul_rn(xr[i], xr[i]));
  ss = warp_sum(ss);
  const float inv = __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(n)), eps)));
  for (int64_t i = lane; i < n; i += 32)
    y[r * n + i] = to_bf(__fmul_rn(__fmul_rn(__fmul_rn(xr[i], inv), w[i]), silu_f(z[r * n + i])));
}

// --- Gated DeltaNet ------------------------------------------------------------------------

// Row t starts a run (the rows of one sequence in this pass) when its slot differs from the
// previous row's. The run ends before the first row of another slot; every lane of the warp
// finds that end with one ballot per 32 rows (so the row loops carry no dependent loads).
__device__ __forceinline__ bool run_start(const int32_t* slots, int t) {
  return t == 0 || slots[t - 1] != slots[t];
}
__device__ __forceinline__ int run_end(const int32_t* slots, int t0, int T, int lane) {
  const int32_t slot = slots[t0];
  for (int base = t0 + 1;; base += 32) {
    const int t = base + lane;
    const unsigned stop = __ballot_sync(0xffffffffu, t >= T || slots[t] != slot);
    if (stop) return base + __ffs(int(stop)) - 1;
  }
}

// One thread per (run, channel): grid (ceil(C / 128), T); blocks of rows that do not start a
// run leave at once. The window (the last K-1 inputs, oldest first) lives in registers; the
// inputs of kConvBatch rows are loaded together, then used in row order.
constexpr int kConvThreads = 128;
// The recurrence's lanes per value column (kernels.h: part of the reduction order).
// The recurrence's lanes per value column (part of its reduction order: see below), and the rows
// whose inputs the conv and recurrent kernels load ahead of the one they compute.
constexpr int kGdnLanesPerCol = 4, kGdnCols = 32 / kGdnLanesPerCol;
constexpr int kConvBatch = 8, kGdnPrefetch = 4;
__global__ void __launch_bounds__(kConvThreads)
    gdn_conv_kernel(const float* __restrict__ qkv, const float* __restrict__ conv_w,
                    float* __restrict__ conv_state, float* __restrict__ u,
                    const int32_t* __restrict__ slots, const int32_t* __restrict__ pos,
                    const int32_t* __restrict__ snaps, int T, int C, int K) {
  pdl_wait();
  pdl_trigger();
  const int t0 = blockIdx.y;
  if (!run_start(slots, t0)) return;
  const int t_end = run_end(slots, t0, T, threadIdx.x & 31);  // whole warps: before any exit
  const int c = blockIdx.x * kConvThreads + threadIdx.x;
  if (c >= C) return;
  const int slot = slots[t0], Km1 = K - 1;
  float w[kGdnMaxK - 1], win[kGdnMaxK - 1];
  float* st = conv_state + (int64_t(slot) * C + c) * Km1;
#pragma unroll
  for (int j = 0; j < kGdnMaxK - 1; ++j) {
    w[j] = j < Km1 ? conv_w[int64_t(c) * K + j] : 0.0f;
    win[j] = j < Km1 ? st[j] : 0.0f;
  }
  const float w_last = conv_w[int64_t(c) * K + Km1];
  for (int tb = t0; tb < t_end; tb += kConvBatch) {
    float ins[kConvBatch];
    int ps[kConvBatch], sn[kConvBatch];
#pragma unroll
    for (int k = 0; k < kConvBatch; ++k) {
      const int t = tb + k;
      ins[k] = t < t_end ? qkv[int64_t(t) * C + c] : 0.0f;
      ps[k] = t < t_end ? pos[t] : 1;
      sn[k] = t < t_end && snaps ? snaps[t] : -1;
    }
#pragma unroll
    for (int k = 0; k < kConvBatch; ++k) {
      const int t = tb + k;
      if (t >= t_end) break;
      if (ps[k] == 0) {
#pragma unroll
        for (int j = 0; j < kGdnMaxK - 1; ++j) win[j] = 0.0f;
      }
      const float in = ins[k];
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kGdnMaxK - 1; ++j)
        if (j < Km1) acc = __fadd_rn(acc, __fmul_rn(w[j], win[j]));
      acc = __fadd_rn(acc, __fmul_rn(w_last, in));
#pragma unroll
      for (int j = 0; j < kGdnMaxK - 1; ++j) {  // shift left, the new input last
        if (j + 1 < Km1)
          win[j] = win[j + 1];
        else if (j + 1 == Km1)
          win[j] = in;
      }
      u[int64_t(t) * C + c] = silu_f(acc);
      if (sn[k] >= 0) {  // the window after this row into the row's snapshot slot
        float* snap = conv_state + (int64_t(sn[k]) * C + c) * Km1;
#pragma unroll
        for (int j = 0; j < kGdnMaxK - 1; ++j)
          if (j < Km1) snap[j] = win[j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kGdnMaxK - 1; ++j)
    if (j < Km1) st[j] = win[j];
}

// Warps 0 .. T·2Hk-1: one per (row, head) of the q and k parts of u, each of Dk values:
// x · (1 / sqrt(Σx² + 1e-6)), and q then / sqrt(Dk) (ref::gdn's order). The warps after them:
// one lane per (row, value head), the gates g[t, h] = (β, decay) = (sigmoid(b), exp(-exp(A_log) ·
// softplus(a + dt_bias))) for the recurrence (computed here in parallel, not in its row loop).
__global__ void gdn_prepare_kernel(float* __restrict__ u, float* __restrict__ gates,
                                   const float* __restrict__ bl, const float* __restrict__ al,
                                   const float* __restrict__ A_log,
                                   const float* __restrict__ dt_bias, int64_t T, int64_t C,
                                   int64_t Hk, int64_t Hv, int64_t Dk) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  const int64_t norm_warps = T * 2 * Hk;
  if (r >= norm_warps) {
    const int64_t i = (r - norm_warps) * 32 + lane;  // (t, h) = (i / Hv, i % Hv)
    if (i >= T * Hv) return;
    const int64_t h = i % Hv;
    gates[2 * i] = sigmoid_f(bl[i]);
    gates[2 * i + 1] = expf(__fmul_rn(-expf(A_log[h]), softplus_f(__fadd_rn(al[i], dt_bias[h]))));
    return;
  }
  const int64_t t = r / (2 * Hk), hh = r % (2 * Hk);  // hh < Hk: q head, else k head
  float* v = u + t * C + hh * Dk;
  float ss = 0.0f;
  for (int64_t i = lane; i < Dk; i += 32) ss = __fadd_rn(ss, __fmul_rn(v[i], v[i]));
  ss = warp_sum(ss);
  const float inv = __frcp_rn(__fsqrt_rn(__fadd_rn(ss, 1e-6f)));
  if (hh < Hk) {
    const float qs = __fsqrt_rn(float(Dk));
    for (int64_t i = lane; i < Dk; i += 32) v[i] = __fdiv_rn(__fmul_rn(v[i], inv), qs);
  } else {
    for (int64_t i = lane; i < Dk; i += 32) v[i] = __fmul_rn(v[i], inv);
  }
}

// The recurrence. One warp per (run, value head h, 32 / LPC value columns); LPC lanes share a
// column j: lane part p (= lane % LPC) keeps S[i, j] for i = p, p + LPC, p + 2·LPC, ... < Dk in
// registers (NPL = DKMAX / LPC of them). Per row, in position order:
//   S ← S · decay;  mem = Σ_i S[i] k[i];  S[i] += k[i] · (β (v - mem));  o = Σ_i S[i] q[i]
// where each Σ is: every part's terms in increasing i (sequential f32 adds from 0), then the
// LPC partials by a butterfly over the parts (xor 1, 2, 4: ((p0 + p1) + (p2 + p3)) + ...), the
// same value in every lane. The order depends on Dk and LPC only. q and k of the row sit in
// shared memory (lane p reads addresses p + LPC·m: distinct banks); the inputs of the next
// kGdnPrefetch rows are in flight into registers (a ring) while a row computes.
// FULL: Dk == DKMAX (no bounds on i).
template <int DKMAX, int LPC, bool FULL>
__global__ void __launch_bounds__(32)
    gdn_recurrent_kernel(const float* __restrict__ u, const float* __restrict__ gates,
                         float* __restrict__ rec_state, float* __restrict__ out,
                         const int32_t* __restrict__ slots, const int32_t* __restrict__ pos,
                         const int32_t* __restrict__ snaps, int T, int Hk, int Hv, int Dk, int Dv) {
  pdl_wait();
  pdl_trigger();
  constexpr int NPL = DKMAX / LPC;  // state rows per lane
  constexpr int COLS = 32 / LPC;    // value columns per warp
  constexpr int NQ = DKMAX / 32;    // q/k elements each lane loads per row
  __shared__ float sq[DKMAX], sk[DKMAX];
  const int t0 = blockIdx.y;
  if (!run_start(slots, t0)) return;
  const int lane = threadIdx.x;
  const int t_end = run_end(slots, t0, T, lane);
  const int col_blocks = (Dv + COLS - 1) / COLS;
  const int h = blockIdx.x / col_blocks, part = lane % LPC;
  const int j = (blockIdx.x % col_blocks) * COLS + lane / LPC;
  const bool active = j < Dv;
  const int kh = h / (Hv / Hk);
  const int64_t C = 2 * int64_t(Hk) * Dk + int64_t(Hv) * Dv, KD = int64_t(Hk) * Dk;
  const int slot = slots[t0];

  float S[NPL];
  float* Sg = rec_state + ((int64_t(slot) * Hv + h) * Dk) * Dv + j;
#pragma unroll
  for (int m = 0; m < NPL; ++m) {
    const int i = part + LPC * m;
    S[m] = (active && (FULL || i < Dk)) ? Sg[int64_t(i) * Dv] : 0.0f;
  }

  // The inputs of a row: this lane's q/k elements (i = lane + 32n), v_j, the gate logits and
  // the position, for kGdnPrefetch rows (ring entry r holds row tb + r of the current group).
  constexpr int PF = kGdnPrefetch;
  float nq[PF][NQ], nk[PF][NQ], nv[PF], nbeta[PF], ndecay[PF];
  int np[PF], nsnap[PF];
  auto load = [&](int r, int t) {
    const float* row = u + int64_t(t) * C;
#pragma unroll
    for (int n = 0; n < NQ; ++n) {
      const int i = lane + 32 * n;
      nq[r][n] = FULL || i < Dk ? row[int64_t(kh) * Dk + i] : 0.0f;
      nk[r][n] = FULL || i < Dk ? row[KD + int64_t(kh) * Dk + i] : 0.0f;
    }
    nv[r] = active ? row[2 * KD + int64_t(h) * Dv + j] : 0.0f;
    nbeta[r] = gates[2 * (int64_t(t) * Hv + h)];
    ndecay[r] = gates[2 * (int64_t(t) * Hv + h) + 1];
    np[r] = pos[t];
    nsnap[r] = snaps ? snaps[t] : -1;
  };
  auto part_sum = [](float v) {  // the butterfly over the LPC lanes of a column
#pragma unroll
    for (int o = 1; o < LPC; o <<= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
  };
#pragma unroll
  for (int r = 0; r < PF; ++r)
    if (t0 + r < t_end) load(r, t0 + r);
  for (int tb = t0; tb < t_end; tb += PF) {
#pragma unroll
    for (int r = 0; r < PF; ++r) {
      const int t = tb + r;
      if (t >= t_end) break;  // the same for the whole warp
      __syncwarp();           // the previous row's q/k are no longer read
#pragma unroll
      for (int n = 0; n < NQ; ++n) {
        sq[lane + 32 * n] = nq[r][n];
        sk[lane + 32 * n] = nk[r][n];
      }
      const float v = nv[r], beta = nbeta[r], decay = ndecay[r];
      const bool reset = np[r] == 0;
      const int snap = nsnap[r];
      __syncwarp();
      if (t + PF < t_end) load(r, t + PF);
      if (reset) {
#pragma unroll
        for (int m = 0; m < NPL; ++m) S[m] = 0.0f;
      }
      float mem = 0.0f;
#pragma unroll
      for (int m = 0; m < NPL; ++m)
        if (FULL || part + LPC * m < Dk) {
          S[m] = __fmul_rn(S[m], decay);
          mem = __fadd_rn(mem, __fmul_rn(S[m], sk[part + LPC * m]));
        }
      mem = part_sum(mem);
      const float delta = __fmul_rn(__fsub_rn(v, mem), beta);
      float o = 0.0f;
#pragma unroll
      for (int m = 0; m < NPL; ++m)
        if (FULL || part + LPC * m < Dk) {
          S[m] = __fadd_rn(S[m], __fmul_rn(sk[part + LPC * m], delta));
          o = __fadd_rn(o, __fmul_rn(S[m], sq[part + LPC * m]));
        }
      o = part_sum(o);
      if (active && part == 0) out[(int64_t(t) * Hv + h) * Dv + j] = o;
      if (snap >= 0 && active) {  // the state after this row into the row's snapshot slot
        float* Sn = rec_state + ((int64_t(snap) * Hv + h) * Dk) * Dv + j;
#pragma unroll
        for (int m = 0; m < NPL; ++m) {
          const int i = part + LPC * m;
          if (FULL || i < Dk) Sn[int64_t(i) * Dv] = S[m];
        }
      }
    }
  }
  if (active) {
#pragma unroll
    for (int m = 0; m < NPL; ++m) {
      const int i = part + LPC * m;
      if (FULL || i < Dk) Sg[int64_t(i) * Dv] = S[m];
    }
  }
}

// --- mixture of experts --------------------------------------------------------------------

// Routing of one row by one warp (lane = its lane): softmax and top-K of the row's n logits l
// into ids [K] and weights [K]. sm: the warp's shared memory, route_smem_bytes(n): p [n] f32,
// taken [n] bytes.
__host__ __device__ constexpr size_t route_smem_bytes(int n) {
  return (size_t(n) * 5 + 15) / 16 * 16;
}
// ids_copy (optional): the ids again, e.g. into shared memory for moe_route_plan_kernel's plan.
__device__ __forceinline__ void route_row(const float* __restrict__ l, int n, int K, bool norm,
                                          int32_t* ids, float* weights, unsigned char* sm, int lane,
                                          int32_t* ids_copy = nullptr) {
  auto* p = reinterpret_cast<float*>(sm);
  auto* taken = reinterpret_cast<unsigned char*>(p + n);
  float m = -INFINITY;
  for (int e = lane; e < n; e += 32) m = fmaxf(m, l[e]);
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, s));
  for (int e = lane; e < n; e += 32) {
    p[e] = expf(__fsub_rn(l[e], m));
    taken[e] = 0;
  }
  __syncwarp();
  float sum = 0.0f;
  if (lane == 0) {  // ref's order (sequential over e), the loads 8 at a time
    int e = 0;
    for (; e + 8 <= n; e += 8) {
      float v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = p[e + k];
#pragma unroll
      for (int k = 0; k < 8; ++k) sum = __fadd_rn(sum, v[k]);
    }
    for (; e < n; ++e) sum = __fadd_rn(sum, p[e]);
  }
  sum = __shfl_sync(0xffffffffu, sum, 0);
  for (int e = lane; e < n; e += 32) p[e] = __fdiv_rn(p[e], sum);
  __syncwarp();
  // Top-K in rank order: each round the largest untaken p, the lowest index on ties (ref's scan).
  // p is finite and >= 0, whose bits order as the values, or NaN everywhere (a NaN logit makes
  // the sum NaN), when every key is equal and the lowest index wins, as in ref. Each lane scans
  // its experts e = lane + 32i; two warp reductions pick the winner, whose owner lane alone
  // marks it taken (no other lane reads the mark: no barrier); every lane keeps `top`, the sum in
  // rank order, and lane k % 32 rank k's id and weight.
  float top = 0.0f;
  int32_t my_id[kMoeMaxTopK / 32] = {};
  float my_w[kMoeMaxTopK / 32] = {};
  for (int k = 0; k < K; ++k) {
    float bv = 0.0f;
    int bi = n;  // none yet
    for (int e = lane; e < n; e += 32)
      if (!taken[e] && (bi == n || p[e] > bv)) bv = p[e], bi = e;
    const unsigned key = bi == n ? 0u : isnan(bv) ? 1u : __float_as_uint(bv) + 1u;
    const unsigned kmax = __reduce_max_sync(0xffffffffu, key);
    const unsigned best =
        __reduce_min_sync(0xffffffffu, key == kmax && bi != n ? unsigned(bi) : 0xffffffffu);
    const int owner = int(best & 31u);
    const float w = __shfl_sync(0xffffffffu, bv, owner);
    if (lane == owner) taken[best] = 1;
    top = __fadd_rn(top, w);  // rank order, as ref
    if ((k & 31) == lane) my_id[k >> 5] = int32_t(best), my_w[k >> 5] = w;
  }
  for (int k = lane; k < K; k += 32) {
    ids[k] = my_id[k >> 5];
    if (ids_copy) ids_copy[k] = my_id[k >> 5];
    weights[k] = norm ? __fdiv_rn(my_w[k >> 5], top) : my_w[k >> 5];
  }
}

// One warp per row.
__global__ void __launch_bounds__(32)
    moe_route_kernel(const float* __restrict__ logits, int n, int K, bool norm,
                     int32_t* __restrict__ ids, float* __restrict__ weights) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int64_t t = blockIdx.x;
  route_row(logits + t * n, n, K, norm, ids + t * K, weights + t * K, route_smem, threadIdx.x);
}

// The plan by one warp: counts per expert (shared atomics: order-free), tiles of up to 16 pairs
// of one expert in expert order (each lane a contiguous range of experts, a warp scan for the
// offsets), and the pairs placed stably (increasing pair index within an expert: a rank by
// __match_any_sync per 32 pairs, ids loaded 8 groups at a time). Shared: cnt, cursor [n]. The
// ids are read with plain (generic) loads: moe_route_plan_kernel passes its shared copy.
constexpr int kPlanGroups = 8;
// eg[g] = the expert of pair base + 32·g + lane (-1 past P): the warp's loads issued together.
__device__ __forceinline__ void load_id_groups(const int32_t* ids, int P, int base, int lane,
                                               int (&eg)[kPlanGroups]) {
#pragma unroll
  for (int g = 0; g < kPlanGroups; ++g) {
    const int q = base + 32 * g + lane;
    eg[g] = q < P ? ids[q] : -1;
  }
}
__device__ __forceinline__ void plan_warp(const int32_t* ids, int P, int n,
                                          int32_t* __restrict__ order, int32_t* __restrict__ tiles,
                                          int max_tiles, int* cnt, int lane) {
  int* cur = cnt + n;
  for (int e = lane; e < n; e += 32) cnt[e] = 0;
  __syncwarp();
  for (int base = 0; base < P; base += 32 * kPlanGroups) {  // loads in flight together
    int eg[kPlanGroups];
    load_id_groups(ids, P, base, lane, eg);
#pragma unroll
    for (int g = 0; g < kPlanGroups; ++g)
      if (eg[g] >= 0) atomicAdd(&cnt[eg[g]], 1);
  }
  __syncwarp();
  // Lane l owns experts [e0, e1): its pairs and tiles, then exclusive prefix sums over lanes.
  const int per = (n + 31) / 32, e0 = min(n, lane * per), e1 = min(n, e0 + per);
  int my_pairs = 0, my_tiles = 0;
  for (int e = e0; e < e1; ++e) my_pairs += cnt[e], my_tiles += (cnt[e] + 15) / 16;
  int pair0 = my_pairs, tile0 = my_tiles;  // inclusive scans, then made exclusive
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, pair0, o), b = __shfl_up_sync(0xffffffffu, tile0, o);
    if (lane >= o) pair0 += a, tile0 += b;
  }
  const int n_tiles = __shfl_sync(0xffffffffu, tile0, 31);
  pair0 -= my_pairs, tile0 -= my_tiles;
  for (int e = e0; e < e1; ++e) {
    const int c = cnt[e];
    cur[e] = pair0;
    for (int r = 0; r < c && tile0 < max_tiles; r += 16, ++tile0) {
      tiles[tile0] = e;
      tiles[max_tiles + tile0] = pair0 + r;
      tiles[2 * max_tiles + tile0] = c - r < 16 ? c - r : 16;
    }
    pair0 += c;
  }
  for (int i = n_tiles + lane; i < max_tiles; i += 32) {
    tiles[i] = 0;
    tiles[max_tiles + i] = 0;
    tiles[2 * max_tiles + i] = 0;
  }
  __syncwarp();
  for (int base = 0; base < P; base += 32 * kPlanGroups) {
    int eg[kPlanGroups];
    load_id_groups(ids, P, base, lane, eg);
#pragma unroll
    for (int g = 0; g < kPlanGroups; ++g) {
      const int q = base + 32 * g + lane, e = eg[g];
      const unsigned same = __match_any_sync(0xffffffffu, e);
      const int rank = __popc(same & ((1u << lane) - 1u));
      if (q < P) order[cur[e] + rank] = q;
      __syncwarp();
      if (q < P && rank == __popc(same) - 1) cur[e] += __popc(same);
      __syncwarp();
    }
  }
}

__global__ void __launch_bounds__(32)
    moe_plan_kernel(const int32_t* __restrict__ ids, int P, int n, int32_t* __restrict__ order,
                    int32_t* __restrict__ tiles, int max_tiles) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ int plan_smem[];
  plan_warp(ids, P, n, order, tiles, max_tiles, plan_smem, threadIdx.x);
}

// Route and plan in one launch for passes of at most kRoutePlanRows rows (decode, serving
// batches): warp t routes row t as moe_route_kernel does, then warp 0 plans as moe_plan_kernel
// does (the same device functions: the same ids, weights, order and tiles), reading the ids from
// a copy in shared memory at ids_off (route_plan_smem_bytes) instead of back from global memory.
constexpr int kRoutePlanRows = 32;
__host__ __device__ constexpr size_t route_plan_ids_offset(int rows, int n) {
  const size_t route = size_t(rows) * route_smem_bytes(n), plan = size_t(n) * 8;
  return ((route > plan ? route : plan) + 15) / 16 * 16;
}
__host__ __device__ constexpr size_t route_plan_smem_bytes(int rows, int n, int K) {
  return route_plan_ids_offset(rows, n) + size_t(rows) * K * 4;
}
__global__ void __launch_bounds__(32 * kRoutePlanRows)
    moe_route_plan_kernel(const float* __restrict__ logits, int T, int n, int K, bool norm,
                          int32_t* ids, float* __restrict__ weights, int32_t* __restrict__ order,
                          int32_t* __restrict__ tiles, int max_tiles, unsigned* __restrict__ zero,
                          int n_zero) {
  pdl_wait();
  pdl_trigger();
  // The down product's combine counters (moe_matmul_combine), zero for its launch.
  for (int i = int(threadIdx.x); i < n_zero; i += int(blockDim.x)) zero[i] = 0u;
  extern __shared__ __align__(16) unsigned char rp_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t per = route_smem_bytes(n);
  auto* ids_s = reinterpret_cast<int32_t*>(rp_smem + route_plan_ids_offset(T, n));
  if (warp < T)
    route_row(logits + int64_t(warp) * n, n, K, norm, ids + int64_t(warp) * K,
              weights + int64_t(warp) * K, rp_smem + warp * per, lane, ids_s + warp * K);
  __syncthreads();  // every row routed: the routing's shared memory is free, the ids' copy ready
  if (warp == 0)
    plan_warp(ids_s, T * K, n, order, tiles, max_tiles, reinterpret_cast<int*>(rp_smem), lane);
}

// out[t, i] = Σ_k w[t, k] · y[t·K + k, i], k in rank order from 0.
__global__ void moe_combine_kernel(const float* __restrict__ y, const float* __restrict__ w,
                                   int64_t T, int64_t K, int64_t E, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < T * E;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / E, i = idx % E;
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k)
      acc = __fadd_rn(acc, __fmul_rn(w[t * K + k], y[(t * K + k) * E + i]));
    out[idx] = acc;
  }
}

// Whether moe routes and plans up to 32 rows in one launch and runs gate / up with SwiGLU in
// one launch (moe_matmul_swiglu), or launches route, plan, moe_matmul (gate, up), swiglu.
constexpr bool kMoeFused = true;

// The moe workspace of a chunk of `rows` rows, in 256-byte aligned pieces.
struct MoeLayout {
  size_t ids = 0, w = 0, counters = 0, order = 0, tiles = 0, g = 0, up = 0, act = 0, y = 0,
         total = 0;
  int64_t max_tiles = 0;
  MoeLayout(int64_t rows, int64_t E, int64_t F, int64_t n_experts, int64_t top_k) {
    const int64_t P = rows * top_k;
    max_tiles = moe_max_tiles(P, n_experts);
    size_t at = 0;
    auto take = [&at](size_t bytes) {
      const size_t here = at;
      at += (bytes + 255) / 256 * 256;
      return here;
    };
    ids = take(size_t(P) * 4);
    w = take(size_t(P) * 4);
    counters = take(size_t(moe_combine_counters(E)) * 4);
    order = take(size_t(P) * 4);
    tiles = take(size_t(3 * max_tiles) * 4);
    if (!kMoeFused) {  // moe_matmul's f32 gate and up products
      g = take(size_t(P * F) * 4);
      up = take(size_t(P * F) * 4);
    }
    act = take(size_t(P * F) * 2);
    y = take(size_t(P * E) * 4);
    total = at;
  }
};

}  // namespace

cudaError_t sigmoid_mul(bf16_bits* y, const float* gate, int64_t n, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return launch_pdl(sigmoid_mul_kernel, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                    small_pdl(n <= kPdlElems), y, gate, n);
}

cudaError_t gated_add(float* y, const float* x, const float* g, int64_t T, int64_t n,
                      cudaStream_t s) {
  if (T < 0 || n <= 0) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  return launch_pdl(gated_add_kernel, dim3(grid_1d(T * n, 256)), dim3(256), 0, s,
                    small_pdl(T <= kPdlRows), y, x, g, T, n);
}

cudaError_t gated_rmsnorm(const float* x, const float* z, const float* w, bf16_bits* y,
                          int64_t rows, int64_t n, float eps, cudaStream_t s) {
  if (rows < 0 || n <= 0 || (rows + 7) / 8 > 0x7fffffff) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return launch_pdl(gated_rmsnorm_kernel, dim3(unsigned((rows + 7) / 8)), dim3(256), 0, s,
                    small_pdl(rows <= kPdlRows * 64), x, z, w, y, rows, n, eps);
}

size_t gdn_scratch_floats(int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv) {
  return size_t(T) * size_t(2 * Hk * Dk + Hv * Dv + 2 * Hv);  // u [T, C], gates [T, Hv, 2]
}

cudaError_t gdn(const GdnKernelArgs& a, cudaStream_t s) {
  const int64_t C = 2 * a.Hk * a.Dk + a.Hv * a.Dv;
  if (a.T < 0 || a.T > 65535 || a.Hk <= 0 || a.Hv <= 0 || a.Hv % a.Hk || a.Dk <= 0 ||
      a.Dk > kGdnMaxDk || a.Dv <= 0 || a.K < 1 || a.K > kGdnMaxK || C > 0x7fffffff ||
      a.Hv * ((a.Dv + 31) / 32) > 0x7fffffff || !a.qkv || !a.b || !a.a || !a.conv_w || !a.A_log ||
      !a.dt_bias || !a.rec_state || !a.out || !a.slots || !a.pos || !a.u ||
      (a.K > 1 && !a.conv_state))
    return cudaErrorInvalidValue;
  if (a.T == 0) return cudaSuccess;
  const unsigned T = unsigned(a.T);
  const bool pdl = small_pdl(a.T <= kPdlRows);
  cudaError_t e =
      launch_pdl(gdn_conv_kernel, dim3(unsigned((C + kConvThreads - 1) / kConvThreads), T),
                 dim3(kConvThreads), 0, s, pdl, a.qkv, a.conv_w, a.conv_state, a.u, a.slots, a.pos,
                 a.snaps, int(a.T), int(C), int(a.K));
  if (e != cudaSuccess) return e;
  float* gates = a.u + a.T * C;
  const int64_t warps = a.T * 2 * a.Hk + (a.T * a.Hv + 31) / 32;
  e = launch_pdl(gdn_prepare_kernel, dim3(unsigned((warps + 7) / 8)), dim3(256), 0, s, pdl, a.u,
                 gates, a.b, a.a, a.A_log, a.dt_bias, a.T, C, a.Hk, a.Hv, a.Dk);
  if (e != cudaSuccess) return e;
  const dim3 grid(unsigned(a.Hv * ((a.Dv + kGdnCols - 1) / kGdnCols)), T);
  const int Tn = int(a.T), Hk = int(a.Hk), Hv = int(a.Hv), Dk = int(a.Dk), Dv = int(a.Dv);
  auto launch = [&](auto kernel) {
    e = launch_pdl(kernel, grid, dim3(32), 0, s, pdl, a.u, static_cast<const float*>(gates),
                   a.rec_state, a.out, a.slots, a.pos, a.snaps, Tn, Hk, Hv, Dk, Dv);
  };
  constexpr int L = kGdnLanesPerCol;
  if (a.Dk == 128)
    launch(gdn_recurrent_kernel<128, L, true>);
  else if (a.Dk == 64)
    launch(gdn_recurrent_kernel<64, L, true>);
  else if (a.Dk <= 32)
    launch(gdn_recurrent_kernel<32, L, false>);
  else if (a.Dk <= 64)
    launch(gdn_recurrent_kernel<64, L, false>);
  else
    launch(gdn_recurrent_kernel<128, L, false>);
  return e;
}

int64_t moe_max_tiles(int64_t pairs, int64_t n_experts) {
  // Σ_e ceil(c_e / 16) <= Σ_e (floor(c_e / 16) + 1) over the experts that have pairs.
  return pairs / 16 + (n_experts < pairs ? n_experts : pairs);
}

size_t moe_workspace_bytes(int64_t T, int64_t E, int64_t F, int64_t n_experts, int64_t top_k) {
  const int64_t rows = T < kMoeChunkRows ? T : kMoeChunkRows;
  return MoeLayout(rows, E, F, n_experts, top_k).total;
}

cudaError_t moe_route(const float* logits, int64_t T, int64_t n_experts, int64_t top_k, bool norm,
                      int32_t* ids, float* weights, cudaStream_t s) {
  if (T < 0 || T > 0x7fffffff || n_experts <= 0 || n_experts > kMoeMaxExperts || top_k <= 0 ||
      top_k > n_experts || top_k > kMoeMaxTopK)
    return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  const size_t smem = route_smem_bytes(int(n_experts));
  return launch_pdl(moe_route_kernel, dim3(unsigned(T)), dim3(32), smem, s,
                    small_pdl(T <= kPdlRows), logits, int(n_experts), int(top_k), norm, ids,
                    weights);
}

cudaError_t moe_plan(const int32_t* ids, int64_t pairs, int64_t n_experts, int32_t* order,
                     int32_t* tiles, int64_t max_tiles, cudaStream_t s) {
  if (pairs < 0 || pairs > 0x7fffffff || n_experts <= 0 || n_experts > kMoeMaxExperts ||
      max_tiles < moe_max_tiles(pairs, n_experts) || max_tiles > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (max_tiles == 0) return cudaSuccess;
  return launch_pdl(moe_plan_kernel, dim3(1), dim3(32), size_t(n_experts) * 8, s,
                    small_pdl(pairs <= kPdlRows * kMoeMaxTopK), ids, int(pairs), int(n_experts),
                    order, tiles, int(max_tiles));
}

cudaError_t moe(const MoeKernelArgs& a, cudaStream_t s) {
  if (a.T < 0 || a.E <= 0 || a.F <= 0 || a.E % 8 || a.F % 8 || a.n_experts <= 0 ||
      a.n_experts > kMoeMaxExperts || a.top_k <= 0 || a.top_k > a.n_experts ||
      a.top_k > kMoeMaxTopK || !a.x || !a.router || !a.out || !a.gate || !a.up || !a.down ||
      !a.workspace || a.workspace_bytes < moe_workspace_bytes(a.T, a.E, a.F, a.n_experts, a.top_k))
    return cudaErrorInvalidValue;
  auto* ws = static_cast<char*>(a.workspace);
  for (int64_t r0 = 0; r0 < a.T; r0 += kMoeChunkRows) {
    const int64_t rows = a.T - r0 < kMoeChunkRows ? a.T - r0 : kMoeChunkRows;
    const int64_t P = rows * a.top_k;
    const MoeLayout L(rows, a.E, a.F, a.n_experts, a.top_k);
    auto* ids = reinterpret_cast<int32_t*>(ws + L.ids);
    auto* w = reinterpret_cast<float*>(ws + L.w);
    auto* order = reinterpret_cast<int32_t*>(ws + L.order);
    auto* tiles = reinterpret_cast<int32_t*>(ws + L.tiles);
    auto* act = reinterpret_cast<bf16_bits*>(ws + L.act);
    auto* y = reinterpret_cast<float*>(ws + L.y);
    // Up to 32 rows whose routing fits the default 48 KB of shared memory: one launch.
    // (The plan's counters reuse the routing's shared memory once every row is routed.)
    const size_t rp_smem = route_plan_smem_bytes(int(rows), int(a.n_experts), int(a.top_k));
    cudaError_t e = cudaSuccess;
    // Routed and planned in one launch: the down product's last blocks combine (its counters
    // zeroed by that launch).
    const bool one_launch = kMoeFused && rows <= kRoutePlanRows && rp_smem <= 48 * 1024;
    auto* counters = reinterpret_cast<unsigned*>(ws + L.counters);
    if (one_launch) {
      e = launch_pdl(moe_route_plan_kernel, dim3(1), dim3(unsigned(32 * rows)), rp_smem, s,
                     small_pdl(true), a.router + r0 * a.n_experts, int(rows), int(a.n_experts),
                     int(a.top_k), a.norm_topk, ids, w, order, tiles, int(L.max_tiles), counters,
                     int(moe_combine_counters(a.E)));
    } else {
      e = moe_route(a.router + r0 * a.n_experts, rows, a.n_experts, a.top_k, a.norm_topk, ids, w,
                    s);
      if (e == cudaSuccess) e = moe_plan(ids, P, a.n_experts, order, tiles, L.max_tiles, s);
    }
    if (e == cudaSuccess && kMoeFused)
      e = moe_matmul_swiglu(a.x + r0 * a.E, a.top_k, a.gate, a.up, a.F, a.E, act, order, tiles,
                            L.max_tiles, s, a.kernel);
    if (e == cudaSuccess && !kMoeFused) {
      auto* g = reinterpret_cast<float*>(ws + L.g);
      auto* up = reinterpret_cast<float*>(ws + L.up);
      e = moe_matmul(a.x + r0 * a.E, a.top_k, a.gate, a.up, a.F, a.E, g, up, order, tiles,
                     L.max_tiles, s, a.kernel);
      if (e == cudaSuccess) e = swiglu(g, up, act, P * a.F, s);
    }
    if (e == cudaSuccess && one_launch && a.combine_fold) {
      e = moe_matmul_combine(act, a.down, a.E, a.F, y, order, tiles, L.max_tiles, w, rows, a.top_k,
                             counters, a.out + r0 * a.E, s, a.kernel);
      if (e != cudaSuccess) return e;
      continue;
    }
    if (e == cudaSuccess)
      e = moe_matmul(act, 1, a.down, nullptr, a.E, a.F, y, nullptr, order, tiles, L.max_tiles, s,
                     a.kernel);
    if (e == cudaSuccess) {
      e = launch_pdl(moe_combine_kernel, dim3(grid_1d(rows * a.E, 256)), dim3(256), 0, s,
                     small_pdl(rows <= kPdlRows), static_cast<const float*>(y),
                     static_cast<const float*>(w), rows, a.top_k, a.E, a.out + r0 * a.E);
    }
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace basalt::cuda
