// tokenizer.json → GGUF "gpt2" vocabulary (tokenizer/gguf_vocab.h): the real Llama 3 and Qwen3
// tokenizers, read back by basalt's GGUF tokenizer, reproduce llama.cpp's own test vectors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "io/checkpoint.h"
#include "test_util.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace basalt::tok {
namespace {

using nlohmann::json;

const io::GgufValue& meta(const io::GgufMetadata& m, const std::string& key) {
  for (const auto& [k, v] : m)
    if (k == key) return v;
  throw std::runtime_error("missing " + key);
}

io::GgufFile as_file(const io::GgufMetadata& m) {
  io::GgufFile g;
  g.name = "mem.gguf";
  for (const auto& [k, v] : m) g.metadata.emplace(k, v);
  return g;
}

// llama.cpp's tests/test-tokenizer-0 vectors: inputs separated by a marker, one line of ids each.
void check_vectors(const Tokenizer& t, const std::string& name) {
  const std::string dir = test::fixtures_dir() + "/tokenizer-vectors/";
  std::ifstream fi(dir + name + ".inp"), fo(dir + name + ".out");
  const std::string inp((std::istreambuf_iterator<char>(fi)), {});
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < inp.size();) {
    size_t e = inp.find(sep, pos);
    if (e == std::string::npos) e = inp.size();
    inputs.push_back(inp.substr(pos, e - pos));
    pos = e + sep.size();
  }
  size_t i = 0;
  for (std::string line; std::getline(fo, line); ++i) {
    ASSERT_LT(i, inputs.size());
    std::istringstream ls(line);
    std::vector<int32_t> want;
    for (int32_t id; ls >> id;) want.push_back(id);
    EXPECT_EQ(t.encode(inputs[i], false, false), want) << name << " vector " << i;
  }
  EXPECT_EQ(i, 46u);
}

struct Case {
  const char* dir;
  const char* vectors;
  int64_t vocab;  // the model's (config.json) vocab_size
  const char* pre;
  int32_t bos, eos;
  bool add_bos;  // what its add_special does (this Llama 3 tokenizer.json adds no BOS)
};

void check_case(const Case& c) {
  const std::string dir = test::fixtures_dir() + "/" + c.dir;
  const json tj = io::json_load_file(dir + "/tokenizer.json");
  const json cfg = io::json_load_file(dir + "/tokenizer_config.json");
  const io::GgufMetadata m = gguf_vocab_from_json(tj, cfg, c.vocab, {c.eos, 151643});
  EXPECT_EQ(meta(m, "tokenizer.ggml.model").as_string(), "gpt2");
  EXPECT_EQ(meta(m, "tokenizer.ggml.pre").as_string(), c.pre) << c.dir;
  const auto& tokens = meta(m, "tokenizer.ggml.tokens").as_array();
  ASSERT_EQ(int64_t(tokens.size()), c.vocab);
  EXPECT_EQ(meta(m, "tokenizer.ggml.add_bos_token").as_bool(), c.add_bos) << c.dir;
  EXPECT_EQ(meta(m, "tokenizer.ggml.eos_token_id").as_int(), c.eos) << c.dir;
  if (c.bos >= 0) {
    EXPECT_EQ(meta(m, "tokenizer.ggml.bos_token_id").as_int(), c.bos);
  }
  EXPECT_FALSE(meta(m, "tokenizer.chat_template").as_string().empty());
  const auto g = as_file(m);
  const auto t = tokenizer_from_gguf(g);
  check_vectors(*t, c.vectors);
  if (std::string(c.dir) == "qwen3-tokenizer") {  // 151669 tokens, padded to the model's size
    EXPECT_EQ(tokens.back().as_string(), "[PAD151935]");
    EXPECT_EQ(meta(m, "tokenizer.ggml.token_type").as_array().back().as_int(), 5);  // UNUSED
    EXPECT_EQ(meta(m, "tokenizer.ggml.eot_token_id").as_int(), 151643);
    EXPECT_TRUE(t->is_special(151644));  // <|im_start|>: CONTROL
  }
}

// Each < 1 s here: the Llama 3 (128k tokens) and Qwen3 (151k) vocabularies.
TEST(GgufVocab, Llama3TokenizerJsonMatchesLlamaCppVectors) {
  BASALT_REQUIRE_FIXTURE(fx, "tokenizer-vectors/ggml-vocab-llama-bpe.gguf.inp");
  check_case({"llama3-tokenizer", "ggml-vocab-llama-bpe.gguf", 128256, "llama-bpe", 128000, 128001,
              false});
}

TEST(GgufVocab, Qwen3TokenizerJsonMatchesLlamaCppVectors) {
  BASALT_REQUIRE_FIXTURE(fx, "tokenizer-vectors/ggml-vocab-qwen2.gguf.inp");
  check_case({"qwen3-tokenizer", "ggml-vocab-qwen2.gguf", 151936, "qwen2", -1, 151645, false});
}

TEST(GgufVocab, RefusesWhatGpt2VocabulariesCannotHold) {
  // SentencePiece-style BPE (byte_fallback, no ByteLevel), as in Llama 2's tokenizer.json.
  const json spm = {{"model",
                     {{"type", "BPE"},
                      {"byte_fallback", true},
                      {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}}},
                      {"merges", {"a b"}}}}};
  test::expect_error([&] { gguf_vocab_from_json(spm, json::object(), 4, {}); },
                     "a SentencePiece BPE vocabulary cannot be written to GGUF yet");
  // Byte-level, but a pre-tokenizer regex llama.cpp has no name for.
  json odd = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}};
  const json split = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  const json byte_level = {{"type", "ByteLevel"}, {"use_regex", false}};
  odd["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
  test::expect_error([&] { gguf_vocab_from_json(odd, json::object(), 1, {}); },
                     "is not one GGUF names here (llama-bpe, qwen2, gpt-2)");
  odd["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", true}};  // GPT-2's: fine
  EXPECT_EQ(
      meta(gguf_vocab_from_json(odd, json::object(), 1, {}), "tokenizer.ggml.pre").as_string(),
      "gpt-2");
  test::expect_error([&] { gguf_vocab_from_json(odd, json::object(), 0, {}); },
                     "past the model's vocab_size 0");
}

}  // namespace
}  // namespace basalt::tok
