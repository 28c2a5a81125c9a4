// Steps the ranks of a tensor-parallel group together: each call runs the same work on every
// rank at once, rank 0 on the caller's thread and ranks 1 .. n-1 on threads kept for the life of
// the group (starting threads per call would cost tens of microseconds a decode step), each
// rank always on the same thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/comm.h"

namespace braid::parallel {

class RankThreads {
 public:
  explicit RankThreads(int ranks);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // Runs work(r) for every rank r at once and returns when all have finished. A rank whose work
  // throws aborts `comm` (so that the others, waiting for it at a collective, fail instead of
  // waiting forever) and the first error is rethrown here once every rank has stopped. One call
  // at a time.
  void run(Comm& comm, const std::function<void(int rank)>& work);

 private:
  void serve(int rank);  // a worker thread's loop

  int ranks_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* work_ = nullptr;
  uint64_t round_ = 0;  // bumped by each call: a worker's signal to start
  int running_ = 0;     // workers still busy in this round
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace braid::parallel
