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

ModelDrafter::ModelDrafter(std::unique_ptr<Model> model, Backend& be, int64_t max_context)
    : m_(std::move(model)), be_(be) {
  m_->check_backend(be_);
  pool_ = m_->new_kv_pool(be_, std::min(max_context, m_->config().max_context));
  if (pool_->has_state())
    fail("[spec] a draft model with recurrent state ({}) is not supported yet",
         m_->config().hf_class);
  logits_.resize(size_t(m_->config().vocab));
}

ModelDrafter::~ModelDrafter() {
  if (pool_) pool_->release(seq_);
}

std::vector<int32_t> ModelDrafter::draft(std::span<const int32_t> h, int64_t k) {
  const int64_t L = int64_t(h.size());
  if (k <= 0 || L == 0) return {};
  k = std::min(k, int64_t(pool_->n_blocks() * pool_->block_size()) - L);
  if (k <= 0) return {};
  // Keep the KV of the longest prefix it shares with the history, less one token: the last
  // token runs again so its logits are at hand.
  int64_t keep = 0;
  while (keep < seq_.length && keep < L - 1 && seq_.tokens[size_t(keep)] == h[size_t(keep)]) ++keep;
  pool_->truncate(seq_, keep);
  int32_t next = -1;
  m_->forward(be_, *pool_, seq_, h.subspan(size_t(keep)), logits_.data(), false, &next);
  std::vector<int32_t> d;
  for (int64_t i = 0; i < k; ++i) {
    d.push_back(next);
    if (i + 1 < k) {
      const int32_t one[1] = {next};
      m_->forward(be_, *pool_, seq_, one, logits_.data(), false, &next);
    }
  }
  pool_->truncate(seq_, L);  // its proposals' KV: the next call's history decides
  return d;
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec, Backend& be, const Model& target,
                                      int64_t max_context) {
  if (spec == "ngram") return std::make_unique<NgramDrafter>();
  if (spec.starts_with("draft:")) {
    auto m = model_load(spec.substr(6));
    if (m->config().vocab != target.config().vocab)
      fail("[spec] the draft model has {} tokens, the target {}: they must share the tokenizer",
           m->config().vocab, target.config().vocab);
    return std::make_unique<ModelDrafter>(std::move(m), be, max_context);
  }
  fail("[spec] unknown drafter '{}' (this basalt has: ngram, draft:PATH)", spec);
}

}  // namespace basalt
