#include <cctype>

#include "cli/commands.h"
#include "core/error.h"

namespace basalt::cli {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ',' || c == '[' || c == ']' || std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    size_t j = i;
    if (s[j] == '-') ++j;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == i || (j == i + 1 && s[i] == '-'))
      fail("[cli] token ids must be integers separated by commas or spaces, got '{}'", s);
    const long long v = std::stoll(s.substr(i, j - i));
    if (v < 0 || v > INT32_MAX) fail("[cli] token id {} out of range", v);
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

std::string model_label(const std::string& path) {
  return path.empty() ? std::string("the embedded default model") : path;
}

}  // namespace basalt::cli
