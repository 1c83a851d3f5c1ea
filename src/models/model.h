// A decoder-only transformer loaded from a checkpoint: its configuration, its weights (views
// into the checkpoint's mmap where the dtype allows, converted copies otherwise) and the
// forward pass shared by every architecture (models/transformer.cpp). Each architecture
// file (llama.cpp, qwen3.cpp) only reads its config and names its tensors.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "kv/kv_pool.h"
#include "memory/planner.h"
#include "ops/backend.h"

namespace basalt {

struct RopeConfig {
  float theta = 10000.0f;
  int64_t dim = 0;  // rotated dims per head (≤ head_dim)
  RopeStyle style = RopeStyle::NeoX;
  std::string scaling = "none";  // "none" | "linear" | "llama3"
  float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
  int64_t original_max_position = 8192;
  std::vector<float> freq_factors;  // GGUF rope_freqs.weight (divides the frequencies)
};

// Gated DeltaNet (linear attention) sizes of hybrid models (Qwen3.5, Qwen3-Next).
struct GdnConfig {
  int64_t k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0, conv_kernel = 0;
  bool interleaved = false;  // Qwen3-Next's in_proj_qkvz / in_proj_ba (regrouped at load)
  int64_t key_dim() const { return k_heads * k_dim; }
  int64_t value_dim() const { return v_heads * v_dim; }
  int64_t channels() const { return 2 * key_dim() + value_dim(); }
};

// Mixture-of-experts feed-forward sizes (Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE).
struct MoeConfig {
  int64_t n_experts = 0, top_k = 0, intermediate = 0;
  bool norm_topk = false;
  int64_t shared_intermediate = 0;  // 0: no shared expert
};

struct ModelConfig {
  std::string arch;      // "llama" | "qwen3" | "qwen3_moe" | "qwen3_next" | "qwen3_5"
  std::string hf_class;  // e.g. "LlamaForCausalLM"
  int64_t vocab = 0, hidden = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0,
          intermediate = 0, max_context = 0;
  float rms_eps = 1e-6f;
  bool tied_embeddings = false;
  bool qk_norm = false;
  bool attention_bias = false;
  RopeConfig rope;
  std::vector<int32_t> eos_ids;  // from generation_config / config / GGUF
  int32_t bos_id = -1;
  // Hybrid and MoE models. Per layer: Gated DeltaNet instead of attention / MoE instead of
  // the dense MLP (empty: none).
  std::vector<bool> linear_layers, moe_layers;
  GdnConfig gdn;
  MoeConfig moe;
  bool attn_output_gate = false;    // q_proj also yields a per-head sigmoid gate (Qwen3.5/Next)
  bool zero_centred_norms = false;  // RMSNorms scale by (1 + w) (Qwen3.5/Next)
  std::string tensor_prefix = "model.";  // "model.language_model." in multimodal checkpoints
  // Multi-token-prediction layers the config announces (Qwen3.5 mtp_num_hidden_layers, Qwen3-Next
  // num_nextn_predict_layers); their weights, when the checkpoint has them: ModelWeights::mtp.
  int64_t mtp_layers = 0;

  bool is_linear(int64_t l) const { return !linear_layers.empty() && linear_layers[size_t(l)]; }
  bool is_moe(int64_t l) const { return !moe_layers.empty() && moe_layers[size_t(l)]; }
  int64_t n_attention_layers() const;  // layers with a KV cache
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;  // [E], [E], [D], [D]
  WeightRef wq, wk, wv, wo;                                // [H·D, E] [Hkv·D, E] … [E, H·D]
  WeightRef wq_gate;                                       // gated attention: [H·D, E]
  std::vector<float> bq, bk, bv, bo;                       // optional biases
  WeightRef w_gate, w_up, w_down;                          // [F, E] [F, E] [E, F]
  // Gated DeltaNet: projections [C, E] [Vd, E] [Hv, E] [Hv, E], out [E, Vd]; conv [C, K].
  WeightRef gdn_qkv, gdn_z, gdn_b, gdn_a, gdn_out;
  std::vector<float> gdn_conv, gdn_A_log, gdn_dt_bias, gdn_norm;
  // MoE: router [n_experts, E], experts, shared expert (+ its gate [1, E]).
  WeightRef router, shared_gate, shared_up, shared_down, shared_router;
  std::vector<WeightRef> ex_gate, ex_up, ex_down;
};

// The MTP head of Qwen3.5 / Qwen3-Next checkpoints (mtp.*; docs/speculative.md): the next
// token's embedding and the model's final hidden state, each RMS-normed, are joined by fc
// ([E, 2E], kept here as its two [E, E] halves) into one full-attention decoder layer, whose
// output after `norm` goes through the model's LM head.
struct MtpWeights {
  WeightRef fc_embed, fc_hidden;  // fc.weight[:, :E] (embedding half), fc.weight[:, E:]
  std::vector<float> norm_embed, norm_hidden, norm;  // pre_fc_norm_embedding/_hidden, norm
  LayerWeights layer;                                // mtp.layers.0
  bool moe = false;                                  // the layer's feed-forward is MoE
};

struct ModelWeights {
  WeightRef embed;  // [V, E]
  std::vector<float> out_norm;
  WeightRef lm_head;  // [V, E] (the embedding when tied)
  std::vector<LayerWeights> layers;
  std::shared_ptr<const MtpWeights> mtp;     // null: the checkpoint has no (usable) MTP head
  std::vector<std::shared_ptr<void>> owned;  // converted copies (e.g. F64 → F32)
};

class Model {
 public:
  Model(ModelConfig cfg, ModelWeights w, io::Checkpoint ckpt);

  const ModelConfig& config() const { return cfg_; }
  const io::Checkpoint& checkpoint() const { return ckpt_; }
  const ModelWeights& weights() const { return w_; }  // as loaded (host memory)
  int64_t param_count() const;
  // Bytes one decode step must read: every weight matrix once, one embedding row, and the K/V
  // of `context` positions (`kv_row_bytes` per position and KV head, keys and values each;
  // 0: f32). The numerator of the bandwidth roofline.
  int64_t decode_bytes(int64_t context, size_t kv_row_bytes = 0) const;
  // Floating-point operations of one token at position `context` (matmuls + attention).
  double token_flops(int64_t context) const;
  std::string weight_dtypes() const;  // e.g. "BF16 (matrices), F32 (norms)"

  // One pass over several sequences (continuous batching): each item's tokens sit at
  // positions [seq.length, seq.length + n) of its sequence; the rows of all items run
  // together. K/V of the new rows go into the pool (the caller has reserved the blocks) and
  // are committed. Logits: for each item in order, all its rows (all_logits) or its last
  // row, [rows, V] in `logits`. A row's result does not depend on the other rows.
  struct BatchItem {
    KvSequence* seq = nullptr;
    std::span<const int32_t> tokens;
    bool all_logits = false;
    // Hybrid models: empty, or a state slot per token (-1: none) that gets the sequence's
    // recurrent and conv state as they are after that token (PassRows::snaps): a verification
    // pass's rollback points.
    std::span<const int32_t> snaps = {};
  };
  // With `argmax` (rows entries), argmax[r] = the index of row r's largest logit (lowest on
  // ties), computed where the logits are: a device backend then does not copy the logits back
  // (`logits` is left unspecified), which is what greedy decoding needs.
  // keep_hidden: every row's final hidden state (after the final norm, the LM head's input)
  // stays readable at hidden_rows() until the next keep_hidden pass.
  void forward(Backend& be, KvPool& pool, std::span<const BatchItem> batch, float* logits,
               int32_t* argmax = nullptr, bool keep_hidden = false);
  // One sequence: reserves its blocks (throws when the pool is full), then runs the pass.
  void forward(Backend& be, KvPool& pool, KvSequence& seq, std::span<const int32_t> tokens,
               float* logits, bool all_logits, int32_t* argmax = nullptr, bool keep_hidden = false,
               std::span<const int32_t> snaps = {});
  // The last keep_hidden pass's final hidden states, [T, E] in the backend's memory and
  // act_dtype(), the rows in the pass's order; with taps set (below), the tapped rows instead.
  const void* hidden_rows() const { return hidden_; }
  // Taps for DSpark drafters: with layers set, keep_hidden passes keep for each row the
  // residual stream after each of these layers (-1: the embedding output), concatenated in
  // this order, [T, taps · E] f32 at hidden_rows(), instead of the final hidden state. Layer
  // ids ascend in [-1, n_layers - 2] (transformers' output_hidden_states[l + 1]; its last
  // entry is after the final norm, so the last layer is not offered).
  void set_taps(std::vector<int64_t> layers);
  const std::vector<int64_t>& taps() const { return taps_; }
  // Bytes of one row of hidden_rows() on `be`.
  size_t hidden_row_bytes(const Backend& be) const;

  // DSpark backbones (src/engine/dspark.h). forward_context: rows at positions
  // [seq.length, seq.length + n) whose K/V in every layer come from `ctx` ([n, E], act_dtype,
  // backend memory: the drafter's projected target features; no input norm, no attention, no
  // output); `tokens`: the text at those positions (the pool's bookkeeping).
  void forward_context(Backend& be, KvPool& pool, KvSequence& seq, std::span<const int32_t> tokens,
                       const void* ctx);
  // forward_block: a pass of `tokens` (all logits, hidden rows kept) whose rows attend as one
  // non-causal block: each sees every key up to the block's last position
  // (Backend::supports_block_attention).
  void forward_block(Backend& be, KvPool& pool, KvSequence& seq, std::span<const int32_t> tokens,
                     float* logits);

  // The MTP head as a model of its own (one decoder layer; the embedding and LM head are this
  // model's, shared on a backend where this model is bound), or null when the checkpoint has
  // none. Its passes take, besides the tokens, one hidden state per row (f32, backend memory):
  // row i = this model's final hidden state at the position before token i.
  std::unique_ptr<Model> mtp_head() const;
  bool is_mtp_head() const { return mtp_in_ != nullptr; }
  void forward_mtp(Backend& be, KvPool& pool, KvSequence& seq, std::span<const int32_t> tokens,
                   const float* hidden, float* logits, bool all_logits, int32_t* argmax,
                   bool keep_hidden);
  // The block size a pool on `be` takes for a requested `block_size`: rounded up to the
  // backend's block multiple (64 on CUDA).
  static int64_t kv_block_size(const Backend& be, int64_t block_size = 16);
  // A pool for `tokens` positions in the backend's memory and KV dtype, in blocks of
  // kv_block_size(be, block_size).
  // Hybrid models also get `max_seqs` recurrent-state slots (sequences alive at once) and
  // `snapshots` state snapshots for the prefix cache (-1: twice max_seqs; kv/kv_pool.h).
  std::unique_ptr<KvPool> new_kv_pool(Backend& be, int64_t tokens, int64_t block_size = 16,
                                      int64_t max_seqs = 4, int64_t snapshots = -1) const;
  // Copies recurrent-state slot `src` to `dst` in every state layer (hybrid models; queued on
  // the backend like an op).
  void copy_state(Backend& be, KvPool& pool, int32_t dst, int32_t src);
  // After a verification pass whose rejected rows were truncated away: the sequence's state
  // becomes rollback point `point` (BatchItem::snaps: the state after its last kept row), and a
  // sequence now ending on a block boundary keeps that state for the prefix cache as a pass of
  // `kept` rows ending there would.
  void roll_back_state(Backend& be, KvPool& pool, KvSequence& seq, int32_t point, int64_t kept);
  // Slot `slot`'s conv and recurrent state in every state layer, copied to the host (tests).
  std::vector<uint8_t> state_bytes(Backend& be, KvPool& pool, int32_t slot) const;
  // Makes the weights resident in the backend's memory (forward does it on first use).
  void bind(Backend& be);
  // Bytes of the scratch arena of the largest pass run so far (forward grows it on demand).
  size_t scratch_bytes() const { return scratch_bytes_; }
  // The intermediates of one pass of T rows (`rows` needing logits) on `be`, as a program for
  // the scratch planner, and its plan described (peak, lower bound, naive sum, offsets).
  memory::Program scratch_program(const Backend& be, int64_t T, int64_t rows) const;
  std::string scratch_report(const Backend& be, int64_t T, int64_t rows) const;
  // Load-time capability check: throws, naming the tensor, if the backend cannot run one of
  // this model's weights (ARCHITECTURE.md: fail at load, never mid-request).
  void check_backend(const Backend& be) const;

 private:
  // The weights as one backend uses them (pointers into its memory).
  struct BoundLayer {
    const float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
    WeightRef wq, wk, wv, wo, wq_gate, w_gate, w_up, w_down;
    WeightRef gdn_qkv, gdn_z, gdn_b, gdn_a, gdn_out;
    const float *gdn_conv = nullptr, *gdn_A_log = nullptr, *gdn_dt_bias = nullptr,
                *gdn_norm = nullptr;
    WeightRef router, shared_gate, shared_up, shared_down, shared_router;
    std::vector<WeightRef> ex_gate, ex_up, ex_down;
    int64_t cache_layer = -1;  // index of this layer's KV (attention) or state (GDN) arrays
  };
  struct Bound {
    uint64_t backend = 0;  // Backend::id()
    WeightRef embed, lm_head;
    WeightRef fc_embed, fc_hidden;  // MTP head
    const float *norm_embed = nullptr, *norm_hidden = nullptr;
    const float* out_norm = nullptr;
    const float* inv_freq = nullptr;
    std::vector<BoundLayer> layers;
  };
  // Scratch of one pass in backend memory: one arena, offsets per intermediate.
  struct Scratch {
    uint64_t backend = 0;
    Backend* be = nullptr;
    void* arena = nullptr;
    int64_t T = 0, rows = 0;  // capacity: rows of the pass, rows of logits
    uint64_t generation = 0;  // bumps when the arena moves
    float *x = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *gate = nullptr,
          *up = nullptr, *cos = nullptr, *sin = nullptr, *logits = nullptr;
    // hybrid / MoE: attention gate, GDN projections and output, router logits, shared expert
    float *qgate = nullptr, *mix = nullptr, *z = nullptr, *gb = nullptr, *ga = nullptr,
          *gout = nullptr, *rlog = nullptr, *shared = nullptr, *sgate = nullptr;
    int32_t* argmax = nullptr;
    void *xn = nullptr, *att = nullptr, *act = nullptr;
  };
  void ensure_scratch(Backend& be, int64_t T, int64_t rows);
  // Rows [first, T) go past the K/V projections, RoPE and the cache write (all T rows).
  void attention_block(Backend& be, KvPool& pool, const BoundLayer& L, int64_t T, float scale,
                       int64_t first = 0);
  void gdn_block(Backend& be, KvPool& pool, const BoundLayer& L, int64_t T);
  void moe_block(Backend& be, const BoundLayer& L, int64_t T);
  ModelConfig cfg_;
  ModelWeights w_;
  io::Checkpoint ckpt_;
  // MTP head: its input weights, the model it belongs to (whose bound embedding and LM head it
  // uses) and the hidden rows of the pass being run.
  std::shared_ptr<const MtpWeights> mtp_in_;
  const Model* base_ = nullptr;
  const float* mtp_hidden_ = nullptr;
  std::vector<int64_t> taps_;  // set_taps
  bool block_ = false;         // forward_block's pass is running
  // keep_hidden passes' output (backend memory).
  void* hidden_ = nullptr;
  uint64_t hidden_be_ = 0;  // Backend::id() of hidden_
  size_t hidden_bytes_ = 0;
  std::vector<float> inv_freq_;  // [rope.dim / 2]
  Bound bound_;
  Scratch scratch_;
  size_t scratch_bytes_ = 0;
  std::vector<int64_t> pos_, table_sizes_;
  std::vector<int32_t> ids_;
  std::vector<const int32_t*> tables_;
  std::vector<int32_t> slots_, snaps_;
};

// Opens the checkpoint at path ("" = embedded default model) and builds the model.
// Throws basalt::Error naming the file and the problem for every bad input.
std::unique_ptr<Model> model_load(const std::string& path);
std::unique_ptr<Model> model_from_checkpoint(io::Checkpoint ckpt);
// The decoder layers of a DSpark drafter's checkpoint (Qwen3DSparkModel: Qwen3 layers, tensor
// names without "model."; its other tensors are the drafter's, src/engine/dspark.h).
std::unique_ptr<Model> dspark_backbone(io::Checkpoint ckpt);

}  // namespace basalt
