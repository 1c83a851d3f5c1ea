// Bad model configs get one clear error naming the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/generator.h"
#include "models/model.h"
#include "test_util.h"

namespace basalt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A copy of a golden checkpoint with its config.json edited by `edit`.
struct EditedModel {
  test::TempDir dir;
  EditedModel(const std::string& golden, const std::function<void(json&)>& edit) {
    const fs::path src = fs::path(test::source_dir()) / "tests/golden" / golden;
    for (const auto& e : fs::directory_iterator(src))
      fs::copy(e.path(), dir.path / e.path().filename());
    std::ifstream in(src / "config.json");
    json cfg = json::parse(in);
    edit(cfg);
    std::ofstream(dir.path / "config.json") << cfg.dump(2);
  }
};

std::string load_error(const std::string& path) {
  try {
    model_load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelLoad, MissingConfigKey) {
  EditedModel m("qwen3_tied", [](json& c) { c.erase("hidden_size"); });
  const std::string e = load_error(m.dir.str());
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("missing key 'hidden_size'"), std::string::npos) << e;
}

TEST(ModelLoad, WrongTypeForKey) {
  EditedModel m("qwen3_tied", [](json& c) { c["num_hidden_layers"] = "two"; });
  EXPECT_NE(load_error(m.dir.str()).find("'num_hidden_layers' must be an integer"),
            std::string::npos);
}

TEST(ModelLoad, HeadsNotMultipleOfKvHeads) {
  EditedModel m("qwen3_tied", [](json& c) { c["num_key_value_heads"] = 3; });
  EXPECT_NE(load_error(m.dir.str()).find("not a multiple of num_key_value_heads (3)"),
            std::string::npos);
}

TEST(ModelLoad, UnknownArchitecture) {
  EditedModel m("qwen3_tied", [](json& c) { c["architectures"] = {"FooForCausalLM"}; });
  EXPECT_NE(load_error(m.dir.str()).find("unknown architecture 'FooForCausalLM'"),
            std::string::npos);
}

TEST(ModelLoad, ConfigContradictsTensorShapes) {
  EditedModel m("qwen3_tied", [](json& c) { c["intermediate_size"] = 100; });
  const std::string e = load_error(m.dir.str());
  EXPECT_NE(e.find("tensor 'model.layers.0.mlp.gate_proj.weight' has shape"), std::string::npos)
      << e;
  EXPECT_NE(e.find("the config implies [100, 64]"), std::string::npos) << e;
}

TEST(ModelLoad, MoreLayersThanTensors) {
  EditedModel m("qwen3_tied", [](json& c) { c["num_hidden_layers"] = 3; });
  EXPECT_NE(load_error(m.dir.str()).find("missing tensor 'model.layers.2."), std::string::npos);
}

TEST(ModelLoad, UnsupportedRopeScaling) {
  EditedModel m("llama_gqa_untied", [](json& c) {
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    c.erase("rope_parameters");
  });
  EXPECT_NE(load_error(m.dir.str()).find("rope scaling type 'yarn' is not supported"),
            std::string::npos);
}

TEST(ModelLoad, UntiedWithoutLmHead) {
  EditedModel m("qwen3_tied", [](json& c) { c["tie_word_embeddings"] = false; });
  EXPECT_NE(load_error(m.dir.str()).find("missing tensor 'lm_head.weight'"), std::string::npos);
}

// Transformers ≤ 4 spelled rope settings rope_theta + rope_scaling; 5 uses rope_parameters.
// Both must give the same model.
TEST(ModelLoad, LegacyRopeKeysReadTheSame) {
  EditedModel m("llama3_rope_scaling", [](json& c) {
    json rp = c["rope_parameters"];
    c.erase("rope_parameters");
    c["rope_theta"] = rp["rope_theta"];
    rp.erase("rope_theta");
    c["rope_scaling"] = rp;
  });
  auto a = model_load(m.dir.str());
  auto b = model_load(test::source_dir() + "/tests/golden/llama3_rope_scaling");
  EXPECT_EQ(a->config().rope.scaling, "llama3");
  EXPECT_EQ(a->config().rope.theta, b->config().rope.theta);
  EXPECT_EQ(a->config().rope.factor, b->config().rope.factor);
  EXPECT_EQ(a->config().rope.original_max_position, b->config().rope.original_max_position);
  auto be = cpu::make_cpu_backend(1);
  const std::vector<int32_t> ids = {1, 50, 100, 7, 9};
  EXPECT_EQ(Generator(*a, *be).logits(ids, 0), Generator(*b, *be).logits(ids, 0));
}

TEST(ModelLoad, UnsupportedActivation) {
  EditedModel m("qwen3_tied", [](json& c) { c["hidden_act"] = "gelu"; });
  EXPECT_NE(load_error(m.dir.str()).find("hidden_act 'gelu' is not supported"), std::string::npos);
}

}  // namespace
}  // namespace basalt
