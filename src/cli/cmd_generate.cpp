// basalt generate: stream a continuation of a prompt to stdout.
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generator.h"
#include "tokenizer/tokenizer.h"

namespace basalt::cli {
namespace {

struct GenerateArgs {
  DeviceFlags dev;  // --device, --kv-cache-dtype, --fast-prefill, --no-autotune, --recipe
  std::string model, prompt;
  int64_t n = 128;
  std::optional<float> temp, top_p, min_p, repeat_penalty;
  std::optional<int> top_k;
  float presence = 0.0f, frequency = 0.0f;
  std::optional<uint64_t> seed;
  int threads = 0;
  int64_t prefill_chunk = 0;
  bool ignore_eos = false;
  std::string spec;  // --spec: a drafter name
  int64_t spec_tokens = 4;
  float spec_min_confidence = 0.0f;
  bool spec_adaptive = false;
};

// Sampling defaults: the checkpoint's generation_config.json where it has them, otherwise
// llama.cpp's (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05); flags win over both.
SamplingParams sampling_from(const GenerateArgs& a, const nlohmann::json& gen) {
  SamplingParams p;
  auto num = [&](const char* k, double d) {
    auto it = gen.find(k);
    return it != gen.end() && it->is_number() ? it->get<double>() : d;
  };
  const bool do_sample = gen.value("do_sample", true);
  p.temperature = float(num("temperature", 0.8));
  if (!do_sample) p.temperature = 0.0f;
  p.top_k = int(num("top_k", 40));
  p.top_p = float(num("top_p", 0.95));
  p.min_p = float(num("min_p", 0.05));
  p.repetition_penalty = float(num("repetition_penalty", 1.0));
  if (a.temp) p.temperature = *a.temp;
  if (a.top_k) p.top_k = *a.top_k;
  if (a.top_p) p.top_p = *a.top_p;
  if (a.min_p) p.min_p = *a.min_p;
  if (a.repeat_penalty) p.repetition_penalty = *a.repeat_penalty;
  p.presence_penalty = a.presence;
  p.frequency_penalty = a.frequency;
  p.seed = a.seed ? *a.seed : std::random_device{}();
  if (p.temperature < 0 || p.top_p <= 0 || p.top_p > 1 || p.min_p < 0 || p.min_p > 1 ||
      p.top_k < 0 || p.repetition_penalty <= 0)
    fail(
        "[generate] invalid sampling parameters (temperature ≥ 0, 0 < top-p ≤ 1, "
        "0 ≤ min-p ≤ 1, top-k ≥ 0, repeat-penalty > 0)");
  return p;
}

int run_generate(const GenerateArgs& a) {
  auto model = model_load(a.model);
  auto tok = tok::tokenizer_from_checkpoint(model->checkpoint());
  auto be = make_backend(a.dev, a.threads);

  std::vector<int32_t> prompt = tok->encode(a.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (prompt.empty()) {
    if (model->config().bos_id >= 0)
      prompt.push_back(model->config().bos_id);
    else
      fail("[generate] the prompt is empty and the model has no BOS token: pass -p TEXT");
  }
  GenerateOptions opt;
  opt.max_new_tokens = a.n;
  opt.sampling = sampling_from(a, model->checkpoint().generation_config);
  opt.prefill_chunk = a.prefill_chunk;
  opt.ignore_eos = a.ignore_eos;
  if (tok->eos_id() >= 0) opt.stop_ids.push_back(tok->eos_id());
  std::unique_ptr<Drafter> drafter;
  if (!a.spec.empty()) {
    drafter = make_drafter(a.spec, *be, *model, int64_t(prompt.size()) + a.n + a.spec_tokens + 1,
                           a.spec_min_confidence);
    opt.drafter = drafter.get();
    opt.spec_tokens = a.spec_tokens;
    opt.spec_adaptive = a.spec_adaptive;
  }
  spdlog::info("{} on {}; sampling: temperature {}, top-k {}, top-p {}, min-p {}, seed {}",
               model_label(a.model), be->name(), opt.sampling.temperature, opt.sampling.top_k,
               opt.sampling.top_p, opt.sampling.min_p, opt.sampling.seed);

  tok::StreamDecoder dec(*tok);
  // Echo the prompt text (as llama.cpp does) so stdout reads as one passage.
  std::fputs(a.prompt.c_str(), stdout);
  std::fflush(stdout);
  GenerateStats st = Generator(*model, *be).generate(prompt, opt, [&](int32_t id) {
    const std::string s = tok->is_special(id) ? std::string() : dec.push(id);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  const std::string rest = dec.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fprintf(stderr,
               "prompt: %lld tokens, %.1f tokens/s | decode: %lld tokens, %.1f tokens/s | "
               "stop: %s\n",
               (long long)st.prompt_tokens,
               st.prefill_s > 0 ? double(st.prompt_tokens) / st.prefill_s : 0.0,
               (long long)st.generated, st.decode_s > 0 ? double(st.generated) / st.decode_s : 0.0,
               st.stop_reason.c_str());
  if (drafter)
    std::fprintf(stderr,
                 "speculative (%s, up to %lld a pass): %lld verification passes, %lld of %lld "
                 "drafted tokens accepted, %.2f tokens a pass\n",
                 drafter->name().c_str(), (long long)a.spec_tokens, (long long)st.verify_passes,
                 (long long)st.accepted, (long long)st.drafted,
                 st.verify_passes ? double(st.generated) / double(st.verify_passes) : 0.0);
  if (!st.spec_policy.empty()) std::fprintf(stderr, "adaptive: %s\n", st.spec_policy.c_str());
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sc = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  sc->add_option("-m,--model", a->model,
                 "HF model directory or .gguf file (default: the embedded model)");
  sc->add_option("-p,--prompt", a->prompt, "Prompt text");
  sc->add_option("-n,--n-predict", a->n, "Tokens to generate")->check(CLI::Range(0, 1 << 24));
  sc->add_option("--temp", a->temp, "Temperature (0 = greedy)");
  sc->add_option("--top-k", a->top_k, "Top-k (0 = off)");
  sc->add_option("--top-p", a->top_p, "Top-p (1 = off)");
  sc->add_option("--min-p", a->min_p, "Min-p (0 = off)");
  sc->add_option("--repeat-penalty", a->repeat_penalty, "Repetition penalty (1 = off)");
  sc->add_option("--presence-penalty", a->presence, "Presence penalty");
  sc->add_option("--frequency-penalty", a->frequency, "Frequency penalty");
  sc->add_option("-s,--seed", a->seed, "Seed for sampling (default: random)");
  sc->add_option("-t,--threads", a->threads, "CPU threads (default: all)");
  add_device_option(sc, a->dev);
  sc->add_option("--prefill-chunk", a->prefill_chunk,
                 "Prompt tokens per forward pass (0 = whole prompt); results are identical");
  sc->add_flag("--ignore-eos", a->ignore_eos, "Keep generating past end-of-sequence tokens");
  add_spec_options(sc, a->spec, a->spec_tokens,
                   "Speculative decoding with this drafter: ngram (prompt lookup), draft:PATH (a "
                   "smaller model with the same tokenizer; draft: alone, the embedded one), mtp "
                   "(the checkpoint's multi-token-prediction head, Qwen3.5 / Qwen3-Next) or "
                   "dspark:PATH (a DSpark block drafter); the output is plain decoding's, "
                   "greedy or sampled with the same seed",
                   &a->spec_adaptive, &a->spec_min_confidence);
  return [a] { return run_generate(*a); };
}

}  // namespace basalt::cli
