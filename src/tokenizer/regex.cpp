#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "braid/error.h"
#include "tokenizer/regex_classes.h"
#include "tokenizer/utf8.h"

namespace braid::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// Per-call matching state: match data and a JIT stack large enough for long whitespace or
// letter runs (PCRE2's default JIT stack is 32 KiB). Created per call so one Regex can serve
// several threads.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  explicit MatchState(const pcre2_code* code) {
    data = pcre2_match_data_create_from_pattern(code, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (!data || !context)
      throw Error(ErrorKind::out_of_memory, "tokenizer: cannot allocate PCRE2 match data");
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

}  // namespace

Regex::Regex(const std::string& pattern, bool literal) : code_(std::make_unique<Code>()) {
  // No PCRE2_UCP: the Unicode classes are spelled out as ranges from the pinned tables
  // (regex_classes.h), so matching does not depend on PCRE2's own Unicode version.
  uint32_t options = PCRE2_UTF;
  if (literal) options |= PCRE2_LITERAL;
  const std::string expanded = literal ? pattern : expand_unicode_classes(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.data()), expanded.size(),
                              options, &error, &offset, nullptr);
  if (!code_->code)
    throw Error(ErrorKind::unsupported, "tokenizer: pre-tokenizer regex does not compile: " +
                                            pcre2_message(error) + " (pattern: " + pattern + ")");
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if absent
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  MatchState state(code_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    // NO_UTF_CHECK: the text was validated once; re-checking it at every match would make the
    // loop quadratic.
    const int rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw Error(ErrorKind::internal, "tokenizer: regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
    } else {
      // An empty match splits nothing: step over one character and search again.
      if (begin >= text.size()) break;
      start = begin + utf8_step(text, begin).length;
    }
  }
  return matches;
}

}  // namespace braid::tokenizer
