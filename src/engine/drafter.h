// Drafters for speculative decoding (docs/speculative.md): each proposes tokens that may follow
// the text so far; the target model verifies them in one pass (Generator::generate), so what a
// drafter proposes changes the speed, never the output.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"

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

// A separate model sharing the target's tokenizer (same vocabulary): it decodes k tokens
// greedily after the history on `be`. Its KV cache follows the history (only tokens it has not
// run yet are run; the KV of its own proposals is dropped after each call). Models with
// recurrent state are refused as drafters (for now).
class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::unique_ptr<Model> model, Backend& be, int64_t max_context);
  ~ModelDrafter() override;
  std::string name() const override { return "draft"; }
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t k) override;

 private:
  std::unique_ptr<Model> m_;
  Backend& be_;
  std::unique_ptr<KvPool> pool_;
  KvSequence seq_;
  std::vector<float> logits_;
};

// "ngram" → an NgramDrafter; "draft:PATH" → a ModelDrafter of the model at PATH ("draft:" alone:
// the embedded default model) on `be`, for contexts up to `max_context`, checked against
// `target` (same vocabulary). Throws basalt::Error naming the drafters there are for anything
// else.
std::unique_ptr<Drafter> make_drafter(const std::string& spec, Backend& be, const Model& target,
                                      int64_t max_context);

}  // namespace basalt
