// basalt bench: prefill and decode speed on synthetic token ids (no tokenizer needed).
// The CUDA issue extends it with roofline fractions and peak memory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/generator.h"

namespace basalt::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::vector<int64_t> prompts = {128};
  int64_t n = 32;
  int repeats = 3;
  int threads = 0;
  int64_t prefill_chunk = 0;
  bool json = false;
};

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench(const BenchArgs& a) {
  auto model = model_load(a.model);
  auto be = cpu::make_cpu_backend(a.threads);
  const ModelConfig& c = model->config();
  if (!a.json)
    std::printf("%-10s %8s %8s %14s %14s %10s\n", "backend", "prompt", "decode", "prefill tok/s",
                "decode tok/s", "ttft ms");
  for (int64_t P : a.prompts) {
    if (P <= 0 || P + a.n > c.max_context)
      fail("[bench] prompt {} + {} decode tokens exceed the context {}", P, a.n, c.max_context);
    std::vector<int32_t> ids(static_cast<size_t>(P));
    for (int64_t i = 0; i < P; ++i) ids[size_t(i)] = int32_t((i * 7919 + 17) % c.vocab);
    std::vector<double> pre, dec;
    for (int r = 0; r < a.repeats; ++r) {
      auto pool = model->new_kv_pool(P + a.n);
      KvSequence seq;
      std::vector<float> logits(static_cast<size_t>(c.vocab));
      double t0 = now_s();
      const int64_t chunk = a.prefill_chunk > 0 ? a.prefill_chunk : P;
      for (int64_t i = 0; i < P; i += chunk)
        model->forward(*be, *pool, seq,
                       std::span(ids).subspan(size_t(i), size_t(std::min(chunk, P - i))),
                       logits.data(), false);
      pre.push_back(now_s() - t0);
      t0 = now_s();
      for (int64_t i = 0; i < a.n; ++i) {
        const int32_t tok[1] = {argmax(logits)};
        model->forward(*be, *pool, seq, tok, logits.data(), false);
      }
      dec.push_back(now_s() - t0);
    }
    const double pre_s = median(pre), dec_s = median(dec);
    const double pre_tps = double(P) / pre_s, dec_tps = a.n > 0 ? double(a.n) / dec_s : 0.0;
    if (a.json) {
      nlohmann::json j = {{"backend", be->name()},    {"context", P + a.n},
                          {"prompt_tokens", P},       {"decode_tokens", a.n},
                          {"prefill_tok_s", pre_tps}, {"decode_tok_s", dec_tps},
                          {"ttft_ms", pre_s * 1e3},   {"repeats", a.repeats}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-10s %8lld %8lld %14.1f %14.2f %10.1f\n", "cpu", (long long)P, (long long)a.n,
                  pre_tps, dec_tps, pre_s * 1e3);
    }
  }
  std::fprintf(stderr, "backend: %s; medians of %d runs\n", be->name().c_str(), a.repeats);
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* sc = app.add_subcommand("bench", "Measure prefill and decode speed");
  sc->add_option("-m,--model", a->model, "HF model directory or .gguf (default: embedded)");
  sc->add_option("-p,--prompt-tokens", a->prompts, "Prompt lengths, e.g. -p 128,512")
      ->delimiter(',');
  sc->add_option("-n,--decode-tokens", a->n, "Decode steps per run");
  sc->add_option("-r,--repeats", a->repeats, "Runs per configuration (median reported)")
      ->check(CLI::Range(1, 1000));
  sc->add_option("-t,--threads", a->threads, "CPU threads (default: all)");
  sc->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per pass (0 = all)");
  sc->add_flag("--json", a->json, "One JSON object per configuration");
  return [a] { return run_bench(*a); };
}

}  // namespace basalt::cli
