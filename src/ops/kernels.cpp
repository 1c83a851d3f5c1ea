// The kernel registry's types (ops/kernels.h) and the Backend defaults for tuning.
#include "ops/kernels.h"

#include <fmt/format.h>

#include <cctype>
#include <tuple>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/ref/scaled.h"

namespace basalt {

namespace {
auto tie(const OpShape& s) {
  return std::tie(s.op, s.dtype, s.T, s.N, s.K, s.hkv, s.ctx, s.experts, s.top_k);
}
}  // namespace

bool operator<(const OpShape& a, const OpShape& b) {
  return tie(a) < tie(b);
}
bool operator==(const OpShape& a, const OpShape& b) {
  return tie(a) == tie(b);
}

std::string OpShape::str() const {
  std::string s = fmt::format("{} {}", op, dtype);
  if (op != "matmul_split") s += fmt::format(" T={}", T);
  if (op == "attention")
    s += fmt::format(" H={} Hkv={} D={} ctx={}", N, hkv, K, ctx);
  else if (op == "moe")
    s += fmt::format(" F={} E={} experts={} top_k={}", N, K, experts, top_k);
  else
    s += fmt::format(" N={} K={}", N, K);
  return s;
}

int64_t attention_ctx_bucket(int64_t positions) {
  int64_t b = 64;
  while (b < positions) b *= 2;
  return b;
}

int64_t KernelChoices::param(const OpShape& s, const std::string& p, int64_t fallback) const {
  const KernelVariant* v = find(s);
  return v ? v->param(p, fallback) : fallback;
}

std::string DeviceIdentity::str() const {
  std::string m;
  for (const auto& [k, v] : match) m += fmt::format("{}{}={}", m.empty() ? "" : ", ", k, v);
  return fmt::format("{} {}{}", backend, name, m.empty() ? "" : " (" + m + ")");
}

std::string scaled_kernel_dtype(const WeightRef& w) {
  if (w.dtype == DType::NVFP4) return "nvfp4";
  if (!w.scales) return "fp8";
  if (w.scale_block == 0) return "fp8-rows";
  return fmt::format("fp8-block{}", w.scale_block);
}

DeviceIdentity Backend::identity() const {
  DeviceIdentity d;
  d.backend = name();
  d.name = name();
  return d;
}

std::string Backend::kernel_dtype(const WeightRef& w) const {
  if (ref::is_scaled(w)) return scaled_kernel_dtype(w);
  std::string s(dtype_name(w.dtype));
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

VariantRun Backend::run_variant(const OpShape& shape, const KernelVariant& v, int, int, bool) {
  fail("[{}] no variant {} of {} to run (this backend lists no kernel variants)", name(), v.name,
       shape.str());
}

}  // namespace basalt
