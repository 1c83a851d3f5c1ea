// BpeModel: the "BPE" model of HF tokenizers. A pre-token (one word) becomes ids by splitting
// it into characters and applying merges lowest rank first (leftmost on ties), as HF's
// Word::merge_all does. Internal to src/tokenizer.
#pragma once
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/flat_map.h"

namespace basalt::tok {

struct BpeOptions {
  bool ignore_merges = false;  // a pre-token already in the vocab maps to that id (Llama 3)
  bool byte_fallback = false;  // an unknown character becomes <0xNN> tokens
  bool fuse_unk = false;       // consecutive unknown characters give one unk token
  std::string unk_token;       // "" = none: unknown characters are dropped (as HF)
};

class BpeModel {
 public:
  // vocab[i] = (token string, id). Ids need not be dense.
  BpeModel(std::vector<std::pair<std::string, int32_t>> vocab, BpeOptions opt);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Merges in rank order (rank = call order). Throws if a part or the result is not in the
  // vocabulary (HF refuses such files too).
  void add_merge(std::string_view a, std::string_view b);
  void reserve_merges(size_t n) { merges_.reserve(n); }

  // Appends the ids of one pre-token.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  int32_t token_to_id(std::string_view s) const;  // -1 if absent
  // "" for an id the model does not have.
  const std::string& id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  bool byte_fallback() const { return opt_.byte_fallback; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  BpeOptions opt_;
  int32_t unk_id_ = -1;
  std::vector<std::string> id_to_token_;  // index = id; never resized after construction
  StringIdMap token_to_id_;               // over id_to_token_
  PairMap merges_;                        // (left id << 32 | right id) -> (rank, new id)
  int32_t byte_ids_[256];                 // <0xNN> ids, -1 when absent

  // Pre-token -> ids. Text repeats words a lot (HF caches the same way).
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace basalt::tok
