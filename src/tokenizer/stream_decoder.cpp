#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {

// Decodes the whole sequence each time: decoders like Metaspace or Strip treat the first
// token specially, so a suffix cannot be decoded on its own in general. O(n) per token.
std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::string text = tok_.decode(ids_);
  if (text.size() <= emitted_) return {};
  std::string_view pending = std::string_view(text).substr(emitted_);
  pending.remove_suffix(utf8_incomplete_tail(pending));
  emitted_ += pending.size();
  return utf8_sanitize(pending);
}

std::string StreamDecoder::flush() {
  std::string text = tok_.decode(ids_);
  if (text.size() <= emitted_) return {};
  std::string rest = text.substr(emitted_);
  emitted_ = text.size();
  return utf8_sanitize(rest);
}

}  // namespace basalt::tok
