// basalt info: what a checkpoint holds.
#include <cstdio>
#include <map>

#include "backends/cpu/kernels_hwy.h"
#include "cli/commands.h"
#include "kernels/recipe.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace basalt::cli {
namespace {

struct InfoArgs {
  std::string model;
  bool recipes = false;
  DeviceFlags dev;
  int threads = 0;
};

// `basalt info --recipes`: the device, its kernel variants, and the recipe generate/bench/serve
// would run with these flags (and the ones they would ignore, and why).
int run_info_recipes(const InfoArgs& a) {
  std::unique_ptr<Backend> be = make_bare_backend(a.dev, a.threads);
  const DeviceIdentity id = be->identity();
  std::printf("device:          %s\n", id.str().c_str());
  for (const auto& [k, v] : id.info) std::printf("  %-14s %s\n", (k + ":").c_str(), v.c_str());
  const std::vector<OpKernels> reg = be->kernel_registry();
  if (reg.empty()) std::printf("kernel variants: none (nothing to tune on this backend)\n");
  for (const OpKernels& k : reg) {
    std::string names;
    for (const KernelVariant& v : k.variants) names += (names.empty() ? "" : ", ") + v.name;
    std::printf("op %-12s  %zu variants (default %s%s): %s\n", k.op.c_str(), k.variants.size(),
                k.variants[0].name.c_str(), k.changes_order ? "; keyed per weight shape" : "",
                names.c_str());
  }
  std::printf("user recipes:    %s\n", kernels::recipe_user_dir().c_str());
  const kernels::RecipeSelection sel = kernels::recipe_select(*be, a.dev.no_autotune, a.dev.recipe);
  for (const std::string& n : sel.notes) std::printf("note:            %s\n", n.c_str());
  if (!sel.recipe) {
    std::printf("recipe:          none: %s\n", sel.reason.c_str());
    return 0;
  }
  const kernels::Recipe& r = *sel.recipe;
  std::printf("recipe:          %s (%s, created %s)\n", sel.source.c_str(), r.device.str().c_str(),
              r.created.c_str());
  std::string models;
  for (const std::string& m : r.models) models += (models.empty() ? "" : ", ") + m;
  std::printf("tuned for:       %s\n", models.empty() ? "(not recorded)" : models.c_str());
  std::map<std::string, std::pair<int, int>> per_op;  // shapes, of which not the default
  double tuned = 0, def = 0;
  for (const kernels::RecipeEntry& e : r.entries) {
    auto& [n, changed] = per_op[e.shape.op];
    ++n;
    for (const OpKernels& k : reg)
      if (k.op == e.shape.op && !(e.variant == k.variants[0])) ++changed;
    tuned += e.time_us, def += e.default_us;
  }
  for (const auto& [op, nc] : per_op)
    std::printf("  %-14s %d shapes, %d not the default\n", (op + ":").c_str(), nc.first, nc.second);
  if (tuned > 0)
    std::printf("  measured:      %.1f us tuned vs %.1f us default (sum of medians, %.3fx)\n",
                tuned, def, def / tuned);
  return 0;
}

int run_info(const InfoArgs& a) {
  if (a.recipes) return run_info_recipes(a);
  io::Checkpoint ck = io::checkpoint_open(a.model);
  std::printf("path:            %s\n", model_label(a.model).c_str());
  std::printf("format:          %s\n",
              ck.format == io::CheckpointFormat::Gguf ? "GGUF" : "Hugging Face directory");
  std::string tok_type = "none";
  int32_t tok_vocab = 0;
  try {
    auto tok = tok::tokenizer_from_checkpoint(ck);
    tok_type = tok->type_name();
    tok_vocab = tok->vocab_size();
  } catch (const std::exception& e) {
    tok_type = std::string("none (") + e.what() + ")";
  }
  if (ck.tensors.size() > 0) {
    auto model = model_from_checkpoint(std::move(ck));
    const ModelConfig& c = model->config();
    std::printf("architecture:    %s (%s)\n", c.hf_class.c_str(), c.arch.c_str());
    std::printf("parameters:      %lld\n", (long long)model->param_count());
    std::printf("dtypes:          %s\n", model->weight_dtypes().c_str());
    std::printf("layers:          %lld\n", (long long)c.n_layers);
    std::printf("hidden size:     %lld (MLP %lld)\n", (long long)c.hidden,
                (long long)c.intermediate);
    std::printf("heads:           %lld query, %lld key/value, head dim %lld\n",
                (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.head_dim);
    std::printf("vocabulary:      %lld\n", (long long)c.vocab);
    std::printf("context length:  %lld\n", (long long)c.max_context);
    std::printf("rope:            theta %g, %lld dims, %s, scaling %s\n", c.rope.theta,
                (long long)c.rope.dim,
                c.rope.style == RopeStyle::NeoX ? "rotate_half" : "interleaved",
                c.rope.scaling.c_str());
    std::printf("tied embeddings: %s\n", c.tied_embeddings ? "yes" : "no");
  } else {
    std::printf("tensors:         none (tokenizer only)\n");
  }
  std::printf("tokenizer:       %s", tok_type.c_str());
  if (tok_vocab) std::printf(", %d tokens", tok_vocab);
  std::printf("\ncpu kernels:     %s\n", cpu::simd_target_name());
  return 0;
}

}  // namespace

Runner add_info(CLI::App& app) {
  auto a = std::make_shared<InfoArgs>();
  CLI::App* sc = app.add_subcommand("info", "Describe a checkpoint");
  sc->add_option("-m,--model", a->model, "HF model directory or .gguf (default: embedded)");
  sc->add_flag("--recipes", a->recipes,
               "Show the kernel variants of the device and the recipe that would be used");
  sc->add_option("--device", a->dev.device, "--recipes: cpu | cuda | cuda:N");
  sc->add_flag("--no-autotune", a->dev.no_autotune, "--recipes: as generate's");
  sc->add_option("--recipe", a->dev.recipe, "--recipes: as generate's");
  sc->add_option("-t,--threads", a->threads, "--recipes: CPU threads");
  return [a] { return run_info(*a); };
}

}  // namespace basalt::cli
