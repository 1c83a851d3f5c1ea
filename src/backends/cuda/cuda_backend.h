// The CUDA backend (Hopper, sm_90a): ops/backend.h on device memory, running the kernels of
// kernels.h on one stream. Weights are uploaded once as bf16 (F32/F16 checkpoints are rounded to
// bf16 at upload); activations that feed matmuls and the KV cache are bf16; the residual stream
// and matmul outputs f32. Passes of up to `graph_max_rows` rows are recorded as CUDA graphs the
// second time their key is seen and replayed after that.
#pragma once
#include <cstdint>
#include <memory>

#include "ops/backend.h"

namespace basalt::cuda {

struct CudaOptions {
  int device = 0;
  bool graphs = true;
  int64_t graph_max_rows = 64;
  // Not exact: passes of more than 64 rows run their matmuls on cuBLAS (its own reduction
  // order, so a position's logits depend on the prefill chunking). Off by default.
  bool fast_prefill = false;
  // Time every launch between two events (graphs off) and print a per-op table to stderr when
  // the backend is destroyed. Also set by BASALT_CUDA_PROFILE=1.
  bool profile = false;
  // Fused launches that change no bits: rope + kv_write, the prefill gate / up products with
  // SwiGLU. Off (each op alone, for A/B measurement) with BASALT_CUDA_FUSE=0.
  bool fuse = true;
  // The MoE combine folded into the down product's last blocks (the same bits; H100,
  // 2026-12-07: 788-790 against 786-789 tok/s on qwen3-30b-a3b:12, within noise); a combine
  // launch, for A/B measurement, with BASALT_CUDA_MOE_COMBINE_FOLD=0.
  bool combine_fold = true;
  // Decode's split attention merged by the split kernel's last blocks instead of a merge launch
  // (the same bits). Off: measured slower (H100, 2026-12-07, graphs: qwen3-30b-a3b:12 752 against
  // 789 tok/s, llama-3.1-8b 169.6 against 171.5); BASALT_CUDA_MERGE_FOLD=1 turns it on.
  bool merge_fold = false;
  // Decode passes over scaled weights in the wgmma layout: q / k / v in one launch and gate / up
  // with SwiGLU in one (the same bits as a launch each and swiglu). Off, for A/B measurement,
  // with BASALT_CUDA_SCALED_GROUP=0; the gate / up launch alone off with
  // BASALT_CUDA_SCALED_SWIGLU=0.
  bool scaled_group = true;
  bool scaled_swiglu = true;
  // Attention of a pass whose rows are each a sequence of its own (a serving decode step) is
  // told so (AttnArgs::rows_own_seq: Auto's split kernel; the same bits). Off, for A/B
  // measurement, with BASALT_CUDA_ATTN_BATCH=0.
  bool attn_batch_hint = true;
  // Benchmarks: passes of more than 64 rows whose attention plan is Auto run this kernel
  // instead of Auto's (BlockWGPV; Block on an FP8 cache):
  // BASALT_CUDA_ATTN=auto|fused|block|blockwg|blockwgpv (another value: make_cuda_backend
  // throws). Every choice gives the same bits. kernels.h's AttnKernel value (0: Auto).
  uint8_t attn_kernel = 0;
};

// Throws basalt::Error when no usable device (sm_90) is present.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& opt = {});

// Rooflines for `basalt bench`, measured on `device`:
// bytes read + written per second by a 1 GiB device-to-device copy (median of 10);
double measure_copy_bandwidth(int device = 0);
// FLOP/s of cuBLAS bf16 GEMM (f32 accumulate) at M×N×K (median of 10), loaded with dlopen;
// 0 when libcublas cannot be loaded.
double measure_cublas_gemm(int64_t M, int64_t N, int64_t K, int device = 0);

}  // namespace basalt::cuda
