// An HF tokenizer.json as GGUF tokenizer metadata, the way llama.cpp's convert_hf_to_gguf.py
// writes byte-level BPE vocabularies (tokenizer.ggml.model "gpt2"), for `basalt quantize`.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "io/gguf_write.h"

namespace basalt::tok {

// tokenizer.ggml.{model, pre, tokens, token_type, merges, bos/eos/eot/padding_token_id,
// add_bos_token, add_eos_token} and tokenizer.chat_template[.NAME] for vocab_size tokens (ids
// the tokenizer lacks become "[PAD<id>]", type UNUSED). pre: "llama-bpe", "qwen2" or "gpt-2",
// recognised from the pre-tokenizer's regex. eos: the tokenizer's, else eos_ids[0]; eot: the
// first of eos_ids that differs (basalt's GGUF loader stops on both). The result is checked:
// basalt's GGUF tokenizer built from it must encode sample texts as tokenizer.json does.
// Throws "[tokenizer] ..." for tokenizers GGUF "gpt2" cannot hold (e.g. SentencePiece-style
// byte_fallback BPE).
io::GgufMetadata gguf_vocab_from_json(const nlohmann::json& tokenizer_json,
                                      const nlohmann::json& tokenizer_config, int64_t vocab_size,
                                      const std::vector<int32_t>& eos_ids);

}  // namespace basalt::tok
