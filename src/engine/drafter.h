// Drafters for speculative decoding (docs/speculative.md): each proposes tokens that may follow
// the text so far; the target model verifies them in one pass (Generator::generate), so what a
// drafter proposes changes the speed, never the output.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/dspark.h"
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
  // The most tokens one draft() proposes, and whether its cost grows with k (false: a block
  // drafter, one pass for any k up to max_draft; SpecPolicy then charges drafting per call).
  virtual int64_t max_draft() const { return 64; }
  virtual bool cost_grows_with_k() const { return true; }
  // The target layers whose residual stream `hidden` holds instead (Model::set_taps; DSpark);
  // empty: the final hidden states.
  virtual std::vector<int64_t> taps() const { return {}; }
  virtual void observe(const void* hidden, std::span<const int32_t> tokens, int64_t first,
                       bool final) {
    (void)hidden, (void)tokens, (void)first, (void)final;
  }
};

// The bookkeeping of drafters that read the target's hidden rows (MTP, DSpark): entry i of the
// drafter's own KV cache is position offset_ + i (positions are relative under RoPE: an offset
// changes nothing); the target's rows of positions end() … end() + n_staged_ - 1 wait in
// staged_ (f32, backend memory) until their entries run. A pass at a position already seen
// replaces what followed it; a pass past what was seen (a cached prefix) starts afresh there.
class HiddenStateDrafter : public Drafter {
 public:
  bool wants_hidden() const override { return true; }
  void observe(const void* hidden, std::span<const int32_t> tokens, int64_t first,
               bool final) override;

 protected:
  // row_floats: floats a staged row; act_rows: rows arrive in act_dtype (final hidden states),
  // else as f32 (taps).
  HiddenStateDrafter(Backend& be, std::shared_ptr<KvPool> pool, int64_t row_floats, bool act_rows);
  ~HiddenStateDrafter() override;
  virtual void observed_final() {}  // after an observe() of text (MTP runs what it can)
  // draft()'s start for a history of N tokens (the target's next pass starts with h[N - 1]):
  // entries and staged rows past position N - 2 belong to drafts that were not kept.
  void rewind(int64_t N);
  void restart(int64_t at);  // entries start afresh at position `at`
  void reserve_rows(int64_t rows);
  void drop_staged(int64_t m);  // the first m staged rows have run
  float* staged_row(int64_t i) const { return staged_ + i * row_; }
  int64_t end() const { return offset_ + seq_.length; }  // the first position without an entry

  Backend& be_;
  std::shared_ptr<KvPool> pool_;
  KvSequence seq_;
  int64_t offset_ = 0;
  int64_t row_ = 0;
  bool act_rows_ = false;
  float* staged_ = nullptr;
  int64_t cap_ = 0, n_staged_ = 0;
  std::vector<int32_t> known_;  // the text as far as the drafter knows it
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
  // Drafts for several sequences at once: out[i] = ds[i]->draft(histories[i], ks[i]), the
  // same tokens, with the draft model's passes shared: one pass for every drafter's catch-up,
  // then one of a row per drafter still drafting for each further token. The drafters share
  // one model, backend and pool (the engine's); one whose model has recurrent state, or whose
  // pass cannot be reserved, drafts alone (draft()), and one that fails gets no tokens (its
  // error in errors[i], empty otherwise).
  static std::vector<std::vector<int32_t>> draft_batch(std::span<ModelDrafter* const> ds,
                                                       std::span<const std::span<const int32_t>> hs,
                                                       std::span<const int64_t> ks,
                                                       std::vector<std::string>* errors = nullptr);

 private:
  // The prefix to keep of the drafter's KV for `h` (the shared prefix less one token: the last
  // token runs again so its logits are at hand), truncated to it.
  int64_t keep_for(std::span<const int32_t> h);
  // The length of the prefix the drafter's KV shares with `h`.
  int64_t shared_prefix(std::span<const int32_t> h) const;
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
class MtpDrafter final : public HiddenStateDrafter {
 public:
  // `head`: the target's Model::mtp_head(); `pool`: a KV pool of the head that several drafters
  // share (one sequence each); null: a pool of its own for max_context positions.
  MtpDrafter(std::shared_ptr<Model> head, Backend& be, int64_t max_context,
             std::shared_ptr<KvPool> pool = nullptr);
  ~MtpDrafter() override;
  std::string name() const override { return "mtp"; }
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t k) override;

 private:
  void observed_final() override {
    int32_t next;
    catch_up(&next);
  }
  // Runs the entries whose next token is known (known_) from the staged hidden rows; returns
  // how many ran (then *next: the last one's argmax, hidden_: its output hidden state).
  int64_t catch_up(int32_t* next);
  std::shared_ptr<Model> head_;
  int64_t E_ = 0;
  float* hidden_ = nullptr;  // [1, E]: the head's last output hidden state
  std::vector<float> logits_;
};

// A DSpark block drafter (src/engine/dspark.h): context entries are the target's tapped
// hidden rows projected by fc and hidden_norm (one per position before the anchor, run when a
// draft needs them); a draft runs the block [last token, mask, …] non-causally in one pass,
// then the Markov head's greedy chain; its KV is dropped afterwards. With min_confidence > 0
// the proposal stops before the first slot whose confidence is below it.
class DSparkDrafter final : public HiddenStateDrafter {
 public:
  // `pool`: a KV pool of the head's backbone shared by several drafters; null: its own.
  DSparkDrafter(std::shared_ptr<const DSparkHead> head, Backend& be, int64_t max_context,
                std::shared_ptr<KvPool> pool = nullptr, float min_confidence = 0.0f);
  ~DSparkDrafter() override;
  std::string name() const override { return "dspark"; }
  std::vector<int64_t> taps() const override;
  int64_t max_draft() const override { return head_->block; }
  bool cost_grows_with_k() const override { return false; }
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t k) override;
  // The last block: its base logits [B, V], Markov-corrected logits [B, V], final hidden rows
  // [B, E], tokens and confidences (host f32; tests).
  struct Block {
    std::vector<float> base, step, hidden, confidence;
    std::vector<int32_t> tokens;
  };
  const Block& last_block() const { return block_; }

 private:
  std::shared_ptr<const DSparkHead> head_;
  float min_conf_ = 0.0f;
  WeightRef fc_;                        // the head's fc, resident on be_ (prepared once)
  const float* hidden_norm_ = nullptr;  // likewise
  void* ctx_ = nullptr;                 // [cap, E]: fc · taps, then hidden_norm (act_dtype)
  float* proj_ = nullptr;               // [cap, E] f32
  void* taps_act_ = nullptr;            // [cap, taps·E]: the staged taps in act_dtype (not f32)
  float* block_hidden_ = nullptr;       // [B, E] f32 (backends with their own memory)
  int64_t ctx_cap_ = 0;
  Block block_;
};

// "ngram" → an NgramDrafter; "mtp" → an MtpDrafter of the target's own MTP head;
// "draft:PATH" → a ModelDrafter of the model at PATH ("draft:" alone: the embedded default
// model) on `be`, for contexts up to `max_context`, checked against `target` (same
// vocabulary); "dspark:PATH" → a DSparkDrafter of the drafter at PATH (min_confidence: its
// threshold). Throws basalt::Error naming the drafters there are for anything else.
std::unique_ptr<Drafter> make_drafter(const std::string& spec, Backend& be, const Model& target,
                                      int64_t max_context, float min_confidence = 0.0f);
// The model of a "draft:PATH" spec ("draft:" alone: the embedded default model), checked
// against `target` (same vocabulary).
std::unique_ptr<Model> load_draft_model(const std::string& spec, const Model& target);
// The target's MTP head (Model::mtp_head); throws basalt::Error when the checkpoint has none.
std::unique_ptr<Model> require_mtp_head(const Model& target);
// The drafter of a "dspark:PATH" spec, checked against `target` and `be` (non-causal block
// attention: the CPU and CUDA backends).
std::shared_ptr<DSparkHead> load_dspark(const std::string& spec, const Model& target,
                                        const Backend& be);

}  // namespace basalt
