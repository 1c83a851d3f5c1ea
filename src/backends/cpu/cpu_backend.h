// The CPU backend: Highway SIMD kernels over a thread pool.
#pragma once
#include <memory>

#include "core/thread_pool.h"
#include "ops/backend.h"

namespace basalt::cpu {

// n_threads <= 0: all hardware threads. q8_acts: matmuls over GGUF block-quantised weights
// quantise their activations to 8 bits and sum integer products (ops/ref/qdot.h, as llama.cpp);
// false keeps f32 activations against the dequantised weights (ref::matmul's arithmetic).
std::unique_ptr<Backend> make_cpu_backend(int n_threads, bool q8_acts = true);

}  // namespace basalt::cpu
