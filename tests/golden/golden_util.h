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
#include "ops/ref/ref_ops.h"

namespace basalt::test {

// `model` against a reference.json (and the logits .npy next to it in `ref_dir`): max |logit −
// ref| ≤ 1e-4 · max |ref| at every position on the CPU backend and the scalar reference backend,
// and the same greedy continuation. Returns the greedy ids basalt produced.
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

  auto cpu = cpu::make_cpu_backend(2);
  auto refb = ref::make_ref_backend();
  for (Backend* be : {cpu.get(), refb.get()}) {
    Generator gen(model, *be);
    const std::vector<float> got = gen.logits(ids, 0);
    EXPECT_EQ(got.size(), want.data.size()) << label;
    if (got.size() != want.data.size()) return {};
    float max_err = 0.0f;
    for (size_t i = 0; i < got.size(); ++i)
      max_err = std::max(max_err, std::fabs(got[i] - want.data[i]));
    EXPECT_LE(max_err, 1e-4f * max_ref) << label << " on " << be->name();
  }

  const auto prompt = ref["greedy_prompt"].get<std::vector<int32_t>>();
  const auto want_ids = ref["greedy_ids"].get<std::vector<int32_t>>();
  Generator gen(model, *cpu);
  GenerateOptions opt;
  opt.max_new_tokens = int64_t(want_ids.size());
  opt.ignore_eos = true;
  std::vector<int32_t> got_ids;
  gen.generate(prompt, opt, [&](int32_t t) {
    got_ids.push_back(t);
    return true;
  });
  EXPECT_EQ(got_ids, want_ids) << label;
  return got_ids;
}

}  // namespace basalt::test
