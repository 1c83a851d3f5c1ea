// DSpark block drafters (src/engine/dspark.h, DSparkDrafter): the target's taps, the block's
// logits, hidden rows, Markov-corrected tokens and confidences against an independent float64
// reference of DeepSpec's published layout (tools/make_dspark_reference.py: random vanilla,
// gated and RNN-headed drafters for tests/golden/qwen3_untied_f16), the context entries lined
// up with the text as passes reveal it, and speculative decoding with them giving the plain
// output. (models/dspark, the drafter trained for the default model, is tested in
// test_speculative.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/drafter.h"
#include "engine/generator.h"
#include "io/checkpoint.h"
#include "io/npy.h"
#include "models/model.h"
#include "ops/ref/ref_ops.h"
#include "test_util.h"

namespace basalt {
namespace {

// Random drafters: vanilla, gated and RNN Markov heads for qwen3_untied_f16 (with their copies of
// its embedding and LM head, as DeepSpec saves them), and drafters for a Llama, a Qwen3-MoE and a
// Qwen3.5 hybrid target (taps of a Gated-DeltaNet and an attention layer), a llama-3-scaled Llama
// and a Qwen3.5 hybrid MoE target (head_dim 32: the CUDA tests run those too) that take the
// target's.
const char* kCases[] = {"dspark_qwen3",  "dspark_qwen3_gated", "dspark_qwen3_rnn",
                        "dspark_llama",  "dspark_qwen3_moe",   "dspark_qwen3_5",
                        "dspark_llama3", "dspark_qwen3_5_moe"};

std::string golden(const std::string& name) {
  return test::source_dir() + "/tests/golden/" + name;
}

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max |got − want[offset …]| over got.size() values.
float max_err(const std::vector<float>& got, const std::vector<float>& want, size_t offset) {
  float e = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(got[i] - want[offset + i]));
  return e;
}

// The target's taps at every position equal transformers' output_hidden_states[l + 1].
TEST(DSpark, TargetTapsAreTransformersHiddenStates) {
  auto be = cpu::make_cpu_backend(2);
  for (const char* name : kCases) {
    const auto ref = io::json_load_file(golden(name) + "/dspark_reference.json");
    const auto cfg = io::json_load_file(golden(name) + "/config.json");
    const auto ids = ref["ids"].get<std::vector<int32_t>>();
    const io::NpyArray want = io::npy_read(golden(name) + "/taps.npy");
    auto m = model_load(golden(ref["target"].get<std::string>()));
    m->set_taps(cfg["target_layer_ids"].get<std::vector<int64_t>>());
    const int64_t n = int64_t(ids.size()), W = want.shape[1];
    ASSERT_EQ(size_t(W), m->hidden_row_bytes(*be) / sizeof(float)) << name;
    auto pool = m->new_kv_pool(*be, n);
    KvSequence seq;
    std::vector<float> logits(size_t(m->config().vocab));
    m->forward(*be, *pool, seq, ids, logits.data(), false, nullptr, true);
    std::vector<float> got(size_t(n * W));
    be->download(got.data(), m->hidden_rows(), got.size() * sizeof(float));
    EXPECT_LE(max_err(got, want.data, 0), 1e-4f * max_abs(want.data)) << name;
  }
}

// The drafter against the reference at two anchors: after a prefill in two chunks (context
// 0 … 11, anchor ids[12]) and after a verification pass of ids[12 … 15] of which three rows
// stood (context 0 … 14 from both passes, anchor ids[15]).
TEST(DSpark, TheBlockMatchesTheReference) {
  auto cpu = cpu::make_cpu_backend(2);
  auto refb = ref::make_ref_backend();
  for (const char* name : kCases) {
    const std::string dir = golden(name);
    const auto ref = io::json_load_file(dir + "/dspark_reference.json");
    const auto ids = ref["ids"].get<std::vector<int32_t>>();
    const auto starts = ref["starts"].get<std::vector<int64_t>>();
    const auto tokens = ref["tokens"].get<std::vector<std::vector<int32_t>>>();
    const io::NpyArray base = io::npy_read(dir + "/base_logits.npy");
    const io::NpyArray step = io::npy_read(dir + "/step_logits.npy");
    const io::NpyArray hidden = io::npy_read(dir + "/hidden.npy");
    const int64_t B = ref["block_size"].get<int64_t>();
    ASSERT_EQ(starts, (std::vector<int64_t>{12, 15}));
    auto m = model_load(golden(ref["target"].get<std::string>()));
    const int64_t V = m->config().vocab, E = m->config().hidden;
    const float tol = 1e-4f * max_abs(step.data);
    for (Backend* be : {cpu.get(), refb.get()}) {
      const std::string label = std::string(name) + " on " + be->name();
      auto d = make_drafter("dspark:" + dir, *be, *m, 64);
      auto* ds = dynamic_cast<DSparkDrafter*>(d.get());
      ASSERT_TRUE(ds) << label;
      m->set_taps(d->taps());
      auto pool = m->new_kv_pool(*be, 64);
      KvSequence seq;
      std::vector<float> logits(size_t(4 * V));
      const std::span<const int32_t> all(ids);
      for (auto [from, to] : {std::pair<int64_t, int64_t>{0, 5}, {5, 12}}) {
        const auto part = all.subspan(size_t(from), size_t(to - from));
        m->forward(*be, *pool, seq, part, logits.data(), false, nullptr, true);
        d->observe(m->hidden_rows(), part, from, true);
      }
      for (size_t c = 0; c < 2; ++c) {
        if (c == 1) {  // the verification pass: ids[12 … 15], three rows stand
          const auto pass = all.subspan(12, 4);
          m->forward(*be, *pool, seq, pass, logits.data(), true, nullptr, true);
          d->observe(m->hidden_rows(), pass, 12, false);
          pool->truncate(seq, 15);
        }
        const auto got = d->draft(all.first(size_t(starts[c] + 1)), B);
        EXPECT_EQ(got, tokens[c]) << label << " case " << c;
        const auto& blk = ds->last_block();
        EXPECT_LE(max_err(blk.base, base.data, c * size_t(B * V)), tol) << label << " case " << c;
        EXPECT_LE(max_err(blk.step, step.data, c * size_t(B * V)), tol) << label << " case " << c;
        EXPECT_LE(max_err(blk.hidden, hidden.data, c * size_t(B * E)), 1e-4f * max_abs(hidden.data))
            << label << " case " << c;
        if (ref["confidence"].is_null()) {
          for (float v : blk.confidence) EXPECT_EQ(v, 1.0f) << label;
        } else {
          const auto conf = ref["confidence"][c].get<std::vector<float>>();
          ASSERT_EQ(blk.confidence.size(), conf.size());
          for (size_t i = 0; i < conf.size(); ++i)
            EXPECT_NEAR(blk.confidence[i], conf[i], 1e-5f) << label << " case " << c;
        }
        // Fewer tokens asked: the block's first ones.
        const auto one = d->draft(all.first(size_t(starts[c] + 1)), 1);
        EXPECT_EQ(one, std::vector<int32_t>(tokens[c].begin(), tokens[c].begin() + 1)) << label;
      }
      pool->release(seq);
    }
  }
}

// A confidence threshold cuts the proposal before the first slot below it.
TEST(DSpark, AConfidenceThresholdShortensTheProposal) {
  auto be = cpu::make_cpu_backend(2);
  const std::string dir = golden("dspark_qwen3");
  const auto ref = io::json_load_file(dir + "/dspark_reference.json");
  const auto ids = ref["ids"].get<std::vector<int32_t>>();
  const auto conf = ref["confidence"][0].get<std::vector<float>>();
  const auto tokens = ref["tokens"][0].get<std::vector<int32_t>>();
  auto m = model_load(golden("qwen3_untied_f16"));
  const float cut = 0.5f * (conf[0] + conf[1]);  // between slot 0 (0.54) and slot 1 (0.29)
  ASSERT_GT(conf[0], cut);
  ASSERT_LT(conf[1], cut);
  DSparkDrafter d(load_dspark("dspark:" + dir, *m, *be), *be, 64, nullptr, cut);
  m->set_taps(d.taps());
  auto pool = m->new_kv_pool(*be, 64);
  KvSequence seq;
  std::vector<float> logits(size_t(m->config().vocab));
  const std::span<const int32_t> all(ids);
  m->forward(*be, *pool, seq, all.first(12), logits.data(), false, nullptr, true);
  d.observe(m->hidden_rows(), all.first(12), 0, true);
  EXPECT_EQ(d.draft(all.first(13), 4), std::vector<int32_t>{tokens[0]});
  pool->release(seq);
}

// Greedy, and sampled with a seed (the plain loop's own draw decides each row), the output with
// drafts is the output without.
TEST(DSpark, SpeculationGivesThePlainOutput) {
  auto be = cpu::make_cpu_backend(2);
  for (const char* name : kCases) {
    const std::string target =
        io::json_load_file(golden(name) + "/dspark_reference.json")["target"].get<std::string>();
    auto m = model_load(golden(target));
    const auto ids = io::json_load_file(golden(target) + "/reference.json")["input_ids"]
                         .get<std::vector<int32_t>>();
    for (float temp : {0.0f, 0.9f}) {
      GenerateOptions o;
      o.max_new_tokens = 80;
      o.sampling.temperature = temp;
      o.sampling.top_k = 40;
      o.sampling.seed = 3;
      o.ignore_eos = true;
      std::vector<int32_t> plain, spec;
      Generator(*m, *be).generate(ids, o, [&](int32_t t) {
        plain.push_back(t);
        return true;
      });
      ASSERT_EQ(plain.size(), 80u);
      for (int64_t chunk : {0, 7})
        for (int64_t k : {1, 3, 8}) {
          auto d = make_drafter(std::string("dspark:") + golden(name), *be, *m, 256);
          EXPECT_EQ(d->name(), "dspark");
          o.drafter = d.get();
          o.spec_tokens = k;
          o.prefill_chunk = chunk;
          spec.clear();
          const GenerateStats st = Generator(*m, *be).generate(ids, o, [&](int32_t t) {
            spec.push_back(t);
            return true;
          });
          EXPECT_EQ(spec, plain) << name << " k=" << k << " chunk " << chunk << " temp " << temp;
          EXPECT_GT(st.drafted, 0) << name;
        }
    }
  }
}

TEST(DSpark, BadDraftersAreRefusedClearly) {
  auto be = cpu::make_cpu_backend(1);
  auto m = model_load(golden("qwen3_untied_f16"));
  // A drafter made for another target (the default model: 5 layers, hidden 256).
  auto other = model_load("");
  test::expect_error([&] { make_drafter("dspark:" + golden("dspark_qwen3"), *be, *other, 64); },
                     {"dspark_qwen3", "vocab"});
  // Not a DSpark checkpoint; and a DSpark checkpoint is not a model.
  test::expect_error([&] { make_drafter("dspark:" + golden("qwen3_tied"), *be, *m, 64); },
                     {"not a DSpark drafter"});
  test::expect_error([&] { model_load(golden("dspark_qwen3")); }, {"--spec dspark:PATH"});
  test::expect_error([&] { make_drafter("dspark:", *be, *m, 64); }, {"dspark:PATH"});
  test::expect_error([&] { make_drafter("spark:x", *be, *m, 64); }, {"dspark:PATH"});
  // Edited copies of a drafter: each config or tensor problem is named.
  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    test::TempDir dir;
    for (const char* f : {"config.json", "model.safetensors"})
      std::filesystem::copy_file(golden("dspark_qwen3") + "/" + f, dir.path / f);
    auto cfg = io::json_load_file(golden("dspark_qwen3") + "/config.json");
    edit(cfg);
    std::ofstream(dir.path / "config.json") << cfg.dump();
    std::string err;
    try {
      make_drafter("dspark:" + dir.path.string(), *be, *m, 64);
    } catch (const Error& e) {
      err = e.what();
    }
    return err;
  };
  EXPECT_NE(edited([](auto& c) { c["markov_rank"] = 16; }).find("markov_head.markov_w1.weight"),
            std::string::npos);
  EXPECT_NE(edited([](auto& c) { c["markov_head_type"] = "lstm"; }).find("'lstm'"),
            std::string::npos);
  EXPECT_NE(edited([](auto& c) {
              c["target_layer_ids"] = {0, 2};
            }).find("target_layer_ids"),
            std::string::npos);
  EXPECT_NE(edited([](auto& c) { c["num_target_layers"] = 4; }).find("4 layers"),
            std::string::npos);
  EXPECT_NE(edited([](auto& c) { c["mask_token_id"] = 384; }).find("mask_token_id"),
            std::string::npos);
  EXPECT_NE(edited([](auto& c) { c.erase("block_size"); }).find("block_size"), std::string::npos);
  EXPECT_EQ(edited([](auto&) {}), "");  // the unedited copy loads
  // Taps must ascend below the last layer.
  test::expect_error([&] { m->set_taps({0, 2}); }, {"taps must ascend", "[-1, 1]"});
  test::expect_error([&] { m->set_taps({1, 0}); }, {"taps must ascend"});
}

}  // namespace
}  // namespace basalt
