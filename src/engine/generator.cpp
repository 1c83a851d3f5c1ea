#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/spec_policy.h"

namespace basalt {

namespace {
double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void Generator::prefill(std::span<const int32_t> tokens, int64_t chunk, KvPool& pool,
                        KvSequence& seq, std::vector<float>& last_logits, Drafter* drafter) {
  const int64_t T = int64_t(tokens.size());
  if (chunk <= 0) chunk = T;
  last_logits.resize(size_t(model_.config().vocab));
  const bool hidden = drafter && drafter->wants_hidden();
  if (hidden) model_.set_taps(drafter->taps());
  for (int64_t i = 0; i < T; i += chunk) {
    const int64_t n = std::min(chunk, T - i);
    const auto part = tokens.subspan(size_t(i), size_t(n));
    model_.forward(be_, pool, seq, part, last_logits.data(), false, nullptr, hidden);
    if (hidden) drafter->observe(model_.hidden_rows(), part, i, true);
  }
}

GenerateStats Generator::generate(std::span<const int32_t> prompt, const GenerateOptions& opt,
                                  const std::function<bool(int32_t)>& on_token) {
  const ModelConfig& c = model_.config();
  GenerateStats st;
  st.prompt_tokens = int64_t(prompt.size());
  if (prompt.empty()) fail("[generate] the prompt is empty (and the model has no BOS token)");
  const int64_t ctx =
      opt.max_context > 0 ? std::min(opt.max_context, c.max_context) : c.max_context;
  if (st.prompt_tokens >= ctx)
    fail("[generate] the prompt has {} tokens; the context holds {}", st.prompt_tokens, ctx);
  const int64_t capacity =
      std::min(ctx, st.prompt_tokens + std::max<int64_t>(opt.max_new_tokens, 0));
  // Speculating on a hybrid model takes a recurrent-state slot per draft (rollback points).
  const int64_t max_draft =
      opt.drafter ? std::min(opt.spec_tokens, opt.drafter->max_draft()) : int64_t(0);
  auto pool = model_.new_kv_pool(be_, std::max<int64_t>(capacity, st.prompt_tokens + 1), 16,
                                 std::max<int64_t>(4, 1 + max_draft));
  KvSequence seq;

  std::vector<int32_t> history(prompt.begin(), prompt.end());
  std::vector<float> logits;
  double t0 = now_s();
  prefill(prompt, opt.prefill_chunk, *pool, seq, logits, opt.drafter);
  st.prefill_s = now_s() - t0;

  t0 = now_s();
  st.stop_reason = "length";
  // Plain greedy: the argmax is taken where the logits are (a GPU sends back one id).
  const SamplingParams& sp = opt.sampling;
  const bool plain_greedy = sp.greedy() && sp.repetition_penalty == 1.0f &&
                            sp.presence_penalty == 0.0f && sp.frequency_penalty == 0.0f;
  // Every emitted token goes through these checks, in both decode loops; false: stop
  // (st.stop_reason says why; "length" when the budget is spent).
  auto emit = [&](int32_t t) {
    history.push_back(t);
    if (std::find(c.eos_ids.begin(), c.eos_ids.end(), t) != c.eos_ids.end() && !opt.ignore_eos) {
      st.stop_reason = "eos";
      return false;
    }
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), t) != opt.stop_ids.end()) {
      st.stop_reason = "stop";
      return false;
    }
    ++st.generated;
    if (!on_token(t)) {
      st.stop_reason = "callback";
      return false;
    }
    return st.generated < opt.max_new_tokens;
  };
  auto pick = [&] { return sample_token(logits, opt.sampling, history, int64_t(history.size())); };
  int32_t next = plain_greedy ? argmax(logits) : -1;
  if (opt.max_new_tokens > 0) {
    int32_t tok = plain_greedy ? next : pick();
    if (opt.drafter) {
      speculate(*pool, seq, capacity, tok, plain_greedy, history, opt, st, emit);
    } else {
      while (emit(tok)) {
        if (seq.length + 1 > capacity) {
          st.stop_reason = "context";
          break;
        }
        const int32_t one[1] = {tok};
        model_.forward(be_, *pool, seq, one, logits.data(), false, plain_greedy ? &next : nullptr);
        tok = plain_greedy ? next : pick();
      }
    }
  }
  st.decode_s = now_s() - t0;
  return st;
}

void Generator::speculate(KvPool& pool, KvSequence& seq, int64_t capacity, int32_t tok, bool greedy,
                          std::vector<int32_t>& history, const GenerateOptions& opt,
                          GenerateStats& st, const std::function<bool(int32_t)>& emit) {
  const int64_t V = model_.config().vocab;
  const bool hidden = opt.drafter->wants_hidden();
  if (hidden) model_.set_taps(opt.drafter->taps());
  std::vector<int32_t> in, ids;
  std::vector<float> rows;
  // Hybrid models: the recurrent state has no per-position history, so the verification pass
  // also leaves the state after each of its rows but the last in a slot of its own
  // (Model::BatchItem::snaps); after a rejection the state after the last kept row is copied
  // back. The state's bits do not depend on how rows are grouped into passes (EXACTNESS.md), so
  // state and KV are as if the drafts never ran.
  const int64_t max_draft = std::min(opt.spec_tokens, opt.drafter->max_draft());
  std::vector<KvSequence> points(size_t(pool.has_state() ? max_draft : 0));
  std::vector<int32_t> snaps;
  struct Release {
    KvPool& p;
    std::vector<KvSequence>& s;
    ~Release() {
      for (KvSequence& q : s)
        if (q.slot >= 0) p.release(q);
    }
  } release_points{pool, points};
  for (KvSequence& q : points)
    if (!pool.reserve(q, 0))
      fail("[generate] speculative decoding on a hybrid model needs {} more recurrent-state slots",
           max_draft);
  SpecPolicy policy(max_draft, !opt.drafter->cost_grows_with_k());
  struct Report {
    const GenerateOptions& o;
    GenerateStats& s;
    SpecPolicy& p;
    ~Report() {
      if (o.spec_adaptive) s.spec_policy = p.describe();
    }
  } report{opt, st, policy};
  while (emit(tok)) {
    if (seq.length + 1 > capacity) {
      st.stop_reason = "context";
      return;
    }
    // Drafts: no more than the tokens still to emit or the context still holds.
    const int64_t want = opt.spec_adaptive ? policy.next_k() : opt.spec_tokens;
    const int64_t k =
        std::min({want, opt.max_new_tokens - st.generated, capacity - seq.length - 1});
    const double td = now_s();
    std::vector<int32_t> d = opt.drafter->draft(history, k);
    const double draft_s = now_s() - td;
    st.draft_s += draft_s;
    if (int64_t(d.size()) > k) d.resize(size_t(k));
    in.assign(1, tok);
    in.insert(in.end(), d.begin(), d.end());
    ids.resize(in.size());
    rows.resize(in.size() * size_t(V));
    const int64_t start = seq.length;
    snaps.clear();
    if (!points.empty() && !d.empty()) {  // rows 0 … d-1: a rollback point each
      for (size_t i = 0; i < d.size(); ++i) snaps.push_back(points[i].slot);
      snaps.push_back(-1);
    }
    const double tv = now_s();
    model_.forward(be_, pool, seq, in, rows.data(), true, greedy ? ids.data() : nullptr, hidden,
                   snaps);
    const double verify_s = now_s() - tv;
    if (hidden) opt.drafter->observe(model_.hidden_rows(), in, start, false);
    ++st.verify_passes;
    st.drafted += int64_t(d.size());
    // Row i gives the token the plain loop would emit after in[0..i]: its argmax, or its sample
    // with the plain loop's draw (keyed by position, penalties over the same history). Draft i
    // stands if it is that token. For sampling this is the rejection rule for a drafter that
    // proposes one token (q = 1 for it): the draft is accepted with probability p(draft), and
    // when it is not, the token drawn is distributed as p without it, renormalised; here, as
    // the same draw decides both, the text is plain sampling's for the same seed.
    size_t n = 0;
    for (;;) {
      int32_t t;
      if (greedy) {
        t = ids[n];
      } else {
        t = sample_token(std::span<float>(rows.data() + n * size_t(V), size_t(V)), opt.sampling,
                         history, int64_t(history.size()));
      }
      if (n < d.size() && d[n] == t) {
        ++n;
        ++st.accepted;
        if (!emit(t)) return;
        continue;
      }
      pool.truncate(seq, seq.length - int64_t(d.size() - n));
      if (n < d.size() && !points.empty())  // the state after row n: the last kept token
        model_.roll_back_state(be_, pool, seq, points[n].slot, int64_t(n + 1));
      policy.record(int64_t(d.size()), int64_t(n), verify_s, draft_s);
      tok = t;  // the target's token after the accepted drafts
      break;
    }
  }
}

std::vector<float> Generator::logits(std::span<const int32_t> tokens, int64_t chunk) {
  const int64_t T = int64_t(tokens.size()), V = model_.config().vocab;
  if (T == 0) fail("[logits] no tokens given");
  if (T > model_.config().max_context)
    fail("[logits] {} tokens exceed the context length {}", T, model_.config().max_context);
  if (chunk <= 0) chunk = T;
  auto pool = model_.new_kv_pool(be_, T);
  KvSequence seq;
  std::vector<float> out(size_t(T * V));
  for (int64_t i = 0; i < T; i += chunk) {
    const int64_t n = std::min(chunk, T - i);
    model_.forward(be_, *pool, seq, tokens.subspan(size_t(i), size_t(n)), out.data() + i * V, true);
  }
  return out;
}

}  // namespace basalt
