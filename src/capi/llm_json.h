// Reading the JSON that braid_llm_* calls take: typed fields whose errors name the call, the
// object ("options", "requests[2]") and the key, so a caller in another language sees exactly
// which value was wrong. Everything throws braid::Error (invalid_argument).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace braid::capi::llm {

using json = nlohmann::json;

// The object a field lives in, for messages: "braid_llm_generate: requests[2].top_p ...".
struct Where {
  const char* call;    // "braid_llm_generate"
  std::string object;  // "requests[2]"
  std::string key(std::string_view k) const { return object + "." + std::string(k); }
};

[[noreturn]] void bad(const Where& w, const std::string& message);

// Parses text (NULL or all blank -> `if_empty`); a syntax error names `what` and the position.
json parse(const char* call, const char* what, const char* text, json if_empty);

// Every key of `object` must be in `known`; otherwise the error lists the unknown keys and the
// known ones.
void reject_unknown_keys(const Where& w, const json& object,
                         std::initializer_list<std::string_view> known);

// The value of `key`, or nullptr when it is absent or null (null means "the default").
const json* field(const json& object, std::string_view key);

double number(const Where& w, const json& object, std::string_view key, double fallback);
// An integer (or an integral float such as 16.0) in [lo, hi].
int64_t integer(const Where& w, const json& object, std::string_view key, int64_t fallback,
                int64_t lo, int64_t hi);
bool boolean(const Where& w, const json& object, std::string_view key, bool fallback);
// A list of token ids (integers in the int32 range; the vocabulary is the engine's to check).
std::vector<int32_t> token_ids(const Where& w, const json& value, std::string_view key);

// JSON text for the caller: invalid UTF-8 (never expected) becomes U+FFFD instead of an error.
std::string dump(const json& value);
// dump() cut to 80 characters, for error messages.
std::string shown(const json& value);
// A copy the caller frees with braid_free_string (malloc'd, NUL-terminated).
char* to_c_string(const std::string& s);

}  // namespace braid::capi::llm
