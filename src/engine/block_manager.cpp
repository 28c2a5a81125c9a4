#include "engine/block_manager.h"

#include <algorithm>
#include <string>

#include "braid/error.h"

namespace braid::engine {

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace

BlockManager::BlockManager(int num_pages, int page_size, bool prefix_caching, int reserved_pages)
    : num_pages_(num_pages),
      page_size_(page_size),
      reserved_(reserved_pages),
      prefix_caching_(prefix_caching),
      pages_(static_cast<size_t>(std::max(num_pages, 0))) {
  if (page_size <= 0 || reserved_pages < 0 || num_pages <= reserved_pages)
    throw Error(ErrorKind::invalid_argument,
                "block manager: needs a positive page size and more pages (" +
                    std::to_string(num_pages) + ") than reserved ones (" +
                    std::to_string(reserved_pages) + ")");
  // Handed out lowest id first.
  for (int32_t p = num_pages - 1; p >= reserved_; --p) unused_.push_back(p);
}

int BlockManager::free_pages() const {
  return static_cast<int>(unused_.size() + evictable_.size());
}

uint64_t BlockManager::page_hash(uint64_t parent, const int32_t* tokens) const {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < page_size_; ++i)
    h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x100000001b3ull * (i + 1)));
  return h;
}

int32_t BlockManager::take_page() {
  int32_t p;
  if (!unused_.empty()) {
    p = unused_.back();
    unused_.pop_back();
  } else {
    p = evictable_.front();
    evictable_.pop_front();
    unkey(p);
  }
  pages_[p].refs = 1;
  return p;
}

void BlockManager::unkey(int32_t page) {
  Page& pg = pages_[page];
  if (!pg.keyed) return;
  const auto it = by_hash_.find(pg.hash);
  if (it != by_hash_.end() && it->second == page) by_hash_.erase(it);
  pg.keyed = false;
  pg.tokens.clear();
}

int BlockManager::adopt_cached_prefix(Sequence& seq) {
  if (!seq.pages.empty())
    throw Error(ErrorKind::internal, "block manager: adopt_cached_prefix on a sequence with pages");
  seq.page_hashes.clear();
  seq.num_computed = 0;
  const bool first_ask = seq.cached_prompt_tokens < 0;
  if (prefix_caching_) {
    const int P = page_size_;
    uint64_t parent = 0;
    // Full pages that end before the last token.
    for (int i = 0; (i + 1) * P <= seq.num_tokens() - 1; ++i) {
      const int32_t* toks = seq.tokens.data() + static_cast<size_t>(i) * P;
      const uint64_t h = page_hash(parent, toks);
      const auto it = by_hash_.find(h);
      if (it == by_hash_.end()) break;
      Page& pg = pages_[it->second];
      if (pg.parent_hash != parent || !std::equal(pg.tokens.begin(), pg.tokens.end(), toks)) break;
      if (pg.refs == 0) evictable_.erase(pg.lru);
      ++pg.refs;
      seq.pages.push_back(it->second);
      seq.page_hashes.push_back(h);
      parent = h;
    }
    seq.num_computed = static_cast<int>(seq.pages.size()) * P;
  }
  if (first_ask) {
    seq.cached_prompt_tokens = std::min(seq.num_computed, seq.prompt_len);
    queried_ += seq.prompt_len;
    hit_ += seq.cached_prompt_tokens;
  }
  return seq.num_computed;
}

bool BlockManager::grow(Sequence& seq, int tokens) {
  const int need = pages_needed(tokens) - static_cast<int>(seq.pages.size());
  if (need <= 0) return true;
  if (need > free_pages()) return false;
  for (int i = 0; i < need; ++i) seq.pages.push_back(take_page());
  return true;
}

void BlockManager::cache_full_pages(Sequence& seq) {
  if (!prefix_caching_) return;
  const int P = page_size_;
  for (size_t i = seq.page_hashes.size(); static_cast<int>(i + 1) * P <= seq.num_computed; ++i) {
    const uint64_t parent = i == 0 ? 0 : seq.page_hashes[i - 1];
    const int32_t* toks = seq.tokens.data() + i * P;
    const uint64_t h = page_hash(parent, toks);
    seq.page_hashes.push_back(h);
    // Another sequence may have keyed the same tokens first: keep its page as the cached one.
    if (by_hash_.count(h)) continue;
    Page& pg = pages_[seq.pages[i]];
    pg.keyed = true;
    pg.hash = h;
    pg.parent_hash = parent;
    pg.tokens.assign(toks, toks + P);
    by_hash_.emplace(h, seq.pages[i]);
  }
}

void BlockManager::release(Sequence& seq) {
  // Tail first, so that under pressure a sequence's last pages go before its prefix.
  for (size_t i = seq.pages.size(); i-- > 0;) {
    const int32_t p = seq.pages[i];
    Page& pg = pages_[p];
    if (--pg.refs > 0) continue;
    if (pg.keyed) {
      evictable_.push_back(p);
      pg.lru = std::prev(evictable_.end());
    } else {
      unused_.push_back(p);
    }
  }
  seq.pages.clear();
  seq.page_hashes.clear();
  seq.num_computed = 0;
}

}  // namespace braid::engine
