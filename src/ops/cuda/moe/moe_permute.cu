// The MoE permutation on the GPU, with no host synchronisation and deterministic results.
//
// moe_permute is a counting sort of the pairs by expert (bucket E takes ids outside [0, E)), in
// chunks of kChunk pairs:
//   1. count:   one block per chunk counts its pairs per bucket into workspace[chunk][bucket];
//   2. scan:    one block turns the counts into each chunk's first row per bucket (the buckets'
//               offsets plus the counts of the chunks before) and writes expert_offsets;
//   3. scatter: one warp per chunk walks its pairs 32 at a time, in order: lanes with the same
//               bucket (__match_any_sync) take consecutive rows after the bucket's running row,
//               so every bucket keeps ascending pair order.
// With a single chunk (up to kChunk pairs: decode and short prefills) one block does all three
// in one launch.
//
// moe_gather copies token rows into permuted order; moe_combine sums each token's k expert rows
// with its routing weights in fp32, in slot order. moe_local_expert_ids renumbers a routing to one
// rank's experts (expert parallelism): the others' become kMoeNotLocal, which lands in bucket E.
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/moe/moe_check.h"

namespace braid::cuda {

namespace {

constexpr int kChunk = ops::moe_check::kPermuteChunk;  // pairs per chunk, as the workspace holds
constexpr int kMaxBuckets = ops::kMoeMaxExperts + 1;

struct PermuteArgs {
  const int32_t* ids;
  int32_t* offsets;       // [E + 1]
  int32_t* sorted_pairs;  // [pairs]
  int32_t* pair_rows;     // [pairs]
  int32_t* chunk_rows;    // workspace: [chunks][E + 1] counts, then first rows
  int pairs, experts, chunks;
};

__device__ __forceinline__ int bucket_of(const PermuteArgs& a, int pair) {
  const int e = a.ids[pair];
  return e >= 0 && e < a.experts ? e : a.experts;
}

// The chunk's per-bucket counts, into `counts` (shared, E + 1 entries), by the whole block.
__device__ void count_chunk(const PermuteArgs& a, int chunk, int* counts) {
  for (int b = threadIdx.x; b <= a.experts; b += blockDim.x) counts[b] = 0;
  __syncthreads();
  const int end = min(a.pairs, (chunk + 1) * kChunk);
  for (int p = chunk * kChunk + threadIdx.x; p < end; p += blockDim.x) atomicAdd(&counts[bucket_of(a, p)], 1);
  __syncthreads();
}

// Exclusive prefix sum over the block (blockDim.x <= 1024); `warp_sums` holds 32 ints in shared
// memory; also returns the block's total.
__device__ int block_exclusive_scan(int v, int* warp_sums, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  int inclusive = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += n;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int s = lane < warps ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += n;
    }
    if (lane < warps) warp_sums[lane] = s;  // inclusive sums of the warps
  }
  __syncthreads();
  total = warp_sums[warps - 1];
  const int before = warp == 0 ? 0 : warp_sums[warp - 1];
  __syncthreads();  // warp_sums may be reused by the caller
  return before + inclusive - v;
}

// Scatter of one chunk by one warp: `next_row` (shared, E + 1 entries) holds each bucket's next
// row and is advanced.
__device__ void scatter_chunk(const PermuteArgs& a, int chunk, int* next_row) {
  const int lane = threadIdx.x & 31;
  const int end = min(a.pairs, (chunk + 1) * kChunk);
  for (int base = chunk * kChunk; base < end; base += 32) {
    const int p = base + lane;
    const bool active = p < end;
    const int b = active ? bucket_of(a, p) : -1;
    const unsigned same = __match_any_sync(0xffffffffu, b);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (active) {
      const int row = next_row[b] + rank;
      a.sorted_pairs[row] = p;
      a.pair_rows[p] = b < a.experts ? row : -1;
    }
    __syncwarp();
    if (active && rank == 0) next_row[b] += __popc(same);  // the group's lowest lane
    __syncwarp();
  }
}

// Bucket b's total over `chunks` chunks of counts; replaces each count with the rows of the
// chunks before it (exclusive, within the bucket).
__device__ int exclusive_over_chunks(int32_t* chunk_rows, int chunks, int buckets, int b) {
  int running = 0;
  for (int c = 0; c < chunks; ++c) {
    const int n = chunk_rows[c * buckets + b];
    chunk_rows[c * buckets + b] = running;
    running += n;
  }
  return running;
}

// One launch for a single chunk: count, scan, scatter.
__global__ void __launch_bounds__(1024) permute_single_kernel(PermuteArgs a) {
  __shared__ int counts[kMaxBuckets];
  __shared__ int warp_sums[32];
  count_chunk(a, 0, counts);
  const int b = threadIdx.x;
  int total = 0;
  const int first = block_exclusive_scan(b <= a.experts ? counts[b] : 0, warp_sums, total);
  if (b <= a.experts) {
    a.offsets[b] = first;  // offsets[E] = first row of the invalid bucket = the valid pairs
    counts[b] = first;     // now the bucket's next row
  }
  __syncthreads();
  if (threadIdx.x < 32) scatter_chunk(a, 0, counts);
}

__global__ void __launch_bounds__(256) permute_count_kernel(PermuteArgs a) {
  __shared__ int counts[kMaxBuckets];
  count_chunk(a, blockIdx.x, counts);
  for (int b = threadIdx.x; b <= a.experts; b += blockDim.x)
    a.chunk_rows[blockIdx.x * (a.experts + 1) + b] = counts[b];
}

__global__ void __launch_bounds__(1024) permute_scan_kernel(PermuteArgs a) {
  __shared__ int warp_sums[32];
  const int b = threadIdx.x, buckets = a.experts + 1;
  const int n = b < buckets ? exclusive_over_chunks(a.chunk_rows, a.chunks, buckets, b) : 0;
  int total = 0;
  const int first = block_exclusive_scan(n, warp_sums, total);
  if (b < buckets) {
    a.offsets[b] = first;
    for (int c = 0; c < a.chunks; ++c) a.chunk_rows[c * buckets + b] += first;
  }
}

__global__ void __launch_bounds__(32) permute_scatter_kernel(PermuteArgs a) {
  __shared__ int next_row[kMaxBuckets];
  const int buckets = a.experts + 1;
  for (int b = threadIdx.x; b < buckets; b += 32) next_row[b] = a.chunk_rows[blockIdx.x * buckets + b];
  __syncwarp();
  scatter_chunk(a, blockIdx.x, next_row);
}

// ---- gather and combine ----------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(128) gather_kernel(const T* x, int64_t x_stride, const int32_t* sorted_pairs,
                                                     int k, T* xs, int64_t xs_stride, int hidden,
                                                     int64_t rows, bool vec16) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* src = x + int64_t{sorted_pairs[r] / k} * x_stride;
    T* dst = xs + r * xs_stride;
    if (vec16) {
      constexpr int W = Vec16<T>::kSize;
      for (int i = threadIdx.x; i < hidden / W; i += blockDim.x)
        reinterpret_cast<Vec16<T>*>(dst)[i] = reinterpret_cast<const Vec16<T>*>(src)[i];
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
    }
  }
}

// kVec: each thread sums 16 bytes of ys (Vec16) per row instead of one element, so a warp reads
// 512 contiguous bytes per load instruction; the same fp32 sums in the same j order either way.
template <typename TY, typename TO, bool kVec>
__global__ void __launch_bounds__(256) combine_kernel(const TY* ys, int64_t ys_stride, const int32_t* pair_rows,
                                                      const float* weights, int k, TO* out,
                                                      int64_t out_stride, int hidden, int64_t tokens) {
  constexpr int W = kVec ? Vec16<TY>::kSize : 1;
  const int h = (blockIdx.x * blockDim.x + threadIdx.x) * W;
  if (h >= hidden) return;
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y) {
    float acc[W] = {};
    for (int j = 0; j < k; ++j) {
      const int r = pair_rows[t * k + j];
      if (r < 0) continue;
      const float w = weights[t * k + j];
      const TY* row = ys + int64_t{r} * ys_stride + h;
      if constexpr (kVec) {
        const Vec16<TY> v = *reinterpret_cast<const Vec16<TY>*>(row);
#pragma unroll
        for (int i = 0; i < W; ++i) acc[i] += w * to_float(v.v[i]);
      } else {
        acc[0] += w * to_float(row[0]);
      }
    }
#pragma unroll
    for (int i = 0; i < W; ++i) out[t * out_stride + h + i] = from_float<TO>(acc[i]);
  }
}

}  // namespace

void moe_permute(const Tensor& topk_ids, int num_experts, const Tensor& expert_offsets,
                 const Tensor& sorted_pairs, const Tensor& pair_rows, const Tensor& workspace,
                 Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  PermuteArgs a{topk_ids.ptr<int32_t>(), expert_offsets.ptr<int32_t>(), sorted_pairs.ptr<int32_t>(),
                pair_rows.ptr<int32_t>(), workspace.ptr<int32_t>(),
                static_cast<int>(topk_ids.numel()), num_experts, 0};
  a.chunks = (a.pairs + kChunk - 1) / kChunk;
  if (a.chunks <= 1) {  // also 0 pairs: offsets all 0
    permute_single_kernel<<<1, 1024, 0, s>>>(a);
    BRAID_CUDA_CHECK_LAUNCH();
    return;
  }
  permute_count_kernel<<<a.chunks, 256, 0, s>>>(a);
  BRAID_CUDA_CHECK_LAUNCH();
  permute_scan_kernel<<<1, 1024, 0, s>>>(a);
  BRAID_CUDA_CHECK_LAUNCH();
  permute_scatter_kernel<<<a.chunks, 32, 0, s>>>(a);
  BRAID_CUDA_CHECK_LAUNCH();
}

void moe_gather(const Tensor& x, const Tensor& sorted_pairs, int k, const Tensor& xs, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t rows = xs.shape[0];
  const int hidden = static_cast<int>(x.shape[1]);
  dispatch_float_type(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool vec16 = aligned16(x.data) && aligned16(xs.data) &&
                       (x.row_stride() * sizeof(T)) % 16 == 0 && (xs.row_stride() * sizeof(T)) % 16 == 0 &&
                       (hidden * sizeof(T)) % 16 == 0;
    const unsigned blocks = static_cast<unsigned>(rows < 65535 * 8 ? rows : 65535 * 8);
    gather_kernel<T><<<blocks, 128, 0, s>>>(static_cast<const T*>(x.data), x.row_stride(),
                                            sorted_pairs.ptr<int32_t>(), k, static_cast<T*>(xs.data),
                                            xs.row_stride(), hidden, rows, vec16);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

void moe_combine(const Tensor& ys, const Tensor& pair_rows, const Tensor& topk_weights,
                 const Tensor& out, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t tokens = out.shape[0];
  const int hidden = static_cast<int>(out.shape[1]), k = static_cast<int>(topk_weights.shape[1]);
  dispatch_float_type(ys.dtype, [&](auto ytag) {
    dispatch_float_type(out.dtype, [&](auto otag) {
      using TY = decltype(ytag);
      using TO = decltype(otag);
      constexpr int W = Vec16<TY>::kSize;
      const bool vec = aligned16(ys.data) && (ys.row_stride() * sizeof(TY)) % 16 == 0 && hidden % W == 0;
      const int per_thread = vec ? W : 1;
      const dim3 grid(static_cast<unsigned>((hidden / per_thread + 255) / 256),
                      static_cast<unsigned>(tokens < 65535 ? tokens : 65535));
      auto launch = [&](auto kernel) {
        kernel<<<grid, 256, 0, s>>>(static_cast<const TY*>(ys.data), ys.row_stride(),
                                    pair_rows.ptr<int32_t>(), topk_weights.ptr<float>(), k,
                                    static_cast<TO*>(out.data), out.row_stride(), hidden, tokens);
      };
      if (vec)
        launch(combine_kernel<TY, TO, true>);
      else
        launch(combine_kernel<TY, TO, false>);
    });
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

namespace {

// Expert parallelism's renumbering: one thread per pair (in place is fine: each reads its own).
__global__ void local_expert_ids_kernel(const int32_t* ids, int64_t pairs, int first, int count,
                                        int32_t* out) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int32_t e = ids[p];
  out[p] = e >= first && e - first < count ? e - first : ops::kMoeNotLocal;
}

}  // namespace

void moe_local_expert_ids(const Tensor& topk_ids, int first, int count, const Tensor& local_ids,
                          Stream stream) {
  const int64_t pairs = topk_ids.numel();
  if (pairs == 0) return;
  auto s = static_cast<cudaStream_t>(stream.handle);
  const auto blocks = static_cast<unsigned>((pairs + 255) / 256);
  local_expert_ids_kernel<<<blocks, 256, 0, s>>>(topk_ids.ptr<int32_t>(), pairs, first, count,
                                                  local_ids.ptr<int32_t>());
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
