#include "tokenizer/bpe.h"

#include <functional>
#include <queue>

#include "tokenizer/byte_level.h"

namespace braid::tokenizer {

bool BpeModel::add_merge(const std::string& left, const std::string& right, int32_t rank) {
  const auto l = vocab.find(left);
  const auto r = vocab.find(right);
  const auto m = vocab.find(left + right);
  if (l == vocab.end() || r == vocab.end() || m == vocab.end()) return false;
  // A repeated pair keeps the later rank, as Hugging Face's map insertion does.
  merges[pair_key(l->second, r->second)] = Merge{rank, m->second};
  return true;
}

void BpeModel::finish_loading() {
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(bytes_to_symbols(std::string(1, static_cast<char>(b))));
    byte_ids[b] = it == vocab.end() ? -1 : it->second;
  }
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (ignore_merges) {
    const auto it = vocab.find(bytes_to_symbols(bytes));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }

  // One symbol per byte, in a doubly linked list so merges are O(1).
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(bytes.size());
  for (char c : bytes) {
    int32_t id = byte_ids[static_cast<unsigned char>(c)];
    if (id < 0) {
      if (!unk_id) continue;  // no unknown token: the byte is dropped, as Hugging Face does
      if (fuse_unk && !syms.empty() && syms.back().id == *unk_id) continue;
      id = *unk_id;
    }
    const int n = static_cast<int>(syms.size());
    syms.push_back({id, n - 1, -1, true});
    if (n > 0) syms[n - 1].next = n;
  }

  // Candidate merges, lowest rank first and leftmost among equal ranks. A candidate goes stale
  // when a neighbour merges first; it is then skipped when popped.
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int left) {
    const int right = syms[left].next;
    if (right < 0) return;
    const auto it = merges.find(pair_key(syms[left].id, syms[right].id));
    if (it != merges.end()) queue.push({it->second.rank, left, it->second.merged_id});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = syms[c.pos];
    if (!left.alive || left.next < 0) continue;
    const auto it = merges.find(pair_key(left.id, syms[left.next].id));
    if (it == merges.end() || it->second.merged_id != c.merged_id) continue;  // stale

    Symbol& right = syms[left.next];
    left.id = c.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }

  for (const Symbol& s : syms)
    if (s.alive) out.push_back(s.id);
}

}  // namespace braid::tokenizer
