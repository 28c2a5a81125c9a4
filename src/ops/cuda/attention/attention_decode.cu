// Decode attention (one query per sequence) over a paged KV cache: split-KV, as flash-decoding.
//
// A decode step reads the whole KV cache once and does only ~2 FLOPs per byte, so the kernel's
// job is to keep every SM streaming K and V at full bandwidth. The keys of each sequence are cut
// into `splits` chunks; block (split, kv head [, head block], sequence) streams one chunk of one
// KV head through shared memory (cp.async, kStages tiles of kTileKeys keys in flight) and scores
// it against all the query heads that share that KV head (GQA), so K and V are read once per
// KV head, not once per query head.
//
// The scores and the weighted sum run on the tensor cores (mma.sync m16n8k16, fp32 accumulate):
// the group's query heads are the 16 rows of the A operand (rows past the group are zero and
// never written out), K is the B operand of S = Q K^T and V that of O = P V. Each of the four
// warps takes 16 keys of every tile and keeps its own online softmax (running max m, sum l and
// the fp32 accumulator, in the log2 domain); the warps are merged once at the end through shared
// memory. A block then writes its chunk's normalised output and log-sum-exp to the workspace, and
// a combine kernel merges the chunks of each (sequence, query head); it is launched as a
// programmatic dependent (PDL), so its launch overlaps the split kernel. With one split the
// first kernel writes the output itself and the combine launch is skipped.
//
// The grid depends only on shapes (the page table's capacity, not kv_lens), so it is the same on
// every decode step and can be captured in a CUDA graph; blocks whose chunk starts past their
// sequence's end exit at once, and the combine reads only the chunks that hold keys.
//
// Shared-memory rows are 128 or 256 bytes, so the 16-byte pieces of a row are stored XOR-swizzled
// by (row % 8): the eight rows one ldmatrix reads then fall in different banks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/attention/mma_sync.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;       // query heads per block: the mma's M
constexpr int kTileKeys = 64;   // keys per pipeline stage: 16 per warp
constexpr int kStages = 3;      // tiles in shared memory (two in flight while one is used)
constexpr int kMinSplitKeys = 256;  // shorter chunks measured slower (docs/perf/attention_decode.md)
constexpr int kMaxDevices = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct DecodeArgs {
  const void* q;
  const void* k_pages;
  const void* v_pages;
  const int32_t* page_table;
  const int32_t* kv_lens;
  void* out;
  float* lse;      // null: not requested
  float* part_o;   // [batch, q_heads, splits, D] each chunk's normalised output
  float* part_lse; // [batch, q_heads, splits]   each chunk's natural-log log-sum-exp
  int64_t q_stride_b, q_stride_h, out_stride_b, out_stride_h;
  int q_heads, kv_heads, group, head_blocks;
  int max_pages, page_size;
  int splits, chunk;  // chunk: keys per split, a multiple of kTileKeys
  float scale_log2;   // softmax_scale * log2(e): scores go straight to exp2
};

template <typename T, int D>
constexpr int smem_bytes() {
  return kRows * D * int(sizeof(T)) + 2 * kStages * kTileKeys * D * int(sizeof(T));
}

// Byte offset of 16-byte piece c of row r in a [rows][D] tile of 2-byte elements.
template <int D>
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  return static_cast<uint32_t>((r * (D / 8) + (c ^ (r & 7))) * 16);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

using mma_sync::cp_async16;
using mma_sync::cp_async_commit;
using mma_sync::cp_async_wait;
using mma_sync::ldmatrix_x4;
using mma_sync::ldmatrix_x4_trans;
using mma_sync::mma_16816;

// Two floats as one register of two T (lo in the low half), the layout of an mma operand.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&v);
  }
  return r;
}

// All threads of the block copy keys [key0, key0 + kTileKeys) of one KV head into a K and a V
// tile, each thread a 16-byte piece of several rows; keys at or past `end` become zero rows.
template <typename T, int D>
__device__ __forceinline__ void load_tile(const DecodeArgs& a, const int32_t* table, int kvh,
                                          int key0, int end, uint32_t k_dst, uint32_t v_dst) {
  constexpr int kPieces = D / 8;  // 16-byte pieces per row
  constexpr int kRowStep = kThreads / kPieces;
  const int c = threadIdx.x % kPieces;
  const T* k_pages = static_cast<const T*>(a.k_pages);
  const T* v_pages = static_cast<const T*>(a.v_pages);
#pragma unroll
  for (int i = 0; i < kTileKeys / kRowStep; ++i) {
    const int r = static_cast<int>(threadIdx.x) / kPieces + i * kRowStep;
    const int key = key0 + r;
    const bool valid = key < end;
    int64_t src = 0;
    if (valid) {
      const int64_t slot =
          static_cast<int64_t>(__ldg(table + key / a.page_size)) * a.page_size + key % a.page_size;
      src = (slot * a.kv_heads + kvh) * D + c * 8;
    }
    const uint32_t dst = swizzled<D>(r, c);
    cp_async16(k_dst + dst, k_pages + src, valid);
    cp_async16(v_dst + dst, v_pages + src, valid);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(const DecodeArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kStageBytes = kTileKeys * D * int(sizeof(T));
  constexpr int kRedStride = D + 8;  // floats; padding keeps the merge's float2 stores conflict-free
  T* q_tile = reinterpret_cast<T*>(smem);
  const uint32_t q_base = smem_u32(smem);
  const uint32_t k_base = q_base + kRows * D * sizeof(T);
  const uint32_t v_base = k_base + kStages * kStageBytes;

  // Let the combine kernel's blocks be scheduled now (they wait for this grid's results): its
  // launch then overlaps this kernel instead of following it. Then wait for q and the new key
  // (pdl.cuh): this kernel may itself have started before the one that wrote them finished.
  pdl::launch_dependents();
  pdl::wait();
  const int split = blockIdx.x, b = blockIdx.z;
  const int kvh = blockIdx.y / a.head_blocks, hb = blockIdx.y % a.head_blocks;
  const int kv_len = a.kv_lens[b];
  const int begin = split * a.chunk;
  if (begin >= kv_len) return;  // an empty chunk: the combine never reads it
  const int end = min(kv_len, begin + a.chunk);
  const int tiles = (end - begin + kTileKeys - 1) / kTileKeys;
  const int head0 = kvh * a.group + hb * kRows;  // the block's first query head
  const int rows = min(kRows, a.group - hb * kRows);
  const int32_t* table = a.page_table + static_cast<int64_t>(b) * a.max_pages;

  // Start streaming K/V first; the query goes in while those loads are in flight.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles)
      load_tile<T, D>(a, table, kvh, begin + s * kTileKeys, end, k_base + s * kStageBytes,
                      v_base + s * kStageBytes);
    cp_async_commit();
  }
  const T* q = static_cast<const T*>(a.q) + b * a.q_stride_b + head0 * a.q_stride_h;
  for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    q_tile[swizzled<D>(r, d / 8) / 2 + d % 8] = r < rows ? q[r * a.q_stride_h + d] : from_float<T>(0.0f);
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // the mma fragment's row group and column pair
  // The query as A fragments, kept in registers for the whole chunk.
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    ldmatrix_x4(q_base + swizzled<D>((lane / 8 % 2) * 8 + lane % 8, 2 * ks + lane / 16), qf[ks]);
  // Rows and pieces this lane addresses for ldmatrix: K as the B operand of Q K^T (matrices:
  // keys 0-7 / 8-15 of the warp's 16 by d pieces 2ks, 2ks+1), V transposed as the B operand of
  // P V (keys 0-7, 8-15 by d pieces j, j+1).
  const int k_row = warp * 16 + (lane / 16) * 8 + lane % 8, k_piece = lane / 8 % 2;
  const int v_row = warp * 16 + (lane / 8 % 2) * 8 + lane % 8, v_piece = lane / 16;

  float m[2] = {-INFINITY, -INFINITY};  // rows g and g + 8, log2 domain
  float l[2] = {0.0f, 0.0f};            // this lane's share of the row sums
  float acc[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kStages - 2>();  // tile t has landed (for this thread) ...
    __syncthreads();               // ... for every thread, and tile t - 1 is no longer read
    const int next = t + kStages - 1;
    if (next < tiles)
      load_tile<T, D>(a, table, kvh, begin + next * kTileKeys, end,
                      k_base + (next % kStages) * kStageBytes, v_base + (next % kStages) * kStageBytes);
    cp_async_commit();  // always, so the group count stays in step with the tiles

    const uint32_t k_tile = k_base + (t % kStages) * kStageBytes;
    const uint32_t v_tile = v_base + (t % kStages) * kStageBytes;
    float s[2][4] = {};  // scores of the warp's keys 0-7 and 8-15
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t kb[4];
      ldmatrix_x4(k_tile + swizzled<D>(k_row, 2 * ks + k_piece), kb);
      mma_16816<T>(s[0], qf[ks], kb[0], kb[1]);
      mma_16816<T>(s[1], qf[ks], kb[2], kb[3]);
    }
    const int key0 = begin + t * kTileKeys + warp * 16 + 2 * t4;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = key0 + n * 8 + (e & 1) < end ? s[n][e] * a.scale_log2 : -INFINITY;

#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {  // rows g and g + 8
      float mx = fmaxf(fmaxf(s[0][2 * rr], s[0][2 * rr + 1]), fmaxf(s[1][2 * rr], s[1][2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[rr], mx);
      // All of a warp's keys so far may lie past the chunk's end (m_new = -inf): then every p and
      // the correction are 0 rather than NaN.
      const float ref = m_new == -INFINITY ? 0.0f : m_new;
      const float correction = exp2f(m[rr] - ref);
      m[rr] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2f(s[n][2 * rr + e] - ref);
          s[n][2 * rr + e] = p;
          sum += p;
        }
      l[rr] = l[rr] * correction + sum;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        acc[j][2 * rr] *= correction;
        acc[j][2 * rr + 1] *= correction;
      }
    }
    // P as the A operand: the score fragments of keys 0-7 and 8-15 are its two k halves.
    const uint32_t pa[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]),
                            pack2<T>(s[1][0], s[1][1]), pack2<T>(s[1][2], s[1][3])};
#pragma unroll
    for (int j = 0; j < D / 8; j += 2) {
      uint32_t vb[4];
      ldmatrix_x4_trans(v_tile + swizzled<D>(v_row, j + v_piece), vb);
      mma_16816<T>(acc[j], pa, vb[0], vb[1]);
      mma_16816<T>(acc[j + 1], pa, vb[2], vb[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the K/V stages are reused below

  // Merge the four warps: finish each lane's row sums across its quad, then rescale every
  // warp's accumulator to the block's row maximum and add them up in shared memory.
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
  }
  static_assert((kWarps * kRows * kRedStride + 2 * kWarps * kRows + 2 * kRows) * 4 <=
                    2 * kStages * kStageBytes,
                "the merge must fit in the K/V stages");
  float* red_o = reinterpret_cast<float*>(smem + kRows * D * sizeof(T));  // [warp][row][kRedStride]
  float* red_m = red_o + kWarps * kRows * kRedStride;                       // [warp][row]
  float* red_l = red_m + kWarps * kRows;
  float* row_m = red_l + kWarps * kRows;  // [row] the block's maximum
  float* row_l = row_m + kRows;           // [row] the block's sum, relative to it
  if (t4 == 0) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      red_m[warp * kRows + g + 8 * rr] = m[rr];
      red_l[warp * kRows + g + 8 * rr] = l[rr];
    }
  }
  __syncthreads();
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = g + 8 * rr;
    float block_m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) block_m = fmaxf(block_m, red_m[w * kRows + row]);
    // block_m is finite: warp 0's first key is the chunk's first key, always inside it.
    const float f = m[rr] == -INFINITY ? 0.0f : exp2f(m[rr] - block_m);
    float* dst = red_o + (warp * kRows + row) * kRedStride + 2 * t4;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<float2*>(dst + j * 8) = make_float2(acc[j][2 * rr] * f, acc[j][2 * rr + 1] * f);
  }
  if (threadIdx.x < kRows) {
    const int row = threadIdx.x;
    float block_m = -INFINITY, block_l = 0.0f;
    for (int w = 0; w < kWarps; ++w) block_m = fmaxf(block_m, red_m[w * kRows + row]);
    for (int w = 0; w < kWarps; ++w) {
      const float wm = red_m[w * kRows + row];
      if (wm != -INFINITY) block_l += red_l[w * kRows + row] * exp2f(wm - block_m);
    }
    row_m[row] = block_m;
    row_l[row] = block_l;
  }
  __syncthreads();

  const bool direct = a.splits == 1;  // the only chunk: write the output itself
  for (int i = threadIdx.x; i < rows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += red_o[(w * kRows + r) * kRedStride + d];
    o /= row_l[r];
    const int64_t h = head0 + r;
    if (direct)
      static_cast<T*>(a.out)[b * a.out_stride_b + h * a.out_stride_h + d] = from_float<T>(o);
    else
      a.part_o[((b * a.q_heads + h) * a.splits + split) * D + d] = o;
  }
  if (threadIdx.x < rows) {
    const int r = threadIdx.x;
    const int64_t h = head0 + r;
    const float lse = (row_m[r] + log2f(row_l[r])) * kLn2;
    if (!direct)
      a.part_lse[(b * a.q_heads + h) * a.splits + split] = lse;
    else if (a.lse != nullptr)
      a.lse[b * a.q_heads + h] = lse;
  }
}

// One block per (sequence, query head): out = sum_s w_s o_s with w_s = exp(lse_s - lse), over
// the chunks that hold keys, lse = log sum_s exp(lse_s). Warp w adds up the chunks w, w + 4, ...
// (their loads all in flight at once), and the four warps' sums meet in shared memory.
// Launched as a programmatic dependent of the split kernel: its blocks may start while the split
// kernel is still running, and wait here until its results are complete and visible.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) decode_combine_kernel(const DecodeArgs a) {
  constexpr int E = D / 32;
  __shared__ float scratch[32];
  __shared__ float partial[kWarps][D];
  pdl::wait_then_release();
  const int64_t item = blockIdx.x;  // b * q_heads + h
  const int64_t b = item / a.q_heads, h = item % a.q_heads;
  const int used = (a.kv_lens[b] + a.chunk - 1) / a.chunk;
  const float* lse_s = a.part_lse + item * a.splits;

  float mx = -INFINITY;
  for (int s = threadIdx.x; s < used; s += kThreads) mx = fmaxf(mx, lse_s[s]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int s = threadIdx.x; s < used; s += kThreads) sum += expf(lse_s[s] - mx);
  sum = block_sum(sum, scratch);
  const float inv_sum = 1.0f / sum;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* o_s = a.part_o + item * a.splits * D + lane * E;
  float acc[E] = {};
  constexpr int kBatch = 8;  // chunks per warp whose loads are issued together
  for (int s0 = warp; s0 < used; s0 += kWarps * kBatch) {
    float lse_u[kBatch], o_u[kBatch][E];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int s = s0 + u * kWarps;
      const bool inside = s < used;
      lse_u[u] = inside ? lse_s[s] : -INFINITY;  // weight 0
#pragma unroll
      for (int i = 0; i < E; ++i) o_u[u][i] = inside ? o_s[static_cast<int64_t>(s) * D + i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float w = expf(lse_u[u] - mx) * inv_sum;
#pragma unroll
      for (int i = 0; i < E; ++i) acc[i] = fmaf(w, o_u[u][i], acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < E; ++i) partial[warp][lane * E + i] = acc[i];
  __syncthreads();
  T* out = static_cast<T*>(a.out) + b * a.out_stride_b + h * a.out_stride_h;
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += partial[w][d];
    out[d] = from_float<T>(o);
  }
  if (a.lse != nullptr && threadIdx.x == 0) a.lse[item] = mx + logf(sum);
}

// cu_seqlens_q = {0, 1, ..., n - 1} for the fallback through attention()'s kernel.
__global__ void iota_kernel(int32_t* out, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = i;
}

// The split kernels' attribute (more than 48 KiB of shared memory) is set once per device, and
// its occupancy read there too.
template <typename T, int D>
int blocks_per_sm() {
  static int cached[kMaxDevices] = {};
  int dev = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= kMaxDevices) dev = kMaxDevices - 1;
  if (cached[dev] == 0) {
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(decode_split_kernel<T, D>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          smem_bytes<T, D>()));
    int n = 0;
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, decode_split_kernel<T, D>, kThreads, smem_bytes<T, D>()));
    cached[dev] = std::max(n, 1);
  }
  return cached[dev];
}

bool use_split_kernels(const Tensor& q, const ops::PagedKV& kv) {
  const int64_t head_dim = q.shape[2];
  return (q.dtype == DType::bf16 || q.dtype == DType::f16) && (head_dim == 64 || head_dim == 128) &&
         aligned16(kv.k_pages.data) && aligned16(kv.v_pages.data) && q.shape[0] <= 65535 &&
         kv.page_table.shape[1] * kv.k_pages.shape[1] <= INT32_MAX;
}

int head_blocks(const Tensor& q, const ops::PagedKV& kv) {
  const int64_t group = q.shape[1] / kv.k_pages.shape[2];
  return static_cast<int>((group + kRows - 1) / kRows);
}

template <int D>
using HeadDim = std::integral_constant<int, D>;

// Calls f(T{}, HeadDim<D>{}) for the split kernels' four instantiations (bf16/f16 x 64/128).
template <typename F>
void dispatch_split(const Tensor& q, F&& f) {
  const bool bf16 = q.dtype == DType::bf16;
  if (q.shape[2] == 64) {
    if (bf16) f(__nv_bfloat16{}, HeadDim<64>{});
    else f(__half{}, HeadDim<64>{});
  } else {
    if (bf16) f(__nv_bfloat16{}, HeadDim<128>{});
    else f(__half{}, HeadDim<128>{});
  }
}

// Keys per chunk when `capacity` keys are cut into `splits`: a whole number of tiles. The chunks
// that cover the capacity may then be fewer than asked for.
int chunk_keys(int64_t capacity, int splits) {
  const int64_t per_split = (capacity + std::max(splits, 1) - 1) / std::max(splits, 1);
  return static_cast<int>((per_split + kTileKeys - 1) / kTileKeys * kTileKeys);
}

}  // namespace

int attention_decode_splits(const Tensor& q, const ops::PagedKV& kv, int max_splits) {
  if (!use_split_kernels(q, kv)) return 1;
  int resident = 0, dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  dispatch_split(q, [&](auto tag, auto dim) {
    resident = sms * blocks_per_sm<decltype(tag), decltype(dim)::value>();
  });
  // Fill the GPU's resident block slots once: every SM streams from the start and no second,
  // partial wave is left at the end. A batch that fills them alone needs no split.
  const int64_t units = q.shape[0] * kv.k_pages.shape[2] * head_blocks(q, kv);
  const int64_t capacity = std::max<int64_t>(kv.page_table.shape[1] * kv.k_pages.shape[1], 1);
  int64_t splits = std::max<int64_t>(1, resident / units);
  splits = std::min<int64_t>(splits, (capacity + kMinSplitKeys - 1) / kMinSplitKeys);
  splits = std::clamp<int64_t>(splits, 1, std::max(max_splits, 1));
  // The count the kernels will really use (rounding the chunks to tiles may leave fewer).
  const int chunk = chunk_keys(capacity, static_cast<int>(splits));
  return static_cast<int>((capacity + chunk - 1) / chunk);
}

void attention_decode(const Tensor& q, const ops::PagedKV& kv, float softmax_scale,
                      const Tensor& out, const Tensor& lse, const Tensor& workspace, int splits,
                      Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t batch = q.shape[0];
  if (!use_split_kernels(q, kv)) {
    // Other dtypes and head_dims: attention()'s kernel, one query per sequence.
    const Tensor cu_seqlens(workspace.data, DType::i32, workspace.device, {batch + 1});
    iota_kernel<<<1, 256, 0, s>>>(cu_seqlens.ptr<int32_t>(), static_cast<int>(batch + 1));
    BRAID_CUDA_CHECK_LAUNCH();
    cuda::attention(q, cu_seqlens, kv, /*causal=*/true, softmax_scale, out, lse, stream);
    return;
  }
  const int q_heads = static_cast<int>(q.shape[1]), kv_heads = static_cast<int>(kv.k_pages.shape[2]);
  const int64_t capacity = std::max<int64_t>(kv.page_table.shape[1] * kv.k_pages.shape[1], 1);
  const int chunk = chunk_keys(capacity, splits);
  splits = static_cast<int>((capacity + chunk - 1) / chunk);  // only the chunks that cover it

  const int64_t head_dim = q.shape[2];
  float* part_o = workspace.ptr<float>();
  DecodeArgs a{q.data, kv.k_pages.data, kv.v_pages.data, kv.page_table.ptr<int32_t>(),
               kv.kv_lens.ptr<int32_t>(), out.data, lse.ndim != 0 ? lse.ptr<float>() : nullptr,
               part_o, part_o + batch * q_heads * splits * head_dim,
               q.strides[0], q.strides[1], out.strides[0], out.strides[1],
               q_heads, kv_heads, q_heads / kv_heads, head_blocks(q, kv),
               static_cast<int>(kv.page_table.shape[1]), static_cast<int>(kv.k_pages.shape[1]),
               splits, chunk, softmax_scale * kLog2e};
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(kv_heads * a.head_blocks),
                  static_cast<unsigned>(batch));
  dispatch_split(q, [&](auto tag, auto dim) {
    using T = decltype(tag);
    constexpr int D = decltype(dim)::value;
    blocks_per_sm<T, D>();  // sets the shared-memory attribute on first use
    launch_programmatic(decode_split_kernel<T, D>, grid, kThreads, smem_bytes<T, D>(), s, a);
    BRAID_CUDA_CHECK_LAUNCH();
    if (splits > 1) {
      launch_programmatic(decode_combine_kernel<T, D>, static_cast<unsigned>(batch * q_heads),
                          kThreads, 0, s, a);
      BRAID_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace braid::cuda
