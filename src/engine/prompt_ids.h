// `--prompt-ids 1,2,3`: a prompt given as token ids, parsed here (not in the CLI) so the tests
// and the fuzzer reach it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace braid::engine {

// Comma-separated decimal integers, each in [0, 2^31 - 1] (a token id is an int32 >= 0); no
// empty items, signs other than a leading '-' (refused as negative) or trailing text. Whether an
// id is inside the model's vocabulary is checked later, by the engine. Throws
// ErrorKind::invalid_argument naming the item.
std::vector<int32_t> parse_prompt_ids(std::string_view text);

}  // namespace braid::engine
