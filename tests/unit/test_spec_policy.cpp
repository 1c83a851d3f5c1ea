// The adaptive draft length (engine/spec_policy.h) on synthetic measurements: it follows the
// acceptance and the cost of a pass's rows, and keeps probing next to its choice.
#include <gtest/gtest.h>

#include "engine/spec_policy.h"

namespace basalt {
namespace {

// Feeds `passes` passes whose drafts stand with probability ~p (a fixed pattern) and whose cost
// is a + b·T seconds; each pass drafts what the policy asks for.
void feed(SpecPolicy& sp, double p, double a, double b, int passes = 200) {
  double carry = 0;
  for (int i = 0; i < passes; ++i) {
    const int64_t k = sp.next_k();
    int64_t acc = 0;
    while (acc < k) {  // a deterministic geometric run: stand while the running sum allows
      carry += p;
      if (carry < 1.0) break;
      carry -= 1.0;
      ++acc;
    }
    sp.record(k, acc, a + b * double(k + 1), 1e-5 * double(k));
  }
}

TEST(SpecPolicy, DraftsLongWhenDraftsStandAndRowsAreCheap) {
  SpecPolicy sp(8);
  feed(sp, 0.999, 1e-3, 1e-5);
  EXPECT_EQ(sp.best(), 8);
  EXPECT_GT(sp.acceptance(), 0.9);
}

TEST(SpecPolicy, DraftsOneWhenDraftsFail) {
  SpecPolicy sp(8);
  feed(sp, 0.0, 1e-3, 1e-5);
  EXPECT_EQ(sp.best(), 1);
  EXPECT_LT(sp.acceptance(), 0.1);
}

// A block drafter's cost does not grow with k: charged per call, an expensive draft does not
// shorten the draft, while the same cost charged per token does.
TEST(SpecPolicy, ABlockDrafterIsChargedPerCall) {
  SpecPolicy per_token(8), per_call(8, true);
  for (SpecPolicy* sp : {&per_token, &per_call})
    for (int i = 0; i < 200; ++i) {
      const int64_t k = sp->next_k();
      const int64_t acc = std::min<int64_t>(k, i % 3);        // 0, 1, 2 drafts stand in turn
      sp->record(k, acc, 1e-3 + 1e-5 * double(k + 1), 2e-3);  // a draft call costs 2 passes
    }
  EXPECT_NEAR(per_call.draft_call_s(), 2e-3, 1e-9);
  EXPECT_NEAR(per_call.draft_s(5), 2e-3, 1e-9);
  EXPECT_GT(per_call.best(), per_token.best());
  EXPECT_EQ(per_token.best(), 1);
  EXPECT_NE(per_call.describe().find("ms/call"), std::string::npos) << per_call.describe();
}

TEST(SpecPolicy, ExpensiveRowsShortenTheDraft) {
  SpecPolicy cheap(16), dear(16);
  feed(cheap, 0.7, 1e-3, 1e-6);
  feed(dear, 0.7, 1e-3, 1e-3);  // a row costs as much as the whole T = 1 pass
  EXPECT_GT(cheap.best(), dear.best());
  EXPECT_LE(dear.best(), 2);
  // The measured pass costs are the ones it was fed; sizes never run are estimated from their
  // neighbours, and never cost less than a smaller pass.
  EXPECT_NEAR(dear.pass_s(2), 3e-3, 1e-9);
  EXPECT_NEAR(dear.pass_s(9), 10e-3, 1e-3);
  for (int64_t T = 2; T <= 17; ++T) EXPECT_GE(dear.pass_s(T), dear.pass_s(T - 1));
  SpecPolicy fresh(4);
  EXPECT_EQ(fresh.pass_s(1), fresh.pass_s(5));  // nothing measured: all alike
  fresh.record(2, 0, 3e-3, 0);                  // T = 3 measured: flat on both sides
  EXPECT_EQ(fresh.pass_s(1), 3e-3);
  EXPECT_EQ(fresh.pass_s(5), 3e-3);
  fresh.record(0, 0, 1e-3, 0);  // T = 1: between 1 and 3, the line
  EXPECT_NEAR(fresh.pass_s(2), 2e-3, 1e-12);
}

TEST(SpecPolicy, ProbesNextToItsChoiceEveryEighthPass) {
  SpecPolicy sp(8);
  feed(sp, 0.7, 1e-3, 1e-4);
  const int64_t best = sp.best();
  std::vector<int64_t> ks;
  for (int i = 0; i < 16; ++i) ks.push_back(sp.next_k());
  int off = 0;
  for (int64_t k : ks) {
    EXPECT_LE(std::abs(k - best), 1);
    off += k != best;
  }
  EXPECT_GE(off, 1);
  EXPECT_LE(off, 2);
  SpecPolicy one(1);  // a cap of one: always one
  for (int i = 0; i < 20; ++i) EXPECT_EQ(one.next_k(), 1);
}

}  // namespace
}  // namespace basalt
