// The kernel registry: the variants an op can run, the shapes their choice is keyed by, and the
// choices a recipe makes (docs/tuning.md). Backends list their variants (Backend::
// kernel_registry), time one on synthetic inputs (Backend::run_variant) and run the choices set
// with Backend::set_kernel_choices; the tuner (kernels/tuner.h) measures, kernels/recipe.h reads
// and writes recipes.
//
// Exactness (../shared/EXACTNESS.md): variants of an op that is not `changes_order` give the
// same bits on every shape they support, so their choice may depend on T. An op whose variants
// change the reduction order (the matmul split-K) is keyed by the weight shape alone: its
// shapes have T = 0, and no recipe can make the choice depend on T.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace basalt {

struct WeightRef;  // ops/backend.h

// One op call as recipes key it.
//   matmul        dtype = kernel_dtype(weight); T rows of x; the weight N × K
//   matmul_split  the same with T = 0 (its choice is per weight shape)
//   attention     dtype = the KV cache's ("bf16", "fp8", "f32"); T query rows; N = H query
//                 heads, K = D, hkv = KV heads; ctx = the context bucket: positions rounded up
//                 to 64 · 2^k (the bucket a pass of largest position p falls in is
//                 attention_ctx_bucket(p + 1))
//   moe           dtype = the routed experts' kernel dtype; T rows of the pass; N = F (an
//                 expert's intermediate size), K = E (hidden size); experts, top_k the routing
struct OpShape {
  std::string op;
  std::string dtype;
  int64_t T = 0, N = 0, K = 0, hkv = 0, ctx = 0;
  int64_t experts = 0, top_k = 0;  // moe only

  std::string str() const;  // "matmul bf16 T=1 N=4096 K=4096", for logs and errors
  friend bool operator<(const OpShape& a, const OpShape& b);
  friend bool operator==(const OpShape& a, const OpShape& b);
};
int64_t attention_ctx_bucket(int64_t positions);

using KernelParams = std::map<std::string, int64_t>;
struct KernelVariant {
  std::string name;  // e.g. "rows16x16", "kseg1024", "split"
  KernelParams params;
  // params[p], or `fallback` when the variant does not set it.
  int64_t param(const std::string& p, int64_t fallback) const {
    auto it = params.find(p);
    return it == params.end() ? fallback : it->second;
  }
  friend bool operator==(const KernelVariant& a, const KernelVariant& b) {
    return a.name == b.name && a.params == b.params;
  }
};

// One op's entry in a backend's registry.
struct OpKernels {
  std::string op;
  std::string doc;             // one line: what the variants change
  bool changes_order = false;  // see above: shapes keyed with T = 0
  // variants[0] is the default: it handles every shape (the choice made without a recipe).
  std::vector<KernelVariant> variants;
  std::function<bool(const KernelVariant&, const OpShape&)> supports;
};

// The choices in force on a backend: shape → variant. Shapes not listed run the default.
class KernelChoices {
 public:
  void set(const OpShape& s, const KernelVariant& v) { m_[s] = v; }
  const KernelVariant* find(const OpShape& s) const {
    auto it = m_.find(s);
    return it == m_.end() ? nullptr : &it->second;
  }
  // The parameter `p` of the variant chosen for `s`, or `fallback` when none is listed.
  int64_t param(const OpShape& s, const std::string& p, int64_t fallback) const;
  size_t size() const { return m_.size(); }
  bool empty() const { return m_.empty(); }
  const std::map<OpShape, KernelVariant>& all() const { return m_; }

 private:
  std::map<OpShape, KernelVariant> m_;
};

// What a recipe is matched against. `match` must be equal for a recipe to apply (GPU: compute
// capability and SM count; CPU: SIMD target and core count); `info` is recorded only (driver and
// runtime versions, threads).
struct DeviceIdentity {
  std::string backend;  // "cuda" | "cpu"
  std::string name;     // the GPU's name / the CPU's model name
  std::map<std::string, std::string> match;
  std::map<std::string, std::string> info;
  // backend, name and match equal.
  bool same_device(const DeviceIdentity& o) const {
    return backend == o.backend && name == o.name && match == o.match;
  }
  std::string str() const;  // "cuda NVIDIA H200 (cc=9.0, sms=132)"
};

// One timing of a variant (Backend::run_variant).
struct VariantRun {
  std::vector<double> us;     // one per timed repetition, microseconds
  std::vector<float> output;  // the op's output of the first repetition, as f32
};

// The dtype name kernels are chosen by for a weight as `be` runs it (Backend::kernel_dtype):
// "bf16", "f32", "q4_k", … or, for scaled weights, "nvfp4", "fp8" (per tensor), "fp8-rows"
// (per output row) and "fp8-block<B>" (B × B blocks).
std::string scaled_kernel_dtype(const WeightRef& w);

}  // namespace basalt
