// Steps the ranks of a tensor-parallel group together: one call runs the same work on every rank
// at once, ranks 1 .. n-1 on threads of their own and rank 0 on the caller's.
#pragma once

#include <functional>

#include "parallel/comm.h"

namespace braid::parallel {

// Runs work(r) for every rank r in [0, n) at once and returns when all have finished. A rank whose
// work throws aborts `comm` (so that the others, waiting for it at a collective, fail instead of
// waiting forever) and the first error is rethrown here once every rank has stopped.
void run_ranks(int n, Comm& comm, const std::function<void(int rank)>& work);

}  // namespace braid::parallel
