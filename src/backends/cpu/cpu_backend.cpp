#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "backends/cpu/kernels_hwy.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/ref/qdot.h"
#include "ops/ref/quantize.h"
#include "ops/ref/ref_ops.h"
#include "ops/ref/scaled.h"

namespace basalt::cpu {
namespace {

// The CPU's model name (x86: /proc/cpuinfo "model name"; Arm: its implementer and part), for
// matching recipes.
std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, impl, part;
  auto value = [](const std::string& l) {
    const size_t c = l.find(':');
    std::string v = c == std::string::npos ? "" : l.substr(c + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  };
  while (std::getline(f, line)) {
    if (line.starts_with("model name")) return value(line);
    if (line.starts_with("CPU implementer") && impl.empty()) impl = value(line);
    if (line.starts_with("CPU part") && part.empty()) part = value(line);
  }
  if (!impl.empty()) return "arm implementer " + impl + " part " + part;
  return "unknown cpu";
}

// Host memory in 2 MiB-aligned chunks that the kernel backs with transparent huge pages, handed
// out by a bump pointer (64-byte aligned); freed with the arena.
class HugePageArena {
 public:
  HugePageArena() = default;
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;
  ~HugePageArena() {
    for (const auto& [p, n] : maps_) ::munmap(p, n);
  }
  void* take(size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (left_ < bytes) {
      constexpr size_t kHuge = size_t(2) << 20, kChunk = size_t(256) << 20;
      const size_t n = std::max(kChunk, (bytes + kHuge - 1) / kHuge * kHuge);
      void* m = ::mmap(nullptr, n + kHuge, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) return nullptr;
      maps_.push_back({m, n + kHuge});
      const uintptr_t a = (reinterpret_cast<uintptr_t>(m) + kHuge - 1) / kHuge * kHuge;
      next_ = reinterpret_cast<char*>(a);
      left_ = n;
      ::madvise(next_, n, MADV_HUGEPAGE);  // (a hint; "always" does the same)
    }
    void* p = next_;
    next_ += bytes;
    left_ -= bytes;
    return p;
  }

 private:
  std::vector<std::pair<void*, size_t>> maps_;
  char* next_ = nullptr;
  size_t left_ = 0;
};

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
size_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

class CpuBackend final : public HostBackend {
 public:
  CpuBackend(int n_threads, bool q8_acts) : pool_(n_threads), q8_acts_(q8_acts) {
    const char* e = std::getenv("BASALT_CPU_MMAP_WEIGHTS");
    copy_weights_ = !(e && e[0] == '1');
  }

  // Matrices are copied out of the checkpoint's file mapping into huge-page memory: a decode
  // step streams every weight once, and through 4 KiB file pages it read about 10 % slower on
  // this machine's EPYC (the hardware prefetchers stop at each page boundary; a 1.2 GB f16 read
  // by two threads: 21.7 GB/s mapped, 24.6 GB/s from huge pages, medians of 15). A copy that
  // would take more than 3/4 of the memory available at the first copy stays mapped (logged
  // once), as does everything with BASALT_CPU_MMAP_WEIGHTS=1. The copy has the same bytes, so
  // nothing computed changes. Scales (NVFP4, FP8) stay where they are (small).
  WeightRef prepare_weight(const WeightRef& w) override {
    if (!copy_weights_ || !w.data || w.rows <= 0 || w.cols <= 0) return w;
    const size_t bytes = dtype_bytes(w.dtype, w.rows * w.cols);
    if (budget_ == 0) budget_ = std::max<size_t>(1, mem_available() / 4 * 3);
    void* p = copied_ + bytes <= budget_ ? arena_.take(bytes) : nullptr;
    if (!p) {
      if (!told_)
        spdlog::info("[cpu] weights past {:.1f} GB stay memory-mapped (memory available)",
                     double(copied_) / 1e9);
      told_ = true;
      return w;
    }
    constexpr int64_t kPiece = int64_t(1) << 21;
    const int64_t pieces = int64_t((bytes + size_t(kPiece) - 1) / size_t(kPiece));
    pool_.parallel_ranges(pieces, 1, [&](int64_t b, int64_t e) {
      const size_t o = size_t(b * kPiece), n = std::min(bytes, size_t(e * kPiece)) - o;
      std::memcpy(static_cast<char*>(p) + o, static_cast<const char*>(w.data) + o, n);
    });
    copied_ += bytes;
    WeightRef c = w;
    c.data = p;
    return c;
  }

  std::string name() const override {
    return fmt::format("cpu ({}, {} threads{})", simd_target_name(), pool_.size(),
                       q8_acts_ ? "" : ", f32 activations");
  }
  bool supports_weight(DType t) const override { return ref::weight_dtype_supported(t); }

  // Split over output columns N in blocks of `grain` (each thread owns whole dot products); with
  // a row block, each task walks the rows of x in blocks of that many (x stays in cache while a
  // block of columns is read). Neither changes a dot product's schedule (kernels_hwy.h), so every
  // variant gives the same bits: the recipe may choose them per T (docs/tuning.md).
  void matmul(const void* xv, int64_t T, const WeightRef& w, float* y) override {
    if (!supports_weight(w.dtype)) fail("[cpu] matmul: weight dtype {}", dtype_name(w.dtype));
    int64_t grain = 0, t_block = 0;  // grain 0: auto_grain
    if (!choices_.empty()) {
      const OpShape s{"matmul", kernel_dtype(w), T, w.rows, w.cols};
      if (const KernelVariant* v = choices_.find(s)) {
        grain = v->param("grain", 0);
        t_block = v->param("t_block", 0);
      }
    }
    matmul_with(static_cast<const float*>(xv), T, w, y, grain, t_block);
  }

  DeviceIdentity identity() const override {
    DeviceIdentity d;
    d.backend = "cpu";
    d.name = cpu_model_name();
    d.match["isa"] = simd_target_name();
    d.match["cores"] = std::to_string(std::thread::hardware_concurrency());
    d.info["threads"] = std::to_string(pool_.size());
    return d;
  }

  std::vector<OpKernels> kernel_registry() const override {
    OpKernels m;
    m.op = "matmul";
    m.doc = "columns per task (grain; auto: about 8 tasks per thread) and rows of x per sweep "
            "(t_block): same bits";
    m.variants.push_back({"auto", {}});  // the default
    for (int64_t g : {16, 64, 256})
      m.variants.push_back({fmt::format("cols{}", g), {{"grain", g}}});
    for (int64_t g : {16, 64})
      for (int64_t tb : {4, 16, 64})
        m.variants.push_back(
            {fmt::format("cols{}_rows{}", g, tb), {{"grain", g}, {"t_block", tb}}});
    m.supports = [](const KernelVariant& v, const OpShape& s) {
      const int64_t tb = v.param("t_block", 0);
      return tb == 0 || s.T > tb;  // no row block, or one shorter than T
    };
    return {m};
  }

  VariantRun run_variant(const OpShape& s, const KernelVariant& v, int warmup, int reps,
                         bool want_output) override {
    if (s.op != "matmul") fail("[cpu] no variants of {}", s.str());
    const std::vector<OpKernels> reg = kernel_registry();
    if (std::find(reg[0].variants.begin(), reg[0].variants.end(), v) == reg[0].variants.end() ||
        !reg[0].supports(v, s))
      fail("[cpu] {}: no variant {} for this shape", s.str(), v.name);
    const TuneInputs& in = tune_inputs(s);
    std::vector<float> y(size_t(s.T * s.N));
    VariantRun r;
    const int64_t grain = v.param("grain", 0), t_block = v.param("t_block", 0);
    size_t copy = 0;
    for (int i = 0; i < warmup + reps; ++i) {
      const WeightRef& w = in.w[copy++ % in.w.size()];
      const auto t0 = std::chrono::steady_clock::now();
      matmul_with(in.x.data(), s.T, w, y.data(), grain, t_block);
      const auto t1 = std::chrono::steady_clock::now();
      if (i < warmup) continue;
      r.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      if (want_output && r.output.empty()) r.output = y;
    }
    return r;
  }

  // One vector sum of squares per row (kernels_hwy.cpp): identical for every row count.
  void rmsnorm(const float* x, const float* w, void* yv, int64_t rows, int64_t n,
               float eps) override {
    norm_rows(const_cast<float*>(x), nullptr, w, static_cast<float*>(yv), rows, n, eps);
  }
  void add_rmsnorm(float* x, const float* delta, const float* w, void* y, int64_t rows, int64_t n,
                   float eps) override {
    norm_rows(x, delta, w, static_cast<float*>(y), rows, n, eps);
  }
  void head_rmsnorm(float* x, const float* w, int64_t rows, int64_t n, float eps) override {
    norm_rows(x, nullptr, w, x, rows, n, eps);
  }

  void rope(float* x, int64_t T, int64_t heads, int64_t D, int64_t rot, const float* cos,
            const float* sin, RopeStyle style) override {
    ref::rope(x, T, heads, D, rot, cos, sin, style);
  }

  // One task per (group of kAttnRowsPerTask rows, head); each row visits its keys 0..p in
  // order (kernels_hwy.cpp), so the result of a query does not depend on which other rows (or
  // sequences) share the pass or its task.
  // Blocks of tasks, about 8 per thread (later rows have more keys: claimed dynamically), fewer
  // where a block would have less than kMinTaskWork products to do.
  void attention(const AttentionArgs& a) override {
    const int64_t n = (a.T + kAttnRowsPerTask - 1) / kAttnRowsPerTask * a.H;
    int64_t keys = 0;
    for (int64_t t = 0; t < a.T; ++t) keys += a.keys(t);
    const int64_t work = 2 * keys * a.H * a.D;
    const int64_t blocks = std::clamp<int64_t>(work / kMinTaskWork, 1, 8 * int64_t(pool_.size()));
    const int64_t per = (n + blocks - 1) / blocks;
    pool_.parallel_for((n + per - 1) / per, [&](int64_t b) {
      attention_tasks(a, b * per, std::min(n, (b + 1) * per));
    });
  }

  void swiglu(const float* gate, const float* up, void* outv, int64_t n) override {
    float* out = static_cast<float*>(outv);
    pool_.parallel_ranges(n, kMinTaskWork / 8, [&](int64_t i0, int64_t i1) {
      swiglu_range(gate + i0, up + i0, out + i0, i1 - i0);
    });
  }

  void add(float* y, const float* x, int64_t n) override { ref::add(y, x, n); }

 private:
  // The least work (multiply-adds, or elements of elementwise ops) a task gets: below it a
  // task's hand-off to another thread costs more than it saves. On a 64-wide model
  // (stories260K) every op was slower on two threads than on one.
  static constexpr int64_t kMinTaskWork = int64_t(1) << 15;
  // x (+= delta) then y = rmsnorm(x) · w, rows split over the threads.
  // Rows of `width` elements per task: at least kMinTaskWork elements.
  static int64_t rows_per_task(int64_t width) {
    return std::max<int64_t>(1, kMinTaskWork / std::max<int64_t>(width, 1));
  }
  void norm_rows(float* x, const float* delta, const float* w, float* y, int64_t rows, int64_t n,
                 float eps) {
    pool_.parallel_ranges(rows, rows_per_task(n), [&](int64_t r0, int64_t r1) {
      rmsnorm_rows(x, delta, w, y, r0, r1, n, eps);
    });
  }
  // Columns per task when the recipe names none: about 8 tasks per thread, in multiples of 16
  // (a task per 16 columns cost a third of the LM head's decode time in scheduling).
  int64_t auto_grain(int64_t N) const {
    const int64_t tasks = 8 * int64_t(pool_.size());
    return std::max<int64_t>(16, (N + tasks * 16 - 1) / (tasks * 16) * 16);
  }
  void matmul_with(const float* x, int64_t T, const WeightRef& w, float* y, int64_t grain,
                   int64_t t_block) {
    const int64_t N = w.rows, K = w.cols;
    const bool q8 = q8_acts_ && ref::q8_acts_supported(w.dtype);
    if (grain <= 0 && t_block <= 0 && T >= 8 && ref::q8_acts_supported(w.dtype)) {
      // GGUF block-weight prefill without a recipe entry: tiles of 4 rows of x sweep a task's
      // columns, whose weights stay in a 256 KiB L2. (The F32/F16/BF16/FP8/NVFP4 kernels
      // block x themselves and keep weights in L1: kernels_hwy.cpp, MatmulT.)
      t_block = 4;
      const int64_t row = int64_t(dtype_bytes(w.dtype, K));
      grain = std::clamp<int64_t>((int64_t(256) << 10) / std::max<int64_t>(row, 1) / 16 * 16, 16,
                                  auto_grain(N));
    }
    if (grain <= 0) {  // about 8 tasks per thread, none with less than kMinTaskWork products
      const int64_t min_cols = kMinTaskWork / std::max<int64_t>(T * K, 1);
      grain = std::min(std::max(auto_grain(N), (min_cols + 15) / 16 * 16), std::max<int64_t>(N, 1));
    }
    const int64_t blocks = (N + grain - 1) / grain;
    const int64_t tb = t_block > 0 ? t_block : T;
    if (q8) {  // rows quantised once, then tasks over columns as for every dtype
      ref::q8_acts_resize(acts_, T, K, ref::q8_group(w.dtype));
      pool_.parallel_ranges(T, rows_per_task(K), [&](int64_t t0, int64_t t1) {
        cpu::quantize_acts_rows(x, t0, t1, acts_);
      });
    }
    pool_.parallel_for(blocks, [&](int64_t b) {
      const int64_t n0 = b * grain, n1 = std::min(N, n0 + grain);
      for (int64_t t0 = 0; t0 < T; t0 += tb) {
        if (q8)
          matmul_q8_rows(acts_, t0, std::min(T, t0 + tb), w, n0, n1, y, N);
        else
          matmul_rows(x + t0 * K, std::min(tb, T - t0), w, n0, n1, y + t0 * N, N);
      }
    });
  }

  // Synthetic inputs of one shape for run_variant (kept while the tuner walks its variants):
  // x [T, K] and copies of a random weight [N, K] in the shape's dtype, more copies than fit
  // in a last-level cache of 64 MiB.
  struct TuneInputs {
    OpShape shape;
    std::vector<float> x;
    std::vector<std::vector<uint8_t>> bytes, scales;
    std::vector<WeightRef> w;
  };
  const TuneInputs& tune_inputs(const OpShape& s);

  ThreadPool pool_;
  bool q8_acts_;
  bool copy_weights_ = true, told_ = false;  // prepare_weight
  size_t copied_ = 0, budget_ = 0;
  HugePageArena arena_;
  ref::Q8Acts acts_;  // the quantised rows of the current matmul
  std::unique_ptr<TuneInputs> tune_;
};

// Random weights in the dtype a recipe names (as kernel_dtype writes it), quantised by the
// reference quantisers for the block and scaled formats.
const CpuBackend::TuneInputs& CpuBackend::tune_inputs(const OpShape& s) {
  if (tune_ && tune_->shape == s) return *tune_;
  auto in = std::make_unique<TuneInputs>();
  in->shape = s;
  uint64_t seed = 0x9e3779b97f4a7c15ull ^ uint64_t(s.N * 131 + s.K * 7 + s.T);
  auto rnd = [&] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return float(int64_t(seed >> 40) - (int64_t(1) << 23)) / float(1 << 23);  // [-1, 1)
  };
  in->x.resize(size_t(s.T * s.K));
  for (float& v : in->x) v = rnd();
  std::vector<float> wf(size_t(s.N * s.K));
  for (float& v : wf) v = rnd() * 0.05f;
  WeightRef w;
  w.rows = s.N, w.cols = s.K;
  std::vector<uint8_t> data, scales;
  if (s.dtype == "nvfp4") {
    w.dtype = DType::NVFP4;
    data.resize(size_t(s.N * s.K / 2));
    scales.resize(size_t(s.N * s.K / 16));
    ref::quantize_nvfp4(wf.data(), s.N, s.K, data.data(), scales.data(), &w.scale);
  } else if (s.dtype == "fp8") {
    w.dtype = DType::F8_E4M3;
    data.resize(size_t(s.N * s.K));
    ref::quantize_fp8_tensor(wf.data(), s.N * s.K, data.data(), &w.scale);
  } else if (s.dtype.starts_with("fp8-block")) {
    const int64_t B = std::stoll(s.dtype.substr(9));
    w.dtype = DType::F8_E4M3;
    w.scale_block = int32_t(B);
    data.resize(size_t(s.N * s.K));
    scales.resize(size_t(((s.N + B - 1) / B) * ((s.K + B - 1) / B)) * 4);
    ref::quantize_fp8_block(wf.data(), s.N, s.K, B, data.data(),
                            reinterpret_cast<float*>(scales.data()));
  } else {
    DType t = DType::F32;
    bool found = false;
    for (DType d : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K,
                    DType::Q5_K, DType::Q6_K})
      if (kernel_dtype(WeightRef{d}) == s.dtype) t = d, found = true;
    if (!found) fail("[cpu] cannot make synthetic {} weights", s.dtype);
    if (!ref::quantize_supported(t)) fail("[cpu] cannot make synthetic {} weights", s.dtype);
    w.dtype = t;
    data.resize(dtype_bytes(t, s.N * s.K));
    ref::quantize(t, wf.data(), s.N * s.K, data.data());
  }
  const size_t bytes = data.size() + scales.size();
  const size_t copies =
      std::clamp<size_t>((size_t(64) << 20) / std::max<size_t>(bytes, 1) + 1, 1, 8);
  for (size_t c = 0; c < copies; ++c) {
    in->bytes.push_back(data);
    in->scales.push_back(scales);
  }
  for (size_t c = 0; c < copies; ++c) {
    WeightRef x = w;
    x.data = in->bytes[c].data();
    x.scales = in->scales[c].empty() ? nullptr : in->scales[c].data();
    in->w.push_back(x);
  }
  tune_ = std::move(in);
  return *tune_;
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads, bool q8_acts) {
  return std::make_unique<CpuBackend>(n_threads, q8_acts);
}

}  // namespace basalt::cpu
