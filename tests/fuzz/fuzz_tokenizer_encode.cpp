// Fuzz target: arbitrary bytes through a real tokenizer (models/tiny-fortunes: byte-level BPE
// with the Llama-3 / Qwen pre-tokenizer regex and one special token), loaded once. Checks:
// invalid UTF-8 is refused with braid::Error; valid text round-trips (decode(encode(t)) == t, as
// this tokenizer has no normalizer); every id is in the vocabulary; streaming decode equals
// decode; and the input read as int32 ids (any value) decodes without fault.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "braid/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {

const braid::tokenizer::Tokenizer& tokenizer() {
  static const auto tok = braid::tokenizer::Tokenizer::from_dir(
      std::string(BRAID_SOURCE_DIR) + "/models/tiny-fortunes");
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<int32_t> ids = tok.encode(text, /*add_special_tokens=*/false);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size())
        braid::fuzz::property_failed("encode gave an id outside the vocabulary");
    if (tok.decode(ids) != text) braid::fuzz::property_failed("decode(encode(text)) != text");
    braid::tokenizer::StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    if (streamed + stream.finish() != text)
      braid::fuzz::property_failed("streamed decode differs from the text");
  } catch (const braid::Error&) {  // invalid UTF-8
  }
  std::vector<int32_t> raw(size / sizeof(int32_t));
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * sizeof(int32_t));
  (void)tok.decode(raw, false);
  (void)tok.decode(raw, true);
  return 0;
}
