// UTF-8 helpers for the tokenizer: validation, lossy decoding and character classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace braid::tokenizer {

enum class Utf8Status { ok, incomplete, invalid };

// One step of decoding at s[pos]. ok: a whole character of `length` bytes. incomplete: the bytes
// from pos to the end start a valid character that is cut off (length = bytes present).
// invalid: `length` bytes form the maximal ill-formed subpart, which the Unicode standard (and
// Rust's from_utf8_lossy, which Hugging Face uses) replaces by one U+FFFD.
struct Utf8Step {
  Utf8Status status;
  size_t length;
  uint32_t code_point;  // valid when status == ok
};
Utf8Step utf8_step(std::string_view s, size_t pos);

// Byte offset of the first byte that is not part of a whole valid character, or npos.
size_t utf8_first_invalid(std::string_view s);

// Appends `bytes` to out with each ill-formed subpart replaced by U+FFFD. When hold_incomplete is
// set, a cut-off character at the very end is not converted: its length is returned so the
// caller can keep those bytes until more arrive. Returns 0 otherwise.
size_t utf8_append_lossy(std::string_view bytes, std::string& out, bool hold_incomplete);

void append_utf8(uint32_t code_point, std::string& out);

// The character classes of Rust's regex \s and \w, used by added tokens' lstrip/rstrip and
// single_word options (categories from the pinned tables in unicode_data.h).
bool is_unicode_whitespace(uint32_t code_point);
bool is_word_char(uint32_t code_point);

}  // namespace braid::tokenizer
