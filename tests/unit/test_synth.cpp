// safetensors writing and synthetic checkpoints: what basalt writes, basalt (and the format)
// reads back exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "backends/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "io/safetensors.h"
#include "io/safetensors_write.h"
#include "models/model.h"
#include "models/synth.h"
#include "test_util.h"

namespace basalt {
namespace {

TEST(SafetensorsWrite, RoundTripsEveryPlainDtypeAndStreamsInPieces) {
  test::TempDir tmp;
  const std::string path = tmp.str() + "/t.safetensors";
  std::vector<io::TensorToWrite> ts;
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I8, DType::I64,
                   DType::U16, DType::BOOL}) {
    ts.push_back({"t_" + std::string(dtype_name(dt)),
                  dt,
                  {3, 5},
                  [dt](int64_t first, int64_t n, uint8_t* out) {
                    const size_t es = size_t(dtype_block_bytes(dt));
                    for (int64_t i = 0; i < n; ++i)
                      for (size_t b = 0; b < es; ++b)
                        out[size_t(i) * es + b] = uint8_t(first + i + b);
                  }});
  }
  io::safetensors_write(path, ts, {{"format", "pt"}});
  const io::TensorStore st = io::safetensors_load_file(path);
  ASSERT_EQ(st.size(), ts.size());
  for (const auto& t : ts) {
    const TensorView& v = st.get(t.name);
    EXPECT_EQ(v.dtype, t.dtype);
    EXPECT_EQ(v.shape, t.shape);
    const size_t es = size_t(dtype_block_bytes(t.dtype));
    for (size_t i = 0; i < 15; ++i)
      for (size_t b = 0; b < es; ++b) ASSERT_EQ(v.data[i * es + b], uint8_t(i + b)) << t.name;
  }
  // The header length is a multiple of 8 (the format's alignment rule).
  std::ifstream f(path, std::ios::binary);
  uint64_t hlen = 0;
  f.read(reinterpret_cast<char*>(&hlen), 8);
  EXPECT_EQ(hlen % 8, 0u);
}

TEST(Synth, TinyPresetsLoadAndRunAndAreReproducible) {
  for (const char* name : {"tiny-llama", "tiny-qwen3"}) {
    test::TempDir a, b;
    synth_write(synth_preset(name), DType::BF16, a.str(), 7);
    synth_write(synth_preset(name), DType::BF16, b.str(), 7);
    std::ifstream fa(a.str() + "/model.safetensors", std::ios::binary),
        fb(b.str() + "/model.safetensors", std::ios::binary);
    const std::string sa((std::istreambuf_iterator<char>(fa)), {}),
        sb((std::istreambuf_iterator<char>(fb)), {});
    EXPECT_EQ(sa, sb) << name;  // same seed, same bytes
    auto model = model_load(a.str());
    EXPECT_EQ(model->config().n_layers, 2);
    auto be = cpu::make_cpu_backend(1);
    const std::vector<int32_t> ids = {1, 2, 3, 250};
    const auto logits = Generator(*model, *be).logits(ids, 0);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    EXPECT_NE(logits[0], logits[1]);  // random weights, not zeros
  }
  test::expect_error([] { synth_preset("nope"); }, "unknown preset 'nope' (presets: llama-3.1-8b");
}

}  // namespace
}  // namespace basalt
