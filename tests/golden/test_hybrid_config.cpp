// Hybrid and MoE checkpoints whose config.json contradicts the tensors: a clear load-time error
// that names the tensor (issue: layer_types, head counts, expert counts).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/model.h"
#include "test_util.h"

namespace basalt {
namespace {

namespace fs = std::filesystem;

// A copy of a golden checkpoint with `edit` applied to its config.json.
template <typename Edit>
std::string edited(const test::TempDir& tmp, const std::string& name, Edit&& edit) {
  const std::string src = test::source_dir() + "/tests/golden/" + name;
  const std::string dst = tmp.str() + "/" + name;
  fs::create_directories(dst);
  for (const char* f : {"model.safetensors", "generation_config.json"})
    fs::copy_file(src + "/" + f, dst + "/" + f);
  std::ifstream in(src + "/config.json");
  nlohmann::ordered_json c = nlohmann::ordered_json::parse(in);
  edit(c);
  std::ofstream(dst + "/config.json") << c.dump(2);
  return dst;
}

TEST(HybridConfig, LayerTypesThatContradictTheTensorsNameTheTensor) {
  test::TempDir tmp;
  // Layer 0 holds Gated-DeltaNet tensors; the config calls it full attention.
  const auto d = edited(tmp, "qwen3_5", [](auto& c) {
    auto& t = c.contains("text_config") ? c["text_config"]["layer_types"] : c["layer_types"];
    t[0] = "full_attention";
  });
  test::expect_error([&] { model_load(d); }, {"layers.0.self_attn.q_proj.weight"});
}

TEST(HybridConfig, LinearHeadCountsThatContradictTheTensorsNameTheTensor) {
  test::TempDir tmp;
  const auto d = edited(tmp, "qwen3_next", [](auto& c) {
    c["linear_num_value_heads"] = int(c["linear_num_value_heads"]) * 2;
  });
  test::expect_error([&] { model_load(d); }, {"linear_attn", "shape"});
}

TEST(HybridConfig, ExpertCountsThatContradictTheTensorsNameTheTensor) {
  test::TempDir tmp;
  // More experts than the checkpoint holds (fused 3-D experts; per-expert tensors): the router
  // is the first tensor that disagrees.
  const auto more = edited(tmp, "qwen3_5_moe", [](auto& c) {
    auto& t = c.contains("text_config") ? c["text_config"] : c;
    t["num_experts"] = int(t["num_experts"]) * 2;
  });
  test::expect_error([&] { model_load(more); }, {"mlp.gate.weight", "[8, 64]", "[16, 64]"});
  test::TempDir tmp2;
  const auto per = edited(tmp2, "qwen3_moe", [](auto& c) {
    c["num_local_experts"] = int(c["num_local_experts"]) + 1;
  });
  test::expect_error([&] { model_load(per); }, {"mlp.gate.weight", "shape"});
}

}  // namespace
}  // namespace basalt
