// The stages of an HF `tokenizers` pipeline (normalizer -> pre-tokenizer -> model ->
// post-processor; decoder for the way back), each built from its tokenizer.json object.
// Internal to src/tokenizer.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace basalt::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

// One piece of pre-tokenized text. at_start: the piece begins at byte 0 of the whole input
// (HF checks the original offset for Metaspace's prepend_scheme "first").
struct PreToken {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

// Decoders rewrite the list of token strings (HF decode_chain); the result is concatenated.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// What add_special adds around a single sequence.
struct PostProcessor {
  std::vector<int32_t> prefix, suffix;
  bool present = false;  // the tokenizer.json had a post-processor adding something
};

// Each returns nullptr for JSON null; throws "[tokenizer] tokenizer.json: unsupported
// normalizer type 'X'" (pre-tokenizer / decoder likewise) for what basalt does not implement.
std::unique_ptr<Normalizer> normalizer_from_json(const nlohmann::json& j);
std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const nlohmann::json& j);
std::unique_ptr<Decoder> decoder_from_json(const nlohmann::json& j);
// token_id resolves a special token's name (TemplateProcessing's "ids" are used first).
PostProcessor post_processor_from_json(const nlohmann::json& j);

// Building blocks for pipelines not described by JSON (GGUF "gpt2" vocabularies).
std::unique_ptr<Normalizer> normalizer_nfc();
std::unique_ptr<PreTokenizer> pre_tokenizer_split_isolated(const std::string& regex);
std::unique_ptr<PreTokenizer> pre_tokenizer_byte_level(bool add_prefix_space, bool use_regex);
std::unique_ptr<PreTokenizer> pre_tokenizer_sequence(
    std::vector<std::unique_ptr<PreTokenizer>> parts);
std::unique_ptr<Decoder> decoder_byte_level();

// The GPT-2 pre-tokenizer regex (ByteLevel use_regex=true).
extern const char* const kGpt2Regex;
// The Llama 3 and Qwen2 Split regexes (GGUF tokenizer.ggml.pre "llama-bpe" and "qwen2").
extern const char* const kLlama3Regex;
extern const char* const kQwen2Regex;

}  // namespace basalt::tok
