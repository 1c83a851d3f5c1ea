// Does Hopper's wgmma give the bits of basalt's mma.sync chains? Every exact matrix product of the
// CUDA backend is the chain acc = 0; for k0 = 0, 16, ...: acc = mma.sync.m16n8k16(x[t, k0:+16],
// W[n, k0:+16], acc) (kernels.h). A prefill GEMM on wgmma keeps the exactness contract only if
// its k16 steps reproduce that chain bit for bit. This probe runs the same chains through
//   ref    mma.sync.m16n8k16, x as A, W as B (what the decode kernels run)
//   swap   mma.sync.m16n8k16, W as A, x as B
//   wg     wgmma.m64nNk16, x as A, W as B (N = 8, 16), operands from shared memory
//   wg'    wgmma.m64nNk16, W as A, x as B
// on random bf16 data (K = 4096, and on data with a wide exponent spread), checks each against
// an f64 reference (so a wrong operand layout shows as an error, not as "different bits"), and
// counts the elements whose bits differ from `ref`. Prints one line per variant; exits 0.
//   wgmma_probe [mn]       (SKIP when there is no CUDA device)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/mma.cuh"

using basalt::cuda::mma_bf16;

#define CK(expr)                                                                          \
  do {                                                                                    \
    const cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s at line %d\n", cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace {

constexpr int kRows = 64;  // rows of x (t) and of W (n) compared

__device__ __forceinline__ uint32_t pair(const uint16_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 16);
}

// mma.sync chains, one warp per 16 × 8 output tile, fragments read straight from global memory
// in the m16n8k16 register layout. swap = 0: out[t][n] with x as A; 1: W as A (out still [t][n]).
__global__ void mma_sync_chain(const uint16_t* x, const uint16_t* w, float* out, int K, int swap) {
  const int lane = threadIdx.x & 31, warp = blockIdx.x;
  const int tile_m = warp / (kRows / 8), tile_n = warp % (kRows / 8);  // A rows 16·m, B cols 8·n
  const int g = lane >> 2, c = 2 * (lane & 3);
  const uint16_t* A = swap ? w : x;
  const uint16_t* B = swap ? x : w;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k0 = 0; k0 < K; k0 += 16) {
    const uint16_t* a0 = A + size_t(16 * tile_m + g) * K + k0 + c;
    const uint16_t* a1 = a0 + size_t(8) * K;
    const uint32_t af[4] = {pair(a0), pair(a1), pair(a0 + 8), pair(a1 + 8)};
    const uint16_t* b = B + size_t(8 * tile_n + g) * K + k0 + c;
    mma_bf16(acc, af, pair(b), pair(b + 8));
  }
  for (int e = 0; e < 4; ++e) {
    const int i = 16 * tile_m + g + 8 * (e >> 1), j = 8 * tile_n + c + (e & 1);
    // i indexes A's rows, j B's rows: out is [t][n]
    if (swap)
      out[size_t(j) * kRows + i] = acc[e];
    else
      out[size_t(i) * kRows + j] = acc[e];
  }
}

// A shared-memory matrix descriptor, no swizzle: core matrices of 8 rows × 16 bytes.
__device__ __forceinline__ uint64_t desc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint64_t a = uint64_t(__cvta_generic_to_shared(p));
  return ((a >> 4) & 0x3fff) | (uint64_t((lbo >> 4) & 0x3fff) << 16) |
         (uint64_t((sbo >> 4) & 0x3fff) << 32);
}

template <int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], uint64_t da, uint64_t db);
template <>
__device__ __forceinline__ void wgmma<8>(float (&d)[4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(da), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma<16>(float (&d)[8], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, "
      "p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "l"(da), "l"(db));
}

// One warpgroup: rows 0..63 of A against rows n0..n0+N-1 of B (both K-major), chain over K.
// Shared memory per k16 slice: core matrix (row group r, k half h) at (2r + h) · 128 bytes.
// out[t][n] (swap: A = W, B = x). lbo_k: 1 if the descriptor's leading offset is the K step.
template <int N>
__global__ void __launch_bounds__(128)
    wgmma_chain(const uint16_t* x, const uint16_t* w, float* out, int K, int swap, int lbo_k) {
  __shared__ __align__(128) uint16_t sa[kRows * 16];
  __shared__ __align__(128) uint16_t sb[N * 16];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint16_t* A = swap ? w : x;
  const uint16_t* B = swap ? x : w;
  const int n0 = blockIdx.x * N;
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  const uint32_t kstep = 128, rstep = 256;
  for (int k0 = 0; k0 < K; k0 += 16) {
    // 16-byte pieces: row r, half h -> core (r / 8, h), row r % 8 within it.
    for (int i = tid; i < kRows * 2; i += 128) {
      const int r = i >> 1, h = i & 1;
      *reinterpret_cast<uint4*>(sa + ((2 * (r >> 3) + h) * 64 + (r & 7) * 8)) =
          *reinterpret_cast<const uint4*>(A + size_t(r) * K + k0 + 8 * h);
    }
    for (int i = tid; i < N * 2; i += 128) {
      const int r = i >> 1, h = i & 1;
      *reinterpret_cast<uint4*>(sb + ((2 * (r >> 3) + h) * 64 + (r & 7) * 8)) =
          *reinterpret_cast<const uint4*>(B + size_t(n0 + r) * K + k0 + 8 * h);
    }
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    const uint64_t da = lbo_k ? desc(sa, kstep, rstep) : desc(sa, rstep, kstep);
    const uint64_t db = lbo_k ? desc(sb, kstep, rstep) : desc(sb, rstep, kstep);
    wgmma<N>(d, da, db);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    __syncthreads();
  }
  const int g = lane >> 2, c = 2 * (lane & 3);
  for (int j = 0; j < N / 8; ++j)
    for (int e = 0; e < 4; ++e) {
      const int i = 16 * warp + g + 8 * (e >> 1), jj = n0 + 8 * j + c + (e & 1);
      const float v = d[4 * j + e];
      if (swap)
        out[size_t(jj) * kRows + i] = v;
      else
        out[size_t(i) * kRows + jj] = v;
    }
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  // The descriptor's leading byte offset is the step between the two 8-element halves of a k16
  // slice (CUTLASS's K-major INTERLEAVE layout); "mn" tries the other reading (an error there
  // ends the process, hence one reading per run).
  const int lbo_k = argc > 1 && std::strcmp(argv[1], "mn") == 0 ? 0 : 1;
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  const int K = 4096;
  for (int data = 0; data < 2; ++data) {
    std::mt19937 rng(1234 + data);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_int_distribution<int> ex(-12, 12);
    std::vector<uint16_t> hx(size_t(kRows) * K), hw(size_t(kRows) * K);
    for (auto* v : {&hx, &hw})
      for (auto& e : *v) e = to_bf16(data ? std::ldexp(nd(rng), ex(rng)) : nd(rng));
    std::vector<double> ref(size_t(kRows) * kRows);
    double amax = 0;
    for (int t = 0; t < kRows; ++t)
      for (int n = 0; n < kRows; ++n) {
        double s = 0;
        for (int k = 0; k < K; ++k)
          s += double(from_bf16(hx[size_t(t) * K + k])) * from_bf16(hw[size_t(n) * K + k]);
        ref[size_t(t) * kRows + n] = s;
        amax = std::max(amax, std::fabs(s));
      }
    uint16_t *x, *w;
    float* out;
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMalloc(&w, hw.size() * 2));
    CK(cudaMalloc(&out, ref.size() * 4));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
    auto fetch = [&] {
      std::vector<float> h(ref.size());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost));
      return h;
    };
    CK(cudaMemset(out, 0xff, ref.size() * 4));
    mma_sync_chain<<<(kRows / 16) * (kRows / 8), 32>>>(x, w, out, K, 0);
    const std::vector<float> base = fetch();
    auto report = [&](const char* name, const std::vector<float>& got) {
      double err = 0;
      int differ = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::fabs(double(got[i]) - ref[i]) / amax);
        differ += std::memcmp(&got[i], &base[i], 4) != 0;
      }
      std::printf("%s data=%s: max err vs f64 %.2e of max|y|, %d of %zu elements differ from "
                  "mma.sync x·W bitwise\n",
                  name, data ? "wide-exponent" : "normal", err, differ, got.size());
    };
    report("mma.sync x as A (ref)", base);
    CK(cudaMemset(out, 0xff, ref.size() * 4));
    mma_sync_chain<<<(kRows / 16) * (kRows / 8), 32>>>(x, w, out, K, 1);
    report("mma.sync W as A      ", fetch());
    for (int swap = 0; swap < 2; ++swap) {
      char name[96];
      CK(cudaMemset(out, 0xff, ref.size() * 4));
      wgmma_chain<8><<<kRows / 8, 128>>>(x, w, out, K, swap, lbo_k);
      std::snprintf(name, sizeof name, "wgmma m64n8k16 %s (lbo=%s)", swap ? "W as A" : "x as A",
                    lbo_k ? "k" : "mn");
      report(name, fetch());
      CK(cudaMemset(out, 0xff, ref.size() * 4));
      wgmma_chain<16><<<kRows / 16, 128>>>(x, w, out, K, swap, lbo_k);
      std::snprintf(name, sizeof name, "wgmma m64n16k16 %s (lbo=%s)", swap ? "W as A" : "x as A",
                    lbo_k ? "k" : "mn");
      report(name, fetch());
    }
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(out));
  }
  return 0;
}
