// The autotuner behind `basalt tune` (docs/tuning.md): times every supported variant of every
// op shape a model runs on the backend's device and keeps the fastest whose output passes the
// check, as a Recipe.
//
// Order-changing ops (matmul_split) are tuned first, per weight shape, at several row counts
// (`split_probe_T`): a variant wins only if it is at least `min_gain` faster in total and not
// slower than the default at any probe; its output must be within 1e-4 · max|default| of the
// default's (same function, another summation order). The winner is set on the backend before
// the other ops are timed, so they are measured under it. Every other variant must give the
// default's output bit for bit (they differ in tiling, not arithmetic) or it is excluded and
// reported; the winner is the fastest by median, replacing the default only when at least
// `min_gain` faster, so the tuned configuration is never measured slower than the default. The
// default is timed before and after the other variants of a shape and keeps its faster median
// (a shape's first timing runs on a GPU whose clocks dropped while its inputs were made).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kernels/recipe.h"
#include "ops/backend.h"

namespace basalt::kernels {

struct TuneOptions {
  double budget_s = 180;     // stop measuring after this (what was measured is kept)
  int warmup = 3;            // untimed runs per variant
  int reps = 15;             // timed runs per variant (fewer when one run is long: see min_time)
  double rep_time_s = 0.05;  // ... at most about this long in total, at least 3 runs
  double min_gain = 0.01;    // a variant must beat the default by this fraction
  std::vector<int64_t> split_probe_T = {1, 512};
  bool progress = true;  // a progress bar on stderr (a line per 10 % when not a terminal)
  // Choices in force while tuning (an earlier recipe's, when only its missing shapes are tuned):
  // shapes are timed under them, and the backend holds them plus the new entries' at the end.
  KernelChoices base;
};

struct TuneReport {
  Recipe recipe;
  int shapes_total = 0, shapes_tuned = 0;
  int variants_timed = 0;
  std::vector<std::string> rejected;  // variants whose output failed the check
  std::vector<std::string> skipped;   // shapes the backend could not time, and why
  double elapsed_s = 0;
  bool budget_hit = false;
};

// Tunes `shapes` (matmul_split shapes with T = 0; the rest with their T) on `be`. The backend's
// choices are set to opt.base first and hold opt.base plus the tuned recipe's when this returns.
TuneReport tune(Backend& be, std::vector<OpShape> shapes, const TuneOptions& opt);

// A fresh measurement of a recipe's choices, not the one that picked them: every entry whose
// variant is not its op's default is timed against the default under all of the recipe's
// choices, alternating (default, choice, default, choice; each side keeps its faster median).
// matmul_split entries are timed at their probes' row counts (opt.split_probe_T where they have
// none) and compared by sums. The backend holds r's choices when this returns.
struct VerifyRow {
  RecipeEntry entry;
  double tuned_us = 0, default_us = 0;
};
struct VerifyReport {
  std::vector<VerifyRow> rows;
  int entries = 0;                   // the recipe's entries (the default chosen in most)
  std::vector<std::string> skipped;  // entries this backend could not time, and why
  double elapsed_s = 0;
  bool budget_hit = false;
};
VerifyReport verify(Backend& be, const Recipe& r, const TuneOptions& opt);

// r with every choice that `rep` re-measured more than `tolerance` slower than its default set
// back to that default (registry: the op's variants[0]; the entry's times become the
// re-measured default's, its probes dropped): `tune --verify --prune`, for a recipe whose
// defaults have since become faster. `pruned` (if given) gets the shapes changed.
Recipe prune_slower(const Recipe& r, const VerifyReport& rep,
                    const std::vector<OpKernels>& registry, double tolerance = 0.01,
                    std::vector<std::string>* pruned = nullptr);

}  // namespace basalt::kernels
