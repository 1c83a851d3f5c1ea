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

ModelDrafter::ModelDrafter(std::shared_ptr<Model> model, Backend& be, int64_t max_context,
                           std::shared_ptr<KvPool> pool)
    : m_(std::move(model)), be_(be), pool_(std::move(pool)) {
  m_->check_backend(be_);
  if (!pool_) pool_ = m_->new_kv_pool(be_, std::min(max_context, m_->config().max_context));
  if (pool_->has_state() && !pool_->reserve(spare_, 0))
    fail("[spec] the draft model's pool has no second recurrent-state slot");
  logits_.resize(size_t(m_->config().vocab));
}

ModelDrafter::~ModelDrafter() {
  if (pool_) {
    pool_->release(seq_);
    if (spare_.slot >= 0) pool_->release(spare_);
  }
}

std::vector<int32_t> ModelDrafter::draft(std::span<const int32_t> h, int64_t k) {
  const int64_t L = int64_t(h.size());
  if (k <= 0 || L == 0) return {};
  k = std::min(k, int64_t(pool_->n_blocks() * pool_->block_size()) - L);
  if (k <= 0) return {};
  int64_t keep = 0;
  int64_t same = 0;  // the prefix the cache shares with the history
  while (same < seq_.length && same < L && seq_.tokens[size_t(same)] == h[size_t(same)]) ++same;
  if (!pool_->has_state()) {
    // Keep the KV of the shared prefix, less one token: the last token runs again so its
    // logits are at hand.
    keep = std::min(same, L - 1);
    pool_->truncate(seq_, keep);
  } else if (snap_ > 0 && snap_ < L && same >= snap_) {
    // A recurrent state has no per-position history: it goes back to the copy taken after
    // the last call's history (the proposals ran after it), and the text since runs again.
    keep = snap_;
    pool_->truncate(seq_, keep);
    m_->copy_state(be_, *pool_, seq_.slot, spare_.slot);
  } else {  // no usable copy: from the start
    pool_->release(seq_);
    seq_ = KvSequence{};
  }
  int32_t next = -1;
  m_->forward(be_, *pool_, seq_, h.subspan(size_t(keep)), logits_.data(), false, &next);
  if (pool_->has_state()) {
    m_->copy_state(be_, *pool_, spare_.slot, seq_.slot);
    snap_ = L;
  }
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

MtpDrafter::MtpDrafter(std::shared_ptr<Model> head, Backend& be, int64_t max_context,
                       std::shared_ptr<KvPool> pool)
    : head_(std::move(head)), be_(be), pool_(std::move(pool)) {
  if (!head_ || !head_->is_mtp_head()) fail("[spec] mtp: no MTP head given");
  E_ = head_->config().hidden;
  head_->check_backend(be_);
  if (!pool_) pool_ = head_->new_kv_pool(be_, std::min(max_context, head_->config().max_context));
  hidden_ = static_cast<float*>(be_.alloc(size_t(E_) * sizeof(float)));
  logits_.resize(size_t(head_->config().vocab));
}

MtpDrafter::~MtpDrafter() {
  if (pool_) pool_->release(seq_);
  if (staged_) be_.dealloc(staged_);
  if (hidden_) be_.dealloc(hidden_);
}

void MtpDrafter::reserve_rows(int64_t rows) {
  if (rows <= cap_) return;
  const int64_t cap = std::max(rows, 2 * cap_);
  auto* p = static_cast<float*>(be_.alloc(size_t(cap * E_) * sizeof(float)));
  if (n_staged_ > 0) be_.copy(p, staged_, size_t(n_staged_ * E_) * sizeof(float));
  if (staged_) be_.dealloc(staged_);
  staged_ = p, cap_ = cap;
}

void MtpDrafter::restart(int64_t at) {
  pool_->release(seq_);
  seq_ = KvSequence{};
  offset_ = at;
  n_staged_ = 0;
}

void MtpDrafter::observe(const void* hidden, std::span<const int32_t> tokens, int64_t first,
                         bool final) {
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return;
  if (first < offset_) {
    restart(first);
  } else if (first < end()) {  // the target went back: so do the entries
    pool_->truncate(seq_, first - offset_);
    n_staged_ = 0;
  } else if (first <= end() + n_staged_) {
    n_staged_ = first - end();
  } else {  // positions the drafter never saw (a cached prefix): start from here
    restart(first);
  }
  known_.resize(size_t(first), -1);
  known_.insert(known_.end(), tokens.begin(), tokens.end());
  reserve_rows(n_staged_ + n);
  be_.act_to_f32(hidden, staged_ + n_staged_ * E_, n * E_);
  n_staged_ += n;
  if (final) {
    int32_t next;
    catch_up(&next);
  }
}

int64_t MtpDrafter::catch_up(int32_t* next) {
  const int64_t L = end();
  const int64_t m = std::min(n_staged_, int64_t(known_.size()) - 1 - L);
  if (m <= 0) return 0;
  head_->forward_mtp(be_, *pool_, seq_, std::span(known_).subspan(size_t(L + 1), size_t(m)),
                     staged_, logits_.data(), false, next, true);
  // The rows not run yet move to the front (one row at a time: the regions never overlap).
  const size_t row = size_t(E_) * sizeof(float);
  for (int64_t i = 0; i < n_staged_ - m; ++i) be_.copy(staged_ + i * E_, staged_ + (m + i) * E_, row);
  n_staged_ -= m;
  be_.act_to_f32(static_cast<const char*>(head_->hidden_rows()) +
                     size_t(m - 1) * dtype_bytes(be_.act_dtype(), size_t(E_)),
                 hidden_, E_);
  return m;
}

std::vector<int32_t> MtpDrafter::draft(std::span<const int32_t> h, int64_t k) {
  const int64_t N = int64_t(h.size());
  if (k <= 0 || N < 2) return {};
  known_.assign(h.begin(), h.end());
  // The target has run positions < N - 1 (h[N - 1] is the token its next pass starts with):
  // entries and staged rows past that belong to drafts that were not kept.
  if (end() > N - 1) {
    if (N - 1 < offset_) {
      restart(N - 1);
    } else {
      pool_->truncate(seq_, N - 1 - offset_);
      n_staged_ = 0;
    }
  }
  n_staged_ = std::max<int64_t>(0, std::min(n_staged_, N - 1 - end()));
  int32_t next = -1;
  if (catch_up(&next) == 0 || end() != N - 1) return {};
  std::vector<int32_t> d{next};
  while (int64_t(d.size()) < k) {
    const int32_t one[1] = {next};
    head_->forward_mtp(be_, *pool_, seq_, one, hidden_, logits_.data(), false, &next, true);
    be_.act_to_f32(head_->hidden_rows(), hidden_, E_);
    d.push_back(next);
  }
  pool_->truncate(seq_, N - 1 - offset_);
  return d;
}

std::unique_ptr<Model> load_draft_model(const std::string& spec, const Model& target) {
  if (!spec.starts_with("draft:")) fail("[spec] '{}' is not a draft:PATH spec", spec);
  auto m = model_load(spec.substr(6));
  if (m->config().vocab != target.config().vocab)
    fail("[spec] the draft model has {} tokens, the target {}: they must share the tokenizer",
         m->config().vocab, target.config().vocab);
  return m;
}

std::unique_ptr<Model> require_mtp_head(const Model& target) {
  auto head = target.mtp_head();
  if (!head)
    fail("[spec] {} has no MTP head (mtp.* tensors): --spec mtp needs a Qwen3.5 or Qwen3-Next "
         "checkpoint that ships one",
         target.checkpoint().path.empty() ? "the model" : target.checkpoint().path);
  return head;
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec, Backend& be, const Model& target,
                                      int64_t max_context) {
  if (spec == "ngram") return std::make_unique<NgramDrafter>();
  if (spec == "mtp") return std::make_unique<MtpDrafter>(require_mtp_head(target), be, max_context);
  if (spec.starts_with("draft:"))
    return std::make_unique<ModelDrafter>(load_draft_model(spec, target), be, max_context);
  fail("[spec] unknown drafter '{}' (this basalt has: ngram, draft:PATH, mtp)", spec);
}

}  // namespace basalt
