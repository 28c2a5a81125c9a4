#include "parallel/rank_threads.h"

#include <exception>

namespace braid::parallel {

RankThreads::RankThreads(int ranks) : ranks_(ranks) {
  for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { serve(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void RankThreads::serve(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* work = nullptr;
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stop_ || round_ != seen; });
      if (stop_) return;
      seen = round_;
      work = work_;
    }
    (*work)(rank);  // never throws: run() hands out a wrapper that catches
    std::lock_guard lock(mutex_);
    if (--running_ == 0) done_.notify_one();
  }
}

void RankThreads::run(Comm& comm, const std::function<void(int rank)>& work) {
  std::mutex error_mutex;
  std::exception_ptr first_error;  // the failure itself, not the others' "group aborted"
  const std::function<void(int)> guarded = [&](int rank) {
    try {
      work(rank);
    } catch (...) {
      {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
      comm.abort();
    }
  };
  {
    std::lock_guard lock(mutex_);
    work_ = &guarded;
    running_ = ranks_ - 1;
    ++round_;
  }
  start_.notify_all();
  guarded(0);
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return running_ == 0; });
    work_ = nullptr;
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace braid::parallel
