// Rooflines for `basalt bench` (cuda_backend.h): the device's copy bandwidth and cuBLAS's
// GEMM rate, measured on the device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "backends/cuda/cublas.h"
#include "backends/cuda/cuda_backend.h"
#include "core/error.h"

namespace basalt::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("[cuda] {}: {}", what, cudaGetErrorString(e));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of `run` on the default stream over 10 timed runs after one warm-up.
template <class F>
double median_seconds(F&& run) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> t;
  for (int r = 0; r < 11; ++r) {
    cudaEventRecord(e0);
    run();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r) t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(t);
}

}  // namespace

double measure_copy_bandwidth(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  const size_t n = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, n), "cudaMalloc");
  check(cudaMalloc(&b, n), "cudaMalloc");
  const double sec =
      median_seconds([&] { check(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice), "copy"); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(n) / sec;
}

double measure_cublas_gemm(int64_t M, int64_t N, int64_t K, int device) {
  const Cublas* cb = Cublas::get();
  if (!cb) return 0.0;
  check(cudaSetDevice(device), "cudaSetDevice");
  void* h = nullptr;
  if (cb->create(&h) != 0) return 0.0;
  void *A = nullptr, *B = nullptr, *C = nullptr;
  check(cudaMalloc(&A, size_t(M * K) * 2), "cudaMalloc");
  check(cudaMalloc(&B, size_t(N * K) * 2), "cudaMalloc");
  check(cudaMalloc(&C, size_t(M * N) * 4), "cudaMalloc");
  cudaMemset(A, 0x3c, size_t(M * K) * 2);  // ~1.0 in bf16: finite, non-zero
  cudaMemset(B, 0x3c, size_t(N * K) * 2);
  auto once = [&] { return cb->matmul(h, A, M, B, N, K, static_cast<float*>(C)); };
  double rate = 0.0;
  if (once() == 0) rate = 2.0 * double(M) * double(N) * double(K) / median_seconds(once);
  cb->destroy(h);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  return rate;
}

}  // namespace basalt::cuda
