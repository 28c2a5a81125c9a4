// The collectives a tensor-parallel forward needs, behind one interface: each rank of a group
// calls them in the same order with tensors of the same shapes. ThreadComm is the CPU one (the
// ranks are threads of one process, as the simulated ranks of the tests are); the CUDA one is
// NCCL's (nccl_comm.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::parallel {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int size() const = 0;
  // x = the sum of every rank's x, in place; every rank ends with the same values. x: rows of a
  // float dtype.
  virtual void all_reduce_sum(int rank, const Tensor& x, Stream stream) = 0;
  // out[:, r * w : (r + 1) * w] = rank r's x, on every rank. x [m, w], out [m, size * w]: rows of
  // one float dtype.
  virtual void all_gather_columns(int rank, const Tensor& x, const Tensor& out, Stream stream) = 0;
  // A rank that fails mid-step calls this so that the others, waiting for it at a collective,
  // fail instead of waiting forever; the group is unusable afterwards.
  virtual void abort() = 0;
};

// Ranks as threads of one process, on the CPU. A collective meets at a barrier, then each rank
// reads every rank's tensor; the sum is taken in rank order in fp32 and rounded once to x's
// dtype, so every rank gets the same bits.
class ThreadComm : public Comm {
 public:
  explicit ThreadComm(int size);
  int size() const override { return size_; }
  void all_reduce_sum(int rank, const Tensor& x, Stream stream) override;
  void all_gather_columns(int rank, const Tensor& x, const Tensor& out, Stream stream) override;
  void abort() override;

 private:
  void barrier();
  void post(int rank, const Tensor& x);  // publishes x, checks it against rank 0's, waits for all

  int size_;
  std::vector<Tensor> posted_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace braid::parallel
