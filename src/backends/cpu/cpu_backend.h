// The CPU backend: Highway SIMD kernels over a thread pool.
#pragma once
#include <memory>

#include "core/thread_pool.h"
#include "ops/backend.h"

namespace basalt::cpu {

// n_threads <= 0: all hardware threads.
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace basalt::cpu
