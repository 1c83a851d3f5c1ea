// Kernel variants of the CUDA backend: the registry, the plans choices give, synthetic inputs
// and the timing of run_variant (cuda_tune.h).
#include "backends/cuda/cuda_tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"

namespace basalt::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("[cuda] {}: {}", what, cudaGetErrorString(e));
}

constexpr int64_t kWholeK = int64_t(1) << 30;    // variant "whole": a segment of K or more
constexpr size_t kRotateCap = size_t(1) << 30;   // rotated copies stay near 1 GiB
constexpr size_t kSplitWsCap = size_t(1) << 30;  // split attention up to this workspace

// A scaled kernel dtype's format (false: not one); `block`: fp8-block<B>'s B.
bool scaled_format(const std::string& dtype, ScaledFormat& f, int64_t& block) {
  block = 0;
  if (dtype == "nvfp4") return f = ScaledFormat::NVFP4, true;
  if (dtype == "fp8") return f = ScaledFormat::FP8, true;
  if (dtype == "fp8-rows") return f = ScaledFormat::FP8Rows, true;
  const std::string pre = "fp8-block";
  if (dtype.size() <= pre.size() || dtype.compare(0, pre.size(), pre) != 0) return false;
  for (size_t i = pre.size(); i < dtype.size(); ++i) {
    if (dtype[i] < '0' || dtype[i] > '9' || block > (int64_t(1) << 24)) return false;
    block = block * 10 + (dtype[i] - '0');
  }
  f = ScaledFormat::FP8Blocks;
  return block > 0;
}

// A weight the backend's matmuls take: K % 8 == 0 (NVFP4: K % 16), sizes within int.
bool weight_shape_ok(const std::string& dtype, int64_t N, int64_t K) {
  if (N <= 0 || K <= 0 || N > 0x7fffffff || K > 0x7fffffff || K % 8) return false;
  if (dtype == "bf16") return true;
  ScaledFormat f;
  int64_t block;
  return scaled_format(dtype, f, block) && (f != ScaledFormat::NVFP4 || K % 16 == 0);
}

// The shape as a ScaledWeight for the kernels' shape tests (matmul_scaled_fused_ok and
// _fused_stages): aligned stand-in pointers, never read.
ScaledWeight shape_weight(const std::string& dtype, int64_t N, int64_t K) {
  alignas(256) static const uint8_t stand_in[256] = {};
  ScaledWeight w;
  int64_t block = 0;
  scaled_format(dtype, w.format, block);
  w.data = stand_in;
  w.scales = w.format == ScaledFormat::FP8 ? nullptr : stand_in;
  w.N = N, w.K = K, w.block = block;
  return w;
}

OpShape split_key(const std::string& dtype, int64_t N, int64_t K) {
  return {"matmul_split", dtype, 0, N, K, 0, 0};
}
int64_t kseg_in_force(const KernelChoices* c, const std::string& dtype, int64_t N, int64_t K) {
  return c && !c->empty() ? c->param(split_key(dtype, N, K), "kseg", 0) : 0;
}

// A matmul variant's fields of the plan (kseg is matmul_split's).
void set_matmul_variant(MatmulPlan& p, const KernelVariant& v) {
  p.tiling = MatmulKernel(v.param("tiling", 0));
  p.path = ScaledKernel(v.param("kernel", 0));
  p.config = int(v.param("config", -1));
}

bool split_supports(const KernelVariant& v, const OpShape& s) {
  if (!weight_shape_ok(s.dtype, s.N, s.K) || s.T < 0) return false;
  const int64_t kseg = v.param("kseg", 0);
  // Segments are whole k-stages of every bf16 tiling and fused stage shape (launch_fused falls
  // back to 256-k stages where 512 or 1024 does not divide kseg): any multiple of 256 runs.
  return kseg == 0 || kseg == kWholeK || (kseg > 0 && kseg % 256 == 0 && kseg < s.K);
}

bool matmul_supports(const KernelChoices* in_force, const KernelVariant& v, const OpShape& s) {
  if (!weight_shape_ok(s.dtype, s.N, s.K) || s.T < 1 || s.T > 0x7fffffff) return false;
  const bool bf16 = s.dtype == "bf16";
  const int64_t tiling = v.param("tiling", 0), kernel = v.param("kernel", 0);
  if (tiling) {  // grid limits (65535 blocks on y): column blocks of the Rows tilings, row
                 // blocks of the Tile tilings; every tiling takes any T, with or without the
                 // workspace
    if (!bf16 || v.params.size() != 1) return false;
    switch (tiling) {
      case int64_t(MatmulKernel::Rows16x32):
      case int64_t(MatmulKernel::Rows16x32Deep):
        return (s.N + 31) / 32 <= 65535;
      case int64_t(MatmulKernel::Rows16x16):
        return (s.N + 15) / 16 <= 65535;
      case int64_t(MatmulKernel::Tile128):
      case int64_t(MatmulKernel::Tile128K64):
      case int64_t(MatmulKernel::TileWG):
      case int64_t(MatmulKernel::TileWG2):
        return (s.T + 127) / 128 <= 65535;
      case int64_t(MatmulKernel::TileWG64):
        return (s.T + 63) / 64 <= 65535;
      case int64_t(MatmulKernel::TileTMA):  // row blocks on x, column blocks on y
      case int64_t(MatmulKernel::TileTMA256):
      case int64_t(MatmulKernel::TileTMA64):
        return (s.N + 127) / 128 <= 65535;
      case int64_t(MatmulKernel::RowsTMA):
        return true;  // column blocks on x
      case int64_t(MatmulKernel::TileTMAP):
        return true;  // at most one block an SM
      default:
        return false;
    }
  }
  if (kernel == int64_t(ScaledKernel::Dequant)) return !bf16 && v.params.size() == 1;
  if (kernel == int64_t(ScaledKernel::Fused)) {
    const ScaledWeight w = shape_weight(s.dtype, s.N, s.K);
    if (bf16 || s.T > 64 || !matmul_scaled_fused_ok(w)) return false;
    const int64_t config = v.param("config", 0);
    if (config == 0) return true;
    if (config < 1 || config > 3 || s.T > 8) return false;
    // A real alternative only: configs the format lacks or whose stages do not divide the
    // segments in force run the default's stage shape.
    const int64_t kseg = kseg_in_force(in_force, s.dtype, s.N, s.K);
    const FusedStages c = matmul_scaled_fused_stages(w, s.T, kseg, int(config));
    return c.bk && c != matmul_scaled_fused_stages(w, s.T, kseg, 0);
  }
  return v.params.empty();  // auto
}

bool attention_supports(const KernelVariant& v, const OpShape& s) {
  const int64_t H = s.N, D = s.K;
  if ((s.dtype != "bf16" && s.dtype != "fp8") || s.T < 1 || H <= 0 || s.hkv <= 0 || H % s.hkv ||
      (D != 32 && D != 64 && D != 128 && D != 256) || s.ctx < s.T ||
      s.ctx != attention_ctx_bucket(s.ctx))
    return false;
  const int64_t kernel = v.param("kernel", 0);
  if (v.params.size() > 1 || kernel < 0 || kernel > int64_t(AttnKernel::BlockWGPV)) return false;
  const bool wg =
      kernel == int64_t(AttnKernel::BlockWG) || kernel == int64_t(AttnKernel::BlockWGPV);
  if ((kernel == int64_t(AttnKernel::Block) || wg) && D != 64 && D != 128) return false;
  if (wg && s.dtype != "bf16") return false;
  // The split workspace (f32 partials of every chunk of every row and head) is allocated for
  // the pass: offered while it stays moderate (Auto takes split only at T · H < 2048 anyway).
  return kernel != int64_t(AttnKernel::Split) ||
         attention_workspace_bytes(s.T, H, D, s.ctx) <= kSplitWsCap;
}

bool moe_supports(const KernelVariant& v, const OpShape& s) {
  if (s.dtype != "bf16" || s.T < 1 || s.T > 0x7fffffff || s.N <= 0 || s.K <= 0 || s.N % 8 ||
      s.K % 8 || s.N > 0x7fffffff || s.K > 0x7fffffff || s.experts < 1 ||
      s.experts > kMoeMaxExperts || s.top_k < 1 || s.top_k > s.experts || s.top_k > kMoeMaxTopK ||
      (s.N + 31) / 32 > 65535 || (s.K + 31) / 32 > 65535)
    return false;
  const int64_t tiling = v.param("tiling", 0);
  return v.params.empty() ||
         (v.params.size() == 1 && tiling == int64_t(MatmulKernel::Rows16x32Deep));
}

// --- synthetic values: splitmix64 of (seed, index), so every buffer is a fixed function of the
// shape, generated in one pass (an LM head's 1 GiB in well under a second).
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t seed_of(const char* tag, std::initializer_list<int64_t> v) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char* c = tag; *c; ++c) h = (h ^ uint8_t(*c)) * 0x100000001b3ull;
  for (int64_t x : v) h = mix(h ^ uint64_t(x)) + 0x9e3779b97f4a7c15ull;
  return h;
}
uint64_t word(uint64_t seed, uint64_t i) {
  return mix(seed + (i + 1) * 0x9e3779b97f4a7c15ull);
}
// bf16 bits of ±[2^-8, 1): sign bit 15, exponent 119 + bits 7..9, mantissa bits 0..6.
uint16_t modest_bf16(uint64_t h) {
  return uint16_t((h & 0x8000u) | ((119u + ((h >> 7) & 7u)) << 7) | (h & 0x7fu));
}
void fill_bf16(uint8_t* out, size_t n, uint64_t seed) {  // n values
  auto* o = reinterpret_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; i += 4) {
    const uint64_t w = word(seed, i / 4);
    for (size_t j = 0; j < 4 && i + j < n; ++j) o[i + j] = modest_bf16(w >> (16 * j));
  }
}
void fill_bytes(uint8_t* out, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t w = word(seed, i / 8);
    for (size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = uint8_t(w >> (8 * j));
  }
}
// E4M3 codes but the NaN codes (0x7f, 0xff become 0x7e, 0xfe).
void fill_e4m3(uint8_t* out, size_t n, uint64_t seed) {
  fill_bytes(out, n, seed);
  for (size_t i = 0; i < n; ++i)
    if ((out[i] & 0x7f) == 0x7f) out[i] ^= 1;
}
// Positive E4M3 scales in [0.125, 3.75]: exponent field 4 .. 8, any mantissa.
void fill_e4m3_scales(uint8_t* out, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t w = word(seed, i);
    out[i] = uint8_t(((4 + (w >> 8) % 5) << 3) | (w & 7));
  }
}
void fill_f32(float* out, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = 0; i < n; ++i)
    out[i] = lo + float(double(word(seed, i) >> 40) * 0x1p-24) * (hi - lo);
}

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}
// Copies of `stride` bytes whose total exceeds `rotate` (at least one, about kRotateCap at most).
size_t rotation_copies(size_t stride, size_t rotate) {
  return std::max<size_t>(1, std::min(rotate / stride + 1, kRotateCap / stride));
}
// Copies `have` .. n - 1 of `stride` bytes each, copy i = copy i % have: doubling device copies
// of the first `have` (on s).
void replicate(uint8_t* base, size_t stride, size_t n, cudaStream_t s, size_t have = 1) {
  for (; have < n; have *= 2)
    check(cudaMemcpyAsync(base + have * stride, base, std::min(have, n - have) * stride,
                          cudaMemcpyDeviceToDevice, s),
          "run_variant: rotated copies");
}

}  // namespace

DeviceIdentity device_identity(int device) {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  int drv = 0, rt = 0;
  check(cudaDriverGetVersion(&drv), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&rt), "cudaRuntimeGetVersion");
  auto version = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
  DeviceIdentity d;
  d.backend = "cuda";
  d.name = p.name;
  d.match = {{"cc", fmt::format("{}.{}", p.major, p.minor)},
             {"sms", std::to_string(p.multiProcessorCount)}};
  d.info = {{"driver", version(drv)},
            {"runtime", version(rt)},
            {"memory_gib", fmt::format("{:.1f}", double(p.totalGlobalMem) / double(1 << 30))}};
  return d;
}

std::vector<OpKernels> kernel_registry(const KernelChoices* in_force) {
  std::vector<OpKernels> reg(4);
  OpKernels& split = reg[0];
  split.op = "matmul_split";
  split.doc =
      "split-K segment length of a weight shape (rule: kernels.h matmul_kseg; whole: one "
      "segment; ksegN: N elements): changes the reduction order, so keyed by N, K alone";
  split.changes_order = true;
  split.variants = {{"rule", {}}, {"whole", {{"kseg", kWholeK}}}};
  for (int64_t n : {256, 512, 1024, 2048, 4096})
    split.variants.push_back({fmt::format("kseg{}", n), {{"kseg", n}}});
  split.supports = split_supports;

  OpKernels& mm = reg[1];
  mm.op = "matmul";
  mm.doc =
      "bf16: the tiling (rows16x32, rows16x16, rows16x32deep: 16 rows a block for decode; "
      "tile128, tile128k64, tilewg, tilewg2, tiletma, tiletma256, tiletmap (persistent): "
      "prefill; tilewg64, tiletma64: "
      "17-64 rows; rowstma: T <= 64); scaled: the fused "
      "decode kernel (T <= 64; fused1-3: other stage shapes at T <= 8) or dequant (bf16 scratch "
      "+ the bf16 tilings). Same bits";
  mm.variants = {{"auto", {}},
                 {"rows16x32", {{"tiling", int64_t(MatmulKernel::Rows16x32)}}},
                 {"rows16x16", {{"tiling", int64_t(MatmulKernel::Rows16x16)}}},
                 {"rows16x32deep", {{"tiling", int64_t(MatmulKernel::Rows16x32Deep)}}},
                 {"tile128", {{"tiling", int64_t(MatmulKernel::Tile128)}}},
                 {"tile128k64", {{"tiling", int64_t(MatmulKernel::Tile128K64)}}},
                 {"tilewg", {{"tiling", int64_t(MatmulKernel::TileWG)}}},
                 {"tilewg2", {{"tiling", int64_t(MatmulKernel::TileWG2)}}},
                 {"tilewg64", {{"tiling", int64_t(MatmulKernel::TileWG64)}}},
                 {"tiletma", {{"tiling", int64_t(MatmulKernel::TileTMA)}}},
                 {"tiletma64", {{"tiling", int64_t(MatmulKernel::TileTMA64)}}},
                 {"rowstma", {{"tiling", int64_t(MatmulKernel::RowsTMA)}}},
                 {"tiletma256", {{"tiling", int64_t(MatmulKernel::TileTMA256)}}},
                 {"tiletmap", {{"tiling", int64_t(MatmulKernel::TileTMAP)}}},
                 {"fused", {{"kernel", int64_t(ScaledKernel::Fused)}, {"config", 0}}}};
  for (int64_t c = 1; c <= 3; ++c)
    mm.variants.push_back(
        {fmt::format("fused{}", c), {{"kernel", int64_t(ScaledKernel::Fused)}, {"config", c}}});
  mm.variants.push_back({"dequant", {{"kernel", int64_t(ScaledKernel::Dequant)}}});
  mm.supports = [in_force](const KernelVariant& v, const OpShape& s) {
    return matmul_supports(in_force, v, s);
  };

  OpKernels& at = reg[2];
  at.op = "attention";
  at.doc =
      "fused (one warp walks every KV chunk of a row and head), split (a warp per chunk, then an "
      "in-order merge), block (head dims 64 / 128: fused with 4 warps sharing each chunk's K / "
      "V copy), blockwg (block with the scores on wgmma; bf16 cache) or blockwgpv (blockwg with "
      "the weighted values on wgmma too). Same bits";
  at.variants = {{"auto", {}},
                 {"fused", {{"kernel", int64_t(AttnKernel::Fused)}}},
                 {"split", {{"kernel", int64_t(AttnKernel::Split)}}},
                 {"block", {{"kernel", int64_t(AttnKernel::Block)}}},
                 {"blockwg", {{"kernel", int64_t(AttnKernel::BlockWG)}}},
                 {"blockwgpv", {{"kernel", int64_t(AttnKernel::BlockWGPV)}}}};
  at.supports = attention_supports;

  OpKernels& moe = reg[3];
  moe.op = "moe";
  moe.doc =
      "the routed experts' tiling (moe_matmul: auto = rows16x32, k-stage 128 x 4; rows16x32deep: "
      "256 x 6); segments as matmul_bf16's rule for the expert shape. Same bits";
  moe.variants = {{"auto", {}},
                  {"rows16x32deep", {{"tiling", int64_t(MatmulKernel::Rows16x32Deep)}}}};
  moe.supports = moe_supports;
  return reg;
}

MatmulPlan matmul_plan(const KernelChoices& c, const std::string& dtype, int64_t T, int64_t N,
                       int64_t K) {
  MatmulPlan p;
  if (c.empty()) return p;
  p.kseg = c.param(split_key(dtype, N, K), "kseg", 0);
  if (const KernelVariant* v = c.find({"matmul", dtype, T, N, K, 0, 0})) set_matmul_variant(p, *v);
  return p;
}

AttnKernel attention_plan(const KernelChoices& c, const std::string& kv, int64_t T, int64_t H,
                          int64_t D, int64_t Hkv, int64_t ctx) {
  if (c.empty()) return AttnKernel::Auto;
  return AttnKernel(c.param({"attention", kv, T, H, D, Hkv, ctx}, "kernel", 0));
}

AttnKernel attention_kernel_named(const std::string& name) {
  std::string names;
  const std::vector<OpKernels> reg = kernel_registry(nullptr);
  for (const KernelVariant& v : reg[2].variants) {
    // split keeps an f32 partial of every chunk of every row: not a prefill kernel.
    if (v.name == "split") continue;
    if (v.name == name) return AttnKernel(v.param("kernel", 0));
    names += names.empty() ? v.name : "|" + v.name;
  }
  fail("[cuda] BASALT_CUDA_ATTN={}: not a prefill attention kernel (one of {})", name, names);
}

MatmulKernel moe_plan(const KernelChoices& c, const std::string& dtype, int64_t T, int64_t F,
                      int64_t E, int64_t experts, int64_t top_k) {
  if (c.empty()) return MatmulKernel::Auto;
  OpShape s{"moe", dtype, T, F, E, 0, 0};
  s.experts = experts, s.top_k = top_k;
  return MatmulKernel(c.param(s, "tiling", 0));
}

KernelChoices usable_choices(const KernelChoices& c, const std::vector<OpKernels>& reg) {
  KernelChoices out;
  int64_t dropped = 0;
  std::string examples;
  for (const auto& [shape, v] : c.all()) {
    auto op =
        std::find_if(reg.begin(), reg.end(), [&](const OpKernels& o) { return o.op == shape.op; });
    const bool ok = op != reg.end() &&
                    std::find(op->variants.begin(), op->variants.end(), v) != op->variants.end() &&
                    (!op->changes_order || shape.T == 0) && op->supports(v, shape);
    if (ok) {
      out.set(shape, v);
      continue;
    }
    if (dropped++ < 3)
      examples += fmt::format("{}{} → {}", examples.empty() ? "" : "; ", shape.str(), v.name);
  }
  if (dropped)
    spdlog::warn(
        "[cuda] {} kernel choice(s) name no variant this backend runs on their shape ({}{}); "
        "those shapes run the default",
        dropped, examples, dropped > 3 ? "; …" : "");
  return out;
}

// --- synthetic inputs ------------------------------------------------------------------------

WeightRef SynthWeight::ref() const {
  WeightRef r;
  r.rows = N, r.cols = K, r.data = data.data();
  if (dtype == "bf16") {
    r.dtype = DType::BF16;
    return r;
  }
  r.dtype = dtype == "nvfp4" ? DType::NVFP4 : DType::F8_E4M3;
  r.scales = scales.empty() ? nullptr : scales.data();
  r.scale = scale;
  r.scale_block = int32_t(block);
  return r;
}

SynthWeight synth_weight(const std::string& dtype, int64_t N, int64_t K) {
  if (!weight_shape_ok(dtype, N, K)) fail("[cuda] no {} weight of {} × {} to run", dtype, N, K);
  SynthWeight w;
  w.dtype = dtype, w.N = N, w.K = K;
  const uint64_t seed = seed_of(dtype.c_str(), {N, K});
  const size_t n = size_t(N) * size_t(K);
  if (dtype == "bf16") {
    w.data.resize(2 * n);
    fill_bf16(w.data.data(), n, seed);
    return w;
  }
  ScaledFormat f;
  scaled_format(dtype, f, w.block);
  if (f == ScaledFormat::NVFP4) {  // E2M1 has no NaN: every byte is a valid pair of codes
    w.data.resize(n / 2);
    fill_bytes(w.data.data(), w.data.size(), seed);
    w.scales.resize(n / 16);
    fill_e4m3_scales(w.scales.data(), w.scales.size(), seed + 1);
    w.scale = 0.5f;
    return w;
  }
  w.data.resize(n);
  fill_e4m3(w.data.data(), n, seed);
  w.scale = 1.0f / 32;
  size_t n_scales = 0;
  if (f == ScaledFormat::FP8Rows) n_scales = size_t(N);
  if (f == ScaledFormat::FP8Blocks)
    n_scales = size_t((N + w.block - 1) / w.block) * size_t((K + w.block - 1) / w.block);
  w.scales.resize(n_scales * 4);
  fill_f32(reinterpret_cast<float*>(w.scales.data()), n_scales, seed + 1, 0.001f, 0.011f);
  return w;
}

std::vector<uint16_t> synth_x(int64_t T, int64_t K) {
  std::vector<uint16_t> x(size_t(T) * size_t(K));
  fill_bf16(reinterpret_cast<uint8_t*>(x.data()), x.size(), seed_of("x", {K}));
  return x;
}

size_t SynthAttention::block_bytes() const {
  return size_t(kAttnBlock * Hkv) * size_t(fp8 ? D + 4 : 2 * D);
}

namespace {
// The caches of `a` (shape fields set): `blocks` blocks of keys and of values.
void synth_kv(SynthAttention& a) {
  const size_t blocks = size_t(a.ctx / kAttnBlock), bb = a.block_bytes();
  const size_t codes = size_t(kAttnBlock * a.Hkv * a.D), scales = size_t(kAttnBlock * a.Hkv);
  for (int kv = 0; kv < 2; ++kv) {
    std::vector<uint8_t>& c = kv ? a.v : a.k;
    c.resize(blocks * bb);
    const uint64_t seed = seed_of(kv ? "v" : "k", {a.Hkv, a.D, a.fp8});
    if (!a.fp8) {
      fill_bf16(c.data(), c.size() / 2, seed);
      continue;
    }
    for (size_t b = 0; b < blocks; ++b) {  // codes [64, Hkv, D], then f32 scales [64, Hkv]
      uint8_t* blk = c.data() + b * bb;
      fill_e4m3(blk, codes, seed + 2 * b);
      fill_f32(reinterpret_cast<float*>(blk + codes), scales, seed + 2 * b + 1, 0.004f, 0.02f);
    }
  }
}
void synth_q(SynthAttention& a) {
  a.q.resize(size_t(a.T * a.H * a.D));
  fill_f32(a.q.data(), a.q.size(), seed_of("q", {a.H, a.D}), -2.0f, 2.0f);
}
SynthAttention attention_fields(const OpShape& s) {
  if (!attention_supports({"auto", {}}, s)) fail("[cuda] no attention of {} to run", s.str());
  SynthAttention a;
  a.T = s.T, a.H = s.N, a.Hkv = s.hkv, a.D = s.K, a.ctx = s.ctx, a.fp8 = s.dtype == "fp8";
  return a;
}
}  // namespace

SynthAttention synth_attention(const OpShape& s) {
  SynthAttention a = attention_fields(s);
  synth_q(a);
  synth_kv(a);
  return a;
}

namespace {
std::vector<float> moe_router(int64_t T, int64_t experts) {
  std::vector<float> r(size_t(T * experts));
  fill_f32(r.data(), r.size(), seed_of("router", {experts}), -4.0f, 4.0f);
  return r;
}
std::vector<SynthMoe::Set> moe_sets(int64_t F, int64_t E, int64_t experts) {
  const size_t n = size_t(F) * size_t(E);
  std::vector<SynthMoe::Set> sets(size_t(std::min<int64_t>(experts, 4)));
  for (size_t i = 0; i < sets.size(); ++i) {
    SynthMoe::Set& st = sets[i];
    st.gate.resize(2 * n), st.up.resize(2 * n), st.down.resize(2 * n);
    fill_bf16(st.gate.data(), n, seed_of("moe-gate", {F, E, int64_t(i)}));
    fill_bf16(st.up.data(), n, seed_of("moe-up", {F, E, int64_t(i)}));
    fill_bf16(st.down.data(), n, seed_of("moe-down", {E, F, int64_t(i)}));
  }
  return sets;
}
}  // namespace

SynthMoe synth_moe(const OpShape& s) {
  if (!moe_supports({"auto", {}}, s)) fail("[cuda] no moe of {} to run", s.str());
  SynthMoe m;
  m.T = s.T, m.F = s.N, m.E = s.K, m.experts = s.experts, m.top_k = s.top_k;
  m.x = synth_x(m.T, m.E);
  m.router = moe_router(m.T, m.experts);
  m.sets = moe_sets(m.F, m.E, m.experts);
  return m;
}

// --- run_variant -----------------------------------------------------------------------------

void VariantBench::Buf::reserve(size_t n) {
  if (n <= bytes) return;
  release();
  if (cudaMalloc(&p, std::max<size_t>(n, 1)) != cudaSuccess) {
    cudaGetLastError();
    p = nullptr;
    fail("[cuda] run_variant: out of device memory for {:.1f} MiB of inputs",
         double(n) / (1 << 20));
  }
  bytes = n;
}
void VariantBench::Buf::release() {
  if (p) cudaFree(p);
  p = nullptr;
  bytes = 0;
}

VariantBench::~VariantBench() {
  for (Buf* b : {&w_, &x_, &y_, &y_first_, &kv_, &q_, &out_, &out_first_, &experts_,
                 &expert_tables_, &moe_x_, &router_})
    b->release();
}

void VariantBench::matmul_inputs(const OpShape& s, size_t rotate, cudaStream_t st) {
  const int64_t T = s.T, N = s.N, K = s.K;
  const std::string key = fmt::format("{} {} {}", s.dtype, N, K);
  if (key != w_key_) {
    w_key_.clear();
    copies_.clear();
    const SynthWeight h = synth_weight(s.dtype, N, K);
    const size_t sc_off = align256(h.data.size()), stride = align256(sc_off + h.scales.size());
    const size_t n = rotation_copies(stride, rotate);
    w_.reserve(n * stride);
    auto* base = static_cast<uint8_t*>(w_.p);
    check(cudaMemcpyAsync(base, h.data.data(), h.data.size(), cudaMemcpyHostToDevice, st),
          "run_variant: weight upload");
    if (!h.scales.empty())
      check(cudaMemcpyAsync(base + sc_off, h.scales.data(), h.scales.size(), cudaMemcpyHostToDevice,
                            st),
            "run_variant: scales upload");
    replicate(base, stride, n, st);
    check(cudaStreamSynchronize(st), "run_variant: upload");  // (h is freed on return)
    for (size_t c = 0; c < n; ++c) {
      WeightRef r = h.ref();
      r.data = base + c * stride;
      r.scales = h.scales.empty() ? nullptr : base + c * stride + sc_off;
      copies_.push_back(r);
    }
    w_key_ = key;
  }
  if (x_T_ != T || x_K_ != K) {
    x_T_ = x_K_ = -1;
    const std::vector<uint16_t> x = synth_x(T, K);
    x_.reserve(x.size() * 2);
    check(cudaMemcpyAsync(x_.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice, st),
          "run_variant: x upload");
    check(cudaStreamSynchronize(st), "run_variant: upload");
    x_T_ = T, x_K_ = K;
  }
  y_.reserve(size_t(T * N) * 4);
  y_first_.reserve(size_t(T * N) * 4);
}

void VariantBench::attention_inputs(const OpShape& s, size_t rotate, cudaStream_t st) {
  SynthAttention a = attention_fields(s);
  const std::string kv_key = fmt::format("{} {} {} {}", s.dtype, s.hkv, s.K, s.ctx);
  if (kv_key != kv_key_) {
    kv_key_.clear();
    synth_kv(a);
    kv_copy_bytes_ = align256(a.k.size()) + align256(a.v.size());
    const size_t n = rotation_copies(kv_copy_bytes_, rotate);
    kv_.reserve(n * kv_copy_bytes_);
    auto* base = static_cast<uint8_t*>(kv_.p);
    check(cudaMemcpyAsync(base, a.k.data(), a.k.size(), cudaMemcpyHostToDevice, st),
          "run_variant: key cache upload");
    check(cudaMemcpyAsync(base + align256(a.k.size()), a.v.data(), a.v.size(),
                          cudaMemcpyHostToDevice, st),
          "run_variant: value cache upload");
    replicate(base, kv_copy_bytes_, n, st);
    check(cudaStreamSynchronize(st), "run_variant: upload");
    kv_copies_ = int64_t(n);
    kv_v_offset_ = align256(a.k.size());
    kv_key_ = kv_key;
  }
  const std::string q_key = fmt::format("{} {} {} {}", s.T, s.N, s.K, s.ctx);
  if (q_key != q_key_) {
    q_key_.clear();
    synth_q(a);
    q_.reserve(a.q.size() * 4);
    check(cudaMemcpyAsync(q_.p, a.q.data(), a.q.size() * 4, cudaMemcpyHostToDevice, st),
          "run_variant: q upload");
    check(cudaStreamSynchronize(st), "run_variant: upload");
    out_.reserve(a.q.size() * 2);
    out_first_.reserve(a.q.size() * 2);
    // One sequence: the T rows at positions ctx - T .. ctx - 1, block b of the table = block b.
    const int64_t blocks = s.ctx / kAttnBlock;
    table_.resize(size_t(blocks));
    for (int64_t b = 0; b < blocks; ++b) table_[size_t(b)] = int32_t(b);
    ids_.assign(size_t(s.T), 0);
    pos_.resize(size_t(s.T));
    for (int64_t t = 0; t < s.T; ++t) pos_[size_t(t)] = s.ctx - s.T + t;
    tables_.assign(size_t(s.T), table_.data());
    table_sizes_.assign(size_t(s.T), blocks);
    q_key_ = q_key;
  }
}

void VariantBench::moe_inputs(const OpShape& s, size_t rotate, cudaStream_t st) {
  const std::string key = fmt::format("{} {} {} {}", s.dtype, s.N, s.K, s.experts);
  const int64_t F = s.N, E = s.K, n = s.experts;
  if (key != moe_key_) {  // every expert's matrices, in rotated copies of the whole set
    moe_key_.clear();
    const std::vector<SynthMoe::Set> sets = moe_sets(F, E, n);
    const size_t mat = align256(size_t(F * E) * 2), stride = 3 * mat;  // gate | up | down
    const size_t copy = stride * size_t(n);
    const size_t copies = rotation_copies(copy, rotate);
    experts_.reserve(copies * copy);
    auto* base = static_cast<uint8_t*>(experts_.p);
    for (size_t i = 0; i < sets.size(); ++i) {
      const std::vector<uint8_t>* m[3] = {&sets[i].gate, &sets[i].up, &sets[i].down};
      for (size_t j = 0; j < 3; ++j)
        check(cudaMemcpyAsync(base + i * stride + j * mat, m[j]->data(), m[j]->size(),
                              cudaMemcpyHostToDevice, st),
              "run_variant: expert upload");
    }
    replicate(base, stride, size_t(n), st, sets.size());  // expert e = set e % sets
    replicate(base, copy, copies, st);
    std::vector<const void*> tab(copies * 3 * size_t(n));
    for (size_t c = 0; c < copies; ++c)
      for (size_t e = 0; e < size_t(n); ++e)
        for (size_t m = 0; m < 3; ++m)
          tab[(c * 3 + m) * size_t(n) + e] = base + c * copy + e * stride + m * mat;
    expert_tables_.reserve(tab.size() * sizeof(void*));
    check(cudaMemcpyAsync(expert_tables_.p, tab.data(), tab.size() * sizeof(void*),
                          cudaMemcpyHostToDevice, st),
          "run_variant: expert tables");
    check(cudaStreamSynchronize(st), "run_variant: upload");
    moe_copies_ = int64_t(copies);
    moe_key_ = key;
  }
  const std::string rkey = fmt::format("{} {} {}", s.T, n, E);
  if (rkey != router_key_) {  // the rows' x and router logits
    router_key_.clear();
    const std::vector<uint16_t> x = synth_x(s.T, E);
    const std::vector<float> router = moe_router(s.T, n);
    router_.reserve(router.size() * 4);
    moe_x_.reserve(x.size() * 2);
    check(cudaMemcpyAsync(router_.p, router.data(), router.size() * 4, cudaMemcpyHostToDevice, st),
          "run_variant: router upload");
    check(cudaMemcpyAsync(moe_x_.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice, st),
          "run_variant: x upload");
    check(cudaStreamSynchronize(st), "run_variant: upload");
    router_key_ = rkey;
  }
  y_.reserve(size_t(s.T * E) * 4);
  y_first_.reserve(size_t(s.T * E) * 4);
}

VariantRun VariantBench::run(const std::vector<OpKernels>& reg, const KernelChoices& in_force,
                             const VariantOps& ops, int device, cudaStream_t s,
                             const OpShape& shape, const KernelVariant& v, int warmup, int reps,
                             bool want_output) {
  auto op =
      std::find_if(reg.begin(), reg.end(), [&](const OpKernels& o) { return o.op == shape.op; });
  if (op == reg.end()) fail("[cuda] no kernel variants of op '{}' ({})", shape.op, shape.str());
  if (std::find(op->variants.begin(), op->variants.end(), v) == op->variants.end())
    fail("[cuda] {} has no variant '{}' with these parameters", shape.op, v.name);
  // matmul_split: the registry's key has T = 0; the shape given here carries the rows to time.
  OpShape key = shape;
  if (op->changes_order) key.T = 0;
  if (!op->supports(v, key)) fail("[cuda] variant {} does not run {}", v.name, shape.str());
  if (shape.T < 1 || reps < 1 || warmup < 0)
    fail("[cuda] run_variant {} of {}: {} rows, {} repetitions, {} warm-up runs", v.name,
         shape.str(), shape.T, reps, warmup);
  int l2 = 0;
  check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "L2 size");
  const size_t rotate = 2 * size_t(std::max(l2, 1 << 20));

  VariantRun r;
  if (shape.op == "attention") {
    attention_inputs(shape, rotate, s);
    PassRows rows;
    rows.T = shape.T, rows.ids = ids_.data(), rows.pos = pos_.data();
    rows.tables = tables_.data(), rows.table_sizes = table_sizes_.data();
    rows.block_size = kAttnBlock;
    ops.begin_pass(rows);
    AttentionArgs a;
    a.q = static_cast<const float*>(q_.p);
    a.T = shape.T, a.H = shape.N, a.Hkv = shape.hkv, a.D = shape.K, a.block_size = kAttnBlock;
    a.block_tables = tables_.data(), a.pos = pos_.data();
    a.scale = 1.0f / std::sqrt(float(shape.K));
    a.kv = shape.dtype == "fp8" ? DType::F8_E4M3 : DType::BF16;
    const auto kernel = AttnKernel(v.param("kernel", 0));
    r.us = time_launches(s, warmup, reps, [&](int i, bool first) {
      const uint8_t* c =
          static_cast<const uint8_t*>(kv_.p) + size_t(i % kv_copies_) * kv_copy_bytes_;
      a.k = c, a.v = c + kv_v_offset_;
      a.out = first ? out_first_.p : out_.p;
      ops.attention(a, kernel);
    });
    if (want_output) {
      std::vector<uint16_t> o(size_t(shape.T * shape.N * shape.K));
      check(cudaMemcpyAsync(o.data(), out_first_.p, o.size() * 2, cudaMemcpyDeviceToHost, s),
            "run_variant: output");
      check(cudaStreamSynchronize(s), "run_variant: output");
      r.output.resize(o.size());
      for (size_t i = 0; i < o.size(); ++i) r.output[i] = bf16_to_f32(o[i]);
    }
    return r;
  }

  if (shape.op == "moe") {
    moe_inputs(shape, rotate, s);
    const auto tiling = MatmulKernel(v.param("tiling", 0));
    const int64_t n = shape.experts;
    r.us = time_launches(s, warmup, reps, [&](int i, bool first) {
      const auto* tab = static_cast<const bf16_bits* const*>(expert_tables_.p) +
                        size_t(i % moe_copies_) * 3 * size_t(n);
      MoeKernelArgs a;
      a.x = static_cast<const bf16_bits*>(moe_x_.p);
      a.router = static_cast<const float*>(router_.p);
      a.out = static_cast<float*>(first ? y_first_.p : y_.p);
      a.T = shape.T, a.E = shape.K, a.F = shape.N, a.n_experts = n, a.top_k = shape.top_k;
      a.norm_topk = true;
      a.gate = tab, a.up = tab + n, a.down = tab + 2 * n;
      ops.moe(a, tiling);
    });
    if (want_output) {
      r.output.resize(size_t(shape.T * shape.K));
      check(cudaMemcpyAsync(r.output.data(), y_first_.p, r.output.size() * 4,
                            cudaMemcpyDeviceToHost, s),
            "run_variant: output");
      check(cudaStreamSynchronize(s), "run_variant: output");
    }
    return r;
  }

  matmul_inputs(shape, rotate, s);
  MatmulPlan p;
  if (shape.op == "matmul") {  // under the segment length in force for the weight shape
    p.kseg = kseg_in_force(&in_force, shape.dtype, shape.N, shape.K);
    set_matmul_variant(p, v);
  } else {  // matmul_split: the variant's segments, the default tiling
    p.kseg = v.param("kseg", 0);
  }
  r.us = time_launches(s, warmup, reps, [&](int i, bool first) {
    ops.matmul(x_.p, shape.T, copies_[size_t(i) % copies_.size()],
               static_cast<float*>(first ? y_first_.p : y_.p), p);
  });
  if (want_output) {
    r.output.resize(size_t(shape.T * shape.N));
    check(cudaMemcpyAsync(r.output.data(), y_first_.p, r.output.size() * 4, cudaMemcpyDeviceToHost,
                          s),
          "run_variant: output");
    check(cudaStreamSynchronize(s), "run_variant: output");
  }
  return r;
}

std::vector<double> time_launches(cudaStream_t s, int warmup, int reps,
                                  const std::function<void(int, bool)>& launch) {
  const int warm = std::max(warmup, 1);
  for (int i = 0; i < warm; ++i) launch(i, false);
  struct Events {  // destroyed on every path (a launch may throw)
    std::vector<cudaEvent_t> e;
    ~Events() {
      for (cudaEvent_t x : e) cudaEventDestroy(x);
    }
  } ev;
  ev.e.resize(size_t(2 * reps), nullptr);
  for (auto& e : ev.e) check(cudaEventCreate(&e), "cudaEventCreate");
  // Queueing a launch, its two events and the backend's host work takes a few µs; the delay
  // outlasts it, so the GPU never waits for the host between timed calls (decode matmuls of
  // 5-20 µs would otherwise be timed with the launch latency).
  check(stream_delay(std::min<int64_t>(50000 + int64_t(reps) * 20000, 20000000), s),
        "stream_delay");
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(ev.e[size_t(2 * r)], s), "cudaEventRecord");
    launch(warm + r, r == 0);
    check(cudaEventRecord(ev.e[size_t(2 * r + 1)], s), "cudaEventRecord");
  }
  check(cudaEventSynchronize(ev.e.back()), "cudaEventSynchronize");
  std::vector<double> us(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, ev.e[size_t(2 * r)], ev.e[size_t(2 * r + 1)]),
          "cudaEventElapsedTime");
    us[size_t(r)] = 1e3 * double(ms);
  }
  return us;
}

}  // namespace basalt::cuda
