// basalt's scaled formats against tools/make_scaled_fixtures.py (an independent numpy
// implementation; tests/golden/scaled/README.md): the E4M3 / E2M1 encoders, the dequantisation
// of every layout bit for bit, the quantisers byte for byte, and quantised models' logits
// against transformers run on the dequantised weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "golden_util.h"
#include "io/checkpoint.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/safetensors_write.h"
#include "models/hf_quant_export.h"
#include "models/model.h"
#include "ops/ref/ref_ops.h"
#include "ops/ref/scaled.h"
#include "test_util.h"

namespace basalt {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
const std::string kDir = test::source_dir() + "/tests/golden/scaled";

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}
std::vector<float> floats(const TensorView& t) {
  std::vector<float> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = float(dtype_read_f64(t.dtype, t.data, i));
  return v;
}
bool same_bytes(const TensorView& a, const void* b, size_t n) {
  return a.nbytes == n && std::memcmp(a.data, b, n) == 0;
}

TEST(ScaledFixtures, EncodersMatchTheVectors) {
  const io::NpyArray e4 = io::npy_read(kDir + "/e4m3_encode.npy");
  for (int64_t i = 0; i < e4.shape[0]; ++i) {
    const float x = e4.data[size_t(2 * i)];
    ASSERT_EQ(int(f32_to_fp8_e4m3(x)), int(e4.data[size_t(2 * i + 1)])) << "x = " << x;
  }
  const io::NpyArray e2 = io::npy_read(kDir + "/e2m1_encode.npy");
  for (int64_t i = 0; i < e2.shape[0]; ++i) {
    const float x = e2.data[size_t(2 * i)];
    ASSERT_EQ(int(f32_to_fp4_e2m1(x)), int(e2.data[size_t(2 * i + 1)])) << "x = " << x;
  }
  EXPECT_GT(e4.shape[0], 1000);
  EXPECT_GT(e2.shape[0], 100);
}

// Each vector case: the stored codes dequantise to the stored f32 matrix bit for bit, and
// (where basalt has that quantiser) quantising the source matrix gives the stored bytes.
TEST(ScaledFixtures, DequantAndQuantiseMatchTheVectors) {
  const json cases = read_json(kDir + "/vectors.json")["cases"];
  const io::TensorStore ts = io::safetensors_load_file(kDir + "/vectors.safetensors");
  int checked = 0;
  for (const json& c : cases) {
    const std::string name = c["name"], format = c["format"];
    SCOPED_TRACE(name);
    const int64_t N = c["shape"][0], K = c["shape"][1];
    const TensorView& q = ts.get(name + ".weight");
    WeightRef w{format == "nvfp4" ? DType::NVFP4 : DType::F8_E4M3, N, K, q.data};
    std::vector<float> scales;
    if (format == "nvfp4") {
      w.scales = ts.get(name + ".weight_scale").data;
      w.scale = floats(ts.get(name + ".weight_scale_2"))[0];
    } else if (format == "fp8_tensor") {
      w.scale = floats(ts.get(name + ".weight_scale"))[0];
    } else if (format == "fp8_channel") {
      scales = floats(ts.get(name + ".weight_scale"));
      w.scales = scales.data();
    } else {
      ASSERT_EQ(format, "fp8_block128");
      scales = floats(ts.get(name + ".weight_scale_inv"));
      w.scales = scales.data();
      w.scale_block = 128;
    }
    const std::vector<float> want = floats(ts.get(name + ".dequant"));
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t n = 0; n < N; ++n) {
      ref::scaled_dequant_row(w, n, row.data());
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(std::bit_cast<uint32_t>(row[size_t(k)]),
                  std::bit_cast<uint32_t>(want[size_t(n * K + k)]))
            << "(" << n << ", " << k << ") " << row[size_t(k)] << " vs " << want[size_t(n * K + k)];
    }
    const std::vector<float> x = floats(ts.get(name + ".x"));
    if (format == "nvfp4") {
      std::vector<uint8_t> qq(size_t(N * K / 2)), S(size_t(N * K / 16));
      float g;
      ref::quantize_nvfp4(x.data(), N, K, qq.data(), S.data(), &g);
      EXPECT_TRUE(same_bytes(q, qq.data(), qq.size())) << "codes";
      EXPECT_TRUE(same_bytes(ts.get(name + ".weight_scale"), S.data(), S.size())) << "scales";
      EXPECT_EQ(g, w.scale);
    } else if (format == "fp8_tensor") {
      std::vector<uint8_t> qq(size_t(N * K));
      float s;
      ref::quantize_fp8_tensor(x.data(), N * K, qq.data(), &s);
      EXPECT_TRUE(same_bytes(q, qq.data(), qq.size()));
      EXPECT_EQ(s, w.scale);
    } else if (format == "fp8_block128") {
      std::vector<uint8_t> qq(size_t(N * K));
      std::vector<float> s(scales.size());
      ref::quantize_fp8_block(x.data(), N, K, 128, qq.data(), s.data());
      EXPECT_TRUE(same_bytes(q, qq.data(), qq.size()));
      EXPECT_EQ(s, scales);
    }
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

std::vector<std::string> model_cases() {
  std::vector<std::string> out;
  if (!fs::is_directory(kDir)) return out;
  for (const auto& e : fs::directory_iterator(kDir))
    if (e.is_directory() && fs::exists(e.path() / "reference.json"))
      out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class ScaledModel : public ::testing::TestWithParam<std::string> {};

// The quantised checkpoint as basalt loads it (the real layout, through the loader) against
// transformers in f32 on the dequantised weights: max |Δlogit| ≤ 1e-4 · max|ref| on the CPU
// and reference backends (the only difference: basalt applies a per-tensor or per-row scale
// after the sum, transformers to each weight), and the same greedy continuation.
TEST_P(ScaledModel, LogitsAndGreedyMatchTransformersOnDequantisedWeights) {
  const std::string dir = kDir + "/" + GetParam();
  auto model = model_load(dir);
  test::expect_matches_reference(*model, read_json(dir + "/reference.json"), dir, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ScaledModel, ::testing::ValuesIn(model_cases()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// `basalt quantize` writes the same tensors, byte for byte, as the independent script does
// from the same source checkpoint (same names, dtypes, shapes, codes and scales).
TEST(ScaledFixtures, QuantizeWritesTheScriptsBytes) {
  struct Case {
    std::string fixture, source;
    HfQuantTarget target;
  };
  test::TempDir tmp;
  for (const Case& c :
       {Case{"llama_gqa_untied.nvfp4", "llama_gqa_untied", HfQuantTarget::Nvfp4},
        Case{"llama_gqa_untied.fp8", "llama_gqa_untied", HfQuantTarget::Fp8},
        Case{"qwen3_untied_f16.fp8_block", "qwen3_untied_f16", HfQuantTarget::Fp8Block}}) {
    SCOPED_TRACE(c.fixture);
    const std::string out = tmp.str() + "/" + c.fixture;
    hf_quant_write(io::checkpoint_open(test::source_dir() + "/tests/golden/" + c.source), c.target,
                   out, 2, nullptr);
    const io::TensorStore got = io::safetensors_load_dir(out);
    const io::TensorStore want = io::safetensors_load_dir(kDir + "/" + c.fixture);
    EXPECT_EQ(got.names(), want.names());
    for (const auto& [name, t] : want.all()) {
      const TensorView* g = got.find(name);
      ASSERT_TRUE(g) << name;
      EXPECT_EQ(g->dtype, t.dtype) << name;
      EXPECT_EQ(g->shape, t.shape) << name;
      EXPECT_TRUE(same_bytes(*g, t.data, t.nbytes)) << name;
    }
  }
}

// The dequantised twin of a quantised directory: every scaled matrix written back as f32
// (ops/ref/scaled.h), the scale tensors dropped, the quantisation config removed.
void write_dequantised(const std::string& qdir, const std::string& out) {
  const io::Checkpoint ck = io::checkpoint_open(qdir);
  const io::TensorStore& ts = ck.tensors;
  std::vector<io::TensorToWrite> tensors;
  auto f32s = std::make_shared<std::vector<std::vector<float>>>();
  for (const auto& [name, t] : ts.all()) {
    if (name.ends_with(".weight_scale") || name.ends_with(".weight_scale_2") ||
        name.ends_with(".input_scale") || name.ends_with(".weight_scale_inv"))
      continue;
    const std::string base = name.substr(0, name.size() - 7);
    io::TensorToWrite w;
    w.name = name;
    w.shape = t.shape;
    if (t.dtype == DType::U8 || t.dtype == DType::F8_E4M3) {
      const int64_t N = t.shape[0], K = t.dtype == DType::U8 ? 2 * t.shape[1] : t.shape[1];
      WeightRef r{t.dtype == DType::U8 ? DType::NVFP4 : DType::F8_E4M3, N, K, t.data};
      std::vector<float> grid;
      if (t.dtype == DType::U8) {
        r.scales = ts.get(base + ".weight_scale").data;
        r.scale = floats(ts.get(base + ".weight_scale_2"))[0];
      } else if (const TensorView* inv = ts.find(base + ".weight_scale_inv")) {
        grid = floats(*inv);
        r.scales = grid.data();
        r.scale_block = 128;
      } else {
        r.scale = floats(ts.get(base + ".weight_scale"))[0];
      }
      std::vector<float> v(size_t(N * K));
      for (int64_t n = 0; n < N; ++n) ref::scaled_dequant_row(r, n, v.data() + n * K);
      f32s->push_back(std::move(v));
      w.dtype = DType::F32;
      w.shape = {N, K};
    } else {
      f32s->push_back(floats(t));
      w.dtype = DType::F32;
    }
    const float* p = f32s->back().data();
    w.fill = [p, f32s](int64_t first, int64_t count, uint8_t* dst) {
      std::memcpy(dst, p + first, size_t(count) * 4);
    };
    tensors.push_back(std::move(w));
  }
  fs::create_directories(out);
  io::safetensors_write(out + "/model.safetensors", std::move(tensors));
  json cfg = ck.config;
  cfg.erase("quantization_config");
  std::ofstream(out + "/config.json") << cfg.dump(2);
  std::ofstream(out + "/generation_config.json") << ck.generation_config.dump(2);
}

// `basalt quantize` on the hybrid and MoE golden models (regrouped q/gate and Qwen3-Next's
// interleaved projections moving with their scales, per-expert matrices, Gated-DeltaNet
// projections): the quantised model computes the function of its dequantised twin.
TEST(ScaledFixtures, QuantisedHybridAndMoeModelsMatchTheirDequantisedTwins) {
  test::TempDir tmp;
  auto cpu = cpu::make_cpu_backend(2);
  for (const char* src : {"qwen3_5", "qwen3_next", "qwen3_5_moe", "qwen3_moe"})
    for (HfQuantTarget target :
         {HfQuantTarget::Nvfp4, HfQuantTarget::Fp8, HfQuantTarget::Fp8Block}) {
      const std::string q = tmp.str() + "/" + src + std::to_string(int(target)), d = q + "_deq";
      SCOPED_TRACE(q);
      hf_quant_write(io::checkpoint_open(test::source_dir() + "/tests/golden/" + src), target, q, 2,
                     nullptr);
      write_dequantised(q, d);
      auto mq = model_load(q), md = model_load(d);
      int scaled = 0;
      for (const auto& L : mq->weights().layers) {
        for (const WeightRef* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wq_gate, &L.w_gate, &L.w_up,
                                   &L.w_down, &L.gdn_qkv, &L.gdn_z, &L.gdn_out, &L.shared_up})
          scaled += ref::is_scaled(*w);
        for (const WeightRef& w : L.ex_up) scaled += ref::is_scaled(w);
      }
      EXPECT_GT(scaled, 2);
      const int64_t V = mq->config().vocab;
      std::vector<int32_t> ids(40);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % V);
      const auto a = Generator(*mq, *cpu).logits(ids, 0), b = Generator(*md, *cpu).logits(ids, 0);
      float max_ref = 0, err = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(b[i]));
        err = std::max(err, std::fabs(a[i] - b[i]));
      }
      EXPECT_LE(err, 1e-4f * max_ref);
    }
}

}  // namespace
}  // namespace basalt
