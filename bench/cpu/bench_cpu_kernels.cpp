// CPU matmul kernels at qwen3-0.6b's decode and prefill shapes, per weight type (Google
// Benchmark): `bench_cpu_kernels [--benchmark_filter=F16] [--benchmark_repetitions=5]`.
// Counters (rates, per second): weight_GB, the weight bytes read (the decode bound), and GFLOP,
// 2·T·N·K (the prefill one).
// Weights are random, quantised by basalt's reference encoders, and rotated over copies
// totalling more than 64 MiB so each call reads memory, not the last level cache. Threads:
// BASALT_BENCH_THREADS (default: all). For whole-model figures use `basalt bench`; against
// llama.cpp, bench/cpu_side_by_side.py.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "ops/ref/quantize.h"

namespace {

using basalt::DType;

struct Weights {
  std::vector<std::vector<uint8_t>> copies;
  basalt::WeightRef at(size_t i, int64_t N, int64_t K, DType t) const {
    return {t, N, K, copies[i % copies.size()].data()};
  }
};

const Weights& weights(DType t, int64_t N, int64_t K) {
  static std::vector<std::pair<std::tuple<DType, int64_t, int64_t>, std::unique_ptr<Weights>>> memo;
  for (const auto& [key, w] : memo)
    if (key == std::make_tuple(t, N, K)) return *w;
  auto w = std::make_unique<Weights>();
  std::mt19937 rng(uint32_t(N * 31 + K));
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<float> row(static_cast<size_t>(K));
  const size_t row_bytes = basalt::dtype_bytes(t, K), bytes = row_bytes * size_t(N);
  std::vector<uint8_t> one(bytes);
  for (int64_t n = 0; n < N; ++n) {
    for (float& v : row) v = nd(rng);
    basalt::ref::quantize(t, row.data(), K, one.data() + size_t(n) * row_bytes);
  }
  const size_t copies = std::max<size_t>(1, (size_t(64) << 20) / bytes + 1);
  for (size_t c = 0; c < copies; ++c) w->copies.push_back(one);
  memo.emplace_back(std::make_tuple(t, N, K), std::move(w));
  return *memo.back().second;
}

basalt::Backend& backend() {
  static std::unique_ptr<basalt::Backend> be = [] {
    const char* e = std::getenv("BASALT_BENCH_THREADS");
    return basalt::cpu::make_cpu_backend(e ? std::atoi(e) : 0);
  }();
  return *be;
}

void BM_Matmul(benchmark::State& st, DType t, int64_t T, int64_t N, int64_t K) {
  const Weights& w = weights(t, N, K);
  std::vector<float> x(size_t(T * K)), y(size_t(T * N));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  size_t i = 0;
  for (auto _ : st) {
    backend().matmul(x.data(), T, w.at(i++, N, K, t), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double calls = double(st.iterations());
  st.counters["weight_GB"] = benchmark::Counter(calls * double(basalt::dtype_bytes(t, N * K)) / 1e9,
                                           benchmark::Counter::kIsRate);
  st.counters["GFLOP"] =
      benchmark::Counter(calls * 2.0 * double(T) * double(N) * double(K) / 1e9,
                         benchmark::Counter::kIsRate);
}

// qwen3-0.6b: q 2048×1024, k/v 1024×1024, o 1024×2048, gate/up 3072×1024, down 1024×3072.
const int registered = [] {
  const std::pair<const char*, DType> types[] = {{"F16", DType::F16},   {"BF16", DType::BF16},
                                                 {"Q8_0", DType::Q8_0}, {"Q4_K", DType::Q4_K},
                                                 {"Q5_K", DType::Q5_K}, {"Q6_K", DType::Q6_K}};
  const std::tuple<const char*, int64_t, int64_t> shapes[] = {
      {"q", 2048, 1024}, {"gate_up", 3072, 1024}, {"down", 1024, 3072}};
  for (const auto& [tn, t] : types)
    for (const auto& [sn, N, K] : shapes)
      for (int64_t T : {int64_t(1), int64_t(128)}) {
        const std::string name = std::string("matmul/") + tn + "/" + sn + "/T" + std::to_string(T);
        benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, T, N, K)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
