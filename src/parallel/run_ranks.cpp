#include "parallel/run_ranks.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace braid::parallel {

void run_ranks(int n, Comm& comm, const std::function<void(int rank)>& work) {
  std::mutex mutex;
  std::exception_ptr first_error;  // the failure itself, not the others' "group aborted"
  auto run = [&](int rank) {
    try {
      work(rank);
    } catch (...) {
      {
        std::lock_guard lock(mutex);
        if (!first_error) first_error = std::current_exception();
      }
      comm.abort();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace braid::parallel
