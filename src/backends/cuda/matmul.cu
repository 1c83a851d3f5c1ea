// y[T, N] = x[T, K] · W[N, K]ᵀ on the tensor cores (mma.sync.m16n8k16, bf16 in, f32 accumulate).
//
// Exactness: y[t, n] is the chain  acc = 0; for k0 = 0, 16, 32, ... < K: acc = mma(x[t, k0:k0+16],
// W[n, k0:k0+16], acc)  — the same instruction, the same operand positions (ldmatrix from shared
// memory in the standard fragment layout), the same k order, for every tiling below. An mma's
// output element depends only on its own row of A, column of B and accumulator, so a row's bits
// do not depend on which rows share its tile or on T (tests/gpu checks this bitwise). K tails
// are zero-filled in whole 8-element pieces (K % 8 == 0), identically in every variant.
//
// Split-K, fixed by the weight shape alone: K is cut into segments of matmul_kseg(N, K) elements
// (the last shorter);
// c_s is the chain above over segment s (starting from 0), and y = ((c_0 + c_1) + c_2) + ...
// (f32 adds, segment order). Tile128 and workspace-less calls fold the segments in registers
// as they go; with a workspace, the Rows variants give each (tile, segment) its own block (more
// bytes in flight for decode) and the tile's last block to finish adds the stored partials in
// segment order. Both are the same arithmetic, so the bits do not depend on the mode either.
//
// Tilings: the k-stage (BK) and the block shape only decide what sits in shared memory when;
// they never change the chain. Rows16x* (T padded to 16 rows, zero-filled by cp.async without
// touching memory) stream W for decode; Tile128 reuses tiles for prefill.
#include <cuda_bf16.h>

#include "backends/cuda/kernels.h"

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

size_t matmul_workspace_bytes(int64_t T, int64_t N, int64_t K) {
  const int64_t kseg = matmul_kseg(N, K), segs = (K + kseg - 1) / kseg;
  return counter_bytes() + size_t(segs) * size_t(T) * size_t(N) * 4;
}

namespace {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes = 0 fills the destination with zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
struct MmCfg {
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int kLds = BK + 8;  // row stride in bf16: +16 B keeps ldmatrix conflict-free
  static constexpr int kWm = BM / WARPS_M, kWn = BN / WARPS_N;
  static constexpr int kMt = kWm / 16, kNt = kWn / 8;
  static constexpr size_t kSmem = size_t(STAGES) * (BM + BN) * kLds * 2;
  static_assert(kWm % 16 == 0 && kWn % 8 == 0 && BK % 16 == 0);
};

// x [T, K], w [N, K] bf16; y [T, N] f32. Block (bx, by) owns columns bx*BN.., rows by*BM...
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(MmCfg<BM, BN, BK, WARPS_M, WARPS_N, STAGES>::kThreads)
    matmul_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                       float* __restrict__ y, int T, int N, int K, int kSegTiles,
                       float* __restrict__ part, int* __restrict__ counters) {
  using C = MmCfg<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* sa = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [STAGES][BM][kLds]
  auto* sb = sa + STAGES * BM * C::kLds;                  // [STAGES][BN][kLds]

  // Rows variants put the row blocks on x (launched next to each other, so the blocks that
  // share a weight tile run together and read it once from memory); Tile128 the columns.
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

  auto load_stage = [&](int stage, int kt) {
    const int k0 = (kt0 + kt) * BK;
    constexpr int kChunksRow = BK / 8;
    __nv_bfloat16* da = sa + stage * BM * C::kLds;
    for (int c = threadIdx.x; c < BM * kChunksRow; c += C::kThreads) {
      const int r = c / kChunksRow, kc = (c % kChunksRow) * 8;
      const bool ok = (m0 + r < T) && (k0 + kc < K);
      cp_async16(da + r * C::kLds + kc, ok ? x + size_t(m0 + r) * K + k0 + kc : x, ok ? 16 : 0);
    }
    __nv_bfloat16* db = sb + stage * BN * C::kLds;
    for (int c = threadIdx.x; c < BN * kChunksRow; c += C::kThreads) {
      const int r = c / kChunksRow, kc = (c % kChunksRow) * 8;
      const bool ok = (n0 + r < N) && (k0 + kc < K);
      cp_async16(db + r * C::kLds + kc, ok ? w + size_t(n0 + r) * K + k0 + kc : w, ok ? 16 : 0);
    }
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

#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < KT) load_stage(st, st);
    cp_async_commit();
  }

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
    if (!split && ((kt + 1) % kSegTiles == 0 || kt + 1 == KT)) {
      const bool first = kt < kSegTiles;
#pragma unroll
      for (int i = 0; i < C::kMt; ++i)
#pragma unroll
        for (int j = 0; j < C::kNt; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if constexpr (kFoldInY) {
              const int r = out_row(i, e), c = out_col(j, e);
              if (r < T && c < N) {
                float* o = y + size_t(r) * N + c;
                *o = first ? acc[i][j][e] : __fadd_rn(*o, acc[i][j][e]);
              }
            } else {
              tot[i][j][e] = first ? acc[i][j][e] : __fadd_rn(tot[i][j][e], acc[i][j][e]);
            }
            acc[i][j][e] = 0.0f;
          }
    }
  }
  cp_async_wait<0>();

  if (split) {  // store this segment's partial; the tile's last block adds them in order
    float* p = part + size_t(blockIdx.z) * size_t(T) * N;
#pragma unroll
    for (int i = 0; i < C::kMt; ++i)
#pragma unroll
      for (int j = 0; j < C::kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = out_row(i, e), c = out_col(j, e);
          if (r < T && c < N) p[size_t(r) * N + c] = acc[i][j][e];
        }
    __threadfence();
    __syncthreads();
    __shared__ int is_last;
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) is_last = atomicAdd(&counters[tile], 1) == int(gridDim.z) - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < C::kMt; ++i)
#pragma unroll
      for (int j = 0; j < C::kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = out_row(i, e), c = out_col(j, e);
          if (r < T && c < N) {
            const size_t o = size_t(r) * N + c;
            float v = __ldcg(part + o);
            for (int z = 1; z < int(gridDim.z); ++z)
              v = __fadd_rn(v, __ldcg(part + size_t(z) * size_t(T) * N + o));
            tot[i][j][e] = v;
          }
        }
    if (threadIdx.x == 0) counters[tile] = 0;  // ready for the next call
  }
  if constexpr (!kFoldInY)  // (with kFoldInY, y already holds the folded sum)
#pragma unroll
    for (int i = 0; i < C::kMt; ++i)
#pragma unroll
      for (int j = 0; j < C::kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = out_row(i, e), c = out_col(j, e);
          if (r < T && c < N) y[size_t(r) * N + c] = tot[i][j][e];
        }
}

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
cudaError_t launch(const bf16_bits* x, int T, const bf16_bits* w, int N, int K, float* y,
                   cudaStream_t s, void* ws, size_t ws_bytes) {
  using C = MmCfg<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  auto* kern = matmul_bf16_kernel<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  static bool attr_set = false;  // per instantiation; idempotent, so a race is harmless
  if (!attr_set) {
    const cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmem));
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  const int64_t kseg = matmul_kseg(N, K);
  const int segs = int((K + kseg - 1) / kseg);
  // Segments are whole k-stages of every tiling (kseg is a multiple of 256), or all of K.
  const int seg_tiles = segs == 1 ? (K + BK - 1) / BK : int(kseg / BK);
  const int64_t tiles = int64_t((N + BN - 1) / BN) * ((T + BM - 1) / BM);
  const bool split = BM == 16 && segs > 1 && tiles <= kMaxTiles && ws &&
                     ws_bytes >= matmul_workspace_bytes(T, N, K);
  const unsigned col_blocks = unsigned((N + BN - 1) / BN), row_blocks = unsigned((T + BM - 1) / BM);
  const dim3 grid(BM == 16 ? row_blocks : col_blocks, BM == 16 ? col_blocks : row_blocks,
                  unsigned(split ? segs : 1));
  int* counters = static_cast<int*>(ws);
  float* part =
      split ? reinterpret_cast<float*>(static_cast<char*>(ws) + counter_bytes()) : nullptr;
  kern<<<grid, C::kThreads, C::kSmem, s>>>(reinterpret_cast<const __nv_bfloat16*>(x),
                                           reinterpret_cast<const __nv_bfloat16*>(w), y, T, N, K,
                                           seg_tiles, part, counters);
  return cudaGetLastError();
}

// The grouped matmul of the MoE experts (kernels.h moe_matmul): the Rows16x32 tiling (16 rows ×
// 32 columns, 4 warps, segments folded in registers; k-stage BK with STAGES stages: 128 × 4 as
// Rows16x32, 256 × 6 as Rows16x32Deep) with each block's 16 rows gathered from a tile of
// (row, rank) pairs of one expert and the weight taken from that expert's pointer. Per output
// element the chain is exactly matmul_bf16's (same mma, same fragment layout, same k order, same
// segments and fold), so a pair's row has the bits of a T=1 matmul of that row with the
// expert's matrix.
constexpr int kMoeBM = 16, kMoeBN = 32, kMoeThreads = 128;
template <int BK, int STAGES>
struct MoeCfg {
  static constexpr int kLds = BK + 8;
  static constexpr size_t kSmem = size_t(STAGES) * (kMoeBM + kMoeBN) * kLds * 2;
};

template <int kMoeBK, int kMoeStages>
__global__ void __launch_bounds__(kMoeThreads)
    moe_matmul_kernel(const __nv_bfloat16* __restrict__ x, int row_div,
                      const __nv_bfloat16* const* __restrict__ w0,
                      const __nv_bfloat16* const* __restrict__ w1, float* __restrict__ y0,
                      float* __restrict__ y1, const int32_t* __restrict__ order,
                      const int32_t* __restrict__ tiles, int max_tiles, int N, int K,
                      int kSegTiles) {
  constexpr int kMoeLds = MoeCfg<kMoeBK, kMoeStages>::kLds;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* sa = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [STAGES][BM][kLds]
  auto* sb = sa + kMoeStages * kMoeBM * kMoeLds;          // [STAGES][BN][kLds]
  __shared__ int pair_of_row[kMoeBM];

  const int tile = blockIdx.x;
  const int rows = tiles[2 * max_tiles + tile];
  if (rows <= 0) return;  // an unused tile (the grid is sized by T alone)
  const int expert = tiles[tile], first = tiles[max_tiles + tile];
  const __nv_bfloat16* __restrict__ w = (blockIdx.z == 0 ? w0 : w1)[expert];
  float* __restrict__ y = blockIdx.z == 0 ? y0 : y1;
  if (threadIdx.x < kMoeBM)
    pair_of_row[threadIdx.x] = int(threadIdx.x) < rows ? order[first + threadIdx.x] : -1;
  __syncthreads();

  const int n0 = blockIdx.y * kMoeBN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wn = warp * 8;  // each warp: the 16 rows × 8 columns at wn
  const int KT = (K + kMoeBK - 1) / kMoeBK;

  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kMoeBK;
    constexpr int kChunksRow = kMoeBK / 8;
    __nv_bfloat16* da = sa + stage * kMoeBM * kMoeLds;
    for (int c = threadIdx.x; c < kMoeBM * kChunksRow; c += kMoeThreads) {
      const int r = c / kChunksRow, kc = (c % kChunksRow) * 8;
      const int p = pair_of_row[r];
      const bool ok = p >= 0 && k0 + kc < K;
      cp_async16(da + r * kMoeLds + kc, ok ? x + size_t(p / row_div) * K + k0 + kc : x,
                 ok ? 16 : 0);
    }
    __nv_bfloat16* db = sb + stage * kMoeBN * kMoeLds;
    for (int c = threadIdx.x; c < kMoeBN * kChunksRow; c += kMoeThreads) {
      const int r = c / kChunksRow, kc = (c % kChunksRow) * 8;
      const bool ok = (n0 + r < N) && (k0 + kc < K);
      cp_async16(db + r * kMoeLds + kc, ok ? w + size_t(n0 + r) * K + k0 + kc : w, ok ? 16 : 0);
    }
  };

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, tot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int st = 0; st < kMoeStages - 1; ++st) {
    if (st < KT) load_stage(st, st);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kMoeStages - 2>();
    __syncthreads();
    if (kt + kMoeStages - 1 < KT)
      load_stage((kt + kMoeStages - 1) % kMoeStages, kt + kMoeStages - 1);
    cp_async_commit();
    const __nv_bfloat16* ta = sa + (kt % kMoeStages) * kMoeBM * kMoeLds;
    const __nv_bfloat16* tb = sb + (kt % kMoeStages) * kMoeBN * kMoeLds;
#pragma unroll
    for (int kk = 0; kk < kMoeBK; kk += 16) {
      uint32_t af[4], bfr[2];
      ldmatrix_x4(af, ta + (lane & 15) * kMoeLds + kk + (lane >> 4) * 8);
      ldmatrix_x2(bfr, tb + (wn + (lane & 7)) * kMoeLds + kk + ((lane >> 3) & 1) * 8);
      mma_bf16(acc, af, bfr[0], bfr[1]);
    }
    if ((kt + 1) % kSegTiles == 0 || kt + 1 == KT) {  // end of a segment: fold, restart
      const bool seg0 = kt < kSegTiles;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        tot[e] = seg0 ? acc[e] : __fadd_rn(tot[e], acc[e]);
        acc[e] = 0.0f;
      }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int r = (lane >> 2) + (e >> 1) * 8, c = n0 + wn + (lane & 3) * 2 + (e & 1);
    if (r < rows && c < N) y[size_t(pair_of_row[r]) * N + c] = tot[e];
  }
}

template <int BK, int STAGES>
cudaError_t launch_moe(const bf16_bits* x, int64_t row_div, const bf16_bits* const* w0,
                       const bf16_bits* const* w1, int64_t N, int64_t K, float* y0, float* y1,
                       const int32_t* order, const int32_t* tiles, int64_t max_tiles,
                       cudaStream_t s) {
  auto* kern = moe_matmul_kernel<BK, STAGES>;
  constexpr size_t smem = MoeCfg<BK, STAGES>::kSmem;
  static bool attr_set = false;  // per instantiation; idempotent, so a race is harmless
  if (!attr_set) {
    const cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    attr_set = true;
  }
  // matmul_bf16's segments for this weight shape, in k-stages of BK (kseg is a multiple of 256).
  const int64_t kseg = matmul_kseg(N, K);
  const int seg_tiles = kseg >= K ? int((K + BK - 1) / BK) : int(kseg / BK);
  const dim3 grid(unsigned(max_tiles), unsigned((N + kMoeBN - 1) / kMoeBN), w1 ? 2u : 1u);
  kern<<<grid, kMoeThreads, smem, s>>>(reinterpret_cast<const __nv_bfloat16*>(x), int(row_div),
                                       reinterpret_cast<const __nv_bfloat16* const*>(w0),
                                       reinterpret_cast<const __nv_bfloat16* const*>(w1), y0, y1,
                                       order, tiles, int(max_tiles), int(N), int(K), seg_tiles);
  return cudaGetLastError();
}

}  // namespace

cudaError_t matmul_bf16(const bf16_bits* x, int64_t T, const bf16_bits* w, int64_t N, int64_t K,
                        float* y, cudaStream_t s, MatmulKernel kernel, void* workspace,
                        size_t workspace_bytes) {
  if (T < 0 || N <= 0 || K <= 0 || K % 8 || T > 0x7fffffff || N > 0x7fffffff || K > 0x7fffffff ||
      (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16)
    return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  // A tiling choice only: every variant gives the same bits (tests/gpu). Measured on the H200
  // (docs/cuda.md): split-K pays where N / 32 blocks leave SMs idle; without it the deep pipeline
  // does best there.
  if (kernel == MatmulKernel::Auto) {
    const bool ws_ok = workspace && workspace_bytes >= matmul_workspace_bytes(T, N, K);
    kernel = T > 64              ? MatmulKernel::Tile128
             : ws_ok || N > 8192 ? MatmulKernel::Rows16x32
                                 : MatmulKernel::Rows16x32Deep;
  }
  switch (kernel) {
    case MatmulKernel::Rows16x16:
      return launch<16, 16, 256, 1, 2, 4>(x, int(T), w, int(N), int(K), y, s, workspace,
                                          workspace_bytes);
    case MatmulKernel::Rows16x32Deep:
      return launch<16, 32, 256, 1, 4, 6>(x, int(T), w, int(N), int(K), y, s, workspace,
                                          workspace_bytes);
    case MatmulKernel::Tile128:
      return launch<128, 128, 32, 2, 4, 4>(x, int(T), w, int(N), int(K), y, s, nullptr, 0);
    case MatmulKernel::Rows16x32:
    default:
      return launch<16, 32, 128, 1, 4, 4>(x, int(T), w, int(N), int(K), y, s, workspace,
                                          workspace_bytes);
  }
}

cudaError_t moe_matmul(const bf16_bits* x, int64_t row_div, const bf16_bits* const* w0,
                       const bf16_bits* const* w1, int64_t N, int64_t K, float* y0, float* y1,
                       const int32_t* order, const int32_t* tiles, int64_t max_tiles,
                       cudaStream_t s, MatmulKernel kernel) {
  if (row_div <= 0 || N <= 0 || K <= 0 || K % 8 || N > 0x7fffffff || K > 0x7fffffff ||
      max_tiles < 0 || max_tiles > 0x7fffffff || (N + kMoeBN - 1) / kMoeBN > 65535 || !w0 || !y0 ||
      (w1 && !y1) || reinterpret_cast<uintptr_t>(x) % 16)
    return cudaErrorInvalidValue;
  if (max_tiles == 0) return cudaSuccess;
  // Both tilings are the same chain, so the choice never changes a bit (Deep measured slower on
  // the H200 for T = 1 .. 2048: it is not the default).
  if (kernel == MatmulKernel::Rows16x32Deep)
    return launch_moe<256, 6>(x, row_div, w0, w1, N, K, y0, y1, order, tiles, max_tiles, s);
  return launch_moe<128, 4>(x, row_div, w0, w1, N, K, y0, y1, order, tiles, max_tiles, s);
}

}  // namespace basalt::cuda
