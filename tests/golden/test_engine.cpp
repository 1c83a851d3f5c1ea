// The serving engine: continuous batching gives every request exactly the tokens it gets
// alone; the prefix cache and preemption change nothing but speed.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "models/model.h"
#include "test_util.h"

namespace basalt {
namespace {

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  TokenEvent final;
  bool done = false;
};

Engine::Callback collect(Collected& c) {
  return [&c](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lk(c.mu);
    if (ev.finished) {
      c.final = ev;
      c.done = true;
      c.cv.notify_all();
    } else {
      c.tokens.push_back(ev.token);
      c.logprobs.push_back(ev.logprob);
    }
  };
}

void wait(Collected& c) {
  std::unique_lock<std::mutex> lk(c.mu);
  c.cv.wait(lk, [&] { return c.done; });
}

std::vector<int32_t> prompt_of(int i, int len, int64_t V) {
  std::vector<int32_t> p;
  for (int j = 0; j < len; ++j) p.push_back(int32_t((i * 131 + j * 7 + 3) % V));
  return p;
}

EngineRequest request(int i, int64_t V) {
  EngineRequest r;
  r.prompt = prompt_of(i, 5 + (i * 13) % 40, V);
  r.max_new_tokens = 12 + i % 9;
  r.ignore_eos = true;
  if (i % 3 == 1) {  // some sampled requests: keyed by (seed, position), so still reproducible
    r.sampling.temperature = 0.9f;
    r.sampling.top_k = 20;
    r.sampling.seed = uint64_t(i);
  }
  return r;
}

// Each request alone through the one-sequence Generator, then all together through the
// engine with a small batch, a tiny KV pool (forcing preemption) and small prefill steps.
// Dense, MoE (routing per row) and hybrid models (recurrent state per sequence slot).
class EngineModels : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineModels, ConcurrentRequestsGetExactlyTheirSoloTokens) {
  auto model = model_load(test::source_dir() + "/tests/golden/" + GetParam());
  const int64_t V = model->config().vocab;
  auto be = cpu::make_cpu_backend(2);
  const int N = 24;
  std::vector<std::vector<int32_t>> solo(N);
  for (int i = 0; i < N; ++i) {
    EngineRequest r = request(i, V);
    GenerateOptions opt;
    opt.max_new_tokens = r.max_new_tokens;
    opt.sampling = r.sampling;
    opt.ignore_eos = true;
    Generator(*model, *be).generate(r.prompt, opt, [&](int32_t t) {
      solo[size_t(i)].push_back(t);
      return true;
    });
  }
  const bool has_mtp = model->mtp_head() != nullptr;
  for (int64_t kv_tokens : {int64_t(0), int64_t(160), int64_t(-1), int64_t(-2), int64_t(-3),
                            int64_t(-4), int64_t(-5)}) {
    EngineConfig cfg;
    if (kv_tokens == -3 && !has_mtp) continue;
    // (The random DSpark test drafter is made for qwen3_untied_f16.)
    if (kv_tokens == -5 && std::string(GetParam()) != "qwen3_untied_f16") continue;
    if (kv_tokens < 0) {  // speculative decoding changes nothing either: n-gram drafts (-1;
      // -4 with an adaptive length per sequence), the model drafting for itself (-2: a drafter
      // per sequence), the checkpoint's MTP head (-3: one drafter per sequence, reading the
      // hidden rows of its items in every pass), a DSpark drafter (-5: one per sequence, its
      // context rows from the target's taps of its items)
      const std::string dir = test::source_dir() + "/tests/golden/";
      cfg.spec = kv_tokens == -2   ? "draft:" + dir + GetParam()
                 : kv_tokens == -3 ? std::string("mtp")
                 : kv_tokens == -5 ? "dspark:" + dir + "dspark_qwen3"
                                   : std::string("ngram");
      cfg.spec_adaptive = kv_tokens == -4;
      kv_tokens = 0;
      cfg.spec_tokens = cfg.spec_adaptive ? 6 : 5;
    }
    cfg.max_batch = 6;
    cfg.step_tokens = 17;
    cfg.max_context = 128;
    cfg.kv_tokens = kv_tokens;  // 160 positions: 2–3 sequences fit, the rest get preempted
    cfg.block_size = 4;
    Engine engine(*model, *be, cfg);
    std::vector<Collected> got(N);
    for (int i = 0; i < N; ++i) engine.submit(request(i, V), collect(got[size_t(i)]));
    for (int i = 0; i < N; ++i) {
      wait(got[size_t(i)]);
      EXPECT_EQ(got[size_t(i)].tokens, solo[size_t(i)]) << "request " << i << " kv " << kv_tokens;
      EXPECT_EQ(got[size_t(i)].final.finish_reason, "length");
      EXPECT_EQ(got[size_t(i)].final.completion_tokens, int64_t(solo[size_t(i)].size()));
    }
    EXPECT_EQ(engine.stats().kv_blocks_used, 0);
    if (kv_tokens > 0) {
      EXPECT_GT(engine.stats().preemptions, 0);
    }
    if (!cfg.spec.empty()) {  // hybrids too: their state rolled back to the kept rows' point
      EXPECT_GT(engine.stats().spec_drafted, 0);
      // (The continuations of qwen3_next and qwen3_5_moe here never repeat what prompt lookup
      // proposes: all their n-gram drafts are rejected; random MTP heads keep next to none.)
      const std::string m = GetParam();
      if (!(cfg.spec == "ngram" && (m == "qwen3_next" || m == "qwen3_5_moe_mtp")) &&
          cfg.spec != "mtp" && !cfg.spec.starts_with("dspark:")) {
        EXPECT_GT(engine.stats().spec_accepted, 0);
      }
      EXPECT_LT(engine.stats().spec_accepted, engine.stats().spec_drafted);
      const EngineStats st = engine.stats();
      // The sequences' drafters drafted together (draft models without recurrent state; here
      // the draft model is the target itself).
      if (cfg.spec.starts_with("draft:") && model->config().linear_layers.empty()) {
        EXPECT_GT(st.spec_draft_batches, 0);
        EXPECT_GT(st.spec_draft_batch_rows, st.spec_draft_batches);  // some with 2 or more
      } else {
        EXPECT_EQ(st.spec_draft_batches, 0);
      }
      if (cfg.spec_adaptive) {  // every pass that drafted chose its k, within [1, spec_tokens]
        EXPECT_GE(st.spec_adaptive_passes, st.spec_verifications);
        EXPECT_GE(st.spec_adaptive_k_total, st.spec_adaptive_passes);
        EXPECT_LE(st.spec_adaptive_k_total, 6 * st.spec_adaptive_passes);
      } else {
        EXPECT_EQ(st.spec_adaptive_passes, 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, EngineModels,
                         ::testing::Values("qwen3_untied_f16", "qwen3_moe", "qwen3_5", "qwen3_next",
                                           "qwen3_5_mtp", "qwen3_5_moe_mtp"));

// The qwen3_tied model's engine with 8-position KV blocks, and its greedy requests.
class TiedEngine : public ::testing::Test {
 protected:
  TiedEngine()
      : model(model_load(test::source_dir() + "/tests/golden/qwen3_tied")),
        be(cpu::make_cpu_backend(2)),
        engine(*model, *be, config()) {}
  static EngineConfig config() {
    EngineConfig cfg;
    cfg.block_size = 8;
    return cfg;
  }
  // prompt_of(i, len) and max_new tokens, EOS ignored.
  EngineRequest request(int i, int len, int64_t max_new) const {
    EngineRequest r;
    r.prompt = prompt_of(i, len, model->config().vocab);
    r.max_new_tokens = max_new;
    r.ignore_eos = true;
    return r;
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> be;
  Engine engine;
};

TEST_F(TiedEngine, PrefixCacheHitsOnARepeatedPrompt) {
  EngineRequest r = request(1, 70, 10);
  r.logprobs = true;
  Collected a, b;
  engine.submit(r, collect(a));
  wait(a);
  engine.submit(r, collect(b));
  wait(b);
  EXPECT_EQ(a.final.cached_prompt_tokens, 0);
  EXPECT_EQ(b.final.cached_prompt_tokens, 64);  // 8 whole blocks of the 70-token prompt
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);  // bitwise: cached KV is the same KV
  EXPECT_EQ(engine.stats().prefix_cache_hit_tokens, 64);
}

// Engine::run (a server's start-up warmup) gives the tokens a submitted request gets, and
// reset_counters zeroes the cumulative counters it left while the pool's gauge stays.
TEST_F(TiedEngine, RunThenResetCounters) {
  const EngineRequest r = request(2, 30, 6);
  const std::vector<int32_t> got = engine.run(r);
  Collected a;
  engine.submit(r, collect(a));
  wait(a);
  EXPECT_EQ(got.size(), 6u);
  EXPECT_EQ(got, a.tokens);
  EngineStats st = engine.stats();
  EXPECT_EQ(st.requests_total, 2);
  EXPECT_EQ(st.completion_tokens_total, 12);
  EXPECT_GT(st.prefix_cache_hit_tokens, 0);
  EXPECT_GT(st.steps, 0);
  engine.reset_counters();
  st = engine.stats();
  EXPECT_EQ(st.requests_total, 0);
  EXPECT_EQ(st.prompt_tokens_total, 0);
  EXPECT_EQ(st.completion_tokens_total, 0);
  EXPECT_EQ(st.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(st.steps, 0);
  EXPECT_EQ(st.step_seconds, 0.0);
  EXPECT_GT(st.kv_blocks_total, 0);
  EngineRequest empty;
  test::expect_error([&] { engine.run(empty); }, "prompt is empty");
}

// A growing conversation: each turn's prompt is the previous prompt, the reply and a new
// user message. Dense models reuse every whole block; hybrid models (recurrent state) reuse up
// to the last block boundary whose state was kept, which decode steps refresh, so the whole
// previous turn but its last partial block is served from the cache. Every turn's tokens and
// logprobs equal those of a fresh engine that never cached anything.
class ConversationModels : public ::testing::TestWithParam<const char*> {};

TEST_P(ConversationModels, MultiTurnPrefixCacheIsExactAndHits) {
  auto model = model_load(test::source_dir() + "/tests/golden/" + GetParam());
  const int64_t V = model->config().vocab;
  auto be = cpu::make_cpu_backend(2);
  EngineConfig cfg;
  cfg.block_size = 8;
  cfg.max_batch = 2;
  cfg.max_context = 256;
  // The cached engine also speculates (the MTP head where the checkpoint has one, prompt lookup
  // otherwise): a drafter starting on a cached prefix, and rollback, change no token.
  EngineConfig spec_cfg = cfg;
  spec_cfg.spec = model->mtp_head() ? "mtp" : "ngram";
  Engine cached(*model, *be, spec_cfg);
  std::vector<int32_t> history;
  int64_t prompt_total = 0, hit_total = 0;
  for (int turn = 0; turn < 5; ++turn) {
    const auto user = prompt_of(turn + 7, 9 + 5 * turn, V);
    history.insert(history.end(), user.begin(), user.end());
    EngineRequest r;
    r.prompt = history;
    r.max_new_tokens = 11;
    r.ignore_eos = true;
    r.logprobs = true;
    Collected a, b;
    cached.submit(r, collect(a));
    wait(a);
    {
      Engine fresh(*model, *be, cfg);
      fresh.submit(r, collect(b));
      wait(b);
      EXPECT_EQ(b.final.cached_prompt_tokens, 0);
    }
    EXPECT_EQ(a.tokens, b.tokens) << "turn " << turn;
    EXPECT_EQ(a.logprobs, b.logprobs) << "turn " << turn;  // bitwise
    // What the previous turn left: its prompt and reply but the last (never fed) token,
    // cut to whole blocks.
    const int64_t prev = turn == 0 ? 0 : int64_t(history.size() - user.size()) - 1;
    EXPECT_EQ(a.final.cached_prompt_tokens, prev / cfg.block_size * cfg.block_size)
        << "turn " << turn;
    prompt_total += int64_t(r.prompt.size());
    hit_total += a.final.cached_prompt_tokens;
    history.insert(history.end(), a.tokens.begin(), a.tokens.end());
  }
  EXPECT_EQ(cached.stats().prefix_cache_hit_tokens, hit_total);
  std::printf("[ %s ] prefix-cache hit rate over 5 turns: %lld of %lld prompt tokens (%.0f%%)\n",
              GetParam(), (long long)hit_total, (long long)prompt_total,
              100.0 * double(hit_total) / double(prompt_total));
}

INSTANTIATE_TEST_SUITE_P(Golden, ConversationModels,
                         ::testing::Values("qwen3_tied", "qwen3_5", "qwen3_next", "qwen3_5_moe",
                                           "qwen3_5_mtp"));

TEST(Engine, CancelAndErrors) {
  auto model = model_load(test::source_dir() + "/tests/golden/qwen3_tied");
  auto be = cpu::make_cpu_backend(1);
  EngineConfig cfg;
  cfg.max_context = 64;
  Engine engine(*model, *be, cfg);
  EngineRequest r;
  r.prompt = prompt_of(2, 10, model->config().vocab);
  r.max_new_tokens = 40;
  r.ignore_eos = true;
  Collected c;
  // The engine's thread may run the first steps before submit() returns the id: the callback
  // waits for it (ids start at 1), or a slow main thread lets the request run to its length.
  std::atomic<uint64_t> id{0};
  id = engine.submit(r, [&](const TokenEvent& ev) {
    if (!ev.finished && c.tokens.size() == 2) {
      id.wait(0);
      engine.cancel(id.load());
    }
    collect(c)(ev);
  });
  id.notify_all();
  wait(c);
  EXPECT_EQ(c.final.finish_reason, "cancelled");
  EXPECT_LT(c.tokens.size(), 40u);
  test::expect_error([&] { engine.submit(EngineRequest{}, [](const TokenEvent&) {}); },
                     "prompt is empty");
  EngineRequest big;
  big.prompt.assign(64, 1);
  test::expect_error([&] { engine.submit(big, [](const TokenEvent&) {}); }, "context holds 64");
  // A request that is neither: still served after the errors.
  Collected d;
  r.max_new_tokens = 3;
  engine.submit(r, collect(d));
  wait(d);
  EXPECT_EQ(d.tokens.size(), 3u);
}

}  // namespace
}  // namespace basalt
