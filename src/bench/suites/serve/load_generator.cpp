#include "bench/suites/serve/load_generator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include <fmt/core.h>

#include "bench/suites/serve/arrivals.h"
#include "braid/error.h"

namespace braid::bench::serve {

namespace {

using Clock = ServeClient::Clock;

// Requests released by the arrival schedule and not yet taken by a worker.
struct Queue {
  std::mutex mutex;
  std::condition_variable released_cv;
  size_t released = 0;  // requests whose arrival time has come
  size_t next = 0;      // the next one a worker takes
  Clock::time_point epoch;
};

}  // namespace

LoadRun run_load(const LoadOptions& opts, const std::vector<LoadRequest>& requests) {
  if (opts.max_concurrency < 0)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve load: max_concurrency: expected >= 0 (0: unbounded), got {}",
                            opts.max_concurrency));
  const int n = static_cast<int>(requests.size());
  const std::vector<double> arrivals =
      arrival_times(n, opts.request_rate, opts.burstiness, opts.seed);
  const ServeClient check(opts.client);  // bad options fail here, not once per request later

  LoadRun run;
  run.results.resize(requests.size());
  run.workers = std::min(n, kMaxWorkers);
  if (opts.max_concurrency > 0) run.workers = std::min(run.workers, opts.max_concurrency);
  if (n == 0) return run;

  Queue q;
  std::mutex progress_mutex;
  int finished = 0, failed = 0;
  auto worker = [&] {
    std::unique_ptr<ServeClient> client;
    for (;;) {
      size_t i;
      {
        std::unique_lock lock(q.mutex);
        q.released_cv.wait(lock, [&] { return q.next < q.released || q.next >= requests.size(); });
        if (q.next >= requests.size()) return;
        i = q.next++;
      }
      RequestResult& r = run.results[i];
      try {
        if (!client) client = std::make_unique<ServeClient>(opts.client);
        r = client->stream(opts.path, requests[i].body, requests[i].prompt_len, q.epoch);
      } catch (const std::exception& e) {  // a thread must not end the process
        r = RequestResult{};
        r.error = std::string("client error: ") + e.what();
        r.start_s = r.end_s = std::chrono::duration<double>(Clock::now() - q.epoch).count();
      }
      std::lock_guard lock(progress_mutex);
      ++finished;
      failed += !r.ok;
      if (opts.on_progress) opts.on_progress(finished, failed, n);
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(run.workers));
  try {
    for (int w = 0; w < run.workers; ++w) threads.emplace_back(worker);
  } catch (const std::system_error& e) {
    // The system allows fewer threads than asked for: run with those (reported as the workers),
    // or fail if there are none.
    if (threads.empty())
      throw Error(ErrorKind::internal,
                  std::string("serve load: cannot start a worker thread: ") + e.what());
    run.workers = static_cast<int>(threads.size());
  }
  Clock::time_point epoch;
  {
    // The benchmark starts once the workers exist. They read the epoch only after taking a
    // request, under the same mutex, so it is set before any of them can.
    std::lock_guard lock(q.mutex);
    q.epoch = epoch = Clock::now();
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto offset = std::chrono::duration<double>(arrivals[i]);
    std::this_thread::sleep_until(epoch + std::chrono::duration_cast<Clock::duration>(offset));
    std::lock_guard lock(q.mutex);
    q.released = i + 1;
    q.released_cv.notify_one();
  }
  q.released_cv.notify_all();  // workers waiting for more learn there is none
  for (auto& t : threads) t.join();
  run.duration_s = std::chrono::duration<double>(Clock::now() - epoch).count();
  return run;
}

}  // namespace braid::bench::serve
