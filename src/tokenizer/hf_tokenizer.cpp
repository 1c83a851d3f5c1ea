#include "tokenizer/hf_tokenizer.h"

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {

HfTokenizer::HfTokenizer(HfPipeline p) : p_(std::move(p)) {
  vocab_size_ = std::max(p_.model->max_id(), p_.added.max_id()) + 1;
  bos_id_ = p_.bos_id;
  eos_id_ = p_.eos_id;
  pad_id_ = p_.pad_id;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special,
                                         bool parse_special) const {
  utf8_require_valid(text);
  std::vector<int32_t> out;
  if (add_special) out = p_.post.prefix;
  std::vector<PreToken> pieces;
  for (const auto& seg : p_.added.split(text, parse_special)) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    std::string s(text.substr(seg.begin, seg.end - seg.begin));
    if (p_.normalizer) p_.normalizer->normalize(s);
    pieces.assign(1, PreToken{std::move(s), seg.begin == 0});
    if (p_.pre_tokenizer) p_.pre_tokenizer->pre_tokenize(pieces);
    for (const auto& piece : pieces) p_.model->tokenize(piece.text, out);
  }
  if (add_special) out.insert(out.end(), p_.post.suffix.begin(), p_.post.suffix.end());
  return out;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_)
      fail("[tokenizer] decode: token id {} is out of range [0, {})", id, vocab_size_);
    if (const AddedToken* t = p_.added.find(id)) {
      if (!(skip_special && t->special)) tokens.push_back(t->content);
    } else {
      tokens.push_back(p_.model->id_to_token(id));
    }
  }
  if (p_.decoder) p_.decoder->decode(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* t = p_.added.find(id);
  return t && t->special;
}

std::string HfTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size_)
    fail("[tokenizer] piece: token id {} is out of range [0, {})", id, vocab_size_);
  if (const AddedToken* t = p_.added.find(id)) return t->content;
  return p_.model->id_to_token(id);
}

int32_t HfTokenizer::piece_to_id(std::string_view piece) const {
  int32_t id = p_.added.find(piece);
  return id >= 0 ? id : p_.model->token_to_id(piece);
}

}  // namespace basalt::tok
