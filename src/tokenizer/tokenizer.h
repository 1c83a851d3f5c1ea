// Tokenizer: text <-> token ids. Two families: byte-level BPE (tokenizer.json, GPT-2 style:
// Qwen, Llama 3) and SentencePiece-style BPE with byte fallback (GGUF "llama" vocab,
// tokenizer.json BPE with byte_fallback as in Llama 2 HF repos).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint.h"

namespace basalt::tok {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special: add BOS/EOS the way the tokenizer's config says (add_bos_token, the
  // post-processor template, GGUF add_bos_token), like HF add_special_tokens=True.
  // parse_special: text like "<|im_start|>" becomes the special token; otherwise it is
  // tokenized as plain text. Throws basalt::Error("[tokenizer] input is not valid UTF-8 ...").
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // Concatenated bytes of the tokens' text (may be partial UTF-8 for a prefix of a
  // sequence); special tokens are rendered as their text unless skip_special.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual std::string type_name() const = 0;  // "byte-level BPE", "SentencePiece BPE"
  virtual bool is_special(int32_t id) const = 0;
  // The token's vocabulary string as stored (e.g. "Ġthe", "▁the", "<0x0A>").
  virtual std::string piece(int32_t id) const = 0;
  virtual int32_t piece_to_id(std::string_view piece) const = 0;  // -1 if absent

  int32_t bos_id() const { return bos_id_; }  // -1 if none
  int32_t eos_id() const { return eos_id_; }  // -1 if none
  int32_t pad_id() const { return pad_id_; }

 protected:
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
};

// From tokenizer.json (+ tokenizer_config.json for add_bos/eos and the bos/eos token names).
std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& tokenizer_json,
                                               const nlohmann::json& tokenizer_config);
// From GGUF metadata (tokenizer.ggml.model "llama" or "gpt2").
std::unique_ptr<Tokenizer> tokenizer_from_gguf(const io::GgufFile& gguf);
// From an opened checkpoint (whichever of the above it carries); throws if it has none.
std::unique_ptr<Tokenizer> tokenizer_from_checkpoint(const io::Checkpoint& ckpt);
// PATH: model directory, tokenizer.json file, .gguf file (vocab-only included), "" = embedded.
std::unique_ptr<Tokenizer> tokenizer_load(const std::string& path);

// Turns a stream of ids into complete UTF-8 text: bytes of an incomplete character are held
// back until the character is complete (or flushed at the end).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t) : tok_(t) {}
  std::string push(int32_t id);  // text that became complete with this token
  std::string flush();           // whatever remains (invalid bytes as U+FFFD)

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> ids_;
  // Text already returned is decode(ids_[0, read_)); only the window from prefix_ (the start of
  // the previously returned piece) is decoded again, so a token costs O(window), not O(n).
  size_t prefix_ = 0, read_ = 0;
};

}  // namespace basalt::tok
