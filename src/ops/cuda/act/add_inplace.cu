// add_inplace: residual = to_dtype(residual + x), element-wise over rows. The grid covers columns
// in x and rows in y (striding past gridDim.y's 65535); one 16-byte vector per thread when the
// rows allow it.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

struct AddArgs {
  const void* x;
  void* residual;
  int64_t x_stride, residual_stride;
  int64_t rows;
  int d;
};

template <typename T, bool kVec>
__global__ void add_inplace_kernel(AddArgs a) {
  pdl::wait_then_release();
  constexpr int V = kVec ? Vec16<T>::kSize : 1;
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (j >= a.d) return;
  for (int64_t row = blockIdx.y; row < a.rows; row += gridDim.y) {
    const T* x = static_cast<const T*>(a.x) + row * a.x_stride;
    T* res = static_cast<T*>(a.residual) + row * a.residual_stride;
    T xv[V], rv[V];
    if constexpr (kVec) {
      *reinterpret_cast<Vec16<T>*>(xv) = *reinterpret_cast<const Vec16<T>*>(x + j);
      *reinterpret_cast<Vec16<T>*>(rv) = *reinterpret_cast<const Vec16<T>*>(res + j);
    } else {
      xv[0] = x[j];
      rv[0] = res[j];
    }
#pragma unroll
    for (int i = 0; i < V; ++i) rv[i] = from_float<T>(to_float(rv[i]) + to_float(xv[i]));
    if constexpr (kVec) {
      *reinterpret_cast<Vec16<T>*>(res + j) = *reinterpret_cast<Vec16<T>*>(rv);
    } else {
      res[j] = rv[0];
    }
  }
}

}  // namespace

void add_inplace(const Tensor& x, const Tensor& residual, Stream stream) {
  AddArgs a{x.data, residual.data, x.row_stride(), residual.row_stride(), x.rows(),
            static_cast<int>(x.size(-1))};
  const int elem = static_cast<int>(dtype_size(x.dtype));
  const int vec = 16 / elem;
  const bool can_vec = a.d % vec == 0 && aligned16(a.x) && aligned16(a.residual) &&
                       (a.x_stride * elem) % 16 == 0 && (a.residual_stride * elem) % 16 == 0;
  const RowwiseLaunch l = rowwise_launch(a.rows, a.d, can_vec ? vec : 1);
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (can_vec)
      launch_programmatic(add_inplace_kernel<T, true>, l.grid, l.threads, 0, s, a);
    else
      launch_programmatic(add_inplace_kernel<T, false>, l.grid, l.threads, 0, s, a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
