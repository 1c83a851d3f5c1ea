// Tokenizer behaviour beyond the test vectors: special tokens, add_special, BOS/EOS ids,
// errors, round trips of random text, streaming, large inputs, loading.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>

#include "core/error.h"
#include "test_tokenizer_util.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {
namespace {

#define REQUIRE_TOKENIZER(var, expr) \
  const Tokenizer* var = (expr);     \
  if (!var) GTEST_SKIP() << "shared tokenizer fixture not found (set BASALT_FIXTURES)"

using test::expect_error;

// Random valid UTF-8: mostly ASCII (spaces, digits, punctuation, newlines), then Latin,
// Cyrillic, CJK, emoji and combining marks.
std::string random_utf8(std::mt19937& rng, size_t n_chars) {
  static const char32_t ranges[][2] = {{0x20, 0x7E},   {0x0A, 0x0A},     {0xA0, 0x24F},
                                       {0x400, 0x4FF}, {0x4E00, 0x9FFF}, {0x1F300, 0x1F6FF},
                                       {0x300, 0x36F}};
  std::string s;
  for (size_t i = 0; i < n_chars; ++i) {
    const auto& r = ranges[rng() % 3 ? rng() % 2 : rng() % 7];
    utf8_append(s, r[0] + char32_t(rng() % (r[1] - r[0] + 1)));
  }
  return s;
}

TEST(TokLoad, Qwen3TokenizerJsonLoadTime) {
  REQUIRE_TOKENIZER(t, test::qwen3());
  double ms = test::tokenizer_load_ms("qwen3-tokenizer");
  // Parse + build, measured once per test program (Release, 2 cores: see docs/tokenizers.md).
  std::printf("qwen3 tokenizer.json: parsed and built in %.0f ms\n", ms);
  EXPECT_EQ(t->vocab_size(), 151669);
  EXPECT_EQ(t->type_name(), "byte-level BPE");
}

TEST(TokSpecial, Qwen3ParseSpecialOnOff) {
  REQUIRE_TOKENIZER(t, test::qwen3());
  auto with = t->encode("<|im_start|>user\nhi<|im_end|>", false, true);
  ASSERT_GE(with.size(), 3u);
  EXPECT_EQ(with.front(), 151644);
  EXPECT_EQ(with.back(), 151645);
  EXPECT_TRUE(t->is_special(151644));
  EXPECT_FALSE(t->is_special(872));
  auto without = t->encode("<|im_start|>user", false, false);
  EXPECT_GT(without.size(), 2u);
  EXPECT_EQ(std::count(without.begin(), without.end(), 151644), 0);
  EXPECT_EQ(t->decode(without), "<|im_start|>user");
  EXPECT_EQ(t->decode(with), "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(t->decode(with, /*skip_special=*/true), "user\nhi");
  EXPECT_EQ(t->piece(151644), "<|im_start|>");
  EXPECT_EQ(t->piece_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(t->piece_to_id("Ġthe"), 279);
  EXPECT_EQ(t->piece(279), "Ġthe");
  EXPECT_EQ(t->piece_to_id("no such piece"), -1);
}

TEST(TokSpecial, Qwen3BosEosPad) {
  REQUIRE_TOKENIZER(t, test::qwen3());
  EXPECT_EQ(t->bos_id(), -1);  // tokenizer_config: bos_token null
  EXPECT_EQ(t->eos_id(), 151645);
  EXPECT_EQ(t->pad_id(), 151643);
  EXPECT_EQ(t->encode("Hello", true, true), t->encode("Hello", false, true));
}

// This tokenizer.json's post-processor is ByteLevel only and its tokenizer_config has no
// add_bos_token, so HF's AutoTokenizer adds nothing with add_special_tokens=True; basalt
// follows the file (Meta's later Llama 3 uploads carry a TemplateProcessing with the BOS).
TEST(TokSpecial, Llama3BosEosAndAddSpecial) {
  REQUIRE_TOKENIZER(t, test::llama3());
  EXPECT_EQ(t->bos_id(), 128000);
  EXPECT_EQ(t->eos_id(), 128001);
  EXPECT_EQ(t->encode("Hello world", true, false), t->encode("Hello world", false, false));
  auto ids = t->encode("<|begin_of_text|><|start_header_id|>user<|end_header_id|>", false, true);
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(ids[1], 128006);
  EXPECT_EQ(ids[3], 128007);
}

TEST(TokErrors, InvalidUtf8) {
  REQUIRE_TOKENIZER(t, test::qwen3());
  expect_error([&] { t->encode("abc\xff", false, false); },
               "[tokenizer] input is not valid UTF-8 at byte 3");
  expect_error([&] { t->encode("\xC3\x28", false, false); }, "not valid UTF-8 at byte 0");
  expect_error([&] { t->encode("a\xED\xA0\x80", false, false); }, "at byte 1");   // surrogate
  expect_error([&] { t->encode("ab\xF0\x9F\xA6", false, false); }, "at byte 2");  // truncated
}

TEST(TokErrors, DecodeOutOfRange) {
  REQUIRE_TOKENIZER(t, test::qwen3());
  std::vector<int32_t> bad{1, 151669};
  expect_error([&] { t->decode(bad); }, "[tokenizer] decode: token id 151669 is out of range");
  std::vector<int32_t> neg{-1};
  expect_error([&] { t->decode(neg); }, "token id -1 is out of range");
}

TEST(TokRoundTrip, RandomUtf8) {
  std::mt19937 rng(1234);
  std::vector<std::pair<const char*, const Tokenizer*>> toks = {
      {"qwen3", test::qwen3()}, {"llama3", test::llama3()}, {"llama2", test::llama2_bin()}};
  for (auto [name, t] : toks) {
    if (!t) continue;
    for (int i = 0; i < 200; ++i) {
      std::string s = random_utf8(rng, 1 + rng() % 60);
      // Qwen normalizes to NFC, so it gives back the NFC form.
      std::string want = std::string(name) == "qwen3" ? unicode_normalize(s, NormalForm::NFC) : s;
      ASSERT_EQ(t->decode(t->encode(s, false, false)), want) << name << " on '" << s << "'";
    }
  }
}

TEST(TokStream, EmojiOverByteFallbackTokens) {
  REQUIRE_TOKENIZER(t, test::llama2_bin());
  auto ids = t->encode("a🦙b", false, false);
  // "🦙" is not a Llama 2 piece: four <0xNN> byte tokens.
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(t->piece(ids[1]), "<0xF0>");
  EXPECT_EQ(t->piece(ids[4]), "<0x99>");
  StreamDecoder sd(*t);
  std::vector<std::string> parts;
  for (int32_t id : ids) parts.push_back(sd.push(id));
  EXPECT_EQ(parts, (std::vector<std::string>{"a", "", "", "", "🦙", "b"}));
  EXPECT_EQ(sd.flush(), "");

  // An unfinished character comes out as U+FFFD at flush.
  StreamDecoder cut(*t);
  EXPECT_EQ(cut.push(ids[0]), "a");
  EXPECT_EQ(cut.push(ids[1]), "");
  EXPECT_EQ(cut.push(ids[2]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokStream, ByteLevelSplitsMultiByteCharacter) {
  REQUIRE_TOKENIZER(t, test::qwen3());
  // Rare CJK / emoji characters are split over several byte-level tokens.
  std::string text = "x 🦙🫠 𝄞 done";
  auto ids = t->encode(text, false, false);
  StreamDecoder sd(*t);
  std::string all;
  for (int32_t id : ids) {
    std::string part = sd.push(id);
    EXPECT_EQ(utf8_find_invalid(part), std::string::npos);
    all += part;
  }
  all += sd.flush();
  EXPECT_EQ(all, text);
}

TEST(TokLarge, Encode200KB) {
  std::mt19937 rng(7);
  std::string text;
  const char* words[] = {"the",  "tokenizer", "encodes", "text", "quickly", "ünïcödé",
                         "中文", "🦙",      "12345",   "\n",   "  ",      "don't"};
  while (text.size() < 200 * 1024) {
    text += words[rng() % 12];
    text += rng() % 5 ? " " : ", ";
  }
  for (const Tokenizer* t : {test::qwen3(), test::llama3(), test::llama2_bin()}) {
    if (!t) continue;
    auto t0 = std::chrono::steady_clock::now();
    auto ids = t->encode(text, false, false);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %zu bytes -> %zu tokens in %.0f ms\n", t->type_name().c_str(), text.size(),
                ids.size(), ms);
    EXPECT_EQ(t->decode(ids), text);
  }
  // One long word with no pre-tokenizer splits (worst case for the merge loop).
  if (const Tokenizer* t = test::llama2_bin()) {
    std::string word(100 * 1024, 'a');
    EXPECT_EQ(t->decode(t->encode(word, false, false)), word);
  }
}

}  // namespace
}  // namespace basalt::tok
