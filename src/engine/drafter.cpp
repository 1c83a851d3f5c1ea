#include "engine/drafter.h"

#include <algorithm>

#include "core/error.h"

namespace basalt {

std::vector<int32_t> NgramDrafter::draft(std::span<const int32_t> h, int64_t k) {
  const int64_t L = int64_t(h.size());
  if (k <= 0) return {};
  for (int64_t n = std::min(max_n_, L - 1); n >= min_n_; --n) {
    const auto suffix = h.subspan(size_t(L - n));
    // The most recent earlier occurrence: it starts at s < L - n.
    for (int64_t s = L - n - 1; s >= 0; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), h.begin() + s)) continue;
      const int64_t from = s + n, to = std::min(L, from + k);
      return std::vector<int32_t>(h.begin() + from, h.begin() + to);
    }
  }
  return {};
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec) {
  if (spec == "ngram") return std::make_unique<NgramDrafter>();
  fail("[spec] unknown drafter '{}' (this basalt has: ngram)", spec);
}

}  // namespace basalt
