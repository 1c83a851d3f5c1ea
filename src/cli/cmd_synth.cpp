// basalt synth: write a random-weight checkpoint in the shapes of a known model.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "models/gguf_export.h"
#include "models/synth.h"

namespace basalt::cli {
namespace {

struct SynthArgs {
  std::string preset, dtype = "bf16", out, format = "safetensors";
  uint64_t seed = 0;
  int threads = 0;
  int64_t layers = 0;
  bool list = false;
};

int run_synth(const SynthArgs& a) {
  if (a.list || a.preset.empty()) {
    for (const SynthPreset& p : synth_presets())
      std::printf("%-14s %s\n", p.name.c_str(), p.description.c_str());
    return 0;
  }
  if (a.format != "safetensors" && a.format != "gguf")
    fail("[synth] --format must be safetensors or gguf, got '{}'", a.format);
  const bool gguf = a.format == "gguf";
  if (a.out.empty()) fail("[synth] --out {} is required", gguf ? "FILE.gguf" : "DIR");
  GgufScheme scheme;
  if (!gguf_scheme_parse(a.dtype, &scheme) ||
      (!gguf && (scheme.mixed || dtype_block_elems(scheme.base) != 1)))
    fail("[synth] --dtype must be {}, got '{}'",
         gguf ? "bf16, f16, f32, q8_0, q4_k, q5_k, q6_k, q4_k_m or q5_k_m"
              : "bf16, f16 or f32 (q8_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m: --format gguf)",
         a.dtype);
  const DType dt = scheme.base;
  SynthPreset preset = synth_preset(a.preset);
  if (a.layers != 0) {  // the first N layers of the real shape (benchmarks on a smaller disk)
    nlohmann::ordered_json& c = preset.config;
    const int64_t L = c["num_hidden_layers"];
    if (a.layers < 1 || a.layers > L)
      fail("[synth] --layers must be between 1 and {} for {}, got {}", L, a.preset, a.layers);
    c["num_hidden_layers"] = a.layers;
    if (c.contains("layer_types"))
      c["layer_types"].erase(c["layer_types"].begin() + a.layers, c["layer_types"].end());
    preset.name += "-" + std::to_string(a.layers) + "l";
  }
  if (gguf)
    synth_write_gguf(preset, scheme, a.out, a.seed, a.threads);
  else
    synth_write(preset, dt, a.out, a.seed);
  std::fprintf(stderr, "wrote %s (%s, %s, %s)\n", a.out.c_str(), a.preset.c_str(), a.format.c_str(),
               a.dtype.c_str());
  return 0;
}

}  // namespace

Runner add_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* sc = app.add_subcommand("synth", "Write a random-weight checkpoint of a known shape");
  sc->add_option("--preset", a->preset, "Model shape (see --list)");
  sc->add_option("--format", a->format,
                 "safetensors (default: an HF directory) or gguf (one file, llama.cpp's layout)");
  sc->add_option("--dtype", a->dtype,
                 "bf16 (default), f16 or f32; with --format gguf also q8_0, q4_k, q5_k, q6_k, and "
                 "llama.cpp's mixed q4_k_m, q5_k_m");
  sc->add_option("--out", a->out, "Output directory (safetensors) or file (gguf)");
  sc->add_option("--seed", a->seed, "Seed (the same seed writes the same bytes)");
  sc->add_option("--threads", a->threads, "Encoding threads for gguf (default: all cores)");
  sc->add_option("--layers", a->layers,
                 "Keep only the first N layers (same shapes per layer; for benchmarks whose "
                 "disk cannot hold the whole model)");
  sc->add_flag("--list", a->list, "List the presets");
  return [a] { return run_synth(*a); };
}

}  // namespace basalt::cli
