// The tokenizer.json pipeline stages on small hand-written tokenizers: Split behaviours,
// SentencePiece-style BPE with byte fallback (Llama 2 HF layout), TemplateProcessing,
// added-token options, and the errors for what basalt does not implement.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_tokenizer_util.h"
#include "tokenizer/pipeline.h"

namespace basalt::tok {
namespace {

using json = nlohmann::json;

using test::expect_error;

std::vector<std::string> pre_tokenize(const json& j, const std::string& text) {
  auto pt = pre_tokenizer_from_json(j);
  std::vector<PreToken> pieces{{text, true}};
  pt->pre_tokenize(pieces);
  std::vector<std::string> out;
  for (auto& p : pieces) out.push_back(p.text);
  return out;
}

// The examples of HF's SplitDelimiterBehavior documentation.
TEST(TokJson, SplitBehaviours) {
  auto split = [](const char* behavior, bool invert = false) {
    json j = {{"type", "Split"},
              {"pattern", {{"String", "-"}}},
              {"behavior", behavior},
              {"invert", invert}};
    return pre_tokenize(j, "the-final--countdown");
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Removed"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split("Removed", true), (V{"-", "-", "-"}));
  json re = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}+"}}}, {"behavior", "Isolated"}};
  EXPECT_EQ(pre_tokenize(re, "ab12cd٣٤"), (V{"ab", "12", "cd", "٣٤"}));  // Unicode digits
}

TEST(TokJson, ByteLevelAndMetaspacePreTokenizers) {
  using V = std::vector<std::string>;
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pre_tokenize(bl, "Hello world!\n"), (V{"ĠHello", "Ġworld", "!", "Ċ"}));
  json ms = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(pre_tokenize(ms, "Hey friend"), (V{"▁Hey", "▁friend"}));
}

// A tiny Llama-2-style tokenizer.json: Prepend + Replace normalizer, BPE with byte
// fallback, TemplateProcessing with <s>, the Replace/ByteFallback/Fuse/Strip decoder.
json tiny_spm_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int id = 259;
  for (const char* p : {"▁", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "llo", "hello",
                        "▁hello", "▁w", "or", "▁wor", "ld", "▁world"})
    vocab[p] = id++;
  json merges = json::array(
      {"h e", "l l", "ll o", "he llo", "▁ hello", "▁ w", "o r", "▁w or", "l d", "▁wor ld"});
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
            {{"id", 1}, {"content", "<s>"}, {"special", true}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "▁"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", merges}}}};
}

TEST(TokJson, SentencePieceStyleWithByteFallback) {
  auto t = tokenizer_from_json(tiny_spm_json(), json::object());
  EXPECT_EQ(t->type_name(), "SentencePiece BPE");
  EXPECT_EQ(t->bos_id(), 1);  // from the template, as no config says otherwise
  auto ids = t->encode("hello world", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{t->piece_to_id("▁hello"), t->piece_to_id("▁world")}));
  EXPECT_EQ(t->decode(ids), "hello world");
  // "é" is not a piece: two byte tokens; decode puts the bytes back together.
  auto e = t->encode("hé", false, false);
  EXPECT_EQ(e,
            (std::vector<int32_t>{t->piece_to_id("▁"), t->piece_to_id("h"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->decode(e), "hé");
  // add_special: the template's <s>; HF keeps "<s>" in decode unless skipped.
  auto s = t->encode("hello", true, false);
  EXPECT_EQ(s.front(), 1);
  EXPECT_EQ(t->decode(s), "<s> hello");
  EXPECT_EQ(t->decode(s, true), "hello");
  // add_bos_token=false in the config wins over the template (transformers does the same).
  auto t2 = tokenizer_from_json(tiny_spm_json(), {{"add_bos_token", false}, {"bos_token", "<s>"}});
  EXPECT_EQ(t2->encode("hello", true, false), t2->encode("hello", false, false));
  EXPECT_EQ(t2->bos_id(), 1);
}

TEST(TokJson, AddedTokenOptions) {
  json j = tiny_spm_json();
  j["added_tokens"].push_back(
      {{"id", 400}, {"content", "<tool>"}, {"special", false}, {"rstrip", true}});
  j["added_tokens"].push_back(
      {{"id", 401}, {"content", "<sep>"}, {"special", true}, {"lstrip", true}});
  auto t = tokenizer_from_json(j, json::object());
  EXPECT_EQ(t->vocab_size(), 402);
  // Non-special added tokens are split out even without parse_special; rstrip eats the
  // spaces after it.
  auto ids = t->encode("hello<tool>   hello", false, false);
  int32_t hello = t->piece_to_id("▁hello");
  EXPECT_EQ(ids, (std::vector<int32_t>{hello, 400, hello}));
  // Special ones only with parse_special; lstrip eats the spaces before it.
  auto p = t->encode("hello  <sep>", false, true);
  EXPECT_EQ(p, (std::vector<int32_t>{hello, 401}));
  EXPECT_NE(t->encode("hello  <sep>", false, false).back(), 401);
}

TEST(TokJson, UnsupportedTypesAreClearErrors) {
  json j = tiny_spm_json();
  j["model"]["type"] = "Unigram";
  expect_error([&] { tokenizer_from_json(j, json::object()); },
               "[tokenizer] tokenizer.json: unsupported model type 'Unigram'");
  j = tiny_spm_json();
  j["model"]["type"] = "WordPiece";
  expect_error([&] { tokenizer_from_json(j, json::object()); },
               "unsupported model type 'WordPiece'");
  j = tiny_spm_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error([&] { tokenizer_from_json(j, json::object()); },
               "[tokenizer] tokenizer.json: unsupported normalizer type 'BertNormalizer'");
  j = tiny_spm_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error([&] { tokenizer_from_json(j, json::object()); },
               "[tokenizer] tokenizer.json: unsupported pre-tokenizer type 'Whitespace'");
  j = tiny_spm_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error([&] { tokenizer_from_json(j, json::object()); },
               "[tokenizer] tokenizer.json: unsupported decoder type 'WordPiece'");
  j = tiny_spm_json();
  j["post_processor"] = {{"type", "BertProcessing"}};
  expect_error([&] { tokenizer_from_json(j, json::object()); },
               "[tokenizer] tokenizer.json: unsupported post-processor type 'BertProcessing'");
  j = tiny_spm_json();
  j["model"]["merges"].push_back("x y");
  expect_error([&] { tokenizer_from_json(j, json::object()); }, "not in the vocabulary");
}

TEST(TokJson, MergesAsPairsEqualMergesAsStrings) {
  json j = tiny_spm_json();
  json pairs = json::array();
  for (const auto& m : j["model"]["merges"]) {
    std::string s = m;
    pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  auto a = tokenizer_from_json(j, json::object());
  j["model"]["merges"] = pairs;
  auto b = tokenizer_from_json(j, json::object());
  EXPECT_EQ(a->encode("hello world hello", false, false),
            b->encode("hello world hello", false, false));
}

}  // namespace
}  // namespace basalt::tok
