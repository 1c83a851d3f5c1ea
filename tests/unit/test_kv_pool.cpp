// Paged KV pool: block accounting, the prefix cache (hash chain, collisions checked), eviction.
#include <gtest/gtest.h>

#include <numeric>

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

}  // namespace
}  // namespace basalt
