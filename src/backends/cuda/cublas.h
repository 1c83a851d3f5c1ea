// cuBLAS through dlopen (no link-time dependency; CI and CPU machines never load it): the
// bench's GEMM roofline (rooflines.cpp) and the non-exact --fast-prefill matmuls
// (cuda_backend.cpp).
#pragma once
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>

namespace basalt::cuda {

struct Cublas {
  using Create = int (*)(void**);
  using Destroy = int (*)(void*);
  using SetStream = int (*)(void*, cudaStream_t);
  // cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
  //              Ctype, ldc, computeType, algo)
  using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int,
                         const void*, int, int, const void*, void*, int, int, int, int);
  Create create = nullptr;
  Destroy destroy = nullptr;
  SetStream set_stream = nullptr;
  GemmEx gemm = nullptr;

  static const Cublas* get() {
    static const Cublas lib = [] {
      Cublas c;
      void* h = nullptr;
      for (const char* so : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
        if ((h = dlopen(so, RTLD_NOW | RTLD_LOCAL))) break;
      if (!h) return c;
      c.create = reinterpret_cast<Create>(dlsym(h, "cublasCreate_v2"));
      c.destroy = reinterpret_cast<Destroy>(dlsym(h, "cublasDestroy_v2"));
      c.set_stream = reinterpret_cast<SetStream>(dlsym(h, "cublasSetStream_v2"));
      c.gemm = reinterpret_cast<GemmEx>(dlsym(h, "cublasGemmEx"));
      return c;
    }();
    return lib.create && lib.destroy && lib.set_stream && lib.gemm ? &lib : nullptr;
  }
  // Row-major y[M, N] = x[M, K] · W[N, K]ᵀ (bf16 in, f32 out and compute) == column-major
  // yᵀ = W · xᵀ.
  int matmul(void* h, const void* x, int64_t M, const void* w, int64_t N, int64_t K,
             float* y) const {
    constexpr int kOpT = 1, kOpN = 0, kBF16 = 14, kF32 = 0, kComputeF32 = 68, kDefault = -1;
    const float alpha = 1.0f, beta = 0.0f;
    return gemm(h, kOpT, kOpN, int(N), int(M), int(K), &alpha, w, kBF16, int(K), x, kBF16, int(K),
                &beta, y, kF32, int(N), kComputeF32, kDefault);
  }
};

}  // namespace basalt::cuda
