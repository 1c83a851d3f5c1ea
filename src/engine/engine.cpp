#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/log.h"

namespace basalt {

namespace {

// log-softmax of `id` and the k best alternatives, from raw logits (before penalties).
void fill_logprobs(std::span<const float> logits, int32_t id, int k, TokenEvent& ev) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l - mx));
  const double lse = double(mx) + std::log(sum);
  ev.logprob = float(double(logits[size_t(id)]) - lse);
  if (k <= 0) return;
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i);
  k = std::min<int>(k, int(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (int i = 0; i < k; ++i)
    ev.top.emplace_back(idx[size_t(i)], float(double(logits[size_t(idx[size_t(i)])]) - lse));
}

}  // namespace

Engine::Engine(Model& model, Backend& backend, EngineConfig cfg)
    : model_(model), be_(backend), cfg_(cfg) {
  model_.check_backend(be_);
  model_.bind(be_);  // weights resident before the first request, not during it
  max_context_ = cfg_.max_context > 0 ? std::min(cfg_.max_context, model_.config().max_context)
                                      : model_.config().max_context;
  cfg_.max_batch = std::max(cfg_.max_batch, 1);
  cfg_.step_tokens = std::max<int64_t>(cfg_.step_tokens, cfg_.max_batch);
  const int64_t kv_tokens =
      cfg_.kv_tokens > 0 ? cfg_.kv_tokens : max_context_ * int64_t(cfg_.max_batch);
  if (kv_tokens < max_context_)
    fail("[engine] a KV pool of {} positions cannot hold one full context of {}", kv_tokens,
         max_context_);
  if (!cfg_.spec.empty() && cfg_.spec != "ngram" && cfg_.spec != "mtp" &&
      !cfg_.spec.starts_with("draft:") && !cfg_.spec.starts_with("dspark:"))
    fail(
        "[engine] unknown drafter '{}' for serving (this basalt serves with: ngram, draft:PATH, "
        "mtp, dspark:PATH)",
        cfg_.spec);
  // Hybrid models verifying k drafts keep the recurrent state after each of the pass's first k
  // rows in slots of their own (rollback points): up to spec_tokens more live slots a sequence
  // (a sequence drafts no more than the free slots allow), the same snapshot slots.
  const bool hybrid = model_.config().n_attention_layers() < model_.config().n_layers;
  const int64_t live = cfg_.max_batch * (hybrid && !cfg_.spec.empty() ? 1 + cfg_.spec_tokens : 1);
  pool_ = model_.new_kv_pool(be_, kv_tokens, cfg_.block_size, live, 2 * int64_t(cfg_.max_batch));
  stats_.kv_blocks_total = pool_->n_blocks();
  if (cfg_.spec == "ngram") drafter_ = std::make_unique<NgramDrafter>();
  if (cfg_.spec.starts_with("draft:") || cfg_.spec == "mtp" ||
      cfg_.spec.starts_with("dspark:")) {  // a drafter per sequence, their KV in one pool
    mtp_ = cfg_.spec == "mtp";
    if (cfg_.spec.starts_with("dspark:")) {
      dspark_ = load_dspark(cfg_.spec, model_, be_);
      draft_model_ = dspark_->backbone;
      model_.set_taps(dspark_->taps);  // the target's passes keep what the drafters read
    } else {
      draft_model_ = mtp_ ? require_mtp_head(model_) : load_draft_model(cfg_.spec, model_);
    }
    hidden_drafters_ = mtp_ || dspark_;
    draft_model_->check_backend(be_);
    // (A DSpark block runs past the context by up to its size.)
    const int64_t ctx =
        std::min(max_context_, draft_model_->config().max_context) + (dspark_ ? dspark_->block : 0);
    draft_pool_ = draft_model_->new_kv_pool(be_, ctx * cfg_.max_batch, cfg_.block_size,
                                            2 * cfg_.max_batch, 0);
  }
  spdlog::info("engine: {} sequences, context {}, KV pool {} blocks × {} ({:.1f} MiB)",
               cfg_.max_batch, max_context_, pool_->n_blocks(), pool_->block_size(),
               double(pool_->bytes()) / (1 << 20));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& s : running_) finish(*s, "cancelled");
  for (auto& s : queue_) finish(*s, "cancelled");
}

uint64_t Engine::submit(EngineRequest req, Callback cb) {
  if (req.prompt.empty()) fail("[engine] the prompt is empty");
  if (int64_t(req.prompt.size()) >= max_context_)
    fail("[engine] the prompt has {} tokens; the context holds {}", req.prompt.size(),
         max_context_);
  for (int32_t t : req.prompt)
    if (t < 0 || t >= model_.config().vocab)
      fail("[engine] token id {} out of range [0, {})", t, model_.config().vocab);
  auto s = std::make_unique<Seq>();
  s->history = req.prompt;
  s->req = std::move(req);
  s->cb = std::move(cb);
  std::lock_guard<std::mutex> lk(mu_);
  s->id = next_id_++;
  const uint64_t id = s->id;
  queue_.push_back(std::move(s));
  ++stats_.requests_total;
  stats_.queued = int64_t(queue_.size());
  cv_.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  cancelled_[id] = true;
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Engine::reset_counters() {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats z;
  z.queued = stats_.queued, z.running = stats_.running;
  z.kv_blocks_used = stats_.kv_blocks_used, z.kv_blocks_total = stats_.kv_blocks_total;
  stats_ = z;
}

std::vector<int32_t> Engine::run(EngineRequest req) {
  std::mutex m;
  std::condition_variable done_cv;
  bool done = false;
  std::vector<int32_t> out;
  std::string error;
  submit(std::move(req), [&](const TokenEvent& e) {
    std::lock_guard<std::mutex> lk(m);
    if (e.token >= 0) out.push_back(e.token);
    if (e.finished) {
      if (e.finish_reason == "error" || e.finish_reason == "cancelled")
        error = e.error.empty() ? e.finish_reason : e.error;
      done = true;
      done_cv.notify_all();
    }
  });
  std::unique_lock<std::mutex> lk(m);
  done_cv.wait(lk, [&] { return done; });
  if (!error.empty()) fail("[engine] request failed: {}", error);
  return out;
}

// A sequence's own drafter starts with its first pass (an MTP drafter reads every pass).
void Engine::ensure_drafter(Seq& s) {
  if (!draft_model_ || s.drafter) return;
  try {
    if (mtp_)
      s.drafter = std::make_unique<MtpDrafter>(draft_model_, be_, max_context_, draft_pool_);
    else if (dspark_)
      s.drafter = std::make_unique<DSparkDrafter>(dspark_, be_, max_context_, draft_pool_,
                                                  cfg_.spec_min_confidence);
    else
      s.drafter = std::make_unique<ModelDrafter>(draft_model_, be_, max_context_, draft_pool_);
  } catch (const Error& e) {
    spdlog::debug("engine: request {}: no drafter ({})", s.id, e.what());
  }
}

// A decoding sequence without forced output (hybrid: with a slot free for a rollback point and
// no prefix-cache state pending).
bool Engine::may_draft(const Seq& s) const {
  return int64_t(s.history.size()) - s.kv.length == 1 && s.req.forced_output.empty() &&
         (!pool_->has_state() || (s.kv.restore < 0 && pool_->slots_available() > 0));
}

// The drafts a sequence may verify: no more than it wants, its step budget (its token
// included), the tokens it may still emit, its context and (hybrid) the free slots allow.
int64_t Engine::draft_limit(const Seq& s, int64_t want, int64_t budget) const {
  return std::min({want, budget - 1, s.req.max_new_tokens - s.generated - 1,
                   max_context_ - int64_t(s.history.size()) - 1,
                   pool_->has_state() ? pool_->slots_available() : want});
}

int64_t Engine::wanted_drafts(Seq& s, const Drafter& dr) {
  if (!cfg_.spec_adaptive) return cfg_.spec_tokens;
  if (!s.policy)
    s.policy = std::make_unique<SpecPolicy>(std::min(cfg_.spec_tokens, dr.max_draft()),
                                            !dr.cost_grows_with_k());
  return s.policy->next_k();
}

// Draft-model drafters of decoding sequences draft together before the batch is assembled
// (ModelDrafter::draft_batch: one pass of the draft model a token for all of them, rather than
// one a token for each); each sequence then takes the first k of its drafts that this step's
// budget allows, which are the k it would get alone (greedy drafts).
void Engine::draft_together() {
  for (auto& p : running_) p->ahead = false;
  if (!draft_model_ || mtp_ || dspark_ || draft_pool_->has_state()) return;
  std::vector<ModelDrafter*> ds;
  std::vector<std::span<const int32_t>> hs;
  std::vector<int64_t> ks;
  std::vector<Seq*> who;
  for (auto& p : running_) {
    Seq& s = *p;
    if (!may_draft(s)) continue;
    ensure_drafter(s);
    auto* md = dynamic_cast<ModelDrafter*>(s.drafter.get());
    if (!md) continue;
    s.want = wanted_drafts(s, *md);
    const int64_t k = draft_limit(s, s.want, cfg_.step_tokens);
    if (k <= 0) continue;
    ds.push_back(md), hs.push_back(s.history), ks.push_back(k), who.push_back(&s);
  }
  if (ds.empty()) return;
  std::vector<std::string> errors;
  const auto t0 = std::chrono::steady_clock::now();
  auto out = ModelDrafter::draft_batch(ds, hs, ks, &errors);
  const double each = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      double(ds.size());
  for (size_t i = 0; i < who.size(); ++i) {
    Seq& s = *who[i];
    s.ahead = true;
    s.ahead_tokens = std::move(out[i]);
    s.ahead_s = each;
    if (!errors[i].empty()) {  // (e.g. the drafters' pool is full): no drafts this time
      spdlog::debug("engine: request {}: no drafts ({})", s.id, errors[i]);
      s.drafter.reset();
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.spec_draft_batches;
  stats_.spec_draft_batch_rows += int64_t(ds.size());
}

void Engine::release_points(Seq& s) {
  for (KvSequence& q : s.points)
    if (q.slot >= 0) pool_->release(q);
  s.points.clear();
}

void Engine::finish(Seq& s, const std::string& reason, const std::string& error) {
  // Everything of the request goes before its final event (its drafter frees backend memory):
  // whoever waits for that event may use the backend at once.
  s.drafter.reset();
  release_points(s);
  pool_->release(s.kv);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.kv_blocks_used = pool_->blocks_used();
  }
  TokenEvent ev;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
  ev.prompt_tokens = int64_t(s.req.prompt.size());
  ev.completion_tokens = s.generated;
  ev.cached_prompt_tokens = s.cached;
  s.cb(ev);
}

// Moves waiting requests into the running set, attaching cached prefix blocks.
void Engine::admit() {
  std::lock_guard<std::mutex> lk(mu_);
  while (!queue_.empty() && int(running_.size()) < cfg_.max_batch) {
    std::unique_ptr<Seq> s = std::move(queue_.front());
    queue_.pop_front();
    if (cancelled_.erase(s->id)) {
      finish(*s, "cancelled");
      continue;
    }
    // At least the last known token is recomputed: its logits pick the next token.
    const int64_t hit = pool_->attach_prefix(s->kv, s->history, int64_t(s->history.size()) - 1);
    if (!s->prompt_counted) {
      s->cached = std::min<int64_t>(hit, int64_t(s->req.prompt.size()));
      stats_.prefix_cache_hit_tokens += s->cached;
      stats_.prompt_tokens_total += int64_t(s->req.prompt.size());
      s->prompt_counted = true;
    }
    running_.push_back(std::move(s));
  }
  stats_.queued = int64_t(queue_.size());
}

// Recompute-style preemption: the youngest running sequence gives back its blocks and waits
// at the head of the queue; its tokens so far are kept, so it resumes where it stopped.
void Engine::preempt_youngest() {
  std::unique_ptr<Seq> s = std::move(running_.back());
  running_.pop_back();
  pool_->release(s->kv);
  s->drafter.reset();  // its KV leaves the drafters' pool; a new one starts when it runs again
  spdlog::debug("engine: preempted request {} ({} tokens)", s->id, s->history.size());
  std::lock_guard<std::mutex> lk(mu_);
  queue_.push_front(std::move(s));
  ++stats_.preemptions;
}

bool Engine::step() {
  admit();
  // Cancelled requests leave before the pass.
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (size_t i = 0; i < running_.size();) {
      if (cancelled_.erase(running_[i]->id) || stop_) {
        lk.unlock();
        finish(*running_[i], "cancelled");
        lk.lock();
        running_.erase(running_.begin() + long(i));
      } else {
        ++i;
      }
    }
  }
  if (running_.empty()) {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.running = 0;
    return false;
  }

  draft_together();
  // Each running sequence feeds its unfed tokens: a prefill chunk or one decode token.
  std::vector<Model::BatchItem> batch;
  std::vector<Seq*> in_batch;
  std::vector<int64_t> first_pos;  // each item's first position
  int64_t budget = cfg_.step_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Seq& s = *running_[i];
    const int64_t unfed = int64_t(s.history.size()) - s.kv.length;
    int64_t n = std::min(unfed, budget);
    if (pool_->has_state() && n > 1) {         // end prefill chunks on a block boundary when one is
      const int64_t bs = pool_->block_size();  // crossed: the state there is kept for reuse
      const int64_t last = (s.kv.length + n) / bs * bs;
      if (last > s.kv.length && last < s.kv.length + n) n = last - s.kv.length;
    }
    ensure_drafter(s);
    // A decoding sequence may verify drafts in the same pass.
    s.spec_in.clear();
    s.spec_asked = false;
    Drafter* dr = drafter_ ? drafter_.get() : s.drafter.get();
    if (dr && may_draft(s)) {
      const int64_t want = s.ahead ? s.want : wanted_drafts(s, *dr);
      const int64_t k = draft_limit(s, want, budget);
      if (k > 0) {
        std::vector<int32_t> d;
        const auto td = std::chrono::steady_clock::now();
        if (s.ahead) {  // drafted with the others (the first k of them: what k alone gives)
          d = std::move(s.ahead_tokens);
        } else {
          try {
            d = dr->draft(s.history, k);
          } catch (const Error& e) {  // (e.g. the drafters' pool is full): no drafts this time
            spdlog::debug("engine: request {}: no drafts ({})", s.id, e.what());
            s.drafter.reset();
            d.clear();
          }
        }
        s.draft_s =
            s.ahead ? s.ahead_s
                    : std::chrono::duration<double>(std::chrono::steady_clock::now() - td).count();
        s.spec_asked = s.policy != nullptr;
        {
          std::lock_guard<std::mutex> lk(mu_);
          stats_.spec_draft_seconds += s.draft_s;
          if (s.policy) {
            ++stats_.spec_adaptive_passes;
            stats_.spec_adaptive_k_total += k;
          }
        }
        if (int64_t(d.size()) > k) d.resize(size_t(k));
        if (!d.empty()) {
          s.spec_in.push_back(s.history.back());
          s.spec_in.insert(s.spec_in.end(), d.begin(), d.end());
          n = int64_t(s.spec_in.size());
        }
      }
    }
    if (!s.spec_in.empty() && !pool_->reserve(s.kv, n)) {  // no room for drafts: plain decode
      s.spec_in.clear();
      n = 1;
    }
    if (s.spec_in.empty() && !pool_->reserve(s.kv, n)) {
      if (running_.size() == 1)
        fail("[engine] the KV pool ({} blocks) cannot hold request {}", pool_->n_blocks(), s.id);
      preempt_youngest();  // may be s itself: then the loop ends at the new size
      continue;
    }
    s.snaps.clear();
    if (!s.spec_in.empty() && pool_->has_state()) {  // rows 0 … k-1: a rollback point each
      s.points.resize(s.spec_in.size() - 1);
      for (KvSequence& q : s.points) {
        if (!pool_->reserve(q, 0)) fail("[engine] no recurrent-state slot for a rollback point");
        s.snaps.push_back(q.slot);
      }
      s.snaps.push_back(-1);
    }
    if (!s.spec_in.empty())
      batch.push_back({&s.kv, std::span(s.spec_in), true, s.snaps});
    else
      batch.push_back({&s.kv, std::span(s.history).subspan(size_t(s.kv.length), size_t(n)), false});
    in_batch.push_back(&s);
    first_pos.push_back(s.kv.length);
    budget -= n;
    ++i;
  }
  if (batch.empty()) return true;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = model_.config().vocab;
  // Logits rows: one per item, or all of a verifying item's.
  std::vector<size_t> row0(batch.size());
  size_t rows = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    row0[b] = rows;
    rows += batch[b].all_logits ? batch[b].tokens.size() : 1;
  }
  logits_.resize(rows * size_t(V));
  // When every sequence that picks a token now decodes greedily (no penalties, no log-probs),
  // the argmax is taken where the logits are and only the ids come back.
  auto plain_greedy = [](const EngineRequest& r) {
    const SamplingParams& p = r.sampling;
    return p.greedy() && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
           p.frequency_penalty == 0.0f && !r.logprobs && r.top_logprobs == 0 &&
           r.forced_output.empty();
  };
  bool ids_only = true;
  for (size_t b = 0; b < in_batch.size(); ++b) {
    const Seq& s = *in_batch[b];
    const bool picks = !s.spec_in.empty() ||
                       s.kv.length + int64_t(batch[b].tokens.size()) >= int64_t(s.history.size());
    if (picks && !plain_greedy(s.req)) ids_only = false;
  }
  argmax_.resize(rows);
  bool keep_hidden = false;  // an MTP / DSpark drafter reads the hidden rows of its rows
  for (const Seq* s : in_batch)
    keep_hidden = keep_hidden || (s->drafter && s->drafter->wants_hidden());
  model_.forward(be_, *pool_, batch, logits_.data(), ids_only ? argmax_.data() : nullptr,
                 keep_hidden);
  // Shows each MTP drafter its rows of the pass just run (`final`: tokens of the text, not
  // drafts); a drafter that fails is dropped (the sequence goes on without drafts).
  auto observe = [&](std::span<const Model::BatchItem> items, std::span<Seq* const> seqs,
                     std::span<const int64_t> firsts, bool verifying) {
    const size_t row_bytes = model_.hidden_row_bytes(be_);
    size_t row = 0;
    for (size_t b = 0; b < items.size(); ++b) {
      Seq& s = *seqs[b];
      if (s.drafter && s.drafter->wants_hidden()) {
        try {
          s.drafter->observe(static_cast<const char*>(model_.hidden_rows()) + row * row_bytes,
                             items[b].tokens, firsts[b], !verifying && s.spec_in.empty());
        } catch (const Error& e) {
          spdlog::debug("engine: request {}: MTP drafter dropped ({})", s.id, e.what());
          s.drafter.reset();
        }
      }
      row += items[b].tokens.size();
    }
  };
  if (keep_hidden) observe(batch, in_batch, first_pos, false);
  const auto t1 = std::chrono::steady_clock::now();

  // Sequences whose tokens are all fed now pick their next token. A verifying sequence picks
  // one from each row in turn, exactly as it would after each of those tokens; a draft stands
  // while it is the token picked (docs/speculative.md), and the KV of the rest is dropped.
  const ModelConfig& c = model_.config();
  std::vector<Seq*> done;
  // Picks and emits the token of logits row `row`; false when the sequence finished.
  auto pick = [&](Seq& s, size_t row, int32_t& tok) {
    const std::span<const float> raw(logits_.data() + row * size_t(V), size_t(V));
    const EngineRequest& r = s.req;
    if (s.generated >= r.max_new_tokens) {
      finish(s, "length");
      return false;
    }
    if (!r.forced_output.empty()) {
      if (size_t(s.generated) >= r.forced_output.size()) {
        finish(s, "stop");
        return false;
      }
      tok = r.forced_output[size_t(s.generated)];
    } else {
      const SamplingParams& sp = r.sampling;
      if (ids_only) {
        tok = argmax_[row];  // computed with the logits (plain greedy: the same choice)
      } else if (sp.greedy() && sp.repetition_penalty == 1.0f && sp.presence_penalty == 0.0f &&
                 sp.frequency_penalty == 0.0f) {
        tok = argmax(raw);  // the same choice as sample_token, without copying V logits
      } else {
        std::vector<float> work(raw.begin(), raw.end());
        tok = sample_token(work, sp, s.history, int64_t(s.history.size()));
      }
    }
    const bool eos =
        !r.ignore_eos && std::find(c.eos_ids.begin(), c.eos_ids.end(), tok) != c.eos_ids.end();
    if (eos || std::find(r.stop_ids.begin(), r.stop_ids.end(), tok) != r.stop_ids.end()) {
      finish(s, "stop");
      return false;
    }
    TokenEvent ev;
    ev.token = tok;
    if (r.logprobs || r.top_logprobs > 0) fill_logprobs(raw, tok, r.top_logprobs, ev);
    s.history.push_back(tok);
    ++s.generated;
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.completion_tokens_total;
    }
    s.cb(ev);
    if (s.generated >= r.max_new_tokens || int64_t(s.history.size()) >= max_context_) {
      finish(s, "length");
      return false;
    }
    return true;
  };
  const double pass_s = std::chrono::duration<double>(t1 - t0).count();
  std::vector<std::pair<Seq*, std::pair<int64_t, int64_t>>> spec_records;  // (k, accepted)
  for (size_t b = 0; b < in_batch.size(); ++b) {
    Seq& s = *in_batch[b];
    if (s.spec_in.empty()) {
      if (s.kv.length < int64_t(s.history.size())) continue;  // mid-prefill
      if (s.spec_asked) spec_records.push_back({&s, {0, 0}});  // asked, nothing drafted
      int32_t tok;
      if (!pick(s, row0[b], tok)) done.push_back(&s);
      continue;
    }
    const size_t nd = s.spec_in.size() - 1;
    size_t n = 0;
    bool alive = true;
    for (;;) {
      int32_t tok;
      if (!pick(s, row0[b] + n, tok)) {
        alive = false;
        break;
      }
      if (n < nd && tok == s.spec_in[n + 1]) {
        ++n;  // the draft stands: its KV is already written
        continue;
      }
      break;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.spec_verifications;
      stats_.spec_drafted += int64_t(nd);
      stats_.spec_accepted += int64_t(n);
    }
    if (s.policy) spec_records.push_back({&s, {int64_t(nd), int64_t(n)}});
    if (!alive) {
      done.push_back(&s);
      continue;
    }
    pool_->truncate(s.kv, s.kv.length - int64_t(nd - n));
    // A recurrent state cannot drop rows: the state after row n (the last kept token) is in
    // its rollback point, which leaves state and KV as if the drafts never ran.
    if (n < nd && !s.points.empty())
      model_.roll_back_state(be_, *pool_, s.kv, s.points[n].slot, int64_t(n + 1));
  }
  // (A sequence that finished this step is still alive here: erased below.)
  for (const auto& [sp, ka] : spec_records)
    sp->policy->record(ka.first, ka.second, pass_s, sp->draft_s);
  for (Seq* s : in_batch) release_points(*s);
  std::erase_if(running_, [&](const std::unique_ptr<Seq>& p) {
    return std::find(done.begin(), done.end(), p.get()) != done.end();
  });
  std::lock_guard<std::mutex> lk(mu_);
  stats_.running = int64_t(running_.size());
  stats_.kv_blocks_used = pool_->blocks_used();
  ++stats_.steps;
  stats_.forward_seconds += std::chrono::duration<double>(t1 - t0).count();
  stats_.step_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return true;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !running_.empty(); });
      if (stop_) return;
    }
    try {
      step();
    } catch (const std::exception& e) {
      spdlog::error("engine step failed: {}", e.what());
      for (auto& s : running_) finish(*s, "error", e.what());
      running_.clear();
    }
  }
}

}  // namespace basalt
