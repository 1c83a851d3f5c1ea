// AddedTokens: tokens matched verbatim in the input before any other processing (HF
// "added_tokens", llama.cpp control / user-defined tokens). Internal to src/tokenizer.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace basalt::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // matched only when parse_special; skipped by skip_special
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool normalized = false;   // (recorded; basalt matches every added token on the raw text)
  bool single_word = false;  // matches only when not inside a word
};

class AddedTokens {
 public:
  void add(AddedToken t);  // a later token with the same content replaces the earlier one

  // A piece of the input: an added token (id >= 0) or text to tokenize (id == -1).
  struct Segment {
    size_t begin, end;
    int32_t id;
  };
  // Leftmost-longest matching. Special tokens are matched only when parse_special;
  // non-special added tokens always (as HF does).
  std::vector<Segment> split(std::string_view text, bool parse_special) const;

  const AddedToken* find(int32_t id) const;
  int32_t find(std::string_view content) const;  // -1 if absent
  int32_t max_id() const { return max_id_; }
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  std::array<std::vector<size_t>, 256> by_first_byte_;  // longest content first
  int32_t max_id_ = -1;
};

}  // namespace basalt::tok
