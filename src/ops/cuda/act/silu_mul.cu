// SwiGLU on packed [gate | up] rows: out = silu(gate) * up, in fp32 with one rounding.
// Element-wise, so the grid covers columns in x and rows in y (striding over rows past the
// 65535 limit of gridDim.y); each thread handles one 16-byte vector of gate, of up and of out.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

struct SiluArgs {
  const void* x;
  void* out;
  int64_t x_stride, out_stride;
  int64_t rows;
  int d;
};

template <typename T, bool kVec>
__global__ void silu_mul_kernel(SiluArgs a) {
  pdl::wait_then_release();
  constexpr int V = kVec ? Vec16<T>::kSize : 1;
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (j >= a.d) return;
  for (int64_t row = blockIdx.y; row < a.rows; row += gridDim.y) {
    const T* gate = static_cast<const T*>(a.x) + row * a.x_stride;
    const T* up = gate + a.d;
    T* out = static_cast<T*>(a.out) + row * a.out_stride;
    T g[V], u[V], o[V];
    if constexpr (kVec) {
      *reinterpret_cast<Vec16<T>*>(g) = *reinterpret_cast<const Vec16<T>*>(gate + j);
      *reinterpret_cast<Vec16<T>*>(u) = *reinterpret_cast<const Vec16<T>*>(up + j);
    } else {
      g[0] = gate[j];
      u[0] = up[j];
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float gf = to_float(g[i]);
      // expf rather than __expf: the fast one loses accuracy for large |g|.
      o[i] = from_float<T>(gf / (1.0f + expf(-gf)) * to_float(u[i]));
    }
    if constexpr (kVec) {
      *reinterpret_cast<Vec16<T>*>(out + j) = *reinterpret_cast<Vec16<T>*>(o);
    } else {
      out[j] = o[0];
    }
  }
}

}  // namespace

void silu_mul(const Tensor& x, const Tensor& out, Stream stream) {
  SiluArgs a{x.data, out.data, x.row_stride(), out.row_stride(), x.rows(),
             static_cast<int>(out.size(-1))};
  const int elem = static_cast<int>(dtype_size(x.dtype));
  const int vec = 16 / elem;
  // d % vec also keeps `up` (at offset d) 16-byte aligned.
  const bool can_vec = a.d % vec == 0 && aligned16(a.x) && aligned16(a.out) &&
                       (a.x_stride * elem) % 16 == 0 && (a.out_stride * elem) % 16 == 0;
  const RowwiseLaunch l = rowwise_launch(a.rows, a.d, can_vec ? vec : 1);
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (can_vec)
      launch_programmatic(silu_mul_kernel<T, true>, l.grid, l.threads, 0, s, a);
    else
      launch_programmatic(silu_mul_kernel<T, false>, l.grid, l.threads, 0, s, a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
