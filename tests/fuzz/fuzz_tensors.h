// What a loader does with a parsed checkpoint, for the fuzzers: check each tensor view against
// the input bytes it must lie in, then read elements from it. A view that breaks an invariant
// is a parser bug, not a bad file, so it aborts (libFuzzer then saves the input) instead of
// throwing basalt::Error.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "io/tensor_store.h"
#include "ops/ref/quants.h"

namespace basalt::fuzz {

[[noreturn]] inline void fuzz_abort(const TensorView& t, const char* what) {
  std::fprintf(stderr, "fuzz: tensor '%s' (%s, shape %s, %zu bytes): %s\n", t.name.c_str(),
               std::string(dtype_name(t.dtype)).c_str(), shape_str(t.shape).c_str(), t.nbytes,
               what);
  std::abort();
}

// Sum of a few elements, so the reads cannot be optimised away.
inline double fuzz_read_tensor(const TensorView& t, const uint8_t* data, size_t size) {
  // Loaders multiply dims in any order (rows * cols, numel / last dim): the product of the
  // non-zero dims must fit, not only the product taken outermost first.
  int64_t nonzero = 1;
  for (int64_t d : t.shape) {
    if (d < 0) fuzz_abort(t, "negative dimension");
    if (d != 0 && __builtin_mul_overflow(nonzero, d, &nonzero))
      fuzz_abort(t, "non-zero dims multiply past int64");
  }
  int64_t n = t.numel();  // UBSan reports an overflow here if the parser let one through
  size_t want = 0;
  try {
    want = dtype_bytes(t.dtype, n);
  } catch (const Error&) {
    fuzz_abort(t, "element count is not a whole number of blocks");
  }
  if (t.nbytes != want) fuzz_abort(t, "byte count does not match shape and dtype");
  if (t.nbytes == 0) return 0;
  if (t.data < data || t.data > data + size || t.nbytes > size_t(data + size - t.data))
    fuzz_abort(t, "data lies outside the input");

  double sum = 0;
  int be = dtype_block_elems(t.dtype);
  if (be == 1 || t.dtype == DType::Q8_0) {
    // Element reads as tests and loaders do them: first, second, middle, last.
    for (int64_t i : {int64_t(0), int64_t(1), n / 2, n - 1})
      if (i >= 0 && i < n) sum += dtype_read_f64(t.dtype, t.data, i);
  }
  if (be > 1) {
    // Loaders dequantise whole blocks: the first and the last.
    float out[256];
    int64_t blocks = n / be;
    if (!ref::dequant_blocks(t.dtype, t.data, 1, out)) fuzz_abort(t, "no dequantiser");
    sum += out[0];
    ref::dequant_blocks(t.dtype, t.data + (blocks - 1) * dtype_block_bytes(t.dtype), 1, out);
    sum += out[be - 1];
  }
  return sum;
}

inline double fuzz_read_store(const io::TensorStore& store, const uint8_t* data, size_t size) {
  double sum = 0;
  for (const std::string& name : store.names()) {
    const TensorView& t = store.get(name);
    if (t.name != name) fuzz_abort(t, "stored under another name");
    sum += fuzz_read_tensor(t, data, size);
  }
  return sum;
}

}  // namespace basalt::fuzz
