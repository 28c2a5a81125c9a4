// Fuzz target: the text of `--prompt-ids`. Accepted ids must be valid int32 token ids, and the
// ids written back as "a,b,c" must parse to the same list.
#include <cstdint>
#include <string>
#include <string_view>

#include "braid/error.h"
#include "engine/prompt_ids.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto ids = braid::engine::parse_prompt_ids(text);
    std::string again;
    for (int32_t id : ids) {
      if (id < 0) braid::fuzz::property_failed("a negative id was accepted");
      again += (again.empty() ? "" : ",") + std::to_string(id);
    }
    if (braid::engine::parse_prompt_ids(again) != ids)
      braid::fuzz::property_failed("ids written back parse differently");
  } catch (const braid::Error&) {
  }
  return 0;
}
