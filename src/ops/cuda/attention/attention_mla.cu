// Multi-head latent attention (DeepSeek-V2/V3, absorbed form) over a paged cache of latent rows.
//
// Why this shape. Every query head of a token reads the same cached row c = [latent | rope key]
// (576 values for DeepSeek-V3), so the row is K for all heads and its latent part is V for all
// heads: MQA with a very wide head. Per key a head costs (r + dr) + r multiply-adds against
// (r + dr) * 2 bytes read once for all heads, so with 16..128 heads the work is far above what
// CUDA cores do at memory speed; the products run on the tensor cores. Two kernels:
//   - the Hopper kernel (wgmma, sm_90a; DeepSeek's r 512 / dr 64 with at least 64 heads, i.e.
//     V3's 128 unsharded): 64 heads per block as wgmma's M, described where it is defined below;
//   - the mma.sync kernel for everything else (V2-Lite's 16 heads, tensor-parallel shards, small
//     test widths), described here.
//
// The mma.sync kernel: mma.sync m16n8k16 with fp32 accumulate, a block's 16 query heads as the A
// rows (heads past the last are zero rows, never written out). One block = one query token x up
// to 16 heads x one chunk of keys: each cached row is copied into shared memory once (cp.async,
// double-buffered tiles of kTileKeys keys, the first two issued together) and used by all the
// block's heads. The output is r wide (512), too wide for one warp to hold a 16 x r fp32
// accumulator, so the eight warps split the work two ways: for the scores S = Q C^T two warps take
// each 8 keys of the tile, each over half of the r + dr columns; the partial scores go through
// shared memory, where 16 threads per head row add them, run the online softmax (running max and
// sum in fp32, log2 domain) and write P (rounded to the input type for the mma; the sum, and so
// the log-sum-exp, stays fp32) and each row's rescaling factor; for O += P C[:, :r] each warp owns
// r/8 output columns over all the tile's keys. Three barriers per tile, no cross-warp merge at the
// end. Eight warps rather than four: the tiles and Q take ~98 KB of shared memory, so two blocks
// fit an SM, and four warps a block left the schedulers idle behind each warp's long serial tile
// (docs/perf/mla.md, v3: 7% faster at V2-Lite's batch 64 x 4096). Shared rows are padded by 16
// bytes: a row is then an odd number of 16-byte units long, so the eight rows an ldmatrix reads
// hit distinct banks (plain and transposed alike), with no swizzle to get wrong.
//
// Decode has one query token per sequence and few sequences, so (token, head group) blocks alone
// would leave most SMs idle: the keys are cut into chunks (split-KV). Each chunk's block writes
// its normalised partial output and log-sum-exp to the workspace and a combine kernel merges the
// chunks of each (token, head). The chunk count is chosen from shapes only (tokens, heads, the
// page table's capacity, the SM count), never from kv_lens, so the grid is identical on every
// decode step and capturable in a CUDA graph: enough chunks to fill the resident block slots once,
// down to 64 keys a chunk (128 for the Hopper kernel), so a batch of one still spreads over the
// GPU. Blocks whose chunk starts past their token's last visible key exit at once, and the
// combine reads only the chunks that hold keys; it is a programmatic dependent launch on Hopper
// (its launch overlaps the split kernel's tail). With one chunk (prefill chunks, large decode
// batches) the block writes the output itself and the combine is skipped.
//
// Ragged causal queries: a block finds its token's sequence by binary search over cu_seqlens_q
// (the batch layout never leaves the device) and stops at key kv_len - q_len + i, as attention().
//
// Measured: docs/perf/mla.md. Known costs left on the table: in the mma.sync kernel Q's fragments
// are re-read from shared memory for every tile; in the Hopper kernel the tensor cores idle during
// the softmax and the single 64-key prefetch bounds the memory rate (see its comment); prefill
// tokens of one sequence each stream the sequence's rows separately.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/attention/mma_sync.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/pdl.cuh"
#if BRAID_HAS_SM90A
#include "ops/cuda/wgmma.cuh"
#endif

namespace braid::cuda {

namespace {

constexpr int kRows = 16;                // query heads per block: the mma's M (ops' kHeadsPerBlock)
constexpr int kTileKeys = 32;            // keys per stage
constexpr int kKeyGroups = kTileKeys / 8;  // the scores' 8-key groups: an mma's N each
// The split kernel's 8 warps: two per key group of the scores, each over half of the r + dr
// columns (their partial scores added in the softmax); the softmax gives each head row 16
// threads of 2 keys; each warp owns r / 8 output columns; load_tile gives each key row 8 threads.
constexpr int kSplitWarps = 8;
constexpr int kSplitThreads = kSplitWarps * 32;
constexpr int kScoreParts = kSplitWarps / kKeyGroups;
constexpr int kRowThreads = kSplitThreads / kRows;
constexpr int kRowKeys = kTileKeys / kRowThreads;
constexpr int kLoadThreads = kSplitThreads / kTileKeys;
constexpr int kCombineWarps = 4;
constexpr int kCombineThreads = kCombineWarps * 32;
constexpr int kStages = 2;               // double buffering: tile t + 1 loads while tile t is used
constexpr int kPad = 8;                  // elements of padding per shared row (16 bytes)
constexpr int kSStride = kTileKeys + 8;  // floats per score row: 16-byte rows, no bank conflicts
constexpr int kPStride = kTileKeys + 8;  // elements per probability row: 80 bytes, 5 units
constexpr int kMinSplitKeys = 64;        // ops' kMinSplitKeys: the mma.sync kernel's smallest chunk
constexpr int kMinChunkWgmma = 128;      // the Hopper kernel's (64 keys: 1.1 us slower at batch 1)
constexpr int kMaxSplits = 512;          // ops' kMaxSplitBlocks bounds the split count
constexpr int kMaxWidth = 512 + 64;
constexpr int kMaxDevices = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

static_assert(kScoreParts == 2 && kRowKeys == 2, "the softmax below adds two parts of two keys");

struct MlaArgs {
  const void* q_latent;
  const void* q_rope;
  const int32_t* cu_seqlens_q;
  const void* cache;
  const int32_t* page_table;
  const int32_t* kv_lens;
  void* out;
  float* lse;       // null: not requested
  float* part_o;    // [total_q, heads, splits, r] each chunk's normalised output (splits > 1)
  float* part_lse;  // [total_q, heads, splits]    each chunk's natural-log log-sum-exp
  int64_t ql_stride_t, ql_stride_h, qr_stride_t, qr_stride_h, out_stride_t, out_stride_h;
  int heads, head_groups;
  int r, dr, width, row_stride;  // width = r + dr; row_stride = width + kPad (shared rows)
  int batch, max_pages, page_size;
  int splits, chunk;  // chunk: keys per split, a multiple of kTileKeys
  float scale_log2;   // softmax_scale * log2(e): scores go straight to exp2
  bool causal;
  bool q_vec;   // q rows may be copied in 16-byte pieces (aligned pointers and strides)
  bool ws_vec;  // the workspace is 16-byte aligned (vector loads and stores of partials)
  bool out_vec; // out may be written two elements at a time (4-byte aligned pairs)
};

size_t smem_bytes(int width) {
  const size_t rs = static_cast<size_t>(width + kPad);
  return kRows * rs * 2                  // the query rows
         + kStages * kTileKeys * rs * 2  // the cache tiles
         + kScoreParts * kRows * kSStride * 4  // scores, one partial per part of the columns
         + kRows * kPStride * 2          // probabilities
         + 3 * kRows * 4;                // per-row rescaling factor, final max and sum
}

using mma_sync::cp_async16;
using mma_sync::cp_async_commit;
using mma_sync::cp_async_wait;
using mma_sync::ldmatrix_x4;
using mma_sync::ldmatrix_x2_trans;
using mma_sync::ldmatrix_x4_trans;
using mma_sync::mma_16816;

// Where query row t stands: its sequence and the end (exclusive) of the keys it sees.
struct QueryKeys {
  int seq;
  int end;
};

__device__ __forceinline__ QueryKeys query_keys(const MlaArgs& a, int64_t t) {
  // The sequence is the largest b with cu_seqlens_q[b] <= t (an empty sequence shares its offset
  // with the next one, and the largest such b is the non-empty one).
  const int32_t* cu = a.cu_seqlens_q;
  int lo = 0, hi = a.batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int q_begin = cu[lo], q_len = cu[lo + 1] - q_begin, kv_len = a.kv_lens[lo];
  // The queries are the sequence's last q_len tokens: query i sees keys 0 .. kv_len - q_len + i.
  const int end = a.causal ? kv_len - q_len + static_cast<int>(t - q_begin) + 1 : kv_len;
  return {lo, end};
}

// All threads of the block copy keys [key0, key0 + kTileKeys) into a tile: kLoadThreads per key
// row, so each thread looks its row up in the page table once; keys at or past `end` become
// zero rows.
template <typename T>
__device__ __forceinline__ void load_tile(const MlaArgs& a, const int32_t* table, int key0, int end,
                                          uint32_t dst) {
  const int row = static_cast<int>(threadIdx.x) / kLoadThreads;
  const int sub = static_cast<int>(threadIdx.x) % kLoadThreads;
  const int key = key0 + row;
  const bool valid = key < end;
  const T* src = static_cast<const T*>(a.cache);
  if (valid) {
    const int64_t slot =
        static_cast<int64_t>(__ldg(table + key / a.page_size)) * a.page_size + key % a.page_size;
    src += slot * a.width;
  }
  const uint32_t row_dst = dst + static_cast<uint32_t>(row * a.row_stride) * 2;
  for (int c = sub; c < a.width / 8; c += kLoadThreads)  // width / 8 pieces of 16 bytes
    cp_async16(row_dst + c * 16, src + c * 8, valid);
}

template <typename T, int kMaxR>
__global__ void __launch_bounds__(kSplitThreads, 2) mla_split_kernel(const MlaArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  // 8-column output tiles per warp at r = kMaxR (at least a pair: the loop below takes pairs).
  constexpr int kMaxTiles = kMaxR / (8 * kSplitWarps) >= 2 ? kMaxR / (8 * kSplitWarps) : 2;
  const int rs = a.row_stride;
  const int stage_bytes = kTileKeys * rs * 2;
  T* q_s = reinterpret_cast<T*>(smem);
  unsigned char* kv_s = smem + kRows * rs * 2;
  float* s_s = reinterpret_cast<float*>(kv_s + kStages * stage_bytes);
  T* p_s = reinterpret_cast<T*>(s_s + kScoreParts * kRows * kSStride);
  float* corr_s = reinterpret_cast<float*>(p_s + kRows * kPStride);
  float* row_m = corr_s + kRows;
  float* row_l = row_m + kRows;

  // Block -> (token, split, head group), head group fastest: the blocks that read the same
  // rows at the same time sit next to each other (L2 hits for all but the first).
  const int64_t idx = blockIdx.x;
  const int hg = static_cast<int>(idx % a.head_groups);
  const int64_t rest = idx / a.head_groups;
  const int split = static_cast<int>(rest % a.splits);
  const int64_t t = rest / a.splits;

  const QueryKeys qk = query_keys(a, t);
  const int begin = split * a.chunk;
  if (begin >= qk.end) return;  // an empty chunk: the combine never reads it
  const int end = begin + min(qk.end - begin, a.chunk);  // (begin + chunk may pass INT_MAX)
  const int tiles = (end - begin + kTileKeys - 1) / kTileKeys;
  const int head0 = hg * kRows;
  const int rows = min(kRows, a.heads - head0);
  const int32_t* table = a.page_table + static_cast<int64_t>(qk.seq) * a.max_pages;
  const uint32_t q_base = smem_addr(q_s), kv_base = smem_addr(kv_s), p_base = smem_addr(p_s);

  // Start streaming the first tile; the query goes in while it is in flight (in 16-byte
  // cp.async pieces when its rows allow, in the same commit group as the tile).
  load_tile<T>(a, table, begin, end, kv_base);
  {
    const T* ql = static_cast<const T*>(a.q_latent) + t * a.ql_stride_t + head0 * a.ql_stride_h;
    const T* qr = static_cast<const T*>(a.q_rope) + t * a.qr_stride_t + head0 * a.qr_stride_h;
    if (a.q_vec) {
      const int pieces = a.width / 8;
      for (int i = threadIdx.x; i < kRows * pieces; i += kSplitThreads) {
        const int row = i / pieces, d = (i % pieces) * 8;
        const T* src = d < a.r ? ql + row * a.ql_stride_h + d : qr + row * a.qr_stride_h + d - a.r;
        cp_async16(q_base + static_cast<uint32_t>(row * rs + d) * 2, row < rows ? src : ql,
                   row < rows);
      }
    } else {
      for (int i = threadIdx.x; i < kRows * a.width; i += kSplitThreads) {
        const int row = i / a.width, d = i % a.width;
        T v = from_float<T>(0.0f);
        if (row < rows)
          v = d < a.r ? ql[row * a.ql_stride_h + d] : qr[row * a.qr_stride_h + d - a.r];
        q_s[row * rs + d] = v;
      }
    }
  }
  cp_async_commit();
  // Both buffers are free: the second tile goes out at once too (a chunk of two tiles, small
  // decode batches, then waits for one memory latency, not two).
  if (tiles > 1) load_tile<T>(a, table, begin + kTileKeys, end, kv_base + stage_bytes);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // the mma fragment's row group and column pair
  // ldmatrix row addresses of this lane. Q as the A operand of S = Q C^T (matrices: heads 0-7 /
  // 8-15 by columns k, k + 8); the warp's 8 keys as its B operand (matrices: columns k, k + 8,
  // k + 16, k + 24: two k-steps); P as the A operand of O = P V; V = C[:, :r] transposed as its B
  // operand (matrices: keys 0-7 / 8-15 by output columns n, n + 8).
  const uint32_t q_addr = q_base + static_cast<uint32_t>((lane % 16) * rs + (lane / 16) * 8) * 2;
  const int key_group = warp % kKeyGroups, score_part = warp / kKeyGroups;
  const uint32_t k_off =
      static_cast<uint32_t>((key_group * 8 + lane % 8) * rs + (lane / 8) * 8) * 2;
  const uint32_t p_addr =
      p_base + static_cast<uint32_t>((lane % 16) * kPStride + (lane / 16) * 8) * 2;
  const uint32_t v_off =
      static_cast<uint32_t>((lane % 8 + (lane / 8 % 2) * 8) * rs + (lane / 16) * 8) * 2;
  const int n_tiles = a.r / (8 * kSplitWarps);  // this warp's 8-column output tiles (r % 64 == 0)
  const int col0 = warp * (a.r / kSplitWarps);  // this warp's first output column
  // The warp's part of the score columns: whole 32-column steps, split evenly between the parts.
  const int steps = a.width / 32;
  const int k_begin = score_part * steps / kScoreParts * 32;
  const int k_end = (score_part + 1) * steps / kScoreParts * 32;
  float* s_part = s_s + score_part * kRows * kSStride;

  // The online softmax's threads: kRowThreads per head row, kRowKeys keys each. Every thread of a
  // row keeps the row's running maximum (the same value in all of them) and its own share of the
  // running sum.
  const int srow = threadIdx.x / kRowThreads, spart = threadIdx.x % kRowThreads;
  float m_run = -INFINITY, l_part = 0.0f;

  float acc[kMaxTiles][4];
#pragma unroll
  for (int j = 0; j < kMaxTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  for (int it = 0; it < tiles; ++it) {
    if (it == 0)
      cp_async_wait<1>();  // tile 0 (and the query) has landed for this thread; tile 1 may not
    else
      cp_async_wait<0>();  // tile it has landed (for this thread) ...
    __syncthreads();  // ... for every thread; tile it - 1, P and the factors are no longer read
    if (it >= 1 && it + 1 < tiles) {  // tile it + 1 into tile it - 1's buffer
      load_tile<T>(a, table, begin + (it + 1) * kTileKeys, end,
                   kv_base + static_cast<uint32_t>(((it + 1) % kStages) * stage_bytes));
      cp_async_commit();
    }
    const uint32_t tile = kv_base + static_cast<uint32_t>((it % kStages) * stage_bytes);

    // Scores of the warp's 8 keys for the 16 heads, over its part of the r + dr columns.
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = k_begin; k < k_end; k += 32) {
      uint32_t kb[4], qa[4], qb[4];
      ldmatrix_x4(tile + k_off + k * 2, kb);
      ldmatrix_x4(q_addr + k * 2, qa);
      ldmatrix_x4(q_addr + (k + 16) * 2, qb);
      mma_16816<T>(s, qa, kb[0], kb[1]);
      mma_16816<T>(s, qb, kb[2], kb[3]);
    }
    {
      const int col = key_group * 8 + 2 * t4;  // the key within the tile
      *reinterpret_cast<float2*>(s_part + g * kSStride + col) = make_float2(s[0], s[1]);
      *reinterpret_cast<float2*>(s_part + (g + 8) * kSStride + col) = make_float2(s[2], s[3]);
    }
    __syncthreads();

    {
      // The thread's two keys: the two parts' sums, scaled; keys past the chunk's end masked.
      const float* src = s_s + srow * kSStride + spart * kRowKeys;
      const float2 lo = *reinterpret_cast<const float2*>(src);
      const float2 hi = *reinterpret_cast<const float2*>(src + kRows * kSStride);
      float x[kRowKeys] = {lo.x + hi.x, lo.y + hi.y};
      const int key0 = begin + it * kTileKeys + spart * kRowKeys;
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < kRowKeys; ++i) {
        x[i] = key0 + i < end ? x[i] * a.scale_log2 : -INFINITY;
        mx = fmaxf(mx, x[i]);
      }
#pragma unroll
      for (int lanes = 1; lanes < kRowThreads; lanes *= 2)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, lanes));
      const float m_new = fmaxf(m_run, mx);
      // The chunk's first key is visible, so m_new is finite from the first tile on; the guard
      // only keeps a fully masked row from turning into NaN.
      const float ref = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2f(m_run - ref);  // 0 on the first tile (m_run = -inf)
      const float p0 = exp2f(x[0] - ref), p1 = exp2f(x[1] - ref);
      const float sum = p0 + p1;
      *reinterpret_cast<uint32_t*>(p_s + srow * kPStride + spart * kRowKeys) = pack2<T>(p0, p1);
      l_part = l_part * corr + sum;
      m_run = m_new;
      if (spart == 0) corr_s[srow] = corr;
    }
    __syncthreads();

    // O = O * corr + P V over the tile's 32 keys, this warp's output columns.
    const float c_lo = corr_s[g], c_hi = corr_s[g + 8];
#pragma unroll
    for (int j = 0; j < kMaxTiles; ++j) {
      if (j < n_tiles) {
        acc[j][0] *= c_lo;
        acc[j][1] *= c_lo;
        acc[j][2] *= c_hi;
        acc[j][3] *= c_hi;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kTileKeys / 16; ++ks) {
      uint32_t pa[4];
      ldmatrix_x4(p_addr + ks * 16 * 2, pa);
#pragma unroll
      for (int j = 0; j < kMaxTiles; j += 2) {
        const uint32_t v_addr =
            tile + v_off + static_cast<uint32_t>(ks * 16 * rs + col0 + j * 8) * 2;
        if (j + 1 < n_tiles) {
          uint32_t vb[4];
          ldmatrix_x4_trans(v_addr, vb);
          mma_16816<T>(acc[j], pa, vb[0], vb[1]);
          mma_16816<T>(acc[j + 1], pa, vb[2], vb[3]);
        } else if (j < n_tiles) {  // an odd last tile (8 warps, r / 64 odd)
          uint32_t vb[2];
          ldmatrix_x2_trans(v_addr, vb);
          mma_16816<T>(acc[j], pa, vb[0], vb[1]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Each row's sum over its threads; the row's maximum is already the same in all of them.
#pragma unroll
  for (int lanes = 1; lanes < kRowThreads; lanes *= 2)
    l_part += __shfl_xor_sync(0xffffffffu, l_part, lanes);
  if (spart == 0) {
    row_m[srow] = m_run;
    row_l[srow] = l_part;
  }
  __syncthreads();

  const bool direct = a.splits == 1;  // the only chunk: write the output itself
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {  // fragment rows g and g + 8
    const int row = g + 8 * rr;
    if (row >= rows) continue;
    const int64_t h = head0 + row;
    const float inv_l = 1.0f / row_l[row];
    if (direct) {
      T* o = static_cast<T*>(a.out) + t * a.out_stride_t + h * a.out_stride_h + col0 + 2 * t4;
#pragma unroll
      for (int j = 0; j < kMaxTiles; ++j) {
        if (j < n_tiles) {
          o[j * 8] = from_float<T>(acc[j][2 * rr] * inv_l);
          o[j * 8 + 1] = from_float<T>(acc[j][2 * rr + 1] * inv_l);
        }
      }
    } else {
      float* o = a.part_o + ((t * a.heads + h) * a.splits + split) * a.r + col0 + 2 * t4;
#pragma unroll
      for (int j = 0; j < kMaxTiles; ++j) {
        if (j < n_tiles) {
          o[j * 8] = acc[j][2 * rr] * inv_l;
          o[j * 8 + 1] = acc[j][2 * rr + 1] * inv_l;
        }
      }
    }
  }
  if (static_cast<int>(threadIdx.x) < rows) {
    const int row = threadIdx.x;
    const int64_t h = head0 + row;
    const float lse = (row_m[row] + log2f(row_l[row])) * kLn2;
    if (!direct)
      a.part_lse[(t * a.heads + h) * a.splits + split] = lse;
    else if (a.lse != nullptr)
      a.lse[t * a.heads + h] = lse;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  pdl::launch_dependents();  // the combine may start
#endif
}

#if BRAID_HAS_SM90A
// ---------------------------------------------------------------------------------------------
// The Hopper kernel (wgmma) for many heads: DeepSeek's r = 512, dr = 64, heads >= 64.
//
// A block = one query token x 64 of its heads (wgmma's M) x one chunk of keys, two warpgroups
// (256 threads), one block per SM (225 KB of shared memory: Q, two cache tiles, P). Tiles of 64
// keys: the cache rows stream into shared memory through cp.async (double-buffered; warpgroup 1
// issues the refills), in wgmma's 128-byte-swizzle layout (nine regions of [64 rows][64 columns],
// 16-byte chunks XOR-ed with row % 8), so that one copy serves both products: K-major for
// S = Q C^T (B = the rows), MN-major (transposed by the instruction) for O = P C[:, :r] (B = the
// latent columns). Per tile:
//   warpgroup 0: S = Q C^T (36 x m64n64k16, Q and the tile from shared memory), the online
//                softmax in registers, P rounded to T, written to shared memory for warpgroup 1
//                and kept in registers as its own A operand; its O columns 0..255;
//   warpgroup 1: O columns 256..511 with P read back by ldmatrix (A from registers too).
// O (64 x 256 fp32 per warpgroup) lives in registers: 128 per thread. The 128 heads of V3 take
// two blocks per token, next to each other in the grid, so the second reads the rows from L2.
//
// Where the time goes (H100, V3 batch 128 x 4096, docs/perf/mla.md): with the cache loads
// removed the kernel takes 79% of its time, with the products removed 90%: compute and memory
// are both near the limit and overlap poorly. The tensor cores idle while warpgroup 0 runs the
// softmax (FlashMLA's "seesaw" schedule splits S across both warpgroups to fill that gap), and
// with two 64-key buffers only one tile is in flight while the other is used (FlashMLA frees a
// buffer region by region, with TMA).
namespace wg {

constexpr int kHeads = 64, kKeys = 64, kR = 512, kDr = 64, kWidth = kR + kDr;
constexpr int kThreads = 256;
constexpr int kChunks = kWidth / 8;            // 16-byte pieces per row (72)
constexpr int kRegionBytes = 64 * 128;         // [64 rows][64 columns] of 2-byte elements
constexpr int kTileBytes = kKeys * kWidth * 2;  // 73728: nine regions
constexpr int kQBytes = kHeads * kWidth * 2;
constexpr int kPBytes = kHeads * kKeys * 2;  // one region
constexpr size_t kSmem = 1024 + kQBytes + 2 * kTileBytes + kPBytes + 2 * kHeads * 4;
static_assert(kSmem <= 227 * 1024, "one block per SM");

// Byte offset of 16-byte piece c (columns 8c .. 8c + 7) of row r in a [64][kWidth] tile.
__device__ __forceinline__ uint32_t sw(int r, int c) {
  return static_cast<uint32_t>((c / 8) * kRegionBytes + r * 128 + (((c % 8) ^ (r % 8)) << 4));
}

template <typename T>
__device__ __forceinline__ void mma_s(float (&s)[32], uint64_t da, uint64_t db, int acc) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    wgmma_ss_m64n64k16_bf16(s, da, db, acc);
  else
    wgmma_ss_m64n64k16_f16(s, da, db, acc);
}
template <typename T>
__device__ __forceinline__ void mma_o(float (&o)[64], const uint32_t (&p)[4], uint64_t db) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    wgmma_rs_m64n128k16_bf16(o, p, db, 1);
  else
    wgmma_rs_m64n128k16_f16(o, p, db, 1);
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) mla_wgmma_kernel(const MlaArgs a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma needs sm_90a code; the launcher picks this kernel only on compute 9.0
#else
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u, sKV = sQ + kQBytes, sP = sKV + 2 * kTileBytes;
  float* corr_s = reinterpret_cast<float*>(smem_raw + (sP + kPBytes - raw));  // [64] per row
  float* l_s = corr_s + kHeads;                                                // [64] per row

  const int64_t idx = blockIdx.x;
  const int hg = static_cast<int>(idx % a.head_groups);
  const int64_t rest = idx / a.head_groups;
  const int split = static_cast<int>(rest % a.splits);
  const int64_t t = rest / a.splits;

  const int head0 = hg * kHeads;
  const int rows = min(kHeads, a.heads - head0);
  const int tid = threadIdx.x;
  auto load_q = [&] {
    const T* ql = static_cast<const T*>(a.q_latent) + t * a.ql_stride_t + head0 * a.ql_stride_h;
    const T* qr = static_cast<const T*>(a.q_rope) + t * a.qr_stride_t + head0 * a.qr_stride_h;
    if (a.q_vec) {
      for (int i = tid; i < kHeads * kChunks; i += kThreads) {
        const int row = i / kChunks, c = i % kChunks, d = c * 8;
        const T* src = d < kR ? ql + row * a.ql_stride_h + d : qr + row * a.qr_stride_h + d - kR;
        cp_async16(sQ + sw(row, c), row < rows ? src : ql, row < rows);
      }
    } else {
      unsigned char* q_gen = smem_raw + (sQ - raw);
      for (int i = tid; i < kHeads * kWidth; i += kThreads) {
        const int row = i / kWidth, d = i % kWidth;
        T v = from_float<T>(0.0f);
        if (row < rows) v = d < kR ? ql[row * a.ql_stride_h + d] : qr[row * a.qr_stride_h + d - kR];
        *reinterpret_cast<T*>(q_gen + sw(row, d / 8) + (d % 8) * 2) = v;
      }
    }
  };
  const QueryKeys qk = query_keys(a, t);
  const int begin = split * a.chunk;
  if (begin >= qk.end) return;  // an empty chunk: the combine never reads it
  const int end = begin + min(qk.end - begin, a.chunk);
  const int tiles = (end - begin + kKeys - 1) / kKeys;
  const int32_t* table = a.page_table + static_cast<int64_t>(qk.seq) * a.max_pages;
  const T* cache = static_cast<const T*>(a.cache);

  // 8 threads per row (a row's 128-byte slices land in distinct banks), n threads cover n / 8
  // rows per pass; keys at or past `end` become zero rows.
  auto load_tile = [&](int key0, uint32_t dst, int lt, int n) {
    const int sub = lt % 8;
    for (int row = lt / 8; row < kKeys; row += n / 8) {
      const int key = key0 + row;
      const bool valid = key < end;
      const T* src = cache;
      if (valid)
        src += (static_cast<int64_t>(__ldg(table + key / a.page_size)) * a.page_size +
                key % a.page_size) * kWidth;
#pragma unroll
      for (int c = sub; c < kChunks; c += 8) cp_async16(dst + sw(row, c), src + c * 8, valid);
    }
  };

  // Both buffers are free: tiles 0 and 1 go out at once, the query with tile 0.
  load_tile(begin, sKV, tid, kThreads);
  load_q();
  cp_async_commit();
  if (tiles > 1) load_tile(begin + kKeys, sKV + kTileBytes, tid, kThreads);
  cp_async_commit();

  const int wgi = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int row_lo = warp * 16 + g, row_hi = row_lo + 8;  // this thread's accumulator rows

  float o[2][64];  // this warpgroup's columns 256 wgi + 128 h + 8 j + 2 t4 + {0, 1}
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) o[h][i] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // warpgroup 0's rows

  for (int it = 0; it < tiles; ++it) {
    const uint32_t kv = sKV + static_cast<uint32_t>((it & 1) * kTileBytes);
    if (it == 0)
      cp_async_wait<1>();  // the query and tile 0 (tile 1 may still be on its way)
    else
      cp_async_wait<0>();
    fence_proxy_async();  // the cp.async writes, seen by wgmma's reads
    __syncthreads();      // tile it is in; tile it - 1's buffer, P and the factors are free
    // Warpgroup 1 refills (warpgroup 0, the critical path, goes straight to the scores).
    if (wgi == 1 && it >= 1 && it + 1 < tiles) {
      load_tile(begin + (it + 1) * kKeys, sKV + static_cast<uint32_t>(((it + 1) & 1) * kTileBytes),
                tid - 128, 128);
      cp_async_commit();
    }

    uint32_t pa[4][4];  // P as the A operand: k-steps of 16 keys
    float cl = 1.0f, ch = 1.0f;  // the rescaling factors of this thread's rows
    // O = O * corr + P V for this warpgroup's 256 columns (two n128 products per k-step).
    auto issue_pv = [&] {
      if (cl != 1.0f || ch != 1.0f) {  // once the maxima settle, most tiles skip this
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            o[h][4 * j] *= cl;
            o[h][4 * j + 1] *= cl;
            o[h][4 * j + 2] *= ch;
            o[h][4 * j + 3] *= ch;
          }
      }
      fence_registers(o[0]);
      fence_registers(o[1]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t v =
              kv + static_cast<uint32_t>((4 * wgi + 2 * h) * kRegionBytes + kk * 16 * 128);
          mma_o<T>(o[h], pa[kk], descriptor(v, kRegionBytes, 1024));
        }
      }
      wgmma_commit();
    };
    if (wgi == 0) {
      float s[32];
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kWidth / 16; ++ks) {
        const uint32_t off = static_cast<uint32_t>((ks / 4) * kRegionBytes + (ks % 4) * 32);
        mma_s<T>(s, descriptor(sQ + off, 16, 1024), descriptor(kv + off, 16, 1024), ks > 0);
      }
      wgmma_commit();
      wgmma_wait_all();
      fence_registers(s);

      const int key0 = begin + it * kKeys + 2 * t4;
      float mx_lo = -INFINITY, mx_hi = -INFINITY;
      if (begin + (it + 1) * kKeys > end) {  // the last tile of a chunk: keys past it are -inf
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const bool valid = key0 + 8 * j + e < end;
            s[4 * j + e] = valid ? s[4 * j + e] * a.scale_log2 : -INFINITY;
            s[4 * j + 2 + e] = valid ? s[4 * j + 2 + e] * a.scale_log2 : -INFINITY;
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] *= a.scale_log2;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        mx_lo = fmaxf(mx_lo, fmaxf(s[4 * j], s[4 * j + 1]));
        mx_hi = fmaxf(mx_hi, fmaxf(s[4 * j + 2], s[4 * j + 3]));
      }
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
      const float new_lo = fmaxf(m_lo, mx_lo), new_hi = fmaxf(m_hi, mx_hi);
      const float ref_lo = new_lo == -INFINITY ? 0.0f : new_lo;
      const float ref_hi = new_hi == -INFINITY ? 0.0f : new_hi;
      const float c_lo = exp2f(m_lo - ref_lo), c_hi = exp2f(m_hi - ref_hi);
      m_lo = new_lo;
      m_hi = new_hi;
      float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p0 = exp2f(s[4 * j] - ref_lo), p1 = exp2f(s[4 * j + 1] - ref_lo);
        const float p2 = exp2f(s[4 * j + 2] - ref_hi), p3 = exp2f(s[4 * j + 3] - ref_hi);
        sum_lo += p0 + p1;
        sum_hi += p2 + p3;
        pa[j / 2][(j % 2) * 2] = pack2<T>(p0, p1);
        pa[j / 2][(j % 2) * 2 + 1] = pack2<T>(p2, p3);
      }
      l_lo = l_lo * c_lo + sum_lo;
      l_hi = l_hi * c_hi + sum_hi;
      // P for warpgroup 1: rows row_lo / row_hi (both = g mod 8), 8-column piece j.
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t col = static_cast<uint32_t>(((j ^ g) << 4) + 4 * t4);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sP + row_lo * 128 + col),
                     "r"(pa[j / 2][(j % 2) * 2]));
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sP + row_hi * 128 + col),
                     "r"(pa[j / 2][(j % 2) * 2 + 1]));
      }
      if (t4 == 0) {
        corr_s[row_lo] = c_lo;
        corr_s[row_hi] = c_hi;
      }
      cl = c_lo;
      ch = c_hi;
    }
    __syncthreads();  // P and the factors are in shared memory
    if (wgi == 1) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int row = warp * 16 + lane % 16, c = 2 * kk + lane / 16;
        ldmatrix_x4(sP + static_cast<uint32_t>(row * 128 + ((c ^ (row % 8)) << 4)), pa[kk]);
      }
      cl = corr_s[row_lo];
      ch = corr_s[row_hi];
    }
    issue_pv();
    wgmma_wait_all();
    fence_registers(o[0]);
    fence_registers(o[1]);
  }
  cp_async_wait<0>();

  if (wgi == 0) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    if (t4 == 0) {
      l_s[row_lo] = l_lo;
      l_s[row_hi] = l_hi;
      const bool direct = a.splits == 1;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int row = rr ? row_hi : row_lo;
        if (row >= rows) continue;
        const int64_t h = head0 + row;
        const float lse = ((rr ? m_hi : m_lo) + log2f(rr ? l_hi : l_lo)) * kLn2;
        if (!direct)
          a.part_lse[(t * a.heads + h) * a.splits + split] = lse;
        else if (a.lse != nullptr)
          a.lse[t * a.heads + h] = lse;
      }
    }
  }
  __syncthreads();

  const bool direct = a.splits == 1;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = rr ? row_hi : row_lo;
    if (row >= rows) continue;
    const int64_t h = head0 + row;
    const float inv_l = 1.0f / l_s[row];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int col0 = 256 * wgi + 128 * hh + 2 * t4;
      if (direct) {
        T* dst = static_cast<T*>(a.out) + t * a.out_stride_t + h * a.out_stride_h + col0;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float x = o[hh][4 * j + 2 * rr] * inv_l, y = o[hh][4 * j + 2 * rr + 1] * inv_l;
          if (a.out_vec) {
            *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack2<T>(x, y);
          } else {
            dst[8 * j] = from_float<T>(x);
            dst[8 * j + 1] = from_float<T>(y);
          }
        }
      } else {
        float* dst = a.part_o + ((t * a.heads + h) * a.splits + split) * kR + col0;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float x = o[hh][4 * j + 2 * rr] * inv_l, y = o[hh][4 * j + 2 * rr + 1] * inv_l;
          if (a.ws_vec) {
            *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(x, y);
          } else {
            dst[8 * j] = x;
            dst[8 * j + 1] = y;
          }
        }
      }
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  pdl::launch_dependents();  // the combine may start
#endif
#endif
}

}  // namespace wg
#endif  // BRAID_HAS_SM90A

// One block per (token, head, 128 output columns): out = sum_s w_s o_s with
// w_s = exp(lse_s - lse), over the chunks that hold keys, lse = log sum_s exp(lse_s). The four
// warps take every fourth chunk (each lane 4 columns) and add up through shared memory.
constexpr int kCombineCols = 128;

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) mla_combine_kernel(const MlaArgs a) {
  __shared__ float scratch[32];
  __shared__ float weight[kMaxSplits];
  __shared__ float4 part[kCombineWarps][32];
  // Launched as a programmatic dependent of the split kernel: wait for all of it (a no-op when
  // launched plainly).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  pdl::wait();
#endif
  const int slices = (a.r + kCombineCols - 1) / kCombineCols;
  const int64_t item = blockIdx.x / slices;  // t * heads + h
  const int slice = static_cast<int>(blockIdx.x % slices);
  const int64_t t = item / a.heads, h = item % a.heads;
  const int used = (query_keys(a, t).end + a.chunk - 1) / a.chunk;
  const float* lse_s = a.part_lse + item * a.splits;

  float mx = -INFINITY;
  for (int s = threadIdx.x; s < used; s += kCombineThreads) mx = fmaxf(mx, lse_s[s]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int s = threadIdx.x; s < used; s += kCombineThreads) sum += expf(lse_s[s] - mx);
  sum = block_sum(sum, scratch);
  const float inv_sum = 1.0f / sum;
  for (int s = threadIdx.x; s < used; s += kCombineThreads) weight[s] = expf(lse_s[s] - mx) * inv_sum;
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = slice * kCombineCols + lane * 4;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (col < a.r) {
    const float* o_s = a.part_o + item * a.splits * a.r + col;
#pragma unroll 4
    for (int s = warp; s < used; s += kCombineWarps) {
      const float* src = o_s + static_cast<int64_t>(s) * a.r;
      float4 v;
      if (a.ws_vec) {
        v = *reinterpret_cast<const float4*>(src);
      } else {
        v = make_float4(src[0], src[1], src[2], src[3]);
      }
      const float w = weight[s];
      acc.x = fmaf(w, v.x, acc.x);
      acc.y = fmaf(w, v.y, acc.y);
      acc.z = fmaf(w, v.z, acc.z);
      acc.w = fmaf(w, v.w, acc.w);
    }
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && col < a.r) {
    float4 r = part[0][lane];
#pragma unroll
    for (int w = 1; w < kCombineWarps; ++w) {
      r.x += part[w][lane].x;
      r.y += part[w][lane].y;
      r.z += part[w][lane].z;
      r.w += part[w][lane].w;
    }
    T* out = static_cast<T*>(a.out) + t * a.out_stride_t + h * a.out_stride_h + col;
    out[0] = from_float<T>(r.x);
    out[1] = from_float<T>(r.y);
    out[2] = from_float<T>(r.z);
    out[3] = from_float<T>(r.w);
  }
  if (a.lse != nullptr && slice == 0 && threadIdx.x == 0) a.lse[item] = mx + logf(sum);
}

template <int R>
using MaxR = std::integral_constant<int, R>;

// Calls f(T{}, MaxR<R>{}) for the four instantiations: bf16/f16 x r up to 128 / up to 512 (the
// accumulator's registers are sized by the bound; smaller r leave some unused).
template <typename F>
void dispatch(DType dtype, int64_t r, F&& f) {
  const bool bf16 = dtype == DType::bf16;
  if (r <= 128) {
    if (bf16)
      f(__nv_bfloat16{}, MaxR<128>{});
    else
      f(__half{}, MaxR<128>{});
  } else {
    if (bf16)
      f(__nv_bfloat16{}, MaxR<512>{});
    else
      f(__half{}, MaxR<512>{});
  }
}

// The split kernel's shared-memory opt-in (set once per device, for the widest row the
// instantiation takes, so any call's width fits) and its occupancy at a row width, cached.
template <typename T, int kMaxR>
int blocks_per_sm(int width) {
  static int cached[kMaxDevices][kMaxWidth / 32 + 1] = {};
  int dev = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= kMaxDevices) dev = kMaxDevices - 1;
  int& n = cached[dev][std::min(width / 32, kMaxWidth / 32)];
  if (n == 0) {
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(mla_split_kernel<T, kMaxR>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes(kMaxR + 64))));
    int blocks = 0;
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, mla_split_kernel<T, kMaxR>, kSplitThreads, smem_bytes(width)));
    n = std::max(blocks, 1);
  }
  return n;
}

#if BRAID_HAS_SM90A
// The Hopper kernel's opt-in and occupancy (one block per SM), once per device.
template <typename T>
int wgmma_blocks_per_sm() {
  static int cached[kMaxDevices] = {};
  int dev = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= kMaxDevices) dev = kMaxDevices - 1;
  int& n = cached[dev];
  if (n == 0) {
    int blocks = 0;
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(wg::mla_wgmma_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(wg::kSmem)));
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, wg::mla_wgmma_kernel<T>, wg::kThreads, wg::kSmem));
    n = std::max(blocks, 1);
  }
  return n;
}
#endif

// Which kernel a call takes, from shapes and the device only: the Hopper kernel for DeepSeek's
// widths with at least 64 heads (a whole wgmma M), the mma.sync kernel otherwise.
struct Plan {
  bool wgmma;
  int heads_per_block;  // the kernel's head group
  int tile;             // keys per tile: chunks are whole tiles
  int min_chunk;        // the smallest chunk split-KV cuts, >= ops' kMinSplitKeys
};

Plan plan_for(int64_t heads, int64_t r, int64_t dr) {
#if BRAID_HAS_SM90A
  if (device_runs_sm90a() && r == wg::kR && dr == wg::kDr && heads >= wg::kHeads)
    return {true, wg::kHeads, wg::kKeys, kMinChunkWgmma};
#endif
  (void)heads;
  (void)r;
  (void)dr;
  return {false, kRows, kTileKeys, kMinSplitKeys};
}

// Keys per chunk when `capacity` keys are cut into `splits`: a whole number of tiles. The chunks
// that cover the capacity may then be fewer than asked for.
int chunk_keys(int64_t capacity, int splits, int tile) {
  const int64_t per_split = (capacity + std::max(splits, 1) - 1) / std::max(splits, 1);
  return static_cast<int>((per_split + tile - 1) / tile * tile);
}

}  // namespace

int attention_mla_splits(const Tensor& q_latent, const Tensor& page_table, const Tensor& cache,
                         int max_splits) {
  const int width = static_cast<int>(cache.shape[3]);
  const int64_t heads = q_latent.shape[1], r = q_latent.shape[2];
  const Plan plan = plan_for(heads, r, width - r);
  int resident = 0;
  if (plan.wgmma) {
#if BRAID_HAS_SM90A
    resident = sm_count() * (q_latent.dtype == DType::bf16 ? wgmma_blocks_per_sm<__nv_bfloat16>()
                                                           : wgmma_blocks_per_sm<__half>());
#endif
  } else {
    dispatch(q_latent.dtype, r, [&](auto tag, auto bound) {
      resident = sm_count() * blocks_per_sm<decltype(tag), decltype(bound)::value>(width);
    });
  }
  // Fill the GPU's resident block slots once: every SM streams from the start and no second,
  // partial wave is left at the end. Enough tokens fill them alone and need no split; few tokens
  // (small decode batches) get chunks down to the plan's min_chunk (64 / 128 keys).
  const int64_t groups = (heads + plan.heads_per_block - 1) / plan.heads_per_block;
  const int64_t units = std::max<int64_t>(q_latent.shape[0] * groups, 1);
  const int64_t capacity = std::max<int64_t>(page_table.shape[1] * cache.shape[1], 1);
  int64_t splits = std::max<int64_t>(1, resident / units);
  const int64_t min_keys = plan.min_chunk;
  splits = std::min<int64_t>(splits, (capacity + min_keys - 1) / min_keys);
  splits = std::clamp<int64_t>(splits, 1, std::min(std::max(max_splits, 1), kMaxSplits));
  // The count the kernels will really use (rounding the chunks to tiles may leave fewer).
  const int chunk = chunk_keys(capacity, static_cast<int>(splits), plan.tile);
  return static_cast<int>((capacity + chunk - 1) / chunk);
}

void attention_mla(const Tensor& q_latent, const Tensor& q_rope, const Tensor& cu_seqlens_q,
                   const Tensor& cache, const Tensor& page_table, const Tensor& kv_lens,
                   bool causal, float softmax_scale, const Tensor& out, const Tensor& lse,
                   const Tensor& workspace, int splits, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t total_q = q_latent.shape[0], heads = q_latent.shape[1];
  const int r = static_cast<int>(q_latent.shape[2]), dr = static_cast<int>(q_rope.shape[2]);
  const Plan plan = plan_for(heads, r, dr);
  const int64_t capacity = std::max<int64_t>(page_table.shape[1] * cache.shape[1], 1);
  const int chunk = chunk_keys(capacity, splits, plan.tile);
  splits = static_cast<int>((capacity + chunk - 1) / chunk);  // only the chunks that cover it

  float* part_o = splits > 1 ? workspace.ptr<float>() : nullptr;
  float* part_lse = splits > 1 ? part_o + total_q * heads * splits * r : nullptr;
  MlaArgs a{};
  a.q_latent = q_latent.data;
  a.q_rope = q_rope.data;
  a.cu_seqlens_q = cu_seqlens_q.ptr<int32_t>();
  a.cache = cache.data;
  a.page_table = page_table.ptr<int32_t>();
  a.kv_lens = kv_lens.ptr<int32_t>();
  a.out = out.data;
  a.lse = lse.ndim != 0 ? lse.ptr<float>() : nullptr;
  a.part_o = part_o;
  a.part_lse = part_lse;
  a.ql_stride_t = q_latent.strides[0];
  a.ql_stride_h = q_latent.strides[1];
  a.qr_stride_t = q_rope.strides[0];
  a.qr_stride_h = q_rope.strides[1];
  a.out_stride_t = out.strides[0];
  a.out_stride_h = out.strides[1];
  a.heads = static_cast<int>(heads);
  a.head_groups = static_cast<int>((heads + plan.heads_per_block - 1) / plan.heads_per_block);
  a.r = r;
  a.dr = dr;
  a.width = r + dr;
  a.row_stride = r + dr + kPad;
  a.batch = static_cast<int>(page_table.shape[0]);
  a.max_pages = static_cast<int>(page_table.shape[1]);
  a.page_size = static_cast<int>(cache.shape[1]);
  a.splits = splits;
  a.chunk = chunk;
  a.scale_log2 = softmax_scale * kLog2e;
  a.causal = causal;
  a.q_vec = aligned16(q_latent.data) && aligned16(q_rope.data) && q_latent.strides[0] % 8 == 0 &&
            q_latent.strides[1] % 8 == 0 && q_rope.strides[0] % 8 == 0 &&
            q_rope.strides[1] % 8 == 0;
  a.ws_vec = part_o != nullptr && aligned16(part_o);
  a.out_vec = reinterpret_cast<uintptr_t>(out.data) % 4 == 0 && out.strides[0] % 2 == 0 &&
              out.strides[1] % 2 == 0;

  const int64_t blocks = total_q * splits * a.head_groups;
  dispatch(q_latent.dtype, r, [&](auto tag, auto bound) {
    using T = decltype(tag);
    constexpr int kMaxR = decltype(bound)::value;
    if (plan.wgmma) {
#if BRAID_HAS_SM90A
      if constexpr (kMaxR == wg::kR) {
        wgmma_blocks_per_sm<T>();  // sets the shared-memory attribute on first use
        wg::mla_wgmma_kernel<T><<<static_cast<unsigned>(blocks), wg::kThreads, wg::kSmem, s>>>(a);
        BRAID_CUDA_CHECK_LAUNCH();
      }
#endif
    } else {
      blocks_per_sm<T, kMaxR>(a.width);  // sets the shared-memory attribute on first use
      mla_split_kernel<T, kMaxR>
          <<<static_cast<unsigned>(blocks), kSplitThreads, smem_bytes(a.width), s>>>(a);
      BRAID_CUDA_CHECK_LAUNCH();
    }
    if (splits > 1) {
      const int64_t slices = (r + kCombineCols - 1) / kCombineCols;
      const unsigned grid = static_cast<unsigned>(total_q * heads * slices);
      // A programmatic dependent launch on sm_90: the combine's launch overlaps the split
      // kernel's tail (its blocks wait in griddepcontrol.wait until that kernel has finished).
      launch_dependent_if(device_runs_sm90a() && programmatic_launch_enabled(),
                          mla_combine_kernel<T>, grid, kCombineThreads, 0, s, a);
      BRAID_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace braid::cuda
