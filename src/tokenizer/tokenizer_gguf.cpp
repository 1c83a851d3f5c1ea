// tokenizer_from_gguf: GGUF tokenizer.ggml.* metadata -> SpmTokenizer ("llama") or an
// HfTokenizer pipeline equivalent to llama.cpp's for "gpt2" vocabularies.
#include <memory>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/spm.h"

namespace basalt::tok {

const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// Metadata readers with tokenizer-specific messages (the variant is read directly so that
// a wrongly typed key names the key).
const io::GgufArray* meta_array(const io::GgufFile& g, const std::string& key, bool required) {
  auto it = g.metadata.find(key);
  if (it == g.metadata.end()) {
    if (required) fail("[tokenizer] {}: missing GGUF key {}", g.name, key);
    return nullptr;
  }
  const auto* a = std::get_if<io::GgufArray>(&it->second.v);
  if (!a) fail("[tokenizer] {}: GGUF key {} is not an array", g.name, key);
  return a;
}

std::string meta_string(const io::GgufFile& g, const std::string& key, const std::string& def) {
  auto it = g.metadata.find(key);
  if (it == g.metadata.end()) return def;
  const auto* s = std::get_if<std::string>(&it->second.v);
  if (!s) fail("[tokenizer] {}: GGUF key {} is not a string", g.name, key);
  return *s;
}

int64_t meta_int(const io::GgufFile& g, const std::string& key, int64_t def) {
  auto it = g.metadata.find(key);
  if (it == g.metadata.end()) return def;
  const auto& v = it->second.v;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<int64_t>(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  fail("[tokenizer] {}: GGUF key {} is not an integer", g.name, key);
}

double value_number(const io::GgufFile& g, const io::GgufValue& v, const char* key) {
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v.v)) return static_cast<double>(*i);
  fail("[tokenizer] {}: GGUF key {} holds a non-number", g.name, key);
}

const std::string& value_string(const io::GgufFile& g, const io::GgufValue& v, const char* key) {
  const auto* s = std::get_if<std::string>(&v.v);
  if (!s) fail("[tokenizer] {}: GGUF key {} holds a non-string", g.name, key);
  return *s;
}

struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<float> scores;
};

GgufVocab read_vocab(const io::GgufFile& g) {
  GgufVocab v;
  const auto& toks = *meta_array(g, "tokenizer.ggml.tokens", true);
  v.tokens.reserve(toks.size());
  for (const auto& t : toks) v.tokens.push_back(value_string(g, t, "tokenizer.ggml.tokens"));
  v.types.assign(toks.size(), TokenType::Normal);
  if (const auto* types = meta_array(g, "tokenizer.ggml.token_type", false)) {
    if (types->size() != toks.size())
      fail("[tokenizer] {}: {} token types for {} tokens", g.name, types->size(), toks.size());
    for (size_t i = 0; i < types->size(); ++i)
      v.types[i] = static_cast<TokenType>(
          static_cast<int32_t>(value_number(g, (*types)[i], "tokenizer.ggml.token_type")));
  }
  v.scores.assign(toks.size(), 0.0f);
  if (const auto* scores = meta_array(g, "tokenizer.ggml.scores", false)) {
    if (scores->size() != toks.size())
      fail("[tokenizer] {}: {} scores for {} tokens", g.name, scores->size(), toks.size());
    for (size_t i = 0; i < scores->size(); ++i)
      v.scores[i] = static_cast<float>(value_number(g, (*scores)[i], "tokenizer.ggml.scores"));
  }
  return v;
}

int32_t meta_token_id(const io::GgufFile& g, const char* key, size_t n_tokens) {
  int64_t id = meta_int(g, key, -1);
  // llama.cpp writes UINT32_MAX (LLAMA_TOKEN_NULL) for "no such token".
  if (id == int64_t(UINT32_MAX) || id < 0) return -1;
  if (id >= static_cast<int64_t>(n_tokens))
    fail("[tokenizer] {}: {} = {} is past the vocabulary ({} tokens)", g.name, key, id, n_tokens);
  return static_cast<int32_t>(id);
}

std::unique_ptr<Tokenizer> spm_from_gguf(const io::GgufFile& g) {
  GgufVocab gv = read_vocab(g);
  SpmVocab v;
  size_t n = gv.tokens.size();
  v.bos_id = meta_token_id(g, "tokenizer.ggml.bos_token_id", n);
  v.eos_id = meta_token_id(g, "tokenizer.ggml.eos_token_id", n);
  v.unk_id = meta_token_id(g, "tokenizer.ggml.unknown_token_id", n);
  v.pad_id = meta_token_id(g, "tokenizer.ggml.padding_token_id", n);
  v.add_bos = meta_int(g, "tokenizer.ggml.add_bos_token", 1) != 0;  // llama.cpp's defaults
  v.add_eos = meta_int(g, "tokenizer.ggml.add_eos_token", 0) != 0;
  v.add_space_prefix = meta_int(g, "tokenizer.ggml.add_space_prefix", 1) != 0;
  v.pieces = std::move(gv.tokens);
  v.scores = std::move(gv.scores);
  v.types = std::move(gv.types);
  return std::make_unique<SpmTokenizer>(std::move(v));
}

// tokenizer.ggml.pre -> the HF pre-tokenizer regex llama.cpp uses for it.
struct PreConfig {
  std::string regex;
  bool nfc = false;            // HF Qwen2 normalizes to NFC (llama.cpp does not)
  bool ignore_merges = false;  // HF Llama 3
};

PreConfig pre_config(const io::GgufFile& g, const std::string& pre) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3")
    return {kLlama3Regex, false, true};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return {kQwen2Regex, true, false};
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") return {kGpt2Regex, false, false};
  fail(
      "[tokenizer] {}: unsupported tokenizer.ggml.pre '{}' (basalt knows llama-bpe, llama3, "
      "qwen2, default, gpt2)",
      g.name, pre);
}

std::unique_ptr<Tokenizer> bpe_from_gguf(const io::GgufFile& g) {
  PreConfig pc = pre_config(g, meta_string(g, "tokenizer.ggml.pre", "default"));
  GgufVocab gv = read_vocab(g);
  size_t n = gv.tokens.size();
  HfPipeline p;
  p.type_name = "byte-level BPE";
  for (size_t i = 0; i < n; ++i) {
    TokenType t = gv.types[i];
    if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) {
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = gv.tokens[i];
      a.special = t != TokenType::UserDefined;
      p.added.add(std::move(a));
    }
  }
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(n);
  for (size_t i = 0; i < n; ++i) vocab.emplace_back(std::move(gv.tokens[i]), int32_t(i));
  BpeOptions opt;
  opt.ignore_merges = pc.ignore_merges;
  p.model = std::make_unique<BpeModel>(std::move(vocab), opt);
  if (const auto* merges = meta_array(g, "tokenizer.ggml.merges", false)) {
    for (const auto& m : *merges) {
      const std::string& s = value_string(g, m, "tokenizer.ggml.merges");
      size_t sp = s.find(' ', 1);  // a part may itself start with ' ' in some vocabularies
      if (sp == std::string::npos) fail("[tokenizer] {}: bad merge '{}'", g.name, s);
      p.model->add_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1));
    }
  }
  if (pc.nfc) p.normalizer = normalizer_nfc();
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  parts.push_back(pre_tokenizer_split_isolated(pc.regex));
  parts.push_back(pre_tokenizer_byte_level(false, false));
  p.pre_tokenizer = pre_tokenizer_sequence(std::move(parts));
  p.decoder = decoder_byte_level();
  p.bos_id = meta_token_id(g, "tokenizer.ggml.bos_token_id", n);
  p.eos_id = meta_token_id(g, "tokenizer.ggml.eos_token_id", n);
  p.pad_id = meta_token_id(g, "tokenizer.ggml.padding_token_id", n);
  if (meta_int(g, "tokenizer.ggml.add_bos_token", 0) && p.bos_id >= 0)
    p.post.prefix.push_back(p.bos_id);
  if (meta_int(g, "tokenizer.ggml.add_eos_token", 0) && p.eos_id >= 0)
    p.post.suffix.push_back(p.eos_id);
  return std::make_unique<HfTokenizer>(std::move(p));
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const io::GgufFile& g) {
  std::string model = meta_string(g, "tokenizer.ggml.model", "");
  if (model == "llama") return spm_from_gguf(g);
  if (model == "gpt2") return bpe_from_gguf(g);
  if (model.empty()) fail("[tokenizer] {}: no GGUF vocabulary (tokenizer.ggml.model)", g.name);
  fail("[tokenizer] {}: unsupported tokenizer.ggml.model '{}' (basalt knows llama, gpt2)", g.name,
       model);
}

}  // namespace basalt::tok
