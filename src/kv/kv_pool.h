// Paged KV cache: a pool of fixed-size blocks shared by every sequence, block tables per
// sequence, and a prefix cache that finds full blocks already computed for the same tokens.
//
// Layout per layer (keys and values alike): [n_blocks, block_size, Hkv] rows of `row_bytes`
// (D elements of `elem_bytes`, or a backend's own row format, e.g. FP8 codes and scales), in memory
// from a KvStorage (host by default; a backend's device memory for CUDA). A block is in one of
// three states: used (refcount > 0), cached (refcount 0 but holding a known token prefix,
// evictable, least recently released first) or free.
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
  size_t row_bytes = 0;  // bytes of one position of one KV head (0: D · elem_bytes)
};

// Per-sequence recurrent state next to the KV blocks (hybrid models: Gated-DeltaNet conv and
// recurrent state, f32): `slots` live slots plus `snapshots` snapshot slots, and for each of
// `layers` state layers a conv array [slots + snapshots, conv_floats] and a recurrent array
// [slots + snapshots, rec_floats]. A sequence takes a live slot on its first reserve() (or
// attach_prefix) and gives it back on release().
//
// Prefix caching with state: a cached KV block is reusable only together with the recurrent
// state at its end, so the pool keeps snapshots of the state at block boundaries: one at the
// end of each prefill pass that ends on a boundary (published at once) and a rolling one that
// decode steps refresh at every boundary (published when the sequence is released). A cached
// prefix is attached only up to its last block with a snapshot; the snapshot is copied into
// the sequence's slot before its next pass (KvSequence::restore). Snapshots are evicted with
// their block, or, when all are taken, the least recently published or attached one (never
// one a sequence has yet to copy, nor a sequence's rolling one).
struct KvStateSpec {
  int64_t slots = 0, snapshots = 0, layers = 0, conv_floats = 0, rec_floats = 0;
};

// One sequence's view of the pool: its block table and how many positions hold KV.
struct KvSequence {
  std::vector<int32_t> blocks;   // block ids, in position order
  std::vector<int32_t> tokens;   // the tokens whose KV is (or is being) written, by position
  int64_t length = 0;            // positions with valid KV
  std::vector<uint64_t> hashes;  // prefix hash of each full block (for the prefix cache)
  int32_t slot = -1;             // recurrent-state slot (pools with state), else -1
  int32_t restore = -1;          // snapshot slot to copy into `slot` before the next pass
  int32_t snap = -1;             // this sequence's rolling snapshot slot (decode boundaries)
  int64_t snap_length = 0;       // the position count that snapshot captures
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
  // Bytes of one slot's state in one state layer (conv, recurrent).
  size_t conv_slot_bytes() const { return size_t(state_.conv_floats) * sizeof(float); }
  size_t rec_slot_bytes() const { return size_t(state_.rec_floats) * sizeof(float); }
  // After a pass that left `s` at a block boundary (length % block_size == 0): the slot to
  // copy its state into (a published snapshot after a prefill pass, the rolling one after a
  // decode step), or -1 when no snapshot slot can be had. The caller copies at once.
  int32_t snapshot_target(KvSequence& s, bool prefill);
  // The caller copied snapshot `s.restore` into the sequence's slot: it may be evicted again.
  void restored(KvSequence& s);
  int64_t snapshots_cached() const;
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
  // Rolls `s` back to its first `length` positions (speculative decoding drops the KV of
  // rejected draft tokens). Blocks past the new end go back to the pool (published ones stay
  // findable: their rows are the KV of the tokens they were published for); the block the new
  // end falls in keeps its first rows and leaves the prefix cache (the rest will be rewritten).
  // Throws basalt::Error when that block is shared with another sequence. The recurrent state
  // (hybrid models) has no history per position: the caller restores it (e.g. from a copy made
  // before the pass, then runs the kept tokens again: Generator::speculate).
  void truncate(KvSequence& s, int64_t length);
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
  std::vector<int32_t> free_slots_, free_snaps_;
  std::vector<int32_t> block_snap_;  // snapshot of the state at the end of a cached block, or -1
  // Per snapshot slot: the block it is published on (-1: none), when it was last published or
  // attached, and how many sequences still have to copy it (those are never evicted).
  std::vector<int32_t> snap_block_, snap_pins_;
  std::vector<uint64_t> snap_tick_;
  uint64_t tick_ = 0;
  int32_t take_snapshot();  // a free snapshot slot, else evicts the least recently used; -1 if none
  void publish_snapshot(int32_t b, int32_t v);
  void drop_snapshot(int32_t b);  // frees block b's snapshot
};

}  // namespace basalt
