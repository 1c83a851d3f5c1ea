// The transformers-parity check shared by the golden tests (test_golden.cpp, test_scaled.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "io/npy.h"
#include "models/model.h"
#include "ops/ref/qdot.h"
#include "ops/ref/ref_ops.h"

namespace basalt::test {

// `model` against a reference.json (and the logits .npy next to it in `ref_dir`): max |logit −
// ref| ≤ 1e-4 · max |ref| at every position on the CPU backend and the scalar reference backend
// with f32 activations, and the same greedy continuation. A model with GGUF block-quantised
// weights also runs with 8-bit activations (the CPU default, ops/ref/qdot.h): there the bound
// is kQ8Logits · max |ref| (the activations' own rounding; 2.9e-2 measured on
// qwen3_tied.q8_0.gguf, whose random weights make wide activations), for the CPU backend and
// the reference backend (the two differ in the last bits upstream of a quantisation, which can
// move a code by one step, so they are not bitwise equal at model level; ops/test_quants.cpp
// checks the kernels bitwise). Returns the greedy ids basalt produced.
inline constexpr float kQ8Logits = 5e-2f;
inline std::vector<int32_t> expect_matches_reference(Model& model, const nlohmann::json& ref,
                                                     const std::string& ref_dir,
                                                     const std::string& label) {
  const auto ids = ref["input_ids"].get<std::vector<int32_t>>();
  const io::NpyArray want = io::npy_read(
      (std::filesystem::path(ref_dir) / ref["logits_file"].get<std::string>()).string());
  EXPECT_EQ(want.shape[0], int64_t(ids.size())) << label;
  EXPECT_EQ(want.shape[1], model.config().vocab) << label;
  float max_ref = 0.0f;
  for (float v : want.data) max_ref = std::max(max_ref, std::fabs(v));

  bool block_quant = false;
  for (const auto& [name, tv] : model.checkpoint().tensors.all())
    block_quant = block_quant || ref::q8_acts_supported(tv.dtype);
  auto cpu = cpu::make_cpu_backend(2, false);
  auto refb = ref::make_ref_backend();
  auto max_err = [&](const std::vector<float>& got, const std::vector<float>& w) {
    EXPECT_EQ(got.size(), w.size()) << label;
    float e = got.size() == w.size() ? 0.0f : INFINITY;
    for (size_t i = 0; i < got.size() && got.size() == w.size(); ++i)
      e = std::max(e, std::fabs(got[i] - w[i]));
    return e;
  };
  for (Backend* be : {cpu.get(), refb.get()}) {
    Generator gen(model, *be);
    EXPECT_LE(max_err(gen.logits(ids, 0), want.data), 1e-4f * max_ref)
        << label << " on " << be->name();
  }
  if (block_quant) {
    auto cpu8 = cpu::make_cpu_backend(2), ref8 = ref::make_ref_backend(true);
    Generator g8(model, *cpu8), r8(model, *ref8);
    const std::vector<float> got8 = g8.logits(ids, 0);
    const float e8 = max_err(got8, want.data);
    EXPECT_LE(e8, kQ8Logits * max_ref) << label << " on " << cpu8->name();
    EXPECT_LE(max_err(r8.logits(ids, 0), want.data), kQ8Logits * max_ref)
        << label << " on " << ref8->name();
    ::testing::Test::RecordProperty("q8_max_err_over_max_ref", std::to_string(e8 / max_ref));
  }

  const auto prompt = ref["greedy_prompt"].get<std::vector<int32_t>>();
  const auto want_ids = ref["greedy_ids"].get<std::vector<int32_t>>();
  GenerateOptions opt;
  opt.max_new_tokens = int64_t(want_ids.size());
  opt.ignore_eos = true;
  auto greedy = [&](Backend& be) {
    Generator gen(model, be);
    std::vector<int32_t> got;
    gen.generate(prompt, opt, [&](int32_t t) {
      got.push_back(t);
      return true;
    });
    return got;
  };
  const std::vector<int32_t> got_ids = greedy(*cpu);
  EXPECT_EQ(got_ids, want_ids) << label;
  if (block_quant) {
    auto cpu8 = cpu::make_cpu_backend(2);
    EXPECT_EQ(greedy(*cpu8), want_ids) << label << " with 8-bit activations";
  }
  return got_ids;
}

}  // namespace basalt::test
