#include "tokenizer/gguf_vocab.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"

namespace basalt::tok {

namespace {

using nlohmann::json;

// tokenizer.ggml.pre for the pre-tokenizer: a ByteLevel step plus one Split regex that
// llama.cpp names, or ByteLevel with its own (GPT-2) regex.
std::string pre_name(const json& tj) {
  const json pt = tj.value("pre_tokenizer", json());
  std::vector<json> parts;
  if (pt.is_object() && pt.value("type", "") == "Sequence" && pt.contains("pretokenizers"))
    parts = pt["pretokenizers"].get<std::vector<json>>();
  else if (pt.is_object())
    parts.push_back(pt);
  std::vector<std::string> regexes;
  bool byte_level_regex = false;
  for (const json& p : parts) {
    const std::string type = p.value("type", "");
    if (type == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
        p["pattern"].contains("Regex"))
      regexes.push_back(p["pattern"]["Regex"].get<std::string>());
    else if (type == "ByteLevel")
      byte_level_regex = p.value("use_regex", true);
    else
      regexes.push_back("(" + type + ")");
  }
  if (regexes.size() == 1 && !byte_level_regex) {
    if (regexes[0] == kLlama3Regex) return "llama-bpe";
    if (regexes[0] == kQwen2Regex) return "qwen2";
    if (regexes[0] == kGpt2Regex) return "gpt-2";
  }
  if (regexes.empty() && byte_level_regex) return "gpt-2";
  fail(
      "[tokenizer] tokenizer.json: its pre-tokenizer ({}) is not one GGUF names here "
      "(llama-bpe, qwen2, gpt-2)",
      pt.dump().substr(0, 300));
}

// Texts that tell the pre-tokenizers apart: digit runs (Llama 3 groups 3, Qwen2 1, GPT-2 all),
// upper-case contractions (only GPT-2's regex is case-sensitive), NFC (Qwen2), whitespace runs.
const char* const kSamples[] = {
    "Hello world! It'S 2024; isn't it? 3333333 and 1234567890.",
    "\n\n\t  Tabs,   spaces \r\n and new\nlines   ",
    "Cafe\xcc\x81 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 I'LL WE'VE",
};

}  // namespace

io::GgufMetadata gguf_vocab_from_json(const json& tj, const json& tokenizer_config,
                                      int64_t vocab_size, const std::vector<int32_t>& eos_ids) {
  const std::unique_ptr<Tokenizer> tok = tokenizer_from_json(tj, tokenizer_config);
  if (tok->type_name() != "byte-level BPE")
    fail(
        "[tokenizer] tokenizer.json: a {} vocabulary cannot be written to GGUF yet (only "
        "byte-level BPE, GGUF \"gpt2\")",
        tok->type_name());
  const std::string pre = pre_name(tj);
  if (tok->vocab_size() > vocab_size)
    fail("[tokenizer] tokenizer.json has ids up to {}, past the model's vocab_size {}",
         tok->vocab_size() - 1, vocab_size);

  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(size_t(vocab_size), int32_t(TokenType::Unused));
  const json& model = tj.at("model");
  for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= vocab_size)
      fail("[tokenizer] tokenizer.json: token id {} out of range", id);
    tokens[size_t(id)] = it.key();
    types[size_t(id)] = int32_t(TokenType::Normal);
  }
  for (const json& a : tj.value("added_tokens", json::array())) {
    const int64_t id = a.at("id").get<int64_t>();
    if (id < 0 || id >= vocab_size)
      fail("[tokenizer] tokenizer.json: token id {} out of range", id);
    tokens[size_t(id)] = a.at("content").get<std::string>();
    types[size_t(id)] =
        int32_t(a.value("special", false) ? TokenType::Control : TokenType::UserDefined);
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == int32_t(TokenType::Unused)) tokens[i] = fmt::format("[PAD{}]", i);
  std::vector<std::string> merges;
  if (auto it = model.find("merges"); it != model.end() && it->is_array()) {
    merges.reserve(it->size());
    for (const json& mg : *it)
      merges.push_back(mg.is_string()
                           ? mg.get<std::string>()
                           : mg.at(0).get<std::string>() + " " + mg.at(1).get<std::string>());
  }

  io::GgufMetadata m = {
      {"tokenizer.ggml.model", io::gguf_str("gpt2")},
      {"tokenizer.ggml.pre", io::gguf_str(pre)},
      {"tokenizer.ggml.tokens", io::gguf_strs(tokens)},
      {"tokenizer.ggml.token_type", io::gguf_i32s(types)},
      {"tokenizer.ggml.merges", io::gguf_strs(merges)},
  };
  const int32_t bos = tok->bos_id();
  const int32_t eos = tok->eos_id() >= 0 ? tok->eos_id() : eos_ids.empty() ? -1 : eos_ids[0];
  if (bos >= 0) m.emplace_back("tokenizer.ggml.bos_token_id", io::gguf_u32(uint32_t(bos)));
  if (eos >= 0) m.emplace_back("tokenizer.ggml.eos_token_id", io::gguf_u32(uint32_t(eos)));
  for (int32_t id : eos_ids)
    if (id != eos && id >= 0 && id < vocab_size) {
      m.emplace_back("tokenizer.ggml.eot_token_id", io::gguf_u32(uint32_t(id)));
      break;
    }
  if (tok->pad_id() >= 0)
    m.emplace_back("tokenizer.ggml.padding_token_id", io::gguf_u32(uint32_t(tok->pad_id())));
  // What add_special adds around a text: GGUF can say "BOS first" and "EOS last", nothing else.
  const std::vector<int32_t> plain = tok->encode("a", false, false),
                             added = tok->encode("a", true, false);
  const bool add_bos = bos >= 0 && added.size() > plain.size() && added.front() == bos;
  const bool add_eos =
      eos >= 0 && added.size() > plain.size() + size_t(add_bos) && added.back() == eos;
  std::vector<int32_t> expect;
  if (add_bos) expect.push_back(bos);
  expect.insert(expect.end(), plain.begin(), plain.end());
  if (add_eos) expect.push_back(eos);
  if (expect != added)
    fail("[tokenizer] tokenizer.json: its post-processor adds tokens GGUF cannot describe");
  m.emplace_back("tokenizer.ggml.add_bos_token", io::gguf_bool(add_bos));
  m.emplace_back("tokenizer.ggml.add_eos_token", io::gguf_bool(add_eos));
  if (auto it = tokenizer_config.find("chat_template"); it != tokenizer_config.end()) {
    if (it->is_string()) {
      m.emplace_back("tokenizer.chat_template", io::gguf_str(it->get<std::string>()));
    } else if (it->is_array()) {  // [{"name": ..., "template": ...}]
      for (const json& t : *it) {
        const std::string name = t.value("name", "");
        m.emplace_back(
            name == "default" ? "tokenizer.chat_template" : "tokenizer.chat_template." + name,
            io::gguf_str(t.value("template", "")));
      }
    }
  }

  // The check: basalt's reader of this metadata must tokenize like tokenizer.json.
  io::GgufFile g;
  g.name = "tokenizer.json as GGUF";
  for (const auto& [k, v] : m) g.metadata.emplace(k, v);
  const std::unique_ptr<Tokenizer> back = tokenizer_from_gguf(g);
  for (const char* text : kSamples)
    if (back->encode(text, true, true) != tok->encode(text, true, true))
      fail(
          "[tokenizer] tokenizer.json: its GGUF form (pre '{}') tokenizes \"{}\" differently; "
          "not written",
          pre, text);
  return m;
}

}  // namespace basalt::tok
