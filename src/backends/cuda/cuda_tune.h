// Kernel variants of the CUDA backend (ops/kernels.h, docs/cuda.md "Kernel variants"): the
// registry, the device identity, the per-call plans a recipe's choices give, and run_variant's
// synthetic inputs and timing. CudaBackend (cuda_backend.cpp) owns the choices and runs the
// calls; this file decides what a choice means and measures it.
//
// Ops (variants[0] the default, today's behaviour on every shape):
//   matmul_split  changes_order: the split-K segment length of a weight shape (T = 0 in keys)
//   matmul        same bits: bf16 tilings, or the scaled path and fused stage shape, per T
//   attention     same bits: the fused or the split-KV kernel, per (T, heads, ctx bucket)
//   moe           same bits: the routed experts' tiling (moe_matmul), per (T, expert shape,
//                 experts, top_k)
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/kernels.h"
#include "ops/backend.h"

namespace basalt::cuda {

// "cuda", cudaDeviceProp's name; match {cc "9.0", sms "132"}; info {driver "13.0", runtime
// "13.0", memory_gib}.
DeviceIdentity device_identity(int device);

// The registry. `in_force`: the backend's choices, read when a `supports` is called (a fused
// stage shape is an alternative only where it differs from the default's under the segment
// length in force for the weight shape). It must outlive the registry.
std::vector<OpKernels> kernel_registry(const KernelChoices* in_force);

// What one matmul call runs (kernels.h): kseg 0 = the rule; the tiling of bf16 weights; the
// path and the fused stage shape of scaled ones (config -1: the default).
struct MatmulPlan {
  int64_t kseg = 0;
  MatmulKernel tiling = MatmulKernel::Auto;
  ScaledKernel path = ScaledKernel::Auto;
  int config = -1;
};
// The plan of a call of T rows on an N × K weight of kernel dtype `dtype`: the matmul_split
// choice of {dtype, N, K} and the matmul choice of {dtype, T, N, K}; defaults where unlisted.
MatmulPlan matmul_plan(const KernelChoices& c, const std::string& dtype, int64_t T, int64_t N,
                       int64_t K);
// The attention kernel for T query rows of H heads (Hkv KV heads, head dim D) over a context
// bucket `ctx` (attention_ctx_bucket of the pass's largest position + 1), KV cache `kv` ("bf16"
// or "fp8").
AttnKernel attention_plan(const KernelChoices& c, const std::string& kv, int64_t T, int64_t H,
                          int64_t D, int64_t Hkv, int64_t ctx);
// The prefill attention kernel a BASALT_CUDA_ATTN value names: one of the attention variants of
// kernel_registry that run passes of more than 64 rows (auto, fused, block, blockwg, blockwgpv).
// Throws basalt::Error naming those for any other value.
AttnKernel attention_kernel_named(const std::string& name);
// The routed experts' tiling for a moe pass of T rows (experts F × E, bf16), Auto where unlisted.
MatmulKernel moe_plan(const KernelChoices& c, const std::string& dtype, int64_t T, int64_t F,
                      int64_t E, int64_t experts, int64_t top_k);
// The choices of `c` this backend can run: each must name a registered variant (name and
// parameters) whose supports() accepts its shape. Others are dropped with a warning, so a
// stale or foreign recipe costs speed, never a failure in the middle of a pass.
KernelChoices usable_choices(const KernelChoices& c, const std::vector<OpKernels>& reg);

// --- synthetic inputs (a fixed function of the shape; tests rebuild them to check the harness)
// A weight of kernel dtype `dtype` ("bf16", "nvfp4", "fp8", "fp8-rows", "fp8-block<B>"), N × K,
// in host memory as the backend keeps it on the device (bf16 bits; codes and scales):
//   bf16     values ±[2^-8, 1) (random sign, exponent and mantissa: no zeros)
//   nvfp4    random code bytes; E4M3 group scales in [0.125, 3.75]; per-tensor scale 0.5
//   fp8*     random E4M3 codes but the NaN codes 0x7f / 0xff; per-tensor scale 1/32; per-row or
//            per-block f32 scales in [0.001, 0.011)
struct SynthWeight {
  std::string dtype;
  int64_t N = 0, K = 0, block = 0;
  std::vector<uint8_t> data, scales;
  float scale = 1.0f;
  WeightRef ref() const;  // points into data / scales
};
SynthWeight synth_weight(const std::string& dtype, int64_t N, int64_t K);
// x bf16 bits [T, K], values as bf16 weights'; the rows of a shorter T are a prefix.
std::vector<uint16_t> synth_x(int64_t T, int64_t K);
// Attention of shape s (op "attention"): q f32 [T, H, D] in [-2, 2); a paged cache of ctx / 64
// blocks of kAttnBlock positions (block b at table entry b): bf16 [blocks, 64, Hkv, D] values as
// bf16 weights', or E4M3 blocks (codes [64, Hkv, D] then f32 scales [64, Hkv] in [0.004, 0.02),
// ops/backend.h AttentionArgs); the T rows at positions ctx - T .. ctx - 1.
constexpr int64_t kAttnBlock = 64;
struct SynthAttention {
  int64_t T = 0, H = 0, Hkv = 0, D = 0, ctx = 0;
  bool fp8 = false;
  std::vector<float> q;
  std::vector<uint8_t> k, v;  // the caches' bytes
  size_t block_bytes() const;
};
SynthAttention synth_attention(const OpShape& s);
// moe of shape s (op "moe"): x bf16 [T, E] as synth_x(T, E); router logits f32 [T, experts] in
// [-4, 4); expert e's matrices are set e % sets.size() (sets = min(experts, 4) distinct ones:
// gate and up bf16 [F, E], down [E, F], values as synthetic bf16 weights').
struct SynthMoe {
  int64_t T = 0, E = 0, F = 0, experts = 0, top_k = 0;
  std::vector<uint16_t> x;
  std::vector<float> router;
  struct Set {
    std::vector<uint8_t> gate, up, down;  // bf16 bits
  };
  std::vector<Set> sets;
};
SynthMoe synth_moe(const OpShape& s);

// --- run_variant --------------------------------------------------------------------------
// How the backend runs one call with an explicit choice (the same code its passes run).
struct VariantOps {
  std::function<void(const void* x, int64_t T, const WeightRef& w, float* y, const MatmulPlan&)>
      matmul;
  std::function<void(const PassRows&)> begin_pass;
  std::function<void(const AttentionArgs&, AttnKernel)> attention;  // a.kv: the cache's type
  // a's workspace is the backend's (set by the call)
  std::function<void(MoeKernelArgs&, MatmulKernel)> moe;
};

// The device buffers of run_variant, the last matmul and attention shape's kept (a tuner times
// every variant of a shape in a row). Weights (and KV caches) are rotated: identical copies
// whose total exceeds twice the L2 (capped near 1 GiB), one per repetition in turn, so a timing
// reads device memory as a model's pass does.
class VariantBench {
 public:
  VariantBench() = default;
  ~VariantBench();
  VariantBench(const VariantBench&) = delete;
  VariantBench& operator=(const VariantBench&) = delete;

  // Backend::run_variant: checks `v` against `reg` (throws basalt::Error), times it through
  // `ops` on stream s. The matmul kseg is the one `in_force` gives (op matmul) or v's (op
  // matmul_split, whose shapes carry the rows to time in T: its keys have T = 0, the tuner
  // times each at several T).
  VariantRun run(const std::vector<OpKernels>& reg, const KernelChoices& in_force,
                 const VariantOps& ops, int device, cudaStream_t s, const OpShape& shape,
                 const KernelVariant& v, int warmup, int reps, bool want_output);

 private:
  struct Buf {
    void* p = nullptr;
    size_t bytes = 0;
    void reserve(size_t n);  // at least n bytes (contents lost when it grows)
    void release();
  };
  void matmul_inputs(const OpShape& s, size_t rotate, cudaStream_t st);
  void attention_inputs(const OpShape& s, size_t rotate, cudaStream_t st);
  void moe_inputs(const OpShape& s, size_t rotate, cudaStream_t st);

  // matmul: the weight copies, x, y (first rep and the others)
  std::string w_key_;
  Buf w_;
  std::vector<WeightRef> copies_;
  int64_t x_T_ = -1, x_K_ = -1;
  Buf x_, y_, y_first_;
  // attention: the cache copies [copy][k blocks | v blocks], q, out, the pass's host rows
  std::string kv_key_, q_key_;
  Buf kv_, q_, out_, out_first_;
  int64_t kv_copies_ = 0;
  size_t kv_copy_bytes_ = 0, kv_v_offset_ = 0;
  std::vector<int64_t> pos_, table_sizes_;
  std::vector<int32_t> ids_, table_;
  std::vector<const int32_t*> tables_;
  // moe: rotated copies of every expert's matrices, their pointer tables [copy][gate | up |
  // down][expert], the rows' x and router logits
  std::string moe_key_, router_key_;
  Buf experts_, expert_tables_, moe_x_, router_;
  int64_t moe_copies_ = 0;
};

// Microseconds of launch(i, i == warmup) for i = warmup .. warmup + reps - 1, device events
// around each, after `warmup` untimed calls (at least one: buffers settle). The timed calls are
// queued behind stream_delay so they run back to back, as in a recorded pass.
std::vector<double> time_launches(cudaStream_t s, int warmup, int reps,
                                  const std::function<void(int, bool)>& launch);

}  // namespace basalt::cuda
