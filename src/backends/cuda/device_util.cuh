// Device helpers shared by the element-wise and hybrid/MoE kernels (one definition each, so
// every kernel rounds and sums the same way).
#pragma once
#include <cuda_bf16.h>

#include "backends/cuda/kernels.h"

namespace basalt::cuda {

__device__ __forceinline__ float bf(bf16_bits b) {
  return __uint_as_float(uint32_t(b) << 16);
}
__device__ __forceinline__ bf16_bits to_bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
// SwiGLU of one element: silu(g) · u = (g / (1 + exp(-g))) · u, rounded per step (swiglu and
// the fused gate / up product's epilogue).
__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}
// Butterfly sum: every lane ends with the same value (a + b == b + a), in an order fixed by
// the lane count alone.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

// CUDA's last-block pattern (threadFenceReduction): each of `n` blocks calls this once its part
// is written; true in every calling thread of the last block to arrive, which may then read the
// others' parts through L2 (__ldcg). The counter is set back to zero by that block when `reset`
// (the next pass starts from zero). sync() is a barrier over the calling threads and `leader`
// one of them (the block and thread 0, or a TMA tiling's consumer warpgroup and its thread 0).
struct BlockSync {
  __device__ void operator()() const { __syncthreads(); }
};
template <class Sync = BlockSync>
__device__ __forceinline__ bool last_block_arrive(unsigned* counter, unsigned n, bool reset,
                                                  Sync sync = {}, bool leader = threadIdx.x == 0) {
  __shared__ unsigned last;
  __threadfence();
  sync();
  if (leader) {
    last = atomicAdd(counter, 1u) + 1u == n;
    if (last && reset) atomicExch(counter, 0u);
  }
  sync();
  if (!last) return false;
  __threadfence();
  return true;
}

}  // namespace basalt::cuda
