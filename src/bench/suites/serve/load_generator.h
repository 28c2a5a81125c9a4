// The load of a serving benchmark: requests sent at their arrival times (bench/serve/arrivals.h)
// by a pool of worker threads, one request in flight per worker, so the pool's size is the
// --max-concurrency bound that vLLM enforces with a semaphore. A request that arrives while every
// worker is busy waits for the next free one, and its clock starts when it is sent.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench/suites/serve/request_result.h"
#include "bench/suites/serve/serve_client.h"

namespace braid::bench::serve {

// The most requests in flight even without --max-concurrency: one thread each, and a client
// machine runs out of sockets and threads long before a server runs out of batch slots.
constexpr int kMaxWorkers = 1024;

struct LoadOptions {
  ClientOptions client;
  std::string path = "/v1/completions";
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf: all at once
  double burstiness = 1.0;                                          // 1: Poisson arrivals
  int max_concurrency = 0;                                          // 0: no bound but kMaxWorkers
  uint64_t seed = 0;
  // Called (from worker threads, one at a time) after each request with the counts so far.
  std::function<void(int finished, int failed, int total)> on_progress;
};

struct LoadRequest {
  std::string body;    // JSON
  int prompt_len = 0;  // input tokens to report when the server sends no usage
};

struct LoadRun {
  std::vector<RequestResult> results;  // in request order
  double duration_s = 0;               // from the first arrival to the last request's end
  int workers = 0;                     // requests that could be in flight at once
};

// Sends every request and waits for all of them. Throws braid::Error only for bad options
// (invalid_argument); what the server does is in the results.
LoadRun run_load(const LoadOptions& opts, const std::vector<LoadRequest>& requests);

}  // namespace braid::bench::serve
