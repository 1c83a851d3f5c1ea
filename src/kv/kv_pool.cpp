#include "kv/kv_pool.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace basalt {

KvPool::KvPool(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t n_kv_heads,
               int64_t head_dim, KvStorage storage, KvStateSpec state)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      hkv_(n_kv_heads),
      d_(head_dim),
      storage_(std::move(storage)),
      state_(state) {
  if (n_blocks <= 0 || block_size <= 0)
    fail("[kv] need a positive number of blocks and block size, got {} × {}", n_blocks, block_size);
  if (!storage_.alloc) {
    storage_.alloc = [](size_t n) { return std::calloc(1, n); };
    storage_.free = [](void* p) { std::free(p); };
  }
  const size_t row = storage_.row_bytes ? storage_.row_bytes : size_t(d_) * storage_.elem_bytes;
  layer_bytes_ = size_t(n_blocks * block_size * hkv_) * row;
  for (int64_t l = 0; l < n_layers; ++l) {
    k_.push_back(storage_.alloc(layer_bytes_));
    v_.push_back(storage_.alloc(layer_bytes_));
    if (!k_.back() || !v_.back())
      fail("[kv] cannot allocate {} bytes for layer {} of the KV cache", layer_bytes_, l);
  }
  refcount_.assign(size_t(n_blocks), 0);
  lru_pos_.resize(size_t(n_blocks));
  block_hash_.assign(size_t(n_blocks), 0);
  block_tokens_.resize(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
  block_snap_.assign(size_t(n_blocks), -1);
  if (state_.slots > 0) {
    const int64_t total = state_.slots + state_.snapshots;
    for (int64_t l = 0; l < state_.layers; ++l) {
      for (auto [arr, n] : {std::pair{&conv_, state_.conv_floats}, {&rec_, state_.rec_floats}}) {
        const size_t bytes = size_t(total * std::max<int64_t>(n, 1)) * sizeof(float);
        arr->push_back(static_cast<float*>(storage_.alloc(bytes)));
        if (!arr->back())
          fail("[kv] cannot allocate {} bytes of recurrent state for layer {}", bytes, l);
      }
    }
    for (int64_t s = state_.slots - 1; s >= 0; --s) free_slots_.push_back(int32_t(s));
    for (int64_t s = total - 1; s >= state_.slots; --s) free_snaps_.push_back(int32_t(s));
    snap_block_.assign(size_t(total), -1);
    snap_pins_.assign(size_t(total), 0);
    snap_tick_.assign(size_t(total), 0);
  }
}

KvPool::~KvPool() {
  for (void* p : k_) storage_.free(p);
  for (void* p : v_) storage_.free(p);
  for (float* p : conv_) storage_.free(p);
  for (float* p : rec_) storage_.free(p);
}

size_t KvPool::bytes() const {
  return 2 * k_.size() * layer_bytes_ + size_t((state_.slots + state_.snapshots) * state_.layers *
                                               (state_.conv_floats + state_.rec_floats)) *
                                            sizeof(float);
}

uint64_t KvPool::hash_block(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int32_t t : tokens) {
    h ^= uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  return h ? h : 1;  // 0 means "not cached"
}

int32_t KvPool::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {  // evict the least recently released cached block
    b = lru_.front();
    lru_.pop_front();
    cache_.erase(block_hash_[size_t(b)]);
    block_hash_[size_t(b)] = 0;
    block_tokens_[size_t(b)].clear();
    drop_snapshot(b);
  } else {
    return -1;
  }
  refcount_[size_t(b)] = 1;
  ++used_;
  return b;
}

void KvPool::unref(int32_t b) {
  if (--refcount_[size_t(b)] > 0) return;
  --used_;
  if (block_hash_[size_t(b)] != 0) {
    lru_.push_back(b);
    lru_pos_[size_t(b)] = std::prev(lru_.end());
  } else {
    free_.push_back(b);
  }
}

int64_t KvPool::attach_prefix(KvSequence& s, std::span<const int32_t> prompt, int64_t max_tokens) {
  if (s.length != 0) fail("[kv] attach_prefix on a sequence that already holds KV");
  // The cached chain of blocks matching the prompt.
  std::vector<std::pair<int32_t, uint64_t>> chain;
  uint64_t parent = 0;
  for (int64_t n = 0; n + block_size_ <= std::min<int64_t>(max_tokens, int64_t(prompt.size()));
       n += block_size_) {
    auto blk = prompt.subspan(size_t(n), size_t(block_size_));
    const uint64_t h = hash_block(parent, blk);
    auto it = cache_.find(h);
    if (it == cache_.end()) break;
    const int32_t b = it->second;
    if (!std::equal(blk.begin(), blk.end(), block_tokens_[size_t(b)].begin())) break;
    chain.emplace_back(b, h);
    parent = h;
  }
  // With recurrent state, only up to the last block whose end state was kept.
  int32_t restore = -1;
  if (has_state()) {
    while (!chain.empty() && block_snap_[size_t(chain.back().first)] < 0) chain.pop_back();
    if (chain.empty() || (s.slot < 0 && free_slots_.empty())) return 0;
    restore = block_snap_[size_t(chain.back().first)];
    ++snap_pins_[size_t(restore)];
    snap_tick_[size_t(restore)] = ++tick_;
    if (s.slot < 0) {
      s.slot = free_slots_.back();
      free_slots_.pop_back();
    }
  }
  for (auto [b, h] : chain) {
    if (refcount_[size_t(b)]++ == 0) {  // was evictable: take it off the LRU list
      lru_.erase(lru_pos_[size_t(b)]);
      ++used_;
    }
    s.blocks.push_back(b);
    s.hashes.push_back(h);
    s.tokens.insert(s.tokens.end(), block_tokens_[size_t(b)].begin(),
                    block_tokens_[size_t(b)].end());
  }
  s.length = int64_t(chain.size()) * block_size_;
  s.restore = restore;
  return s.length;
}

int32_t KvPool::take_snapshot() {
  if (!free_snaps_.empty()) {
    const int32_t v = free_snaps_.back();
    free_snaps_.pop_back();
    return v;
  }
  int32_t best = -1;
  for (int32_t v = int32_t(state_.slots); v < int32_t(snap_block_.size()); ++v)
    if (snap_block_[size_t(v)] >= 0 && snap_pins_[size_t(v)] == 0 &&
        (best < 0 || snap_tick_[size_t(v)] < snap_tick_[size_t(best)]))
      best = v;
  if (best >= 0) {
    block_snap_[size_t(snap_block_[size_t(best)])] = -1;
    snap_block_[size_t(best)] = -1;
  }
  return best;
}

void KvPool::publish_snapshot(int32_t b, int32_t v) {
  block_snap_[size_t(b)] = v;
  snap_block_[size_t(v)] = b;
  snap_tick_[size_t(v)] = ++tick_;
}

void KvPool::drop_snapshot(int32_t b) {
  const int32_t v = block_snap_[size_t(b)];
  if (v < 0) return;
  free_snaps_.push_back(v);
  snap_block_[size_t(v)] = -1;
  block_snap_[size_t(b)] = -1;
}

void KvPool::restored(KvSequence& s) {
  if (s.restore >= 0) --snap_pins_[size_t(s.restore)];
  s.restore = -1;
}

int64_t KvPool::snapshots_cached() const {
  int64_t n = 0;
  for (int32_t v : block_snap_) n += v >= 0 ? 1 : 0;
  return n;
}

int32_t KvPool::snapshot_target(KvSequence& s, bool prefill) {
  if (!has_state() || s.length == 0 || s.length % block_size_ != 0 || s.slot < 0) return -1;
  const int32_t b = s.blocks[size_t(s.length / block_size_ - 1)];
  if (prefill) {  // published at once on the block that ends here
    if (block_hash_[size_t(b)] == 0 || block_snap_[size_t(b)] >= 0) return -1;
    const int32_t v = take_snapshot();
    if (v >= 0) publish_snapshot(b, v);
    return v;
  }
  if (s.snap < 0) s.snap = take_snapshot();
  if (s.snap >= 0) s.snap_length = s.length;
  return s.snap;
}

bool KvPool::reserve(KvSequence& s, int64_t n) {
  const int64_t need = (s.length + n + block_size_ - 1) / block_size_ - int64_t(s.blocks.size());
  const bool slot = has_state() && s.slot < 0;  // (attach_prefix may have taken it)
  if (slot && free_slots_.empty()) return false;
  if (need > 0 && need > blocks_available()) return false;
  if (slot) {
    s.slot = free_slots_.back();
    free_slots_.pop_back();
  }
  for (int64_t i = 0; i < need; ++i) s.blocks.push_back(take_block());
  return true;
}

void KvPool::commit(KvSequence& s, std::span<const int32_t> tokens) {
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  s.length += int64_t(tokens.size());
  // Publish each newly full block under the hash of the whole prefix up to it.
  while (int64_t(s.hashes.size()) < s.length / block_size_) {
    const size_t i = s.hashes.size();
    const uint64_t parent = i == 0 ? 0 : s.hashes[i - 1];
    auto blk =
        std::span<const int32_t>(s.tokens).subspan(i * size_t(block_size_), size_t(block_size_));
    const uint64_t h = hash_block(parent, blk);
    s.hashes.push_back(h);
    const int32_t b = s.blocks[i];
    if (block_hash_[size_t(b)] == 0 && !cache_.count(h)) {
      block_hash_[size_t(b)] = h;
      block_tokens_[size_t(b)].assign(blk.begin(), blk.end());
      cache_[h] = b;
    }
  }
}

void KvPool::release(KvSequence& s) {
  // The rolling snapshot joins the prefix cache on the block it ends, if that block is
  // published and has none yet.
  if (s.snap >= 0) {
    const size_t i = size_t(s.snap_length / block_size_) - 1;
    const int32_t b = i < s.blocks.size() ? s.blocks[i] : -1;
    if (b >= 0 && block_hash_[size_t(b)] != 0 && block_snap_[size_t(b)] < 0)
      publish_snapshot(b, s.snap);
    else
      free_snaps_.push_back(s.snap);
  }
  restored(s);  // (a sequence released before its first pass)
  for (int32_t b : s.blocks) unref(b);
  if (s.slot >= 0) free_slots_.push_back(s.slot);
  s = KvSequence{};
}

void KvPool::truncate(KvSequence& s, int64_t length) {
  if (length < 0 || length > s.length)
    fail("[kv] truncate to {} positions: the sequence holds {}", length, s.length);
  if (length == s.length) return;
  const size_t keep = size_t((length + block_size_ - 1) / block_size_);
  if (length % block_size_ != 0) {
    const int32_t b = s.blocks[keep - 1];
    if (refcount_[size_t(b)] > 1)
      fail("[kv] cannot roll back into block {}: another sequence shares it", b);
    if (const uint64_t h = block_hash_[size_t(b)]; h != 0) {
      auto it = cache_.find(h);
      if (it != cache_.end() && it->second == b) cache_.erase(it);
      block_hash_[size_t(b)] = 0;
      block_tokens_[size_t(b)].clear();
      if (has_state() && block_snap_[size_t(b)] >= 0) drop_snapshot(b);
    }
  }
  // A rolling snapshot past the new end is of tokens that are gone: it is refreshed at the next
  // boundary, and until then never published.
  if (s.snap >= 0 && s.snap_length > length) s.snap_length = 0;
  for (size_t i = keep; i < s.blocks.size(); ++i) unref(s.blocks[i]);
  s.blocks.resize(keep);
  s.tokens.resize(size_t(length));
  s.length = length;
  s.hashes.resize(std::min(s.hashes.size(), size_t(length / block_size_)));
}

}  // namespace basalt
