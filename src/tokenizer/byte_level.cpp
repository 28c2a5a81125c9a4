#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace braid::tokenizer {
namespace {

struct ByteTable {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::array<int, 324> from_cp{};  // code point -> byte, -1 where none; 256 + 68 code points

  ByteTable() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = b;
      append_utf8(to_cp[b], to_utf8[b]);
    }
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

}  // namespace

uint32_t byte_to_code_point(unsigned char b) { return table().to_cp[b]; }

std::string bytes_to_symbols(std::string_view bytes) {
  const ByteTable& t = table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_utf8[static_cast<unsigned char>(c)];
  return out;
}

std::optional<std::string> symbols_to_bytes(std::string_view token) {
  const ByteTable& t = table();
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const Utf8Step step = utf8_step(token, pos);
    if (step.status != Utf8Status::ok || step.code_point >= t.from_cp.size() ||
        t.from_cp[step.code_point] < 0)
      return std::nullopt;
    out.push_back(static_cast<char>(t.from_cp[step.code_point]));
    pos += step.length;
  }
  return out;
}

}  // namespace braid::tokenizer
