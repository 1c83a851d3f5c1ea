#include "engine/spec_policy.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace basalt {

namespace {
constexpr double kDecay = 0.95;  // about the last 20 passes count
}

double SpecPolicy::acceptance() const {
  // A pass that stops at draft n + 1 is n successes and one failure of a geometric trial;
  // a prior of one success and one failure keeps the first passes from extremes.
  return (acc_ + 1.0) / (acc_ + rej_ + 2.0);
}

double SpecPolicy::pass_s(int64_t T) const {
  const int64_t n = int64_t(pass_.size()) - 1;
  T = std::clamp<int64_t>(T, 1, n);
  double worst = 0.0;  // the cost of the largest smaller pass: a floor
  for (int64_t t = 1; t <= T; ++t) {
    double c = pass_[size_t(t)];
    if (c < 0) {  // not measured: from the neighbours
      int64_t lo = t - 1, hi = t + 1;
      while (lo >= 1 && pass_[size_t(lo)] < 0) --lo;
      while (hi <= n && pass_[size_t(hi)] < 0) ++hi;
      if (lo >= 1 && hi <= n)
        c = pass_[size_t(lo)] +
            (pass_[size_t(hi)] - pass_[size_t(lo)]) * double(t - lo) / double(hi - lo);
      else if (lo >= 1)
        c = pass_[size_t(lo)];
      else if (hi <= n)
        c = pass_[size_t(hi)];
      else
        c = 1.0;  // nothing measured yet: every size the same
    }
    worst = std::max(worst, c);
  }
  return worst;
}

int64_t SpecPolicy::next_k() {
  const int64_t k = best(), n = ++calls_;
  if (n % 8 != 0) return k;
  const int64_t step = (n / 8) % 2 == 0 ? 1 : -1;
  return std::clamp(k + step, int64_t(1), max_k_);
}

int64_t SpecPolicy::best() const {
  const double p = std::min(acceptance(), 0.999);
  int64_t best = 1;
  double best_rate = -1.0;
  double expected = 1.0, pk = 1.0;  // tokens a pass emits: 1 + p + … + p^k
  for (int64_t k = 1; k <= max_k_; ++k) {
    pk *= p;
    expected += pk;
    const double rate = expected / (pass_s(k + 1) + draft_s(k));
    if (rate > best_rate * (1.0 + 1e-9)) best_rate = rate, best = k;
  }
  return best;
}

void SpecPolicy::record(int64_t k, int64_t accepted, double verify_s, double draft_s) {
  if (k < 0) return;
  if (k > 0) {
    acc_ = acc_ * kDecay + double(accepted);
    rej_ = rej_ * kDecay + (accepted < k ? 1.0 : 0.0);
    draft_s_ = draft_s_ * kDecay + draft_s;
    draft_n_ = draft_n_ * kDecay + double(k);
    draft_calls_ = draft_calls_ * kDecay + 1.0;
  }
  double& t = pass_[size_t(std::min(k + 1, int64_t(pass_.size()) - 1))];
  t = t < 0 ? verify_s : 0.8 * t + 0.2 * verify_s;
}

std::string SpecPolicy::describe() const {
  const int64_t k = best();
  return fmt::format(
      "k {}: acceptance {:.2f}, pass of 1 row {:.3f} ms, of {} rows {:.3f} ms, draft {:.3f} "
      "ms/{}",
      k, acceptance(), pass_s(1) * 1e3, k + 1, pass_s(k + 1) * 1e3,
      (per_call_ ? draft_call_s() : draft_token_s()) * 1e3, per_call_ ? "call" : "token");
}

}  // namespace basalt
