// Loading NVFP4 / FP8 checkpoints (models/quant_config.h, the loader's scaled path) and
// `basalt quantize --to nvfp4|fp8|fp8-block` (models/hf_quant_export.h): the written layouts
// load and run, and every kind of bad input fails at load with a message naming the tensor or
// the file. Fidelity against transformers: tests/golden/test_scaled.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "io/checkpoint.h"
#include "io/safetensors_write.h"
#include "models/hf_quant_export.h"
#include "models/model.h"
#include "ops/ref/scaled.h"
#include "test_util.h"

namespace basalt {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::TempDir;

const std::string kSrc = test::source_dir() + "/tests/golden/llama_gqa_untied";

std::string quantised(const TempDir& d, HfQuantTarget t, const std::string& sub = "q") {
  const std::string out = d.str() + "/" + sub;
  hf_quant_write(io::checkpoint_open(kSrc), t, out, 1, nullptr);
  return out;
}

// Rewrites dir/model.safetensors: edit(name, view) returns the tensor to write instead, or
// nullopt to drop it (return a copy of the view's bytes to keep it).
using Edit = std::function<std::optional<io::TensorToWrite>(const std::string&, const TensorView&)>;
void rewrite(const std::string& dir, const Edit& edit) {
  const fs::path file = fs::path(dir) / "model.safetensors";
  std::vector<io::TensorToWrite> out;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> keep;
  {
    const io::Checkpoint ck = io::checkpoint_open(dir);
    for (const auto& [name, t] : ck.tensors.all()) {
      auto w = edit(name, t);
      if (!w) continue;
      auto bytes = std::make_shared<std::vector<uint8_t>>(t.data, t.data + t.nbytes);
      keep.push_back(bytes);
      if (!w->fill) {
        const size_t elem = size_t(dtype_block_bytes(w->dtype));
        w->fill = [bytes, elem](int64_t first, int64_t count, uint8_t* dst) {
          std::memset(dst, 0x38, size_t(count) * elem);  // (E4M3 1.0 for resized scales)
          const size_t have = bytes->size();
          const size_t at = size_t(first) * elem, n = size_t(count) * elem;
          if (at < have) std::memcpy(dst, bytes->data() + at, std::min(n, have - at));
        };
      }
      out.push_back(std::move(*w));
    }
  }
  io::safetensors_write(file.string(), std::move(out));
}
std::optional<io::TensorToWrite> same(const std::string& name, const TensorView& t) {
  io::TensorToWrite w;
  w.name = name, w.dtype = t.dtype, w.shape = t.shape;
  return w;
}

void edit_json(const fs::path& p, const std::function<void(nlohmann::json&)>& fn) {
  nlohmann::json j = io::json_load_file(p.string());
  fn(j);
  std::ofstream(p) << j.dump(2);
}

TEST(ScaledLoad, QuantisedCheckpointsLoadWithTheirLayouts) {
  TempDir d;
  struct Case {
    HfQuantTarget t;
    DType dtype;
    bool scales;
    int32_t block;
  };
  for (Case c : {Case{HfQuantTarget::Nvfp4, DType::NVFP4, true, 0},
                 Case{HfQuantTarget::Fp8, DType::F8_E4M3, false, 0},
                 Case{HfQuantTarget::Fp8Block, DType::F8_E4M3, true, 128}}) {
    const std::string dir = quantised(d, c.t, std::to_string(int(c.t)));
    auto m = model_load(dir);
    const WeightRef& w = m->weights().layers[0].wq;
    EXPECT_EQ(w.dtype, c.dtype);
    EXPECT_EQ(w.scales != nullptr, c.scales);
    EXPECT_EQ(w.scale_block, c.block);
    EXPECT_EQ(w.rows, 64);
    EXPECT_EQ(w.cols, 64);
    EXPECT_EQ(m->weights().lm_head.dtype, DType::F32);  // excluded, as ModelOpt does
    EXPECT_EQ(m->weights().embed.dtype, DType::F32);
    // The per-tensor scales are what the quantiser computed from the source matrix.
    const io::Checkpoint src = io::checkpoint_open(kSrc);
    const TensorView& q = src.tensors.get("model.layers.0.self_attn.q_proj.weight");
    float amax = 0;
    for (int64_t i = 0; i < q.numel(); ++i)
      amax = std::max(amax, std::fabs(float(dtype_read_f64(q.dtype, q.data, i))));
    if (c.t == HfQuantTarget::Nvfp4) EXPECT_EQ(w.scale, ref::nvfp4_global_scale(amax));
    if (c.t == HfQuantTarget::Fp8) EXPECT_EQ(w.scale, ref::fp8_tensor_scale(amax));
  }
}

TEST(ScaledLoad, MissingScaleNamesTheTensor) {
  TempDir d;
  const std::string dir = quantised(d, HfQuantTarget::Nvfp4);
  rewrite(dir, [](const std::string& n, const TensorView& t) -> std::optional<io::TensorToWrite> {
    if (n == "model.layers.1.mlp.up_proj.weight_scale") return std::nullopt;
    return same(n, t);
  });
  expect_error([&] { model_load(dir); },
               {"model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight_scale"});

  const std::string fp8 = quantised(d, HfQuantTarget::Fp8, "fp8");
  rewrite(fp8, [](const std::string& n, const TensorView& t) -> std::optional<io::TensorToWrite> {
    if (n == "model.layers.0.self_attn.k_proj.weight_scale") return std::nullopt;
    return same(n, t);
  });
  expect_error([&] { model_load(fp8); }, {"FP8 weight", "model.layers.0.self_attn.k_proj.weight"});
}

TEST(ScaledLoad, ScaleShapeMismatchNamesBothShapes) {
  TempDir d;
  const std::string dir = quantised(d, HfQuantTarget::Nvfp4);
  rewrite(dir, [](const std::string& n, const TensorView& t) -> std::optional<io::TensorToWrite> {
    auto w = same(n, t);
    if (n == "model.layers.0.mlp.down_proj.weight_scale") w->shape = {64, 4};  // [64, 8] is right
    return w;
  });
  expect_error([&] { model_load(dir); },
               {"model.layers.0.mlp.down_proj.weight_scale", "[64, 4]", "[64, 8]"});

  const std::string blk = quantised(d, HfQuantTarget::Fp8Block, "blk");
  rewrite(blk, [](const std::string& n, const TensorView& t) -> std::optional<io::TensorToWrite> {
    auto w = same(n, t);
    if (n == "model.layers.0.mlp.gate_proj.weight_scale_inv") w->shape = {2, 1};
    return w;
  });
  expect_error([&] { model_load(blk); },
               {"model.layers.0.mlp.gate_proj.weight_scale_inv", "[2, 1]"});
}

TEST(ScaledLoad, UnknownOrMissingQuantConfig) {
  TempDir d;
  const std::string dir = quantised(d, HfQuantTarget::Nvfp4);
  edit_json(fs::path(dir) / "hf_quant_config.json",
            [](nlohmann::json& j) { j["quantization"]["quant_algo"] = "W4A8_AWQ"; });
  expect_error([&] { model_load(dir); }, {"hf_quant_config.json", "unknown quant_algo 'W4A8_AWQ'"});
  // Packed U8 weights with no quantisation declared at all.
  fs::remove(fs::path(dir) / "hf_quant_config.json");
  edit_json(fs::path(dir) / "config.json",
            [](nlohmann::json& j) { j.erase("quantization_config"); });
  expect_error([&] { model_load(dir); }, {"is U8", "declares no quantisation"});
  // config.json alone (newer ModelOpt exports) is enough.
  const std::string dir2 = quantised(d, HfQuantTarget::Nvfp4, "q2");
  fs::remove(fs::path(dir2) / "hf_quant_config.json");
  EXPECT_EQ(model_load(dir2)->weights().layers[0].wo.dtype, DType::NVFP4);
  edit_json(fs::path(dir2) / "config.json",
            [](nlohmann::json& j) { j["quantization_config"]["quant_method"] = "awq"; });
  expect_error([&] { model_load(dir2); }, {"config.json", "unknown quant_method 'awq'"});
  edit_json(fs::path(dir2) / "config.json", [](nlohmann::json& j) {
    j["quantization_config"]["quant_method"] = "modelopt";
    j["quantization_config"]["group_size"] = 32;
  });
  expect_error([&] { model_load(dir2); }, {"group_size 32"});
}

TEST(ScaledLoad, QuantizeRefusesGgufAndQuantisedInput) {
  TempDir d;
  const std::string dir = quantised(d, HfQuantTarget::Fp8);
  expect_error(
      [&] {
        hf_quant_write(io::checkpoint_open(dir), HfQuantTarget::Nvfp4, d.str() + "/x", 1, nullptr);
      },
      "already quantised");
  const std::string gguf = test::source_dir() + "/tests/golden/gguf/qwen3_tied.f16.gguf";
  expect_error(
      [&] {
        hf_quant_write(io::checkpoint_open(gguf), HfQuantTarget::Nvfp4, d.str() + "/y", 1, nullptr);
      },
      "GGUF");
}

}  // namespace
}  // namespace basalt
