// ThreadComm: the CPU collectives of simulated tensor-parallel ranks.
#include "parallel/comm.h"

#include <string>

#include "braid/dtype.h"
#include "braid/error.h"

namespace braid::parallel {

ThreadComm::ThreadComm(int size) : size_(size), posted_(static_cast<size_t>(size)) {
  if (size < 1) throw Error(ErrorKind::invalid_argument, "ThreadComm: size must be at least 1");
}

void ThreadComm::barrier() {
  std::unique_lock lock(mutex_);
  auto check = [&] {
    if (aborted_)
      throw Error(ErrorKind::internal, "ThreadComm: another rank of the group failed; the group is unusable");
  };
  check();
  const uint64_t gen = generation_;
  if (++waiting_ == size_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) check();
}

void ThreadComm::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  cv_.notify_all();
}

void ThreadComm::post(int rank, const Tensor& x) {
  if (rank < 0 || rank >= size_)
    throw Error(ErrorKind::invalid_argument,
                "ThreadComm: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size_) + ")");
  if (!x.device.is_cpu() || x.ndim != 2 || !(x.dtype == DType::f32 || x.dtype == DType::bf16 ||
                                             x.dtype == DType::f16))
    throw Error(ErrorKind::invalid_argument, "ThreadComm: a collective takes [m, n] float rows on the CPU");
  posted_[static_cast<size_t>(rank)] = x;
  barrier();  // every rank's tensor is posted
}

void ThreadComm::all_reduce_sum(int rank, const Tensor& x, Stream) {
  post(rank, x);
  const int64_t m = x.size(0), n = x.size(1);
  std::vector<float> sum(static_cast<size_t>(m * n), 0.0f);
  for (const Tensor& t : posted_) {
    if (t.size(0) != m || t.size(1) != n || t.dtype != x.dtype) {
      abort();  // the others would wait for this rank at the next barrier
      throw Error(ErrorKind::internal, "ThreadComm: ranks posted different shapes to one all-reduce");
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        sum[static_cast<size_t>(i * n + j)] += load_as_float(t.data, t.dtype, i * t.row_stride() + j);
  }
  barrier();  // every rank has read every tensor: each may now overwrite its own
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      store_from_float(x.data, x.dtype, i * x.row_stride() + j, sum[static_cast<size_t>(i * n + j)]);
}

void ThreadComm::all_gather_columns(int rank, const Tensor& x, const Tensor& out, Stream) {
  const int64_t m = x.size(0), w = x.size(1);
  if (out.ndim != 2 || out.size(0) != m || out.size(1) != w * size_ || out.dtype != x.dtype)
    throw Error(ErrorKind::invalid_argument, "ThreadComm: all_gather_columns's out must be [m, size * w] of x's dtype");
  post(rank, x);
  for (int r = 0; r < size_; ++r) {
    const Tensor& t = posted_[static_cast<size_t>(r)];
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < w; ++j)
        store_from_float(out.data, out.dtype, i * out.row_stride() + r * w + j,
                         load_as_float(t.data, t.dtype, i * t.row_stride() + j));
  }
  barrier();  // every rank has read every tensor
}

}  // namespace braid::parallel
