// parallel::RankThreads: every rank's work runs once per call, each rank always on the same
// thread (rank 0 on the caller's), and a rank that throws aborts the group's communicator and
// has its error rethrown once every rank has stopped.
#include <atomic>
#include <map>
#include <stdexcept>
#include <thread>

#include "parallel/comm.h"
#include "parallel/rank_threads.h"
#include "test_util.h"

namespace braid::test {
namespace {

TEST(RankThreads, EveryRankRunsOncePerCallOnItsOwnThread) {
  const int ranks = 4;
  parallel::ThreadComm comm(ranks);
  parallel::RankThreads threads(ranks);
  std::map<int, std::thread::id> first_thread;
  for (int call = 0; call < 200; ++call) {
    std::vector<int> runs(ranks, 0);
    std::vector<std::thread::id> ids(ranks);
    threads.run(comm, [&](int rank) {
      ++runs[static_cast<size_t>(rank)];
      ids[static_cast<size_t>(rank)] = std::this_thread::get_id();
    });
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(runs[static_cast<size_t>(r)], 1) << "call " << call << " rank " << r;
      if (call == 0) first_thread[r] = ids[static_cast<size_t>(r)];
      EXPECT_EQ(ids[static_cast<size_t>(r)], first_thread[r]) << "rank " << r << " moved threads";
    }
    EXPECT_EQ(ids[0], std::this_thread::get_id()) << "rank 0 runs on the caller's thread";
  }
}

TEST(RankThreads, RanksMeetAtCollectivesAndAFailureAbortsTheOthers) {
  const int ranks = 3;
  parallel::ThreadComm comm(ranks);
  parallel::RankThreads threads(ranks);
  // A collective needs every rank at once: this finishes only if the ranks run concurrently.
  std::vector<float> sums(ranks);
  threads.run(comm, [&](int rank) {
    float x = static_cast<float>(rank + 1);
    comm.all_reduce_sum(rank, Tensor(&x, DType::f32, Device::cpu(), {1, 1}), {});
    sums[static_cast<size_t>(rank)] = x;
  });
  for (float s : sums) EXPECT_EQ(s, 6.0f);
  // Rank 2 fails before the collective the others wait at: they must not wait forever, and the
  // caller sees rank 2's error, not the others' "group aborted".
  std::atomic<int> aborted_ranks = 0;
  try {
    threads.run(comm, [&](int rank) {
      if (rank == 2) throw std::runtime_error("rank 2 failed");
      float x = 1;
      try {
        comm.all_reduce_sum(rank, Tensor(&x, DType::f32, Device::cpu(), {1, 1}), {});
      } catch (const Error&) {
        ++aborted_ranks;
        throw;
      }
    });
    ADD_FAILURE() << "the failure was not rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "rank 2 failed");
  }
  EXPECT_EQ(aborted_ranks.load(), 2);
}

}  // namespace
}  // namespace braid::test
