// Recipes as JSON (kernels/recipe.h, docs/tuning.md).
#include "kernels/recipe.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/embedded.h"

namespace basalt::kernels {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

const OpKernels* find_op(const std::vector<OpKernels>& reg, const std::string& op) {
  for (const OpKernels& k : reg)
    if (k.op == op) return &k;
  return nullptr;
}

ojson identity_json(const DeviceIdentity& d) {
  return ojson{{"backend", d.backend}, {"name", d.name}, {"match", d.match}, {"info", d.info}};
}

// Field access with the recipe's name and the field's path in every error.
struct Reader {
  const std::string& source;
  template <typename T>
  T get(const json& j, const char* key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key))
      fail("[recipe] {}: {} has no \"{}\"", source, where, key);
    try {
      return j.at(key).get<T>();
    } catch (const json::exception&) {
      fail("[recipe] {}: {}.{} has the wrong type", source, where, key);
    }
  }
  template <typename T>
  T get_or(const json& j, const char* key, T fallback, const std::string& where) const {
    return j.contains(key) ? get<T>(j, key, where) : fallback;
  }
};

}  // namespace

KernelChoices Recipe::choices() const {
  KernelChoices c;
  for (const RecipeEntry& e : entries) c.set(e.shape, e.variant);
  return c;
}

void Recipe::merge(const Recipe& newer) {
  std::map<OpShape, RecipeEntry> all;
  for (const RecipeEntry& e : entries) all[e.shape] = e;
  for (const RecipeEntry& e : newer.entries) all[e.shape] = e;
  entries.clear();
  for (auto& [s, e] : all) entries.push_back(std::move(e));
  for (const std::string& m : newer.models)
    if (std::find(models.begin(), models.end(), m) == models.end()) models.push_back(m);
  device = newer.device;
  created = newer.created;
}

Recipe recipe_parse(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("[recipe] {}: not JSON ({})", source, e.what());
  }
  const Reader rd{source};
  if (!j.is_object()) fail("[recipe] {}: expected a JSON object", source);
  const auto format = rd.get<std::string>(j, "format", "the recipe");
  if (format != kRecipeFormat)
    fail("[recipe] {}: format \"{}\" (this basalt reads \"{}\")", source, format, kRecipeFormat);
  Recipe r;
  const json& d = j.contains("device") ? j["device"] : json();
  r.device.backend = rd.get<std::string>(d, "backend", "device");
  r.device.name = rd.get<std::string>(d, "name", "device");
  r.device.match = rd.get_or<std::map<std::string, std::string>>(d, "match", {}, "device");
  r.device.info = rd.get_or<std::map<std::string, std::string>>(d, "info", {}, "device");
  r.created = rd.get_or<std::string>(j, "created", "", "the recipe");
  r.models = rd.get_or<std::vector<std::string>>(j, "models", {}, "the recipe");
  if (!j.contains("entries") || !j["entries"].is_array())
    fail("[recipe] {}: \"entries\" must be an array", source);
  std::map<OpShape, size_t> seen;
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    const json& e = j["entries"][i];
    const std::string where = "entries[" + std::to_string(i) + "]";
    RecipeEntry x;
    x.shape.op = rd.get<std::string>(e, "op", where);
    x.shape.dtype = rd.get<std::string>(e, "dtype", where);
    x.shape.T = rd.get_or<int64_t>(e, "T", 0, where);
    x.shape.N = rd.get_or<int64_t>(e, "N", 0, where);
    x.shape.K = rd.get_or<int64_t>(e, "K", 0, where);
    x.shape.hkv = rd.get_or<int64_t>(e, "Hkv", 0, where);
    x.shape.ctx = rd.get_or<int64_t>(e, "ctx", 0, where);
    x.shape.experts = rd.get_or<int64_t>(e, "experts", 0, where);
    x.shape.top_k = rd.get_or<int64_t>(e, "top_k", 0, where);
    if (x.shape.T < 0 || x.shape.N <= 0 || x.shape.K <= 0 || x.shape.hkv < 0 || x.shape.ctx < 0 ||
        x.shape.experts < 0 || x.shape.top_k < 0)
      fail("[recipe] {}: {} ({}) has a negative or missing size", source, where, x.shape.str());
    x.variant.name = rd.get<std::string>(e, "variant", where);
    x.variant.params = rd.get_or<KernelParams>(e, "params", {}, where);
    x.time_us = rd.get_or<double>(e, "time_us", 0.0, where);
    x.default_us = rd.get_or<double>(e, "default_us", 0.0, where);
    if (e.contains("probes")) {
      if (!e["probes"].is_array()) fail("[recipe] {}: {}.probes must be an array", source, where);
      for (const json& p : e["probes"])
        x.probes.push_back({rd.get<int64_t>(p, "T", where + ".probes"),
                            rd.get<double>(p, "time_us", where + ".probes"),
                            rd.get<double>(p, "default_us", where + ".probes")});
    }
    if (!seen.emplace(x.shape, i).second)
      fail("[recipe] {}: {} lists {} again (first at entries[{}])", source, where, x.shape.str(),
           seen[x.shape]);
    r.entries.push_back(std::move(x));
  }
  return r;
}

Recipe recipe_read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("[recipe] cannot open {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return recipe_parse(ss.str(), path);
}

std::string recipe_json(const Recipe& r) {
  ojson entries = ojson::array();
  for (const RecipeEntry& e : r.entries) {
    ojson x{{"op", e.shape.op}, {"dtype", e.shape.dtype}};
    if (e.shape.T) x["T"] = e.shape.T;
    x["N"] = e.shape.N;
    x["K"] = e.shape.K;
    if (e.shape.hkv) x["Hkv"] = e.shape.hkv;
    if (e.shape.ctx) x["ctx"] = e.shape.ctx;
    if (e.shape.experts) x["experts"] = e.shape.experts;
    if (e.shape.top_k) x["top_k"] = e.shape.top_k;
    x["variant"] = e.variant.name;
    x["params"] = e.variant.params;
    x["time_us"] = std::round(e.time_us * 1000) / 1000;
    x["default_us"] = std::round(e.default_us * 1000) / 1000;
    if (!e.probes.empty()) {
      ojson p = ojson::array();
      for (const RecipeProbe& q : e.probes)
        p.push_back({{"T", q.T},
                     {"time_us", std::round(q.time_us * 1000) / 1000},
                     {"default_us", std::round(q.default_us * 1000) / 1000}});
      x["probes"] = p;
    }
    entries.push_back(x);
  }
  ojson j{{"format", kRecipeFormat},
         {"device", identity_json(r.device)},
         {"created", r.created},
         {"models", r.models},
         {"entries", entries}};
  return j.dump(1) + "\n";
}

void recipe_write(const Recipe& r, const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("[recipe] cannot write {}", tmp);
    f << recipe_json(r);
    f.flush();
    if (!f) {
      f.close();
      fs::remove(tmp, ec);
      fail("[recipe] writing {} failed", tmp);
    }
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail("[recipe] cannot rename {} to {}", tmp, path);
  }
}

void recipe_check(const Recipe& r, const std::vector<OpKernels>& registry) {
  for (const RecipeEntry& e : r.entries) {
    const OpKernels* k = find_op(registry, e.shape.op);
    if (!k)
      fail("[recipe] {}: the {} backend has no op \"{}\"", e.shape.str(), r.device.backend,
           e.shape.op);
    if (k->changes_order != (e.shape.T == 0))
      fail(
          "[recipe] {}: {} choices are keyed {} T (exactness: an order-changing choice may "
          "depend on the weight shape only)",
          e.shape.str(), e.shape.op, k->changes_order ? "without" : "with");
    auto v = std::find_if(k->variants.begin(), k->variants.end(),
                          [&](const KernelVariant& x) { return x.name == e.variant.name; });
    if (v == k->variants.end())
      fail("[recipe] {}: {} has no variant \"{}\"", e.shape.str(), e.shape.op, e.variant.name);
    if (v->params != e.variant.params)
      fail("[recipe] {}: variant {}'s parameters differ from this basalt's", e.shape.str(),
           e.variant.name);
  }
}

std::string recipe_user_dir() {
  if (const char* d = std::getenv("BASALT_RECIPE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return (fs::path(x) / "basalt" / "recipes").string();
  if (const char* h = std::getenv("HOME"); h && *h)
    return (fs::path(h) / ".cache" / "basalt" / "recipes").string();
  return ".basalt-recipes";
}

std::string recipe_default_path(const DeviceIdentity& d) {
  std::string slug = d.backend + "-" + d.name;
  for (const auto& [k, v] : d.match) slug += "-" + k + v;
  for (char& c : slug)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  std::transform(slug.begin(), slug.end(), slug.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return (fs::path(recipe_user_dir()) / (slug + ".json")).string();
}

RecipeSelection recipe_select(const Backend& be, bool no_autotune, const std::string& forced) {
  RecipeSelection sel;
  if (no_autotune) {
    sel.reason = "--no-autotune";
    return sel;
  }
  const DeviceIdentity me = be.identity();
  const std::vector<OpKernels> reg = be.kernel_registry();
  if (!forced.empty()) {
    Recipe r = recipe_read(forced);  // a corrupt forced recipe is the user's error: report it
    recipe_check(r, reg);
    if (!r.device.same_device(me))
      sel.notes.push_back(fmt::format("{} was measured on {}, not this {} (used: --recipe)", forced,
                                      r.device.str(), me.str()));
    sel.recipe = std::move(r);
    sel.source = forced;
    return sel;
  }
  struct Candidate {
    std::string label, text;
  };
  std::vector<Candidate> cands;
  std::error_code ec;
  const fs::path dir(recipe_user_dir());
  if (fs::is_directory(dir, ec)) {
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(dir, ec))
      if (f.path().extension() == ".json") files.push_back(f.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      cands.push_back({f.string(), ss.str()});
    }
  }
  for (const EmbeddedFile* e = basalt_embedded_recipes(); e->name; ++e)
    cands.push_back({std::string("embedded:") + e->name,
                     std::string(reinterpret_cast<const char*>(e->data), e->size)});
  for (Candidate& c : cands) {
    Recipe r;
    try {
      r = recipe_parse(c.text, c.label);
    } catch (const Error& e) {
      sel.notes.push_back(fmt::format("ignored corrupt recipe: {}", e.what()));
      continue;
    }
    if (!r.device.same_device(me)) {
      // Shipped recipes for other devices are expected; only the user's are worth a word.
      if (!c.label.starts_with("embedded:"))
        sel.notes.push_back(fmt::format("ignored {}: measured on {}, this is {}", c.label,
                                        r.device.str(), me.str()));
      continue;
    }
    try {
      recipe_check(r, reg);
    } catch (const Error& e) {
      sel.notes.push_back(fmt::format("ignored {}: {}", c.label, e.what()));
      continue;
    }
    sel.recipe = std::move(r);
    sel.source = c.label;
    return sel;
  }
  sel.reason = fmt::format("no recipe for {} (run `basalt tune`; looked in {} and the {} shipped)",
                           me.str(), recipe_user_dir(), [] {
                             int n = 0;
                             for (const EmbeddedFile* e = basalt_embedded_recipes(); e->name; ++e)
                               ++n;
                             return n;
                           }());
  return sel;
}

std::string recipe_apply(Backend& be, bool no_autotune, const std::string& forced) {
  RecipeSelection sel = recipe_select(be, no_autotune, forced);
  for (const std::string& n : sel.notes) spdlog::warn("[recipe] {}", n);
  if (!sel.recipe) {
    std::string line = fmt::format("recipe: none, kernel defaults ({})", sel.reason);
    spdlog::info("{}", line);
    be.set_kernel_choices({});
    return line;
  }
  std::map<std::string, int> per_op;
  for (const RecipeEntry& e : sel.recipe->entries) ++per_op[e.shape.op];
  std::string ops;
  for (const auto& [op, n] : per_op) ops += fmt::format("{}{} {}", ops.empty() ? "" : ", ", n, op);
  std::string line =
      fmt::format("recipe: {} ({}): {} shapes ({}); other shapes run the defaults", sel.source,
                  sel.recipe->device.str(), sel.recipe->entries.size(), ops.empty() ? "none" : ops);
  spdlog::info("{}", line);
  be.set_kernel_choices(sel.recipe->choices());
  return line;
}

}  // namespace basalt::kernels
