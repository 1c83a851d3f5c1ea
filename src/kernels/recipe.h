// Recipes: the kernel choices measured on one device, as data (recipes/*.json, docs/tuning.md).
// A recipe names its device (DeviceIdentity) and lists, per op shape, the chosen variant with its
// parameters and the measured time of the winner and of the default. Entry points load the
// recipe that matches the device they run on (recipe_select); `basalt tune` writes them.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/kernels.h"

namespace basalt::kernels {

constexpr const char* kRecipeFormat = "basalt-recipe-1";

struct RecipeProbe {  // changes_order ops: one timing per probed row count
  int64_t T = 0;
  double time_us = 0, default_us = 0;
};
struct RecipeEntry {
  OpShape shape;  // T = 0 for ops whose variants change the reduction order
  KernelVariant variant;
  double time_us = 0, default_us = 0;  // medians (changes_order ops: sums over the probes)
  std::vector<RecipeProbe> probes;
};
struct Recipe {
  DeviceIdentity device;
  std::string created;              // UTC, ISO 8601
  std::vector<std::string> models;  // what was tuned (labels)
  std::vector<RecipeEntry> entries;

  KernelChoices choices() const;
  // Replaces the entries of `newer`'s shapes and keeps the others (re-tuning one model keeps
  // another's shapes).
  void merge(const Recipe& newer);
};

// JSON text → Recipe. Throws basalt::Error naming `source` and the problem (not JSON, wrong
// format tag, missing or mistyped fields, a changes_order op keyed with T).
Recipe recipe_parse(const std::string& text, const std::string& source);
Recipe recipe_read(const std::string& path);
std::string recipe_json(const Recipe& r);
// Writes through a temporary file in the same directory and a rename (readers never see a
// partial recipe); creates the directory.
void recipe_write(const Recipe& r, const std::string& path);
// Every entry names an op, variant and parameters of `registry`, with T = 0 exactly for
// changes_order ops. Throws basalt::Error on the first that does not. (Whether a variant supports
// its shape can depend on the recipe's other choices, e.g. a fused stage shape under a split-K
// choice: backends drop the choices they cannot run when they are set, with a warning.)
void recipe_check(const Recipe& r, const std::vector<OpKernels>& registry);

// Where recipes are looked for, in order: the files of recipe_user_dir() (sorted by name), then
// the recipes shipped inside the binary (recipes/*.json at build time, "embedded:NAME").
// recipe_user_dir: $BASALT_RECIPE_DIR, else $XDG_CACHE_HOME/basalt/recipes, else
// ~/.cache/basalt/recipes.
std::string recipe_user_dir();
// The file `basalt tune` writes by default: recipe_user_dir()/<device slug>.json.
std::string recipe_default_path(const DeviceIdentity& d);

struct RecipeSelection {
  std::optional<Recipe> recipe;
  std::string source;              // its path or "embedded:NAME"
  std::vector<std::string> notes;  // recipes looked at and not used, and why
  std::string reason;              // why none is used (when recipe is empty)
};
// The recipe `be` should run: none with no_autotune; the file `forced` when given (used even for
// another device, with a note; a corrupt one is an error); else the first candidate for this
// device that parses and passes recipe_check (others noted: other device, corrupt).
RecipeSelection recipe_select(const Backend& be, bool no_autotune, const std::string& forced);
// recipe_select, then set_kernel_choices on `be`; logs which recipe and how many shapes it
// covers (or why none), warns about the recipes it ignored, and returns that one line.
std::string recipe_apply(Backend& be, bool no_autotune, const std::string& forced);

}  // namespace basalt::kernels
