// RMSNorm (optionally fused with the residual add): one block per row.
// Pass 1 reads the row (and the residual), accumulates the sum of squares in fp32 and, for the
// fused variant, writes the new residual; pass 2 re-reads the row (now in L1/L2) and writes out.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

// Where row r starts, in elements (RowGrid in tensor.h).
struct Rows {
  int64_t inner, outer_stride, inner_stride;
  __device__ int64_t offset(int64_t r) const {
    return (r / inner) * outer_stride + (r % inner) * inner_stride;
  }
};

struct RowArgs {
  const void* x;
  void* residual;  // null for plain rms_norm
  const void* weight;
  void* out;
  Rows x_rows, residual_rows, out_rows;
  int d;
  float eps;
};

template <typename T, bool kVec>
__global__ void rms_norm_kernel(RowArgs a) {
  __shared__ float scratch[32];
  pdl::wait_then_release();
  constexpr int V = kVec ? Vec16<T>::kSize : 1;
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.x) + a.x_rows.offset(row);
  T* res = a.residual ? static_cast<T*>(a.residual) + a.residual_rows.offset(row) : nullptr;
  const T* w = static_cast<const T*>(a.weight);
  T* out = static_cast<T*>(a.out) + a.out_rows.offset(row);
  // The rounded input to the norm lives in `res` for the fused variant, otherwise it is x.
  const T* h_src = res ? res : x;

  float sum_sq = 0.0f;
  for (int j = threadIdx.x * V; j < a.d; j += blockDim.x * V) {
    T xv[V];
    if constexpr (kVec) {
      *reinterpret_cast<Vec16<T>*>(xv) = *reinterpret_cast<const Vec16<T>*>(x + j);
    } else {
      xv[0] = x[j];
    }
    if (res) {
      T rv[V];
      if constexpr (kVec) {
        *reinterpret_cast<Vec16<T>*>(rv) = *reinterpret_cast<const Vec16<T>*>(res + j);
      } else {
        rv[0] = res[j];
      }
#pragma unroll
      for (int i = 0; i < V; ++i) xv[i] = from_float<T>(to_float(xv[i]) + to_float(rv[i]));
      if constexpr (kVec) {
        *reinterpret_cast<Vec16<T>*>(res + j) = *reinterpret_cast<Vec16<T>*>(xv);
      } else {
        res[j] = xv[0];
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float f = to_float(xv[i]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(a.d) + a.eps);

  for (int j = threadIdx.x * V; j < a.d; j += blockDim.x * V) {
    T hv[V], wv[V], ov[V];
    if constexpr (kVec) {
      *reinterpret_cast<Vec16<T>*>(hv) = *reinterpret_cast<const Vec16<T>*>(h_src + j);
      *reinterpret_cast<Vec16<T>*>(wv) = *reinterpret_cast<const Vec16<T>*>(w + j);
    } else {
      hv[0] = h_src[j];
      wv[0] = w[j];
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const T n = from_float<T>(to_float(hv[i]) * inv_rms);
      ov[i] = from_float<T>(to_float(wv[i]) * to_float(n));
    }
    if constexpr (kVec) {
      *reinterpret_cast<Vec16<T>*>(out + j) = *reinterpret_cast<Vec16<T>*>(ov);
    } else {
      out[j] = ov[0];
    }
  }
}

Rows rows_of(const Tensor& t) {
  RowGrid g;
  t.row_grid(&g);  // checked by the op's entry
  return {g.inner, g.outer_stride, g.inner_stride};
}

// Every row start of `r` is 16-byte aligned when the base is.
bool strides_aligned16(const Rows& r, int elem) {
  return (r.outer_stride * elem) % 16 == 0 && (r.inner_stride * elem) % 16 == 0;
}

void launch(const Tensor& x, const Tensor* residual, const Tensor& weight, float eps,
            const Tensor& out, Stream stream) {
  RowArgs a{x.data, residual ? residual->data : nullptr, weight.data, out.data,
            rows_of(x), residual ? rows_of(*residual) : Rows{1, 0, 0}, rows_of(out),
            static_cast<int>(x.size(-1)), eps};
  const int64_t rows = x.rows();
  const int elem = static_cast<int>(dtype_size(x.dtype));
  const int vec = 16 / elem;
  bool can_vec = a.d % vec == 0 && aligned16(a.x) && aligned16(a.weight) && aligned16(a.out) &&
                 strides_aligned16(a.x_rows, elem) && strides_aligned16(a.out_rows, elem);
  if (residual) can_vec = can_vec && aligned16(a.residual) && strides_aligned16(a.residual_rows, elem);
  const int per_thread = can_vec ? vec : 1;
  int threads = (a.d / per_thread + 31) / 32 * 32;
  threads = threads < 32 ? 32 : (threads > 1024 ? 1024 : threads);
  auto s = static_cast<cudaStream_t>(stream.handle);
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto blocks = static_cast<unsigned>(rows);
    if (can_vec)
      launch_programmatic(rms_norm_kernel<T, true>, blocks, threads, 0, s, a);
    else
      launch_programmatic(rms_norm_kernel<T, false>, blocks, threads, 0, s, a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out, Stream stream) {
  launch(x, nullptr, weight, eps, out, stream);
}

void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out, Stream stream) {
  launch(x, &residual, weight, eps, out, stream);
}

}  // namespace braid::cuda
