// Programmatic dependent launch (Hopper): overlapping a kernel's start with the end of the
// kernel before it in the stream. Changes no result, only when blocks start.
//
// A kernel launched with launch_pdl may be scheduled while the previous kernel still runs. Until
// it calls pdl_wait() it may only read memory no kernel writes (uploaded weights); pdl_wait()
// returns once the previous kernel has completed and its writes are visible, and only then may it
// read activations, or write anything. Called in a kernel launched without the attribute, it
// returns at once.
//
// pdl_trigger() lets the next kernel, if launched with launch_pdl, be scheduled as soon as every
// block of this grid has started (or exited), instead of at this grid's end. It is issued first
// thing by the matmuls, and right after their (plainly launched: immediate) pdl_wait() by the
// small kernels, so the next matrix product starts streaming its weights while they finish.
// Transitively safe: a kernel's pdl_wait() waits for the previous kernel, which itself completed
// only after its own pdl_wait().
//
// BASALT_CUDA_PDL=0 launches everything plainly (for measuring the difference).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace basalt::cuda {

__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

bool pdl_enabled();  // elementwise.cu: BASALT_CUDA_PDL, read once (default on)

// The small kernels (elementwise.cu, attention.cu, hybrid.cu, moe_matmul) begin with pdl_wait()
// and then pdl_trigger(). Launched plainly, the wait returns at once and the next matmul is let in
// at their start, as before. Launched with the attribute, a kernel lets the next one in only
// once its own predecessor has completed, so a chain of early launches stays one deep: with the
// trigger first, chains of them lost 10 % of decode (docs/cuda.md; CCCL saw the same cost of
// letting dependents launch early, NVIDIA/cccl#5249).
// Which classes of small kernels (decode-sized passes) launch with the attribute, beyond the
// matmuls: BASALT_CUDA_PDL_SMALL, a mask of these bits, read once (benchmarks).
constexpr int kPdlSmallElementwise = 1;  // elementwise.cu: norms, RoPE / KV write, swiglu, ...
constexpr int kPdlSmallAttention = 2;    // attention.cu
constexpr int kPdlSmallHybrid = 4;       // hybrid.cu: GDN, MoE routing / plan / combine
constexpr int kPdlSmallMoeMatmul = 8;    // moe_matmul (matmul.cu)
constexpr int kPdlSmallDefault = 0;  // measured: none pays (docs/cuda.md)
int pdl_small_mask();
// Decode-sized passes: up to kPdlRows rows, element-wise ops up to kPdlElems values. Longer ones
// launch plainly, as the matmuls do (early blocks of a long pass take the SMs the kernel before
// it still needs).
constexpr int64_t kPdlRows = 64, kPdlElems = kPdlRows * 16384;
// Whether a small kernel of class `cls` (a kPdlSmall* bit) launches with the attribute.
inline bool pdl_small(int cls, bool decode_sized) {
  return decode_sized && (pdl_small_mask() & cls);
}

// allow = false launches plainly, e.g. a matmul whose "weight" a kernel has just written (the
// dequantised scratch of a scaled weight): its early reads would see the old contents.
template <typename... P, typename... A>
cudaError_t launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       bool allow, const A&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = allow && pdl_enabled() ? 1 : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

}  // namespace basalt::cuda
