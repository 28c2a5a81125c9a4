// The KV page pool's bookkeeping (host side only; the pages themselves live in the KV cache).
//
// Pages are handed out on demand as a sequence grows and taken back when it ends or is
// preempted. With prefix caching, every full page is keyed by a hash chained over its tokens and
// those of the pages before it; a new sequence whose leading tokens match adopts those pages
// (reference counts) instead of computing them again. A page nobody holds keeps its contents and
// key until its slot is needed: such pages are evicted least-recently-used, the tail of a
// sequence before its head. A hash match is confirmed against the page's tokens and its parent's
// key, so a collision can cost a cache miss but never wrong K/V.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"

namespace braid::engine {

class BlockManager {
 public:
  // Pages [reserved_pages, num_pages) are managed; the first reserved_pages (the engine's scratch
  // page for padded rows) are never handed out.
  BlockManager(int num_pages, int page_size, bool prefix_caching, int reserved_pages = 1);

  int page_size() const { return page_size_; }
  int total_pages() const { return num_pages_ - reserved_; }
  int free_pages() const;   // pages that can be handed out: unused or evictable
  int used_pages() const { return total_pages() - free_pages(); }  // held by some sequence
  bool prefix_caching() const { return prefix_caching_; }

  // Adopts the longest run of cached pages that starts seq's tokens, leaving at least its last
  // token to compute (its logits are needed); sets seq.num_computed to the tokens covered and
  // returns that number. seq must hold no pages yet.
  int adopt_cached_prefix(Sequence& seq);
  // Gives seq enough pages to hold `tokens` tokens. False, with nothing changed, when the pool
  // has too few free pages.
  bool grow(Sequence& seq, int tokens);
  // Keys seq's full pages among its first seq.num_computed tokens into the prefix cache.
  void cache_full_pages(Sequence& seq);
  // Takes back all of seq's pages (its cache state is reset: no pages, nothing computed).
  void release(Sequence& seq);

  // Prefix-cache counters (tokens): asked = prompt tokens looked up, hit = found cached.
  int64_t prefix_queried_tokens() const { return queried_; }
  int64_t prefix_hit_tokens() const { return hit_; }
  int pages_needed(int tokens) const { return (tokens + page_size_ - 1) / page_size_; }

 private:
  struct Page {
    int refs = 0;
    bool keyed = false;       // in by_hash_
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    std::vector<int32_t> tokens;  // the page's tokens, to confirm a hash match
    std::list<int32_t>::iterator lru;  // position in evictable_ when refs == 0 and keyed
  };
  uint64_t page_hash(uint64_t parent, const int32_t* tokens) const;
  int32_t take_page();  // an unused page, else the least recently used evictable one
  void unkey(int32_t page);

  int num_pages_, page_size_, reserved_;
  bool prefix_caching_;
  std::vector<Page> pages_;
  std::vector<int32_t> unused_;        // never keyed, or unkeyed: reuse first
  std::list<int32_t> evictable_;       // keyed, refs == 0; front = evict first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t queried_ = 0, hit_ = 0;
};

}  // namespace braid::engine
