// Adaptive draft length for speculative decoding (docs/speculative.md): after each
// verification pass it updates what it has measured (how often a draft stands, what a pass of
// T rows and a drafted token cost) and picks the k that maximises the expected tokens emitted
// per second. The choice changes the speed only: the output is plain decoding's for any k.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace basalt {

class SpecPolicy {
 public:
  // per_call: the drafter's cost does not grow with k (a block drafter, DSpark: one pass drafts
  // the whole block), so drafting is charged per call, not per token.
  explicit SpecPolicy(int64_t max_k, bool per_call = false)
      : max_k_(max_k < 1 ? 1 : max_k), per_call_(per_call), pass_(size_t(max_k_ + 2), -1.0) {}
  // The next pass's draft length, in [1, max_k] (never 0: acceptance must stay measured): the
  // best() one, except that every 8th pass tries one more or one fewer (alternately), so the
  // cost of a row keeps being measured around the choice.
  int64_t next_k();
  int64_t best() const;
  // One pass: k drafted (0: the drafter had nothing), `accepted` of them stood; the pass of
  // k + 1 rows took verify_s seconds and drafting took draft_s.
  void record(int64_t k, int64_t accepted, double verify_s, double draft_s);
  // Estimates (for reports and tests): the probability that a draft stands given the ones
  // before it did, the cost of a pass of T rows, of one drafted token. A pass of a size not
  // measured yet costs what its measured neighbours say (between two: on the line joining
  // them; past the largest: as much as that one, an optimism the next passes correct), and
  // never less than a smaller pass.
  double acceptance() const;
  double pass_s(int64_t T) const;
  double draft_token_s() const { return draft_n_ > 0 ? draft_s_ / draft_n_ : 0.0; }
  double draft_call_s() const { return draft_calls_ > 0 ? draft_s_ / draft_calls_ : 0.0; }
  // What drafting k tokens is expected to cost.
  double draft_s(int64_t k) const {
    return per_call_ ? draft_call_s() : draft_token_s() * double(k);
  }
  std::string describe() const;  // e.g. "k 5: acceptance 0.71, pass 1.9 ms + 0.05 ms/row"

 private:
  int64_t max_k_, calls_ = 0;
  bool per_call_ = false;
  // Decayed sums (each pass multiplies the old ones by kDecay): drafts accepted, rejections,
  // drafting time, drafted tokens and drafting calls; per pass size T (1 … max_k + 1) a moving
  // average of its time (< 0: not measured).
  double acc_ = 0, rej_ = 0, draft_s_ = 0, draft_n_ = 0, draft_calls_ = 0;
  std::vector<double> pass_;
};

}  // namespace basalt
