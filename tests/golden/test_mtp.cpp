// The MTP head of Qwen3.5 checkpoints (Model::mtp_head, MtpDrafter): its logits against an
// independent torch implementation of the published layout (tools/make_mtp_reference.py; the
// transformers classes have no MTP forward), the exactness contract on its own passes, and
// speculative decoding with it giving plain greedy's tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/drafter.h"
#include "engine/generator.h"
#include "io/checkpoint.h"
#include "io/npy.h"
#include "models/model.h"
#include "ops/ref/ref_ops.h"
#include "test_util.h"

namespace basalt {
namespace {

const char* kCases[] = {"qwen3_5_mtp", "qwen3_5_moe_mtp"};

std::string case_dir(const char* name) { return test::source_dir() + "/tests/golden/" + name; }

// The target's final hidden states at every position of ids (f32, [n, E]).
std::vector<float> target_hidden(Model& m, Backend& be, const std::vector<int32_t>& ids) {
  const int64_t n = int64_t(ids.size()), E = m.config().hidden;
  auto pool = m.new_kv_pool(be, n);
  KvSequence seq;
  std::vector<float> logits(size_t(m.config().vocab));
  m.forward(be, *pool, seq, ids, logits.data(), false, nullptr, true);
  std::vector<float> h(size_t(n * E));
  be.act_to_f32(m.hidden_rows(), h.data(), n * E);
  pool->release(seq);
  return h;
}

// The head's logits of entries 0 … n − 2 (token ids[i + 1] with hidden h[i]), run in passes of
// `chunk` entries.
std::vector<float> head_logits(Model& head, Backend& be, const std::vector<int32_t>& ids,
                               const std::vector<float>& h, int64_t chunk) {
  const int64_t n = int64_t(ids.size()) - 1, E = head.config().hidden, V = head.config().vocab;
  auto pool = head.new_kv_pool(be, n);
  KvSequence seq;
  std::vector<float> out(size_t(n * V));
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t c = std::min(chunk, n - i);
    head.forward_mtp(be, *pool, seq, std::span(ids).subspan(size_t(i + 1), size_t(c)),
                     h.data() + i * E, out.data() + i * V, true, nullptr, false);
  }
  pool->release(seq);
  return out;
}

TEST(Mtp, HeadMatchesTheTorchReference) {
  for (const char* name : kCases) {
    const std::string dir = case_dir(name);
    const auto ref = io::json_load_file(dir + "/mtp_reference.json");
    const auto ids = ref["ids"].get<std::vector<int32_t>>();
    const auto want_ids = ref["greedy_mtp"].get<std::vector<int32_t>>();
    const io::NpyArray want = io::npy_read(dir + "/" + ref["mtp_logits"].get<std::string>());
    auto m = model_load(dir);
    ASSERT_EQ(m->config().mtp_layers, 1) << name;
    auto head = m->mtp_head();
    ASSERT_TRUE(head) << name;
    EXPECT_TRUE(head->is_mtp_head());
    const int64_t V = m->config().vocab;
    ASSERT_EQ(want.shape[0], int64_t(ids.size()) - 1);
    ASSERT_EQ(want.shape[1], V);
    float max_ref = 0.0f;
    for (float v : want.data) max_ref = std::max(max_ref, std::fabs(v));
    auto cpu = cpu::make_cpu_backend(2);
    auto refb = ref::make_ref_backend();
    for (Backend* be : {cpu.get(), refb.get()}) {
      const std::vector<float> got = head_logits(*head, *be, ids, target_hidden(*m, *be, ids), 64);
      ASSERT_EQ(got.size(), want.data.size());
      float max_err = 0.0f;
      for (size_t i = 0; i < got.size(); ++i)
        max_err = std::max(max_err, std::fabs(got[i] - want.data[i]));
      EXPECT_LE(max_err, 1e-4f * max_ref) << name << " on " << be->name();
      std::vector<int32_t> got_ids;
      for (size_t r = 0; r < want_ids.size(); ++r) {
        const float* row = got.data() + r * size_t(V);
        got_ids.push_back(int32_t(std::max_element(row, row + V) - row));
      }
      EXPECT_EQ(got_ids, want_ids) << name << " on " << be->name();
    }
  }
}

// The head keeps the exactness contract of the model it belongs to: an entry's logits do not
// depend on how the entries were grouped into passes.
TEST(Mtp, HeadLogitsDoNotDependOnThePassSize) {
  auto be = cpu::make_cpu_backend(2);
  for (const char* name : kCases) {
    const auto ref = io::json_load_file(case_dir(name) + "/mtp_reference.json");
    const auto ids = ref["ids"].get<std::vector<int32_t>>();
    auto m = model_load(case_dir(name));
    auto head = m->mtp_head();
    const std::vector<float> h = target_hidden(*m, *be, ids);
    const std::vector<float> whole = head_logits(*head, *be, ids, h, 64);
    for (int64_t chunk : {1, 5, 16}) {
      const std::vector<float> part = head_logits(*head, *be, ids, h, chunk);
      EXPECT_EQ(0, std::memcmp(part.data(), whole.data(), whole.size() * sizeof(float)))
          << name << " chunk " << chunk;
    }
  }
}

// The drafter lines the head's entries up with the text as the target's passes reveal it: its
// first draft after a prefill (in chunks), and after a verification pass of which only some
// rows stood, is the reference head's greedy token for the last emitted position.
TEST(Mtp, TheDrafterProposesTheHeadsTokenForTheLastPosition) {
  auto be = cpu::make_cpu_backend(2);
  for (const char* name : kCases) {
    const auto ref = io::json_load_file(case_dir(name) + "/mtp_reference.json");
    const auto ids = ref["ids"].get<std::vector<int32_t>>();
    const auto want = ref["greedy_mtp"].get<std::vector<int32_t>>();
    auto m = model_load(case_dir(name));
    for (int64_t j : {0, 1, 9, 20, 33}) {
      auto pool = m->new_kv_pool(*be, 64);
      KvSequence seq;
      std::vector<float> logits(size_t(3 * m->config().vocab));
      auto d = make_drafter("mtp", *be, *m, 64);
      // Prefill of ids[0..j] in two chunks, then ids[j + 1] is the emitted token.
      const std::span<const int32_t> all(ids);
      for (auto [from, to] : {std::pair<int64_t, int64_t>{0, (j + 1) / 2}, {(j + 1) / 2, j + 1}}) {
        if (to == from) continue;
        const auto part = all.subspan(size_t(from), size_t(to - from));
        m->forward(*be, *pool, seq, part, logits.data(), false, nullptr, true);
        d->observe(m->hidden_rows(), part, from, true);
      }
      auto first = d->draft(all.first(size_t(j + 2)), 1);
      ASSERT_EQ(first.size(), 1u);
      EXPECT_EQ(first[0], want[size_t(j)]) << name << " after position " << j;
      // A verification pass of ids[j + 1 … j + 3]: two rows stand (ids[j + 2] was a kept
      // draft, ids[j + 3] the target's own next token), the third is rolled back.
      const auto pass = all.subspan(size_t(j + 1), 3);
      m->forward(*be, *pool, seq, pass, logits.data(), true, nullptr, true);
      d->observe(m->hidden_rows(), pass, j + 1, false);
      pool->truncate(seq, j + 3);
      auto next = d->draft(all.first(size_t(j + 4)), 2);
      ASSERT_EQ(next.size(), 2u);
      EXPECT_EQ(next[0], want[size_t(j + 2)]) << name << " after position " << j + 2;
      pool->release(seq);
    }
  }
}

TEST(Mtp, GreedyWithTheMtpDrafterIsPlainGreedy) {
  auto be = cpu::make_cpu_backend(2);
  int64_t drafted = 0, accepted = 0;
  for (const char* name : kCases) {
    auto m = model_load(case_dir(name));
    const auto ids = io::json_load_file(case_dir(name) + "/mtp_reference.json")["ids"]
                         .get<std::vector<int32_t>>();
    for (int64_t chunk : {0, 7}) {
      GenerateOptions o;
      o.max_new_tokens = 96;
      o.sampling.temperature = 0.0f;
      o.ignore_eos = true;
      o.prefill_chunk = chunk;
      std::vector<int32_t> plain, spec;
      Generator(*m, *be).generate(ids, o, [&](int32_t t) {
        plain.push_back(t);
        return true;
      });
      ASSERT_EQ(plain.size(), 96u);
      for (int64_t k : {1, 3, 6}) {
        auto d = make_drafter("mtp", *be, *m, 256);
        EXPECT_EQ(d->name(), "mtp");
        o.drafter = d.get();
        o.spec_tokens = k;
        spec.clear();
        const GenerateStats st = Generator(*m, *be).generate(ids, o, [&](int32_t t) {
          spec.push_back(t);
          return true;
        });
        EXPECT_EQ(spec, plain) << name << " k=" << k << " chunk " << chunk;
        EXPECT_GT(st.drafted, 0);
        drafted += st.drafted, accepted += st.accepted;
      }
    }
  }
  // Random heads rarely agree with their random models, but the rollback paths must have run:
  // some drafts kept, most rejected.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
  std::printf("mtp drafts accepted: %lld of %lld\n", (long long)accepted, (long long)drafted);
}

TEST(Mtp, AModelWithoutAHeadSaysSo) {
  auto be = cpu::make_cpu_backend(1);
  auto m = model_load(test::source_dir() + "/tests/golden/qwen3_5");
  EXPECT_FALSE(m->mtp_head());
  test::expect_error([&] { make_drafter("mtp", *be, *m, 64); }, {"no MTP head", "mtp.*"});
  auto d = model_load("");
  test::expect_error([&] { make_drafter("mtp", *be, *d, 64); }, "no MTP head");
}

}  // namespace
}  // namespace basalt
