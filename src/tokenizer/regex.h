// Regex: a PCRE2 pattern compiled with UTF + UCP (so \p{L}, \s, \w are Unicode-aware, like
// the Oniguruma regexes HF tokenizers uses), JIT-compiled when the platform allows.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace basalt::tok {

class Regex {
 public:
  explicit Regex(const std::string& pattern);  // throws "[tokenizer] bad regex ..."
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping matches, left to right, as [begin, end) byte offsets. Input must be
  // valid UTF-8 (checked once at encode's entry). Empty matches are skipped.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace basalt::tok
