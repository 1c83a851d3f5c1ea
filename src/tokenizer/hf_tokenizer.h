// HfTokenizer: the HF `tokenizers` pipeline with a BPE model: added tokens are split out,
// each remaining piece is normalized, pre-tokenized and run through BPE; add_special wraps
// the result in the configured BOS/EOS. Built from tokenizer.json (tokenizer_json.cpp) or
// from a GGUF "gpt2" vocabulary (tokenizer_gguf.cpp). Internal to src/tokenizer.
#pragma once
#include <memory>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace basalt::tok {

struct HfPipeline {
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;  // may be null
  AddedTokens added;
  PostProcessor post;  // what add_special adds
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string type_name;
};

class HfTokenizer : public Tokenizer {
 public:
  explicit HfTokenizer(HfPipeline p);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::string type_name() const override { return p_.type_name; }
  bool is_special(int32_t id) const override;
  std::string piece(int32_t id) const override;
  int32_t piece_to_id(std::string_view piece) const override;

 private:
  HfPipeline p_;
  int32_t vocab_size_ = 0;
};

}  // namespace basalt::tok
