// SpmTokenizer: SentencePiece-style BPE with byte fallback, as llama.cpp runs a GGUF "llama"
// vocabulary (and llama2.c its tokenizer.bin): pieces with scores, the best-scoring adjacent
// pair merged first. Internal to src/tokenizer.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/flat_map.h"
#include "tokenizer/tokenizer.h"

namespace basalt::tok {

// llama.cpp / GGUF token types.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct SpmVocab {
  std::vector<std::string> pieces;  // "▁the", "<0x0A>", "<s>"
  std::vector<float> scores;        // higher merges first
  std::vector<TokenType> types;
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = true, add_eos = false;
  bool add_space_prefix = true;  // a " " before the text (and after each special token)
};

class SpmTokenizer : public Tokenizer {
 public:
  explicit SpmTokenizer(SpmVocab v);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(v_.pieces.size()); }
  std::string type_name() const override { return "SentencePiece BPE"; }
  bool is_special(int32_t id) const override;
  std::string piece(int32_t id) const override;
  int32_t piece_to_id(std::string_view piece) const override;

 private:
  // Text with spaces already turned into "▁".
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  int32_t mergeable_id(std::string_view s) const;  // normal / user-defined piece, else -1

  SpmVocab v_;
  StringIdMap piece_to_id_;  // over v_.pieces
  int32_t byte_ids_[256];
  AddedTokens added_;  // control + unknown (special), user-defined (always matched)
};

}  // namespace basalt::tok
