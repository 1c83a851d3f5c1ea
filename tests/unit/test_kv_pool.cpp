// Paged KV pool: block accounting, the prefix cache (hash chain, collisions checked), eviction.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "kv/kv_pool.h"

namespace basalt {
namespace {

std::vector<int32_t> iota(int n, int start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(KvPool, ReserveCommitRelease) {
  KvPool pool(2, 8, 4, 1, 2);
  KvSequence s;
  ASSERT_TRUE(pool.reserve(s, 10));
  EXPECT_EQ(s.blocks.size(), 3u);
  EXPECT_EQ(pool.blocks_used(), 3);
  pool.commit(s, iota(10));
  EXPECT_EQ(s.length, 10);
  EXPECT_EQ(s.hashes.size(), 2u);  // two full blocks published
  EXPECT_FALSE(pool.reserve(s, 100));
  EXPECT_EQ(s.blocks.size(), 3u);  // a failed reserve changes nothing
  pool.release(s);
  EXPECT_EQ(pool.blocks_used(), 0);
  EXPECT_EQ(pool.blocks_available(), 8);
}

// Speculative decoding's rollback: blocks past the new end go back to the pool, the block the
// end falls in leaves the prefix cache, and nothing shared or stateful is rolled back.
TEST(KvPool, TruncateRollsBackBlocksAndThePrefixCache) {
  KvPool pool(1, 16, 4, 1, 2);
  KvSequence s;
  ASSERT_TRUE(pool.reserve(s, 11));
  pool.commit(s, iota(11));  // blocks [0..3] [4..7] published, [8..10] partial
  pool.truncate(s, 6);       // back into the second block
  EXPECT_EQ(s.length, 6);
  EXPECT_EQ(s.tokens, iota(6));
  EXPECT_EQ(s.blocks.size(), 2u);
  EXPECT_EQ(s.hashes.size(), 1u);
  EXPECT_EQ(pool.blocks_used(), 2);
  // The second block's rows 6, 7 will be rewritten: another prompt must not find it.
  KvSequence t;
  EXPECT_EQ(pool.attach_prefix(t, iota(8), 8), 4);
  // Committing other tokens republishes it under their hash.
  ASSERT_TRUE(pool.reserve(s, 2));
  pool.commit(s, std::vector<int32_t>{60, 70});
  EXPECT_EQ(s.hashes.size(), 2u);
  KvSequence u;
  std::vector<int32_t> other = iota(6);
  other.push_back(60), other.push_back(70);
  EXPECT_EQ(pool.attach_prefix(u, other, 8), 8);
  // Now shared with u: rolling s back into that block would overwrite u's rows.
  EXPECT_THROW(pool.truncate(s, 7), Error);
  EXPECT_NO_THROW(pool.truncate(s, 4));  // whole blocks only: the shared one just loses a ref
  EXPECT_EQ(s.blocks.size(), 1u);
  EXPECT_THROW(pool.truncate(s, 5), Error);  // past the end
  pool.release(s), pool.release(t), pool.release(u);
  EXPECT_EQ(pool.blocks_used(), 0);

  // With recurrent state: a rolled-back published block loses its snapshot (it described
  // tokens that are gone), and a rolling snapshot past the new end is never published.
  KvStateSpec st{2, 2, 1, 4, 4};
  KvPool stateful(1, 16, 4, 1, 2, {}, st);
  KvSequence h;
  ASSERT_TRUE(stateful.reserve(h, 8));
  stateful.commit(h, iota(8));
  ASSERT_GE(stateful.snapshot_target(h, true), 0);  // published on the block ending at 8
  EXPECT_EQ(stateful.snapshots_cached(), 1);
  stateful.truncate(h, 6);
  EXPECT_EQ(stateful.snapshots_cached(), 0);
  ASSERT_TRUE(stateful.reserve(h, 2));
  stateful.commit(h, std::vector<int32_t>{60, 70});
  ASSERT_GE(stateful.snapshot_target(h, false), 0);  // the rolling one, at 8
  stateful.truncate(h, 7);
  EXPECT_EQ(h.snap_length, 0);
  stateful.release(h);
  KvSequence again;
  EXPECT_EQ(stateful.attach_prefix(again, iota(8), 8), 0);  // no snapshot: nothing reusable
}

TEST(KvPool, PrefixCacheReusesWholeBlocksOfTheSamePrefix) {
  KvPool pool(1, 16, 4, 1, 2);
  KvSequence a;
  const auto prompt = iota(11);
  ASSERT_TRUE(pool.reserve(a, 11));
  pool.commit(a, prompt);
  // Same first 8 tokens, then different: two blocks reused.
  auto other = iota(11);
  other[9] = 99;
  KvSequence b;
  EXPECT_EQ(pool.attach_prefix(b, other, int64_t(other.size()) - 1), 8);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(pool.blocks_used(), 3);  // shared blocks count once
  // A different first block: no reuse (the hash chain covers the whole prefix).
  auto shifted = iota(11, 1);
  KvSequence c;
  EXPECT_EQ(pool.attach_prefix(c, shifted, 10), 0);
  // max_tokens caps the reuse.
  KvSequence d;
  EXPECT_EQ(pool.attach_prefix(d, prompt, 7), 4);
  pool.release(a);
  pool.release(b);
  pool.release(c);
  pool.release(d);
  // Released blocks stay findable until evicted.
  KvSequence e;
  EXPECT_EQ(pool.attach_prefix(e, prompt, 10), 8);
  pool.release(e);
}

TEST(KvPool, EvictsLeastRecentlyReleasedCachedBlocks) {
  KvPool pool(1, 4, 2, 1, 1);
  KvSequence a;
  ASSERT_TRUE(pool.reserve(a, 4));
  pool.commit(a, iota(4));
  pool.release(a);  // 2 cached blocks, 2 free
  KvSequence b;
  ASSERT_TRUE(pool.reserve(b, 8));  // needs all 4: evicts both cached blocks
  EXPECT_EQ(pool.blocks_available(), 0);
  pool.release(b);
  KvSequence c;
  EXPECT_EQ(pool.attach_prefix(c, iota(4), 3), 0);  // evicted
}

// Pools with recurrent state (hybrid models): a cached prefix is reusable only up to a block
// whose end state was snapshotted; a snapshot a sequence has yet to copy is never evicted.
TEST(KvPool, StateSnapshotsGateThePrefixCache) {
  KvStateSpec st;
  st.slots = 2;
  st.snapshots = 1;
  st.layers = 1;
  st.conv_floats = 3;
  st.rec_floats = 5;
  KvPool pool(1, 16, 4, 1, 2, {}, st);
  const auto prompt = iota(10);
  KvSequence a;
  ASSERT_TRUE(pool.reserve(a, 8));
  EXPECT_GE(a.slot, 0);
  pool.commit(a, std::span(prompt).first(8));  // a prefill pass ending on a block boundary
  const int32_t v = pool.snapshot_target(a, true);
  EXPECT_GE(v, 2);  // snapshot slots follow the live ones
  EXPECT_EQ(pool.snapshots_cached(), 1);
  pool.release(a);
  KvSequence b;
  EXPECT_EQ(pool.attach_prefix(b, prompt, 9), 8);
  EXPECT_EQ(b.restore, v);
  EXPECT_GE(b.slot, 0);
  // The only snapshot slot is pinned until b copies it.
  KvSequence c;
  ASSERT_TRUE(pool.reserve(c, 4));
  pool.commit(c, iota(4, 100));
  EXPECT_EQ(pool.snapshot_target(c, true), -1);
  pool.restored(b);
  EXPECT_EQ(b.restore, -1);
  pool.release(b);
  pool.release(c);
  // Now it can be evicted: the prompt's blocks are still cached, but without the state at
  // their end nothing is reusable.
  KvSequence d;
  ASSERT_TRUE(pool.reserve(d, 4));
  pool.commit(d, iota(4, 200));
  EXPECT_EQ(pool.snapshot_target(d, true), v);
  pool.release(d);
  KvSequence e;
  EXPECT_EQ(pool.attach_prefix(e, prompt, 9), 0);
  EXPECT_EQ(pool.attach_prefix(e, iota(6, 200), 5), 4);
  pool.release(e);
  // Decode steps keep a rolling snapshot, published on release.
  KvSequence f;
  const auto tokens = iota(8, 300);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(pool.reserve(f, 1));
    pool.commit(f, std::span(tokens).subspan(size_t(i), 1));
    const int32_t t = pool.snapshot_target(f, false);
    EXPECT_EQ(t >= 0, (i + 1) % 4 == 0) << i;
  }
  EXPECT_EQ(f.snap_length, 8);
  pool.release(f);
  KvSequence g;
  EXPECT_EQ(pool.attach_prefix(g, iota(9, 300), 8), 8);
  pool.release(g);
}

}  // namespace
}  // namespace basalt
