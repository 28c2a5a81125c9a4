// Block manager: pages on demand, prefix caching by chained hashes (shared pages, confirmed
// matches, the last token always computed), least-recently-used eviction, the counters.
#include "engine/block_manager.h"
#include "test_util.h"

namespace braid::test {
namespace {

engine::Sequence seq_of(std::vector<int32_t> tokens) {
  engine::Sequence s;
  s.tokens = std::move(tokens);
  s.prompt_len = s.num_tokens();
  return s;
}

std::vector<int32_t> iota_tokens(int n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = start + i;
  return t;
}

// Runs a sequence's whole prompt through the cache: pages, "computed", keyed.
void compute_all(engine::BlockManager& bm, engine::Sequence& s) {
  bm.adopt_cached_prefix(s);
  ASSERT_TRUE(bm.grow(s, s.num_tokens()));
  s.num_computed = s.num_tokens();
  bm.cache_full_pages(s);
}

TEST(BlockManager, GrowsOnDemandAndGivesBack) {
  engine::BlockManager bm(/*num_pages=*/9, /*page_size=*/4, /*prefix_caching=*/false);
  EXPECT_EQ(bm.total_pages(), 8);  // page 0 is reserved
  auto s = seq_of(iota_tokens(10));
  ASSERT_TRUE(bm.grow(s, 1));
  EXPECT_EQ(s.pages.size(), 1u);
  ASSERT_TRUE(bm.grow(s, 9));
  EXPECT_EQ(s.pages.size(), 3u);
  EXPECT_EQ(bm.free_pages(), 5);
  for (int32_t p : s.pages) EXPECT_NE(p, 0) << "the scratch page is never handed out";
  EXPECT_FALSE(bm.grow(s, 4 * 9)) << "needs 9 pages, the pool has 8";
  EXPECT_EQ(s.pages.size(), 3u) << "a failed grow changes nothing";
  bm.release(s);
  EXPECT_TRUE(s.pages.empty());
  EXPECT_EQ(bm.free_pages(), 8);
  EXPECT_EQ(bm.used_pages(), 0);
}

TEST(BlockManager, SharesFullPagesOfACommonPrefix) {
  engine::BlockManager bm(32, 4, true);
  auto a = seq_of(iota_tokens(10));  // pages [0,4) [4,8) full, [8,10) partial
  compute_all(bm, a);
  EXPECT_EQ(a.page_hashes.size(), 2u);

  auto b = seq_of(iota_tokens(10));
  b.tokens[9] = 7;  // differs only in the partial page
  EXPECT_EQ(bm.adopt_cached_prefix(b), 8);
  EXPECT_EQ(b.num_computed, 8);
  ASSERT_EQ(b.pages.size(), 2u);
  EXPECT_EQ(b.pages[0], a.pages[0]);
  EXPECT_EQ(b.pages[1], a.pages[1]);
  EXPECT_EQ(b.cached_prompt_tokens, 8);

  // A prompt that is exactly the cached pages keeps its last page to compute (it needs logits).
  auto c = seq_of(iota_tokens(8));
  EXPECT_EQ(bm.adopt_cached_prefix(c), 4);

  // The same second page after a different first page is not a match (the hash is chained).
  auto d = seq_of(iota_tokens(10));
  d.tokens[0] = 1;
  EXPECT_EQ(bm.adopt_cached_prefix(d), 0);

  EXPECT_EQ(bm.prefix_queried_tokens(), 10 + 10 + 8 + 10);
  EXPECT_EQ(bm.prefix_hit_tokens(), 0 + 8 + 4 + 0);

  // Shared pages stay until the last holder lets go.
  const int before = bm.used_pages();
  bm.release(a);
  EXPECT_EQ(bm.used_pages(), before - 1) << "only a's partial page is free; its full pages are b's too";
  bm.release(b);
  bm.release(c);
  bm.release(d);
  EXPECT_EQ(bm.used_pages(), 0);
}

TEST(BlockManager, ReleasedPagesStayCachedUntilEvictedLeastRecentlyUsedFirst) {
  engine::BlockManager bm(/*num_pages=*/5, /*page_size=*/2, true);  // 4 usable pages
  auto a = seq_of(iota_tokens(5, 10));  // 2 full pages + 1 partial
  compute_all(bm, a);
  bm.release(a);
  EXPECT_EQ(bm.free_pages(), 4);
  auto again = seq_of(iota_tokens(5, 10));
  EXPECT_EQ(bm.adopt_cached_prefix(again), 4) << "released pages keep their contents";
  bm.release(again);

  // A new sequence needing 3 pages takes the unused one first, then evicts a's tail page before
  // its head.
  auto b = seq_of(iota_tokens(6, 500));
  EXPECT_EQ(bm.adopt_cached_prefix(b), 0);
  ASSERT_TRUE(bm.grow(b, 6));
  auto probe = seq_of(iota_tokens(5, 10));
  EXPECT_EQ(bm.adopt_cached_prefix(probe), 2) << "a's first page survived, its second was evicted";
  bm.release(probe);
  bm.release(b);
}

TEST(BlockManager, WithoutPrefixCachingNothingIsShared) {
  engine::BlockManager bm(16, 4, false);
  auto a = seq_of(iota_tokens(12));
  compute_all(bm, a);
  auto b = seq_of(iota_tokens(12));
  EXPECT_EQ(bm.adopt_cached_prefix(b), 0);
  bm.release(a);
  EXPECT_EQ(bm.used_pages(), 0);
}

TEST(BlockManager, BadSizesAreErrors) {
  expect_error([] { engine::BlockManager(1, 16, true); }, ErrorKind::invalid_argument, {"pages"});
  expect_error([] { engine::BlockManager(8, 0, true); }, ErrorKind::invalid_argument, {"page size"});
}

}  // namespace
}  // namespace braid::test
