// What one request of a serving benchmark measured, or why it failed.
#pragma once

#include <string>
#include <vector>

namespace braid::bench::serve {

struct RequestResult {
  bool ok = false;
  std::string error;   // why it failed: HTTP status, transport error, error event, timeout
  double start_s = 0;  // when it was sent, seconds from the start of the benchmark
  double end_s = 0;    // when it finished or failed, same clock
  // Latencies in ms from the send: to the first event with generated text (TTFT), between later
  // such events (ITL), to the end of the stream, its "data: [DONE]" (E2E).
  double ttft_ms = 0;
  double e2e_ms = 0;
  std::vector<double> itl_ms;
  int output_tokens = 0;        // the final usage's completion_tokens, else the content events
  bool usage_reported = false;  // output_tokens came from usage
  int input_tokens = 0;         // usage's prompt_tokens, else the prompt's sampled length
};

}  // namespace braid::bench::serve
