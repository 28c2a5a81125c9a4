#include "engine/prompt_ids.h"

#include <charconv>
#include <string>

#include "braid/error.h"

namespace braid::engine {

namespace {

[[noreturn]] void refuse(std::string_view item, const std::string& why) {
  throw Error(ErrorKind::invalid_argument,
              "--prompt-ids: item '" + std::string(item) + "' " + why +
                  " (expected comma-separated token ids in [0, 2147483647])");
}

int32_t parse_one(std::string_view item) {
  // from_chars into int32 reports values past its range itself: nothing is narrowed.
  int32_t v = 0;
  const char* end = item.data() + item.size();
  const auto [ptr, ec] = std::from_chars(item.data(), end, v);
  if (ec == std::errc::result_out_of_range) refuse(item, "is out of range");
  if (item.empty() || ec != std::errc() || ptr != end) refuse(item, "is not an integer");
  if (v < 0) refuse(item, "is negative");
  return v;
}

}  // namespace

std::vector<int32_t> parse_prompt_ids(std::string_view text) {
  std::vector<int32_t> ids;
  if (text.empty()) return ids;
  for (;;) {
    const size_t comma = text.find(',');
    ids.push_back(parse_one(text.substr(0, comma)));
    if (comma == std::string_view::npos) return ids;
    text.remove_prefix(comma + 1);
  }
}

}  // namespace braid::engine
