// `braidinfer bench serve`: a load generator for any OpenAI-compatible server (braidinfer's own,
// vLLM, SGLang, ...), measured as `vllm bench serve` measures: random prompts sent at Poisson
// arrival times (or all at once), at most --max-concurrency in flight, each streamed and timed
// (TTFT, TPOT, ITL, E2E latency), then throughput over the whole run. A network client: it needs
// no GPU and works in a build without CUDA. Its parts (the HTTP client, the load generator, the
// statistics and their JSON, CSV and Markdown) are in suites/serve/, built into braid_http.
#pragma once

#include "bench/harness/suite.h"

namespace braid::bench {

// --base-url, --endpoint, --model, the prompts (--input-len, --output-len, --range-ratio,
// --num-prompts, --tokenizer, --vocab-size, --seed), the load (--request-rate, --burstiness,
// --max-concurrency); exits 1 when a request failed.
SuiteRun serve_command(CLI::App& cmd);

}  // namespace braid::bench
