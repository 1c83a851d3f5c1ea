#include <cctype>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "core/error.h"
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

std::unique_ptr<Backend> make_backend(const std::string& device, int threads) {
  if (device == "cpu") return cpu::make_cpu_backend(threads);
#ifdef BASALT_HAVE_CUDA
  if (device.empty()) {
    const auto devs = cuda::cuda_devices();
    if (!devs.empty() && devs[0].cc_major == 9) return cuda::make_cuda_backend({});
    return cpu::make_cpu_backend(threads);
  }
  if (device == "cuda" || device.starts_with("cuda:")) {
    cuda::CudaOptions o;
    if (device.size() > 5) {
      const std::string n = device.substr(5);
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos)
        fail("[cli] --device {}: expected cuda:N", device);
      o.device = std::stoi(n);
    }
    return cuda::make_cuda_backend(o);
  }
#else
  if (device.empty()) return cpu::make_cpu_backend(threads);
  if (device == "cuda" || device.starts_with("cuda:"))
    fail("[cli] --device {}: this basalt was built without CUDA (nvcc was not found)", device);
#endif
  fail("[cli] --device {}: expected cpu, cuda or cuda:N", device);
}

void add_device_option(CLI::App* sc, std::string& device) {
  sc->add_option("--device", device,
                 "cpu | cuda | cuda:N (default: cuda when a Hopper GPU is visible, else cpu)");
}

std::string model_label(const std::string& path) {
  return path.empty() ? std::string("the embedded default model") : path;
}

}  // namespace basalt::cli
