// Block manager and prefix cache: reference counts, hash-chain lookups, LRU eviction of idle
// cached pages.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "engine/block_manager.h"

namespace tessera::engine {
namespace {

std::vector<int32_t> iota_tokens(int32_t first, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(BlockManager, AllocateReleaseCountsAndExhaustion) {
  BlockManager bm(3, 4);
  auto a = bm.allocate(), b = bm.allocate(), c = bm.allocate();
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(bm.allocate().has_value());
  EXPECT_EQ(bm.num_used(), 3);
  bm.retain(*a);
  EXPECT_EQ(bm.ref_count(*a), 2);
  bm.release(*a);
  EXPECT_EQ(bm.ref_count(*a), 1);
  EXPECT_FALSE(bm.leak_report().empty());
  for (auto p : {a, b, c}) bm.release(*p);
  EXPECT_EQ(bm.leak_report(), "");
  EXPECT_THROW(bm.release(*a), core::Error);
}

TEST(BlockManager, HashChainDependsOnParentAndTokens) {
  const auto t = iota_tokens(10, 4);
  const uint64_t h1 = page_hash(kRootPageHash, t);
  EXPECT_EQ(h1, page_hash(kRootPageHash, iota_tokens(10, 4)));
  EXPECT_NE(h1, page_hash(h1, t));  // same tokens, other position in the chain
  EXPECT_NE(h1, page_hash(kRootPageHash, iota_tokens(11, 4)));
}

TEST(BlockManager, CachedPageIsReusedUntilEvictedLeastRecentlyUsedFirst) {
  BlockManager bm(3, 4);
  const auto t0 = iota_tokens(0, 4), t1 = iota_tokens(100, 4);
  const uint64_t k0 = page_hash(kRootPageHash, t0), k1 = page_hash(kRootPageHash, t1);
  int32_t p0 = *bm.allocate(), p1 = *bm.allocate();
  bm.register_page(p0, k0, kRootPageHash, t0);
  bm.register_page(p1, k1, kRootPageHash, t1);
  // A second holder of the same prefix shares the page.
  auto hit = bm.acquire_cached(k0, kRootPageHash, t0);
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, p0);
  EXPECT_EQ(bm.ref_count(p0), 2);
  // Wrong tokens under the same key never hit.
  EXPECT_FALSE(bm.acquire_cached(k0, kRootPageHash, t1).has_value());
  bm.release(p0);
  bm.release(p0);  // p0 idle first
  bm.release(p1);  // then p1
  EXPECT_EQ(bm.num_cached_idle(), 2);
  EXPECT_EQ(bm.leak_report(), "");
  // An idle cached page can still be hit (and leaves the idle list).
  ASSERT_TRUE(bm.acquire_cached(k1, kRootPageHash, t1));
  bm.release(p1);  // p1 is now the most recently released
  // Free page first, then the least recently released cached page (p0).
  int32_t f = *bm.allocate();
  EXPECT_NE(f, p0);
  EXPECT_NE(f, p1);
  int32_t e = *bm.allocate();
  EXPECT_EQ(e, p0);
  EXPECT_FALSE(bm.acquire_cached(k0, kRootPageHash, t0).has_value());  // evicted
  EXPECT_TRUE(bm.acquire_cached(k1, kRootPageHash, t1).has_value());
  for (int32_t p : {f, e, p1}) bm.release(p);
  EXPECT_EQ(bm.leak_report(), "");
}

TEST(BlockManager, DisabledPrefixCacheNeverHits) {
  BlockManager bm(2, 4, /*enable_prefix_cache=*/false);
  const auto t = iota_tokens(0, 4);
  const uint64_t k = page_hash(kRootPageHash, t);
  int32_t p = *bm.allocate();
  bm.register_page(p, k, kRootPageHash, t);
  EXPECT_FALSE(bm.acquire_cached(k, kRootPageHash, t).has_value());
  bm.release(p);
  EXPECT_EQ(bm.num_cached_idle(), 0);
}

}  // namespace
}  // namespace tessera::engine
