// Timings of the CUDA kernels on the device, against the copy bandwidth measured in the same run.
// CUDA events around each launch; warm-up, then the median of many; weights rotate among
// copies whose total exceeds the L2 (60 MB on an H200), so decode timings read device memory.
//   bench_cuda_kernels            (prints a table; exits 0 with SKIP when no GPU)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/kernels.h"

namespace bc = basalt::cuda;

#define CK(expr)                                                                               \
  do {                                                                                         \
    const cudaError_t e_ = (expr);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "CUDA error %s at line %d: %s\n", cudaGetErrorString(e_), __LINE__, \
                   #expr);                                                                     \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace {

// Median milliseconds of fn(i) over reps launches after warm-up launches.
template <typename F>
double time_ms(F fn, int warm, int reps) {
  for (int i = 0; i < warm; ++i) fn(i);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    fn(warm + i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// Random bf16 in [-1, 1) on the device, from a host pattern (never zeros).
void fill_bf16(uint16_t* d, size_t n) {
  std::vector<uint16_t> h(std::min<size_t>(n, 1 << 24));
  std::mt19937 rng(7);
  for (auto& v : h) v = uint16_t(0x3c00 + (rng() % 0x300)) | uint16_t((rng() & 1) << 15);
  for (size_t off = 0; off < n; off += h.size())
    CK(cudaMemcpy(d + off, h.data(), std::min(h.size(), n - off) * 2, cudaMemcpyHostToDevice));
}

}  // namespace

int main() {
  const auto devs = bc::cuda_devices();
  if (devs.empty()) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  std::printf("device: %s, %d SMs\n", devs[0].name.c_str(), devs[0].sm_count);

  // Copy bandwidth: 1 GiB device to device, bytes read + written.
  const size_t copy_bytes = size_t(1) << 30;
  void *ca, *cb;
  CK(cudaMalloc(&ca, copy_bytes));
  CK(cudaMalloc(&cb, copy_bytes));
  CK(cudaMemset(ca, 0x5a, copy_bytes));
  const double copy_ms = time_ms(
      [&](int) { CK(cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("copy 1 GiB d2d: %.3f ms, %.0f GB/s (read + write)\n", copy_ms, copy_gbs);
  CK(cudaFree(ca));
  CK(cudaFree(cb));

  struct Shape {
    int64_t N, K;
  };
  std::printf("\n%-10s %6s %6s %6s %-10s %10s %9s %7s %9s\n", "op", "T", "N", "K", "kernel",
              "median_us", "GB/s", "%copy", "TFLOP/s");
  for (Shape sh : {Shape{4096, 4096}, Shape{14336, 4096}, Shape{4096, 14336}}) {
    const size_t wbytes = size_t(sh.N) * sh.K * 2;
    const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / wbytes + 1));
    uint16_t* w;
    CK(cudaMalloc(&w, wbytes * copies));
    fill_bf16(w, wbytes / 2 * copies);
    for (int64_t T : {1, 64, 2048}) {
      uint16_t* x;
      float* y;
      CK(cudaMalloc(&x, size_t(T) * sh.K * 2));
      CK(cudaMalloc(&y, size_t(T) * sh.N * 4));
      fill_bf16(x, size_t(T) * sh.K);
      const size_t ws_bytes = bc::matmul_workspace_bytes(T, sh.N, sh.K);
      void* ws = nullptr;
      CK(cudaMalloc(&ws, ws_bytes));
      CK(cudaMemset(ws, 0, ws_bytes));
      for (auto kern : {bc::MatmulKernel::Rows16x32, bc::MatmulKernel::Rows16x16,
                        bc::MatmulKernel::Rows16x32Deep, bc::MatmulKernel::Tile128})
        for (bool split : {false, true}) {
          if ((T == 1 && kern == bc::MatmulKernel::Tile128) ||
              (T == 2048 && kern != bc::MatmulKernel::Tile128))
            continue;
          if (split && T == 2048) continue;
          const double ms = time_ms(
              [&](int i) {
                CK(bc::matmul_bf16(x, T, w + (wbytes / 2) * (i % copies), sh.N, sh.K, y, nullptr,
                                   kern, split ? ws : nullptr, split ? ws_bytes : 0));
              },
              5, T <= 64 ? 200 : 30);
          const double bytes = double(wbytes) + double(T) * sh.K * 2 + double(T) * sh.N * 4;
          const double gbs = bytes / (ms * 1e-3) / 1e9;
          const double tf = 2.0 * T * sh.N * sh.K / (ms * 1e-3) / 1e12;
          const char* kn =
              kern == bc::MatmulKernel::Rows16x32       ? (split ? "R16x32+sK" : "Rows16x32")
              : kern == bc::MatmulKernel::Rows16x16     ? (split ? "R16x16+sK" : "Rows16x16")
              : kern == bc::MatmulKernel::Rows16x32Deep ? (split ? "R16x32D+sK" : "R16x32Deep")
                                                        : "Tile128";
          std::printf("%-10s %6lld %6lld %6lld %-10s %10.2f %9.0f %6.1f%% %9.1f\n", "matmul",
                      (long long)T, (long long)sh.N, (long long)sh.K, kn, ms * 1e3, gbs,
                      100.0 * gbs / copy_gbs, tf);
        }
      CK(cudaFree(x));
      CK(cudaFree(y));
      CK(cudaFree(ws));
    }
    CK(cudaFree(w));
  }

  // Decode attention: one query row, H=32, Hkv=8, D=128 (Llama-3.1-8B), several contexts.
  for (int64_t ctx : {512, 4096, 32768}) {
    const int64_t H = 32, Hkv = 8, D = 128;
    uint16_t *k, *v, *out;
    float *q, *ws;
    const size_t kv = size_t(ctx) * Hkv * D;
    CK(cudaMalloc(&k, kv * 2));
    CK(cudaMalloc(&v, kv * 2));
    fill_bf16(k, kv);
    fill_bf16(v, kv);
    CK(cudaMalloc(&q, H * D * 4));
    CK(cudaMemset(q, 0x3c, H * D * 4));
    CK(cudaMalloc(&out, H * D * 2));
    const size_t wsb = bc::attention_workspace_bytes(1, H, D, ctx);
    CK(cudaMalloc(&ws, wsb));
    bc::AttnArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.out = out;
    a.T = 1;
    a.H = H;
    a.Hkv = Hkv;
    a.D = D;
    a.pos0 = ctx - 1;
    a.scale = 0.088f;
    a.workspace = ws;
    a.workspace_bytes = wsb;
    const double ms = time_ms([&](int) { CK(bc::attention(a, nullptr)); }, 5, 100);
    const double gbs = 2.0 * kv * 2 / (ms * 1e-3) / 1e9;
    std::printf("%-10s %6d %6lld %6s %-10s %10.2f %9.0f %6.1f%%\n", "attn-dec", 1, (long long)ctx,
                "-", "auto", ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(q));
    CK(cudaFree(out));
    CK(cudaFree(ws));
  }
  return 0;
}
