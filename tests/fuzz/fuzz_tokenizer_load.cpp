// Fuzz target: a tokenizer.json file. When it loads, the tokenizer is used as a server would:
// the text after the first NUL byte is encoded (with and without special tokens), the ids decoded
// whole and streamed, and a sweep of ids (past the vocabulary and negative ones included) decoded.
#include <cstdint>
#include <string>
#include <vector>

#include "braid/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static braid::fuzz::MemFile file;
  const auto [json, text] = braid::fuzz::split_at_nul(data, size);
  const std::string& path = file.write(data, json.size());
  try {
    const auto tok = braid::tokenizer::Tokenizer::from_file(path);
    std::vector<int32_t> sweep = {-1, tok.vocab_size(), INT32_MIN, INT32_MAX};
    for (int32_t id = 0; id < tok.vocab_size() && id < 256; ++id) sweep.push_back(id);
    (void)tok.decode(sweep, false);
    (void)tok.decode(sweep, true);
    for (int32_t id : sweep) {
      (void)tok.id_to_token(id);
      (void)tok.is_special(id);
      (void)tok.token_bytes(id);
    }
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, special);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size())
          braid::fuzz::property_failed("encode gave an id outside the vocabulary");
      braid::tokenizer::StreamDecoder stream(tok);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.finish();
      if (streamed != tok.decode(ids))
        braid::fuzz::property_failed("streamed decode differs from decode");
    }
  } catch (const braid::Error&) {
  }
  return 0;
}
