#include "tokenizer/spm.h"

#include <fmt/format.h>

#include <queue>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {

namespace {
const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

int parse_byte_piece(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  return static_cast<int>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16));
}
}  // namespace

SpmTokenizer::SpmTokenizer(SpmVocab v) : v_(std::move(v)) {
  size_t n = v_.pieces.size();
  if (v_.scores.size() != n) v_.scores.resize(n, 0.0f);
  if (v_.types.size() != n) v_.types.resize(n, TokenType::Normal);
  piece_to_id_.build(v_.pieces);
  for (int b = 0; b < 256; ++b) byte_ids_[b] = -1;
  for (size_t i = 0; i < n; ++i) {
    TokenType t = v_.types[i];
    if (t == TokenType::Byte) {
      int b = parse_byte_piece(v_.pieces[i]);
      if (b >= 0 && byte_ids_[b] < 0) byte_ids_[b] = static_cast<int32_t>(i);
    } else if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined) {
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = v_.pieces[i];
      a.special = t != TokenType::UserDefined;
      added_.add(std::move(a));
    }
  }
  bos_id_ = v_.bos_id;
  eos_id_ = v_.eos_id;
  pad_id_ = v_.pad_id;
}

int32_t SpmTokenizer::mergeable_id(std::string_view s) const {
  int32_t id = piece_to_id_.find(s);
  if (id < 0) return -1;
  TokenType t = v_.types[size_t(id)];
  return t == TokenType::Normal || t == TokenType::UserDefined || t == TokenType::Undefined ? id
                                                                                            : -1;
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  utf8_require_valid(text);
  std::vector<int32_t> out;
  if (add_special && v_.add_bos && v_.bos_id >= 0) out.push_back(v_.bos_id);
  // As llama.cpp: the space prefix goes before the text and again after each special token
  // (HF's legacy Llama tokenizer does the same with its Prepend normalizer).
  bool prev_special = true;
  std::string buf;
  for (const auto& seg : added_.split(text, parse_special)) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      prev_special = true;
      continue;
    }
    buf.clear();
    if (v_.add_space_prefix && prev_special) buf = kSpace;
    for (char c : text.substr(seg.begin, seg.end - seg.begin)) c == ' ' ? buf += kSpace : buf += c;
    encode_text(buf, out);
    prev_special = false;
  }
  if (add_special && v_.add_eos && v_.eos_id >= 0) out.push_back(v_.eos_id);
  return out;
}

void SpmTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    size_t begin, len;  // bytes of text; len 0 = merged away
    int32_t prev, next;
  };
  std::vector<Symbol> syms;
  for (size_t i = 0; i < text.size();) {
    size_t n = std::min(utf8_len(static_cast<uint8_t>(text[i])), text.size() - i);
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({i, n, idx - 1, -1});
    if (idx > 0) syms[size_t(idx - 1)].next = idx;
    i += n;
  }
  struct Bigram {
    float score;
    int32_t left;
    size_t len;  // bytes of the pair when queued: a stale entry no longer matches
    bool operator<(const Bigram& o) const {  // highest score, then leftmost, on top
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> queue;
  auto try_pair = [&](int32_t left) {
    if (left < 0) return;
    int32_t right = syms[size_t(left)].next;
    if (right < 0) return;
    const Symbol& l = syms[size_t(left)];
    size_t len = l.len + syms[size_t(right)].len;
    int32_t id = mergeable_id(text.substr(l.begin, len));
    if (id >= 0) queue.push({v_.scores[size_t(id)], left, len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) try_pair(i);
  while (!queue.empty()) {
    Bigram top = queue.top();
    queue.pop();
    Symbol& l = syms[size_t(top.left)];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = syms[size_t(l.next)];
    if (l.len + r.len != top.len) continue;  // one side changed since this was queued
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (l.next >= 0) syms[size_t(l.next)].prev = top.left;
    try_pair(l.prev);
    try_pair(top.left);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[size_t(i)].next) {
    std::string_view s = text.substr(syms[size_t(i)].begin, syms[size_t(i)].len);
    int32_t id = mergeable_id(s);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : s) {  // byte fallback, else unknown
      int32_t b = byte_ids_[static_cast<uint8_t>(c)];
      if (b >= 0) {
        out.push_back(b);
      } else if (v_.unk_id >= 0) {
        out.push_back(v_.unk_id);
        break;
      }
    }
  }
}

std::string SpmTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      fail("[tokenizer] decode: token id {} is out of range [0, {})", id, vocab_size());
    const std::string& p = v_.pieces[size_t(id)];
    switch (v_.types[size_t(id)]) {
      case TokenType::Byte: {
        int b = parse_byte_piece(p);
        if (b >= 0) out += static_cast<char>(b);
        break;
      }
      case TokenType::Control:
      case TokenType::Unknown:
        if (!skip_special) out += p;
        break;
      case TokenType::UserDefined:
      case TokenType::Unused:
        out += p;
        break;
      default:
        for (size_t i = 0; i < p.size();) {
          if (p.compare(i, kSpace.size(), kSpace) == 0) {
            out += ' ';
            i += kSpace.size();
          } else {
            out += p[i++];
          }
        }
    }
  }
  // The space prefix added at encode time goes away again (HF: Strip decoder after Fuse).
  if (v_.add_space_prefix && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

bool SpmTokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  TokenType t = v_.types[size_t(id)];
  return t == TokenType::Control || t == TokenType::Unknown;
}

std::string SpmTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    fail("[tokenizer] piece: token id {} is out of range [0, {})", id, vocab_size());
  return v_.pieces[size_t(id)];
}

int32_t SpmTokenizer::piece_to_id(std::string_view piece) const {
  return piece_to_id_.find(piece);
}

}  // namespace basalt::tok
