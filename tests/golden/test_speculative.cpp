// Speculative decoding is lossless by construction (EXACTNESS.md): greedy output with a drafter
// is plain greedy's token for token, because each verification row gives the bits a decode
// step would; rollback leaves the KV cache as if the rejected drafts had never been run.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/drafter.h"
#include "engine/generator.h"
#include "models/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace basalt {
namespace {

struct Output {
  std::vector<int32_t> out;
  GenerateStats st;
};

Output generate(Model& m, Backend& be, std::span<const int32_t> prompt, int64_t n, Drafter* d,
                int64_t k, std::vector<int32_t> stop = {}) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0.0f;
  o.ignore_eos = true;
  o.stop_ids = std::move(stop);
  o.drafter = d;
  o.spec_tokens = k;
  Output r;
  r.st = Generator(m, be).generate(prompt, o, [&](int32_t t) {
    r.out.push_back(t);
    return true;
  });
  return r;
}

// A prompt that repeats itself, so prompt lookup has something to propose.
std::vector<int32_t> looping_prompt(int64_t V) {
  std::vector<int32_t> p;
  for (int rep = 0; rep < 3; ++rep)
    for (int i = 0; i < 12; ++i) p.push_back(int32_t((i * 37 + 5) % V));
  return p;
}

TEST(Speculative, NgramGreedyIsPlainGreedyOnEveryArchitecture) {
  const std::string g = test::source_dir() + "/tests/golden";
  auto be = cpu::make_cpu_backend(2);
  int64_t drafted = 0, accepted = 0;
  for (const std::string path : {std::string(""), g + "/llama_gqa_untied", g + "/qwen3_untied_f16",
                                 g + "/qwen3_moe", g + "/gguf/qwen3_tied.q8_0.gguf"}) {
    auto m = model_load(path);
    const std::vector<int32_t> prompt = looping_prompt(m->config().vocab);
    const Output plain = generate(*m, *be, prompt, 160, nullptr, 0);
    ASSERT_EQ(plain.out.size(), 160u);
    for (int64_t k : {1, 4, 8}) {
      NgramDrafter d;
      const Output spec = generate(*m, *be, prompt, 160, &d, k);
      EXPECT_EQ(spec.out, plain.out) << (path.empty() ? "default model" : path) << " k=" << k;
      EXPECT_EQ(spec.st.stop_reason, "length");
      EXPECT_GT(spec.st.verify_passes, 0);
      EXPECT_LE(spec.st.verify_passes, 160);
      drafted += spec.st.drafted, accepted += spec.st.accepted;
    }
    // Stops land where plain decoding's do: the token budget inside an accepted run of drafts,
    // and a stop id.
    NgramDrafter d;
    for (int64_t n : {1, 2, 7, 33}) {
      const Output spec = generate(*m, *be, prompt, n, &d, 8);
      EXPECT_EQ(spec.out, std::vector<int32_t>(plain.out.begin(), plain.out.begin() + n));
    }
    const int32_t stop = plain.out[57];
    const Output ps = generate(*m, *be, prompt, 160, nullptr, 0, {stop});
    const Output ss = generate(*m, *be, prompt, 160, &d, 8, {stop});
    EXPECT_EQ(ss.out, ps.out);
    EXPECT_EQ(ss.st.stop_reason, "stop");
  }
  // The test is only worth something if drafts were both accepted and rejected.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

TEST(Speculative, RollbackLeavesTheCacheAsIfNeverDrafted) {
  auto m = model_load(test::source_dir() + "/tests/golden/llama_gqa_untied");
  auto be = cpu::make_cpu_backend(2);
  const int64_t V = m->config().vocab;
  const std::vector<int32_t> prompt = looping_prompt(V);
  const int32_t a = 3, b = 9;
  std::vector<float> ref(static_cast<size_t>(V)), got(static_cast<size_t>(V)),
      rows(static_cast<size_t>(6 * V));
  {  // prompt, a, b
    auto pool = m->new_kv_pool(*be, 64);
    KvSequence s;
    m->forward(*be, *pool, s, prompt, ref.data(), false);
    m->forward(*be, *pool, s, std::vector<int32_t>{a}, ref.data(), false);
    m->forward(*be, *pool, s, std::vector<int32_t>{b}, ref.data(), false);
  }
  // prompt, then a verification pass of a and five drafts (crossing a block boundary: blocks of
  // 16, prompt 36), rolled back to a, then b.
  auto pool = m->new_kv_pool(*be, 64);
  KvSequence s;
  m->forward(*be, *pool, s, prompt, got.data(), false);
  m->forward(*be, *pool, s, std::vector<int32_t>{a, 11, 12, 13, 14, 15}, rows.data(), true);
  pool->truncate(s, int64_t(prompt.size()) + 1);
  m->forward(*be, *pool, s, std::vector<int32_t>{b}, got.data(), false);
  EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * 4));
}

// Hybrid models: a verification pass leaves the recurrent and conv state after each of its rows
// but the last in a rollback point (Model::BatchItem::snaps); rolled back to the point of its
// last kept row, the sequence's state, and the logits of the next token, are bitwise those of a
// run that never drafted (one token at a time), for every number of kept rows.
TEST(Speculative, RollbackPointsLeaveTheRecurrentStateAsIfNeverDrafted) {
  auto be = cpu::make_cpu_backend(2);
  for (const char* name : {"qwen3_5", "qwen3_next"}) {
    auto m = model_load(test::source_dir() + "/tests/golden/" + name);
    const int64_t V = m->config().vocab;
    const std::vector<int32_t> prompt = looping_prompt(V);
    const std::vector<int32_t> in = {3, 11, 12, 13, 14, 15};
    const int32_t next = 9;
    std::vector<float> ref(static_cast<size_t>(V)), got(static_cast<size_t>(V)),
        rows(in.size() * size_t(V));
    for (size_t kept = 1; kept < in.size(); ++kept) {
      auto rpool = m->new_kv_pool(*be, 128);
      KvSequence r;
      m->forward(*be, *rpool, r, prompt, ref.data(), false);
      for (size_t i = 0; i < kept; ++i)
        m->forward(*be, *rpool, r, std::span(in).subspan(i, 1), ref.data(), false);
      const auto want = m->state_bytes(*be, *rpool, r.slot);
      m->forward(*be, *rpool, r, std::vector<int32_t>{next}, ref.data(), false);

      auto pool = m->new_kv_pool(*be, 128, 16, 8);
      KvSequence s;
      std::vector<KvSequence> points(in.size() - 1);
      std::vector<int32_t> snaps;
      for (KvSequence& q : points) {
        ASSERT_TRUE(pool->reserve(q, 0));
        snaps.push_back(q.slot);
      }
      snaps.push_back(-1);
      m->forward(*be, *pool, s, prompt, got.data(), false);
      m->forward(*be, *pool, s, in, rows.data(), true, nullptr, false, snaps);
      pool->truncate(s, int64_t(prompt.size() + kept));
      m->roll_back_state(*be, *pool, s, points[kept - 1].slot, int64_t(kept));
      EXPECT_EQ(m->state_bytes(*be, *pool, s.slot), want) << name << ", " << kept << " rows kept";
      m->forward(*be, *pool, s, std::vector<int32_t>{next}, got.data(), false);
      EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * 4))
          << name << ", " << kept << " rows kept";
    }
  }
}

// Sampling: each draft is accepted when the plain loop's own draw at its position picks it (the
// rejection rule for a one-token proposal), so the text is plain sampling's for the same seed,
// penalties included.
TEST(Speculative, SampledOutputIsPlainSamplingsForTheSameSeed) {
  const std::string g = test::source_dir() + "/tests/golden";
  auto be = cpu::make_cpu_backend(2);
  int64_t drafted = 0, accepted = 0;
  for (const std::string path :
       {std::string(""), g + "/llama_gqa_untied", g + "/qwen3_moe", g + "/qwen3_5"}) {
    auto m = model_load(path);
    const std::vector<int32_t> prompt = looping_prompt(m->config().vocab);
    for (uint64_t seed : {1u, 2u, 3u}) {
      GenerateOptions o;
      o.max_new_tokens = 120;
      o.ignore_eos = true;
      o.sampling.temperature = seed == 3 ? 1.3f : 0.6f;
      o.sampling.top_p = seed == 2 ? 0.9f : 1.0f;
      o.sampling.top_k = seed == 1 ? 20 : 0;
      o.sampling.repetition_penalty = seed == 2 ? 1.1f : 1.0f;
      o.sampling.seed = seed;
      auto collect = [&](Drafter* d) {
        GenerateOptions x = o;
        x.drafter = d;
        x.spec_tokens = 6;
        Output r;
        r.st = Generator(*m, *be).generate(prompt, x, [&](int32_t t) {
          r.out.push_back(t);
          return true;
        });
        return r;
      };
      NgramDrafter d;
      const Output plain = collect(nullptr), spec = collect(&d);
      EXPECT_EQ(spec.out, plain.out) << (path.empty() ? "default model" : path) << " seed " << seed;
      drafted += spec.st.drafted, accepted += spec.st.accepted;
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

// A draft model. With the target itself as the draft model every greedy draft is accepted:
// the verification rows give bitwise the logits the draft's own decode steps saw.
TEST(Speculative, DraftModelProposalsAndTheTargetAsItsOwnDraft) {
  auto be = cpu::make_cpu_backend(2);
  auto m = model_load("");
  const std::vector<int32_t> prompt = {1, 200, 300, 400, 500};
  const Output plain = generate(*m, *be, prompt, 100, nullptr, 0);
  auto same = make_drafter("draft:", *be, *m, 256);
  const Output self = generate(*m, *be, prompt, 100, same.get(), 5);
  EXPECT_EQ(self.out, plain.out);
  EXPECT_GT(self.st.drafted, 50);
  EXPECT_EQ(self.st.accepted, self.st.drafted);
  // Another model (a different vocabulary) is refused; a sampled run with the self-draft still
  // gives plain sampling's text.
  EXPECT_THROW(
      make_drafter("draft:" + test::source_dir() + "/tests/golden/llama_gqa_untied", *be, *m, 256),
      Error);
  EXPECT_THROW(make_drafter("eagle", *be, *m, 256), Error);
  GenerateOptions o;
  o.max_new_tokens = 80;
  o.sampling.temperature = 0.9f;
  o.sampling.seed = 7;
  std::vector<int32_t> a, b;
  Generator(*m, *be).generate(prompt, o, [&](int32_t t) {
    a.push_back(t);
    return true;
  });
  o.drafter = same.get();
  const GenerateStats st = Generator(*m, *be).generate(prompt, o, [&](int32_t t) {
    b.push_back(t);
    return true;
  });
  EXPECT_EQ(a, b);
  EXPECT_GT(st.accepted, 0);
}

// The DSpark drafter trained for the default model (models/dspark): greedy and sampled output
// is plain decoding's, with drafts both kept and rejected, for fixed and adaptive lengths and a
// confidence threshold; on Bible text it is right most of the time (the training script's
// simulation: 2.9 tokens a pass).
TEST(Speculative, TheTrainedDSparkDrafter) {
  auto be = cpu::make_cpu_backend(2);
  auto m = model_load("");
  const std::string spec = "dspark:" + test::source_dir() + "/models/dspark";
  const std::vector<int32_t> prompt = tok::tokenizer_from_checkpoint(m->checkpoint())
                                          ->encode("And God said unto Moses", false, false);
  const Output plain = generate(*m, *be, prompt, 120, nullptr, 0);
  int64_t drafted = 0, accepted = 0;
  for (int64_t k : {2, 4}) {
    auto d = make_drafter(spec, *be, *m, 256);
    const Output o = generate(*m, *be, prompt, 120, d.get(), k);
    EXPECT_EQ(o.out, plain.out) << "k " << k;
    drafted += o.st.drafted, accepted += o.st.accepted;
  }
  auto cut = make_drafter(spec, *be, *m, 256, 0.5f);  // fewer, surer drafts
  const Output c = generate(*m, *be, prompt, 120, cut.get(), 4);
  EXPECT_EQ(c.out, plain.out);
  EXPECT_GT(accepted, drafted / 3);
  EXPECT_LT(accepted, drafted);
  EXPECT_GE(double(c.st.accepted) / double(std::max<int64_t>(c.st.drafted, 1)),
            double(accepted) / double(drafted));
  GenerateOptions o;
  o.max_new_tokens = 80;
  o.sampling.temperature = 0.8f;
  o.sampling.seed = 11;
  std::vector<int32_t> a, b;
  Generator(*m, *be).generate(prompt, o, [&](int32_t t) {
    a.push_back(t);
    return true;
  });
  auto d = make_drafter(spec, *be, *m, 256);
  o.drafter = d.get();
  o.spec_tokens = 4;
  o.spec_adaptive = true;
  const GenerateStats st = Generator(*m, *be).generate(prompt, o, [&](int32_t t) {
    b.push_back(t);
    return true;
  });
  EXPECT_EQ(a, b);
  EXPECT_GT(st.accepted, 0);
  std::printf(
      "dspark drafts accepted: greedy %lld of %lld, with a 0.5 cut %lld of %lld, "
      "sampled %lld of %lld\n",
      (long long)accepted, (long long)drafted, (long long)c.st.accepted, (long long)c.st.drafted,
      (long long)st.accepted, (long long)st.drafted);
}

// Every draft of a model drafting for itself stands (its proposals are its own greedy tokens
// and the verification rows give the bits its decode steps gave), on every architecture:
// hybrid draft models go back to their state copy at each call, and a wrong state would show
// as a rejected draft.
TEST(Speculative, TheTargetAsItsOwnDraftOnEveryArchitecture) {
  const std::string g = test::source_dir() + "/tests/golden";
  auto be = cpu::make_cpu_backend(2);
  for (const std::string name : {"llama_gqa_untied", "qwen3_untied_f16", "qwen3_moe", "qwen3_5",
                                 "qwen3_next", "qwen3_5_moe"}) {
    auto m = model_load(g + "/" + name);
    const std::vector<int32_t> prompt = {1, 20, 30, 40, 50, 60, 7};
    const Output plain = generate(*m, *be, prompt, 90, nullptr, 0);
    for (int64_t k : {1, 4}) {
      auto self = make_drafter("draft:" + g + "/" + name, *be, *m, 256);
      const Output spec = generate(*m, *be, prompt, 90, self.get(), k);
      EXPECT_EQ(spec.out, plain.out) << name << " k=" << k;
      EXPECT_GT(spec.st.drafted, 40) << name;
      EXPECT_EQ(spec.st.accepted, spec.st.drafted) << name << " k=" << k;
    }
  }
  // A hybrid draft model that is not the target (Qwen3.5 drafting for Qwen3.5-MoE; the golden
  // checkpoints share a 288-token vocabulary): drafts rejected as well as kept, the same text.
  auto target = model_load(g + "/qwen3_5_moe_mtp");
  auto d = make_drafter("draft:" + g + "/qwen3_5", *be, *target, 256);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  const Output plain = generate(*target, *be, prompt, 90, nullptr, 0);
  const Output spec = generate(*target, *be, prompt, 90, d.get(), 4);
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_LT(spec.st.accepted, spec.st.drafted);
}

TEST(Speculative, NgramDrafterProposesWhatFollowedTheLatestMatch) {
  NgramDrafter d(1, 3);
  const std::vector<int32_t> h = {1, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3};
  // Suffix [2, 3] last occurred at 5 (then 5, 6, 2), before that at 1.
  EXPECT_EQ(d.draft(h, 3), (std::vector<int32_t>{5, 6, 2}));
  EXPECT_EQ(d.draft(h, 1), (std::vector<int32_t>{5}));
  EXPECT_TRUE(d.draft(std::vector<int32_t>{1, 2, 3}, 4).empty());  // no repeat
  EXPECT_TRUE(d.draft(h, 0).empty());
}

}  // namespace
}  // namespace basalt

namespace basalt {
namespace {

// The adaptive draft length changes how many drafts each pass carries, never the tokens.
TEST(Speculative, AdaptiveDraftLengthKeepsPlainGreedysTokens) {
  const std::string g = test::source_dir() + "/tests/golden";
  auto be = cpu::make_cpu_backend(2);
  for (const std::string path : {std::string(""), g + "/qwen3_5"}) {
    auto m = model_load(path);
    const std::vector<int32_t> prompt = looping_prompt(m->config().vocab);
    const Output plain = generate(*m, *be, prompt, 120, nullptr, 0);
    GenerateOptions o;
    o.max_new_tokens = 120;
    o.sampling.temperature = 0.0f;
    o.ignore_eos = true;
    NgramDrafter d;
    o.drafter = &d;
    o.spec_tokens = 8;
    o.spec_adaptive = true;
    std::vector<int32_t> out;
    const GenerateStats st = Generator(*m, *be).generate(prompt, o, [&](int32_t t) {
      out.push_back(t);
      return true;
    });
    EXPECT_EQ(out, plain.out) << (path.empty() ? "default model" : path);
    EXPECT_GT(st.drafted, 0);
    EXPECT_NE(st.spec_policy.find("acceptance"), std::string::npos) << st.spec_policy;
  }
}

}  // namespace
}  // namespace basalt
