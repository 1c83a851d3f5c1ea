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
// choices are reset first and hold the tuned recipe's when this returns.
TuneReport tune(Backend& be, std::vector<OpShape> shapes, const TuneOptions& opt);

}  // namespace basalt::kernels
