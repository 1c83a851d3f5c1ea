// basalt logits: float32 logits [T, V] of every position, as .npy.
#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generator.h"
#include "io/npy.h"

namespace basalt::cli {
namespace {

struct LogitsArgs {
  DeviceFlags dev;  // --device, --kv-cache-dtype, --fast-prefill, --no-autotune, --recipe
  std::string model, tokens, out;
  int threads = 0;
  int64_t prefill_chunk = 0;
};

int run_logits(const LogitsArgs& a) {
  const std::vector<int32_t> ids = parse_ids(a.tokens);
  if (ids.empty()) fail("[logits] --tokens holds no ids");
  auto model = model_load(a.model);
  auto be = make_backend(a.dev, a.threads);
  const std::vector<float> logits = Generator(*model, *be).logits(ids, a.prefill_chunk);
  io::npy_write_f32(a.out, logits.data(), {int64_t(ids.size()), model->config().vocab});
  spdlog::info("wrote {} ([{}, {}] float32)", a.out, ids.size(), model->config().vocab);
  return 0;
}

}  // namespace

Runner add_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* sc = app.add_subcommand("logits", "Write the logits of every position to a .npy file");
  sc->add_option("-m,--model", a->model, "HF model directory or .gguf (default: embedded)");
  sc->add_option("--tokens", a->tokens, "Token ids, e.g. 1,2,3")->required();
  sc->add_option("-o,--out", a->out, "Output .npy path")->required();
  sc->add_option("-t,--threads", a->threads, "CPU threads (default: all)");
  add_device_option(sc, a->dev);
  sc->add_option("--prefill-chunk", a->prefill_chunk, "Tokens per pass (0 = all); bitwise same");
  return [a] { return run_logits(*a); };
}

}  // namespace basalt::cli
