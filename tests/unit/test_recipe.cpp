// Recipes (kernels/recipe.h): JSON round trip, every malformed input reported by name, the
// exactness rule on order-changing ops, atomic writes, and which recipe an entry point picks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "io/embedded.h"
#include "kernels/recipe.h"
#include "kernels/tuner.h"
#include "test_util.h"

namespace basalt {
namespace {

using kernels::Recipe;
using kernels::RecipeEntry;

// A registry like a GPU's: bit-neutral ops keyed with T and an order-changing one without.
std::vector<OpKernels> fake_registry() {
  OpKernels mm{"matmul", "tilings", false, {{"auto", {}}, {"rows16x16", {{"tiling", 2}}}}, {}};
  mm.supports = [](const KernelVariant& v, const OpShape& s) {
    return v.name == "auto" || s.T <= 64;
  };
  OpKernels split{
      "matmul_split",
      "split-K",
      true,
      {{"rule", {}}, {"kseg1024", {{"kseg", 1024}}}},
      [](const KernelVariant& v, const OpShape& s) { return v.name == "rule" || s.K > 1024; }};
  OpKernels moe{"moe",
                "expert tilings",
                false,
                {{"auto", {}}, {"rows16x32deep", {{"tiling", 3}}}},
                [](const KernelVariant&, const OpShape& s) { return s.experts >= s.top_k; }};
  return {mm, split, moe};
}

Recipe sample() {
  Recipe r;
  r.device.backend = "cuda";
  r.device.name = "Test GPU";
  r.device.match = {{"cc", "9.0"}, {"sms", "132"}};
  r.device.info = {{"driver", "13.0"}};
  r.created = "2026-12-03T00:00:00Z";
  r.models = {"m"};
  RecipeEntry a;
  a.shape = {"matmul", "bf16", 1, 4096, 4096};
  a.variant = {"rows16x16", {{"tiling", 2}}};
  a.time_us = 10.5, a.default_us = 12.25;
  RecipeEntry b;
  b.shape = {"matmul_split", "nvfp4", 0, 14336, 4096};
  b.variant = {"kseg1024", {{"kseg", 1024}}};
  b.time_us = 40, b.default_us = 44;
  b.probes = {{1, 20, 21}, {512, 20, 23}};
  RecipeEntry c;  // the routed experts: keyed by their count and top-k too
  c.shape = {"moe", "bf16", 3, 768, 2048};
  c.shape.experts = 128, c.shape.top_k = 8;
  c.variant = {"rows16x32deep", {{"tiling", 3}}};
  c.time_us = 30, c.default_us = 31;
  r.entries = {a, b, c};
  return r;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    kernels::recipe_parse(text, "r.json");
    ADD_FAILURE() << "accepted; expected an error containing " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("r.json"), std::string::npos) << e.what();
  }
}

TEST(Recipe, JsonRoundTrip) {
  const Recipe r = sample();
  const std::string text = kernels::recipe_json(r);
  const Recipe back = kernels::recipe_parse(text, "x");
  EXPECT_TRUE(back.device.same_device(r.device));
  EXPECT_EQ(back.device.info, r.device.info);
  EXPECT_EQ(back.models, r.models);
  ASSERT_EQ(back.entries.size(), 3u);
  EXPECT_EQ(back.entries[0].shape, r.entries[0].shape);
  EXPECT_EQ(back.entries[2].shape, r.entries[2].shape);
  EXPECT_EQ(back.entries[2].shape.experts, 128);
  EXPECT_EQ(back.entries[2].shape.top_k, 8);
  EXPECT_EQ(back.entries[2].shape.str(), "moe bf16 T=3 F=768 E=2048 experts=128 top_k=8");
  EXPECT_EQ(back.entries[0].variant, r.entries[0].variant);
  EXPECT_DOUBLE_EQ(back.entries[0].default_us, 12.25);
  EXPECT_EQ(back.entries[1].shape.T, 0);
  ASSERT_EQ(back.entries[1].probes.size(), 2u);
  EXPECT_EQ(back.entries[1].probes[1].T, 512);
  EXPECT_EQ(kernels::recipe_json(back), text);
  const KernelChoices c = back.choices();
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.param({"matmul", "bf16", 1, 4096, 4096}, "tiling", 0), 2);
  EXPECT_EQ(c.param({"matmul", "bf16", 2, 4096, 4096}, "tiling", 7), 7);  // not listed: default
  OpShape other_k = r.entries[2].shape;
  other_k.top_k = 4;  // another routing: not listed
  EXPECT_EQ(c.param(r.entries[2].shape, "tiling", 0), 3);
  EXPECT_EQ(c.param(other_k, "tiling", 0), 0);
  EXPECT_NO_THROW(kernels::recipe_check(back, fake_registry()));
}

TEST(Recipe, MalformedRecipesAreNamedErrors) {
  const std::string good = kernels::recipe_json(sample());
  expect_error("{not json", "not JSON");
  expect_error("[1, 2]", "expected a JSON object");
  expect_error(replace(good, "basalt-recipe-1", "basalt-recipe-9"), "format");
  expect_error(replace(good, "\"entries\": [", "\"entries\": 5, \"x\": ["), "entries");
  expect_error(replace(good, "\"variant\": \"rows16x16\"", "\"variant\": 3"), "variant");
  expect_error(replace(good, "\"N\": 4096", "\"N\": -4096"), "negative");
  expect_error(replace(good, "\"backend\": \"cuda\",", ""), "backend");
  // The same shape twice.
  Recipe twice = sample();
  twice.entries.push_back(twice.entries[0]);
  expect_error(kernels::recipe_json(twice), "again");
}

TEST(Recipe, CheckAgainstRegistryKeepsOrderChangingChoicesOffT) {
  const auto reg = fake_registry();
  auto check_fails = [&](Recipe r, const std::string& needle) {
    try {
      kernels::recipe_check(r, reg);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Recipe r = sample();
  r.entries[1].shape.T = 1;  // a split-K choice that would depend on T: breaks exactness
  check_fails(r, "keyed without T");
  r = sample();
  r.entries[0].shape.T = 0;
  check_fails(r, "keyed with T");
  r = sample();
  r.entries[0].shape.op = "conv";
  check_fails(r, "no op");
  r = sample();
  r.entries[0].variant.name = "rows99";
  check_fails(r, "no variant");
  r = sample();
  r.entries[0].variant.params["tiling"] = 3;
  check_fails(r, "parameters differ");
}

// `tune --verify --prune`: choices re-measured more than 1 % slower than their default go back to
// the default (times from the re-measurement, probes dropped); the others stay as they were.
TEST(Recipe, PruneSetsSlowerChoicesBackToTheDefault) {
  const Recipe r = sample();
  kernels::VerifyReport rep;
  rep.entries = 3;
  rep.rows = {{r.entries[0], 20.0, 12.0},   // the matmul choice: now slower than auto
              {r.entries[1], 40.0, 39.8},   // split: within 1 %
              {r.entries[2], 29.0, 31.0}};  // moe: still faster
  std::vector<std::string> pruned;
  const Recipe out = kernels::prune_slower(r, rep, fake_registry(), 0.01, &pruned);
  ASSERT_EQ(out.entries.size(), 3u);
  ASSERT_EQ(pruned.size(), 1u);
  EXPECT_EQ(pruned[0], r.entries[0].shape.str());
  EXPECT_EQ(out.entries[0].variant.name, "auto");
  EXPECT_TRUE(out.entries[0].variant.params.empty());
  EXPECT_EQ(out.entries[0].time_us, 12.0);
  EXPECT_EQ(out.entries[0].default_us, 12.0);
  EXPECT_EQ(out.entries[1].variant.name, "kseg1024");
  EXPECT_EQ(out.entries[1].probes.size(), 2u);
  EXPECT_EQ(out.entries[2].variant.name, "rows16x32deep");
  kernels::recipe_check(out, fake_registry());  // still a valid recipe
  // An order-changing choice slower than the rule goes back to the rule, probes dropped.
  rep.rows = {{r.entries[1], 50.0, 44.0}};
  const Recipe split = kernels::prune_slower(r, rep, fake_registry());
  EXPECT_EQ(split.entries[1].variant.name, "rule");
  EXPECT_TRUE(split.entries[1].probes.empty());
  EXPECT_EQ(split.entries[0].variant.name, "rows16x16");
}

TEST(Recipe, WriteIsAtomicAndMergeKeepsOtherShapes) {
  test::TempDir tmp;
  const std::string path = tmp.str() + "/sub/r.json";
  kernels::recipe_write(sample(), path);
  for (const auto& f : std::filesystem::directory_iterator(tmp.str() + "/sub"))
    EXPECT_EQ(f.path().filename(), "r.json");  // no temporary left behind
  Recipe a = kernels::recipe_read(path);
  Recipe newer = sample();
  newer.entries.resize(1);
  newer.entries[0].variant = {"auto", {}};
  newer.models = {"other"};
  a.merge(newer);
  ASSERT_EQ(a.entries.size(), 3u);
  EXPECT_EQ(a.choices().find({"matmul", "bf16", 1, 4096, 4096})->name, "auto");
  EXPECT_NE(a.choices().find({"matmul_split", "nvfp4", 0, 14336, 4096}), nullptr);
  EXPECT_EQ(a.models, (std::vector<std::string>{"m", "other"}));
  EXPECT_THROW(kernels::recipe_read(tmp.str() + "/missing.json"), Error);
}

// Which recipe an entry point runs, with the user recipe directory set to a temporary one.
struct RecipeDir {
  test::TempDir tmp;
  std::string old;
  RecipeDir() {
    if (const char* o = std::getenv("BASALT_RECIPE_DIR")) old = o;
    setenv("BASALT_RECIPE_DIR", tmp.str().c_str(), 1);
  }
  ~RecipeDir() {
    if (old.empty())
      unsetenv("BASALT_RECIPE_DIR");
    else
      setenv("BASALT_RECIPE_DIR", old.c_str(), 1);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(tmp.str() + "/" + name) << text;
  }
};

Recipe for_cpu(const Backend& be) {
  Recipe r;
  r.device = be.identity();
  RecipeEntry e;
  e.shape = {"matmul", "bf16", 1, 256, 256};
  e.variant = be.kernel_registry()[0].variants[1];
  r.entries = {e};
  return r;
}

TEST(Recipe, SelectionPicksThisDevicesRecipeAndExplainsTheOthers) {
  RecipeDir dir;
  auto be = cpu::make_cpu_backend(1);
  // Nothing in the directory (and no CPU recipe shipped for this test's made-up shapes).
  auto sel = kernels::recipe_select(*be, false, "");
  EXPECT_FALSE(sel.recipe && sel.source.starts_with(dir.tmp.str()));

  Recipe other = for_cpu(*be);
  other.device.match["isa"] = "SOMETHING_ELSE";
  dir.write("a_other.json", kernels::recipe_json(other));
  dir.write("b_corrupt.json", "{\"format\": \"basalt-recipe-1\", \"entries\": [");
  dir.write("c_mine.json", kernels::recipe_json(for_cpu(*be)));
  sel = kernels::recipe_select(*be, false, "");
  ASSERT_TRUE(sel.recipe);
  EXPECT_EQ(sel.source, dir.tmp.str() + "/c_mine.json");
  ASSERT_EQ(sel.notes.size(), 2u);
  EXPECT_NE(sel.notes[0].find("SOMETHING_ELSE"), std::string::npos) << sel.notes[0];
  EXPECT_NE(sel.notes[1].find("corrupt"), std::string::npos) << sel.notes[1];

  // --no-autotune: none. --recipe: that file, even for another device (with a note).
  sel = kernels::recipe_select(*be, true, "");
  EXPECT_FALSE(sel.recipe);
  EXPECT_EQ(sel.reason, "--no-autotune");
  sel = kernels::recipe_select(*be, false, dir.tmp.str() + "/a_other.json");
  ASSERT_TRUE(sel.recipe);
  EXPECT_EQ(sel.notes.size(), 1u);
  EXPECT_THROW(kernels::recipe_select(*be, false, dir.tmp.str() + "/b_corrupt.json"), Error);

  // Applying sets the choices; applying none clears them.
  const std::string line = kernels::recipe_apply(*be, false, "");
  EXPECT_NE(line.find("1 shapes"), std::string::npos) << line;
  EXPECT_EQ(be->kernel_choices().size(), 1u);
  kernels::recipe_apply(*be, true, "");
  EXPECT_TRUE(be->kernel_choices().empty());
}

// The recipes shipped in recipes/ are embedded in the binary, parse, and keep order-changing
// choices off T (the registry check proper needs their device: tests/gpu).
TEST(Recipe, ShippedRecipesParse) {
  int n = 0;
  for (const EmbeddedFile* e = basalt_embedded_recipes(); e->name; ++e, ++n) {
    const Recipe r = kernels::recipe_parse(
        std::string(reinterpret_cast<const char*>(e->data), e->size), e->name);
    EXPECT_FALSE(r.entries.empty()) << e->name;
    EXPECT_FALSE(r.device.name.empty()) << e->name;
    for (const RecipeEntry& x : r.entries) {
      EXPECT_EQ(x.shape.op == "matmul_split", x.shape.T == 0) << e->name << " " << x.shape.str();
      EXPECT_GT(x.default_us, 0.0) << e->name << " " << x.shape.str();
      EXPECT_LE(x.time_us, x.default_us) << e->name << " " << x.shape.str();
    }
  }
  std::error_code ec;
  int files = 0;
  for (const auto& f : std::filesystem::directory_iterator(test::source_dir() + "/recipes", ec))
    files += f.path().extension() == ".json";
  EXPECT_EQ(n, files) << "every recipes/*.json is embedded";
}

// The CPU's variants differ in tiling only: each gives the default's bits on every dtype.
TEST(Recipe, CpuVariantsGiveTheDefaultsBits) {
  auto be = cpu::make_cpu_backend(2);
  const std::vector<OpKernels> reg = be->kernel_registry();
  ASSERT_EQ(reg.size(), 1u);
  for (const char* dt : {"f32", "bf16", "q8_0", "q4_k", "nvfp4", "fp8", "fp8-block128"})
    for (int64_t T : {1, 5, 70}) {
      const OpShape s{"matmul", dt, T, 272, 256};
      const VariantRun def = be->run_variant(s, reg[0].variants[0], 0, 1, true);
      ASSERT_EQ(def.output.size(), size_t(T * 272));
      double amax = 0;
      for (float v : def.output) amax = std::max(amax, double(std::fabs(v)));
      EXPECT_GT(amax, 0.0) << s.str();
      for (const KernelVariant& v : reg[0].variants) {
        if (!reg[0].supports(v, s)) continue;
        const VariantRun r = be->run_variant(s, v, 0, 2, true);
        EXPECT_EQ(r.us.size(), 2u);
        EXPECT_EQ(0, std::memcmp(def.output.data(), r.output.data(), def.output.size() * 4))
            << s.str() << " " << v.name;
      }
    }
  EXPECT_THROW(
      be->run_variant({"attention", "f32", 1, 8, 64, 2, 64}, reg[0].variants[0], 0, 1, false),
      Error);
}

}  // namespace
}  // namespace basalt
