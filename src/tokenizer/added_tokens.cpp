#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace braid::tokenizer {
namespace {

// The code point that ends at byte `end` (exclusive) of valid UTF-8 text.
uint32_t code_point_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return utf8_step(text, start).code_point;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                                     const std::vector<std::string>& patterns)
    : tokens_(tokens) {
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (patterns[t].empty()) continue;  // an empty token can never match
    int node = 0;
    for (char c : patterns[t]) {
      const auto byte = static_cast<unsigned char>(c);
      int next = child(node, byte);
      if (next < 0) {
        next = static_cast<int>(nodes_.size());
        nodes_.push_back(Node{});
        nodes_[node].children.emplace_back(byte, next);
      }
      node = next;
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int>(t);  // first one wins
  }
}

int AddedTokenMatcher::child(int node, unsigned char byte) const {
  for (const auto& [b, next] : nodes_[node].children)
    if (b == byte) return next;
  return -1;
}

std::pair<int, size_t> AddedTokenMatcher::longest_at(std::string_view text, size_t pos) const {
  std::pair<int, size_t> best{-1, 0};
  int node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) best = {nodes_[node].token, i + 1 - pos};
  }
  return best;
}

std::vector<Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> out;
  size_t done = 0;  // text before this offset is already in `out`
  size_t pos = 0;   // where the search for the next match resumes
  while (pos < text.size()) {
    const auto [t, length] = longest_at(text, pos);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = *tokens_[t];
    size_t begin = pos, end = pos + length;
    pos = end;  // a rejected match is still consumed, as in Hugging Face's match iterator

    if (token.single_word) {
      const bool word_before = begin > 0 && is_word_char(code_point_before(text, begin));
      const bool word_after = end < text.size() && is_word_char(utf8_step(text, end).code_point);
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (begin > done && is_unicode_whitespace(code_point_before(text, begin))) {
        size_t prev = begin - 1;
        while ((static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        begin = prev;
      }
    }
    if (token.rstrip) {
      while (end < text.size()) {
        const Utf8Step step = utf8_step(text, end);
        if (!is_unicode_whitespace(step.code_point)) break;
        end += step.length;
      }
      pos = end;
    }
    if (begin > done) out.push_back({done, begin, -1});
    out.push_back({begin, end, token.id});
    done = end;
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
  return out;
}

}  // namespace braid::tokenizer
