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
  // Drafters that read the target's hidden states (MTP): every target pass of the sequence
  // then keeps them (Model::forward keep_hidden) and is shown to observe(): `tokens` ran at
  // positions [first, first + size) and `hidden` holds their final hidden states (the target's
  // hidden_rows() from this sequence's first row on); `final`: they are the text (a prefill
  // chunk, a plain decode step), not drafts still to be verified. A pass at a position already
  // seen replaces what followed it; a pass past what was seen (a prefix from the cache) starts
  // the drafter afresh there.
  virtual bool wants_hidden() const { return false; }
  virtual void observe(const void* hidden, std::span<const int32_t> tokens, int64_t first,
                       bool final) {
    (void)hidden, (void)tokens, (void)first, (void)final;
  }
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
// run yet are run; the KV of its own proposals is dropped after each call). A draft model with
// recurrent state (Qwen3.5, Qwen3-Next) keeps a copy of its state after each call's history
// in a second slot and goes back to it at the next call.
class ModelDrafter final : public Drafter {
 public:
  // `pool`: a KV pool of the draft model that several drafters share (one sequence each, two
  // state slots for a hybrid model); null: a pool of its own for max_context positions.
  ModelDrafter(std::shared_ptr<Model> model, Backend& be, int64_t max_context,
               std::shared_ptr<KvPool> pool = nullptr);
  ~ModelDrafter() override;
  std::string name() const override { return "draft"; }
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t k) override;

 private:
  std::shared_ptr<Model> m_;
  Backend& be_;
  std::shared_ptr<KvPool> pool_;
  KvSequence seq_, spare_;  // spare_: the state copy's slot (models with recurrent state)
  int64_t snap_ = 0;        // the history length the copy belongs to (0: none)
  std::vector<float> logits_;
};

// The MTP head of the target's checkpoint (Model::mtp_head; Qwen3.5, Qwen3-Next): entry i of
// its own KV cache joins token i + 1 with the target's final hidden state at position i, and
// predicts token i + 2. Entries follow the text as the target's passes reveal it (a prefill's
// rows at once, a verification's once the history says which drafts stood); a draft of k
// tokens runs the entry of the last emitted token, then k - 1 entries that feed the head its
// own output hidden state in place of the target's (greedy; their KV is dropped afterwards).
class MtpDrafter final : public Drafter {
 public:
  // `head`: the target's Model::mtp_head(); `pool`: a KV pool of the head that several drafters
  // share (one sequence each); null: a pool of its own for max_context positions.
  MtpDrafter(std::shared_ptr<Model> head, Backend& be, int64_t max_context,
             std::shared_ptr<KvPool> pool = nullptr);
  ~MtpDrafter() override;
  std::string name() const override { return "mtp"; }
  bool wants_hidden() const override { return true; }
  void observe(const void* hidden, std::span<const int32_t> tokens, int64_t first,
               bool final) override;
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t k) override;

 private:
  // Runs the entries whose next token is known (known_) from the staged hidden rows; returns
  // how many ran (then *next: the last one's argmax, hidden_: its output hidden state).
  int64_t catch_up(int32_t* next);
  void reserve_rows(int64_t rows);  // staged_ capacity
  void restart(int64_t at);  // entries start afresh at position `at`
  int64_t end() const { return offset_ + seq_.length; }  // the first position without an entry
  std::shared_ptr<Model> head_;
  Backend& be_;
  std::shared_ptr<KvPool> pool_;
  KvSequence seq_;      // entry i of the head's cache is position offset_ + i
  int64_t offset_ = 0;  // (positions are relative under RoPE: an offset changes nothing)
  int64_t E_ = 0;
  float* staged_ = nullptr;  // [cap_, E] f32, backend memory: the target's hidden states at
  int64_t cap_ = 0, n_staged_ = 0;  // positions end() … end() + n_staged_ - 1
  float* hidden_ = nullptr;         // [1, E]: the head's last output hidden state
  std::vector<int32_t> known_;      // the text as far as the drafter knows it
  std::vector<float> logits_;
};

// "ngram" → an NgramDrafter; "mtp" → an MtpDrafter of the target's own MTP head;
// "draft:PATH" → a ModelDrafter of the model at PATH ("draft:" alone: the embedded default
// model) on `be`, for contexts up to `max_context`, checked against `target` (same
// vocabulary). Throws basalt::Error naming the drafters there are for anything else.
std::unique_ptr<Drafter> make_drafter(const std::string& spec, Backend& be, const Model& target,
                                      int64_t max_context);
// The model of a "draft:PATH" spec ("draft:" alone: the embedded default model), checked
// against `target` (same vocabulary).
std::unique_ptr<Model> load_draft_model(const std::string& spec, const Model& target);
// The target's MTP head (Model::mtp_head); throws basalt::Error when the checkpoint has none.
std::unique_ptr<Model> require_mtp_head(const Model& target);

}  // namespace basalt
