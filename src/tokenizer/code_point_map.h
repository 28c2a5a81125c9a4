// A byte per code point in two stages (blocks of 256 code points, identical blocks stored once):
// one lookup of a few nanoseconds for properties the tokenizer asks about for every character.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace braid::tokenizer::unicode {

class CodePointMap {
 public:
  // value(cp) for every code point 0..0x10FFFF.
  template <typename F>
  explicit CodePointMap(F value) {
    constexpr uint32_t kBlocks = 0x110000 / kBlock;
    index_.resize(kBlocks);
    std::map<std::string, uint16_t> seen;
    std::string block(kBlock, '\0');
    for (uint32_t b = 0; b < kBlocks; ++b) {
      for (uint32_t i = 0; i < kBlock; ++i) block[i] = static_cast<char>(value(b * kBlock + i));
      auto [it, fresh] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
      if (fresh) data_.insert(data_.end(), block.begin(), block.end());
      index_[b] = it->second;
    }
  }

  uint8_t operator[](uint32_t cp) const {
    if (cp > 0x10FFFF) return 0;
    return static_cast<uint8_t>(data_[index_[cp / kBlock] * kBlock + cp % kBlock]);
  }

 private:
  static constexpr uint32_t kBlock = 256;
  std::vector<uint16_t> index_;
  std::vector<char> data_;
};

}  // namespace braid::tokenizer::unicode
