// basalt serve: the OpenAI- and Anthropic-compatible HTTP server (docs/server.md).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "server/server_context.h"
#include "tokenizer/tokenizer.h"

namespace basalt::cli {
namespace {

struct ServeArgs {
  DeviceFlags dev;  // --device, --kv-cache-dtype, --fast-prefill, --no-autotune, --recipe
  std::string model;
  server::ServerOptions opt;
  int64_t max_context = 0;
  int parallel = 8;
  int64_t step_tokens = 0;  // 0: 1024 on CUDA, 256 on the CPU
  std::string spec;
  int64_t spec_tokens = 4;
  float spec_min_confidence = 0.0f;
  bool spec_adaptive = false;
  int threads = 0;
  bool warmup = true;
};

// The directory's (or file's) base name; "basalt-default" for the embedded model.
std::string default_served_name(const std::string& path) {
  if (path.empty()) return "basalt-default";
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" → "dir"
  std::string name = p.filename().string();
  if (p.extension() == ".gguf") name = p.stem().string();
  return name.empty() ? std::string("basalt-default") : name;
}

// End-of-turn tokens the chat formats use; generation stops at them as at EOS.
std::vector<int32_t> end_of_turn_ids(const tok::Tokenizer& t) {
  std::vector<int32_t> ids;
  for (const char* p :
       {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"}) {
    const int32_t id = t.piece_to_id(p);
    if (id >= 0 && t.is_special(id)) ids.push_back(id);
  }
  if (t.eos_id() >= 0) ids.push_back(t.eos_id());
  return ids;
}

int run_serve(ServeArgs a) {
  // SIGINT/SIGTERM are taken by one thread with sigwait (threads created from here on inherit
  // the mask); a client that goes away must not kill the server with SIGPIPE.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (a.opt.api_key.empty())
    if (const char* k = std::getenv("BASALT_API_KEY")) a.opt.api_key = k;
  if (a.opt.served_name.empty()) a.opt.served_name = default_served_name(a.model);

  auto model = model_load(a.model);
  auto tok = tok::tokenizer_from_checkpoint(model->checkpoint());
  std::string recipe;
  auto be = make_backend(a.dev, a.threads, &recipe);
  EngineConfig cfg;
  cfg.max_context = a.max_context;
  cfg.max_batch = a.parallel;
  // Passes of 1024 tokens on a GPU: 64 streams of 512-token prompts on an H100 gave 3,716-3,727
  // output tok/s and a median TTFT of 505-530 ms, against 3,195-3,310 and 874-912 ms with 256
  // (the same kernels, bench/RESULTS.md); the CPU measured no gain (a 64-row pass is already
  // compute-bound there).
  cfg.step_tokens =
      a.step_tokens > 0 ? a.step_tokens : (be->identity().backend == "cpu" ? 256 : 1024);
  cfg.spec = a.spec;
  cfg.spec_tokens = a.spec_tokens;
  cfg.spec_min_confidence = a.spec_min_confidence;
  cfg.spec_adaptive = a.spec_adaptive;
  if (a.spec_adaptive && a.spec.empty()) fail("[serve] --spec-adaptive needs --spec");
  Engine engine(*model, *be, cfg);

  // A start-up request that no client sent, as llama-server's warmup (--no-warmup skips it): a
  // process's first passes pay one-time costs (on CUDA: lazy kernel loading, the scratch and
  // workspace allocations, the recording of decode graphs) that would otherwise land on the first
  // client's time to first token. A prompt of 96 tokens (a prefill pass of more than 64 rows, the
  // prefill kernels) and 2 decode steps; the engine's counters are zeroed after it, so /metrics
  // counts clients' requests only.
  if (a.warmup) {
    const auto t0 = std::chrono::steady_clock::now();
    EngineRequest w;
    w.max_new_tokens = 2;
    w.ignore_eos = true;
    // 96 prompt tokens, fewer where the context cannot also hold the new ones.
    const int64_t n = std::min<int64_t>(96, engine.max_context() - w.max_new_tokens - 1);
    const int64_t V = model->config().vocab;
    if (n >= 1 && V > 0) {
      for (int64_t i = 0; i < n; ++i) w.prompt.push_back(int32_t((7 * i + 3) % V));
      const size_t got = engine.run(std::move(w)).size();
      engine.reset_counters();
      std::fprintf(
          stderr, "basalt serve: warmup (%lld-token prompt, %zu tokens) in %.0f ms\n", (long long)n,
          got,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }

  server::ServerContext ctx(engine, *tok, a.opt);
  ctx.end_of_turn_ids = end_of_turn_ids(*tok);
  ctx.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  server::HttpServer srv(ctx);
  const int port = srv.bind();

  std::thread sig_thread([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (!ctx.stopping.exchange(true))
      std::fprintf(stderr, "basalt serve: %s, shutting down\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv.stop();
  });
  std::fprintf(
      stderr, "basalt serve: http://%s:%d  model '%s' (%s), context %lld, parallel %d%s%s\n",
      a.opt.host.c_str(), port, a.opt.served_name.c_str(), model_label(a.model).c_str(),
      (long long)engine.max_context(), a.parallel,
      a.opt.api_key.empty() ? "" : ", API key required", a.opt.test_hooks ? ", TEST HOOKS ON" : "");
  std::fprintf(stderr, "basalt serve: %s\n", recipe.c_str());
  std::fflush(stderr);
  srv.run();
  if (!ctx.stopping.exchange(true)) pthread_kill(sig_thread.native_handle(), SIGTERM);
  sig_thread.join();
  const EngineStats st = engine.stats();
  std::fprintf(stderr,
               "basalt serve: %lld engine steps, %.2f s in steps, %.2f s of it in forward "
               "passes; %lld completion tokens\n",
               (long long)st.steps, st.step_seconds, st.forward_seconds,
               (long long)st.completion_tokens_total);
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* sc = app.add_subcommand("serve", "OpenAI- and Anthropic-compatible HTTP server");
  sc->add_option("-m,--model", a->model,
                 "HF model directory or .gguf file (default: the embedded model)");
  sc->add_option("--host", a->opt.host, "Address to bind (default 127.0.0.1: this machine only)");
  sc->add_option("--port", a->opt.port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  sc->add_option("--api-key", a->opt.api_key,
                 "Require this key (Authorization: Bearer or x-api-key); default $BASALT_API_KEY");
  sc->add_option("--max-context", a->max_context, "Context length (default: the model's)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  sc->add_option("--parallel", a->parallel, "Sequences run together (default 8)")
      ->check(CLI::Range(1, 1024));
  sc->add_option("--step-tokens", a->step_tokens,
                 "Most tokens one forward pass takes: prompt chunks plus one a decoding sequence "
                 "(default 1024 on CUDA, 256 on the CPU; at least --parallel). Larger prefills "
                 "faster, smaller keeps decoding streams smoother while prompts arrive")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  add_spec_options(
      sc, a->spec, a->spec_tokens,
      "Speculative decoding: ngram (prompt lookup), draft:PATH (a smaller model with the "
      "same tokenizer), mtp (the checkpoint's MTP head) or dspark:PATH (a DSpark "
      "block drafter; CPU); outputs unchanged",
      &a->spec_adaptive, &a->spec_min_confidence);
  sc->add_option("--served-model-name", a->opt.served_name,
                 "Model name in the API (default: the model's base name or basalt-default)");
  sc->add_option("-t,--threads", a->threads, "CPU threads (default: all)");
  add_device_option(sc, a->dev);
  sc->add_option("--http-threads", a->opt.http_threads,
                 "HTTP worker threads, one per open connection (default 256)")
      ->check(CLI::Range(1, 4096));
  sc->add_flag("!--no-warmup", a->warmup,
               "Skip the start-up request (a 96-token prompt and 2 tokens) that pays the first "
               "pass's one-time costs before clients come");
  sc->add_flag("--enable-test-hooks", a->opt.test_hooks,
               "Honour the test-only request field basalt_forced_output (never in production)");
  return [a] { return run_serve(*a); };
}

}  // namespace basalt::cli
