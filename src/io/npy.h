// NumPy .npy files (float arrays only): reference logits and activations for tests and
// `basalt logits`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace basalt::io {

struct NpyArray {
  std::vector<int64_t> shape;  // C order, outermost first
  std::vector<float> data;     // numel() values
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// Writes NPY v1.0, '<f4', C order; via a temporary file renamed into place, so readers never see
// a half-written file. Throws basalt::Error("[npy] PATH: ...").
void npy_write_f32(const std::string& path, const float* data, std::vector<int64_t> shape);
// Reads '<f4' or '<f8' (converted to float), C order, NPY v1/v2/v3.
NpyArray npy_read(const std::string& path);

}  // namespace basalt::io
