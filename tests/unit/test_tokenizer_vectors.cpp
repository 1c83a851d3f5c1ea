// The llama.cpp tokenizer test vectors (tokenizer-vectors in ../shared/fixtures) against the
// real Qwen3, Llama 3 and Llama 2 tokenizers: ids must match exactly, and decode must give
// the text back.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "test_tokenizer_util.h"

namespace basalt::tok {
namespace {

struct Vectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<int32_t>> ids;
};

Vectors read_vectors(const std::string& dir, const std::string& name) {
  Vectors v;
  std::string inp = read_text_file(dir + "/" + name + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    size_t e = inp.find(sep, pos);
    if (e == std::string::npos) e = inp.size();
    v.inputs.push_back(inp.substr(pos, e - pos));
    pos = e + sep.size();
  }
  std::istringstream out(read_text_file(dir + "/" + name + ".out"));
  for (std::string line; std::getline(out, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    v.ids.push_back(ids);
  }
  return v;
}

// Checks every vector; reports each mismatch, returns the number that matched.
int check_vectors(const Tokenizer& t, const Vectors& v) {
  EXPECT_EQ(v.inputs.size(), v.ids.size());
  int ok = 0;
  for (size_t i = 0; i < v.inputs.size() && i < v.ids.size(); ++i) {
    auto ids = t.encode(v.inputs[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, v.ids[i]) << "vector " << i << ": '" << v.inputs[i] << "'";
    ok += ids == v.ids[i];
    std::string back = t.decode(ids);
    // SentencePiece: the space prefix added by encode is removed again by decode, so the
    // round trip is exact there too.
    const std::string& want = v.inputs[i];
    EXPECT_EQ(back, want) << "round trip of vector " << i;
  }
  return ok;
}

TEST(TokVectors, Qwen2VectorsWithQwen3TokenizerJson) {
  BASALT_REQUIRE_FIXTURE(dir, "tokenizer-vectors/ggml-vocab-qwen2.gguf.inp");
  const Tokenizer* t = test::qwen3();
  ASSERT_TRUE(t);
  Vectors v = read_vectors(test::fixtures_dir() + "/tokenizer-vectors", "ggml-vocab-qwen2.gguf");
  EXPECT_EQ(v.inputs.size(), 46u);
  EXPECT_EQ(check_vectors(*t, v), 46);
}

TEST(TokVectors, LlamaBpeVectorsWithLlama3TokenizerJson) {
  BASALT_REQUIRE_FIXTURE(dir, "tokenizer-vectors/ggml-vocab-llama-bpe.gguf.inp");
  const Tokenizer* t = test::llama3();
  ASSERT_TRUE(t);
  Vectors v =
      read_vectors(test::fixtures_dir() + "/tokenizer-vectors", "ggml-vocab-llama-bpe.gguf");
  EXPECT_EQ(v.inputs.size(), 46u);
  EXPECT_EQ(check_vectors(*t, v), 46);
}

TEST(TokVectors, LlamaSpmVectorsWithTokenizerBin) {
  BASALT_REQUIRE_FIXTURE(dir, "tokenizer-vectors/ggml-vocab-llama-spm.gguf.inp");
  const Tokenizer* t = test::llama2_bin();
  ASSERT_TRUE(t);
  Vectors v =
      read_vectors(test::fixtures_dir() + "/tokenizer-vectors", "ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(check_vectors(*t, v), 46);
}

std::unique_ptr<Tokenizer> llama_spm_gguf() {
  std::string fx = test::fixtures_dir();
  std::string path = fx + "/tokenizer-vectors/ggml-vocab-llama-spm.gguf";
  if (fx.empty() || !std::filesystem::exists(path)) return nullptr;
  return tokenizer_from_gguf(io::gguf_load_file(path));
}

TEST(TokVectors, LlamaSpmVectorsWithVocabOnlyGguf) {
  BASALT_REQUIRE_FIXTURE(dir, "tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  auto t = llama_spm_gguf();
  EXPECT_EQ(t->type_name(), "SentencePiece BPE");
  EXPECT_EQ(t->vocab_size(), 32000);
  Vectors v =
      read_vectors(test::fixtures_dir() + "/tokenizer-vectors", "ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(check_vectors(*t, v), 46);
}

TEST(TokGguf, LlamaSpmSpecialTokens) {
  BASALT_REQUIRE_FIXTURE(dir, "tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  auto t = llama_spm_gguf();
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->is_special(1));
  EXPECT_FALSE(t->is_special(15043));
  auto plain = t->encode("Hello", false, false);
  EXPECT_EQ(plain, (std::vector<int32_t>{15043}));
  // add_bos_token (default true for "llama" vocabularies, as in llama.cpp).
  EXPECT_EQ(t->encode("Hello", true, false), (std::vector<int32_t>{1, 15043}));
  // parse_special: "</s>" is the EOS token, and a space prefix follows it as in llama.cpp.
  EXPECT_EQ(t->encode("Hello</s>Hello", false, true), (std::vector<int32_t>{15043, 2, 15043}));
  EXPECT_GT(t->encode("Hello</s>", false, false).size(), 2u);
  std::vector<int32_t> ids{1, 15043, 2};
  EXPECT_EQ(t->decode(ids), "<s> Hello</s>");
  EXPECT_EQ(t->decode(ids, true), "Hello");
  EXPECT_EQ(t->piece(15043), "\xE2\x96\x81Hello");
  EXPECT_EQ(t->piece_to_id("<0x0A>"), 13);
  std::vector<int32_t> bad{32000};
  EXPECT_THROW(t->decode(bad), Error);
}

// A GGUF "gpt2" vocabulary built in memory from the Qwen3 tokenizer.json (as llama.cpp's
// converter would write it) must reproduce the same vectors through the GGUF path.
TEST(TokGguf, Gpt2VocabFromQwen3Json) {
  BASALT_REQUIRE_FIXTURE(dir, "qwen3-tokenizer/tokenizer.json");
  auto tj = nlohmann::json::parse(read_text_file(dir));
  io::GgufFile g;
  g.name = "qwen3-in-memory.gguf";
  size_t n = 151669;
  io::GgufArray tokens(n), types(n), merges;
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it) {
    tokens[it.value().get<size_t>()].v = it.key();
    types[it.value().get<size_t>()].v = int64_t(1);
  }
  for (const auto& a : tj["added_tokens"]) {
    tokens[a["id"].get<size_t>()].v = a["content"].get<std::string>();
    types[a["id"].get<size_t>()].v = int64_t(a["special"].get<bool>() ? 3 : 4);
  }
  for (const auto& m : tj["model"]["merges"]) {
    io::GgufValue v;
    v.v = m[0].get<std::string>() + " " + m[1].get<std::string>();
    merges.push_back(std::move(v));
  }
  g.metadata["tokenizer.ggml.model"].v = std::string("gpt2");
  g.metadata["tokenizer.ggml.pre"].v = std::string("qwen2");
  g.metadata["tokenizer.ggml.tokens"].v = std::move(tokens);
  g.metadata["tokenizer.ggml.token_type"].v = std::move(types);
  g.metadata["tokenizer.ggml.merges"].v = std::move(merges);
  g.metadata["tokenizer.ggml.eos_token_id"].v = uint64_t(151645);
  g.metadata["tokenizer.ggml.padding_token_id"].v = uint64_t(151643);
  auto t = tokenizer_from_gguf(g);
  EXPECT_EQ(t->type_name(), "byte-level BPE");
  EXPECT_EQ(t->eos_id(), 151645);
  EXPECT_EQ(t->bos_id(), -1);
  Vectors v = read_vectors(test::fixtures_dir() + "/tokenizer-vectors", "ggml-vocab-qwen2.gguf");
  EXPECT_EQ(check_vectors(*t, v), 46);
  EXPECT_EQ(t->encode("<|im_start|>user", false, true).front(), 151644);

  g.metadata["tokenizer.ggml.pre"].v = std::string("tekken-unknown");
  test::expect_error([&] { tokenizer_from_gguf(g); },
                     "[tokenizer] qwen3-in-memory.gguf: unsupported tokenizer.ggml.pre "
                     "'tekken-unknown'");
  g.metadata["tokenizer.ggml.model"].v = std::string("bert");
  EXPECT_THROW(tokenizer_from_gguf(g), Error);
}

TEST(TokLoad, TokenizerLoadPaths) {
  BASALT_REQUIRE_FIXTURE(dir, "tokenizer-vectors/ggml-vocab-llama-spm.gguf");
  // A .gguf file (vocab-only).
  auto g = tokenizer_load(dir);
  EXPECT_EQ(g->encode("Hello world", false, false), (std::vector<int32_t>{15043, 3186}));
  // A tokenizer.json file: its sibling tokenizer_config.json gives the EOS.
  std::string fx = test::fixtures_dir();
  auto q = tokenizer_load(fx + "/qwen3-tokenizer/tokenizer.json");
  EXPECT_EQ(q->eos_id(), 151645);
  EXPECT_EQ(q->encode("Hello world", false, false),
            test::qwen3()->encode("Hello world", false, false));
}

TEST(TokLoad, CheckpointWithoutTokenizer) {
  io::Checkpoint ckpt;
  ckpt.path = "/some/model";
  try {
    tokenizer_from_checkpoint(ckpt);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[tokenizer] /some/model: no tokenizer.json and no GGUF vocabulary");
  }
  test::TempDir tmp;
  std::ofstream(tmp.str() + "/config.json") << R"({"architectures": ["LlamaForCausalLM"]})";
  test::expect_error([&] { tokenizer_load(tmp.str()); },
                     "no tokenizer.json and no GGUF vocabulary");
}

}  // namespace
}  // namespace basalt::tok
