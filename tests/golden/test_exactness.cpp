// The exactness contract on the CPU backend (EXACTNESS.md): a position's logits are bitwise
// identical whatever the prefill chunk size, whether the token came through a decode step,
// and whatever the thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "backends/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "models/model.h"
#include "test_util.h"

namespace basalt {
namespace {

void check_chunkings(const std::string& path, int64_t T) {
  auto model = model_load(path);
  const int64_t V = model->config().vocab;
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) ids[size_t(i)] = int32_t((i * 7919 + 13) % V);
  auto be2 = cpu::make_cpu_backend(2);
  auto be1 = cpu::make_cpu_backend(1);
  const std::vector<float> whole = Generator(*model, *be2).logits(ids, 0);
  for (int64_t chunk : {1, 7, 64, 128}) {
    const std::vector<float> got = Generator(*model, *be2).logits(ids, chunk);
    EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), whole.size() * 4))
        << path << " chunk " << chunk;
  }
  const std::vector<float> one_thread = Generator(*model, *be1).logits(ids, 5);
  EXPECT_EQ(0, std::memcmp(whole.data(), one_thread.data(), whole.size() * 4)) << "1 thread";

  // Decode steps (T = 1 forward passes after a prefill) give the same last-row logits.
  auto pool = model->new_kv_pool(*be2, T);
  KvSequence seq;
  std::vector<float> last(static_cast<size_t>(V));
  const int64_t pre = T / 2;
  model->forward(*be2, *pool, seq, std::span(ids).first(size_t(pre)), last.data(), false);
  for (int64_t p = pre; p < T; ++p) {
    model->forward(*be2, *pool, seq, std::span(ids).subspan(size_t(p), 1), last.data(), false);
    ASSERT_EQ(0, std::memcmp(last.data(), whole.data() + p * V, size_t(V) * 4))
        << "decode step at position " << p;
  }
}

TEST(Exactness, GoldenModelsBitwiseAcrossChunkingsThreadsAndDecode) {
  const std::string g = test::source_dir() + "/tests/golden";
  for (const char* c : {"llama_gqa_untied", "qwen3_untied_f16", "llama_headdim", "qwen3_moe",
                        "qwen3_next", "qwen3_5", "qwen3_5_moe"})
    check_chunkings(g + "/" + c, 150);
  check_chunkings(g + "/gguf/qwen3_tied.q8_0.gguf", 150);
}

TEST(Exactness, Stories260KBitwiseAcrossChunkings) {
  BASALT_REQUIRE_FIXTURE(fx, "stories260K/stories260K.gguf");
  check_chunkings(fx, 300);
}

}  // namespace
}  // namespace basalt
