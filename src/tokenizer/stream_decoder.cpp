#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {

// Incremental detokenization (the scheme vLLM and HF's streamers use): decode a small window
// that starts at the previously returned piece, twice — without and with the new tokens — and
// return the difference. Both decodes start at the same token, so decoders that treat the
// first token specially (Metaspace, Strip) affect both alike. A window whose text ends in an
// incomplete UTF-8 character is held until the character completes.
std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string before = tok_.decode(all.subspan(prefix_, read_ - prefix_));
  const std::string text = tok_.decode(all.subspan(prefix_));
  if (text.size() <= before.size() || text.compare(0, before.size(), before) != 0) return {};
  std::string_view fresh = std::string_view(text).substr(before.size());
  if (utf8_incomplete_tail(fresh) != 0) return {};
  prefix_ = read_;
  read_ = ids_.size();
  return utf8_sanitize(fresh);
}

std::string StreamDecoder::flush() {
  const std::span<const int32_t> all(ids_);
  const std::string before = tok_.decode(all.subspan(prefix_, read_ - prefix_));
  const std::string text = tok_.decode(all.subspan(prefix_));
  prefix_ = read_ = ids_.size();
  if (text.size() <= before.size()) return {};
  return utf8_sanitize(std::string_view(text).substr(before.size()));
}

}  // namespace basalt::tok
