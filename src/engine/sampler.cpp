#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace basalt {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

double sample_uniform(uint64_t seed, int64_t position) {
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t r = mix(mix(seed) ^ uint64_t(position));
  return double(r >> 11) * 0x1.0p-53;
}

static void apply_penalties(std::span<float> logits, const SamplingParams& p,
                            std::span<const int32_t> history) {
  if (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f)
    return;
  std::unordered_map<int32_t, int> count;
  for (int32_t t : history)
    if (t >= 0 && size_t(t) < logits.size()) ++count[t];
  for (const auto& [t, n] : count) {
    float& l = logits[size_t(t)];
    if (p.repetition_penalty != 1.0f)
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * float(n);
  }
}

int32_t sample_token(std::span<float> logits, const SamplingParams& p,
                     std::span<const int32_t> history, int64_t position) {
  apply_penalties(logits, p, history);
  if (p.greedy()) return argmax(logits);

  for (float& l : logits) l /= p.temperature;
  // Candidates sorted by logit (descending, ties by id) so every cut below is deterministic.
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  size_t n = idx.size();
  if (p.top_k > 0 && size_t(p.top_k) < n) {
    std::partial_sort(idx.begin(), idx.begin() + p.top_k, idx.end(), by_logit);
    n = size_t(p.top_k);
  } else {
    std::sort(idx.begin(), idx.end(), by_logit);
  }
  // Softmax over the kept candidates, in double.
  const double mx = logits[size_t(idx[0])];
  std::vector<double> prob(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(double(logits[size_t(idx[i])]) - mx);
  for (auto& q : prob) q /= sum;
  if (p.top_p < 1.0f) {  // smallest prefix with mass ≥ top_p (at least one token)
    double acc = 0.0;
    size_t keep = 0;
    while (keep < n) {
      acc += prob[keep++];
      if (acc >= double(p.top_p)) break;
    }
    n = std::max<size_t>(keep, 1);
  }
  if (p.min_p > 0.0f) {  // drop tokens under min_p × the top probability
    const double cut = double(p.min_p) * prob[0];
    size_t keep = 1;
    while (keep < n && prob[keep] >= cut) ++keep;
    n = keep;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += prob[i];
  const double u = sample_uniform(p.seed, position) * total;
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += prob[i];
    if (u < acc) return idx[i];
  }
  return idx[n - 1];
}

}  // namespace basalt
