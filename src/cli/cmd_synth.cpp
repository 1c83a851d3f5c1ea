// basalt synth: write a random-weight checkpoint in the shapes of a known model.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "models/synth.h"

namespace basalt::cli {
namespace {

struct SynthArgs {
  std::string preset, dtype = "bf16", out;
  uint64_t seed = 0;
  bool list = false;
};

int run_synth(const SynthArgs& a) {
  if (a.list || a.preset.empty()) {
    for (const SynthPreset& p : synth_presets())
      std::printf("%-14s %s\n", p.name.c_str(), p.description.c_str());
    return 0;
  }
  if (a.out.empty()) fail("[synth] --out DIR is required");
  DType dt;
  if (a.dtype == "bf16")
    dt = DType::BF16;
  else if (a.dtype == "f16")
    dt = DType::F16;
  else if (a.dtype == "f32")
    dt = DType::F32;
  else
    fail("[synth] --dtype must be bf16, f16 or f32, got '{}'", a.dtype);
  synth_write(synth_preset(a.preset), dt, a.out, a.seed);
  std::fprintf(stderr, "wrote %s (%s, %s)\n", a.out.c_str(), a.preset.c_str(), a.dtype.c_str());
  return 0;
}

}  // namespace

Runner add_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* sc = app.add_subcommand("synth", "Write a random-weight checkpoint of a known shape");
  sc->add_option("--preset", a->preset, "Model shape (see --list)");
  sc->add_option("--dtype", a->dtype, "bf16 (default), f16 or f32");
  sc->add_option("--out", a->out, "Output directory");
  sc->add_option("--seed", a->seed, "Seed (the same seed writes the same bytes)");
  sc->add_flag("--list", a->list, "List the presets");
  return [a] { return run_synth(*a); };
}

}  // namespace basalt::cli
