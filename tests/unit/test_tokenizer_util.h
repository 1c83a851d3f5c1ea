// Shared tokenizer fixtures for the tokenizer tests: each real tokenizer is loaded once per
// test program (the Qwen3 tokenizer.json is 11 MB) and kept for every test.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/blob.h"
#include "io/gguf.h"
#include "test_util.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"

namespace basalt::test {

// Milliseconds spent building it (parse + tokenizer construction), for the load-time test.
inline double& tokenizer_load_ms(const std::string& key) {
  static std::map<std::string, double> ms;
  return ms[key];
}

// Loads DIR/tokenizer.json (+ tokenizer_config.json) without the io layer; null if absent.
inline std::unique_ptr<tok::Tokenizer> load_json_fixture(const std::string& rel) {
  std::string fx = fixtures_dir();
  if (fx.empty()) return nullptr;
  std::string dir = fx + "/" + rel;
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return nullptr;
  auto t0 = std::chrono::steady_clock::now();
  auto tj = nlohmann::json::parse(read_text_file(dir + "/tokenizer.json"));
  nlohmann::json cfg = nlohmann::json::object();
  if (std::filesystem::exists(dir + "/tokenizer_config.json"))
    cfg = nlohmann::json::parse(read_text_file(dir + "/tokenizer_config.json"));
  auto t = tok::tokenizer_from_json(tj, cfg);
  tokenizer_load_ms(rel) =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

inline const tok::Tokenizer* qwen3() {
  static auto t = load_json_fixture("qwen3-tokenizer");
  return t.get();
}
inline const tok::Tokenizer* llama3() {
  static auto t = load_json_fixture("llama3-tokenizer");
  return t.get();
}

// llama2.c tokenizer.bin (the Llama 2 SentencePiece vocabulary with scores) as an SpmVocab:
// int32 max_len, then per token f32 score, int32 len, bytes. Types follow the Llama 2 layout:
// 0 <unk>, 1 <s>, 2 </s>, 3..258 <0xNN>, the rest normal.
inline const tok::Tokenizer* llama2_bin() {
  static auto t = []() -> std::unique_ptr<tok::Tokenizer> {
    std::string fx = fixtures_dir();
    std::string path = fx + "/llama2-tokenizer/tokenizer.bin";
    if (fx.empty() || !std::filesystem::exists(path)) return nullptr;
    std::string bytes = read_text_file(path);
    tok::SpmVocab v;
    size_t pos = 4;
    while (pos + 8 <= bytes.size()) {
      float score;
      int32_t len;
      std::memcpy(&score, bytes.data() + pos, 4);
      std::memcpy(&len, bytes.data() + pos + 4, 4);
      pos += 8;
      v.pieces.push_back(bytes.substr(pos, size_t(len)));
      v.scores.push_back(score);
      pos += size_t(len);
    }
    for (size_t i = 0; i < v.pieces.size(); ++i) {
      tok::TokenType ty = tok::TokenType::Normal;
      if (i == 0) ty = tok::TokenType::Unknown;
      if (i == 1 || i == 2) ty = tok::TokenType::Control;
      if (i >= 3 && i < 259) ty = tok::TokenType::Byte;
      v.types.push_back(ty);
    }
    // llama2.c stores " " not "▁" and "\n<s>\n" style pieces for the specials.
    v.pieces[0] = "<unk>";
    v.pieces[1] = "<s>";
    v.pieces[2] = "</s>";
    for (auto& p : v.pieces) {
      std::string q;
      for (char c : p) c == ' ' ? q += "\xE2\x96\x81" : q += c;
      p = q;
    }
    v.bos_id = 1;
    v.eos_id = 2;
    v.unk_id = 0;
    return std::make_unique<tok::SpmTokenizer>(std::move(v));
  }();
  return t.get();
}

}  // namespace basalt::test
