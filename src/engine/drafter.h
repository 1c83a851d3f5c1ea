// Drafters for speculative decoding (docs/speculative.md): each proposes tokens that may follow
// the text so far; the target model verifies them in one pass (Generator::generate), so what a
// drafter proposes changes the speed, never the output.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace basalt {

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // Up to k tokens proposed to follow `history` (the prompt and every token emitted so far).
  virtual std::vector<int32_t> draft(std::span<const int32_t> history, int64_t k) = 0;
};

// Prompt lookup: the longest suffix of the history, of max_n down to min_n tokens, that occurred
// earlier in it; proposes the (up to k) tokens that followed its most recent earlier occurrence.
// No model: it pays off where the output copies its input (code edits, quoting, lists).
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int64_t min_n = 1, int64_t max_n = 4) : min_n_(min_n), max_n_(max_n) {}
  std::string name() const override { return "ngram"; }
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t k) override;

 private:
  int64_t min_n_, max_n_;
};

// "ngram" → an NgramDrafter. Throws basalt::Error naming the drafters there are for anything
// else.
std::unique_ptr<Drafter> make_drafter(const std::string& spec);

}  // namespace basalt
