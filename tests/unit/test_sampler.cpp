// Sampler: each transform against hand-computed expectations, and reproducibility by seed.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/sampler.h"

namespace basalt {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f};
  SamplingParams p;  // temperature 0
  EXPECT_EQ(sample_token(l, p, {}, 0), 1);
  p.temperature = 1.0f;
  p.top_k = 1;
  EXPECT_EQ(sample_token(l, p, {}, 0), 1);
}

TEST(Sampler, RepetitionPenaltyFollowsTransformers) {
  // HF: a seen token's logit is divided by the penalty if positive, multiplied if negative.
  std::vector<float> l = {3.0f, 2.9f, -1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> hist = {0, 2};
  EXPECT_EQ(sample_token(l, p, hist, 0), 1);
  EXPECT_FLOAT_EQ(l[0], 1.5f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  std::vector<float> l = {5.0f, 4.0f, 0.0f};
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int32_t> hist = {0, 0, 0, 1};
  sample_token(l, p, hist, 0);
  EXPECT_FLOAT_EQ(l[0], 5.0f - 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(l[1], 4.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l[2], 0.0f);
}

// Empirical frequencies over many positions match the filtered, renormalised distribution.
std::map<int32_t, double> frequencies(const std::vector<float>& logits, SamplingParams p, int n) {
  std::map<int32_t, double> f;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    f[sample_token(l, p, {}, i)] += 1.0 / n;
  }
  return f;
}

TEST(Sampler, TopKTopPMinPKeepTheRightSets) {
  // probs ∝ exp(logit): 0.5, 0.25, 0.125, 0.0625, 0.0625
  const std::vector<float> logits = {std::log(8.f), std::log(4.f), std::log(2.f), 0.f, 0.f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  const int n = 40000;
  auto f = frequencies(logits, p, n);
  EXPECT_NEAR(f[0], 0.5, 0.02);
  EXPECT_NEAR(f[3] + f[4], 0.125, 0.01);

  p.top_k = 2;  // keeps {0, 1}: 2/3, 1/3
  f = frequencies(logits, p, n);
  EXPECT_NEAR(f[0], 2.0 / 3, 0.02);
  EXPECT_EQ(f.count(2), 0u);

  p.top_k = 0;
  p.top_p = 0.8f;  // 0.5 + 0.25 + 0.125 ≥ 0.8: keeps {0, 1, 2}
  f = frequencies(logits, p, n);
  EXPECT_NEAR(f[0], 0.5 / 0.875, 0.02);
  EXPECT_GT(f[2], 0.1);
  EXPECT_EQ(f.count(3) + f.count(4), 0u);

  p.top_p = 1.0f;
  p.min_p = 0.3f;  // keeps probs ≥ 0.15: {0, 1}
  f = frequencies(logits, p, n);
  EXPECT_NEAR(f[1], 1.0 / 3, 0.02);
  EXPECT_EQ(f.count(2), 0u);
}

TEST(Sampler, TemperatureSharpens) {
  const std::vector<float> logits = {1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.5f;  // p0 = e² / (e² + 1) = 0.8808
  auto f = frequencies(logits, p, 40000);
  EXPECT_NEAR(f[0], 0.8808, 0.01);
}

TEST(Sampler, SeedAndPositionDetermineTheDraw) {
  const std::vector<float> logits(100, 0.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  std::vector<int32_t> a, b, c;
  for (int i = 0; i < 50; ++i) {
    auto l = logits;
    a.push_back(sample_token(l, p, {}, i));
    l = logits;
    b.push_back(sample_token(l, p, {}, i));
  }
  p.seed = 8;
  for (int i = 0; i < 50; ++i) {
    auto l = logits;
    c.push_back(sample_token(l, p, {}, i));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (int i = 0; i < 1000; ++i) {
    const double u = sample_uniform(3, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace basalt
