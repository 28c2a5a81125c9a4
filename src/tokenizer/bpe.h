// The BPE model: vocabulary, ranked merges, and the merge loop that turns one pre-token into ids.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace braid::tokenizer {

struct BpeModel {
  std::unordered_map<std::string, int32_t> vocab;  // token (byte-level alphabet) -> id

  // (left id, right id) -> the merge's rank (its position in the list; lower merges first)
  // and the id of the merged token.
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  std::unordered_map<uint64_t, Merge> merges;

  std::array<int32_t, 256> byte_ids{};  // id of each single byte's symbol, -1 if not in vocab
  bool ignore_merges = false;           // a pre-token that is itself in vocab is emitted whole
  std::optional<int32_t> unk_id;        // for bytes with no symbol; otherwise they are dropped
  bool fuse_unk = false;

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  // Adds a merge of two tokens; the rank is the number of merges added before it. Returns false
  // (naming nothing) when a part or the merged token is missing from vocab.
  bool add_merge(const std::string& left, const std::string& right, int32_t rank);

  void finish_loading();  // fills byte_ids from vocab

  // Appends the ids of one pre-token, given as raw bytes.
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;
};

}  // namespace braid::tokenizer
