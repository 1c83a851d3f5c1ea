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

// "1,2,3", "1 2 3" or "[1, 2, 3]" → ids; throws basalt::Error on anything else.
std::vector<int32_t> parse_ids(const std::string& s);
// The backend --device names: "cpu", "cuda" / "cuda:N", or "" (auto: cuda when a Hopper GPU is
// visible and basalt was built with CUDA, else cpu). Throws basalt::Error for anything else.
// fast_prefill: CUDA only, not exact (cuBLAS for passes of more than 64 rows).
// kv_dtype: --kv-cache-dtype: "" / "auto" (the backend's own: f32 on the CPU, bf16 on CUDA),
// "f32", "bf16" or "fp8" (E4M3 with a scale per position and head); throws basalt::Error for a
// name it does not know or a type the backend cannot keep.
std::unique_ptr<Backend> make_backend(const std::string& device, int threads,
                                      bool fast_prefill = false, const std::string& kv_dtype = "");
// Registers --device, --fast-prefill and --kv-cache-dtype on a subcommand.
void add_device_option(CLI::App* sc, std::string& device, bool& fast_prefill,
                       std::string& kv_dtype);
// Human-readable model path for messages ("" is the embedded default model).
std::string model_label(const std::string& path);

}  // namespace basalt::cli
