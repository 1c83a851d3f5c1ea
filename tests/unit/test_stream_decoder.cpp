// Streaming detokenization returns, piece by piece, exactly the text of decoding all tokens.
#include <gtest/gtest.h>

#include "test_tokenizer_util.h"

namespace basalt::tok {
namespace {

const char* kText =
    "Hello world! Ünïcödé tëxt, 中文字符, emoji 🦙🧑‍🤝‍🧑, tabs\tand\nnewlines   "
    "spaces. "
    "In the beginning God created the heaven and the earth. 12345 67.89 y'all ½";

void check_stream(const Tokenizer& t) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += kText;
  const std::vector<int32_t> ids = t.encode(text, false, false);
  StreamDecoder dec(t);
  std::string streamed;
  for (int32_t id : ids) streamed += dec.push(id);
  streamed += dec.flush();
  EXPECT_EQ(streamed, t.decode(ids)) << t.type_name();
}

TEST(StreamDecoder, EqualsWholeDecodeForRealTokenizers) {
  int checked = 0;
  for (const Tokenizer* t : {test::qwen3(), test::llama3(), test::llama2_bin()}) {
    if (!t) continue;
    check_stream(*t);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "shared tokenizer fixtures not found (set BASALT_FIXTURES)";
}

}  // namespace
}  // namespace basalt::tok
