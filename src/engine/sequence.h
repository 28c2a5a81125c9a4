// One sequence being served: its tokens (prompt, then generated), how many of them have K/V in
// the cache, the pages that hold them, and what ends it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace braid::engine {

using Clock = std::chrono::steady_clock;

enum class FinishReason { none, stop, length, abort };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "" for none

enum class SequenceStatus { waiting, running, finished };

// What stops a sequence, besides the context running out.
struct StopCriteria {
  int max_tokens = 16;                // generated tokens at most
  int min_tokens = 0;                 // end-of-text and stop tokens are not chosen before this
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;      // strings; the text ends before the first one found
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
};

struct Sequence {
  uint64_t id = 0;
  std::string request_id;
  int index = 0;  // choice index within its request (n > 1)
  std::vector<int32_t> tokens;
  int prompt_len = 0;
  SamplingParams sampling;
  StopCriteria stop;

  SequenceStatus status = SequenceStatus::waiting;
  FinishReason finish = FinishReason::none;
  std::string stop_reason;  // the stop string or token id that ended it, if any

  // Cache state, kept by the block manager and the scheduler.
  int num_computed = 0;                // leading tokens whose K/V is in the cache
  std::vector<int32_t> pages;          // page ids, in order: page i holds tokens [i P, (i+1) P)
  std::vector<uint64_t> page_hashes;   // chain hashes of the leading full pages, once known
  int cached_prompt_tokens = -1;       // prompt tokens found in the prefix cache (-1: not yet asked)
  int preemptions = 0;

  Clock::time_point arrival{}, first_scheduled{}, first_token{}, last_token{};

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_output() const { return num_tokens() - prompt_len; }
  bool finished() const { return status == SequenceStatus::finished; }
};

}  // namespace braid::engine
