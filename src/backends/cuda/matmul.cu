// y[T, N] = x[T, K] · W[N, K]ᵀ on the tensor cores (mma.sync.m16n8k16, bf16 in, f32 accumulate).
//
// Exactness: y[t, n] is the chain  acc = 0; for k0 = 0, 16, 32, ... < K: acc = mma(x[t, k0:k0+16],
// W[n, k0:k0+16], acc)  — the same instruction, the same operand positions (ldmatrix from shared
// memory in the standard fragment layout), the same k order, for every tiling below. An mma's
// output element depends only on its own row of A, column of B and accumulator, so a row's bits
// do not depend on which rows share its tile or on T (tests/gpu checks this bitwise). K tails
// are zero-filled in whole 8-element pieces (K % 8 == 0), identically in every variant.
//
// Split-K, fixed by the weight shape alone: K is cut into segments of matmul_kseg(N, K) elements,
// or of the call's kseg (a recipe's choice for the weight shape; the last segment shorter);
// c_s is the chain above over segment s (starting from 0), and y = ((c_0 + c_1) + c_2) + ...
// (f32 adds, segment order). The 128-row tilings and workspace-less calls fold the segments as
// they go; with a workspace, the Rows variants give each (tile, segment) its own block (more
// bytes in flight for decode) and the tile's last block to finish adds the stored partials in
// segment order. Both are the same arithmetic, so the bits do not depend on the mode either.
//
// Tilings: the k-stage (BK) and the block shape only decide what sits in shared memory when;
// they never change the chain. Rows16x* (T padded to 16 rows: the rows past T are zeroed once in
// shared memory and never loaded) stream W for decode; the Tile tilings (mma.sync, and wgmma
// below) reuse tiles for prefill and serving batches.
// Decode-sized launches start early (pdl.cuh): their first weight stages are requested before
// the previous kernel has finished.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/fp8_wg.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/nvfp4_wg.h"
#include "backends/cuda/pdl.cuh"

namespace basalt::cuda {
namespace {

// Split-mode workspace: kMaxTiles arrival counters at a fixed place (so a call never finds
// another call's partials where its counters are: they are always back at zero), then
// [segments, T, N] f32 partials.
constexpr int64_t kMaxTiles = 65536;
size_t counter_bytes() {
  return size_t(kMaxTiles) * 4;
}
}  // namespace

namespace {
int64_t g_kseg_override = 0;
}
void set_matmul_kseg_override(int64_t kseg) {
  g_kseg_override = kseg;
}

int64_t matmul_kseg(int64_t N, int64_t K) {
  if (g_kseg_override > 0) return g_kseg_override < K ? g_kseg_override : K;
  if (K <= 512) return K;
  if (N <= 1024) return 512;  // few column blocks: short segments put more blocks on the SMs
  if (N > 65536 || K <= 1024) return K;  // (LM heads: blocks enough, one segment)
  if (K <= 4096) return N > 8192 ? K : 1024;
  return 2048;
}

namespace {
// A call's segment length (kernels.h): 0 the rule, >= K one segment, else a multiple of 256 (a
// whole number of k-stages of every tiling); -1 when invalid.
int64_t resolve_kseg(int64_t N, int64_t K, int64_t kseg) {
  if (kseg == 0) return matmul_kseg(N, K);
  if (kseg < 0) return -1;
  if (kseg >= K) return K;
  return kseg % 256 ? -1 : kseg;
}
// The split-K workspace of a resolved kseg: the tile counters, then a partial [T, N] a segment.
size_t workspace_bytes_kseg(int64_t T, int64_t N, int64_t K, int64_t kseg) {
  const int64_t segs = (K + kseg - 1) / kseg;
  return counter_bytes() + size_t(segs) * size_t(T) * size_t(N) * 4;
}
// A resolved kseg's segments and each segment's k-stages of `bk` columns: whole stages of every
// tiling (kseg is a multiple of 256), or all of K's stages for one segment.
struct SegPlan {
  int segs, seg_tiles;
};
SegPlan seg_plan(int64_t K, int64_t kseg, int bk) {
  const int segs = int((K + kseg - 1) / kseg);
  return {segs, segs == 1 ? int((K + bk - 1) / bk) : int(kseg / bk)};
}
}  // namespace

size_t matmul_workspace_bytes(int64_t T, int64_t N, int64_t K, int64_t kseg) {
  kseg = resolve_kseg(N, K, kseg);
  return kseg <= 0 ? 0 : workspace_bytes_kseg(T, N, K, kseg);  // invalid: the call fails anyway
}

namespace {

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
struct MmCfg {
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int kLds = BK + 8;  // row stride in bf16: +16 B keeps ldmatrix conflict-free
  static constexpr int kWm = BM / WARPS_M, kWn = BN / WARPS_N;
  static constexpr int kMt = kWm / 16, kNt = kWn / 8;
  static constexpr size_t kSmem = size_t(STAGES) * (BM + BN) * kLds * 2;
  static_assert(kWm % 16 == 0 && kWn % 8 == 0 && BK % 16 == 0);
};

// The column factor of a scaled weight's matmul (kernels.h matmul_scaled): when `on`, the final
// sum of column c is written as factor(c) · sum, one f32 multiply, factor(c) = rows[c] · scale
// (rows: FP8 per-row scales) or scale. Plain bf16 matmuls pass on = 0 and are untouched.
struct Epi {
  const float* rows = nullptr;
  float scale = 1.0f;
  int on = 0;
};
__device__ __forceinline__ float epi_factor(const Epi& e, int c) {
  return e.rows ? __fmul_rn(__ldg(e.rows + c), e.scale) : e.scale;
}

// Split-K across blocks (with a workspace): each block stores the partial of its segment
// (blockIdx.z) into part [segments, T, N]; the tile's last block to arrive (an arrival counter,
// not an atomic reduction) returns true with every element replaced by ((p_0 + p_1) + p_2) + ...
// in segment order. each(f) calls f(row, col, value&) for the thread's elements. sync() is a
// barrier over the threads that call this, and `leader` one of them (the block and thread 0, or
// the TMA tiling's consumers).
template <class Each, class Sync = BlockSync>
__device__ __forceinline__ bool split_k_fold(Each each, float* part, int* counters, int T, int N,
                                             Sync sync = {}, bool leader = threadIdx.x == 0,
                                             int segs = int(gridDim.z), int seg = int(blockIdx.z),
                                             int tile = int(blockIdx.y * gridDim.x + blockIdx.x)) {
  float* p = part + size_t(seg) * size_t(T) * N;
  each([&](int r, int c, float& v) {
    if (r < T && c < N) p[size_t(r) * N + c] = v;
  });
  if (!last_block_arrive(reinterpret_cast<unsigned*>(counters + tile), unsigned(segs), true, sync,
                         leader))
    return false;
  each([&](int r, int c, float& v) {
    if (r >= T || c >= N) return;
    const size_t o = size_t(r) * N + c;
    float sum = __ldcg(part + o);
    for (int z = 1; z < segs; ++z)
      sum = __fadd_rn(sum, __ldcg(part + size_t(z) * size_t(T) * N + o));
    v = sum;
  });
  return true;
}

// x [T, K], w [N, K] bf16; y [T, ldy] f32 (columns 0..N-1 written). Block (bx, by) owns columns
// bx*BN.., rows by*BM...
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(MmCfg<BM, BN, BK, WARPS_M, WARPS_N, STAGES>::kThreads)
    matmul_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                       float* __restrict__ y, int T, int N, int K, int ldy, int kSegTiles,
                       float* __restrict__ part, int* __restrict__ counters, Epi epi) {
  using C = MmCfg<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* sa = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [STAGES][BM][kLds]
  auto* sb = sa + STAGES * BM * C::kLds;                  // [STAGES][BN][kLds]

  // Rows variants put the row blocks on x (launched next to each other, so the blocks that
  // share a weight tile run together and read it once from memory); the Tile tilings the columns.
  constexpr bool kRowsOnX = BM == 16;
  const int m0 = (kRowsOnX ? blockIdx.x : blockIdx.y) * BM;
  const int n0 = (kRowsOnX ? blockIdx.y : blockIdx.x) * BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = (warp / WARPS_N) * C::kWm, wn = (warp % WARPS_N) * C::kWn;
  const int KT_all = (K + BK - 1) / BK;
  // Split mode: this block runs segment blockIdx.z only.
  const bool split = gridDim.z > 1;
  const int kt0 = split ? int(blockIdx.z) * kSegTiles : 0;
  const int KT = split ? min(KT_all - kt0, kSegTiles) : KT_all;

  // Copies of a stage: 16-byte chunks, kChunksRow a row. x: only the block's rows that exist
  // (rows_x); the others are zeroed once in every stage buffer below and never loaded (a
  // decode block copies 1 row of x, not 16). W: each thread's chunks sit at rows wr0 + i·kWStep,
  // column wkc of every stage, so their addresses and row checks are computed once; rows >= N
  // and columns >= K are zero-filled (src_bytes = 0).
  constexpr int kChunksRow = BK / 8;
  static_assert(C::kThreads % kChunksRow == 0 && (BN * kChunksRow) % C::kThreads == 0, "copies");
  constexpr int kWStep = C::kThreads / kChunksRow, kWPer = BN * kChunksRow / C::kThreads;
  const int rows_x = min(BM, T - m0);
  const int wr0 = threadIdx.x / kChunksRow, wkc = (threadIdx.x % kChunksRow) * 8;
  const __nv_bfloat16* const wsrc = w + size_t(min(n0 + wr0, N - 1)) * K + wkc;
  const size_t wstride = size_t(kWStep) * K;
  uint32_t wmask = 0;
#pragma unroll
  for (int i = 0; i < kWPer; ++i) wmask |= uint32_t(n0 + wr0 + i * kWStep < N) << i;
  const uint32_t wdst = smem_addr(sb) + uint32_t((wr0 * C::kLds + wkc) * 2);
  // x likewise (rows wr0 + i·kWStep, column wkc), only rows < rows_x.
  constexpr int kXPer = (BM * kChunksRow + C::kThreads - 1) / C::kThreads;
  const __nv_bfloat16* const xsrc = x + size_t(m0 + min(wr0, rows_x - 1)) * K + wkc;
  uint32_t xmask = 0;
#pragma unroll
  for (int i = 0; i < kXPer; ++i) xmask |= uint32_t(wr0 + i * kWStep < rows_x) << i;
  const uint32_t xdst = smem_addr(sa) + uint32_t((wr0 * C::kLds + wkc) * 2);
  auto load_x = [&](int stage, int kt) {
    const int k0 = (kt0 + kt) * BK;
    const bool col_ok = k0 + wkc < K;
    const uint32_t d = xdst + uint32_t(stage * BM * C::kLds * 2);
#pragma unroll
    for (int i = 0; i < kXPer; ++i)
      if (xmask >> i & 1u)
        cp_async16_s(d + uint32_t(i * kWStep * C::kLds * 2),
                     col_ok ? xsrc + k0 + size_t(i) * kWStep * K : x, col_ok ? 16 : 0);
  };
  auto load_w = [&](int stage, int kt) {
    const int k0 = (kt0 + kt) * BK;
    const bool col_ok = k0 + wkc < K;
    const uint32_t d = wdst + uint32_t(stage * BN * C::kLds * 2);
#pragma unroll
    for (int i = 0; i < kWPer; ++i) {
      const bool ok = col_ok && (wmask >> i & 1u);
      cp_async16_s(d + uint32_t(i * kWStep * C::kLds * 2), ok ? wsrc + k0 + i * wstride : w,
                   ok ? 16 : 0);
    }
  };
  auto load_stage = [&](int stage, int kt) {
    load_x(stage, kt);
    load_w(stage, kt);
  };

  // Where accumulator element acc[i][j][e] belongs in y: c0,c1 at (row lane/4, cols
  // 2*(lane%4) + {0,1}), c2,c3 at row + 8, within the warp's 16×8 tile (i, j).
  auto out_row = [&](int i, int e) { return m0 + wm + i * 16 + (lane >> 2) + (e >> 1) * 8; };
  auto out_col = [&](int j, int e) { return n0 + wn + j * 8 + (lane & 3) * 2 + (e & 1); };
  constexpr bool kFoldInY = BM > 16;
  float acc[C::kMt][C::kNt][4], tot[kFoldInY ? 1 : C::kMt][kFoldInY ? 1 : C::kNt][4];
#pragma unroll
  for (int i = 0; i < C::kMt; ++i)
#pragma unroll
    for (int j = 0; j < C::kNt; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  if constexpr (!kFoldInY)
#pragma unroll
    for (int i = 0; i < C::kMt; ++i)
#pragma unroll
      for (int j = 0; j < C::kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) tot[i][j][e] = 0.0f;

  // The first stages' weights are requested before waiting for the previous kernel (pdl.cuh:
  // they are never written), x and everything else after. The first commit group holds all of
  // those weights, so the first wait covers them.
  pdl_trigger();
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st)
    if (st < KT) load_w(st, st);
  pdl_wait();
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < KT) load_x(st, st);
    cp_async_commit();
  }
  // x rows >= rows_x: zero in every stage buffer (published by the loop's first barrier).
  for (int c = rows_x * kChunksRow + int(threadIdx.x); c < BM * kChunksRow; c += C::kThreads)
#pragma unroll
    for (int st = 0; st < STAGES; ++st)
      *reinterpret_cast<uint4*>(sa + st * BM * C::kLds + (c / kChunksRow) * C::kLds +
                                (c % kChunksRow) * 8) = make_uint4(0, 0, 0, 0);

  int seg_pos = 0;          // k-stages done in the current segment
  bool first_seg = true;    // folding mode: the segment being summed is c_0
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage kt landed for all; stage kt-1 is no longer read by anyone
    if (kt + STAGES - 1 < KT) load_stage((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();

    const __nv_bfloat16* ta = sa + (kt % STAGES) * BM * C::kLds;
    const __nv_bfloat16* tb = sb + (kt % STAGES) * BN * C::kLds;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[C::kMt][4];
#pragma unroll
      for (int i = 0; i < C::kMt; ++i)
        ldmatrix_x4(af[i], ta + (wm + i * 16 + (lane & 15)) * C::kLds + kk + (lane >> 4) * 8);
      uint32_t bfr[C::kNt][2];
#pragma unroll
      for (int j = 0; j + 1 < C::kNt; j += 2) {
        uint32_t r[4];
        ldmatrix_x4(r, tb + (wn + j * 8 + (lane & 7) + (lane >> 4) * 8) * C::kLds + kk +
                           ((lane >> 3) & 1) * 8);
        bfr[j][0] = r[0];
        bfr[j][1] = r[1];
        bfr[j + 1][0] = r[2];
        bfr[j + 1][1] = r[3];
      }
      if constexpr (C::kNt % 2) {
        constexpr int j = C::kNt - 1;
        uint32_t r[2];
        ldmatrix_x2(r, tb + (wn + j * 8 + (lane & 7)) * C::kLds + kk + ((lane >> 3) & 1) * 8);
        bfr[j][0] = r[0];
        bfr[j][1] = r[1];
      }
#pragma unroll
      for (int i = 0; i < C::kMt; ++i)
#pragma unroll
        for (int j = 0; j < C::kNt; ++j) mma_bf16(acc[i][j], af[i], bfr[j][0], bfr[j][1]);
    }
    // End of a segment (folding mode): tot = c_0, then tot = tot + c_s; acc restarts from 0.
    // Large tiles keep tot in y itself (each thread its own elements): registers for a second
    // 64-float array would halve their occupancy.
    if (!split && (++seg_pos == kSegTiles || kt + 1 == KT)) {
      const bool first = first_seg;
      first_seg = false;
      seg_pos = 0;
#pragma unroll
      for (int i = 0; i < C::kMt; ++i)
#pragma unroll
        for (int j = 0; j < C::kNt; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if constexpr (kFoldInY) {
              const int r = out_row(i, e), c = out_col(j, e);
              if (r < T && c < N) {
                float* o = y + size_t(r) * ldy + c;
                const float v = first ? acc[i][j][e] : __fadd_rn(*o, acc[i][j][e]);
                *o = epi.on && kt + 1 == KT ? __fmul_rn(epi_factor(epi, c), v) : v;
              }
            } else {
              tot[i][j][e] = first ? acc[i][j][e] : __fadd_rn(tot[i][j][e], acc[i][j][e]);
            }
            acc[i][j][e] = 0.0f;
          }
    }
  }
  cp_async_wait<0>();

  // Split: this segment's partial out; the tile's last block gets the sums in acc.
  auto each = [&](auto f) {
#pragma unroll
    for (int i = 0; i < C::kMt; ++i)
#pragma unroll
      for (int j = 0; j < C::kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(out_row(i, e), out_col(j, e), acc[i][j][e]);
  };
  if (split && !split_k_fold(each, part, counters, T, N)) return;
  if constexpr (!kFoldInY)  // (with kFoldInY, y already holds the folded sum)
#pragma unroll
    for (int i = 0; i < C::kMt; ++i)
#pragma unroll
      for (int j = 0; j < C::kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = out_row(i, e), c = out_col(j, e);
          const float v = split ? acc[i][j][e] : tot[i][j][e];
          if (r < T && c < N)
            y[size_t(r) * ldy + c] = epi.on ? __fmul_rn(epi_factor(epi, c), v) : v;
        }
}

// kseg: the segment length of the whole weight (the call's, resolved: a launch over a block of
// its rows keeps the weight's segments); y has row stride ldy.
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
cudaError_t launch(const bf16_bits* x, int T, const bf16_bits* w, int N, int K, float* y,
                   cudaStream_t s, void* ws, size_t ws_bytes, int64_t kseg, int ldy, Epi epi,
                   bool pdl) {
  using C = MmCfg<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  auto* kern = matmul_bf16_kernel<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  if (const cudaError_t e = allow_smem<matmul_bf16_kernel<BM, BN, BK, WARPS_M, WARPS_N, STAGES>>(
          C::kSmem);
      e != cudaSuccess)
    return e;
  const auto [segs, seg_tiles] = seg_plan(K, kseg, BK);
  const int64_t tiles = int64_t((N + BN - 1) / BN) * ((T + BM - 1) / BM);
  const bool split = BM == 16 && segs > 1 && tiles <= kMaxTiles && ws &&
                     ws_bytes >= workspace_bytes_kseg(T, N, K, kseg);
  const unsigned col_blocks = unsigned((N + BN - 1) / BN), row_blocks = unsigned((T + BM - 1) / BM);
  const dim3 grid(BM == 16 ? row_blocks : col_blocks, BM == 16 ? col_blocks : row_blocks,
                  unsigned(split ? segs : 1));
  int* counters = static_cast<int*>(ws);
  float* part =
      split ? reinterpret_cast<float*>(static_cast<char*>(ws) + counter_bytes()) : nullptr;
  // Early starts for decode-sized passes only: measured on the H200 (bench/RESULTS.md), they
  // gain 4-5 % of decode and cost 10 % of a 512-token prefill.
  return launch_pdl(kern, grid, dim3(C::kThreads), C::kSmem, s, pdl && T <= 64,
                    reinterpret_cast<const __nv_bfloat16*>(x),
                    reinterpret_cast<const __nv_bfloat16*>(w), y, T, N, K, ldy, seg_tiles, part,
                    counters, epi);
}

// The wgmma tilings: WGS warpgroups of 64 rows (BM = 64·WGS) × BN columns a block, k-stage 64,
// STAGES-deep cp.async into 128-byte-swizzled K-major tiles, four wgmma.m64nBNk16 a stage with
// one stage's group left in flight while the next is issued. A chain of wgmma k16 steps gives
// mma_bf16's chain bit for bit (bench/cuda/wgmma_probe on the H200), so with the same k order,
// segments and fold as the mma.sync tilings this is matmul_bf16 exactly (tests/gpu compares it
// bitwise with T = 1 rows of the Rows tilings). Segments fold into y as they finish (Tile128's
// way), or, with gridDim.z > 1 (a workspace), run in separate blocks whose partials the tile's
// last block adds in order (the Rows tilings' way).
template <int WGS, int BN, int STAGES>
struct WgCfg {
  static constexpr int kBM = 64 * WGS, kBK = 64, kThreads = 128 * WGS;
  static constexpr int kStageBytes = (kBM + BN) * kBK * 2;
  static constexpr size_t kSmem = size_t(STAGES) * kStageBytes + 1024;  // + alignment slack
};

template <int WGS, int BN, int STAGES>
__global__ void __launch_bounds__(128 * WGS)
    matmul_wg_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     float* __restrict__ y, int T, int N, int K, int ldy, int kSegTiles,
                     float* __restrict__ part, int* __restrict__ counters, Epi epi) {
  using C = WgCfg<WGS, BN, STAGES>;
  constexpr int BM = C::kBM, BK = C::kBK, NT = C::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* const sm = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sm_s = smem_addr(sm);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wq = (tid >> 5) & 3;
  const int KT_all = (K + BK - 1) / BK;
  // Split mode (one-warpgroup tiles only: the 128-row ones keep their registers for two blocks an
  // SM): this block runs segment blockIdx.z only.
  constexpr bool kCanSplit = WGS == 1;
  const bool split = kCanSplit && gridDim.z > 1;
  const int kt0 = split ? int(blockIdx.z) * kSegTiles : 0;
  const int KT = split ? min(KT_all - kt0, kSegTiles) : KT_all;

  // Copies: 16-byte chunk c of tile row r at byte r·128 + ((c ^ (r & 7)) << 4); thread tid takes
  // chunks tid + NT·i (8 consecutive threads a row). Rows past T / N and columns past K: zeros.
  auto load_stage = [&](int stage, int kt) {
    const int k0 = (kt0 + kt) * BK;
    const uint32_t st = sm_s + uint32_t(stage * C::kStageBytes);
#pragma unroll
    for (int i = 0; i < (BM + BN) * 8 / NT; ++i) {
      const int chunk = tid + NT * i, r = chunk >> 3, c = chunk & 7;
      const bool is_a = r < BM;
      const int grow = is_a ? m0 + r : n0 + r - BM;
      const bool ok = grow < (is_a ? T : N) && k0 + c * 8 < K;
      const __nv_bfloat16* src = ok ? (is_a ? x : w) + size_t(grow) * K + k0 + c * 8 : x;
      cp_async16_s(st + uint32_t(r * 128 + ((c ^ (r & 7)) << 4)), src, ok ? 16 : 0);
    }
  };

  constexpr int kAcc = BN / 2;
  float acc[kAcc];

  pdl_trigger();
  pdl_wait();
  // Stage kt + STAGES - 2 is requested at step kt, into the buffer of step kt - 2, whose wgmma
  // every warpgroup has waited for before that step's barrier (one wgmma group stays in flight).
#pragma unroll
  for (int st = 0; st < STAGES - 2; ++st) {
    if (st < KT) load_stage(st, st);
    cp_async_commit();
  }
  // Where d[4j + e] belongs: row 16·wq + lane/4 (+ 8) of this warpgroup's 64, column
  // 8j + 2·(lane % 4) (+ 1).
  auto out_row = [&](int e) { return m0 + 64 * wg + 16 * wq + (lane >> 2) + (e >> 1) * 8; };
  auto out_col = [&](int j, int e) { return n0 + j * 8 + (lane & 3) * 2 + (e & 1); };
  int seg_pos = 0;
  bool first_seg = true;
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<STAGES - 3>();
    fence_proxy_async();
    __syncthreads();  // stage kt landed for all; every wgmma of step kt - 2 has completed
    if (kt + STAGES - 2 < KT) load_stage((kt + STAGES - 2) % STAGES, kt + STAGES - 2);
    cp_async_commit();
    const unsigned char* ta = sm + (kt % STAGES) * C::kStageBytes + wg * 64 * 128;
    const unsigned char* tb = sm + (kt % STAGES) * C::kStageBytes + BM * 128;
    wgmma_fence();
    // A segment's chain starts from zero (d = A·B), as the mma chain's acc = 0.
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
      wgmma_bf16<BN>(acc, wgmma_desc_sw128(ta + kk * 32), wgmma_desc_sw128(tb + kk * 32),
                     seg_pos > 0 || kk > 0);
    wgmma_commit();
    // End of a segment (folding mode): y = c_0, then y = y + c_s (Tile128's fold).
    if (!split && (++seg_pos == kSegTiles || kt + 1 == KT)) {
      wgmma_wait<0>();
      const bool first = first_seg;
      first_seg = false;
      seg_pos = 0;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = out_row(e), c = out_col(j, e);
          if (r < T && c < N) {
            float* o = y + size_t(r) * ldy + c;
            const float v = first ? acc[4 * j + e] : __fadd_rn(*o, acc[4 * j + e]);
            *o = epi.on && kt + 1 == KT ? __fmul_rn(epi_factor(epi, c), v) : v;
          }
        }
    } else {
      if (split) ++seg_pos;
      wgmma_wait<1>();
    }
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  if constexpr (kCanSplit) {
    if (!split) return;
    // Split: this segment's partial out; the tile's last block writes the sums.
    auto each = [&](auto f) {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(out_row(e), out_col(j, e), acc[4 * j + e]);
    };
    if (!split_k_fold(each, part, counters, T, N)) return;
    each([&](int r, int c, float& v) {
      if (r < T && c < N) y[size_t(r) * ldy + c] = epi.on ? __fmul_rn(epi_factor(epi, c), v) : v;
    });
  }
}

template <int WGS, int BN, int STAGES>
cudaError_t launch_wg(const bf16_bits* x, int T, const bf16_bits* w, int N, int K, float* y,
                      cudaStream_t s, void* ws, size_t ws_bytes, int64_t kseg, int ldy, Epi epi,
                      bool pdl) {
  using C = WgCfg<WGS, BN, STAGES>;
  auto* kern = matmul_wg_kernel<WGS, BN, STAGES>;
  if (const cudaError_t e = allow_smem<matmul_wg_kernel<WGS, BN, STAGES>>(C::kSmem);
      e != cudaSuccess)
    return e;
  const auto [segs, seg_tiles] = seg_plan(K, kseg, C::kBK);
  const unsigned col_blocks = unsigned((N + BN - 1) / BN);
  const unsigned row_blocks = unsigned((T + C::kBM - 1) / C::kBM);
  const bool split = segs > 1 && int64_t(col_blocks) * row_blocks <= kMaxTiles && ws &&
                     ws_bytes >= workspace_bytes_kseg(T, N, K, kseg);
  int* counters = static_cast<int*>(ws);
  float* part =
      split ? reinterpret_cast<float*>(static_cast<char*>(ws) + counter_bytes()) : nullptr;
  return launch_pdl(kern, dim3(col_blocks, row_blocks, unsigned(split ? segs : 1)),
                    dim3(C::kThreads), C::kSmem, s, pdl && T <= 64,
                    reinterpret_cast<const __nv_bfloat16*>(x),
                    reinterpret_cast<const __nv_bfloat16*>(w), y, T, N, K, ldy, seg_tiles, part,
                    counters, epi);
}

// The TMA tiling (TileTMA, prefill): CWG consumer warpgroups of 64 rows (BM = 64·CWG) × BN
// columns a block and one producer warpgroup whose first thread copies each k-stage (64 wide) of
// x and W with the tensor-memory accelerator into STAGES 128-byte-swizzled buffers (the layout
// wgmma_desc_sw128 reads, as the cp.async tilings write it). Full / empty mbarriers a buffer hand
// the stages over: no block barrier in the loop, no address arithmetic in the consumers. The
// chain is the wgmma tilings' (four wgmma.m64nBNk16 a stage, one group left in flight), so the bits
// are matmul_bf16's; the segments fold in registers (tot = c_0, then tot + c_s, the fold of the
// other tilings) and y is written once. Blocks run row blocks fastest, so the blocks resident at
// once share few W tiles: W is read from memory about once and x stays in L2 (the cp.async
// tilings run columns fastest and read W once per row block).
template <int CWG, int BN, int STAGES>
struct TmaCfg {
  static constexpr int kBM = 64 * CWG, kBK = 64, kThreads = 128 * (CWG + 1);
  static constexpr int kABytes = kBM * kBK * 2, kStageBytes = kABytes + BN * kBK * 2;
  static constexpr size_t kSmem = size_t(STAGES) * kStageBytes + 16 * STAGES + 1024;
  // Two blocks an SM for the one-consumer tiling (batches of <= 64 rows stream W), one otherwise.
  static constexpr int kMinBlocks = CWG == 1 ? 2 : 1;
  // Registers a thread at launch, and after the producer gives most of its own to the consumers.
  static constexpr int kRegs = (65536 / (kThreads * kMinBlocks)) & ~7;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = (kRegs + (kRegs - kProducerRegs) / CWG) & ~7;
};

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
}

// The TMA tilings' pipeline: STAGES buffers of STAGE_BYTES at sm_s, each holding one 64-wide
// k-stage of a W box (at w_off) and an x box (at x_off); full[s] at bars + 8s (the producer's
// arrival plus the copies' bytes), empty[s] at bars + 8(STAGES + s) (4·WGS consumer warps).
template <int STAGES>
__device__ __forceinline__ void tma_init_bars(uint32_t bars, int consumer_warps) {
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(bars + 8u * uint32_t(s), 1);
    mbar_init(bars + 8u * uint32_t(STAGES + s), uint32_t(consumer_warps));
  }
  mbar_init_fence();
}

// A TMA tiling block's start: its shared memory (the stage buffers from the first 1024-byte
// boundary, the swizzle atoms', then the barriers, initialised by thread 0 for consumer_warps),
// the block synchronised, and the next kernel let in (pdl_trigger).
struct TmaSmem {
  unsigned char* sm;
  uint32_t sm_s, bars;
};
template <int STAGES, int STAGE_BYTES>
__device__ __forceinline__ TmaSmem tma_block_start(unsigned char* raw, int consumer_warps) {
  unsigned char* const sm = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sm_s = smem_addr(sm), bars = sm_s + uint32_t(STAGES * STAGE_BYTES);
  if (threadIdx.x == 0) tma_init_bars<STAGES>(bars, consumer_warps);
  __syncthreads();
  pdl_trigger();
  return {sm, sm_s, bars};
}

// The producer (one thread): k-stages kt0 .. kt0 + KT - 1. The first stages' weights are requested
// before waiting for the previous kernel (pdl.cuh: no kernel writes W), their x after. mw2: a
// second weight box per stage (the same rows of another weight) at w2_off.
template <int STAGES, int STAGE_BYTES>
__device__ __forceinline__ void tma_produce(uint32_t sm_s, uint32_t bars, const CUtensorMap* mw,
                                            int w_row, uint32_t w_off, const CUtensorMap* mx,
                                            int x_row, uint32_t x_off, int kt0, int KT,
                                            const CUtensorMap* mw2 = nullptr, uint32_t w2_off = 0) {
  auto full = [&](int s) { return bars + 8u * uint32_t(s); };
  auto empty = [&](int s) { return bars + 8u * uint32_t(STAGES + s); };
  tma_prefetch_map(mw);
  if (mw2) tma_prefetch_map(mw2);
  tma_prefetch_map(mx);
  const int pre = min(STAGES, KT);
  for (int kt = 0; kt < pre; ++kt) {
    mbar_arrive_expect_tx(full(kt), uint32_t(STAGE_BYTES));
    tma_load_2d(sm_s + uint32_t(kt * STAGE_BYTES) + w_off, mw, (kt0 + kt) * 64, w_row, full(kt));
    if (mw2)
      tma_load_2d(sm_s + uint32_t(kt * STAGE_BYTES) + w2_off, mw2, (kt0 + kt) * 64, w_row,
                  full(kt));
  }
  pdl_wait();
  for (int kt = 0; kt < pre; ++kt)
    tma_load_2d(sm_s + uint32_t(kt * STAGE_BYTES) + x_off, mx, (kt0 + kt) * 64, x_row, full(kt));
  for (int kt = pre; kt < KT; ++kt) {
    const int s = kt % STAGES;
    mbar_wait(empty(s), uint32_t((kt / STAGES) - 1) & 1u);
    const uint32_t st = sm_s + uint32_t(s * STAGE_BYTES);
    mbar_arrive_expect_tx(full(s), uint32_t(STAGE_BYTES));
    tma_load_2d(st + w_off, mw, (kt0 + kt) * 64, w_row, full(s));
    if (mw2) tma_load_2d(st + w2_off, mw2, (kt0 + kt) * 64, w_row, full(s));
    tma_load_2d(st + x_off, mx, (kt0 + kt) * 64, x_row, full(s));
  }
}

// A consumer warpgroup: the wgmma chain over KT stages (A at a_off, B at b_off of each buffer),
// four m64nNk16 a stage with one group left in flight, each buffer handed back once its wgmma
// completed. Segments of kSegTiles stages start from zero (d = A·B, as the mma chain's acc = 0);
// FOLD: they add up in order in tot (tot = c_0, then tot + c_s), else the chain ends in acc.
// base: the pipeline's stage count before this call (a persistent block's earlier tiles), so
// stage `base + kt` is buffer (base + kt) % STAGES; release_last hands the last buffer back too
// (a persistent block's producer reuses it for the next tile).
template <int N, int STAGES, int STAGE_BYTES, bool FOLD>
__device__ __forceinline__ void tma_consume(const unsigned char* sm, uint32_t bars, int a_off,
                                            int b_off, int KT, int kSegTiles, float (&acc)[N / 2],
                                            float (&tot)[FOLD ? N / 2 : 1], int lane,
                                            uint32_t base = 0, bool release_last = false) {
  int seg_pos = 0;
  bool first = true;
  for (int kt = 0; kt < KT; ++kt) {
    const uint32_t it = base + uint32_t(kt);
    const int s = int(it % STAGES);
    mbar_wait(bars + 8u * uint32_t(s), (it / STAGES) & 1u);
    const unsigned char* st = sm + s * STAGE_BYTES;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_bf16<N>(acc, wgmma_desc_sw128(st + a_off + kk * 32),
                    wgmma_desc_sw128(st + b_off + kk * 32), seg_pos > 0 || kk > 0);
    wgmma_commit();
    if constexpr (FOLD) {
      if (++seg_pos == kSegTiles || kt + 1 == KT) {
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < N / 2; ++i) tot[i] = first ? acc[i] : __fadd_rn(tot[i], acc[i]);
        first = false;
        seg_pos = 0;
      } else {
        wgmma_wait<1>();
      }
    } else {
      ++seg_pos;
      wgmma_wait<1>();
    }
    if (kt > 0 && lane == 0) mbar_arrive(bars + 8u * uint32_t(STAGES + (it - 1) % STAGES));
  }
  wgmma_wait<0>();
  if (release_last && KT > 0 && lane == 0)
    mbar_arrive(bars + 8u * uint32_t(STAGES + (base + uint32_t(KT) - 1) % STAGES));
}

// A consumer warp's results to y (f32, row stride ldy, epi's factor applied): res[4j + e] is row
// r0 + lane/4 (+ 8), column n0 + 8j + 2·(lane % 4) (+ 1) (the wgmma accumulator layout).
template <int BN>
__device__ __forceinline__ void tma_store_tile(const float* res, float* __restrict__ y, int T,
                                               int N, int ldy, int r0, int n0, const Epi& epi,
                                               int lane) {
  const bool pair_ok = (ldy & 1) == 0 && (reinterpret_cast<uintptr_t>(y) & 7) == 0;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + (lane >> 2) + 8 * h;
      const int c = n0 + 8 * j + 2 * (lane & 3);
      if (r >= T || c >= N) continue;
      float v0 = res[4 * j + 2 * h], v1 = res[4 * j + 2 * h + 1];
      if (epi.on) {
        v0 = __fmul_rn(epi_factor(epi, c), v0);
        if (c + 1 < N) v1 = __fmul_rn(epi_factor(epi, c + 1), v1);
      }
      float* o = y + size_t(r) * ldy + c;
      if (c + 1 < N && pair_ok) {
        *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
      } else {
        o[0] = v0;
        if (c + 1 < N) o[1] = v1;
      }
    }
}

// SWIGLU: W's box is two boxes of BN / 2 rows, rows n0 .. of the gate (tw) and of the up (tw2)
// weight, so a thread holds gate column c and up column c of the same row (res[4j + e] and
// res[4(j + BN / 16) + e]); out[r, c] = bf16(silu_mul(gate, up)) (swiglu's bits) is all it
// writes (bf16, row stride ldy; N is the weights' row count).
template <int CWG, int BN, int STAGES, bool FOLD, bool SWIGLU = false>
__global__ void __launch_bounds__(TmaCfg<CWG, BN, STAGES>::kThreads,
                                  TmaCfg<CWG, BN, STAGES>::kMinBlocks)
    matmul_tma_kernel(const __grid_constant__ CUtensorMap tx,
                      const __grid_constant__ CUtensorMap tw, float* __restrict__ y, int T, int N,
                      int K, int ldy, int kSegTiles, Epi epi,
                      const __grid_constant__ CUtensorMap tw2, bf16_bits* __restrict__ out) {
  using C = TmaCfg<CWG, BN, STAGES>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const TmaSmem ts = tma_block_start<STAGES, C::kStageBytes>(smem_raw, 4 * CWG);
  unsigned char* const sm = ts.sm;
  const uint32_t sm_s = ts.sm_s, bars = ts.bars;
  const int m0 = blockIdx.x * C::kBM, n0 = blockIdx.y * (SWIGLU ? BN / 2 : BN);
  const int tid = threadIdx.x;
  const int KT = (K + C::kBK - 1) / C::kBK;
  // Registers move from the producer warpgroup (one thread of it works) to the consumers, whose
  // two accumulator sets (fold) need them.
  if (tid < 128) {  // the producer warpgroup: x in A (the first kABytes), W in B
    setmaxnreg_dec<C::kProducerRegs>();
    if (tid == 0)
      tma_produce<STAGES, C::kStageBytes>(sm_s, bars, &tw, n0, uint32_t(C::kABytes), &tx, m0, 0u, 0,
                                          KT, SWIGLU ? &tw2 : nullptr,
                                          uint32_t(C::kABytes + BN / 2 * C::kBK * 2));
    return;
  }
  setmaxnreg_inc<C::kConsumerRegs>();
  pdl_wait();  // y may still be read by the previous kernel
  const int wg = (tid >> 7) - 1, lane = tid & 31, wq = (tid >> 5) & 3;
  float acc[BN / 2];
  float tot[FOLD ? BN / 2 : 1];
  tma_consume<BN, STAGES, C::kStageBytes, FOLD>(sm, bars, wg * 64 * 128, C::kABytes, KT, kSegTiles,
                                                acc, tot, lane);
  const float* res = FOLD ? tot : acc;
  // res[4j + e]: row 16·wq + lane/4 (+ 8) of this warpgroup's 64, column 8j + 2·(lane % 4) (+ 1).
  if constexpr (SWIGLU) {
    const bool pair_ok = (ldy & 1) == 0 && (reinterpret_cast<uintptr_t>(out) & 3) == 0;
#pragma unroll
    for (int j = 0; j < BN / 16; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + 64 * wg + 16 * wq + (lane >> 2) + 8 * h;
        const int c = n0 + 8 * j + 2 * (lane & 3);
        if (r >= T || c >= N) continue;
        const float* g = res + 4 * j + 2 * h;
        const float* u = res + 4 * (j + BN / 16) + 2 * h;
        bf16_bits* o = out + size_t(r) * ldy + c;
        const bf16_bits v0 = to_bf(silu_mul(g[0], u[0]));
        if (c + 1 < N && pair_ok) {
          *reinterpret_cast<uint32_t*>(o) = uint32_t(v0) | uint32_t(to_bf(silu_mul(g[1], u[1])))
                                                               << 16;
        } else {
          o[0] = v0;
          if (c + 1 < N) o[1] = to_bf(silu_mul(g[1], u[1]));
        }
      }
    return;
  }
  tma_store_tile<BN>(res, y, T, N, ldy, m0 + 64 * wg + 16 * wq, n0, epi, lane);
}

// TileTMAP: TileTMA's blocks made persistent. One block an SM walks tiles blockIdx.x,
// + gridDim.x, ... in TileTMA's grid order (row blocks fastest); the producer's stage count runs
// on across tiles, so it fills the next tile's first stages while the consumers write the
// previous tile (TileTMA pays a block start and the first copies' latency every tile). Each
// tile's chain, segments and fold are TileTMA's (tma_consume): the same bits.
template <int CWG, int BN, int STAGES, bool FOLD>
__global__ void __launch_bounds__(TmaCfg<CWG, BN, STAGES>::kThreads, 1)
    matmul_tma_persistent_kernel(const __grid_constant__ CUtensorMap tx,
                                 const __grid_constant__ CUtensorMap tw, float* __restrict__ y,
                                 int T, int N, int K, int ldy, int kSegTiles, Epi epi,
                                 int row_blocks, int n_tiles) {
  using C = TmaCfg<CWG, BN, STAGES>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const TmaSmem ts = tma_block_start<STAGES, C::kStageBytes>(smem_raw, 4 * CWG);
  unsigned char* const sm = ts.sm;
  const uint32_t sm_s = ts.sm_s, bars = ts.bars;
  const int tid = threadIdx.x;
  const int KT = (K + C::kBK - 1) / C::kBK;
  if (tid < 128) {  // the producer warpgroup: x in A (the first kABytes), W in B
    setmaxnreg_dec<C::kProducerRegs>();
    if (tid != 0) return;
    tma_prefetch_map(&tw);
    tma_prefetch_map(&tx);
    pdl_wait();
    uint32_t it = 0;
    for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
      const int m0 = (tile % row_blocks) * C::kBM, n0 = (tile / row_blocks) * BN;
      for (int kt = 0; kt < KT; ++kt, ++it) {
        const int s = int(it % STAGES);
        if (it >= uint32_t(STAGES))
          mbar_wait(bars + 8u * uint32_t(STAGES + s), ((it / STAGES) - 1) & 1u);
        const uint32_t st = sm_s + uint32_t(s * C::kStageBytes), full = bars + 8u * uint32_t(s);
        mbar_arrive_expect_tx(full, uint32_t(C::kStageBytes));
        tma_load_2d(st + uint32_t(C::kABytes), &tw, kt * 64, n0, full);
        tma_load_2d(st, &tx, kt * 64, m0, full);
      }
    }
    return;
  }
  setmaxnreg_inc<C::kConsumerRegs>();
  pdl_wait();  // y may still be read by the previous kernel
  const int wg = (tid >> 7) - 1, lane = tid & 31, wq = (tid >> 5) & 3;
  uint32_t base = 0;
  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x, base += uint32_t(KT)) {
    const int m0 = (tile % row_blocks) * C::kBM, n0 = (tile / row_blocks) * BN;
    float acc[BN / 2];
    float tot[FOLD ? BN / 2 : 1];
    tma_consume<BN, STAGES, C::kStageBytes, FOLD>(sm, bars, wg * 64 * 128, C::kABytes, KT,
                                                  kSegTiles, acc, tot, lane, base, true);
    tma_store_tile<BN>(FOLD ? tot : acc, y, T, N, ldy, m0 + 64 * wg + 16 * wq, n0, epi, lane);
  }
}

// cuTensorMapEncodeTiled from the driver (through the runtime: nothing links libcuda), once.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A [rows, cols] row-major bf16 matrix read in boxes of box_rows × 64, 128-byte swizzled, zeros
// outside. False where the driver cannot encode it (the caller falls back to a cp.async tiling).
bool bf16_tile_map(CUtensorMap* m, const void* p, int64_t rows, int64_t cols, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
  if (!enc) return false;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  return enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// matmul_tma_kernel's instance for a weight of `segs` segments (the fold where several), its
// shared memory allowed (error: that call's result). BN > 128 holds one accumulator set (128
// registers a thread), no room for the fold: several segments give cudaErrorNotSupported.
template <int CWG, int BN, int STAGES, bool SWIGLU>
struct TmaKernel {
  decltype(&matmul_tma_kernel<CWG, BN, STAGES, false, SWIGLU>) kern =
      matmul_tma_kernel<CWG, BN, STAGES, false, SWIGLU>;
  cudaError_t error = cudaSuccess;
  explicit TmaKernel(int segs) {
    using C = TmaCfg<CWG, BN, STAGES>;
    constexpr auto kOne = matmul_tma_kernel<CWG, BN, STAGES, false, SWIGLU>;
    if constexpr (BN > 128) {
      error = segs > 1 ? cudaErrorNotSupported : allow_smem<kOne>(C::kSmem);
    } else {
      constexpr auto kFold = matmul_tma_kernel<CWG, BN, STAGES, true, SWIGLU>;
      if (segs > 1) kern = kFold;
      error = segs > 1 ? allow_smem<kFold>(C::kSmem) : allow_smem<kOne>(C::kSmem);
    }
  }
};

// cudaErrorNotSupported where the maps cannot be made or the grid does not fit (dispatch_bf16
// then runs a cp.async tiling). Segments always fold in registers: with 64-row blocks, split-K
// blocks measured 1.8-2.6x slower (H100, T = 64).
template <int CWG, int BN, int STAGES>
cudaError_t launch_tma(const bf16_bits* x, int T, const bf16_bits* w, int N, int K, float* y,
                       cudaStream_t s, int64_t kseg, int ldy, Epi epi, bool pdl) {
  using C = TmaCfg<CWG, BN, STAGES>;
  const unsigned row_blocks = unsigned((T + C::kBM - 1) / C::kBM);
  const unsigned col_blocks = unsigned((N + BN - 1) / BN);
  if (col_blocks > 65535) return cudaErrorNotSupported;
  CUtensorMap tx, tw;
  if (!bf16_tile_map(&tx, x, T, K, C::kBM) || !bf16_tile_map(&tw, w, N, K, BN))
    return cudaErrorNotSupported;
  const auto [segs, seg_tiles] = seg_plan(K, kseg, C::kBK);
  const TmaKernel<CWG, BN, STAGES, false> k(segs);
  if (k.error != cudaSuccess) return k.error;
  return launch_pdl(k.kern, dim3(row_blocks, col_blocks), dim3(C::kThreads), C::kSmem, s,
                    pdl && T <= 64, tx, tw, y, T, N, K, ldy, seg_tiles, epi, tw,
                    static_cast<bf16_bits*>(nullptr));
}

// TileTMAP (matmul_tma_persistent_kernel): min(tiles, SMs) blocks.
template <int CWG, int BN, int STAGES>
cudaError_t launch_tma_persistent(const bf16_bits* x, int T, const bf16_bits* w, int N, int K,
                                  float* y, cudaStream_t s, int64_t kseg, int ldy, Epi epi,
                                  bool pdl) {
  using C = TmaCfg<CWG, BN, STAGES>;
  const int64_t row_blocks = (T + C::kBM - 1) / C::kBM, col_blocks = (N + BN - 1) / BN;
  const int64_t n_tiles = row_blocks * col_blocks;
  if (n_tiles > 0x7fffffff) return cudaErrorNotSupported;
  CUtensorMap tx, tw;
  if (!bf16_tile_map(&tx, x, T, K, C::kBM) || !bf16_tile_map(&tw, w, N, K, BN))
    return cudaErrorNotSupported;
  const auto [segs, seg_tiles] = seg_plan(K, kseg, C::kBK);
  constexpr auto kOne = matmul_tma_persistent_kernel<CWG, BN, STAGES, false>;
  constexpr auto kFold = matmul_tma_persistent_kernel<CWG, BN, STAGES, true>;
  const bool fold = segs > 1;
  if (const cudaError_t e = fold ? allow_smem<kFold>(C::kSmem) : allow_smem<kOne>(C::kSmem);
      e != cudaSuccess)
    return e;
  const unsigned grid = unsigned(n_tiles < sm_count() ? n_tiles : sm_count());
  return launch_pdl(fold ? kFold : kOne, dim3(grid), dim3(C::kThreads), C::kSmem, s, pdl && T <= 64,
                    tx, tw, y, T, N, K, ldy, seg_tiles, epi, int(row_blocks), int(n_tiles));
}

// The gate / up products and SwiGLU in one TileTMA launch (matmul_tma_kernel's SWIGLU): blocks
// of 128 rows × BN / 2 gate and BN / 2 up columns; out bf16 [T, F], row stride ldo. BN = 256
// (TileTMA256's blocks: 128 accumulators a thread, no room for a fold) takes one-segment weights
// only: cudaErrorNotSupported otherwise.
template <int BN, int STAGES>
cudaError_t launch_tma_swiglu(const bf16_bits* x, int T, const bf16_bits* wg, const bf16_bits* wu,
                              int F, int K, bf16_bits* out, int ldo, cudaStream_t s, int64_t kseg) {
  constexpr int CWG = 2;
  using C = TmaCfg<CWG, BN, STAGES>;
  const unsigned row_blocks = unsigned((T + C::kBM - 1) / C::kBM);
  const unsigned col_blocks = unsigned((F + BN / 2 - 1) / (BN / 2));
  const auto [segs, seg_tiles] = seg_plan(K, kseg, C::kBK);
  if (col_blocks > 65535) return cudaErrorNotSupported;
  CUtensorMap tx, tg, tu;
  if (!bf16_tile_map(&tx, x, T, K, C::kBM) || !bf16_tile_map(&tg, wg, F, K, BN / 2) ||
      !bf16_tile_map(&tu, wu, F, K, BN / 2))
    return cudaErrorNotSupported;
  const TmaKernel<CWG, BN, STAGES, true> k(segs);
  if (k.error != cudaSuccess) return k.error;
  return launch_pdl(k.kern, dim3(row_blocks, col_blocks), dim3(C::kThreads), C::kSmem, s, T <= 64,
                    tx, tg, static_cast<float*>(nullptr), T, F, K, ldo, seg_tiles, Epi{}, tu, out);
}

// The TMA decode tiling (RowsTMA, T <= 64): W in wgmma's A operand (64 weight rows a block), the
// tokens in B (n8, n16, n32 or n64: the smallest that holds T), both copied by TMA (x's box is NT
// rows: the rows past T arrive as zeros) into STAGES buffers by a producer warp; one consumer
// warpgroup issues four wgmma.m64nNTk16 a stage and nothing else. bench/cuda/wgmma_probe found the
// chain with W as A bitwise equal to the mma.sync chain, so this is matmul_bf16 exactly
// (tests/gpu). Decode is bytes: a block streams 64 rows of one segment, several blocks an SM keep
// enough copies in flight, and no thread computes an address. With a workspace the segments run in
// separate blocks (split_k_fold); without, they fold in registers. One launch may cover up to three
// weights of the same K (matmul_bf16_group: q / k / v, gate / up), each with its own segments,
// partials and output: the blocks of weight i follow those of weight i - 1 on grid x.
// The SWIGLU forms' hand-over (RowsTMA's and the wgmma layout's): consumer warps 2, 3 hold the up
// sums of the (column, token) pairs whose gate sums warps 0, 1 hold in the same places. They store
// theirs in `xch` ([i][64 lanes of warps 2, 3]; shared memory no wgmma or copy still uses) and get
// false; gate warp wq gets true and finds the up value of its element i at
// xch[i * 64 + wq * 32 + lane]. sync: the consumers' barrier.
template <int NT, class Sync>
__device__ __forceinline__ bool swiglu_handover(float* xch, const float* res, int wq, int lane,
                                                Sync sync) {
  sync();
  if (wq >= 2) {
#pragma unroll
    for (int i = 0; i < NT / 2; ++i) xch[i * 64 + (wq - 2) * 32 + lane] = res[i];
  }
  sync();
  return wq < 2;
}

template <int NT, int STAGES>
struct RowsTmaCfg {
  static constexpr int kBK = 64, kThreads = 160;
  static constexpr int kABytes = 64 * kBK * 2, kStageBytes = kABytes + NT * kBK * 2;
  static constexpr size_t kSmem = size_t(STAGES) * kStageBytes + 16 * STAGES + 1024;
  static_assert(kStageBytes % 1024 == 0, "stages stay on 1024-byte swizzle atoms");
};

constexpr int kMaxGroup = 3;
struct RowsGroup {
  int n = 1;                      // weights
  int blocks[kMaxGroup] = {};     // their 64-row blocks
  int item_end[kMaxGroup] = {};   // blocks × launched segments, cumulative: one 1-D grid
  int N[kMaxGroup] = {};          // rows
  int seg_tiles[kMaxGroup] = {};  // k-stages a segment
  int segs[kMaxGroup] = {};       // segments
  float* y[kMaxGroup] = {};
  int ldy[kMaxGroup] = {};
  float* part[kMaxGroup] = {};  // split partials [segs, T, N]; nullptr: fold in registers
};

// SWIGLU (matmul_bf16_swiglu on up to 64 rows): one weight pair, gate (tw0) and up (tw1), boxes of
// 32 rows each stacked into the block's 64-row A operand (two 4 KB halves of whole swizzle atoms:
// the layout of one 64-row box), so warps 0, 1 run the gate's chains and warps 2, 3 the up's for
// the same 32 columns n0 .. (g.N[0] = F; the partials and counters index the block's 64 rows as
// rows 64·blk + r of a virtual [64·blocks] weight). The up warps hand their results to the gate
// warps through shared memory, which write out[t, c] = bf16(silu_mul(gate, up)) (swiglu's bits,
// row stride g.ldy[0]) and nothing else.
template <int NT, int STAGES, bool FOLD, bool SWIGLU = false>
__global__ void __launch_bounds__(160, 3)
    matmul_tma_rows_kernel(const __grid_constant__ CUtensorMap tx,
                           const __grid_constant__ CUtensorMap tw0,
                           const __grid_constant__ CUtensorMap tw1,
                           const __grid_constant__ CUtensorMap tw2, const RowsGroup g, int T, int K,
                           int* __restrict__ counters, Epi epi, bf16_bits* __restrict__ out) {
  using C = RowsTmaCfg<NT, STAGES>;
  // Block b: weight gi, then (segment z, 64-row block) of that weight's items. The fields are
  // read with constant indices (a dynamic index copies the struct to local memory).
  int gi = 0, item0 = 0, tile0 = 0;
  int N = g.N[0], segs = g.segs[0], seg_tiles = g.seg_tiles[0], blocks = g.blocks[0];
  int ldy = g.ldy[0];
  float* y = g.y[0];
  float* part = g.part[0];
#pragma unroll
  for (int i = 1; i < kMaxGroup; ++i)
    if (i < g.n && int(blockIdx.x) >= g.item_end[i - 1]) {
      gi = i, item0 = g.item_end[i - 1], tile0 += g.blocks[i - 1];
      N = g.N[i], segs = g.segs[i], seg_tiles = g.seg_tiles[i], blocks = g.blocks[i];
      ldy = g.ldy[i], y = g.y[i], part = g.part[i];
    }
  const bool split = part != nullptr;
  const int item = int(blockIdx.x) - item0;
  const int z = item / blocks, blk = item % blocks;
  const int tile = tile0 + blk;  // counters: one per 64-row block of the group
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const TmaSmem ts = tma_block_start<STAGES, C::kStageBytes>(smem_raw, 4);
  unsigned char* const sm = ts.sm;
  const uint32_t sm_s = ts.sm_s, bars = ts.bars;
  const int n0 = blk * (SWIGLU ? 32 : 64);
  const int tid = threadIdx.x;
  const int KT_all = (K + C::kBK - 1) / C::kBK;
  const int kt0 = split ? z * seg_tiles : 0;
  const int KT = split ? min(KT_all - kt0, seg_tiles) : KT_all;
  if (tid >= 128) {  // the producer warp: W in A (the first kABytes), x in B
    if (tid == 128) {
      if constexpr (SWIGLU)
        tma_produce<STAGES, C::kStageBytes>(sm_s, bars, &tw0, n0, 0u, &tx, 0, uint32_t(C::kABytes),
                                            kt0, KT, &tw1, uint32_t(C::kABytes / 2));
      else
        tma_produce<STAGES, C::kStageBytes>(sm_s, bars,
                                            gi == 0   ? &tw0
                                            : gi == 1 ? &tw1
                                                      : &tw2,
                                            n0, 0u, &tx, 0, uint32_t(C::kABytes), kt0, KT);
    }
    return;
  }
  pdl_wait();  // y may still be read by the previous kernel
  const int lane = tid & 31, wq = tid >> 5;
  float acc[NT / 2];
  float tot[FOLD ? NT / 2 : 1];
  tma_consume<NT, STAGES, C::kStageBytes, FOLD>(sm, bars, 0, C::kABytes, KT, seg_tiles, acc, tot,
                                                lane);
  float* res = FOLD ? tot : acc;
  auto sync = [] { asm volatile("bar.sync 1, 128;\n" ::: "memory"); };
  // res[4j + e]: weight row 16·wq + lane/4 (+ 8 for e >= 2) of the block, token
  // 8j + 2·(lane % 4) (+ 1). SWIGLU: the block's rows as virtual rows 64·blk + r.
  const int rbase = SWIGLU ? 64 * blk : n0;
  auto each = [&](auto f) {
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f(8 * j + 2 * (lane & 3) + (e & 1), rbase + 16 * wq + (lane >> 2) + 8 * (e >> 1),
          res[4 * j + e]);
  };
  if (!FOLD && split)
    if (!split_k_fold(each, part, counters, T, SWIGLU ? 64 * blocks : N, sync, tid == 0, segs, z,
                      tile))
      return;
  if constexpr (SWIGLU) {
    // The up warps' results through the stage buffers (every wgmma has completed once all four
    // warps pass the barrier).
    float* xch = reinterpret_cast<float*>(sm);
    if (!swiglu_handover<NT>(xch, res, wq, lane, sync)) return;
    const int ldo = g.ldy[0];
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = 8 * j + 2 * (lane & 3) + (e & 1);
        const int c = n0 + 16 * wq + (lane >> 2) + 8 * (e >> 1);
        if (t < T && c < N)
          out[size_t(t) * ldo + c] =
              to_bf(silu_mul(res[4 * j + e], xch[(4 * j + e) * 64 + wq * 32 + lane]));
      }
    return;
  }
  each([&](int t, int n, float& v) {
    if (t < T && n < N) y[size_t(t) * ldy + n] = epi.on ? __fmul_rn(epi_factor(epi, n), v) : v;
  });
}

// The group's partials after the counters: weight i's [segs_i, T, N_i] where it has segments.
size_t group_workspace_bytes(int64_t T, int n, const int64_t* N, int64_t K, const int64_t* kseg) {
  size_t b = counter_bytes();
  for (int i = 0; i < n; ++i)
    if (kseg[i] < K) b += size_t((K + kseg[i] - 1) / kseg[i]) * size_t(T) * size_t(N[i]) * 4;
  return b;
}

// The most rows RowsTMA runs split-K (segments in separate blocks, the workspace's partials);
// above, the segments fold in registers (split-K measured slower, H100: T = 32 4096 x 4096
// 29.1 against 22.5 us, T = 64 40.0 against 24.9, 4096 x 14336 90.3 against 62.0).
constexpr int kRowsSplitMaxT = 16;

// A group launch's segments (RowsGroup, WgGroup: n weights, their blocks and segments set):
// split-K for every weight with segments, or for none (above kRowsSplitMaxT rows the partials
// cost more than the blocks gain, H100 T = 32 / 64), where T allows it and the workspace holds
// need_ws bytes (counters, then each segmented weight's partials [segs, T, part_rows[i]] in
// order). Sets g.part and g.item_end; gives the launch's items and whether the segments fold
// in registers instead.
struct GroupPlan {
  int items;
  bool fold;
};
template <class G>
GroupPlan plan_group(G& g, const int* part_rows, size_t need_ws, int T, void* ws, size_t ws_bytes) {
  int blocks = 0;
  bool any_segs = false;
  for (int i = 0; i < g.n; ++i) blocks += g.blocks[i], any_segs |= g.segs[i] > 1;
  const bool split =
      any_segs && T <= kRowsSplitMaxT && blocks <= kMaxTiles && ws && ws_bytes >= need_ws;
  char* p = static_cast<char*>(ws) + counter_bytes();
  int items = 0;
  for (int i = 0; i < g.n; ++i) {
    g.part[i] = nullptr;
    if (split && g.segs[i] > 1) {
      g.part[i] = reinterpret_cast<float*>(p);
      p += size_t(g.segs[i]) * size_t(T) * size_t(part_rows[i]) * 4;
    }
    items += g.blocks[i] * (g.part[i] ? g.segs[i] : 1);
    g.item_end[i] = items;
  }
  return {items, any_segs && !split};
}

// The tokens' box of a RowsTMA or wgmma-layout launch: the smallest of 8, 16, 32 and 64 rows that
// holds T (T <= 64); f(std::integral_constant<int, NT>).
template <typename F>
cudaError_t rows_tma_nt(int T, F&& f) {
  if (T <= 8) return f(std::integral_constant<int, 8>{});
  if (T <= 16) return f(std::integral_constant<int, 16>{});
  if (T <= 32) return f(std::integral_constant<int, 32>{});
  return f(std::integral_constant<int, 64>{});
}

// A RowsTMA launch of group g (its blocks, segments and outputs set, part[] not yet): split-K where
// the weights have segments, T <= kRowsSplitMaxT and the workspace holds need_ws bytes
// (counters, then each segmented weight's partials [segs, T, N] in order: part_rows[i] rows of
// weight i); else the segments fold in registers. tw: the weights' tensor maps (SWIGLU: gate,
// up).
template <int NT, int STAGES, bool SWIGLU>
cudaError_t launch_rows_group(const CUtensorMap& tx, const CUtensorMap* tw, RowsGroup g,
                              const int* part_rows, size_t need_ws, int T, int K, void* ws,
                              size_t ws_bytes, Epi epi, bf16_bits* out, cudaStream_t s, bool pdl) {
  using C = RowsTmaCfg<NT, STAGES>;
  const auto [items, fold] = plan_group(g, part_rows, need_ws, T, ws, ws_bytes);
  constexpr auto kFold = matmul_tma_rows_kernel<NT, STAGES, true, SWIGLU>;
  constexpr auto kOne = matmul_tma_rows_kernel<NT, STAGES, false, SWIGLU>;
  if (const cudaError_t e = fold ? allow_smem<kFold>(C::kSmem) : allow_smem<kOne>(C::kSmem);
      e != cudaSuccess)
    return e;
  return launch_pdl(fold ? kFold : kOne, dim3(unsigned(items)), dim3(C::kThreads), C::kSmem, s, pdl,
                    tx, tw[0], tw[1], tw[2], g, T, K, static_cast<int*>(ws), epi, out);
}

// n weights of the same K (resolved ksegs); ys[i] with row stride ldys[i]. cudaErrorNotSupported
// where T > 64 or a tensor map cannot be made (the caller runs another tiling).
template <int STAGES>
cudaError_t launch_tma_rows(const bf16_bits* x, int T, int n, const bf16_bits* const* w,
                            const int64_t* N, int K, float* const* ys, const int* ldys,
                            const int64_t* kseg, cudaStream_t s, void* ws, size_t ws_bytes, Epi epi,
                            bool pdl) {
  if (T > 64 || n < 1 || n > kMaxGroup) return cudaErrorNotSupported;
  return rows_tma_nt(T, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    CUtensorMap tx, tw[kMaxGroup];
    if (!bf16_tile_map(&tx, x, T, K, NT)) return cudaErrorNotSupported;
    RowsGroup g;
    g.n = n;
    int part_rows[kMaxGroup] = {};
    for (int i = 0; i < n; ++i) {
      if (!bf16_tile_map(&tw[i], w[i], N[i], K, 64)) return cudaErrorNotSupported;
      g.blocks[i] = int((N[i] + 63) / 64);
      g.N[i] = part_rows[i] = int(N[i]);
      const SegPlan sp = seg_plan(K, kseg[i], RowsTmaCfg<NT, STAGES>::kBK);
      g.segs[i] = sp.segs, g.seg_tiles[i] = sp.seg_tiles;
      g.y[i] = ys[i];
      g.ldy[i] = ldys[i];
    }
    for (int i = n; i < kMaxGroup; ++i) tw[i] = tw[0];
    return launch_rows_group<NT, STAGES, false>(tx, tw, g, part_rows,
                                                group_workspace_bytes(T, n, N, K, kseg), T, K, ws,
                                                ws_bytes, epi, nullptr, s, pdl);
  });
}

// The split-K workspace of matmul_tma_rows_kernel's SWIGLU form: counters, then the partials of
// the virtual weight of 64 rows a block (32 gate + 32 up columns), where the weights have segments.
size_t rows_swiglu_workspace_bytes(int64_t T, int64_t F, int64_t K, int64_t kseg) {
  const int64_t nv = (F + 31) / 32 * 64;
  return group_workspace_bytes(T, 1, &nv, K, &kseg);
}

// matmul_tma_rows_kernel's SWIGLU form: gate / up [F, K] (resolved kseg), out bf16 [T, ldo].
// Split-K as launch_tma_rows; else segments fold in registers.
template <int STAGES>
cudaError_t launch_tma_rows_swiglu(const bf16_bits* x, int T, const bf16_bits* wg,
                                   const bf16_bits* wu, int F, int K, bf16_bits* out, int ldo,
                                   int64_t kseg, cudaStream_t s, void* ws, size_t ws_bytes) {
  if (T > 64) return cudaErrorNotSupported;
  return rows_tma_nt(T, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    CUtensorMap tx, tw[kMaxGroup];
    if (!bf16_tile_map(&tx, x, T, K, NT) || !bf16_tile_map(&tw[0], wg, F, K, 32) ||
        !bf16_tile_map(&tw[1], wu, F, K, 32))
      return cudaErrorNotSupported;
    tw[2] = tw[0];
    RowsGroup g;
    g.n = 1;
    g.blocks[0] = (F + 31) / 32;
    g.N[0] = F;
    const SegPlan sp = seg_plan(K, kseg, RowsTmaCfg<NT, STAGES>::kBK);
    g.segs[0] = sp.segs, g.seg_tiles[0] = sp.seg_tiles;
    g.ldy[0] = ldo;
    const int part_rows[1] = {64 * g.blocks[0]};
    return launch_rows_group<NT, STAGES, true>(tx, tw, g, part_rows,
                                               rows_swiglu_workspace_bytes(T, F, K, kseg), T, K, ws,
                                               ws_bytes, Epi{}, out, s, true);
  });
}

// The grouped matmul of the MoE experts (kernels.h moe_matmul): the Rows16x32 tiling (16 rows ×
// BN columns, a warp per 8, segments folded in registers; k-stage BK with STAGES stages: 128 × 4 as
// Rows16x32, 256 × 6 as Rows16x32Deep) with each block's 16 rows gathered from a tile of
// (row, rank) pairs of one expert and the weight taken from that expert's pointer. Per output
// element the chain is exactly matmul_bf16's (same mma, same fragment layout, same k order, same
// segments and fold), so a pair's row has the bits of a T=1 matmul of that row with the
// expert's matrix. SWIGLU (moe_matmul_swiglu): the block copies the gate's BN rows and then the
// up's BN rows of its columns each stage, each warp runs both chains for its 8 columns (the same
// A fragments), and writes bf16(silu_mul(gate, up)), swiglu's bits, instead of two f32 products.
// BN: the block's columns (32, 4 warps; or 16, 2 warps: the SwiGLU form at decode, where 32-column
// blocks leave the SMs unevenly loaded: T = 1, 8 experts of qwen3-30b-a3b, 192 blocks of at most 2
// an SM on 132 SMs).
constexpr int kMoeBM = 16, kMoeBN = 32;
template <int BK, int STAGES, bool SWIGLU = false, int BN = kMoeBN>
struct MoeCfg {
  static constexpr int kLds = BK + 8;
  static constexpr int kThreads = 4 * BN;              // a warp per 8 columns
  static constexpr int kWRows = SWIGLU ? 2 * BN : BN;  // weight rows a stage
  static constexpr size_t kSmem = size_t(STAGES) * (kMoeBM + kWRows) * kLds * 2;
};

// The combine folded into the down product (moe_matmul_combine): counters null, none.
struct MoeCombine {
  const float* w = nullptr;  // [rows, top_k]
  float* out = nullptr;      // [rows, N]
  unsigned* counters = nullptr;
  int rows = 0, top_k = 0;
};
// Each block of column group blockIdx.y calls this once its y columns are written (or at once, for
// an unused tile); the last of the group's gridDim.x blocks to arrive writes out for its columns
// [n0, n0 + BN) in the combine's order. The fences and the atomic are CUDA's last-block pattern
// (threadFenceReduction); the other blocks' y is read through L2 (__ldcg).
__device__ __forceinline__ void moe_combine_arrive(const MoeCombine& c, const float* y, int N,
                                                   int n0, int BN) {
  if (!last_block_arrive(c.counters + blockIdx.y, gridDim.x, false)) return;
  const int cols = min(BN, N - n0);
  for (int idx = int(threadIdx.x); idx < c.rows * cols; idx += int(blockDim.x)) {
    const int t = idx / cols, i = n0 + idx % cols;
    float acc = 0.0f;
    for (int k = 0; k < c.top_k; ++k) {
      const int p = t * c.top_k + k;
      acc = __fadd_rn(acc, __fmul_rn(__ldcg(c.w + p), __ldcg(y + size_t(p) * N + i)));
    }
    c.out[size_t(t) * N + i] = acc;
  }
}

template <int kMoeBK, int kMoeStages, bool SWIGLU, int kMoeBN>
__global__ void __launch_bounds__(4 * kMoeBN)
    moe_matmul_kernel(const __nv_bfloat16* __restrict__ x, int row_div,
                      const __nv_bfloat16* const* __restrict__ w0,
                      const __nv_bfloat16* const* __restrict__ w1, float* __restrict__ y0,
                      float* __restrict__ y1, bf16_bits* __restrict__ act,
                      const int32_t* __restrict__ order, const int32_t* __restrict__ tiles,
                      int max_tiles, int N, int K, int kSegTiles, MoeCombine comb) {
  // Its weights come from the plan, written by a kernel: nothing is read before pdl_wait().
  pdl_wait();
  pdl_trigger();
  using Cfg = MoeCfg<kMoeBK, kMoeStages, SWIGLU, kMoeBN>;
  constexpr int kMoeLds = Cfg::kLds, kWRows = Cfg::kWRows, kMoeThreads = Cfg::kThreads;
  constexpr int kMats = SWIGLU ? 2 : 1;  // chains a warp runs: gate and up, or one
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* sa = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [STAGES][BM][kLds]
  auto* sb = sa + kMoeStages * kMoeBM * kMoeLds;          // [STAGES][kWRows][kLds]
  __shared__ int pair_of_row[kMoeBM];

  const int tile = blockIdx.x;
  const int rows = tiles[2 * max_tiles + tile];
  if (rows <= 0) {  // an unused tile (the grid is sized by T alone)
    if constexpr (!SWIGLU)
      if (comb.counters) moe_combine_arrive(comb, y0, N, int(blockIdx.y) * kMoeBN, kMoeBN);
    return;
  }
  const int expert = tiles[tile], first = tiles[max_tiles + tile];
  // Weight m of this block (SWIGLU: m = 0 gate, 1 up; else blockIdx.z picks w0 or w1).
  const __nv_bfloat16* __restrict__ wm[kMats];
  if constexpr (SWIGLU) {
    wm[0] = w0[expert];
    wm[kMats - 1] = w1[expert];
  } else {
    wm[0] = (blockIdx.z == 0 ? w0 : w1)[expert];
  }
  float* __restrict__ y = blockIdx.z == 0 ? y0 : y1;
  if (threadIdx.x < kMoeBM)
    pair_of_row[threadIdx.x] = int(threadIdx.x) < rows ? order[first + threadIdx.x] : -1;
  __syncthreads();

  const int n0 = blockIdx.y * kMoeBN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wn = warp * 8;  // each warp: the 16 rows × 8 columns at wn (of each matrix)
  const int KT = (K + kMoeBK - 1) / kMoeBK;

  // As matmul_bf16: each thread's chunks at rows cr0 + i·kStep, column ckc of every stage,
  // addresses computed once; x rows without a pair (r >= rows) are zeroed once, never loaded.
  constexpr int kChunksRow = kMoeBK / 8;
  static_assert(kMoeThreads % kChunksRow == 0 && (kMoeBN * kChunksRow) % kMoeThreads == 0 &&
                    (kMoeBM * kChunksRow) % kMoeThreads == 0,
                "copies");
  constexpr int kStep = kMoeThreads / kChunksRow, kWPer = kMoeBN * kChunksRow / kMoeThreads,
                kXPer = kMoeBM * kChunksRow / kMoeThreads;
  const int cr0 = threadIdx.x / kChunksRow, ckc = (threadIdx.x % kChunksRow) * 8;
  const __nv_bfloat16* wsrc[kMats];
#pragma unroll
  for (int m = 0; m < kMats; ++m) wsrc[m] = wm[m] + size_t(min(n0 + cr0, N - 1)) * K + ckc;
  uint32_t wmask = 0;
#pragma unroll
  for (int i = 0; i < kWPer; ++i) wmask |= uint32_t(n0 + cr0 + i * kStep < N) << i;
  const __nv_bfloat16* xsrc[kXPer];
  uint32_t xmask = 0;
#pragma unroll
  for (int i = 0; i < kXPer; ++i) {
    const int p = pair_of_row[cr0 + i * kStep];
    xmask |= uint32_t(p >= 0) << i;
    xsrc[i] = x + size_t(p >= 0 ? p / row_div : 0) * K + ckc;
  }
  const uint32_t wdst = smem_addr(sb) + uint32_t((cr0 * kMoeLds + ckc) * 2);
  const uint32_t xdst = smem_addr(sa) + uint32_t((cr0 * kMoeLds + ckc) * 2);
  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kMoeBK;
    const bool col_ok = k0 + ckc < K;
    const uint32_t dx = xdst + uint32_t(stage * kMoeBM * kMoeLds * 2);
#pragma unroll
    for (int i = 0; i < kXPer; ++i)
      if (xmask >> i & 1u)
        cp_async16_s(dx + uint32_t(i * kStep * kMoeLds * 2), col_ok ? xsrc[i] + k0 : x,
                     col_ok ? 16 : 0);
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      const uint32_t dw = wdst + uint32_t((stage * kWRows + m * kMoeBN) * kMoeLds * 2);
#pragma unroll
      for (int i = 0; i < kWPer; ++i) {
        const bool ok = col_ok && (wmask >> i & 1u);
        cp_async16_s(dw + uint32_t(i * kStep * kMoeLds * 2),
                     ok ? wsrc[m] + k0 + size_t(i) * kStep * K : wm[m], ok ? 16 : 0);
      }
    }
  };

  float acc[kMats][4], tot[kMats][4];
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[m][e] = tot[m][e] = 0.0f;
#pragma unroll
  for (int st = 0; st < kMoeStages - 1; ++st) {
    if (st < KT) load_stage(st, st);
    cp_async_commit();
  }
  for (int c = rows * kChunksRow + int(threadIdx.x); c < kMoeBM * kChunksRow; c += kMoeThreads)
#pragma unroll
    for (int st = 0; st < kMoeStages; ++st)
      *reinterpret_cast<uint4*>(sa + (st * kMoeBM + c / kChunksRow) * kMoeLds +
                                (c % kChunksRow) * 8) = make_uint4(0, 0, 0, 0);
  int seg_pos = 0;
  bool seg0 = true;
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kMoeStages - 2>();
    __syncthreads();
    if (kt + kMoeStages - 1 < KT)
      load_stage((kt + kMoeStages - 1) % kMoeStages, kt + kMoeStages - 1);
    cp_async_commit();
    const __nv_bfloat16* ta = sa + (kt % kMoeStages) * kMoeBM * kMoeLds;
    const __nv_bfloat16* tb = sb + (kt % kMoeStages) * kWRows * kMoeLds;
#pragma unroll
    for (int kk = 0; kk < kMoeBK; kk += 16) {
      uint32_t af[4];
      ldmatrix_x4(af, ta + (lane & 15) * kMoeLds + kk + (lane >> 4) * 8);
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        uint32_t bfr[2];
        ldmatrix_x2(bfr,
                    tb + (m * kMoeBN + wn + (lane & 7)) * kMoeLds + kk + ((lane >> 3) & 1) * 8);
        mma_bf16(acc[m], af, bfr[0], bfr[1]);
      }
    }
    if (++seg_pos == kSegTiles || kt + 1 == KT) {  // end of a segment: fold, restart
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          tot[m][e] = seg0 ? acc[m][e] : __fadd_rn(tot[m][e], acc[m][e]);
          acc[m][e] = 0.0f;
        }
      seg0 = false;
      seg_pos = 0;
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int r = (lane >> 2) + (e >> 1) * 8, c = n0 + wn + (lane & 3) * 2 + (e & 1);
    if (r < rows && c < N) {
      const size_t o = size_t(pair_of_row[r]) * N + c;
      if constexpr (SWIGLU)
        act[o] = to_bf(silu_mul(tot[0][e], tot[kMats - 1][e]));
      else
        y[o] = tot[0][e];
    }
  }
  if constexpr (!SWIGLU)
    if (comb.counters) moe_combine_arrive(comb, y0, N, n0, kMoeBN);
}

template <int BK, int STAGES, bool SWIGLU, int BN = kMoeBN>
cudaError_t launch_moe(const bf16_bits* x, int64_t row_div, const bf16_bits* const* w0,
                       const bf16_bits* const* w1, int64_t N, int64_t K, float* y0, float* y1,
                       bf16_bits* act, const int32_t* order, const int32_t* tiles,
                       int64_t max_tiles, cudaStream_t s, const MoeCombine& comb) {
  auto* kern = moe_matmul_kernel<BK, STAGES, SWIGLU, BN>;
  using Cfg = MoeCfg<BK, STAGES, SWIGLU, BN>;
  constexpr size_t smem = Cfg::kSmem;
  static_assert(smem <= 227 * 1024, "a block's shared memory");
  if (const cudaError_t e = allow_smem<moe_matmul_kernel<BK, STAGES, SWIGLU, BN>>(smem);
      e != cudaSuccess)
    return e;
  // matmul_bf16's segments for this weight shape, in k-stages of BK (kseg is a multiple of 256).
  const int64_t kseg = matmul_kseg(N, K);
  const int seg_tiles = seg_plan(K, kseg, BK).seg_tiles;
  const dim3 grid(unsigned(max_tiles), unsigned((N + BN - 1) / BN), !SWIGLU && w1 ? 2u : 1u);
  // Decode-sized plans launch with PDL (the kernel is resident when the plan's kernel ends).
  return launch_pdl(kern, grid, dim3(Cfg::kThreads), smem, s,
                    pdl_small(kPdlSmallMoeMatmul, max_tiles <= 256),
                    reinterpret_cast<const __nv_bfloat16*>(x), int(row_div),
                    reinterpret_cast<const __nv_bfloat16* const*>(w0),
                    reinterpret_cast<const __nv_bfloat16* const*>(w1), y0, y1, act, order, tiles,
                    int(max_tiles), int(N), int(K), seg_tiles, comb);
}

// A tiling choice only: every variant gives the same bits (tests/gpu). Measured
// (bench_cuda_kernels, µs; bench/RESULTS.md; first on an H100, 2026-12-05):
// - T <= 16 (decode): RowsTMA (T = 1, split-K with the workspace: 14336 x 4096 45.6 against the
//   best cp.async tiling's 50.2, 4096 x 14336 48.4 against 50.0, 4096 x 4096 20.5 against 20.4;
//   T = 16: 48.1 / 58.4 / 23.2 against 56.6 / 54.9 / 23.1).
// - 17-64 rows (serving batches): RowsTMA, segments folded in registers (T = 32 / 64: 4096 x 4096
//   23.1 / 25.1 against TileTMA64's 29.8 / 30.4 and TileWG64's 38.1 / 41.4; 14336 x 4096 47.6 /
//   50.1 against 49.1 / 50.4; 4096 x 14336 58.5 / 62.7 against 79.8 / 80.1; its split-K blocks
//   were slower there: 30.0 / 40.3 on 4096 x 4096); except 33-64 rows over weights of at most
//   8192 rows: TileTMA64's pipeline with 32-row W boxes (2026-12-06, below).
// - T > 64 (prefill): TileTMA (T = 512 / 2048, TFLOP/s: 441 / 512 on 4096 x 4096, 480 / 549 on
//   14336 x 4096, 562 / 568 on 4096 x 14336, against TileWG / TileWG2's 191-308).
// The cp.async tilings stay as variants (and as the fallback).
// full_n: the N of the whole weight (a launch over a block of its rows chooses as the whole
// would).
cudaError_t dispatch_bf16(const bf16_bits* x, int T, const bf16_bits* w, int N, int K, float* y,
                          cudaStream_t s, MatmulKernel kernel, void* workspace,
                          size_t workspace_bytes, int64_t kseg, int ldy, int64_t full_n,
                          Epi epi = {}, bool pdl = true) {
  if (kernel == MatmulKernel::Auto) {
    // 33-64 rows over weights of at most 8192 rows (full_n: a block of a weight's rows chooses
    // as the whole weight), whose 64-row RowsTMA blocks leave SMs idle
    // (64 blocks of 4096 rows on 132 SMs): TileTMA64's pipeline with the tokens in wgmma's A and
    // boxes of 32 weight rows in B, 128 blocks (H100, T = 64: 4096 x 4096 20.9 against 24.2 us,
    // 4096 x 14336 53.7 against 62.3; at T = 32 it lost, 23.9 against 22.1 and 68.4 against
    // 58.1). The same chain and fold as every wgmma tiling: the same bits.
    if (T > 32 && T <= 64 && full_n <= 8192)
      if (const cudaError_t e = launch_tma<1, 32, 8>(x, T, w, N, K, y, s, kseg, ldy, epi, pdl);
          e != cudaErrorNotSupported)
        return e;
    kernel = T > 64 ? MatmulKernel::TileTMA : MatmulKernel::RowsTMA;
  }
  switch (kernel) {
    case MatmulKernel::Rows16x16:
      return launch<16, 16, 256, 1, 2, 4>(x, T, w, N, K, y, s, workspace, workspace_bytes, kseg,
                                          ldy, epi, pdl);
    case MatmulKernel::Rows16x32Deep:
      return launch<16, 32, 256, 1, 4, 6>(x, T, w, N, K, y, s, workspace, workspace_bytes, kseg,
                                          ldy, epi, pdl);
    case MatmulKernel::Tile128:
      return launch<128, 128, 32, 2, 4, 4>(x, T, w, N, K, y, s, nullptr, 0, kseg, ldy, epi, pdl);
    case MatmulKernel::Tile128K64:
      return launch<128, 128, 64, 2, 4, 3>(x, T, w, N, K, y, s, nullptr, 0, kseg, ldy, epi, pdl);
    case MatmulKernel::TileWG:
      return launch_wg<2, 128, 5>(x, T, w, N, K, y, s, nullptr, 0, kseg, ldy, epi, pdl);
    case MatmulKernel::TileTMAP:
      if (const cudaError_t e =
              launch_tma_persistent<2, 128, 6>(x, T, w, N, K, y, s, kseg, ldy, epi, pdl);
          e != cudaErrorNotSupported)
        return e;
      return launch_wg<2, 128, 3>(x, T, w, N, K, y, s, nullptr, 0, kseg, ldy, epi, pdl);
    case MatmulKernel::TileTMA256:
      if (const cudaError_t e = launch_tma<2, 256, 4>(x, T, w, N, K, y, s, kseg, ldy, epi, pdl);
          e != cudaErrorNotSupported)
        return e;
      [[fallthrough]];
    case MatmulKernel::TileTMA:
      if (const cudaError_t e = launch_tma<2, 128, 6>(x, T, w, N, K, y, s, kseg, ldy, epi, pdl);
          e != cudaErrorNotSupported)
        return e;
      [[fallthrough]];
    case MatmulKernel::TileWG2:
      return launch_wg<2, 128, 3>(x, T, w, N, K, y, s, nullptr, 0, kseg, ldy, epi, pdl);
    case MatmulKernel::TileTMA64:
      if (const cudaError_t e = launch_tma<1, 128, 4>(x, T, w, N, K, y, s, kseg, ldy, epi, pdl);
          e != cudaErrorNotSupported)
        return e;
      [[fallthrough]];
    case MatmulKernel::TileWG64:
      return launch_wg<1, 64, 6>(x, T, w, N, K, y, s, workspace, workspace_bytes, kseg, ldy, epi,
                                 pdl);
    case MatmulKernel::RowsTMA: {
      const int64_t n64 = N;
      if (const cudaError_t e = launch_tma_rows<6>(x, T, 1, &w, &n64, K, &y, &ldy, &kseg, s,
                                                   workspace, workspace_bytes, epi, pdl);
          e != cudaErrorNotSupported)
        return e;
      [[fallthrough]];
    }
    case MatmulKernel::Rows16x32:
    default:
      return launch<16, 32, 128, 1, 4, 4>(x, T, w, N, K, y, s, workspace, workspace_bytes, kseg,
                                          ldy, epi, pdl);
  }
}

}  // namespace

cudaError_t matmul_bf16(const bf16_bits* x, int64_t T, const bf16_bits* w, int64_t N, int64_t K,
                        float* y, cudaStream_t s, MatmulKernel kernel, void* workspace,
                        size_t workspace_bytes, int64_t kseg) {
  if (T < 0 || N <= 0 || K <= 0 || K % 8 || T > 0x7fffffff || N > 0x7fffffff || K > 0x7fffffff ||
      (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16)
    return cudaErrorInvalidValue;
  kseg = resolve_kseg(N, K, kseg);
  if (kseg <= 0) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  return dispatch_bf16(x, int(T), w, int(N), int(K), y, s, kernel, workspace, workspace_bytes, kseg,
                       int(N), N);
}

cudaError_t matmul_bf16_swiglu(const bf16_bits* x, int64_t T, const bf16_bits* w_gate,
                               const bf16_bits* w_up, int64_t F, int64_t K, bf16_bits* out,
                               cudaStream_t s, int64_t kseg, MatmulKernel kernel, void* workspace,
                               size_t workspace_bytes) {
  if (T < 0 || F <= 0 || K <= 0 || K % 8 || T > 0x7fffffff || F > 0x7fffffff || K > 0x7fffffff ||
      (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w_gate) |
       reinterpret_cast<uintptr_t>(w_up)) %
          16)
    return cudaErrorInvalidValue;
  kseg = resolve_kseg(F, K, kseg);
  if (kseg <= 0) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  // Up to 64 rows (decode, serving batches): RowsTMA's blocks of 32 gate + 32 up columns.
  if (T <= 64 && (kernel == MatmulKernel::Auto || kernel == MatmulKernel::RowsTMA)) {
    return launch_tma_rows_swiglu<6>(x, int(T), w_gate, w_up, int(F), int(K), out, int(F), kseg, s,
                                     workspace, workspace_bytes);
  }
  if (kernel == MatmulKernel::RowsTMA) return cudaErrorNotSupported;
  // Auto takes TileTMA256's blocks where the weights are one segment (gate / up of
  // llama-3.1-8b, H100 T = 2,048: 704 against 876 µs, 684 against 549 TFLOP/s), else TileTMA's.
  if (kernel == MatmulKernel::TileTMA256 || (kernel == MatmulKernel::Auto && kseg >= K))
    if (const cudaError_t e = launch_tma_swiglu<256, 4>(x, int(T), w_gate, w_up, int(F), int(K),
                                                        out, int(F), s, kseg);
        e != cudaErrorNotSupported)
      return e;
  if (kernel != MatmulKernel::Auto && kernel != MatmulKernel::TileTMA &&
      kernel != MatmulKernel::TileTMA256)
    return cudaErrorNotSupported;
  return launch_tma_swiglu<128, 6>(x, int(T), w_gate, w_up, int(F), int(K), out, int(F), s, kseg);
}

size_t matmul_swiglu_workspace_bytes(int64_t T, int64_t F, int64_t K, int64_t kseg) {
  kseg = resolve_kseg(F, K, kseg);
  return kseg > 0 ? rows_swiglu_workspace_bytes(T, F, K, kseg) : 0;
}

size_t matmul_group_workspace_bytes(int64_t T, int n, const int64_t* N, int64_t K,
                                    const int64_t* kseg) {
  int64_t ks[kMaxGroup];
  if (n < 1 || n > kMaxGroup) return 0;
  for (int i = 0; i < n; ++i) {
    ks[i] = resolve_kseg(N[i], K, kseg ? kseg[i] : 0);
    if (ks[i] <= 0) return 0;
  }
  return group_workspace_bytes(T, n, N, K, ks);
}

cudaError_t matmul_bf16_group(const bf16_bits* x, int64_t T, int n, const bf16_bits* const* w,
                              const int64_t* N, int64_t K, float* const* y, const int64_t* kseg,
                              cudaStream_t s, void* workspace, size_t workspace_bytes) {
  if (n < 1 || n > kMaxGroup || T < 0 || K <= 0 || K % 8 || K > 0x7fffffff ||
      reinterpret_cast<uintptr_t>(x) % 16)
    return cudaErrorInvalidValue;
  int64_t ks[kMaxGroup];
  int ldy[kMaxGroup];
  for (int i = 0; i < n; ++i) {
    if (N[i] <= 0 || N[i] > 0x7fffffff || reinterpret_cast<uintptr_t>(w[i]) % 16)
      return cudaErrorInvalidValue;
    ks[i] = resolve_kseg(N[i], K, kseg ? kseg[i] : 0);
    if (ks[i] <= 0) return cudaErrorInvalidValue;
    ldy[i] = int(N[i]);
  }
  if (T == 0) return cudaSuccess;
  return launch_tma_rows<6>(x, int(T), n, w, N, int(K), y, ldy, ks, s, workspace, workspace_bytes,
                            Epi{}, true);
}

namespace {
bool moe_matmul_args_ok(const bf16_bits* x, int64_t row_div, int64_t N, int64_t K,
                        int64_t max_tiles) {
  return row_div > 0 && N > 0 && K > 0 && K % 8 == 0 && N <= 0x7fffffff && K <= 0x7fffffff &&
         max_tiles >= 0 && max_tiles <= 0x7fffffff && (N + kMoeBN - 1) / kMoeBN <= 65535 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

// The tiling's instance: both give the same chain, so the choice never changes a bit (Deep
// measured slower on the H200 for T = 1 .. 2048: it is not the default). Deep's SwiGLU form runs
// 4 stages: 6 of twice the weight rows would pass 227 KB.
template <bool SWIGLU>
cudaError_t launch_moe_tiling(const bf16_bits* x, int64_t row_div, const bf16_bits* const* w0,
                              const bf16_bits* const* w1, int64_t N, int64_t K, float* y0,
                              float* y1, bf16_bits* act, const int32_t* order, const int32_t* tiles,
                              int64_t max_tiles, cudaStream_t s, MatmulKernel kernel,
                              const MoeCombine& comb = {}) {
  if (max_tiles == 0) return cudaSuccess;
  constexpr int kDeepStages = SWIGLU ? 4 : 6;
  if (kernel == MatmulKernel::Rows16x32Deep)
    return launch_moe<256, kDeepStages, SWIGLU>(x, row_div, w0, w1, N, K, y0, y1, act, order, tiles,
                                                max_tiles, s, comb);
  // Fewer 32-column SwiGLU blocks than two an SM (decode): 16-column blocks, the load spread
  // evenly (the same chains: a block's width changes no element's).
  if (SWIGLU && max_tiles * ((N + kMoeBN - 1) / kMoeBN) < 2 * int64_t(sm_count()))
    return launch_moe<128, 4, SWIGLU, 16>(x, row_div, w0, w1, N, K, y0, y1, act, order, tiles,
                                          max_tiles, s, comb);
  return launch_moe<128, 4, SWIGLU>(x, row_div, w0, w1, N, K, y0, y1, act, order, tiles, max_tiles,
                                    s, comb);
}
}  // namespace

cudaError_t moe_matmul(const bf16_bits* x, int64_t row_div, const bf16_bits* const* w0,
                       const bf16_bits* const* w1, int64_t N, int64_t K, float* y0, float* y1,
                       const int32_t* order, const int32_t* tiles, int64_t max_tiles,
                       cudaStream_t s, MatmulKernel kernel) {
  if (!moe_matmul_args_ok(x, row_div, N, K, max_tiles) || !w0 || !y0 || (w1 && !y1))
    return cudaErrorInvalidValue;
  return launch_moe_tiling<false>(x, row_div, w0, w1, N, K, y0, y1, nullptr, order, tiles,
                                  max_tiles, s, kernel);
}

cudaError_t moe_matmul_combine(const bf16_bits* x, const bf16_bits* const* w, int64_t N, int64_t K,
                               float* y, const int32_t* order, const int32_t* tiles,
                               int64_t max_tiles, const float* weights, int64_t rows, int64_t top_k,
                               unsigned* counters, float* out, cudaStream_t s,
                               MatmulKernel kernel) {
  if (!moe_matmul_args_ok(x, 1, N, K, max_tiles) || !w || !y || !weights || !counters || !out ||
      rows <= 0 || top_k <= 0 || rows * top_k > 0x7fffffff || rows * N > 0x7fffffff)
    return cudaErrorInvalidValue;
  MoeCombine comb;
  comb.w = weights, comb.out = out, comb.counters = counters;
  comb.rows = int(rows), comb.top_k = int(top_k);
  return launch_moe_tiling<false>(x, 1, w, nullptr, N, K, y, nullptr, nullptr, order, tiles,
                                  max_tiles, s, kernel, comb);
}

cudaError_t moe_matmul_swiglu(const bf16_bits* x, int64_t row_div, const bf16_bits* const* gate,
                              const bf16_bits* const* up, int64_t N, int64_t K, bf16_bits* act,
                              const int32_t* order, const int32_t* tiles, int64_t max_tiles,
                              cudaStream_t s, MatmulKernel kernel) {
  if (!moe_matmul_args_ok(x, row_div, N, K, max_tiles) || !gate || !up || !act)
    return cudaErrorInvalidValue;
  return launch_moe_tiling<true>(x, row_div, gate, up, N, K, nullptr, nullptr, act, order, tiles,
                                 max_tiles, s, kernel);
}

// --- scaled weights (NVFP4, FP8 E4M3): kernels.h matmul_scaled ------------------------------
//
// Exactness: y[t, n] = factor(n) · c(t, n), where c is exactly matmul_bf16's chain (same mma,
// same operand positions, same k order, the same segments (the call's kseg) and fold) over the
// bf16 matrix of inner values, and factor(n) multiplies the final sum once in f32
// (ops/ref/scaled.h has the split):
//   NVFP4        inner = e2m1 · e4m3(S): exact in bf16 (<= 6 significant bits, magnitudes
//                2^-10 .. 2688), factor = scale
//   FP8          inner = e4m3 (exact in bf16), factor = scale, or rows[n] · scale (per row)
//   FP8 blocks   inner = bf16_rn(f32(e4m3 · s_block)): one f32 multiply, then round to nearest
//                even to bf16. The CPU keeps the f32 product; CUDA rounds it once more, as it
//                rounds activations to bf16. factor = scale.
// Two paths compute it: the fused decode kernel (T <= 64) turns codes into inner values in
// registers right before each mma, and the dequant path writes the inner values as a bf16
// matrix into a scratch buffer and runs matmul_bf16's tilings on it with the factor in their
// epilogue (Epi). Both equal matmul_bf16(x, inner) · factor bit for bit, so decode, prefill and
// verification passes agree (tests/gpu checks both against that host-computable reference).
//
// Conversions (each exact; the same functions on both paths):
//   E4M3 pair -> bf16x2: code bits b placed as bf16 bits (b & 0x80) << 8 | (b & 0x7f) << 4 are
//     the value · 2^-120 (exponent field 0: E4M3 subnormals land on bf16 subnormals), then one
//     bf16x2 multiply by 2^120 (bf16 arithmetic keeps subnormals). The NaN codes 0x7f / 0xff
//     come out as ±480, not NaN (no quantiser writes them).
//   E2M1 pair (one byte, low nibble first) -> bf16x2 of e2m1(lo), e2m1(hi): a 256-entry table
//     in shared memory (the fused kernel) or arithmetic (the dequant kernel), then a bf16x2
//     multiply by the group's E4M3 scale (exact: the product fits bf16).
namespace {

enum class SFmt : int { NVFP4 = 0, FP8 = 1, FP8B = 2 };

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t lds32(const void* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// t: two E4M3 codes in bytes 0 and 2, zeros in bytes 1 and 3 -> their values as bf16x2 (byte 0
// in the low half). (t << 4) leaves each sign at bit 11; adding 0x7800 when it is set moves it
// to bit 15 (0x800 + 0x7800 = 0x8000), never carrying out of the half.
__device__ __forceinline__ uint32_t e4m3x2_bf16x2(uint32_t t) {
  const uint32_t bits = (t << 4) + (t & 0x00800080u) * 0xF0u;
  return bf16x2_mul(bits, 0x7B807B80u);  // × 2^120 (bf16 0x7B80)
}
// bf16 bits of e2m1(code & 15): 0, 0.5 (0x3F00), else (126 + e) << 7 | mantissa << 6.
__device__ __forceinline__ uint32_t e2m1_bf16(uint32_t code) {
  const uint32_t m = code & 7u;
  const uint32_t mag = m < 2 ? m * 0x3F00u : ((126u + (m >> 1)) << 7) | ((m & 1u) << 6);
  return mag | (code & 8u) << 12;
}
__device__ __forceinline__ uint32_t e2m1x2_bf16x2(uint32_t byte) {
  return e2m1_bf16(byte) | e2m1_bf16(byte >> 4) << 16;
}
// FP8 blocks: bf16_rn(f32(v) · s) for each half of a bf16x2 of E4M3 values.
__device__ __forceinline__ uint32_t scale_pair(uint32_t e, float s_lo, float s_hi) {
  const float lo = __fmul_rn(__uint_as_float(e << 16), s_lo);
  const float hi = __fmul_rn(__uint_as_float(e & 0xFFFF0000u), s_hi);
  const __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&r);
}

struct ScaledArgs {
  const __nv_bfloat16* x = nullptr;
  const uint8_t* q = nullptr;  // codes
  const void* sc = nullptr;    // NVFP4: E4M3 group scales [N, K/16]; FP8B: the f32 block grid
  Epi epi;                     // the column factor (always on)
  int T = 0, N = 0, K = 0;
  int blk = 0, kb = 0;  // FP8B: B and ceil(K / B)
  int seg_stages = 0;   // k-stages per segment
  float* y = nullptr;
  float* part = nullptr;  // split mode: the bf16 kernels' workspace layout (counters, partials)
  int* counters = nullptr;
};

// The fused decode kernel. A block is 64 weight rows × all of K (segments folded in registers)
// or × one segment (split mode: the tile's last block adds the partials in segment order, as
// matmul_bf16). Its 8 / NT warps each own NT n8 tiles (8·NT weight rows) × MT = ceil(MR / 2)
// m16 tiles of x rows (T <= 8·MR): NT = 1 up to T = 16 (a warp's serial instruction stream
// sets the time when a shape has one wave of blocks, so rows are spread over as many warps as
// possible), NT = 2 above (the x fragments are shared by two tiles). Per k-stage of BK:
// cp.async brings the raw codes (and NVFP4's group scales) and the T rows of x into shared
// memory, STAGES - 1 stages in flight, 2-4 blocks an SM; each thread's copy addresses are
// computed once. Each lane then builds its mma B fragment from the codes of exactly the
// elements ldmatrix gives it in the bf16 layout (weight row lane / 4 of the n8 tile; for the
// k16 slice at k0: k0 + 2q, +1 and k0 + 8 + 2q, +1, q = lane % 4), and its A fragment with
// 32-bit shared loads of the positions ldmatrix reads; rows >= T (never stored) read a zero
// row, so no load is conditional. Within a stage, the shared loads of the next kChunk slices
// are issued before the current ones are converted and multiplied.
constexpr int kSBN = 64;

template <SFmt F, int BK>
struct SCfg {
  static constexpr int kRowBytes = F == SFmt::NVFP4 ? BK / 2 : BK;  // a row's codes per stage
  // Row strides ≡ 16 mod 128 bytes (or a permutation of the 8 bank groups): the 8 rows a warp
  // reads at once hit different banks.
  static constexpr int kDataLd = kRowBytes + 16;
  // BK/16 scale bytes a row, padded (row strides of 3 or 5 16-byte chunks spread the 8 rows)
  static constexpr int kScLd = F == SFmt::NVFP4 ? (BK <= 512 ? 48 : BK / 16 + 16) : 0;
  static constexpr int kXLd = BK + 8;  // bf16 elements (as MmCfg::kLds)
  static constexpr int kLutBytes = F == SFmt::NVFP4 ? 256 * 32 * 4 : 0;
  static constexpr int kZeroBytes = kXLd * 2;                     // the zero row of x
  static constexpr int kWScale = F == SFmt::NVFP4 ? BK / 64 : 1;  // 32-bit scale words a row
  static constexpr int kXOff = kSBN * (kDataLd + kScLd);          // x's offset in a stage
  static_assert(kXOff % 16 == 0 && kZeroBytes % 16 == 0 && BK % 128 == 0 && BK <= 1024,
                "stage layout");
  __host__ __device__ static size_t stage_bytes(int T) {
    return size_t(kXOff) + size_t(T) * kXLd * 2;
  }
  static size_t smem(int T, int stages) {
    return kLutBytes + kZeroBytes + size_t(stages) * stage_bytes(T);
  }
};

// 4-byte cp.async to a shared-space address (cp.async.ca: sizes below 16 go through L1; the
// 16-byte cp_async16_s above goes through L2 only); src_bytes = 0 writes zeros.
__device__ __forceinline__ void cp_async4_s(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

template <SFmt F, int MR, int NT, int BK, int STAGES>
__global__ void __launch_bounds__(256 / NT) matmul_scaled_kernel(const ScaledArgs a) {
  using C = SCfg<F, BK>;
  constexpr int kThreads = 256 / NT;
  constexpr int MT = (MR + 1) / 2;
  constexpr int kSteps = BK / 16;
  constexpr int kChunk = MT >= 4 ? 2 : 4;  // k16 slices per register chunk
  constexpr int kChunks = kSteps / kChunk;
  static_assert(kSteps % kChunk == 0 && (F != SFmt::NVFP4 || kChunk % 2 == 0), "chunks");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int T = a.T, N = a.N, K = a.K;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, qd = lane & 3;
  const int n0 = int(blockIdx.x) * kSBN;
  const int rw = warp * 8 * NT + g;  // this lane's weight rows in the block: rw + 8j, j < NT
  const size_t stage_bytes = C::stage_bytes(T);
  const __nv_bfloat16* const zrow = reinterpret_cast<const __nv_bfloat16*>(smem_raw + C::kLutBytes);
  unsigned char* const st0 = smem_raw + C::kLutBytes + C::kZeroBytes;
  const uint32_t st0_s = smem_addr(st0);
  const int row_bytes = F == SFmt::NVFP4 ? K / 2 : K;
  const int KT_all = (K + BK - 1) / BK;
  const bool split = gridDim.z > 1;  // split mode: this block runs segment blockIdx.z only
  const int kt0 = split ? int(blockIdx.z) * a.seg_stages : 0;
  const int KT = split ? min(KT_all - kt0, a.seg_stages) : KT_all;

  // This thread's share of a stage's copies: code chunks of 16 bytes at rows cr0 + i·kCStep,
  // byte ck of the stage's part of the row; NVFP4 scale chunks of 4 bytes likewise.
  constexpr int kRowChunks = C::kRowBytes / 16;  // rows are whole 16-byte chunks
  static_assert(kThreads % kRowChunks == 0 && (kSBN * kRowChunks) % kThreads == 0, "copies");
  constexpr int kCStep = kThreads / kRowChunks, kCPer = kSBN * kRowChunks / kThreads;
  const int cr0 = tid / kRowChunks, ck = (tid % kRowChunks) * 16;
  const uint8_t* const csrc = a.q + size_t(min(n0 + cr0, N - 1)) * row_bytes + ck;
  const size_t cstride = size_t(kCStep) * row_bytes;
  uint32_t cmask = 0;  // rows that exist
#pragma unroll
  for (int i = 0; i < kCPer; ++i) cmask |= uint32_t(n0 + cr0 + i * kCStep < N) << i;
  constexpr int kScChunks = F == SFmt::NVFP4 ? BK / 64 : 1;  // 4-byte scale chunks a row
  constexpr int kSStep = kThreads / kScChunks, kSPer = (kSBN * kScChunks + kThreads - 1) / kThreads;
  const int sr0 = tid / kScChunks, sk = (tid % kScChunks) * 4;
  const int groups = K / 16;
  const uint8_t* const ssrc = static_cast<const uint8_t*>(a.sc) +
                              (F == SFmt::NVFP4 ? size_t(min(n0 + sr0, N - 1)) * groups + sk : 0);
  const size_t sstride = size_t(kSStep) * groups;
  uint32_t smask = 0;
#pragma unroll
  for (int i = 0; i < kSPer; ++i)
    smask |= uint32_t(sr0 + i * kSStep < kSBN && n0 + sr0 + i * kSStep < N) << i;

  auto load_w = [&](int stage, int kt) {  // codes and group scales
    const uint32_t sd = st0_s + uint32_t(size_t(stage) * stage_bytes);
    const int k0 = (kt0 + kt) * BK;
    const int cb0 = F == SFmt::NVFP4 ? k0 / 2 : k0;  // the stage's first code byte in a row
    const bool col_ok = cb0 + ck < row_bytes;
    const uint8_t* src = csrc + cb0;
#pragma unroll
    for (int i = 0; i < kCPer; ++i) {
      const bool ok = col_ok && (cmask >> i & 1u);
      cp_async16_s(sd + uint32_t((cr0 + i * kCStep) * C::kDataLd + ck),
                   ok ? src + i * cstride : a.q, ok ? 16 : 0);
    }
    if constexpr (F == SFmt::NVFP4) {  // group scales, 4 at a time (K % 64 == 0)
      const int gs0 = k0 / 16;
      const bool gok = gs0 + sk < groups;
      const uint8_t* ssp = ssrc + gs0;
#pragma unroll
      for (int i = 0; i < kSPer; ++i)
        if (sr0 + i * kSStep < kSBN) {  // (uniform per thread and i)
          const bool ok = gok && (smask >> i & 1u);
          cp_async4_s(sd + uint32_t(kSBN * C::kDataLd + (sr0 + i * kSStep) * C::kScLd + sk),
                      ok ? ssp + i * sstride : a.q, ok ? 4 : 0);
        }
    }
  };
  auto load_x = [&](int stage, int kt) {
    const uint32_t sd = st0_s + uint32_t(size_t(stage) * stage_bytes);
    const int k0 = (kt0 + kt) * BK;
    constexpr int kXChunks = BK / 8;
    const uint32_t sx = sd + uint32_t(C::kXOff);
    for (int c = tid; c < T * kXChunks; c += kThreads) {
      const int r = c / kXChunks, kc = (c % kXChunks) * 8;
      const bool ok = k0 + kc < K;
      cp_async16_s(sx + uint32_t((r * C::kXLd + kc) * 2), ok ? a.x + size_t(r) * K + k0 + kc : a.x,
                   ok ? 16 : 0);
    }
  };
  auto load_stage = [&](int stage, int kt) {
    load_x(stage, kt);
    load_w(stage, kt);
  };

  float acc[MT][NT][4], tot[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = tot[i][j][e] = 0.0f;

  // As matmul_bf16: the first stages' codes and scales before waiting for the previous kernel
  // (pdl.cuh), x after.
  pdl_trigger();
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st)
    if (st < KT) load_w(st, st);
  pdl_wait();
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < KT) load_x(st, st);
    cp_async_commit();
  }
  // While the first stages are in flight: the zero row, and NVFP4's E2M1 pair table (entry e,
  // a code byte, at e·128 bytes, one copy per lane at lane·4: a warp's 32 lookups never share
  // a bank). The loop's first barrier publishes both.
  for (int c = tid; c < C::kZeroBytes / 16; c += kThreads)
    reinterpret_cast<uint4*>(smem_raw + C::kLutBytes)[c] = make_uint4(0, 0, 0, 0);
  if constexpr (F == SFmt::NVFP4) {
    uint4* lut = reinterpret_cast<uint4*>(smem_raw);
    for (int c = tid; c < 256 * 8; c += kThreads) {
      const uint32_t v = e2m1x2_bf16x2(uint32_t(c >> 3));
      lut[c] = make_uint4(v, v, v, v);
    }
  }
  // FP8 blocks: each of this lane's rows' block row in the scale grid (B % BK == 0, so a stage
  // lies in one block column).
  const float* bgrid = static_cast<const float*>(a.sc);
  int brow[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j)
    brow[j] = F == SFmt::FP8B ? (min(n0 + rw + 8 * j, N - 1) / a.blk) * a.kb : 0;

  const uint32_t selq = 0x4440u | uint32_t(qd);        // NVFP4: byte q, zero-extended
  const uint32_t selh = (qd & 1) ? 0x4342u : 0x4140u;  // FP8: half q & 1 as [lo, 0, hi, 0]
  const int wo = 4 * (qd >> 1);                        // FP8: word q >> 1 of a slice
  const unsigned char* const lutl = smem_raw + lane * 4;

  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage kt landed for all (and the tables are built); kt-1 is free again
    if (kt + STAGES - 1 < KT) load_stage((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();
    const unsigned char* sd = st0 + size_t(kt % STAGES) * stage_bytes;
    const __nv_bfloat16* sx = reinterpret_cast<const __nv_bfloat16*>(sd + C::kXOff);
    // x rows g (+16i) and g + 8 (+16i), or the zero row; at column 2q.
    const __nv_bfloat16* pa[MT];
    const __nv_bfloat16* pb[MT];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int ra = 16 * i + g, rb = ra + 8;
      pa[i] = (ra < T ? sx + ra * C::kXLd : zrow) + 2 * qd;
      pb[i] = (rb < T ? sx + rb * C::kXLd : zrow) + 2 * qd;
    }
    const unsigned char* rowp[NT];  // this lane's weight rows' codes in the stage
#pragma unroll
    for (int j = 0; j < NT; ++j) rowp[j] = sd + (rw + 8 * j) * C::kDataLd;
    // NVFP4: the stage's BK/16 scale bytes of each row; FP8 blocks: each row's block scale.
    uint32_t scw[NT][C::kWScale];
    float sj[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      sj[j] = 0.0f;
      if constexpr (F == SFmt::NVFP4) {
        const unsigned char* p = sd + kSBN * C::kDataLd + (rw + 8 * j) * C::kScLd;
        if constexpr (C::kWScale % 4 == 0) {
#pragma unroll
          for (int v = 0; v < C::kWScale / 4; ++v) {
            const uint4 w4 = *reinterpret_cast<const uint4*>(p + 16 * v);
            scw[j][4 * v] = w4.x, scw[j][4 * v + 1] = w4.y;
            scw[j][4 * v + 2] = w4.z, scw[j][4 * v + 3] = w4.w;
          }
        } else {
          const uint2 w2 = *reinterpret_cast<const uint2*>(p);
          scw[j][0] = w2.x, scw[j][1] = w2.y;
        }
      } else if constexpr (F == SFmt::FP8B) {
        sj[j] = __ldg(bgrid + brow[j] + min((kt0 + kt) * BK / a.blk, a.kb - 1));
      }
    }

    // One chunk's registers: A words [slice][tile][4] and the codes: NVFP4 [j][slice / 2] (16
    // bytes = two slices), FP8 [slice][j][2] (the words with k0 + 2q.. and k0 + 8 + 2q..).
    struct Regs {
      uint32_t af[kChunk][MT][4];
      uint4 w4[NT][kChunk / 2 > 0 ? kChunk / 2 : 1];
      uint32_t w8[kChunk][NT][2];
    };
    auto load_chunk = [&](Regs& r, int c) {
#pragma unroll
      for (int s = 0; s < kChunk; ++s) {
        const int ko = 16 * (c * kChunk + s);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          r.af[s][i][0] = lds32(pa[i] + ko);
          r.af[s][i][2] = lds32(pa[i] + ko + 8);
          const bool hi = MR > 2 * i + 1;  // rows g + 8 exist in this variant
          r.af[s][i][1] = hi ? lds32(pb[i] + ko) : 0u;
          r.af[s][i][3] = hi ? lds32(pb[i] + ko + 8) : 0u;
        }
      }
      if constexpr (F == SFmt::NVFP4) {
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int v = 0; v < kChunk / 2; ++v)
            r.w4[j][v] = *reinterpret_cast<const uint4*>(rowp[j] + 8 * (c * kChunk + 2 * v));
      } else {
#pragma unroll
        for (int s = 0; s < kChunk; ++s)
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const unsigned char* p = rowp[j] + 16 * (c * kChunk + s) + wo;
            r.w8[s][j][0] = lds32(p);
            r.w8[s][j][1] = lds32(p + 8);
          }
      }
    };
    auto compute_chunk = [&](const Regs& r, int c) {
      if constexpr (F == SFmt::NVFP4) {
        // Table lookups of all the chunk's code bytes first, then scale and multiply.
        uint32_t l0[kChunk][NT], l1[kChunk][NT];
#pragma unroll
        for (int s = 0; s < kChunk; ++s)
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const uint4& w = r.w4[j][s / 2];
            const uint32_t c0 = prmt(s % 2 ? w.z : w.x, 0u, selq);  // k0 + 2q, +1
            const uint32_t c1 = prmt(s % 2 ? w.w : w.y, 0u, selq);  // k0 + 8 + 2q, +1
            l0[s][j] = lds32(lutl + c0 * 128u);
            l1[s][j] = lds32(lutl + c1 * 128u);
          }
        // The group scales of slices (sg, sg + 1) in one conversion: bytes b, b + 1 of the scale
        // word as [S_b, 0, S_b+1, 0] -> bf16x2 (S_b, S_b+1) (each half converted alone, so the
        // same bits as one scale at a time), then each half duplicated for its slice.
        uint32_t pair[kChunk / 2][NT];
#pragma unroll
        for (int s = 0; s < kChunk; s += 2) {
          const int sg = c * kChunk + s, b = sg % 4;  // b even: 0 or 2
#pragma unroll
          for (int j = 0; j < NT; ++j)
            pair[s / 2][j] =
                e4m3x2_bf16x2(prmt(scw[j][sg / 4], 0u, 0x4040u | uint32_t(b) | uint32_t(b + 1) << 8));
        }
#pragma unroll
        for (int s = 0; s < kChunk; ++s) {
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const uint32_t p = pair[s / 2][j];
            const uint32_t S2 = prmt(p, p, s % 2 ? 0x3232u : 0x1010u);  // (S, S)
            const uint32_t b0 = bf16x2_mul(l0[s][j], S2), b1 = bf16x2_mul(l1[s][j], S2);
#pragma unroll
            for (int i = 0; i < MT; ++i) mma_bf16(acc[i][j], r.af[s][i], b0, b1);
          }
        }
      } else {
#pragma unroll
        for (int s = 0; s < kChunk; ++s)
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            uint32_t b0 = e4m3x2_bf16x2(prmt(r.w8[s][j][0], 0u, selh));
            uint32_t b1 = e4m3x2_bf16x2(prmt(r.w8[s][j][1], 0u, selh));
            if constexpr (F == SFmt::FP8B) {
              b0 = scale_pair(b0, sj[j], sj[j]);
              b1 = scale_pair(b1, sj[j], sj[j]);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) mma_bf16(acc[i][j], r.af[s][i], b0, b1);
          }
      }
    };
    Regs regs[2];
    load_chunk(regs[0], 0);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (c + 1 < kChunks) load_chunk(regs[(c + 1) & 1], c + 1);
      compute_chunk(regs[c & 1], c);
    }

    // End of a segment (folding mode): tot = c_0, then tot = tot + c_s; acc restarts from 0.
    if (!split && ((kt + 1) % a.seg_stages == 0 || kt + 1 == KT)) {
      const bool first = kt < a.seg_stages;
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            tot[i][j][e] = first ? acc[i][j][e] : __fadd_rn(tot[i][j][e], acc[i][j][e]);
            acc[i][j][e] = 0.0f;
          }
    }
  }
  cp_async_wait<0>();

  // Accumulator element (i, j, e): row 16i + lane/4 (+8 for e >= 2), column (weight row)
  // n0 + 8·NT·warp + 8j + 2·(lane % 4) + (e & 1).
  auto out_row = [&](int i, int e) { return 16 * i + g + (e >> 1) * 8; };
  auto out_col = [&](int j, int e) { return n0 + warp * 8 * NT + 8 * j + 2 * qd + (e & 1); };
  // Split: tot = this segment's partial, stored; the tile's last block gets the sums in tot.
  auto each = [&](auto f) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(out_row(i, e), out_col(j, e), tot[i][j][e]);
  };
  if (split) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) tot[i][j][e] = acc[i][j][e];
    if (!split_k_fold(each, a.part, a.counters, T, N)) return;
  }
  each([&](int r, int c, float& v) {
    if (r < T && c < N) a.y[size_t(r) * N + c] = __fmul_rn(epi_factor(a.epi, c), v);
  });
}

template <SFmt F, int MR, int BK, int STAGES>
cudaError_t launch_scaled(ScaledArgs a, int64_t kseg, cudaStream_t s, void* ws, size_t ws_bytes) {
  using C = SCfg<F, BK>;
  constexpr int NT = MR <= 2 ? 1 : 2;
  auto* kern = matmul_scaled_kernel<F, MR, NT, BK, STAGES>;
  if (const cudaError_t e =
          allow_smem<matmul_scaled_kernel<F, MR, NT, BK, STAGES>>(C::smem(8 * MR, STAGES));
      e != cudaSuccess)
    return e;
  const auto [segs, seg_stages] = seg_plan(a.K, kseg, BK);
  a.seg_stages = seg_stages;
  const int64_t tiles = (a.N + kSBN - 1) / kSBN;
  const bool split =
      segs > 1 && tiles <= kMaxTiles && ws && ws_bytes >= workspace_bytes_kseg(a.T, a.N, a.K, kseg);
  a.counters = static_cast<int*>(ws);
  a.part = split ? reinterpret_cast<float*>(static_cast<char*>(ws) + counter_bytes()) : nullptr;
  const dim3 grid(unsigned(tiles), 1, unsigned(split ? segs : 1));
  return launch_pdl(kern, grid, dim3(256 / NT), C::smem(a.T, STAGES), s, true, a);
}

// Stage shapes by T (x's rows share the stages with the codes; 2-3 blocks an SM), from
// `bench_cuda_kernels scaled` on the H200 (T = 1, config 0 vs the others): stages of 512 k
// (256 bytes of codes a row for NVFP4, 512 for FP8) beat 256 and 1024; NVFP4 512 × 3 up to
// T = 4 (95-107 KB with its 32 KB table), then 256 × 4 / 256 × 3 / 128 × 4 / 128 × 3 as x grows;
// FP8 512 × 2 up to T = 8 (70 KB at T = 1: three blocks an SM), then 256 × 4, 128 × 4; FP8
// blocks 128 × 6 / 4 (B % 128 == 0: one block column a stage). Where 512 does not divide the
// segment length (kseg 256) the 256-k shape runs. The other configs (1 .. 3, T <= 8 only) are
// kept for recipes (docs/cuda.md "Kernel variants"): per device, a shape may prefer one.
int g_scaled_config = 0;  // set_matmul_scaled_config (benchmarks only)

// The stage shape (BK, STAGES) of T rows; kseg resolved (K or a multiple of 256). launch_fused
// instantiates exactly this, so matmul_scaled_fused_stages tells the truth.
FusedStages fused_stages(SFmt f, int T, int64_t K, int64_t kseg, int cfg) {
  const int mr = (T + 7) / 8;
  // Stages of BK fit the segments when BK divides kseg (or there is one segment).
  auto fits = [&](int bk) { return kseg % bk == 0 || kseg >= K; };
  switch (f) {
    case SFmt::NVFP4:
      if (mr == 1) {
        if (cfg == 1) return {256, 4};
        if (cfg == 2 && fits(1024)) return {1024, 2};
        if (cfg == 3 && fits(1024)) return {1024, 3};
        return T <= 4 && fits(512) ? FusedStages{512, 3} : FusedStages{256, 4};
      }
      if (mr == 2) return {256, 3};
      return mr <= 4 ? FusedStages{128, 4} : FusedStages{128, 3};
    case SFmt::FP8:
      if (mr == 1) {
        if (cfg == 1) return {256, 4};
        if (cfg == 2 && fits(512)) return {512, 3};
        if (cfg == 3 && fits(1024)) return {1024, 2};
        return fits(512) ? FusedStages{512, 2} : FusedStages{256, 4};
      }
      return mr == 2 ? FusedStages{256, 4} : FusedStages{128, 4};
    case SFmt::FP8B:
    default:
      return mr <= 2 ? FusedStages{128, 6} : FusedStages{128, 4};
  }
}

cudaError_t launch_fused(SFmt f, const ScaledArgs& a, int64_t kseg, int cfg, cudaStream_t s,
                         void* ws, size_t ws_bytes) {
  const int mr = (a.T + 7) / 8;
  const FusedStages st = fused_stages(f, a.T, a.K, kseg, cfg);
  switch (f) {
    case SFmt::NVFP4:
      if (mr == 1) {
        if (st.bk == 1024)
          return st.stages == 2 ? launch_scaled<SFmt::NVFP4, 1, 1024, 2>(a, kseg, s, ws, ws_bytes)
                                : launch_scaled<SFmt::NVFP4, 1, 1024, 3>(a, kseg, s, ws, ws_bytes);
        if (st.bk == 512) return launch_scaled<SFmt::NVFP4, 1, 512, 3>(a, kseg, s, ws, ws_bytes);
        return launch_scaled<SFmt::NVFP4, 1, 256, 4>(a, kseg, s, ws, ws_bytes);
      }
      if (mr == 2) return launch_scaled<SFmt::NVFP4, 2, 256, 3>(a, kseg, s, ws, ws_bytes);
      if (mr <= 4) return launch_scaled<SFmt::NVFP4, 4, 128, 4>(a, kseg, s, ws, ws_bytes);
      return launch_scaled<SFmt::NVFP4, 8, 128, 3>(a, kseg, s, ws, ws_bytes);
    case SFmt::FP8:
      if (mr == 1) {
        if (st.bk == 1024) return launch_scaled<SFmt::FP8, 1, 1024, 2>(a, kseg, s, ws, ws_bytes);
        if (st.bk == 512)
          return st.stages == 3 ? launch_scaled<SFmt::FP8, 1, 512, 3>(a, kseg, s, ws, ws_bytes)
                                : launch_scaled<SFmt::FP8, 1, 512, 2>(a, kseg, s, ws, ws_bytes);
        return launch_scaled<SFmt::FP8, 1, 256, 4>(a, kseg, s, ws, ws_bytes);
      }
      if (mr == 2) return launch_scaled<SFmt::FP8, 2, 256, 4>(a, kseg, s, ws, ws_bytes);
      if (mr <= 4) return launch_scaled<SFmt::FP8, 4, 128, 4>(a, kseg, s, ws, ws_bytes);
      return launch_scaled<SFmt::FP8, 8, 128, 4>(a, kseg, s, ws, ws_bytes);
    case SFmt::FP8B:
    default:
      if (mr == 1) return launch_scaled<SFmt::FP8B, 1, 128, 6>(a, kseg, s, ws, ws_bytes);
      if (mr == 2) return launch_scaled<SFmt::FP8B, 2, 128, 6>(a, kseg, s, ws, ws_bytes);
      if (mr <= 4) return launch_scaled<SFmt::FP8B, 4, 128, 4>(a, kseg, s, ws, ws_bytes);
      return launch_scaled<SFmt::FP8B, 8, 128, 4>(a, kseg, s, ws, ws_bytes);
  }
}

// Inner values of weight rows row0 .. row0 + rows - 1 as bf16 [rows, K]: one thread per 8
// elements (one 16-byte store).
struct DqArgs {
  const uint8_t* q = nullptr;
  const void* sc = nullptr;
  SFmt fmt = SFmt::NVFP4;
  int K = 0, blk = 0, kb = 0;
  int64_t row0 = 0, rows = 0;
  __nv_bfloat16* out = nullptr;
};
__global__ void __launch_bounds__(256) dequant_scaled_kernel(const DqArgs a) {
  pdl_trigger();
  // rows · K/8 < 2^31 per launch: 32-bit index arithmetic.
  const uint32_t per_row = uint32_t(a.K / 8);
  const uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= uint32_t(a.rows) * per_row) return;
  const uint32_t r = idx / per_row;
  const int k = int(idx - r * per_row) * 8;
  const int64_t n = a.row0 + r;
  uint32_t o[4];
  if (a.fmt == SFmt::NVFP4) {
    const uint32_t codes = *reinterpret_cast<const uint32_t*>(a.q + n * (a.K / 2) + k / 2);
    const uint32_t sb = static_cast<const uint8_t*>(a.sc)[n * (a.K / 16) + k / 16];
    const uint32_t S2 = e4m3x2_bf16x2(sb | sb << 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = bf16x2_mul(e2m1x2_bf16x2((codes >> (8 * i)) & 0xFFu), S2);
  } else {
    const uint2 c = *reinterpret_cast<const uint2*>(a.q + n * a.K + k);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[i] = e4m3x2_bf16x2(prmt(i < 2 ? c.x : c.y, 0u, (i & 1) ? 0x4342u : 0x4140u));
    if (a.fmt == SFmt::FP8B) {
      const float* row = static_cast<const float*>(a.sc) + (n / a.blk) * a.kb;
      if (a.blk % 8 == 0) {  // the 8 elements share a block
        const float sk = __ldg(row + k / a.blk);
#pragma unroll
        for (int i = 0; i < 4; ++i) o[i] = scale_pair(o[i], sk, sk);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          o[i] = scale_pair(o[i], __ldg(row + (k + 2 * i) / a.blk),
                            __ldg(row + (k + 2 * i + 1) / a.blk));
      }
    }
  }
  *reinterpret_cast<uint4*>(a.out + size_t(r) * a.K + k) = make_uint4(o[0], o[1], o[2], o[3]);
}

// --- NVFP4 in the fragment layout: the decode kernel streams codes straight into registers ---
//
// Layout (nvfp4_to_frag; K % 64 == 0): weight rows in tiles of 16 (the last padded with zero
// codes and scales), K in chunks of 64 (four k16 slices).
//   codes  [tile][chunk][lane 0..31][4 words]: word s of lane (g = lane / 4, q = lane % 4) holds
//          the checkpoint code bytes of slice s that lane's mma A fragment takes, in register
//          order: row g byte q of the slice (elements 2q, 2q + 1), row g + 8 byte q, row g byte
//          q + 4 (elements 8 + 2q, 9 + 2q), row g + 8 byte q + 4.
//   scales [tile][chunk][row 0..15]: 4 bytes, the row's group scales of the chunk's slices.
// A negative group scale gives its sign to its 16 codes (both nibbles' sign bits flipped:
// (−v)·|S| = v·S, zeros' signs included), so no stored scale has its sign bit set. A warp reads
// its tile as one contiguous run: 512 bytes of codes and 64 of scales a chunk.
//
// The kernel puts the weights in the mma's A operand (16 weight rows) and x in B (8 tokens a
// tile): the same products at the same k positions as matmul_bf16's chain, which puts x in A.
// The bits are the same (tests/gpu: every T of 1 .. 64 against matmul_bf16(inner) · factor,
// bitwise; bench/cuda/wgmma_probe found the same for wgmma with either operand order). A warp owns
// one 16-row tile and runs its chain over the block's k range; each lane keeps kFragDepth chunks of
// codes and scales in flight in registers (no shared-memory copy of the weights), decodes a code
// byte with one prmt (its table address) and one shared load from a 256-entry table of bf16x2 pairs
// (a copy per lane: a warp's 32 lookups never share a bank), and multiplies by the group scale
// (bf16x2, exact). x is staged in shared memory in fragment order, phase by phase (kFragXBytes).
// Segments: as the fused kernel (split blocks with the workspace, else folded in registers).
constexpr int kFragLut = 256 * 256;  // entry e (a code byte) at e·256 + lane·4
constexpr int kFragXBytes = 40960;   // x's staging: T rows × 160 bytes a chunk
// Chunks of codes in flight a lane (H200, gate/up at T = 1: 4 chunks 39.9 µs, 8 37.6, 16 47.0
// with spills).
constexpr int kFragDepth = 8;

__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream4(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

struct FragArgs {
  const __nv_bfloat16* x = nullptr;
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  Epi epi;
  int T = 0, N = 0, K = 0;
  int tiles = 0, nc = 0;  // 16-row tiles, 64-k chunks
  int seg_chunks = 0;     // chunks a segment
  int nw = 0;             // warps (tiles) a block
  int pc = 0;             // chunks a phase of x's staging
  float* y = nullptr;
  float* part = nullptr;
  int* counters = nullptr;
};

// One thread per (tile, chunk, lane): its 16 bytes of codes; lanes 0..15 also row `lane`'s
// scale word.
__global__ void __launch_bounds__(256)
    nvfp4_to_frag_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ sc, int64_t N,
                         int64_t K, int64_t items, uint8_t* __restrict__ codes,
                         uint8_t* __restrict__ scales) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= items) return;
  const int64_t nc = K / 64, G = K / 16;
  const int lane = int(idx % 32);
  const int64_t tc = idx / 32, t = tc / nc, c = tc % nc;
  const int g = lane >> 2, qd = lane & 3;
  auto scale = [&](int64_t r, int64_t grp) -> uint32_t { return r < N ? sc[r * G + grp] : 0u; };
  auto code = [&](int64_t r, int64_t grp, int b) -> uint32_t {
    if (r >= N) return 0u;
    const uint32_t v = q[r * (K / 2) + grp * 8 + b];
    return scale(r, grp) & 0x80u ? v ^ 0x88u : v;
  };
  const int64_t rg = 16 * t + g, rh = rg + 8;
  uint32_t w[4];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int64_t grp = 4 * c + s;
    w[s] = code(rg, grp, qd) | code(rh, grp, qd) << 8 | code(rg, grp, qd + 4) << 16 |
           code(rh, grp, qd + 4) << 24;
  }
  reinterpret_cast<uint4*>(codes)[idx] = make_uint4(w[0], w[1], w[2], w[3]);
  if (lane < 16) {
    const int64_t r = 16 * t + lane;
    uint32_t v = 0;
#pragma unroll
    for (int s = 0; s < 4; ++s) v |= (scale(r, 4 * c + s) & 0x7Fu) << (8 * s);
    reinterpret_cast<uint32_t*>(scales)[tc * 16 + lane] = v;
  }
}

// Inner values of rows [row0, row0 + rows) from the fragment layout: a warp per (tile, chunk) of
// the tiles those rows touch; each lane converts its fragment (the conversions of the kernel's
// table), the warp transposes the 16 × 64 block through shared memory (rows of 36 words: the
// lanes' stores hit 32 different banks) and writes whole 128-byte row pieces.
__global__ void __launch_bounds__(256)
    dequant_frag_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                        int64_t K, int64_t t0, int64_t items, int64_t row0, int64_t rows,
                        __nv_bfloat16* __restrict__ out) {
  constexpr int kLd = 36;  // words a staged row
  __shared__ __align__(16) uint32_t st[8][16 * kLd];
  pdl_trigger();
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int64_t item = int64_t(blockIdx.x) * 8 + warp;
  if (item >= items) return;
  const int64_t nc = K / 64;
  const int64_t tc = item + t0 * nc, t = tc / nc, c = tc % nc;
  const int g = lane >> 2, qd = lane & 3;
  const uint4 cw = reinterpret_cast<const uint4*>(codes)[tc * 32 + lane];
  const uint32_t* sw = reinterpret_cast<const uint32_t*>(scales) + tc * 16;
  const uint32_t s0 = sw[g], s1 = sw[g + 8];
  const uint32_t wv[4] = {cw.x, cw.y, cw.z, cw.w};
  uint32_t* const sb = st[warp];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t sg = (s0 >> (8 * s)) & 0xFFu, sh = (s1 >> (8 * s)) & 0xFFu;
    const uint32_t Sg = e4m3x2_bf16x2(sg | sg << 16), Sh = e4m3x2_bf16x2(sh | sh << 16);
#pragma unroll
    for (int i = 0; i < 4; ++i)  // byte i: row g (+8 for odd i), words 8s + q (+4 for i >= 2)
      sb[(g + 8 * (i & 1)) * kLd + 8 * s + 4 * (i >> 1) + qd] =
          bf16x2_mul(e2m1x2_bf16x2((wv[s] >> (8 * i)) & 0xFFu), i & 1 ? Sh : Sg);
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // rows lane / 8 + 4i, 16 bytes at (lane % 8) · 16
    const int r = lane / 8 + 4 * i, w = (lane % 8) * 4;
    const int64_t orow = 16 * t + r - row0;
    if (orow < 0 || orow >= rows) continue;
    *reinterpret_cast<uint4*>(out + orow * K + 64 * c + 2 * w) =
        *reinterpret_cast<const uint4*>(sb + r * kLd + w);
  }
}

template <int NTOK>
__global__ void __launch_bounds__(NTOK <= 2 ? 512 : 256) matmul_frag_kernel(const FragArgs a) {
  constexpr int D = kFragDepth;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int T = a.T, N = a.N, K = a.K;
  const int tid = threadIdx.x, nthreads = blockDim.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, qd = lane & 3;
  const int tile = int(blockIdx.x) * a.nw + warp;
  const bool live = tile < a.tiles;  // (idle warps still take part in the block's barriers)
  const bool split = gridDim.z > 1;  // split mode: this block runs segment blockIdx.z only
  const int c0 = split ? int(blockIdx.z) * a.seg_chunks : 0;
  const int n = split ? min(a.seg_chunks, a.nc - c0) : a.nc;
  const size_t tc0 = size_t(live ? tile : 0) * size_t(a.nc) + size_t(c0);
  const uint8_t* const cp = a.codes + (tc0 * 32 + size_t(lane)) * 16;
  const uint8_t* const sp = a.scales + (tc0 * 16 + size_t(g)) * 4;

  uint4 cw[D];
  uint32_t sg[D], sh[D];
  const uint8_t* cnext = cp;  // the next chunk to request
  const uint8_t* snext = sp;
  // Always a load (past the range: the first chunk again, never used), so the data lands in
  // cw[u] itself: a conditional load made the compiler move it into place right after issuing
  // it, waiting out the memory latency there.
  auto load = [&](int u, bool real) {
    cw[u] = ld_stream16(real ? cnext : cp);
    sg[u] = ld_stream4(real ? snext : sp);
    sh[u] = ld_stream4((real ? snext : sp) + 32);
    cnext += 512, snext += 64;
  };
  pdl_trigger();
  if (live) {
#pragma unroll
    for (int u = 0; u < D; ++u) load(u, u < n);
  }
  // The table (while the first codes are in flight) and, in row 0's unused half, a zero record
  // of x for the lanes whose token is past T; the first phase's barrier publishes both.
  for (int c = tid; c < 256 * 8; c += nthreads) {
    const uint32_t v = e2m1x2_bf16x2(uint32_t(c >> 3));
    *reinterpret_cast<uint4*>(smem_raw + (c >> 3) * 256 + (c & 7) * 16) = make_uint4(v, v, v, v);
  }
  if (tid < 8) reinterpret_cast<uint4*>(smem_raw + 128)[tid] = make_uint4(0, 0, 0, 0);
  pdl_wait();

  unsigned char* const xs = smem_raw + kFragLut;
  // x for chunks [i0, i0 + cnt) of the block's range, in fragment order: record (chunk cl,
  // token, q) of 40 bytes (a 64-bit load by 32 lanes of consecutive records takes the minimum
  // two wavefronts) holds, at word 2s + h, the pair at k = 64 cl + 16 s + 8 h + 2 q.
  auto stage_x = [&](int i0, int cnt) {
    const int pieces = T * cnt * 8;
    for (int p = tid; p < pieces; p += nthreads) {
      const int tok = p / (cnt * 8), r = p - tok * cnt * 8, cl = r >> 3, m = r & 7;
      const uint4 v = *reinterpret_cast<const uint4*>(a.x + size_t(tok) * K +
                                                      size_t(c0 + i0 + cl) * 64 + m * 8);
      uint32_t* rec = reinterpret_cast<uint32_t*>(xs + size_t(cl * T + tok) * 160) + m;
      rec[0] = v.x, rec[10] = v.y, rec[20] = v.z, rec[30] = v.w;
    }
  };

  float acc[NTOK][4], tot[NTOK][4];
#pragma unroll
  for (int j = 0; j < NTOK; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = tot[j][e] = 0.0f;
  const uint32_t lane4 = uint32_t(lane) * 4;
  int phase_end = 0, seg_left = a.seg_chunks;
  bool first_seg = true;
  // This lane's x records: token 8j + g of the phase's first chunk (advanced a chunk at a time),
  // or the zero record.
  const unsigned char* xp[NTOK];
  const size_t xstep = size_t(T) * 160;

  for (int i0 = 0; i0 < n; i0 += D) {
#pragma unroll
    for (int u = 0; u < D; ++u) {
      const int i = i0 + u;
      if (i >= n) break;
      if (i == phase_end) {  // (uniform over the block)
        __syncthreads();
        phase_end = min(n, i + a.pc);
        stage_x(i, phase_end - i);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < NTOK; ++j)
          xp[j] = 8 * j + g < T ? xs + size_t(8 * j + g) * 160 + qd * 40 : smem_raw + 128;
      }
      if (live) {
        const uint32_t wv[4] = {cw[u].x, cw[u].y, cw[u].z, cw[u].w};
        const uint32_t s0 = sg[u], s1 = sh[u];
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          // (S_g, S_g+8) from bytes s of the two scale words (sign bits clear: the replicated
          // sign bytes are zero), then each duplicated.
          const uint32_t sel =
              uint32_t(s) | uint32_t(s + 8) << 4 | uint32_t(s + 4) << 8 | uint32_t(s + 12) << 12;
          const uint32_t S = bf16x2_mul(prmt(s0, s1, sel) << 4, 0x7B807B80u);
          const uint32_t Sg = prmt(S, 0u, 0x1010u), Sh = prmt(S, 0u, 0x3232u);
          uint32_t af[4];
#pragma unroll
          for (int b = 0; b < 4; ++b)
            af[b] = lds32(smem_raw + prmt(wv[s], lane4, 0x5504u | uint32_t(b) << 4));
          af[0] = bf16x2_mul(af[0], Sg), af[1] = bf16x2_mul(af[1], Sh);
          af[2] = bf16x2_mul(af[2], Sg), af[3] = bf16x2_mul(af[3], Sh);
#pragma unroll
          for (int j = 0; j < NTOK; ++j) {
            const uint2 b = *reinterpret_cast<const uint2*>(xp[j] + 8 * s);
            mma_bf16(acc[j], af, b.x, b.y);
          }
        }
        load(u, i + D < n);  // chunk i + D into the registers just used
      }
#pragma unroll
      for (int j = 0; j < NTOK; ++j)
        if (8 * j + g < T) xp[j] += xstep;
      // End of a segment (folding mode): tot = c_0, then tot = tot + c_s; acc restarts.
      if (!split && (--seg_left == 0 || i + 1 == n)) {
#pragma unroll
        for (int j = 0; j < NTOK; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            tot[j][e] = first_seg ? acc[j][e] : __fadd_rn(tot[j][e], acc[j][e]);
            acc[j][e] = 0.0f;
          }
        first_seg = false;
        seg_left = a.seg_chunks;
      }
    }
  }

  // acc / tot element (j, e): weight row 16·tile + g (+8 for e >= 2), token 8j + 2q + (e & 1).
  // Split: tot = this segment's partial, stored; the block's last arrival gets the sums in tot.
  auto each = [&](auto f) {
    if (!live) return;
#pragma unroll
    for (int j = 0; j < NTOK; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f(8 * j + 2 * qd + (e & 1), 16 * tile + g + 8 * (e >> 1), tot[j][e]);
  };
  if (split) {
#pragma unroll
    for (int j = 0; j < NTOK; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) tot[j][e] = acc[j][e];
    if (!split_k_fold(each, a.part, a.counters, T, N)) return;
  }
  each([&](int r, int c, float& v) {
    if (r < T && c < N) a.y[size_t(r) * N + c] = __fmul_rn(epi_factor(a.epi, c), v);
  });
}

template <int NTOK>
cudaError_t launch_frag_t(FragArgs a, int segs, bool split, cudaStream_t s) {
  auto* kern = matmul_frag_kernel<NTOK>;
  if (const cudaError_t e = allow_smem<matmul_frag_kernel<NTOK>>(kFragLut + kFragXBytes);
      e != cudaSuccess)
    return e;
  // Warps a block: the count that puts the fewest tiles on the busiest SM (blocks spread over
  // the SMs, as many an SM as shared memory allows), e.g. 7 for 896 tiles on 132 SMs.
  const int sms = sm_count(), grid_z = split ? segs : 1;
  const int chunks = split ? a.seg_chunks : a.nc;
  a.pc = std::max(1, std::min(chunks, kFragXBytes / (a.T * 160)));
  const size_t smem = size_t(kFragLut) + size_t(a.pc) * size_t(a.T) * 160;
  const int per_sm_smem = int((227 * 1024) / (smem + 1024));
  static const int regs = [] {
    cudaFuncAttributes fa{};
    return cudaFuncGetAttributes(&fa, matmul_frag_kernel<NTOK>) == cudaSuccess && fa.numRegs > 0
               ? fa.numRegs
               : 128;
  }();
  const int max_nw = NTOK <= 2 ? 16 : 8;
  int best = 4;
  int64_t best_cost = INT64_MAX;
  for (int nw = 4; nw <= max_nw; ++nw) {
    const int64_t blocks = (a.tiles + nw - 1) / nw * int64_t(grid_z);
    const int64_t per_sm =
        std::min<int64_t>({per_sm_smem, 64 / nw, 65536 / (int64_t(nw) * 32 * regs)});
    if (per_sm < 1) continue;
    const int64_t waves = (blocks + sms * per_sm - 1) / (sms * per_sm);
    const int64_t cost = ((blocks + sms - 1) / sms) * nw + waves * 1000;
    if (cost < best_cost) best_cost = cost, best = nw;
  }
  a.nw = best;
  const dim3 grid(unsigned((a.tiles + best - 1) / best), 1, unsigned(grid_z));
  return launch_pdl(kern, grid, dim3(32 * best), smem, s, true, a);
}

cudaError_t launch_frag(const ScaledWeight& w, const bf16_bits* x, int T, float* y, const Epi& epi,
                        int64_t kseg, cudaStream_t s, void* ws, size_t ws_bytes) {
  FragArgs a;
  a.x = reinterpret_cast<const __nv_bfloat16*>(x);
  a.codes = w.data, a.scales = static_cast<const uint8_t*>(w.scales), a.epi = epi;
  a.T = T, a.N = int(w.N), a.K = int(w.K);
  a.tiles = int((w.N + 15) / 16), a.nc = int(w.K / 64);
  const auto [segs, seg_chunks] = seg_plan(w.K, kseg, 64);
  a.seg_chunks = seg_chunks;
  const bool split = segs > 1 && ws && ws_bytes >= workspace_bytes_kseg(T, w.N, w.K, kseg);
  a.counters = static_cast<int*>(ws);
  a.part = split ? reinterpret_cast<float*>(static_cast<char*>(ws) + counter_bytes()) : nullptr;
  a.y = y;
  if (T <= 8) return launch_frag_t<1>(a, segs, split, s);
  if (T <= 16) return launch_frag_t<2>(a, segs, split, s);
  if (T <= 32) return launch_frag_t<4>(a, segs, split, s);
  return launch_frag_t<8>(a, segs, split, s);
}

// --- Scaled weights in the wgmma layout: the weights in wgmma's register A operand
// --------------------
//
// NVFP4 layout (scaled_to_wg; K % 128 == 0; nvfp4_wg.h has the bits): weight rows in blocks of 64
// (the last padded with zero codes), K in stages of 128 (eight k16 slices). Block b's stage j is
// one blob of wg::kBlobBytes (4,608) at (b · K/128 + j) · 4,608:
//   codes  [warp w 0..3][half h 0..1][lane 0..31][4 words]: word i holds slice 4h + i of lane
//          (g = lane / 4, q = lane % 4) of the 16-row tile 16w..: its eight codes (rows 16w + g
//          and + 8, k 16s + 2q, +1, +8, +9), packed as nvfp4_wg.h pack_word.
//   scales [warp w][g 0..7][slice s 0..7][2]: the stored scale bytes (nvfp4_wg.h) of rows
//          16w + g and 16w + g + 8, group 8j + s.
// A negative group scale gives its sign to its codes ((−c)·|S| = c·S); a zero scale zeroes its
// codes' magnitudes and keeps their signs (c · (±0)). So a stage is one contiguous copy, and a
// warp reads its codes as two conflict-free 512-byte runs and its scales as one 16-byte load a
// lane.
//
// The kernel (matmul_wg_kernel, T <= 64): RowsTMA's pipeline (one producer warp, one consumer
// warpgroup, STAGES buffers) with the blob brought by one bulk copy and x by two TMA boxes of 64
// k a stage. Each consumer lane turns its words into its wgmma A fragments (a pair: one to four
// integer instructions, then one bf16x2 multiply by the group scale, nvfp4_wg.h) and the warpgroup
// issues eight wgmma.m64nNTk16 with A from registers and x behind a descriptor; while one
// stage's chain runs, the next stage is decoded into the other register set. The chain is
// matmul_bf16's (the same k16 steps in order, the same segments and fold; bench/cuda/wgmma_probe
// found wgmma with W as A bitwise equal to the mma.sync chain) over inner · 2^-7, times
// factor · 2^7 (nvfp4_wg.h: the same bits as matmul_bf16(inner) · factor unless a product falls
// below 2^-119). The dequant path (dequant_wg_kernel) writes inner · 2^-7 with the same
// conversions, so prefill and decode agree bit for bit.
//
// FP8 (per tensor or per row; fp8_to_wg; fp8_wg.h has the bits) takes the same blocks, stages,
// pipeline and chain. Its blob is the block's 8,192 codes of the stage:
//   codes  [warp w][part p 0..3][lane][4 words]: words 2i and 2i + 1 of slice i = 2p, 2p + 1,
//          each two A-fragment registers of lane (g, q) (rows 16w + g and + 8 at k 16i + 2q, +1;
//          then at + 8, + 9), packed as fp8_wg.h pack_word,
// one contiguous 512-byte run a warp and part. A pair comes out of its word with one to four
// integer instructions and one bf16x2 multiply by 2^120: the E4M3 values themselves, so the
// chain is matmul_bf16(inner) and the factor is the checkpoint layout's (the same bits always).
template <SFmt F>
constexpr int kWgBlob = F == SFmt::NVFP4 ? wg::kBlobBytes : wg8::kBlobBytes;
template <SFmt F, int NT, int STAGES>
struct WgDecCfg {
  static constexpr int kBlob = kWgBlob<F>;
  static constexpr int kXBox = NT * 128;     // one 64-k box of x: NT rows × 128 bytes
  static constexpr int kXStage = 2 * kXBox;  // x of a stage
  static constexpr int kStageBytes = kXStage + kBlob;
  // x ring (1024-aligned boxes), then the blob ring, then the barriers.
  static constexpr size_t kSmem = size_t(STAGES) * kStageBytes + 16 * STAGES + 1024;
  static_assert(kXBox % 1024 == 0, "x boxes on whole swizzle atoms");
};
// FP8's blobs are twice NVFP4's: five stages keep three blocks of 8 or 16 rows an SM.
template <SFmt F>
constexpr int kWgStages = F == SFmt::NVFP4 ? 6 : 5;

// Keeps a register's value where it is in the instruction order (CUTLASS's
// warpgroup_fence_operand): wgmma operands are written before the fence that precedes them.
__device__ __forceinline__ void reg_fence(uint32_t& r) {
  asm volatile("" : "+r"(r)::"memory");
}
__device__ __forceinline__ void reg_fence(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}

// Slice i's A fragment of a lane from its code word and its scale word (bytes 2(i % 2) and
// 2(i % 2) + 1: rows g and g + 8).
__device__ __forceinline__ void wg_slice(uint32_t word, uint32_t sw, int i, uint32_t (&a)[4]) {
  uint32_t pr[4];
  wg::unpack_word(word, pr);
  const uint32_t b = 2u * uint32_t(i & 1);
  const uint32_t kBias2 = wg::kScaleBias * 0x10001u;
  const uint32_t sg = prmt(sw, 0u, b | 0x40u | b << 8 | 0x4000u) * 16u + kBias2;  // (S_g, S_g)
  const uint32_t sh = prmt(sw, 0u, (b + 1u) | 0x40u | (b + 1u) << 8 | 0x4000u) * 16u + kBias2;
  a[0] = bf16x2_mul(pr[0], sg);
  a[1] = bf16x2_mul(pr[1], sh);
  a[2] = bf16x2_mul(pr[2], sg);
  a[3] = bf16x2_mul(pr[3], sh);
}
// FP8: slice i's A fragment of a lane from its two words (fp8_wg.h), times 2^120.
__device__ __forceinline__ void wg8_slice(uint32_t w0, uint32_t w1, uint32_t (&a)[4]) {
  uint32_t pr[4];
  wg8::unpack_word(w0, pr[0], pr[1]);
  wg8::unpack_word(w1, pr[2], pr[3]);
#pragma unroll
  for (int e = 0; e < 4; ++e) a[e] = bf16x2_mul(pr[e], wg8::kTwo120);
}

// One thread per (block, stage, warp, lane): its two 16-byte code runs; lanes with q = 0 also
// the 16 scale bytes of rows g, g + 8.
__global__ void __launch_bounds__(256)
    nvfp4_to_wg_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ sc, int64_t N,
                       int64_t K, int64_t items, uint8_t* __restrict__ out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= items) return;
  const int lane = int(idx % 32), w = int(idx / 32 % 4);
  const int64_t bj = idx / 128, nst = K / wg::kStageK, b = bj / nst, j = bj % nst;
  const int g = lane >> 2, qd = lane & 3;
  const int64_t G = K / 16, r0 = 64 * b + 16 * w + g, r1 = r0 + 8;
  auto sbyte = [&](int64_t r, int64_t grp) -> uint32_t { return r < N ? sc[r * G + grp] : 0u; };
  auto cbyte = [&](int64_t r, int64_t grp, int i) -> uint32_t {  // byte i of the group's 8
    if (r >= N) return 0u;
    uint32_t v = q[r * (K / 2) + grp * 8 + i];
    const uint32_t s = sbyte(r, grp);
    if (s & 0x80u) v ^= 0x88u;
    if ((s & 0x7fu) == 0) v &= 0x88u;
    return v;
  };
  uint32_t words[8];
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    const int64_t grp = 8 * j + s;
    const uint32_t bg = cbyte(r0, grp, qd), bh = cbyte(r1, grp, qd);
    const uint32_t bg8 = cbyte(r0, grp, qd + 4), bh8 = cbyte(r1, grp, qd + 4);
    const uint32_t c[8] = {bg & 15u,  bg >> 4,  bh & 15u,  bh >> 4,
                           bg8 & 15u, bg8 >> 4, bh8 & 15u, bh8 >> 4};
    words[s] = wg::pack_word(c);
  }
  uint8_t* const blob = out + bj * wg::kBlobBytes;
  *reinterpret_cast<uint4*>(blob + w * 1024 + lane * 16) =
      make_uint4(words[0], words[1], words[2], words[3]);
  *reinterpret_cast<uint4*>(blob + w * 1024 + 512 + lane * 16) =
      make_uint4(words[4], words[5], words[6], words[7]);
  if (qd == 0) {
    uint32_t sw[4] = {0, 0, 0, 0};
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const uint32_t m0 = sbyte(r0, 8 * j + s) & 0x7fu, m1 = sbyte(r1, 8 * j + s) & 0x7fu;
      const uint32_t b0 = m0 ? wg::scale_code(m0) : 0u, b1 = m1 ? wg::scale_code(m1) : 0u;
      sw[s / 2] |= (b0 | b1 << 8) << (16 * (s % 2));
    }
    *reinterpret_cast<uint4*>(blob + wg::kCodeBytes + w * 128 + g * 16) =
        make_uint4(sw[0], sw[1], sw[2], sw[3]);
  }
}

// FP8: one thread per (block, stage, warp, lane): its four 16-byte runs.
__global__ void __launch_bounds__(256)
    fp8_to_wg_kernel(const uint8_t* __restrict__ q, int64_t N, int64_t K, int64_t items,
                     uint8_t* __restrict__ out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= items) return;
  const int lane = int(idx % 32), w = int(idx / 32 % 4);
  const int64_t bj = idx / 128, nst = K / wg::kStageK, b = bj / nst, j = bj % nst;
  const int g = lane >> 2, qd = lane & 3;
  const int64_t r0 = 64 * b + 16 * w + g, r1 = r0 + 8;
  auto code = [&](int64_t r, int64_t k) -> uint32_t { return r < N ? q[r * K + k] : 0u; };
  uint32_t words[16];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t k = wg::kStageK * j + 16 * i + 2 * qd;
    const uint32_t c0[4] = {code(r0, k), code(r0, k + 1), code(r1, k), code(r1, k + 1)};
    const uint32_t c1[4] = {code(r0, k + 8), code(r0, k + 9), code(r1, k + 8), code(r1, k + 9)};
    words[2 * i] = wg8::pack_word(c0);
    words[2 * i + 1] = wg8::pack_word(c1);
  }
  uint8_t* const blob = out + bj * wg8::kBlobBytes + w * 2048 + lane * 16;
#pragma unroll
  for (int p = 0; p < 4; ++p)
    *reinterpret_cast<uint4*>(blob + p * 512) =
        make_uint4(words[4 * p], words[4 * p + 1], words[4 * p + 2], words[4 * p + 3]);
}

// The A fragments of lane (warp wq) for a stage's eight slices, from its blob (shared or global
// memory): NVFP4 two 16-byte code runs and its scale word, FP8 four code runs.
template <SFmt F>
__device__ __forceinline__ void wg_fragments(const unsigned char* blob, int wq, int lane,
                                             uint32_t (&af)[8][4]) {
  if constexpr (F == SFmt::NVFP4) {
    const uint4 c0 = *reinterpret_cast<const uint4*>(blob + wq * 1024 + lane * 16);
    const uint4 c1 = *reinterpret_cast<const uint4*>(blob + wq * 1024 + 512 + lane * 16);
    const uint4 sc =
        *reinterpret_cast<const uint4*>(blob + wg::kCodeBytes + wq * 128 + (lane >> 2) * 16);
    const uint32_t cw[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const uint32_t sw[4] = {sc.x, sc.y, sc.z, sc.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) wg_slice(cw[i], sw[i / 2], i, af[i]);
  } else {
    uint32_t cw[16];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const uint4 v = *reinterpret_cast<const uint4*>(blob + wq * 2048 + p * 512 + lane * 16);
      cw[4 * p] = v.x, cw[4 * p + 1] = v.y, cw[4 * p + 2] = v.z, cw[4 * p + 3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) wg8_slice(cw[2 * i], cw[2 * i + 1], af[i]);
  }
}

// The layout's inner values (NVFP4: inner · 2^-7) of rows [row0, row0 + rows) as bf16 [rows, K]:
// one thread per (block, stage, warp, lane) of the blocks those rows touch (b0 the first), its
// eight slices (wg_fragments: the kernel's bits) stored as bf16 pairs.
template <SFmt F>
__global__ void __launch_bounds__(256)
    dequant_wg_kernel(const uint8_t* __restrict__ blobs, int64_t K, int64_t b0, int64_t items,
                      int64_t row0, int64_t rows, __nv_bfloat16* __restrict__ out) {
  pdl_trigger();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= items) return;
  const int lane = int(idx % 32), w = int(idx / 32 % 4);
  const int64_t nst = K / wg::kStageK, bj = idx / 128 + b0 * nst, b = bj / nst, j = bj % nst;
  const int g = lane >> 2, qd = lane & 3;
  uint32_t a[8][4];
  wg_fragments<F>(blobs + bj * kWgBlob<F>, w, lane, a);
  const int64_t ra = 64 * b + 16 * w + g - row0, rb = ra + 8;
  const bool oka = ra >= 0 && ra < rows, okb = rb >= 0 && rb < rows;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t k = wg::kStageK * j + 16 * i + 2 * qd;
    if (oka) {
      *reinterpret_cast<uint32_t*>(out + ra * K + k) = a[i][0];
      *reinterpret_cast<uint32_t*>(out + ra * K + k + 8) = a[i][2];
    }
    if (okb) {
      *reinterpret_cast<uint32_t*>(out + rb * K + k) = a[i][1];
      *reinterpret_cast<uint32_t*>(out + rb * K + k + 8) = a[i][3];
    }
  }
}

// A launch of up to kMaxGroup weights of one format and K (matmul_scaled_group: q / k / v; one
// for matmul_scaled): the items of weight i (its 64-row blocks, times its segments when split)
// follow those of weight i - 1 on grid x, each weight with its segments, partials, output and
// factor, as RowsTMA's group. SWIGLU (matmul_scaled_swiglu): one pair, gate (blobs[0]) and up
// (blobs[1]) of F = N[0] rows; block b takes rows 32b .. 32b + 31 of each (tiles 2(b % 2) and
// + 1 of their 64-row block b / 2): the producer copies the gate's two tiles into the places of
// warps 0, 1 of the stage's blob and the up's into those of warps 2, 3 (NVFP4: codes and
// scales, four copies; FP8: two), so the consumer is unchanged; the partials and counters
// index the block's 64 rows as rows 64b + r of a virtual [64 · blocks] weight (as RowsTMA's
// SWIGLU form); the up warps hand their sums over through shared memory and the gate warps
// write out[t, c] = bf16(silu_mul(g, u)) with g and u each times its factor: the bits of the
// two matmuls and swiglu.
struct WgGroup {
  int n = 1;
  const uint8_t* blobs[kMaxGroup] = {};
  int blocks[kMaxGroup] = {};    // 64-row blocks (SWIGLU: 32-row pairs)
  int item_end[kMaxGroup] = {};  // blocks × launched segments, cumulative
  int N[kMaxGroup] = {};
  int seg_tiles[kMaxGroup] = {};
  int segs[kMaxGroup] = {};
  float* y[kMaxGroup] = {};     // [T, N_i]
  float* part[kMaxGroup] = {};  // split partials [segs, T, rows]; nullptr: fold in registers
  Epi epi[kMaxGroup] = {};
};

template <SFmt F, int NT, int STAGES, bool FOLD, bool SWIGLU = false>
__global__ void __launch_bounds__(160, NT <= 16 ? 3 : 2)
    matmul_wg_kernel(const __grid_constant__ CUtensorMap tx, const WgGroup g, int T, int K,
                     int* __restrict__ counters, bf16_bits* __restrict__ out) {
  using C = WgDecCfg<F, NT, STAGES>;
  // The fields of the block's weight, read with constant indices (a dynamic index copies to local
  // memory).
  int item0 = 0, tile0 = 0;
  int N = g.N[0], segs = g.segs[0], seg_tiles = g.seg_tiles[0], blocks = g.blocks[0];
  const uint8_t* blobs = g.blobs[0];
  float* y = g.y[0];
  float* part = g.part[0];
  Epi epi = g.epi[0];
  if constexpr (!SWIGLU) {
#pragma unroll
    for (int i = 1; i < kMaxGroup; ++i)
      if (i < g.n && int(blockIdx.x) >= g.item_end[i - 1]) {
        item0 = g.item_end[i - 1], tile0 += g.blocks[i - 1];
        N = g.N[i], segs = g.segs[i], seg_tiles = g.seg_tiles[i], blocks = g.blocks[i];
        blobs = g.blobs[i], y = g.y[i], part = g.part[i], epi = g.epi[i];
      }
  }
  const int item = int(blockIdx.x) - item0, z = item / blocks, blk = item % blocks;
  const bool split = part != nullptr;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const TmaSmem ts = tma_block_start<STAGES, C::kStageBytes>(smem_raw, 4);
  const int tid = threadIdx.x;
  const int nst = K / wg::kStageK;
  const int kt0 = split ? z * seg_tiles : 0;
  const int KT = split ? min(nst - kt0, seg_tiles) : nst;
  const uint32_t xs = ts.sm_s, bs = ts.sm_s + uint32_t(STAGES * C::kXStage);
  auto full = [&](int s) { return ts.bars + 8u * uint32_t(s); };
  auto empty = [&](int s) { return ts.bars + 8u * uint32_t(STAGES + s); };
  if (tid >= 128) {  // the producer warp
    if (tid == 128) {
      const int wblk = SWIGLU ? blk / 2 : blk;
      const uint8_t* src = blobs + (size_t(wblk) * nst + kt0) * C::kBlob;
      const uint8_t* src_up = SWIGLU ? g.blobs[1] + (src - blobs) : nullptr;
      // SWIGLU: tiles 2(blk % 2), + 1 of each weight (F == NVFP4: codes, then scales).
      auto load_w = [&](int kt, int s) {
        const uint32_t dst = bs + uint32_t(s * C::kBlob);
        const size_t o = size_t(kt) * C::kBlob;
        if constexpr (!SWIGLU) {
          bulk_load(dst, src + o, uint32_t(C::kBlob), full(s));
        } else if constexpr (F == SFmt::NVFP4) {
          const uint32_t h = uint32_t(blk & 1) * 2u;
          const uint32_t cb = 2u * 1024u, sb = 2u * 128u;
          bulk_load(dst, src + o + h * 1024u, cb, full(s));
          bulk_load(dst + cb, src_up + o + h * 1024u, cb, full(s));
          bulk_load(dst + wg::kCodeBytes, src + o + wg::kCodeBytes + h * 128u, sb, full(s));
          bulk_load(dst + wg::kCodeBytes + sb, src_up + o + wg::kCodeBytes + h * 128u, sb, full(s));
        } else {
          const uint32_t h = uint32_t(blk & 1) * 2u, cb = 2u * 2048u;
          bulk_load(dst, src + o + h * 2048u, cb, full(s));
          bulk_load(dst + cb, src_up + o + h * 2048u, cb, full(s));
        }
      };
      tma_prefetch_map(&tx);
      const int pre = min(STAGES, KT);
      for (int kt = 0; kt < pre; ++kt) {  // the weights before the previous kernel ends
        mbar_arrive_expect_tx(full(kt), uint32_t(C::kStageBytes));
        load_w(kt, kt);
      }
      pdl_wait();
      for (int kt = 0; kt < pre; ++kt)
        for (int h = 0; h < 2; ++h)
          tma_load_2d(xs + uint32_t(kt * C::kXStage + h * C::kXBox), &tx,
                      (kt0 + kt) * wg::kStageK + 64 * h, 0, full(kt));
      for (int kt = pre; kt < KT; ++kt) {
        const int s = kt % STAGES;
        mbar_wait(empty(s), uint32_t((kt / STAGES) - 1) & 1u);
        mbar_arrive_expect_tx(full(s), uint32_t(C::kStageBytes));
        load_w(kt, s);
        for (int h = 0; h < 2; ++h)
          tma_load_2d(xs + uint32_t(s * C::kXStage + h * C::kXBox), &tx,
                      (kt0 + kt) * wg::kStageK + 64 * h, 0, full(s));
      }
    }
    return;
  }
  pdl_wait();  // y may still be read by the previous kernel
  const int lane = tid & 31, wq = tid >> 5;
  float acc[NT / 2];
  float tot[FOLD ? NT / 2 : 1];
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < (FOLD ? NT / 2 : 1); ++i) tot[i] = 0.0f;
  const unsigned char* const bsm = ts.sm + STAGES * C::kXStage;
  int seg_pos = 0;
  bool first = true;
  // Stage kt: decode, then its eight wgmma, then wait for them (segments as tma_consume). The
  // chain is not left in flight across the next stage's decode: ptxas serialises wgmma whose
  // register operands other instructions write while a group is pending (C7513), and the
  // warpgroups of the SM's other blocks fill the wait.
  // (BASALT_CUDA_WG_PIPE, decoding the next stage while a stage's wgmma ran in a second
  // register set, measured 8 % slower on the H100 at 94-107 registers: 3 blocks an SM, not 5.)
  uint32_t af[8][4];
  for (int kt = 0; kt < KT; ++kt) {
    const int s = kt % STAGES;
    mbar_wait(full(s), uint32_t(kt / STAGES) & 1u);
    wg_fragments<F>(bsm + s * C::kBlob, wq, lane, af);
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) reg_fence(af[i][e]);
#pragma unroll
    for (int i = 0; i < NT / 2; ++i) reg_fence(acc[i]);
    const unsigned char* const xst = ts.sm + s * C::kXStage;
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < 8; ++i)
      wgmma_bf16_rs<NT>(acc, af[i], wgmma_desc_sw128(xst + (i / 4) * C::kXBox + (i % 4) * 32),
                        seg_pos > 0 || i > 0);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < NT / 2; ++i) reg_fence(acc[i]);
    if (lane == 0) mbar_arrive(empty(s));
    ++seg_pos;
    if constexpr (FOLD) {
      if (seg_pos == seg_tiles || kt + 1 == KT) {
#pragma unroll
        for (int i = 0; i < NT / 2; ++i) tot[i] = first ? acc[i] : __fadd_rn(tot[i], acc[i]);
        first = false;
        seg_pos = 0;
      }
    }
  }
  float* res = FOLD ? tot : acc;
  auto sync = [] { asm volatile("bar.sync 1, 128;\n" ::: "memory"); };
  // res[4j + e]: row 16·wq + lane/4 (+ 8 for e >= 2) of the block, token 8j + 2·(lane % 4) (+ 1);
  // SWIGLU: the block's rows as virtual rows 64·blk + r.
  const int rbase = blk * wg::kBlockRows;
  auto each = [&](auto f) {
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f(8 * j + 2 * (lane & 3) + (e & 1), rbase + 16 * wq + (lane >> 2) + 8 * (e >> 1),
          res[4 * j + e]);
  };
  if (!FOLD && split)
    if (!split_k_fold(each, part, counters, T, SWIGLU ? wg::kBlockRows * blocks : N, sync, tid == 0,
                      segs, z, tile0 + blk))
      return;
  if constexpr (SWIGLU) {
    // The up warps' sums through the x ring (every stage has been consumed once all four warps
    // pass the barrier).
    float* xch = reinterpret_cast<float*>(ts.sm);
    if (!swiglu_handover<NT>(xch, res, wq, lane, sync)) return;
    const Epi eu = g.epi[1];
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = 8 * j + 2 * (lane & 3) + (e & 1);
        const int c = 32 * blk + 16 * wq + (lane >> 2) + 8 * (e >> 1);
        if (t < T && c < N) {
          const float gv = __fmul_rn(epi_factor(epi, c), res[4 * j + e]);
          const float uv = __fmul_rn(epi_factor(eu, c), xch[(4 * j + e) * 64 + wq * 32 + lane]);
          out[size_t(t) * N + c] = to_bf(silu_mul(gv, uv));
        }
      }
    return;
  }
  each([&](int t, int n, float& v) {
    if (t < T && n < N) y[size_t(t) * N + n] = __fmul_rn(epi_factor(epi, n), v);
  });
}

// A launch of group g (blobs, blocks, N, segments, y and epi set; part[] and item_end[] not yet):
// split-K where the weights have segments, T <= kRowsSplitMaxT and the workspace holds need_ws
// bytes (counters, then each segmented weight's partials [segs, T, part_rows[i]] in order); else
// the segments fold in registers (launch_rows_group's rule).
template <SFmt F, int NT, bool SWIGLU>
cudaError_t launch_wg_group(WgGroup g, const bf16_bits* x, int T, int K, const int* part_rows,
                            size_t need_ws, bf16_bits* out, cudaStream_t s, void* ws,
                            size_t ws_bytes) {
  constexpr int kStages = kWgStages<F>;
  using C = WgDecCfg<F, NT, kStages>;
  CUtensorMap tx;
  if (!bf16_tile_map(&tx, x, T, K, NT)) return cudaErrorNotSupported;
  const auto [items, fold] = plan_group(g, part_rows, need_ws, T, ws, ws_bytes);
  constexpr auto kFold = matmul_wg_kernel<F, NT, kStages, true, SWIGLU>;
  constexpr auto kOne = matmul_wg_kernel<F, NT, kStages, false, SWIGLU>;
  if (const cudaError_t e = fold ? allow_smem<kFold>(C::kSmem) : allow_smem<kOne>(C::kSmem);
      e != cudaSuccess)
    return e;
  return launch_pdl(fold ? kFold : kOne, dim3(unsigned(items)), dim3(160), C::kSmem, s, true, tx, g,
                    T, K, static_cast<int*>(ws), out);
}

// The tokens' box of a wgmma-layout launch (rows_tma_nt's: the smallest of 8, 16, 32, 64 rows
// that holds T).
template <SFmt F, bool SWIGLU>
cudaError_t launch_wg_nt(const WgGroup& g, const bf16_bits* x, int T, int K, const int* part_rows,
                         size_t need_ws, bf16_bits* out, cudaStream_t s, void* ws,
                         size_t ws_bytes) {
  return rows_tma_nt(T, [&](auto nt) {
    return launch_wg_group<F, decltype(nt)::value, SWIGLU>(g, x, T, K, part_rows, need_ws, out, s,
                                                           ws, ws_bytes);
  });
}

// The factor of a scaled weight's epilogue: its per-row scales (FP8Rows) and per-tensor scale,
// times 2^kInnerShift for NVFP4 in the wgmma layout, whose inner values are scaled down by it
// (nvfp4_wg.h).
Epi scaled_epi(const ScaledWeight& w) {
  Epi epi;
  epi.rows = w.format == ScaledFormat::FP8Rows ? static_cast<const float*>(w.scales) : nullptr;
  epi.scale =
      w.wg && w.format == ScaledFormat::NVFP4 ? w.scale * float(1 << wg::kInnerShift) : w.scale;
  epi.on = 1;
  return epi;
}

// n weights (resolved ksegs), all in the wgmma layout of format F, the same K.
template <SFmt F>
cudaError_t launch_wg_weights(int n, const ScaledWeight* w, const bf16_bits* x, int T,
                              float* const* y, const int64_t* kseg, cudaStream_t s, void* ws,
                              size_t ws_bytes) {
  WgGroup g;
  g.n = n;
  int part_rows[kMaxGroup] = {};
  int64_t N[kMaxGroup] = {};
  for (int i = 0; i < n; ++i) {
    g.blobs[i] = w[i].data;
    g.blocks[i] = int((w[i].N + wg::kBlockRows - 1) / wg::kBlockRows);
    g.N[i] = part_rows[i] = int(w[i].N);
    N[i] = w[i].N;
    const SegPlan sp = seg_plan(w[i].K, kseg[i], wg::kStageK);
    g.segs[i] = sp.segs, g.seg_tiles[i] = sp.seg_tiles;
    g.y[i] = y[i];
    g.epi[i] = scaled_epi(w[i]);
  }
  return launch_wg_nt<F, false>(g, x, T, int(w[0].K), part_rows,
                                group_workspace_bytes(T, n, N, w[0].K, kseg), nullptr, s, ws,
                                ws_bytes);
}

cudaError_t launch_wg(const ScaledWeight& w, const bf16_bits* x, int T, float* y, int64_t kseg,
                      cudaStream_t s, void* ws, size_t ws_bytes) {
  return w.format == ScaledFormat::NVFP4
             ? launch_wg_weights<SFmt::NVFP4>(1, &w, x, T, &y, &kseg, s, ws, ws_bytes)
             : launch_wg_weights<SFmt::FP8>(1, &w, x, T, &y, &kseg, s, ws, ws_bytes);
}
// The formats the wgmma layout takes (FP8 per tensor or per row: its factor is the epilogue's).
bool wg_format(const ScaledWeight& w) {
  return w.format == ScaledFormat::NVFP4 || w.format == ScaledFormat::FP8 ||
         (w.format == ScaledFormat::FP8Rows && w.scales);
}

SFmt sfmt(ScaledFormat f) {
  return f == ScaledFormat::NVFP4       ? SFmt::NVFP4
         : f == ScaledFormat::FP8Blocks ? SFmt::FP8B
                                        : SFmt::FP8;
}

bool scaled_args_ok(const ScaledWeight& w) {
  if (w.frag && w.format != ScaledFormat::NVFP4) return false;
  if (w.N <= 0 || w.K <= 0 || w.N > 0x7fffffff || w.K > 0x7fffffff || !w.data) return false;
  if (w.wg) return wg_format(w) && !w.frag && w.K % wg::kStageK == 0;
  switch (w.format) {
    case ScaledFormat::NVFP4:
      return w.K % (w.frag ? 64 : 16) == 0 && w.scales;
    case ScaledFormat::FP8:
      return w.K % 8 == 0;
    case ScaledFormat::FP8Rows:
      return w.K % 8 == 0 && w.scales;
    case ScaledFormat::FP8Blocks:
      return w.K % 8 == 0 && w.scales && w.block > 0 && w.block <= 0x7fffffff;
  }
  return false;
}

constexpr int64_t kDequantScratchCap = int64_t(128) << 20;  // the dequant path's preferred bound

}  // namespace

void set_matmul_scaled_config(int config) {
  g_scaled_config = config;
}

FusedStages matmul_scaled_fused_stages(const ScaledWeight& w, int64_t T, int64_t kseg, int config) {
  kseg = resolve_kseg(w.N, w.K, kseg);
  if (T < 1 || T > 64 || w.K <= 0 || kseg <= 0 || config < -1 || config > 3) return {};
  if (w.frag) return {64, kFragDepth};  // one shape: the configs are all the same kernel
  if (w.wg)
    return {wg::kStageK,
            w.format == ScaledFormat::NVFP4 ? kWgStages<SFmt::NVFP4> : kWgStages<SFmt::FP8>};
  return fused_stages(sfmt(w.format), int(T), w.K, kseg, config < 0 ? g_scaled_config : config);
}

bool matmul_scaled_fused_ok(const ScaledWeight& w) {
  if (!scaled_args_ok(w) || reinterpret_cast<uintptr_t>(w.data) % 16) return false;
  if ((w.N + kSBN - 1) / kSBN > 0x7fffffff) return false;
  if (w.wg) return (w.N + wg::kBlockRows - 1) / wg::kBlockRows <= kMaxTiles;
  if (w.frag) return reinterpret_cast<uintptr_t>(w.scales) % 4 == 0;  // (K % 64 == 0: args_ok)
  switch (w.format) {
    case ScaledFormat::NVFP4:
      return w.K % 64 == 0 && reinterpret_cast<uintptr_t>(w.scales) % 4 == 0;
    case ScaledFormat::FP8Blocks:
      return w.K % 16 == 0 && w.block % 128 == 0;
    default:
      return w.K % 16 == 0;
  }
}

size_t matmul_scaled_scratch_bytes(const ScaledWeight& w) {
  const int64_t row = w.K * 2, whole = w.N * row;
  return size_t(std::min(whole, std::max(kDequantScratchCap, row * 128)));
}

cudaError_t dequant_scaled(const ScaledWeight& w, int64_t row0, int64_t rows, bf16_bits* out,
                           cudaStream_t s) {
  if (!scaled_args_ok(w) || row0 < 0 || rows < 0 || row0 + rows > w.N ||
      reinterpret_cast<uintptr_t>(out) % 16 ||
      reinterpret_cast<uintptr_t>(w.data) % (w.wg                              ? 16
                                             : w.format == ScaledFormat::NVFP4 ? 4
                                                                               : 8))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (w.wg) {  // the blocks the rows touch, all their stages (NVFP4: inner · 2^-7, nvfp4_wg.h)
    const int64_t b0 = row0 / wg::kBlockRows,
                  b1 = (row0 + rows + wg::kBlockRows - 1) / wg::kBlockRows;
    const int64_t items = (b1 - b0) * (w.K / wg::kStageK) * 128;  // threads
    auto* o = reinterpret_cast<__nv_bfloat16*>(out);
    const auto kernel = w.format == ScaledFormat::NVFP4 ? dequant_wg_kernel<SFmt::NVFP4>
                                                        : dequant_wg_kernel<SFmt::FP8>;
    kernel<<<unsigned((items + 255) / 256), 256, 0, s>>>(w.data, w.K, b0, items, row0, rows, o);
    return cudaGetLastError();
  }
  if (w.frag) {  // the tiles the rows touch, all their chunks
    const int64_t t0 = row0 / 16, t1 = (row0 + rows + 15) / 16;
    const int64_t items = (t1 - t0) * (w.K / 64);  // warps
    dequant_frag_kernel<<<unsigned((items + 7) / 8), 256, 0, s>>>(
        w.data, static_cast<const uint8_t*>(w.scales), w.K, t0, items, row0, rows,
        reinterpret_cast<__nv_bfloat16*>(out));
    return cudaGetLastError();
  }
  DqArgs a;
  a.q = w.data, a.sc = w.scales, a.fmt = sfmt(w.format), a.K = int(w.K);
  a.blk = int(w.block), a.kb = w.block > 0 ? int((w.K + w.block - 1) / w.block) : 0;
  const int64_t per_row = w.K / 8, max_rows = std::max<int64_t>(1, (int64_t(1) << 30) / per_row);
  for (int64_t r0 = 0; r0 < rows; r0 += max_rows) {  // launches of < 2^30 groups of 8
    a.row0 = row0 + r0, a.rows = std::min(max_rows, rows - r0);
    a.out = reinterpret_cast<__nv_bfloat16*>(out + r0 * w.K);
    const int64_t n = a.rows * per_row;
    dequant_scaled_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(a);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t matmul_scaled(const bf16_bits* x, int64_t T, const ScaledWeight& w, float* y,
                          cudaStream_t s, ScaledKernel kernel, void* workspace,
                          size_t workspace_bytes, void* scratch, size_t scratch_bytes, int64_t kseg,
                          int config) {
  if (T < 0 || T > 0x7fffffff || !scaled_args_ok(w) || reinterpret_cast<uintptr_t>(x) % 16 ||
      config < -1 || config > 3)
    return cudaErrorInvalidValue;
  kseg = resolve_kseg(w.N, w.K, kseg);
  if (kseg <= 0) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  const bool fused_ok = T <= 64 && matmul_scaled_fused_ok(w);
  if (kernel == ScaledKernel::Auto) kernel = fused_ok ? ScaledKernel::Fused : ScaledKernel::Dequant;
  if (kernel == ScaledKernel::Fused && !fused_ok) return cudaErrorInvalidValue;
  const Epi epi = scaled_epi(w);
  if (kernel == ScaledKernel::Fused && w.wg)
    return launch_wg(w, x, int(T), y, kseg, s, workspace, workspace_bytes);
  if (kernel == ScaledKernel::Fused && w.frag)
    return launch_frag(w, x, int(T), y, epi, kseg, s, workspace, workspace_bytes);
  if (kernel == ScaledKernel::Fused) {
    ScaledArgs a;
    a.x = reinterpret_cast<const __nv_bfloat16*>(x);
    a.q = w.data, a.sc = w.scales, a.epi = epi;
    a.T = int(T), a.N = int(w.N), a.K = int(w.K);
    a.blk = int(w.block), a.kb = w.block > 0 ? int((w.K + w.block - 1) / w.block) : 0;
    a.y = y;
    return launch_fused(sfmt(w.format), a, kseg, config < 0 ? g_scaled_config : config, s,
                        workspace, workspace_bytes);
  }
  // Dequant: blocks of rows through the scratch (a whole number of Tile128 column blocks when
  // the weight does not fit), each a launch of the bf16 kernels with the whole weight's
  // segments, writing its columns of y (row stride N).
  const int64_t row_bytes = w.K * 2;
  int64_t rows = std::min<int64_t>(w.N, int64_t(scratch_bytes) / row_bytes);
  if (rows < w.N) rows -= rows % 128;
  if (!scratch || rows <= 0 || reinterpret_cast<uintptr_t>(scratch) % 16)
    return cudaErrorInvalidValue;
  auto* inner = static_cast<bf16_bits*>(scratch);
  for (int64_t r0 = 0; r0 < w.N; r0 += rows) {
    const int64_t R = std::min(rows, w.N - r0);
    cudaError_t e = dequant_scaled(w, r0, R, inner, s);
    if (e != cudaSuccess) return e;
    Epi ep = epi;
    if (ep.rows) ep.rows += r0;
    // (No early start: dequant_scaled has just written its "weight".)
    e = dispatch_bf16(x, int(T), inner, int(R), int(w.K), y + r0, s, MatmulKernel::Auto, workspace,
                      workspace_bytes, kseg, int(w.N), w.N, ep, /*pdl=*/false);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

namespace {
// The wgmma-layout decode kernel's format of w (NVFP4, or FP8 for FP8 and FP8Rows).
SFmt wg_kernel_format(const ScaledWeight& w) {
  return w.format == ScaledFormat::NVFP4 ? SFmt::NVFP4 : SFmt::FP8;
}
// n weights a group launch takes: each in the wgmma layout, one kernel format, one K; kseg[i]
// resolved into ks (nullptr: the rule). cudaErrorNotSupported where the launch cannot take them.
cudaError_t wg_group_check(const bf16_bits* x, int64_t T, int n, const ScaledWeight* w,
                           const int64_t* kseg, int64_t* ks) {
  if (n < 1 || n > kMaxGroup || T < 1 || T > 64 || reinterpret_cast<uintptr_t>(x) % 16)
    return cudaErrorNotSupported;
  for (int i = 0; i < n; ++i) {
    if (!scaled_args_ok(w[i])) return cudaErrorInvalidValue;
    if (!w[i].wg || !wg_format(w[i]) || w[i].K != w[0].K ||
        wg_kernel_format(w[i]) != wg_kernel_format(w[0]))
      return cudaErrorNotSupported;
    ks[i] = resolve_kseg(w[i].N, w[i].K, kseg ? kseg[i] : 0);
    if (ks[i] <= 0) return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
}  // namespace

size_t matmul_scaled_group_workspace_bytes(int64_t T, int n, const ScaledWeight* w,
                                           const int64_t* kseg) {
  int64_t ks[kMaxGroup], N[kMaxGroup];
  if (n < 1 || n > kMaxGroup) return 0;
  for (int i = 0; i < n; ++i) {
    ks[i] = resolve_kseg(w[i].N, w[i].K, kseg ? kseg[i] : 0);
    if (ks[i] <= 0) return 0;  // the call fails anyway
    N[i] = w[i].N;
  }
  return group_workspace_bytes(T, n, N, w[0].K, ks);
}

cudaError_t matmul_scaled_group(const bf16_bits* x, int64_t T, int n, const ScaledWeight* w,
                                float* const* y, const int64_t* kseg, cudaStream_t s,
                                void* workspace, size_t workspace_bytes) {
  int64_t ks[kMaxGroup];
  if (const cudaError_t e = wg_group_check(x, T, n, w, kseg, ks); e != cudaSuccess) return e;
  return wg_kernel_format(w[0]) == SFmt::NVFP4
             ? launch_wg_weights<SFmt::NVFP4>(n, w, x, int(T), y, ks, s, workspace, workspace_bytes)
             : launch_wg_weights<SFmt::FP8>(n, w, x, int(T), y, ks, s, workspace, workspace_bytes);
}

size_t matmul_scaled_swiglu_workspace_bytes(int64_t T, const ScaledWeight& gate, int64_t kseg) {
  kseg = resolve_kseg(gate.N, gate.K, kseg);
  return kseg <= 0 ? 0 : rows_swiglu_workspace_bytes(T, gate.N, gate.K, kseg);
}

cudaError_t matmul_scaled_swiglu(const bf16_bits* x, int64_t T, const ScaledWeight& gate,
                                 const ScaledWeight& up, bf16_bits* out, cudaStream_t s,
                                 int64_t kseg, void* workspace, size_t workspace_bytes) {
  const ScaledWeight pair[2] = {gate, up};
  const int64_t kk[2] = {kseg, kseg};
  int64_t ks[2];
  if (const cudaError_t e = wg_group_check(x, T, 2, pair, kk, ks); e != cudaSuccess) return e;
  if (gate.N != up.N || !out) return cudaErrorNotSupported;
  WgGroup g;
  g.n = 1;
  g.blobs[0] = gate.data, g.blobs[1] = up.data;
  g.blocks[0] = int((gate.N + 31) / 32);
  g.N[0] = int(gate.N);
  const SegPlan sp = seg_plan(gate.K, ks[0], wg::kStageK);
  g.segs[0] = sp.segs, g.seg_tiles[0] = sp.seg_tiles;
  g.epi[0] = scaled_epi(gate), g.epi[1] = scaled_epi(up);
  const int part_rows[1] = {wg::kBlockRows * g.blocks[0]};
  const size_t need = rows_swiglu_workspace_bytes(T, gate.N, gate.K, ks[0]);
  return wg_kernel_format(gate) == SFmt::NVFP4
             ? launch_wg_nt<SFmt::NVFP4, true>(g, x, int(T), int(gate.K), part_rows, need, out, s,
                                               workspace, workspace_bytes)
             : launch_wg_nt<SFmt::FP8, true>(g, x, int(T), int(gate.K), part_rows, need, out, s,
                                             workspace, workspace_bytes);
}

size_t scaled_wg_bytes(ScaledFormat f, int64_t N, int64_t K) {
  return size_t((N + wg::kBlockRows - 1) / wg::kBlockRows) * size_t(K / wg::kStageK) *
         size_t(f == ScaledFormat::NVFP4 ? wg::kBlobBytes : wg8::kBlobBytes);
}
cudaError_t scaled_to_wg(const ScaledWeight& w, uint8_t* blobs, cudaStream_t s) {
  if (!wg_format(w) || w.frag || w.wg || !scaled_args_ok(w) || w.K % wg::kStageK || !blobs ||
      reinterpret_cast<uintptr_t>(blobs) % 16)
    return cudaErrorInvalidValue;
  const int64_t items = (w.N + wg::kBlockRows - 1) / wg::kBlockRows * (w.K / wg::kStageK) * 128;
  if (w.format == ScaledFormat::NVFP4)
    nvfp4_to_wg_kernel<<<unsigned((items + 255) / 256), 256, 0, s>>>(
        w.data, static_cast<const uint8_t*>(w.scales), w.N, w.K, items, blobs);
  else
    fp8_to_wg_kernel<<<unsigned((items + 255) / 256), 256, 0, s>>>(w.data, w.N, w.K, items, blobs);
  return cudaGetLastError();
}

size_t nvfp4_frag_code_bytes(int64_t N, int64_t K) {
  return size_t((N + 15) / 16) * 16 * size_t(K / 2);
}
size_t nvfp4_frag_scale_bytes(int64_t N, int64_t K) {
  return size_t((N + 15) / 16) * 16 * size_t(K / 16);
}
cudaError_t nvfp4_to_frag(const ScaledWeight& w, uint8_t* codes, uint8_t* scales, cudaStream_t s) {
  if (w.format != ScaledFormat::NVFP4 || w.frag || !scaled_args_ok(w) || w.K % 64 || !codes ||
      !scales || reinterpret_cast<uintptr_t>(codes) % 16 || reinterpret_cast<uintptr_t>(scales) % 4)
    return cudaErrorInvalidValue;
  const int64_t items = (w.N + 15) / 16 * (w.K / 64) * 32;
  nvfp4_to_frag_kernel<<<unsigned((items + 255) / 256), 256, 0, s>>>(
      w.data, static_cast<const uint8_t*>(w.scales), w.N, w.K, items, codes, scales);
  return cudaGetLastError();
}

}  // namespace basalt::cuda
