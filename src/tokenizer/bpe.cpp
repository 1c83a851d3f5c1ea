#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <mutex>
#include <queue>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace basalt::tok {

namespace {
constexpr size_t kCacheMaxEntries = 1 << 16;
constexpr size_t kCacheMaxWordBytes = 256;
uint64_t pair_key(int32_t a, int32_t b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}
}  // namespace

BpeModel::BpeModel(std::vector<std::pair<std::string, int32_t>> vocab, BpeOptions opt)
    : opt_(std::move(opt)) {
  int32_t max_id = -1;
  for (const auto& [s, id] : vocab) {
    if (id < 0) fail("[tokenizer] BPE vocab: negative id {} for '{}'", id, s);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(size_t(max_id + 1));
  for (auto& [s, id] : vocab) id_to_token_[size_t(id)] = std::move(s);
  token_to_id_.build(id_to_token_);
  if (!opt_.unk_token.empty()) unk_id_ = token_to_id(opt_.unk_token);
  for (int b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(fmt::format("<0x{:02X}>", b));
}

void BpeModel::add_merge(std::string_view a, std::string_view b) {
  int32_t ia = token_to_id(a), ib = token_to_id(b);
  thread_local std::string ab;
  ab.assign(a).append(b);
  int32_t iab = token_to_id(ab);
  if (ia < 0 || ib < 0 || iab < 0)
    fail("[tokenizer] BPE merge '{} {}' uses a token that is not in the vocabulary", a, b);
  // The first (lowest-rank) occurrence of a pair wins, as in HF.
  merges_.emplace(pair_key(ia, ib), {static_cast<int32_t>(merges_.size()), iab});
}

int32_t BpeModel::token_to_id(std::string_view s) const {
  return token_to_id_.find(s);
}

const std::string& BpeModel::id_to_token(int32_t id) const {
  static const std::string empty;
  return id >= 0 && size_t(id) < id_to_token_.size() ? id_to_token_[size_t(id)] : empty;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    int32_t id = token_to_id(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mu_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_mu_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + long(start), out.end()));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over a vector; a merged-away symbol gets id -1.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  bool prev_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t n = std::min(utf8_len(static_cast<uint8_t>(word[i])), word.size() - i);
    std::string_view ch = word.substr(i, n);
    i += n;
    int32_t id = token_to_id(ch);
    if (id >= 0) {
      syms.push_back({id, 0, 0});
      prev_unk = false;
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (char c : ch) all &= byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) syms.push_back({byte_ids_[static_cast<uint8_t>(c)], 0, 0});
        prev_unk = false;
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (!(opt_.fuse_unk && prev_unk)) syms.push_back({unk_id_, 0, 0});
      prev_unk = true;
    }
  }
  const int32_t n = static_cast<int32_t>(syms.size());
  for (int32_t i = 0; i < n; ++i) {
    syms[size_t(i)].prev = i - 1;
    syms[size_t(i)].next = i + 1 < n ? i + 1 : -1;
  }

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator<(const Candidate& o) const {  // lowest rank, then leftmost, on top
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int32_t pos) {
    int32_t next = syms[size_t(pos)].next;
    if (next < 0) return;
    const PairMap::Value* m = merges_.find(pair_key(syms[size_t(pos)].id, syms[size_t(next)].id));
    if (m) queue.push({m->a, pos, m->b});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = syms[size_t(top.pos)];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = syms[size_t(left.next)];
    const PairMap::Value* m = merges_.find(pair_key(left.id, right.id));
    if (!m || m->b != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) syms[size_t(left.next)].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const auto& s : syms)
    if (s.id >= 0) out.push_back(s.id);
}

}  // namespace basalt::tok
