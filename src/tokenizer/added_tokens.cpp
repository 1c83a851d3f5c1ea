#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace basalt::tok {

namespace {
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}

// The code point ending just before byte i (i > 0) of valid UTF-8 text.
char32_t cp_before(std::string_view s, size_t i) {
  size_t b = i - 1;
  while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
  return utf8_next(s, b);
}
}  // namespace

void AddedTokens::add(AddedToken t) {
  if (t.content.empty()) return;
  max_id_ = std::max(max_id_, t.id);
  auto it = by_content_.find(t.content);
  size_t idx;
  if (it != by_content_.end()) {
    idx = it->second;
    by_id_.erase(tokens_[idx].id);
    tokens_[idx] = std::move(t);
  } else {
    idx = tokens_.size();
    tokens_.push_back(std::move(t));
    by_content_.emplace(tokens_[idx].content, idx);
    auto& bucket = by_first_byte_[static_cast<uint8_t>(tokens_[idx].content[0])];
    bucket.push_back(idx);
    std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
  by_id_[tokens_[idx].id] = idx;
}

std::vector<AddedTokens::Segment> AddedTokens::split(std::string_view text,
                                                     bool parse_special) const {
  std::vector<Segment> out;
  size_t text_start = 0;  // start of the pending plain text
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (size_t idx : by_first_byte_[static_cast<uint8_t>(text[i])]) {
      const AddedToken& t = tokens_[idx];
      if (t.special && !parse_special) continue;
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        size_t e = i + t.content.size();
        size_t j = e;
        if (i > 0 && unicode_is_alnum(cp_before(text, i))) continue;
        if (e < text.size() && unicode_is_alnum(utf8_next(text, j))) continue;
      }
      hit = &t;
      break;
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t b = i, e = i + hit->content.size();
    if (hit->lstrip)
      while (b > text_start && is_space(text[b - 1])) --b;
    if (hit->rstrip)
      while (e < text.size() && is_space(text[e])) ++e;
    if (b > text_start) out.push_back({text_start, b, -1});
    out.push_back({b, e, hit->id});
    i = text_start = e;
  }
  if (text_start < text.size()) out.push_back({text_start, text.size(), -1});
  return out;
}

const AddedToken* AddedTokens::find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedTokens::find(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? -1 : tokens_[it->second].id;
}

}  // namespace basalt::tok
