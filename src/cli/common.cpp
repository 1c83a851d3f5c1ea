#include <cctype>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/recipe.h"
#ifdef BASALT_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#endif

namespace basalt::cli {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ',' || c == '[' || c == ']' || std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    size_t j = i;
    if (s[j] == '-') ++j;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == i || (j == i + 1 && s[i] == '-'))
      fail("[cli] token ids must be integers separated by commas or spaces, got '{}'", s);
    const long long v = std::stoll(s.substr(i, j - i));
    if (v < 0 || v > INT32_MAX) fail("[cli] token id {} out of range", v);
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

namespace {
std::unique_ptr<Backend> make_backend_on(const DeviceFlags& f, int threads);
}

std::unique_ptr<Backend> make_bare_backend(const DeviceFlags& f, int threads) {
  std::unique_ptr<Backend> be = make_backend_on(f, threads);
  if (f.kv_dtype.empty() || f.kv_dtype == "auto") return be;
  DType t;
  if (f.kv_dtype == "f32")
    t = DType::F32;
  else if (f.kv_dtype == "bf16")
    t = DType::BF16;
  else if (f.kv_dtype == "fp8")
    t = DType::F8_E4M3;
  else
    fail("[cli] --kv-cache-dtype {}: expected auto, f32, bf16 or fp8", f.kv_dtype);
  be->set_kv_dtype(t);
  return be;
}

std::unique_ptr<Backend> make_backend(const DeviceFlags& f, int threads, std::string* recipe_line) {
  std::unique_ptr<Backend> be = make_bare_backend(f, threads);
  std::string line = kernels::recipe_apply(*be, f.no_autotune, f.recipe);
  if (recipe_line) *recipe_line = std::move(line);
  return be;
}

namespace {
std::unique_ptr<Backend> make_backend_on(const DeviceFlags& f, int threads) {
  const std::string& device = f.device;
  const bool fast_prefill = f.fast_prefill;
  if (f.quant_acts != "q8" && f.quant_acts != "f32")
    fail("[cli] --quant-acts {}: expected q8 or f32", f.quant_acts);
  auto cpu_backend = [&] {
    if (fast_prefill)
      spdlog::warn("--fast-prefill only changes the CUDA backend; the CPU runs exact");
    return cpu::make_cpu_backend(threads, f.quant_acts == "q8");
  };
  if (device == "cpu") return cpu_backend();
#ifdef BASALT_HAVE_CUDA
  cuda::CudaOptions o;
  o.fast_prefill = fast_prefill;
  if (device.empty()) {
    const auto devs = cuda::cuda_devices();
    if (!devs.empty() && devs[0].cc_major == 9) return cuda::make_cuda_backend(o);
    return cpu_backend();
  }
  if (device == "cuda" || device.starts_with("cuda:")) {
    if (device.size() > 5) {
      const std::string n = device.substr(5);
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos)
        fail("[cli] --device {}: expected cuda:N", device);
      o.device = std::stoi(n);
    }
    return cuda::make_cuda_backend(o);
  }
#else
  if (device.empty()) return cpu_backend();
  if (device == "cuda" || device.starts_with("cuda:"))
    fail("[cli] --device {}: this basalt was built without CUDA (nvcc was not found)", device);
#endif
  fail("[cli] --device {}: expected cpu, cuda or cuda:N", device);
}
}  // namespace

void add_device_option(CLI::App* sc, DeviceFlags& f) {
  sc->add_option("--kv-cache-dtype", f.kv_dtype,
                 "auto | f32 | bf16 | fp8: the KV cache's type (auto: f32 on the CPU, bf16 on "
                 "CUDA; bf16 on the CPU halves the bytes attention reads; fp8: E4M3 with a "
                 "scale per position and head)");
  sc->add_option("--device", f.device,
                 "cpu | cuda | cuda:N (default: cuda when a Hopper GPU is visible, else cpu)");
  sc->add_flag(
      "--fast-prefill", f.fast_prefill,
      "CUDA: cuBLAS for prompt passes of more than 64 rows (faster, NOT exact: logits then "
      "depend on the prefill chunking)");
  sc->add_option("--quant-acts", f.quant_acts,
                 "q8 | f32: CPU matmuls over GGUF block-quantised weights (Q8_0, Q4_0, Q4_K, "
                 "Q5_K, Q6_K) quantise their activations to 8 bits and sum integer products, as "
                 "llama.cpp does (q8), or keep f32 activations against the dequantised weights "
                 "(f32: closer to the unquantised model, slower)")
      ->capture_default_str();
  sc->add_flag("--no-autotune", f.no_autotune,
               "Run the kernel defaults, not the measured recipe for this device");
  sc->add_option("--recipe", f.recipe,
                 "Kernel recipe JSON to run (default: the one for this device from "
                 "`basalt tune` or shipped; docs/tuning.md)")
      ->excludes(sc->get_option("--no-autotune"));
}

void add_spec_options(CLI::App* sc, std::string& spec, int64_t& spec_tokens,
                      const std::string& what, bool* adaptive, float* min_confidence) {
  sc->add_option("--spec", spec, what + " (docs/speculative.md)");
  sc->add_option("--spec-tokens", spec_tokens,
                 adaptive ? "Draft tokens verified per pass (with --spec-adaptive: at most)"
                          : "Draft tokens verified per pass")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  if (adaptive)
    sc->add_flag("--spec-adaptive", *adaptive,
                 "Choose the draft length per pass from the measured acceptance and pass costs");
  if (min_confidence)
    sc->add_option("--spec-min-confidence", *min_confidence,
                   "dspark: end a proposal before the first slot whose confidence head says "
                   "less than this (0 = off)")
        ->check(CLI::Range(0.0f, 1.0f))
        ->capture_default_str();
}

std::string model_label(const std::string& path) {
  return path.empty() ? std::string("the embedded default model") : path;
}

}  // namespace basalt::cli
