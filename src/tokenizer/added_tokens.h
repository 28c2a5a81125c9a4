// Added tokens (special tokens such as <|im_start|>, and other added tokens such as <think>):
// found in the text before anything else, so the pre-tokenizer never splits them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace braid::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens = true)
  bool lstrip = false;       // swallows the whitespace on its left
  bool rstrip = false;       // swallows the whitespace on its right
  bool single_word = false;  // matches only where no word character touches it
  bool normalized = false;   // matched in normalized text (else in the raw text)
};

// A piece of text: either plain text to pre-tokenize (token_id < 0) or one added token.
struct Segment {
  size_t begin, end;  // byte range in the text that was split
  int32_t token_id;
};

// Finds added tokens the way Hugging Face's AddedVocabulary does: leftmost match first, the
// longest of those starting there; then the token's single_word / lstrip / rstrip options.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text to look for (the content, normalized for normalized tokens).
  AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                    const std::vector<std::string>& patterns);

  bool empty() const { return tokens_.empty(); }
  // Covers all of text, in order; plain-text segments are never empty.
  std::vector<Segment> split(std::string_view text) const;

 private:
  // A byte trie: node 0 is the root; `token` is the index in tokens_ of a pattern ending here.
  struct Node {
    std::vector<std::pair<unsigned char, int>> children;
    int token = -1;
  };
  std::vector<Node> nodes_{Node{}};
  std::vector<const AddedToken*> tokens_;

  int child(int node, unsigned char byte) const;
  // Longest pattern starting at pos: {token index, length}, or {-1, 0}.
  std::pair<int, size_t> longest_at(std::string_view text, size_t pos) const;
};

}  // namespace braid::tokenizer
