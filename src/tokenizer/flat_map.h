// Open-addressing hash tables for the vocabularies: one flat array each instead of a node per
// entry. Building the Qwen3 vocab + merges with std::unordered_map took ~270 ms, mostly cache
// misses in node lookups; these tables keep the hash next to the id. Internal to src/tokenizer.
#pragma once
#include <bit>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace basalt::tok {

// String -> id over strings owned by the caller (strings[id]); must outlive the map.
class StringIdMap {
 public:
  // Empty strings are skipped; for duplicates the lowest id wins.
  void build(const std::vector<std::string>& strings) {
    strings_ = &strings;
    size_t cap = std::bit_ceil(std::max<size_t>(16, strings.size() * 2));
    slots_.assign(cap, 0);
    mask_ = cap - 1;
    for (size_t id = 0; id < strings.size(); ++id) {
      const std::string& s = strings[id];
      if (s.empty()) continue;
      uint64_t h = hash(s);
      for (size_t i = h & mask_;; i = (i + 1) & mask_) {
        if (slots_[i] == 0) {
          slots_[i] = (h & ~0xFFFFFFFFull) | (id + 1);
          break;
        }
        if ((slots_[i] >> 32) == (h >> 32) && strings[(slots_[i] & 0xFFFFFFFFull) - 1] == s)
          break;  // duplicate
      }
    }
  }
  int32_t find(std::string_view s) const {
    if (slots_.empty()) return -1;
    uint64_t h = hash(s);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      uint64_t v = slots_[i];
      if (v == 0) return -1;
      if ((v >> 32) == (h >> 32)) {
        size_t id = (v & 0xFFFFFFFFull) - 1;
        if ((*strings_)[id] == s) return static_cast<int32_t>(id);
      }
    }
  }

 private:
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  const std::vector<std::string>* strings_ = nullptr;
  std::vector<uint64_t> slots_;  // (hash's high 32 bits << 32) | (id + 1); 0 = empty
  size_t mask_ = 0;
};

// uint64 key -> (int32, int32), for BPE merges keyed by (left id, right id).
class PairMap {
 public:
  struct Value {
    int32_t a, b;
  };
  void reserve(size_t n) {
    size_t cap = std::bit_ceil(std::max<size_t>(16, n * 2));
    if (cap <= slots_.size()) return;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{kEmpty, {0, 0}});
    mask_ = cap - 1;
    size_ = 0;
    for (const auto& s : old)
      if (s.key != kEmpty) emplace(s.key, s.v);
  }
  // Keeps the existing value if the key is present (the lowest-rank merge wins).
  void emplace(uint64_t key, Value v) {
    if ((size_ + 1) * 2 > slots_.size()) reserve(std::max<size_t>(16, size_ * 2 + 2));
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, v};
        ++size_;
        return;
      }
      if (slots_[i].key == key) return;
    }
  }
  const Value* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].v;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t mix(uint64_t k) {  // splitmix64 finalizer
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebull;
    return k ^ (k >> 31);
  }
  struct Slot {
    uint64_t key;
    Value v;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

}  // namespace basalt::tok
