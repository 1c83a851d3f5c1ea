// The basalt subcommands. Each registers its options on the CLI11 app and returns the
// function that runs it (exit code). stdout carries only the command's output (generated
// text, ids, tables); logs and statistics go to stderr.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace basalt::cli {

using Runner = std::function<int()>;

Runner add_generate(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_detokenize(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_info(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_perplexity(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_env(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_tune(CLI::App& app);

// "1,2,3", "1 2 3" or "[1, 2, 3]" → ids; throws basalt::Error on anything else.
std::vector<int32_t> parse_ids(const std::string& s);
// The options that choose and set up a backend, shared by every command that runs a model.
//   device       --device: "cpu", "cuda" / "cuda:N", or "" (auto: cuda when a Hopper GPU is
//                visible and basalt was built with CUDA, else cpu)
//   fast_prefill --fast-prefill: CUDA only, not exact (cuBLAS for passes of more than 64 rows)
//   kv_dtype     --kv-cache-dtype: "" / "auto" (the backend's own: f32 on the CPU, bf16 on
//                CUDA), "f32", "bf16" or "fp8" (E4M3 with a scale per position and head)
//   no_autotune  --no-autotune: kernel defaults only, no recipe
//   recipe       --recipe FILE: this recipe, whatever the device (kernels/recipe.h)
struct DeviceFlags {
  std::string device;
  bool fast_prefill = false;
  std::string kv_dtype;
  bool no_autotune = false;
  std::string recipe;
  std::string quant_acts = "q8";
};
void add_device_option(CLI::App* sc, DeviceFlags& f);
// The backend the flags name, with its KV type and kernel recipe set (kernels::recipe_apply
// logs which recipe it runs; `recipe_line` gets that line). Throws basalt::Error for a name it
// does not know, a KV type the backend cannot keep, or a --recipe file that cannot be used.
std::unique_ptr<Backend> make_backend(const DeviceFlags& f, int threads,
                                      std::string* recipe_line = nullptr);
// The backend alone (no recipe applied): `basalt tune` and `basalt info --recipes`.
std::unique_ptr<Backend> make_bare_backend(const DeviceFlags& f, int threads);
// Registers --spec (the drafter; `what` says what it does on this command) and --spec-tokens.
// `adaptive` (when given): --spec-adaptive.
void add_spec_options(CLI::App* sc, std::string& spec, int64_t& spec_tokens,
                      const std::string& what, bool* adaptive = nullptr,
                      float* min_confidence = nullptr);
// Human-readable model path for messages ("" is the embedded default model).
std::string model_label(const std::string& path);

}  // namespace basalt::cli
