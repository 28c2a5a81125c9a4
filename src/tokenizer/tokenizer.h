// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Qwen2/3, Llama-3, GPT-2 shapes).
//
// encode: added tokens are split out of the raw text first (longest match wins), the rest is
// normalized (NFC or nothing), split by the pre-tokenizer regex, mapped byte by byte through
// GPT-2's bytes_to_unicode table, and merged by BPE rank; the post-processor may then add template
// tokens (Llama-3's <|begin_of_text|>). decode: the inverse byte map, with invalid UTF-8 replaced
// by U+FFFD exactly as Hugging Face `tokenizers` does. Unsupported tokenizer.json shapes fail at
// load with ErrorKind::unsupported; unreadable or malformed files with ErrorKind::io.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace braid::tokenizer {

struct TokenizerData;  // everything parsed from tokenizer.json; defined in tokenizer_data.h

class Tokenizer {
 public:
  static Tokenizer from_file(const std::string& tokenizer_json);
  static Tokenizer from_dir(const std::string& dir);  // dir/tokenizer.json

  // Throws ErrorKind::invalid_argument when `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids with no token (holes past the vocabulary, e.g. padded embedding rows) decode to nothing,
  // as in Hugging Face.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int vocab_size() const;  // max id + 1 over the vocabulary and the added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // "" for an unknown id
  bool is_special(int32_t id) const;          // an added token marked "special": true

  // The raw bytes id stands for (the byte-level decoder's view of one token); "" if unknown.
  const std::string& token_bytes(int32_t id) const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerData> data) : data_(std::move(data)) {}
  // Shared and immutable: copies are cheap and encode/decode are safe from several threads.
  std::shared_ptr<const TokenizerData> data_;
};

// Turns ids into text one at a time while generating: push() returns only whole UTF-8
// characters and holds back the start of a character whose other bytes are still to come, so a
// stream never shows a broken character. The concatenation of every push() and finish() equals
// Tokenizer::decode of all the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  // Flushes what is held back; a sequence that never completed becomes U+FFFD.
  std::string finish();

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

}  // namespace braid::tokenizer
