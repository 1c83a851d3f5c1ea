// basalt perplexity: perplexity of a model on a text file, and (with --ref) the mean KL
// divergence and top-1 agreement against a reference model on the same tokens — how much a
// quantised checkpoint loses against its bf16 source. Chunks as llama.cpp's llama-perplexity:
// the token stream in windows of -c tokens, each scored on its second half (every scored token
// has at least c/2 tokens of context), the first token of a window replaced by BOS when the
// model has one.
#include <cmath>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generator.h"
#include "tokenizer/tokenizer.h"

namespace basalt::cli {
namespace {

struct PerplexityArgs {
  DeviceFlags dev;  // --device, --kv-cache-dtype, --fast-prefill, --no-autotune, --recipe
  std::string model, ref, file;
  int64_t ctx = 256, chunks = 0, prefill_chunk = 0;
  int threads = 0;
  bool json = false;
};

// log-softmax of one row, in double.
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, double(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  const double lse = m + std::log(s);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
}

int run_perplexity(const PerplexityArgs& a) {
  if (a.ctx < 4) fail("[perplexity] -c must be at least 4, got {}", a.ctx);
  std::ifstream f(a.file, std::ios::binary);
  if (!f) fail("[perplexity] {}: cannot read", a.file);
  std::stringstream ss;
  ss << f.rdbuf();
  auto model = model_load(a.model);
  const int64_t V = model->config().vocab;
  auto tok = tok::tokenizer_from_checkpoint(model->checkpoint());
  const std::vector<int32_t> ids = tok->encode(ss.str(), false, false);
  int64_t n_chunks = int64_t(ids.size()) / a.ctx;
  if (a.chunks > 0) n_chunks = std::min(n_chunks, a.chunks);
  if (n_chunks == 0)
    fail("[perplexity] {}: {} tokens, fewer than one window of {}", a.file, ids.size(), a.ctx);
  std::unique_ptr<Model> ref;
  if (!a.ref.empty()) {
    ref = model_load(a.ref == "embedded" ? "" : a.ref);
    if (ref->config().vocab != V)
      fail("[perplexity] --ref {} has a vocabulary of {}, the model {}", model_label(a.ref),
           ref->config().vocab, V);
  }
  auto be = make_backend(a.dev, a.threads);
  Generator gen(*model, *be);
  std::unique_ptr<Generator> ref_gen;
  if (ref) ref_gen = std::make_unique<Generator>(*ref, *be);
  const int32_t bos = model->config().bos_id;

  double nll = 0, nll2 = 0, kl = 0, kl_max = 0;
  int64_t scored = 0, agree = 0;
  std::vector<double> lp, lq;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> w(ids.begin() + c * a.ctx, ids.begin() + (c + 1) * a.ctx);
    if (bos >= 0) w[0] = bos;
    const std::vector<float> logits = gen.logits(w, a.prefill_chunk);
    std::vector<float> ref_logits;
    if (ref_gen) ref_logits = ref_gen->logits(w, a.prefill_chunk);
    for (int64_t i = a.ctx / 2; i + 1 < a.ctx; ++i) {
      log_softmax(logits.data() + i * V, V, lq);
      const double l = -lq[size_t(w[size_t(i + 1)])];
      nll += l, nll2 += l * l, ++scored;
      if (ref_gen) {
        log_softmax(ref_logits.data() + i * V, V, lp);
        double k = 0;
        int64_t am_p = 0, am_q = 0;
        for (int64_t v = 0; v < V; ++v) {
          k += std::exp(lp[size_t(v)]) * (lp[size_t(v)] - lq[size_t(v)]);
          if (lp[size_t(v)] > lp[size_t(am_p)]) am_p = v;
          if (lq[size_t(v)] > lq[size_t(am_q)]) am_q = v;
        }
        kl += k, kl_max = std::max(kl_max, k), agree += am_p == am_q;
      }
    }
    spdlog::info("[{}/{}] ppl so far {:.4f}", c + 1, n_chunks, std::exp(nll / double(scored)));
  }
  const double mean = nll / double(scored);
  const double var = std::max(0.0, nll2 / double(scored) - mean * mean);
  const double ppl = std::exp(mean), ppl_err = ppl * std::sqrt(var / double(scored));
  if (a.json) {
    std::printf(
        "{\"ppl\": %.6f, \"ppl_err\": %.6f, \"tokens\": %lld, \"chunks\": %lld, \"ctx\": %lld", ppl,
        ppl_err, (long long)scored, (long long)n_chunks, (long long)a.ctx);
    if (ref_gen)
      std::printf(", \"kl_mean\": %.6g, \"kl_max\": %.6g, \"top1_agree\": %.6f",
                  kl / double(scored), kl_max, double(agree) / double(scored));
    std::printf("}\n");
  } else {
    std::printf("perplexity %.4f ± %.4f  (%lld tokens scored in %lld windows of %lld)\n", ppl,
                ppl_err, (long long)scored, (long long)n_chunks, (long long)a.ctx);
    if (ref_gen)
      std::printf("vs %s: mean KL %.6f (max %.4f), top-1 agreement %.2f %%\n",
                  model_label(a.ref).c_str(), kl / double(scored), kl_max,
                  100.0 * double(agree) / double(scored));
  }
  return 0;
}

}  // namespace

Runner add_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* sc = app.add_subcommand(
      "perplexity", "Perplexity on a text file; with --ref, KL divergence against another model");
  sc->add_option("-m,--model", a->model, "HF model directory or .gguf (default: embedded)");
  sc->add_option("-f,--file", a->file, "Text file")->required();
  sc->add_option("-c,--ctx", a->ctx, "Window size in tokens (default 256)");
  sc->add_option("--chunks", a->chunks, "At most this many windows (default: all)");
  sc->add_option(
      "--ref", a->ref,
      "Reference model for KL divergence and top-1 agreement ('embedded': the default model)");
  sc->add_option("-t,--threads", a->threads, "CPU threads (default: all)");
  sc->add_option("--prefill-chunk", a->prefill_chunk, "Tokens per pass (0 = all); bitwise same");
  sc->add_flag("--json", a->json, "One JSON object on stdout");
  add_device_option(sc, a->dev);
  return [a] { return run_perplexity(*a); };
}

}  // namespace basalt::cli
