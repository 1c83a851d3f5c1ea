// Paged KV cache: a pool of fixed-size blocks shared by every sequence, block tables per
// sequence, and a prefix cache that finds full blocks already computed for the same tokens.
//
// Layout per layer (keys and values alike): [n_blocks, block_size, Hkv, D] of `elem_bytes`
// each, in memory from a KvStorage (host by default; a backend's device memory for CUDA).
// A block is in one of three states: used (refcount > 0), cached (refcount 0 but holding a
// known token prefix, evictable, least recently released first) or free.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace basalt {

class KvPool;

// Where the cache's bytes live. Default: zero-filled host memory of f32.
struct KvStorage {
  std::function<void*(size_t)> alloc;  // zero-filled
  std::function<void(void*)> free;
  size_t elem_bytes = 4;
};

// Per-sequence recurrent state next to the KV blocks (hybrid models: Gated-DeltaNet conv and
// recurrent state, f32): `slots` slots, and for each of `layers` state layers a conv array
// [slots, conv_floats] and a recurrent array [slots, rec_floats]. A sequence takes a slot on
// its first reserve() and gives it back on release(). The prefix cache is off for a pool with
// state (a cached KV block says nothing about the recurrent state at its end).
struct KvStateSpec {
  int64_t slots = 0, layers = 0, conv_floats = 0, rec_floats = 0;
};

// One sequence's view of the pool: its block table and how many positions hold KV.
struct KvSequence {
  std::vector<int32_t> blocks;   // block ids, in position order
  std::vector<int32_t> tokens;   // the tokens whose KV is (or is being) written, by position
  int64_t length = 0;            // positions with valid KV
  std::vector<uint64_t> hashes;  // prefix hash of each full block (for the prefix cache)
  int32_t slot = -1;             // recurrent-state slot (pools with state), else -1
};

class KvPool {
 public:
  KvPool(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t n_kv_heads,
         int64_t head_dim, KvStorage storage = {}, KvStateSpec state = {});
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t blocks_used() const { return used_; }
  int64_t blocks_available() const { return int64_t(free_.size() + lru_.size()); }
  int64_t row_floats() const { return hkv_ * d_; }
  void* k(int64_t layer) { return k_[size_t(layer)]; }
  void* v(int64_t layer) { return v_[size_t(layer)]; }
  bool has_state() const { return state_.slots > 0; }
  const KvStateSpec& state_spec() const { return state_; }
  float* conv_state(int64_t layer) { return conv_[size_t(layer)]; }
  float* rec_state(int64_t layer) { return rec_[size_t(layer)]; }
  int64_t slots_available() const { return int64_t(free_slots_.size()); }
  // Address of position `pos` of a sequence in layer `layer`'s key (or value) array.
  int64_t offset(const KvSequence& s, int64_t pos) const {
    return (int64_t(s.blocks[size_t(pos / block_size_)]) * block_size_ + pos % block_size_) *
           row_floats();
  }

  // Reuses cached blocks for the longest prefix of `prompt` that is in the prefix cache,
  // at most `max_tokens` tokens (whole blocks). Returns the tokens reused.
  int64_t attach_prefix(KvSequence& s, std::span<const int32_t> prompt, int64_t max_tokens);
  // Makes room for `n` positions (and takes a state slot if the pool has state and the
  // sequence none); false (nothing changed) if the pool is out of blocks or slots.
  bool reserve(KvSequence& s, int64_t n);
  // Records that positions [length, length + tokens.size()) now hold KV for these tokens and
  // publishes newly completed blocks to the prefix cache.
  void commit(KvSequence& s, std::span<const int32_t> tokens);
  // Gives back every block of the sequence (cached blocks stay findable until evicted).
  void release(KvSequence& s);
  size_t bytes() const;

 private:
  int32_t take_block();  // a free block, else evicts the least recently released cached one
  void unref(int32_t b);
  static uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens);

  int64_t n_blocks_, block_size_, hkv_, d_;
  KvStorage storage_;
  size_t layer_bytes_ = 0;
  std::vector<void*> k_, v_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // cached blocks with refcount 0, oldest first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<uint64_t> block_hash_;                // 0: not in the prefix cache
  std::vector<std::vector<int32_t>> block_tokens_;  // tokens of cached blocks (collision check)
  std::unordered_map<uint64_t, int32_t> cache_;     // prefix hash -> block
  int64_t used_ = 0;
  KvStateSpec state_;
  std::vector<float*> conv_, rec_;
  std::vector<int32_t> free_slots_;
};

}  // namespace basalt
