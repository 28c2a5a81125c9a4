// Unicode Normalization Form C with the pinned Unicode 9.0 data (unicode_data.h): what Hugging
// Face's NFC normalizer computes, whatever Unicode version the system's libraries carry.
#pragma once

#include <string>
#include <string_view>

namespace braid::tokenizer {

// NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

}  // namespace braid::tokenizer
