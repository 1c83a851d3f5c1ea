// basalt tune: measures the kernel variants of every op shape a model runs on this device and
// writes the winners as a recipe (kernels/tuner.h, docs/tuning.md). generate, bench and serve
// then run them.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "kernels/recipe.h"
#include "kernels/tuner.h"
#include "models/model.h"

namespace basalt::cli {
namespace {

struct TuneArgs {
  DeviceFlags dev;
  std::string model, out;
  int threads = 0;
  double budget_s = 300;
  int64_t decode_max = 16;
  std::vector<int64_t> prefill;  // default: 512, 2048 on CUDA; 128 on the CPU
  std::vector<int64_t> ctx = {512, 2048, 8192, 32768};
  bool no_merge = false, quiet = false, only_missing = false, verify = false, prune = false;
};

// `tune --verify`: the recipe at `path` re-measured on this device (kernels::verify).
int run_verify(Backend& be, const TuneArgs& a, const std::string& path) {
  const DeviceIdentity id = be.identity();
  if (!std::filesystem::exists(path)) fail("[tune] --verify: no recipe at {}", path);
  const kernels::Recipe r = kernels::recipe_read(path);
  if (!r.device.same_device(id))
    fail("[tune] --verify: {} is for {}, not {}", path, r.device.str(), id.str());
  kernels::recipe_check(r, be.kernel_registry());
  kernels::TuneOptions opt;
  opt.budget_s = a.budget_s;
  opt.progress = !a.quiet;
  if (id.backend == "cpu") opt.warmup = 2;
  const kernels::VerifyReport rep = kernels::verify(be, r, opt);
  std::printf("%-56s %-16s %10s %10s %7s\n", "shape", "variant", "tuned us", "default us", "gain");
  std::map<std::string, std::array<double, 3>> per;  // shapes, tuned us, default us
  int slower = 0;
  for (const kernels::VerifyRow& v : rep.rows) {
    const double gain = 1.0 - v.tuned_us / v.default_us;
    std::printf("%-56s %-16s %10.1f %10.1f %6.1f%%%s\n", v.entry.shape.str().c_str(),
                v.entry.variant.name.c_str(), v.tuned_us, v.default_us, 100.0 * gain,
                gain < -0.01 ? "  SLOWER" : "");
    slower += gain < -0.01;
    auto& p = per[v.entry.shape.op];
    p[0] += 1, p[1] += v.tuned_us, p[2] += v.default_us;
  }
  for (const auto& [op, p] : per)
    std::printf("  %-14s %4.0f choices: %10.1f us tuned vs %10.1f us default (%.3fx)\n", op.c_str(),
                p[0], p[1], p[2], p[1] > 0 ? p[2] / p[1] : 1.0);
  std::printf(
      "%zu of the recipe's %d entries choose another variant than the default; re-measured, %d "
      "%s more than 1 %% slower than the default\n",
      rep.rows.size(), rep.entries, slower, slower == 1 ? "is" : "are");
  for (const std::string& x : rep.skipped) std::fprintf(stderr, "[tune] skipped: %s\n", x.c_str());
  std::fprintf(stderr, "[tune] verified %zu choices of %s in %.1f s%s\n", rep.rows.size(),
               path.c_str(), rep.elapsed_s,
               rep.budget_hit ? " (budget reached: the rest were not re-measured)" : "");
  if (a.prune) {
    std::vector<std::string> pruned;
    const kernels::Recipe out = kernels::prune_slower(r, rep, be.kernel_registry(), 0.01, &pruned);
    if (!pruned.empty()) kernels::recipe_write(out, path);
    for (const std::string& x : pruned)
      std::fprintf(stderr, "[tune] pruned: %s (back to the default)\n", x.c_str());
    std::fprintf(stderr, "[tune] --prune: %zu choices set back to the default in %s\n",
                 pruned.size(), path.c_str());
  }
  return 0;
}

// The op shapes `m` runs on `be`: each matmul weight at the decode row counts 1..decode_max
// (verification passes of speculative decoding are such passes too) and at the prefill chunks
// (the LM head only at decode counts: a prompt pass takes the logits of its last row), its
// matmul_split once per weight shape, attention at every row count and context bucket that
// can hold it, and the routed experts (moe) at every row count.
std::vector<OpShape> model_shapes(const Model& m, const Backend& be, const TuneArgs& a,
                                  const std::vector<int64_t>& prefill) {
  std::set<std::pair<std::string, std::pair<int64_t, int64_t>>> mats, heads;
  auto add = [&](const WeightRef& w, bool head) {
    if (!w.data) return;
    (head ? heads : mats).insert({be.kernel_dtype(w), {w.rows, w.cols}});
  };
  const ModelWeights& w = m.weights();
  for (const LayerWeights& L : w.layers)
    for (const WeightRef* x :
         {&L.wq, &L.wk, &L.wv, &L.wo, &L.wq_gate, &L.w_gate, &L.w_up, &L.w_down, &L.gdn_qkv,
          &L.gdn_z, &L.gdn_b, &L.gdn_a, &L.gdn_out, &L.router, &L.shared_gate, &L.shared_up,
          &L.shared_down, &L.shared_router})
      add(*x, false);
  add(w.lm_head, true);
  std::vector<int64_t> decode;
  for (int64_t t = 1; t <= a.decode_max; ++t) decode.push_back(t);
  std::vector<int64_t> all = decode;
  all.insert(all.end(), prefill.begin(), prefill.end());

  std::vector<OpShape> out;
  for (const auto* set : {&mats, &heads})
    for (const auto& [dt, nk] : *set) {
      out.push_back({"matmul_split", dt, 0, nk.first, nk.second});
      for (int64_t T : set == &heads ? decode : all)
        out.push_back({"matmul", dt, T, nk.first, nk.second});
    }
  const ModelConfig& c = m.config();
  // Routed experts: the moe op at every row count, per distinct expert shape and routing.
  std::set<std::pair<std::string, std::array<int64_t, 4>>> moes;
  for (const LayerWeights& L : w.layers)
    if (!L.ex_gate.empty() && L.ex_gate[0].data)
      moes.insert({be.kernel_dtype(L.ex_gate[0]),
                   {L.ex_gate[0].rows, L.ex_gate[0].cols, int64_t(L.ex_gate.size()), c.moe.top_k}});
  for (const auto& [dt, fe] : moes)
    for (int64_t T : all) {
      OpShape s{"moe", dt, T, fe[0], fe[1], 0, 0};
      s.experts = fe[2], s.top_k = fe[3];
      out.push_back(s);
    }
  if (c.n_attention_layers() > 0) {
    const DType kv = be.kv_dtype();
    const std::string kvn = kv == DType::F8_E4M3 ? "fp8" : kv == DType::BF16 ? "bf16" : "f32";
    for (int64_t T : all)
      for (int64_t ctx : a.ctx)
        if (ctx >= T && (c.max_context <= 0 || ctx <= attention_ctx_bucket(c.max_context)))
          out.push_back({"attention", kvn, T, c.n_heads, c.head_dim, c.n_kv_heads,
                         attention_ctx_bucket(ctx)});
  }
  // Only ops this backend lists.
  const std::vector<OpKernels> reg = be.kernel_registry();
  std::erase_if(out, [&](const OpShape& s) {
    return std::none_of(reg.begin(), reg.end(), [&](const OpKernels& k) { return k.op == s.op; });
  });
  return out;
}

int run_tune(const TuneArgs& a) {
  if (a.budget_s <= 0) fail("[tune] --budget-s must be positive");
  std::unique_ptr<Backend> be = make_bare_backend(a.dev, a.threads);
  const DeviceIdentity id = be->identity();
  const bool cpu = id.backend == "cpu";
  std::vector<int64_t> prefill = a.prefill;
  if (prefill.empty()) prefill = cpu ? std::vector<int64_t>{128} : std::vector<int64_t>{512, 2048};
  if (be->kernel_registry().empty()) {
    std::fprintf(stderr, "[tune] the %s backend has no kernel variants: nothing to tune\n",
                 be->name().c_str());
    return 0;
  }
  if (a.prune && !a.verify) fail("[tune] --prune goes with --verify");
  if (a.verify) return run_verify(*be, a, a.out.empty() ? kernels::recipe_default_path(id) : a.out);
  std::unique_ptr<Model> model = model_load(a.model);
  std::vector<OpShape> shapes = model_shapes(*model, *be, a, prefill);
  const std::string out = a.out.empty() ? kernels::recipe_default_path(id) : a.out;
  kernels::TuneOptions opt;
  if (a.only_missing) {  // the shapes `out` does not list, timed under its choices
    if (a.no_merge) fail("[tune] --only-missing tunes into the existing recipe: drop --no-merge");
    if (std::filesystem::exists(out)) {
      const kernels::Recipe old = kernels::recipe_read(out);
      if (!old.device.same_device(id))
        fail("[tune] --only-missing: {} is for {}, not this device", out, old.device.str());
      const KernelChoices have = old.choices();
      const size_t all = shapes.size();
      std::erase_if(shapes, [&](const OpShape& s) { return have.find(s) != nullptr; });
      std::fprintf(stderr, "[tune] %s lists %zu of the model's %zu op shapes\n", out.c_str(),
                   all - shapes.size(), all);
      opt.base = have;
    }
  }
  std::fprintf(stderr, "[tune] %s on %s: %zu op shapes, budget %.0f s\n",
               model_label(a.model).c_str(), id.str().c_str(), shapes.size(), a.budget_s);

  opt.budget_s = a.budget_s;
  opt.progress = !a.quiet;
  // CPU timings of small shapes are noisy (2 cores shared with the OS): more repetitions and a
  // larger margin before a variant displaces the default.
  if (cpu) opt.warmup = 2, opt.reps = 15, opt.min_gain = 0.05;
  opt.split_probe_T = {1, prefill.back()};
  kernels::TuneReport rep = kernels::tune(*be, shapes, opt);
  rep.recipe.models.push_back(a.model.empty() ? std::string("embedded default model")
                                              : std::filesystem::path(a.model).filename().string());

  // Merge into the file's recipe for this device (another model's shapes are kept).
  kernels::Recipe recipe = rep.recipe;
  if (!a.no_merge && std::filesystem::exists(out)) {
    try {
      kernels::Recipe old = kernels::recipe_read(out);
      if (old.device.same_device(id)) {
        old.merge(rep.recipe);
        recipe = std::move(old);
      } else {
        std::fprintf(stderr, "[tune] %s was for %s: replaced\n", out.c_str(),
                     old.device.str().c_str());
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "[tune] replacing an unreadable recipe: %s\n", e.what());
    }
  }
  kernels::recipe_write(recipe, out);

  // What changed: each shape whose winner is not the default.
  std::printf("%-56s %-16s %10s %10s %6s\n", "shape", "variant", "tuned us", "default us", "gain");
  int changed = 0;
  double tuned_sum = 0, def_sum = 0;
  const std::vector<OpKernels> reg = be->kernel_registry();
  for (const kernels::RecipeEntry& e : rep.recipe.entries) {
    tuned_sum += e.time_us;
    def_sum += e.default_us;
    const OpKernels* k = nullptr;
    for (const OpKernels& x : reg)
      if (x.op == e.shape.op) k = &x;
    if (k && e.variant == k->variants[0]) continue;
    ++changed;
    std::printf("%-56s %-16s %10.1f %10.1f %5.1f%%\n", e.shape.str().c_str(),
                e.variant.name.c_str(), e.time_us, e.default_us,
                100.0 * (1.0 - e.time_us / e.default_us));
  }
  std::printf(
      "%d of %d shapes tuned away from the default; sum of medians %.1f us vs %.1f us "
      "(%.3fx)\n",
      changed, rep.shapes_tuned, tuned_sum, def_sum, tuned_sum > 0 ? def_sum / tuned_sum : 1.0);
  // Per op (matmul also split into decode and prefill row counts).
  std::map<std::string, std::array<double, 3>> per;  // shapes, tuned us, default us
  for (const kernels::RecipeEntry& e : rep.recipe.entries) {
    std::string key = e.shape.op;
    if (e.shape.op != "matmul_split") key += e.shape.T <= a.decode_max ? " decode" : " prefill";
    auto& p = per[key];
    p[0] += 1, p[1] += e.time_us, p[2] += e.default_us;
  }
  for (const auto& [op, p] : per)
    std::printf("  %-18s %4.0f shapes: %10.1f us tuned vs %10.1f us default (%.3fx)\n", op.c_str(),
                p[0], p[1], p[2], p[1] > 0 ? p[2] / p[1] : 1.0);
  for (const std::string& r : rep.rejected)
    std::fprintf(stderr, "[tune] rejected: %s\n", r.c_str());
  for (const std::string& s : rep.skipped) std::fprintf(stderr, "[tune] skipped: %s\n", s.c_str());
  std::fprintf(stderr,
               "[tune] %d/%d shapes, %d variant timings in %.1f s%s; wrote %s (%zu shapes)\n",
               rep.shapes_tuned, rep.shapes_total, rep.variants_timed, rep.elapsed_s,
               rep.budget_hit ? " (budget reached: the rest run the defaults)" : "", out.c_str(),
               recipe.entries.size());
  return rep.rejected.empty() ? 0 : 3;
}

}  // namespace

Runner add_tune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* sc = app.add_subcommand(
      "tune", "Measure kernel variants on this device and write a recipe (docs/tuning.md)");
  sc->add_option("-m,--model", a->model, "HF model directory or .gguf (default: embedded)");
  sc->add_option("--device", a->dev.device, "cpu | cuda | cuda:N (default: as generate)");
  sc->add_option("--kv-cache-dtype", a->dev.kv_dtype,
                 "auto | f32 | bf16 | fp8: tune attention for this KV cache type");
  sc->add_option("-t,--threads", a->threads, "CPU threads (default: all cores)");
  sc->add_option("--budget-s", a->budget_s, "Stop measuring after this many seconds")
      ->capture_default_str();
  sc->add_option("--out", a->out,
                 "Recipe file (default: the user recipe directory's file for this device; "
                 "an existing recipe for the same device is merged)");
  sc->add_option("--decode-max", a->decode_max, "Tune decode passes of 1 .. N rows")
      ->capture_default_str();
  sc->add_option("--prefill", a->prefill,
                 "Prefill chunk sizes to tune (default: 512 2048 on CUDA, 128 on the CPU)")
      ->delimiter(',');
  sc->add_option("--ctx", a->ctx, "Attention context lengths to tune")
      ->delimiter(',')
      ->capture_default_str();
  sc->add_flag("--no-merge", a->no_merge, "Replace the output file instead of merging");
  sc->add_flag("--only-missing", a->only_missing,
               "Tune only the shapes the output recipe does not list yet, under its choices");
  sc->add_flag("--verify", a->verify,
               "Re-measure the output recipe's choices against the defaults (no tuning; -m "
               "unused)");
  sc->add_flag("--prune", a->prune,
               "With --verify: set every choice re-measured more than 1 % slower than its "
               "default back to the default, and write the recipe");
  sc->add_flag("-q,--quiet", a->quiet, "No progress bar");
  return [a] { return run_tune(*a); };
}

}  // namespace basalt::cli
