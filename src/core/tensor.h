// TensorView: a named, typed, shaped view of bytes owned elsewhere (usually a Blob).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace basalt {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // outermost first (row-major), as in safetensors / PyTorch
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace basalt
