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
  if (!pool_->has_state()) {
    keep = keep_for(h);
  } else {
    if (snap_ > 0 && snap_ < L && shared_prefix(h) >= snap_) {
      // A recurrent state has no per-position history: it goes back to the copy taken after
      // the last call's history (the proposals ran after it), and the text since runs again.
      keep = snap_;
      pool_->truncate(seq_, keep);
      m_->copy_state(be_, *pool_, seq_.slot, spare_.slot);
    } else {  // no usable copy: from the start
      pool_->release(seq_);
      seq_ = KvSequence{};
    }
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

int64_t ModelDrafter::shared_prefix(std::span<const int32_t> h) const {
  const int64_t L = int64_t(h.size());
  int64_t same = 0;
  while (same < seq_.length && same < L && seq_.tokens[size_t(same)] == h[size_t(same)]) ++same;
  return same;
}

int64_t ModelDrafter::keep_for(std::span<const int32_t> h) {
  const int64_t keep = std::min(shared_prefix(h), int64_t(h.size()) - 1);
  pool_->truncate(seq_, keep);
  return keep;
}

std::vector<std::vector<int32_t>> ModelDrafter::draft_batch(
    std::span<ModelDrafter* const> ds, std::span<const std::span<const int32_t>> hs,
    std::span<const int64_t> ks, std::vector<std::string>* errors) {
  const size_t n = ds.size();
  std::vector<std::vector<int32_t>> out(n);
  if (errors) errors->assign(n, {});
  std::vector<size_t> live;  // the drafters drafting together
  std::vector<int64_t> k(n);  // what each drafts: at most ks[i], as the pool holds
  for (size_t i = 0; i < n; ++i) {
    ModelDrafter& d = *ds[i];
    const int64_t L = int64_t(hs[i].size());
    k[i] = std::min(ks[i], int64_t(d.pool_->n_blocks() * d.pool_->block_size()) - L);
    if (k[i] <= 0 || L == 0) continue;
    const bool together =
        !d.pool_->has_state() &&
        (live.empty() ||
         (d.m_ == ds[live[0]]->m_ && &d.be_ == &ds[live[0]]->be_ && d.pool_ == ds[live[0]]->pool_));
    if (together) {
      live.push_back(i);
      continue;
    }
    try {
      out[i] = d.draft(hs[i], k[i]);
    } catch (const Error& e) {
      if (errors) (*errors)[i] = e.what();
    }
  }
  if (live.empty()) return out;
  ModelDrafter& d0 = *ds[live[0]];
  KvPool& pool = *d0.pool_;
  const int64_t V = d0.m_->config().vocab;
  std::vector<Model::BatchItem> batch;
  std::vector<size_t> who;
  std::vector<int32_t> next;
  std::vector<float> logits;  // (unused: the argmax is taken where the logits are)
  auto run = [&] {
    next.assign(batch.size(), -1);
    logits.resize(batch.size() * size_t(V));
    d0.m_->forward(d0.be_, pool, batch, logits.data(), next.data());
  };
  // The catch-up: each drafter's history past what its cache keeps, in one pass.
  for (size_t i : live) {
    ModelDrafter& d = *ds[i];
    const int64_t keep = d.keep_for(hs[i]);
    const auto rest = hs[i].subspan(size_t(keep));
    if (!pool.reserve(d.seq_, int64_t(rest.size()))) {
      if (errors) (*errors)[i] = "[spec] the draft model's KV pool is full";
      continue;
    }
    batch.push_back({&d.seq_, rest, false});
    who.push_back(i);
  }
  if (batch.empty()) return out;
  run();
  for (size_t j = 0; j < who.size(); ++j) out[who[j]].push_back(next[j]);
  // Each further token: a row per drafter that still drafts.
  std::vector<int32_t> one(who.size());
  for (int64_t step = 1;; ++step) {
    batch.clear();
    std::vector<size_t> still;
    for (size_t j = 0; j < who.size(); ++j) {
      const size_t i = who[j];
      if (step >= k[i] || !pool.reserve(ds[i]->seq_, 1)) continue;
      one[j] = out[i].back();
      batch.push_back({&ds[i]->seq_, std::span(one).subspan(j, 1), false});
      still.push_back(j);
    }
    if (batch.empty()) break;
    run();
    for (size_t r = 0; r < still.size(); ++r) out[who[still[r]]].push_back(next[r]);
  }
  for (size_t i : who) pool.truncate(ds[i]->seq_, int64_t(hs[i].size()));
  return out;
}

HiddenStateDrafter::HiddenStateDrafter(Backend& be, std::shared_ptr<KvPool> pool,
                                       int64_t row_floats, bool act_rows)
    : be_(be), pool_(std::move(pool)), row_(row_floats), act_rows_(act_rows) {}

HiddenStateDrafter::~HiddenStateDrafter() {
  if (pool_) pool_->release(seq_);
  if (staged_) be_.dealloc(staged_);
}

void HiddenStateDrafter::reserve_rows(int64_t rows) {
  if (rows <= cap_) return;
  const int64_t cap = std::max(rows, 2 * cap_);
  auto* p = static_cast<float*>(be_.alloc(size_t(cap * row_) * sizeof(float)));
  if (n_staged_ > 0) be_.copy(p, staged_, size_t(n_staged_ * row_) * sizeof(float));
  if (staged_) be_.dealloc(staged_);
  staged_ = p, cap_ = cap;
}

void HiddenStateDrafter::restart(int64_t at) {
  pool_->release(seq_);
  seq_ = KvSequence{};
  offset_ = at;
  n_staged_ = 0;
}

void HiddenStateDrafter::drop_staged(int64_t m) {
  // The rows not run yet move to the front (one row at a time: the regions never overlap).
  const size_t row = size_t(row_) * sizeof(float);
  for (int64_t i = 0; i < n_staged_ - m; ++i) be_.copy(staged_row(i), staged_row(m + i), row);
  n_staged_ -= m;
}

void HiddenStateDrafter::observe(const void* hidden, std::span<const int32_t> tokens, int64_t first,
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
  if (act_rows_)
    be_.act_to_f32(hidden, staged_row(n_staged_), n * row_);
  else
    be_.copy(staged_row(n_staged_), hidden, size_t(n * row_) * sizeof(float));
  n_staged_ += n;
  if (final) observed_final();
}

void HiddenStateDrafter::rewind(int64_t N) {
  if (end() > N - 1) {
    if (N - 1 < offset_) {
      restart(N - 1);
    } else {
      pool_->truncate(seq_, N - 1 - offset_);
      n_staged_ = 0;
    }
  }
  n_staged_ = std::max<int64_t>(0, std::min(n_staged_, N - 1 - end()));
}

namespace {
std::shared_ptr<KvPool> own_pool(const Model& m, Backend& be, int64_t max_context,
                                 std::shared_ptr<KvPool> pool, int64_t extra = 0) {
  m.check_backend(be);
  return pool ? pool : m.new_kv_pool(be, std::min(max_context, m.config().max_context) + extra);
}
const Model& mtp_checked(const std::shared_ptr<Model>& head) {
  if (!head || !head->is_mtp_head()) fail("[spec] mtp: no MTP head given");
  return *head;
}
}  // namespace

MtpDrafter::MtpDrafter(std::shared_ptr<Model> head, Backend& be, int64_t max_context,
                       std::shared_ptr<KvPool> pool)
    : HiddenStateDrafter(be, own_pool(mtp_checked(head), be, max_context, std::move(pool)),
                         head->config().hidden, true),
      head_(std::move(head)) {
  E_ = head_->config().hidden;
  hidden_ = static_cast<float*>(be_.alloc(size_t(E_) * sizeof(float)));
  logits_.resize(size_t(head_->config().vocab));
}

MtpDrafter::~MtpDrafter() {
  if (hidden_) be_.dealloc(hidden_);
}

int64_t MtpDrafter::catch_up(int32_t* next) {
  const int64_t L = end();
  const int64_t m = std::min(n_staged_, int64_t(known_.size()) - 1 - L);
  if (m <= 0) return 0;
  head_->forward_mtp(be_, *pool_, seq_, std::span(known_).subspan(size_t(L + 1), size_t(m)),
                     staged_, logits_.data(), false, next, true);
  drop_staged(m);
  be_.act_to_f32(static_cast<const char*>(head_->hidden_rows()) +
                     size_t(m - 1) * dtype_bytes(be_.act_dtype(), size_t(E_)),
                 hidden_, E_);
  return m;
}

std::vector<int32_t> MtpDrafter::draft(std::span<const int32_t> h, int64_t k) {
  const int64_t N = int64_t(h.size());
  if (k <= 0 || N < 2) return {};
  known_.assign(h.begin(), h.end());
  rewind(N);
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

DSparkDrafter::DSparkDrafter(std::shared_ptr<const DSparkHead> head, Backend& be,
                             int64_t max_context, std::shared_ptr<KvPool> pool,
                             float min_confidence)
    : HiddenStateDrafter(be,
                         own_pool(*head->backbone, be, max_context, std::move(pool), head->block),
                         int64_t(head->taps.size()) * head->E, false),
      head_(std::move(head)),
      min_conf_(min_confidence) {
  // (load_dspark refuses a backend without non-causal block attention, forward_block too.)
  fc_ = be.prepare_weight(head_->fc);  // (a backend may copy: once, not per draft)
  hidden_norm_ = be.prepare_vector(head_->hidden_norm.data(), head_->E);
  if (!be.host_memory())
    block_hidden_ = static_cast<float*>(be.alloc(size_t(head_->block * head_->E) * sizeof(float)));
}

DSparkDrafter::~DSparkDrafter() {
  for (void* p : {ctx_, static_cast<void*>(proj_), taps_act_, static_cast<void*>(block_hidden_)})
    if (p) be_.dealloc(p);
}

std::vector<int64_t> DSparkDrafter::taps() const {
  return head_->taps;
}

std::vector<int32_t> DSparkDrafter::draft(std::span<const int32_t> h, int64_t k) {
  const DSparkHead& d = *head_;
  const int64_t N = int64_t(h.size()), E = d.E, V = d.V, B = d.block;
  if (k <= 0 || N < 2) return {};
  known_.assign(h.begin(), h.end());
  rewind(N);
  // Context entries for the positions before the anchor h[N - 1], from the staged rows.
  const int64_t m = N - 1 - end();
  if (m > n_staged_) return {};  // rows the drafter was not shown
  if (m > 0) {
    const DType act = be_.act_dtype();
    if (m > ctx_cap_) {
      for (void* p : {ctx_, static_cast<void*>(proj_), taps_act_})
        if (p) be_.dealloc(p);
      taps_act_ = nullptr;
      ctx_cap_ = std::max(m, 2 * ctx_cap_);
      ctx_ = be_.alloc(dtype_bytes(act, size_t(ctx_cap_ * E)));
      proj_ = static_cast<float*>(be_.alloc(size_t(ctx_cap_ * E) * sizeof(float)));
      if (act != DType::F32) taps_act_ = be_.alloc(dtype_bytes(act, size_t(ctx_cap_ * row_)));
    }
    // The taps are f32 rows of the target's residual stream; the projection reads them in the
    // backend's activation type (bf16 on CUDA, as a bf16 checkpoint's hidden states are).
    if (taps_act_) be_.f32_to_act(staged_, taps_act_, m * row_);
    be_.matmul(taps_act_ ? taps_act_ : static_cast<const void*>(staged_), m, fc_, proj_);
    be_.rmsnorm(proj_, hidden_norm_, ctx_, m, E, d.backbone->config().rms_eps);
    d.backbone->forward_context(be_, *pool_, seq_, std::span(h).subspan(size_t(end()), size_t(m)),
                                ctx_);
    drop_staged(m);
  }
  // The block: the last token and B - 1 masks, at positions N - 1 … N + B - 2.
  std::vector<int32_t> in(size_t(B), d.mask_id);
  in[0] = h[size_t(N - 1)];
  block_.base.resize(size_t(B * V));
  block_.step.resize(size_t(B * V));
  block_.hidden.resize(size_t(B * E));
  block_.confidence.resize(size_t(B));
  block_.tokens.resize(size_t(B));
  d.backbone->forward_block(be_, *pool_, seq_, in, block_.base.data());
  if (be_.host_memory()) {
    be_.act_to_f32(d.backbone->hidden_rows(), block_.hidden.data(), B * E);
  } else {  // the Markov head runs on the host: the block's final hidden rows come over
    be_.act_to_f32(d.backbone->hidden_rows(), block_hidden_, B * E);
    be_.download(block_.hidden.data(), block_hidden_, size_t(B * E) * sizeof(float));
  }
  pool_->truncate(seq_, N - 1 - offset_);
  d.chain(block_.base.data(), block_.hidden.data(), in[0], B, block_.tokens.data(),
          block_.step.data(), block_.confidence.data());
  int64_t n = std::min(k, B);
  for (int64_t i = 0; i < n; ++i)
    if (block_.confidence[size_t(i)] < min_conf_) n = i;
  return std::vector<int32_t>(block_.tokens.begin(), block_.tokens.begin() + n);
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

std::shared_ptr<DSparkHead> load_dspark(const std::string& spec, const Model& target,
                                        const Backend& be) {
  if (!spec.starts_with("dspark:") || spec.size() == 7)
    fail("[spec] '{}' is not a dspark:PATH spec", spec);
  if (!be.supports_block_attention())
    fail(
        "[spec] dspark: the {} backend has no non-causal block attention (DSpark drafts on the "
        "CPU and CUDA backends)",
        be.name());
  return dspark_load(spec.substr(7), target);
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec, Backend& be, const Model& target,
                                      int64_t max_context, float min_confidence) {
  if (spec == "ngram") return std::make_unique<NgramDrafter>();
  if (spec == "mtp") return std::make_unique<MtpDrafter>(require_mtp_head(target), be, max_context);
  if (spec.starts_with("draft:"))
    return std::make_unique<ModelDrafter>(load_draft_model(spec, target), be, max_context);
  if (spec.starts_with("dspark:"))
    return std::make_unique<DSparkDrafter>(load_dspark(spec, target, be), be, max_context, nullptr,
                                           min_confidence);
  fail("[spec] unknown drafter '{}' (this basalt has: ngram, draft:PATH, mtp, dspark:PATH)", spec);
}

}  // namespace basalt
