// GPT-2's byte-level alphabet: every byte gets a printable code point, so BPE can work on text
// without spaces or control characters and still represent any byte sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace braid::tokenizer {

// The code point byte b stands for: printable Latin-1 bytes map to themselves, the other 68
// (controls, space, DEL, NBSP, soft hyphen) to U+0100 onwards in byte order.
uint32_t byte_to_code_point(unsigned char b);

// `bytes` written in the byte-level alphabet, as UTF-8 (the form vocab and merges use).
std::string bytes_to_symbols(std::string_view bytes);

// The bytes a token string stands for; nullopt when one of its characters is not in the
// alphabet (an added token such as "<|im_start|>" is fine: its characters are printable ASCII).
std::optional<std::string> symbols_to_bytes(std::string_view token);

}  // namespace braid::tokenizer
