// The FP8 benchmarks' input generators (fp8_fill.h): argument checks, the host loops, and the
// dispatch to the CUDA kernels (cuda/fp8_fill.cu).
#include "bench/harness/fp8_fill.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "bench/harness/cuda/fp8_fill.h"
#include "bench/harness/cuda_only.h"
#include "bench/harness/fp8_random.h"
#include "braid/dtype.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

constexpr int64_t kBlock = 128;

void require(bool ok, const char* op, const char* arg, const std::string& expected,
             const Tensor& t) {
  if (!ok) throw_arg_error(ErrorKind::invalid_argument, op, arg, expected, describe(t));
}

void require_dense(const char* op, const char* arg, const Tensor& t,
                   std::initializer_list<DType> dtypes) {
  require(t.data != nullptr || t.numel() == 0, op, arg, "a defined tensor", t);
  require(t.is_contiguous(), op, arg, "a contiguous tensor", t);
  require(std::find(dtypes.begin(), dtypes.end(), t.dtype) != dtypes.end(), op, arg,
          "another dtype (see bench/harness/fp8_fill.h)", t);
}

void require_same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (a.device != b.device)
    throw_arg_error(ErrorKind::invalid_argument, op, "q/scale", "tensors on one device",
                    describe(a) + " and " + describe(b));
}

// Host version of the kernel: the same blocks, the same rule.
void quantize_blocks_host(const Tensor& src, const fp8_fill_cuda::BlockLayout& l, uint64_t seed,
                          float stddev, const Tensor& q, const Tensor& scale) {
  auto value = [&](int64_t i) {
    if (src.data == nullptr) return stddev * fp8rand::normal(seed, static_cast<uint64_t>(i));
    return load_as_float(src.data, src.dtype, i);
  };
  uint8_t* qp = q.ptr<uint8_t>();
  float* sp = scale.ptr<float>();
  const int64_t row_blocks = l.rows / l.block_rows, col_blocks = l.cols / kBlock;
  for (int64_t e = 0; e < l.matrices; ++e)
    for (int64_t rb = 0; rb < row_blocks; ++rb)
      for (int64_t cb = 0; cb < col_blocks; ++cb) {
        const int64_t first = (e * l.rows + rb * l.block_rows) * l.cols + cb * kBlock;
        float amax = 0.0f;
        for (int64_t r = 0; r < l.block_rows; ++r)
          for (int64_t c = 0; c < kBlock; ++c)
            amax = std::max(amax, std::fabs(value(first + r * l.cols + c)));
        const float s = fp8rand::block_scale(amax);
        sp[e * l.scale_matrix_stride + rb * l.scale_row_stride + cb * l.scale_col_stride] = s;
        for (int64_t r = 0; r < l.block_rows; ++r)
          for (int64_t c = 0; c < kBlock; ++c) {
            const int64_t i = first + r * l.cols + c;
            qp[i] = float_to_f8e4m3(value(i) / s);
          }
      }
}

void run_blocks(const char* op, const Tensor& src, const fp8_fill_cuda::BlockLayout& l,
                uint64_t seed, float stddev, const Tensor& q, const Tensor& scale, Stream stream) {
  const int64_t blocks = l.matrices * (l.rows / l.block_rows) * (l.cols / kBlock);
  if (blocks > std::numeric_limits<int32_t>::max())
    throw_arg_error(ErrorKind::invalid_argument, op, "q", "fewer than 2^31 quantization blocks",
                    describe(q));
  if (q.device.is_cpu()) return quantize_blocks_host(src, l, seed, stddev, q, scale);
  cuda_only(BRAID_CUDA_ONLY(fp8_fill_cuda::quantize_blocks), op)(src, l, seed, stddev, q, scale,
                                                                 stream);
}

// The layout of weights [E, N, K] (or [N, K]) in 128 x 128 blocks, after checking q and scale.
fp8_fill_cuda::BlockLayout weight_layout(const char* op, const Tensor& q, const Tensor& scale) {
  require_dense(op, "q", q, {DType::f8e4m3});
  require_dense(op, "scale", scale, {DType::f32});
  require_same_device(op, q, scale);
  require(q.ndim == 2 || q.ndim == 3, op, "q", "[E, N, K] or [N, K]", q);
  const int64_t E = q.ndim == 3 ? q.shape[0] : 1, N = q.shape[q.ndim - 2], K = q.shape[q.ndim - 1];
  require(N % kBlock == 0 && K % kBlock == 0, op, "q", "N and K multiples of 128", q);
  const int64_t nb = N / kBlock, kb = K / kBlock;
  const bool scale_ok =
      q.ndim == 3
          ? scale.ndim == 3 && scale.shape[0] == E && scale.shape[1] == nb && scale.shape[2] == kb
          : scale.ndim == 2 && scale.shape[0] == nb && scale.shape[1] == kb;
  const std::string experts = q.ndim == 3 ? fmt::format("{}, ", E) : "";
  require(scale_ok, op, "scale", fmt::format("[{}{}, {}] f32", experts, nb, kb), scale);
  return {E, N, K, static_cast<int>(kBlock), nb * kb, kb, 1};
}

}  // namespace

void fill_normal(const Tensor& t, uint64_t seed, float mean, float stddev, Stream stream) {
  const char* op = "bench fill_normal";
  require_dense(op, "t", t, {DType::f32, DType::bf16});
  if (t.device.is_cuda())
    return cuda_only(BRAID_CUDA_ONLY(fp8_fill_cuda::fill_normal), op)(t, seed, mean, stddev,
                                                                      stream);
  for (int64_t i = 0; i < t.numel(); ++i)
    store_from_float(t.data, t.dtype, i,
                     mean + stddev * fp8rand::normal(seed, static_cast<uint64_t>(i)));
}

void fill_fp8_normal(const Tensor& t, uint64_t seed, float stddev, Stream stream) {
  const char* op = "bench fill_fp8_normal";
  require_dense(op, "t", t, {DType::f8e4m3});
  if (t.device.is_cuda())
    return cuda_only(BRAID_CUDA_ONLY(fp8_fill_cuda::fill_fp8_normal), op)(t, seed, stddev, stream);
  uint8_t* p = t.ptr<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = float_to_f8e4m3(stddev * fp8rand::normal(seed, static_cast<uint64_t>(i)));
}

void quantize_weight_blocks(const Tensor& src, const Tensor& q, const Tensor& scale,
                            Stream stream) {
  const char* op = "bench quantize_weight_blocks";
  const fp8_fill_cuda::BlockLayout l = weight_layout(op, q, scale);
  require_dense(op, "src", src, {DType::f32, DType::bf16});
  require(src.data != nullptr && src.ndim == q.ndim && src.numel() == q.numel() &&
              src.shape[src.ndim - 1] == q.shape[q.ndim - 1] && src.device == q.device,
          op, "src", "q's shape, on q's device", src);
  run_blocks(op, src, l, 0, 0.0f, q, scale, stream);
}

void random_weight_blocks(const Tensor& q, const Tensor& scale, uint64_t seed, float stddev,
                          Stream stream) {
  const char* op = "bench random_weight_blocks";
  const fp8_fill_cuda::BlockLayout l = weight_layout(op, q, scale);
  run_blocks(op, Tensor{}, l, seed, stddev, q, scale, stream);
}

void quantize_activation_blocks(const Tensor& src, const Tensor& q, const Tensor& scale,
                                Stream stream) {
  const char* op = "bench quantize_activation_blocks";
  require_dense(op, "src", src, {DType::f32, DType::bf16});
  require_dense(op, "q", q, {DType::f8e4m3});
  require_dense(op, "scale", scale, {DType::f32});
  require_same_device(op, q, scale);
  require(src.data != nullptr && src.ndim == 2 && src.shape[1] % kBlock == 0, op, "src",
          "[M, K] with K a multiple of 128", src);
  const int64_t M = src.shape[0], K = src.shape[1];
  require(q.ndim == 2 && q.shape[0] == M && q.shape[1] == K && q.device == src.device, op, "q",
          fmt::format("[{}, {}] on src's device", M, K), q);
  require(scale.ndim == 2 && scale.shape[0] == K / kBlock && scale.shape[1] == M, op, "scale",
          fmt::format("[{}, {}]", K / kBlock, M), scale);
  // Blocks of one row; block (row m, column block b) keeps its scale at [b, m].
  run_blocks(op, src, {1, M, K, 1, 0, 1, M}, 0, 0.0f, q, scale, stream);
}

}  // namespace braid::bench
