// Decode attention (one query per sequence) over a paged KV cache: split-KV, as flash-decoding.
//
// A decode step reads the whole KV cache once and does only ~2 FLOPs per byte, so the kernel's
// job is to keep every SM streaming K and V at full bandwidth. The keys of each sequence are cut
// into `splits` chunks; block (split, kv head [, head block], sequence) streams one chunk of one
// KV head through shared memory (cp.async, kStages tiles of keys, two in flight) and scores
// it against all the query heads that share that KV head (GQA), so K and V are read once per
// KV head, not once per query head.
//
// The scores and the weighted sum run on the tensor cores (mma.sync m16n8k16, fp32 accumulate):
// the group's query heads are the 16 rows of the A operand (rows past the group are zero and
// never written out), K is the B operand of S = Q K^T and V that of O = P V. Each of the block's
// warps (four, or eight: Block) takes 16 keys of every tile and keeps its own online softmax
// (running max m, sum l and the fp32 accumulator, in the log2 domain); the warps are merged once
// at the end through shared memory. A block then writes its chunk's normalised output and
// log-sum-exp to the workspace, and a combine kernel merges the chunks of each (sequence, query
// head); it is launched as a programmatic dependent (PDL), so its launch overlaps the split
// kernel. With one split the first kernel writes the output itself and the combine launch is
// skipped.
//
// The grid depends only on shapes (the page table's capacity, not kv_lens), so it is the same on
// every decode step and can be captured in a CUDA graph. The chunk length is computed on the
// device from each sequence's kv_len (chunk_keys): a short sequence is one chunk (up to
// kOneChunkKeys keys, more at large batches: one_chunk_keys), and a longer one is cut into up to
// the grid's number of chunks (of at least kMinChunkSteps steps) whatever the page table's size,
// instead of leaving its keys to a few blocks. Blocks whose chunk starts past their sequence's end
// exit at once, and the combine reads only the chunks that hold keys.
//
// The decode step's variant (kAppend, attention_decode_append) also does the step's
// qk_norm_rope_kv_append itself: each block normalises and rotates its own query heads (from the
// QKV projection's output, which it leaves as it is), and the block whose chunk ends with the new
// key rotates that key, takes it and the new value into its tiles from shared memory, and (one
// block per KV head) appends both to the cache. Three kernels of a layer's decode step become one
// (two past the one-chunk length: the combine kernel). The last block of each unit used to merge a
// few chunks itself (a counter per unit); against the combine kernel that measured slower
// (attention_decode.md, "The last block's merge against the combine kernel"), and it went.
//
// Shared-memory rows are 128 or 256 bytes, so the 16-byte pieces of a row are stored XOR-swizzled
// by (row % 8): the eight rows one ldmatrix reads then fall in different banks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/attention/mma_sync.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/pdl.cuh"
#include "ops/cuda/rope/qk_rope_head.cuh"

namespace braid::cuda {

namespace {

constexpr int kRows = 16;  // query heads per block: the mma's M

// The split kernel's block: W warps, each taking 16 keys of every tile of 16 W keys, through
// kStages tiles of shared memory (two in flight while one is used). Four warps were the only
// block until attention_decode.md's "Eight warps for head_dim 128": a short chunk is one block's
// chain of dependent instructions, and eight warps halve each warp's share of it. An eight-warp
// block holds as many bytes in flight as two four-warp blocks (it takes twice their shared memory,
// 205 KiB at head_dim 128, one block an SM where four-warp blocks fit two).
template <int W>
struct Block {
  static constexpr int kThreads = 32 * W;
  static constexpr int kTileKeys = 16 * W;
};
constexpr int kStages = 3;  // tiles in shared memory: two in flight while one is used

// The chunk rule (chunk_keys; attention_decode.md, "Chunk rule v2" and "One chunk at batch 16"):
// the grid splits a page table into chunks of at least kMinSplitKeys keys, and a sequence of up to
// one_chunk_keys() keys (kOneChunkKeys at small batches) is one chunk whatever the grid (its block
// writes the output; split, it measured slower). Chunks are whole steps of kChunkStep keys (the
// four-warp block's tile), at least kMinChunkSteps of them, whichever block runs them: an
// eight-warp block's last tile of a chunk may be half empty.
constexpr int kMinSplitKeys = 128;
constexpr int kOneChunkKeys = 256;  // one_chunk_keys() at small batches
constexpr int kChunkStep = 64;
constexpr int kMinChunkSteps = 2;
constexpr int kCombineWarps = 4;  // the combine kernel's block
constexpr int kCombineThreads = 32 * kCombineWarps;
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
  int page_shift;     // log2(page_size) where that is a power of two, else -1 (load_tile)
  bool out_vec;       // out's rows and the workspace take 16-byte stores (the output's loop)
  int splits;         // the grid's chunks per sequence (a sequence may use fewer: chunk_keys)
  int one_chunk_keys; // a sequence of up to this many keys is one chunk (one_chunk_keys())
  float scale_log2;   // softmax_scale * log2(e): scores go straight to exp2
};

// The decode step's own token (kAppend): its q, k and v heads as the QKV projection wrote them.
struct AppendArgs {
  qk_rope::Head q, k, v;
  const void* q_norm;  // null: no norm
  const void* k_norm;
  qk_rope::NormLayout q_layout, k_layout;
  float eps;
  const void* positions;
  bool positions_i64;
  const int32_t* slots;  // the cache slot of each sequence's new key (key kv_len - 1)
  void* k_cache;         // the same pages as DecodeArgs' k_pages / v_pages, written here
  void* v_cache;
  bool cache_vec;
};

// Keys per chunk for a sequence of kv_len keys and a grid of `splits` chunks: whole steps, at
// least kMinChunkSteps of them. ceil(kv_len / chunk) <= splits, so the grid always covers it.
// A sequence of up to one_chunk keys (kOneChunkKeys) is one chunk whatever the grid (split, it
// measured slower).
__host__ __device__ __forceinline__ int chunk_keys(int kv_len, int splits, int one_chunk) {
  if (kv_len <= one_chunk) splits = 1;
  const int per_split = (kv_len + splits - 1) / splits;
  const int steps = (per_split + kChunkStep - 1) / kChunkStep;
  return (steps > kMinChunkSteps ? steps : kMinChunkSteps) * kChunkStep;
}

// Shared memory: the query tile, the K and V stages, and the kAppend variant's fp32 heads (the
// block's query heads and the new key) and its new K and V rows. Both variants take the same
// amount, so they have the same occupancy and split count.
template <typename T, int D, int W>
constexpr int smem_bytes() {
  using B = Block<W>;
  return kRows * D * int(sizeof(T)) + 2 * kStages * B::kTileKeys * D * int(sizeof(T)) +
         (kRows + 1) * D * int(sizeof(float)) + 2 * D * int(sizeof(T));
}

// Byte offset of 16-byte piece c of row r in a [rows][D] tile of 2-byte elements.
template <int D>
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  return static_cast<uint32_t>((r * (D / 8) + (c ^ (r & 7))) * 16);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

using mma_sync::cp_async16_if;
using mma_sync::cp_async_commit;
using mma_sync::cp_async_wait;
using mma_sync::ldmatrix_x4;
using mma_sync::ldmatrix_x4_trans;
using mma_sync::mma_16816;

// Where this thread's next key row lives: its page-table index and its row within that page. A
// thread loads rows r0, r0 + kRowStep, ... of every tile, and the tiles follow each other, so
// its keys step by kRowStep from the chunk's first tile to its last: one division when the chunk
// starts, then an addition per row (a division by the run-time page size per row was ~40% of
// the kernel's instructions at short contexts: attention_decode.md).
struct KeyCursor {
  int page, row;
};

__device__ __forceinline__ KeyCursor key_cursor(int key, int page_size) {
  return {key / page_size, key % page_size};
}

template <int D, int W>
constexpr int kRowStep = Block<W>::kThreads / (D / 8);  // rows apart of one thread's 16-byte pieces

// All threads of the block copy keys [key0, key0 + B::kTileKeys) of one KV head into a K and a V
// tile, each thread a 16-byte piece of several rows; keys at or past `end` become zero rows. The
// row of key `skip` (the kAppend variant's new key, not in the cache yet) is left alone:
// put_new_row fills it. `at` is this thread's first row of the tile (key0 + threadIdx.x /
// (D / 8)), and is left at its first row of the next one.
//
// First the pages of all the thread's rows (independent loads of the page table: one round trip
// for the tile), then the copies, each with one 32 x 32 -> 64-bit multiply for its address and no
// branch: at short contexts a chain of one page-table load and ~60 instructions per row was 38%
// of the kernel's instructions (attention_decode.md, "Where a short-context layer's time goes").
// A power-of-two page size (the engine's 16) takes a row's page and its row in it from the key by
// a shift and a mask; other sizes step the cursor, whose page wraps cost a loop and branches per
// row (a quarter of the kernel's instructions at 256 keys, "The tile's rows from a shift").
template <typename T, int D, int W>
__device__ __forceinline__ void load_tile(const DecodeArgs& a, const int32_t* table, int kvh,
                                          int key0, int end, int skip, KeyCursor& at,
                                          uint32_t k_dst, uint32_t v_dst) {
  constexpr int kPieces = D / 8;  // 16-byte pieces per row
  constexpr int kStep = kRowStep<D, W>;
  constexpr int kRowsPerThread = Block<W>::kTileKeys / kStep;
  const int c = threadIdx.x % kPieces;
  const int r0 = static_cast<int>(threadIdx.x) / kPieces;
  uint32_t slot[kRowsPerThread];  // the cache slot of each row (a page of the table, then the row in it)
  if (a.page_shift >= 0) {  // the same for every block: no divergence
    const uint32_t mask = (1u << a.page_shift) - 1u;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const uint32_t key = static_cast<uint32_t>(key0 + r0 + i * kStep);
      const uint32_t page = static_cast<int>(key) < end ? __ldg(table + (key >> a.page_shift)) : 0u;
      slot[i] = (page << a.page_shift) | (key & mask);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int page = key0 + r0 + i * kStep < end ? __ldg(table + at.page) : 0;
      slot[i] = static_cast<uint32_t>(page * a.page_size + at.row);
      at.row += kStep;
      while (at.row >= a.page_size) {  // once at most for pages of kRowStep rows or more
        at.row -= a.page_size;
        ++at.page;
      }
    }
  }
  const T* k_pages = static_cast<const T*>(a.k_pages) + kvh * D + c * 8;
  const T* v_pages = static_cast<const T*>(a.v_pages) + kvh * D + c * 8;
  const uint32_t slot_elems = static_cast<uint32_t>(a.kv_heads * D);
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = r0 + i * kStep;
    const bool valid = key0 + r < end, copy = key0 + r != skip;
    const uint64_t src = valid ? static_cast<uint64_t>(slot[i]) * slot_elems : 0;
    const uint32_t dst = swizzled<D>(r, c);
    cp_async16_if(copy, k_dst + dst, k_pages + src, valid);
    cp_async16_if(copy, v_dst + dst, v_pages + src, valid);
  }
}

// Eight elements of T from src + c as one 16-byte word: one load where the head is 16-byte
// aligned (vec), else eight.
template <typename T>
__device__ __forceinline__ uint4 load8(const T* src, int c, bool vec) {
  if (vec) return *reinterpret_cast<const uint4*>(src + c);
  uint4 w;
  T* e = reinterpret_cast<T*>(&w);
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = src[c + i];
  return w;
}

// kAppend: the block's query heads normalised and rotated into the query tile (rows past the
// group zero), and, when the block's chunk ends with the new key, that key rotated into new_k and
// its value into new_v; the block of head block 0 also appends both to the cache, as
// qk_norm_rope_kv_append does.
//
// All of the block's threads first load every head it needs (its query heads, the new key and
// value, the norm weights) at once, 16 bytes each, into shared memory: one round trip to memory
// instead of one per head in turn. Then warp w normalises and rotates heads w, w + 4, ... there
// (the key is one more head) with qk_rope's steps, so the bits are those of the separate ops.
template <typename T, int D, int W>
__device__ __forceinline__ void rotate_into_tiles(const AppendArgs& ap, const ops::RopeTable& table,
                                                  int b, int kv_heads, int kvh, int hb, int head0,
                                                  int rows, bool holds_new_key, T* q_tile,
                                                  float* heads_f32, T* new_k, T* new_v) {
  constexpr int kPieces = D / 8;                // 16-byte pieces of a head
  constexpr int kMaxPieces = (kRows + 2) * kPieces;  // the query heads, the new key and value
  constexpr int kThreads = Block<W>::kThreads;
  constexpr int kLoads = (kMaxPieces + kThreads - 1) / kThreads;
  __shared__ float cos_s[D / 2], sin_s[D / 2];  // table.half <= D / 2 (rope_table checks it)
  __shared__ __align__(16) T norm_s[2][D];      // the q and k norm weights

  // Piece p of the staged heads: heads 0 .. rows - 1 are the query heads, rows the new key,
  // rows + 1 its value.
  const int staged = rows + (holds_new_key ? 2 : 0);
  auto staged_head = [&](int i, bool& vec) -> const T* {
    const qk_rope::Head& h = i < rows ? ap.q : (i == rows ? ap.k : ap.v);
    vec = h.vec;
    return static_cast<const T*>(h.data) + b * h.token_stride +
           static_cast<int64_t>(i < rows ? head0 + i : kvh) * h.head_stride;
  };
  uint4 raw[kLoads];
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int p = static_cast<int>(threadIdx.x) + j * kThreads;
    if (p < staged * kPieces) {
      bool vec;
      const T* src = staged_head(p / kPieces, vec);
      raw[j] = load8<T>(src, (p % kPieces) * 8, vec);
    }
  }
  const bool norm = ap.q_norm != nullptr;
  uint4 norm_raw = make_uint4(0, 0, 0, 0);
  const int piece = static_cast<int>(threadIdx.x);  // threads < 2 kPieces: a piece of the weights
  if (norm && piece < 2 * kPieces)
    norm_raw = load8<T>(static_cast<const T*>(piece < kPieces ? ap.q_norm : ap.k_norm),
                        (piece % kPieces) * 8, false);

  const int64_t pos = ap.positions_i64 ? static_cast<const int64_t*>(ap.positions)[b]
                                       : static_cast<const int32_t*>(ap.positions)[b];
  qk_rope::cos_sin(table, static_cast<float>(pos), cos_s, sin_s);
  unsigned char* q_bytes = reinterpret_cast<unsigned char*>(q_tile);
  for (int p = threadIdx.x; p < (kRows - rows) * kPieces; p += kThreads) {  // 16 bytes at a time
    const int r = rows + p / kPieces;
    *reinterpret_cast<uint4*>(q_bytes + swizzled<D>(r, p % kPieces)) = make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int p = static_cast<int>(threadIdx.x) + j * kThreads;
    if (p >= staged * kPieces) continue;
    const int i = p / kPieces, c = (p % kPieces) * 8;
    if (i == rows + 1) {
      *reinterpret_cast<uint4*>(new_v + c) = raw[j];
    } else {
      const T* e = reinterpret_cast<const T*>(&raw[j]);
      float4* dst = reinterpret_cast<float4*>(heads_f32 + i * D + c);
      dst[0] = make_float4(to_float(e[0]), to_float(e[1]), to_float(e[2]), to_float(e[3]));
      dst[1] = make_float4(to_float(e[4]), to_float(e[5]), to_float(e[6]), to_float(e[7]));
    }
  }
  if (norm && piece < 2 * kPieces)
    *reinterpret_cast<uint4*>(&norm_s[piece / kPieces][(piece % kPieces) * 8]) = norm_raw;
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int heads = rows + (holds_new_key ? 1 : 0);
  for (int i = warp; i < heads; i += W) {
    const bool is_q = i < rows;
    float* buf = heads_f32 + i * D;
    if (norm) qk_rope::norm_head<T>(buf, norm_s[is_q ? 0 : 1], D, ap.eps, is_q ? ap.q_layout : ap.k_layout);
    qk_rope::rotate_head<T>(buf, table.half, table.interleaved, cos_s, sin_s);
    // Eight rounded elements a lane, as one 16-byte store (the same roundings as from_float's).
    auto piece_of = [&](int c) {
      const float4 lo = *reinterpret_cast<const float4*>(buf + c * 8);
      const float4 hi = *reinterpret_cast<const float4*>(buf + c * 8 + 4);
      return make_uint4(pack2<T>(lo.x, lo.y), pack2<T>(lo.z, lo.w), pack2<T>(hi.x, hi.y),
                        pack2<T>(hi.z, hi.w));
    };
    if (is_q) {
      for (int c = lane; c < kPieces; c += 32)
        *reinterpret_cast<uint4*>(q_bytes + swizzled<D>(i, c)) = piece_of(c);
    } else {
      for (int c = lane; c < kPieces; c += 32) reinterpret_cast<uint4*>(new_k)[c] = piece_of(c);
      if (hb == 0) {  // kv_append's layout: [slot, kv_heads, head_dim] within the pages
        const int64_t dst = (static_cast<int64_t>(ap.slots[b]) * kv_heads + kvh) * D;
        qk_rope::store_head<T>(static_cast<T*>(ap.k_cache) + dst, buf, D, ap.cache_vec);
        qk_rope::copy_head<T>(static_cast<T*>(ap.v_cache) + dst, new_v, D, ap.cache_vec);
      }
    }
  }
}

// The new key's row of a K/V stage, from new_k / new_v (the row load_tile skipped). Visible to
// the other threads after the loop's next __syncthreads, as the tile's cp.async rows are.
template <typename T, int D>
__device__ __forceinline__ void put_new_row(unsigned char* k_stage, unsigned char* v_stage, int row,
                                            const T* new_k, const T* new_v) {
  const int c = threadIdx.x;
  if (c < D / 8) {
    *reinterpret_cast<uint4*>(k_stage + swizzled<D>(row, c)) = reinterpret_cast<const uint4*>(new_k)[c];
    *reinterpret_cast<uint4*>(v_stage + swizzled<D>(row, c)) = reinterpret_cast<const uint4*>(new_v)[c];
  }
}

template <typename T, int D, bool kAppend, int W>
__global__ void __launch_bounds__(Block<W>::kThreads)
    decode_split_kernel(const DecodeArgs a, const AppendArgs ap, const ops::RopeTable rope) {
  constexpr int kWarps = W, kThreads = Block<W>::kThreads;
  constexpr int kTileKeys = Block<W>::kTileKeys;
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kStageBytes = kTileKeys * D * int(sizeof(T));
  constexpr int kRedStride = D + 8;  // floats; padding keeps the merge's float2 stores conflict-free
  constexpr int kQBytes = kRows * D * int(sizeof(T));
  T* q_tile = reinterpret_cast<T*>(smem);
  unsigned char* k_stages = smem + kQBytes;
  unsigned char* v_stages = k_stages + kStages * kStageBytes;
  float* heads_f32 = reinterpret_cast<float*>(v_stages + kStages * kStageBytes);  // kAppend
  T* new_k = reinterpret_cast<T*>(heads_f32 + (kRows + 1) * D);
  T* new_v = new_k + D;
  const uint32_t q_base = smem_u32(smem);
  const uint32_t k_base = smem_u32(k_stages);
  const uint32_t v_base = smem_u32(v_stages);

  // Let the next kernel's blocks be scheduled now (the combine, or the output projection, which
  // wait for this grid's results): its launch then overlaps this kernel instead of following it.
  // Then wait for q and the new key (pdl.cuh): this kernel may itself have started before the one
  // that wrote them finished. The kAppend variant waits later, after its first K/V loads: the
  // cache's older keys, kv_lens and the page table were all written before the kernel before it
  // started (in a decode step, the QKV projection, which writes none of them), so their round
  // trips overlap that kernel's tail; only q, k and v are its output.
  pdl::launch_dependents();
  if constexpr (!kAppend) pdl::wait();
  const int split = blockIdx.x, b = blockIdx.z;
  const int kvh = blockIdx.y / a.head_blocks, hb = blockIdx.y % a.head_blocks;
  const int kv_len = a.kv_lens[b];
  const int chunk = chunk_keys(kv_len, a.splits, a.one_chunk_keys);
  const int used = (kv_len + chunk - 1) / chunk;  // the chunks that hold keys
  const int begin = split * chunk;
  if (begin >= kv_len) return;  // an empty chunk: nothing reads it
  const int end = min(kv_len, begin + chunk);
  const int tiles = (end - begin + kTileKeys - 1) / kTileKeys;
  const int head0 = kvh * a.group + hb * kRows;  // the block's first query head
  const int rows = min(kRows, a.group - hb * kRows);
  const int32_t* table = a.page_table + static_cast<int64_t>(b) * a.max_pages;
  // kAppend: the new key (the last of the sequence) is not in the cache yet; the block whose
  // chunk ends with it puts it into its tile from shared memory.
  const bool holds_new_key = kAppend && end == kv_len;
  const int new_key = holds_new_key ? kv_len - 1 : -1;
  const int new_tile = (new_key - begin) / kTileKeys, new_row = (new_key - begin) % kTileKeys;

  // Start streaming K/V first; the query goes in while those loads are in flight.
  KeyCursor at = a.page_shift >= 0 ? KeyCursor{0, 0}  // load_tile needs no cursor then
                                    : key_cursor(begin + static_cast<int>(threadIdx.x) / (D / 8), a.page_size);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles)
      load_tile<T, D, W>(a, table, kvh, begin + s * kTileKeys, end, new_key, at,
                         k_base + s * kStageBytes, v_base + s * kStageBytes);
    cp_async_commit();
  }
  if constexpr (kAppend) {
    pdl::wait();
    rotate_into_tiles<T, D, W>(ap, rope, b, a.kv_heads, kvh, hb, head0, rows, holds_new_key,
                               q_tile, heads_f32, new_k, new_v);
    __syncthreads();  // new_k / new_v are complete
    if (holds_new_key && new_tile < kStages - 1)
      put_new_row<T, D>(k_stages + new_tile * kStageBytes, v_stages + new_tile * kStageBytes,
                        new_row, new_k, new_v);
  } else {
    const T* q = static_cast<const T*>(a.q) + b * a.q_stride_b + head0 * a.q_stride_h;
    for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
      const int r = i / D, d = i % D;
      q_tile[swizzled<D>(r, d / 8) / 2 + d % 8] = r < rows ? q[r * a.q_stride_h + d] : from_float<T>(0.0f);
    }
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
    if (next < tiles) {
      load_tile<T, D, W>(a, table, kvh, begin + next * kTileKeys, end, new_key, at,
                         k_base + (next % kStages) * kStageBytes,
                         v_base + (next % kStages) * kStageBytes);
      if (holds_new_key && next == new_tile)
        put_new_row<T, D>(k_stages + (next % kStages) * kStageBytes,
                          v_stages + (next % kStages) * kStageBytes, new_row, new_k, new_v);
    }
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

  const bool direct = used == 1;  // the only chunk: write the output itself
  // Eight elements a thread: one pass of the block over the heads, and 16-byte stores (two for
  // the fp32 partials) where out's rows and the workspace are aligned (out_vec), else an element
  // at a time (an output view whose rows are not); the same sums and roundings either way.
  constexpr int kPieces = D / 8;
  for (int i = threadIdx.x; i < rows * kPieces; i += kThreads) {
    const int r = i / kPieces, d = i % kPieces * 8;
    float o[8] = {};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float4* src = reinterpret_cast<const float4*>(red_o + (w * kRows + r) * kRedStride + d);
      const float4 lo = src[0], hi = src[1];
      o[0] += lo.x, o[1] += lo.y, o[2] += lo.z, o[3] += lo.w;
      o[4] += hi.x, o[5] += hi.y, o[6] += hi.z, o[7] += hi.w;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] /= row_l[r];
    const int64_t h = head0 + r;
    if (direct) {
      T* dst = static_cast<T*>(a.out) + b * a.out_stride_b + h * a.out_stride_h + d;
      if (a.out_vec) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(pack2<T>(o[0], o[1]), pack2<T>(o[2], o[3]),
                                                    pack2<T>(o[4], o[5]), pack2<T>(o[6], o[7]));
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) dst[j] = from_float<T>(o[j]);
      }
    } else {
      float* dst = a.part_o + ((b * a.q_heads + h) * a.splits + split) * D + d;
      if (a.out_vec) {
        reinterpret_cast<float4*>(dst)[0] = make_float4(o[0], o[1], o[2], o[3]);
        reinterpret_cast<float4*>(dst)[1] = make_float4(o[4], o[5], o[6], o[7]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) dst[j] = o[j];
      }
    }
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
// kernel is still running, and wait here until its results are complete and visible. It lets the
// next kernel be scheduled first: that kernel waits for this one's results in any case, and its
// early weight loads (gemv_chain streams a whole layer's) then overlap the attention.
template <typename T, int D>
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const DecodeArgs a) {
  constexpr int E = D / 32;
  __shared__ float scratch[32];
  __shared__ float partial[kCombineWarps][D];
  pdl::launch_dependents();
  pdl::wait();
  const int64_t item = blockIdx.x;  // b * q_heads + h
  const int64_t b = item / a.q_heads, h = item % a.q_heads;
  const int kv_len = a.kv_lens[b];
  const int chunk = chunk_keys(kv_len, a.splits, a.one_chunk_keys);
  const int used = (kv_len + chunk - 1) / chunk;
  if (used == 1) return;  // the split kernel wrote the output itself
  const float* lse_s = a.part_lse + item * a.splits;

  float mx = -INFINITY;
  for (int s = threadIdx.x; s < used; s += kCombineThreads) mx = fmaxf(mx, lse_s[s]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int s = threadIdx.x; s < used; s += kCombineThreads) sum += expf(lse_s[s] - mx);
  sum = block_sum(sum, scratch);
  const float inv_sum = 1.0f / sum;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* o_s = a.part_o + item * a.splits * D + lane * E;
  float acc[E] = {};
  constexpr int kBatch = 8;  // chunks per warp whose loads are issued together
  for (int s0 = warp; s0 < used; s0 += kCombineWarps * kBatch) {
    float lse_u[kBatch], o_u[kBatch][E];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int s = s0 + u * kCombineWarps;
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
  for (int d = threadIdx.x; d < D; d += kCombineThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) o += partial[w][d];
    out[d] = from_float<T>(o);
  }
  if (a.lse != nullptr && threadIdx.x == 0) a.lse[item] = mx + logf(sum);
}

// cu_seqlens_q = {0, 1, ..., n - 1} for the fallback through attention()'s kernel.
__global__ void iota_kernel(int32_t* out, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = i;
}

// The split kernels' attribute (more than 48 KiB of shared memory) is set once per device, and
// their occupancy read there too (the lower of the two variants', which take the same memory).
template <typename T, int D, int W>
int blocks_per_sm() {
  static int cached[kMaxDevices] = {};
  int dev = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= kMaxDevices) dev = kMaxDevices - 1;
  if (cached[dev] == 0) {
    int fewest = INT32_MAX;
    constexpr int smem = smem_bytes<T, D, W>();
    for (auto kernel : {decode_split_kernel<T, D, false, W>, decode_split_kernel<T, D, true, W>}) {
      BRAID_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      prefer_max_shared_if_asked(reinterpret_cast<const void*>(kernel));
      int n = 0;
      BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel,
                                                                     Block<W>::kThreads, smem));
      fewest = std::min(fewest, n);
    }
    prefer_max_shared_if_asked(reinterpret_cast<const void*>(decode_combine_kernel<T, D>));
    cached[dev] = std::max(fewest, 1);
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

// The split kernel's blocks of one chunk each: (sequence, KV head, block of query heads) units.
int64_t units_of(const Tensor& q, const ops::PagedKV& kv) {
  return q.shape[0] * kv.k_pages.shape[2] * head_blocks(q, kv);
}

template <int D>
using HeadDim = std::integral_constant<int, D>;
template <int W>
using Warps = std::integral_constant<int, W>;

// The split kernel's warps for these shapes (a function of shapes only, so that a graph's replays
// keep it; any split count works with either block): eight at head_dim 128 where the batch's
// (sequence, KV head) units number fewer than the SMs, four elsewhere (attention_decode.md, "Eight
// warps for head_dim 128"); BRAID_DECODE_WARPS=4 or 8 sets it for every shape (to compare the
// two in one process).
int split_warps(const Tensor& q, const ops::PagedKV& kv) {
  static const int forced = [] {
    const char* v = std::getenv("BRAID_DECODE_WARPS");
    return v == nullptr ? 0 : std::string(v) == "8" ? 8 : std::string(v) == "4" ? 4 : 0;
  }();
  if (forced != 0) return forced;
  return q.shape[2] == 128 && units_of(q, kv) < sm_count() ? 8 : 4;
}

// Calls f(T{}, HeadDim<D>{}, Warps<W>{}) for the split kernels' instantiations (bf16/f16 x 64/128
// x 4/8 warps).
template <typename F>
void dispatch_split(const Tensor& q, const ops::PagedKV& kv, F&& f) {
  const bool bf16 = q.dtype == DType::bf16, eight = split_warps(q, kv) == 8;
  auto with_warps = [&](auto tag, auto dim) {
    if (eight) f(tag, dim, Warps<8>{});
    else f(tag, dim, Warps<4>{});
  };
  if (q.shape[2] == 64) {
    if (bf16) with_warps(__nv_bfloat16{}, HeadDim<64>{});
    else with_warps(__half{}, HeadDim<64>{});
  } else {
    if (bf16) with_warps(__nv_bfloat16{}, HeadDim<128>{});
    else with_warps(__half{}, HeadDim<128>{});
  }
}

int capacity_of(const ops::PagedKV& kv) {  // <= INT32_MAX where the split kernels run
  return static_cast<int>(std::max<int64_t>(kv.page_table.shape[1] * kv.k_pages.shape[1], 1));
}

// Keys up to which a sequence is one chunk (a function of shapes only, as the grid): kOneChunkKeys,
// times (4 x the batch's units / SMs) where that is more than 1: when the units alone come near
// the SMs, a short sequence split into chunks gains little parallelism and pays the combine
// (attention_decode.md, "One chunk at batch 16"). BRAID_DECODE_ONE_CHUNK_KEYS (whole 64-key
// steps) sets it for every shape, to compare thresholds in one process.
int one_chunk_keys(const Tensor& q, const ops::PagedKV& kv) {
  static const int forced = [] {
    const char* v = std::getenv("BRAID_DECODE_ONE_CHUNK_KEYS");
    const int n = v == nullptr ? 0 : std::atoi(v);
    return n >= kChunkStep && n % kChunkStep == 0 ? n : 0;
  }();
  if (forced != 0) return forced;
  return kOneChunkKeys *
         static_cast<int>(std::clamp<int64_t>(4 * units_of(q, kv) / sm_count(), 1, 8));
}

// The chunks a full page table uses when `splits` are asked for (rounding the chunks to tiles may
// leave fewer): the grid's first dimension.
int grid_splits(const Tensor& q, const ops::PagedKV& kv, int splits) {
  const int capacity = capacity_of(kv);
  const int chunk = chunk_keys(capacity, std::max(splits, 1), one_chunk_keys(q, kv));
  return (capacity + chunk - 1) / chunk;
}

// log2(page_size) for a power of two (load_tile's shift and mask), else -1.
int page_shift_of(int64_t page_size) {
  const auto n = static_cast<uint64_t>(page_size);
  return std::has_single_bit(n) ? std::countr_zero(n) : -1;
}

DecodeArgs decode_args(const Tensor& q, const ops::PagedKV& kv, float softmax_scale,
                       const Tensor& out, const Tensor& lse, const Tensor& workspace, int splits) {
  const int64_t batch = q.shape[0], head_dim = q.shape[2];
  const int q_heads = static_cast<int>(q.shape[1]), kv_heads = static_cast<int>(kv.k_pages.shape[2]);
  float* part_o = workspace.ptr<float>();
  return {q.data, kv.k_pages.data, kv.v_pages.data, kv.page_table.ptr<int32_t>(),
          kv.kv_lens.ptr<int32_t>(), out.data, lse.ndim != 0 ? lse.ptr<float>() : nullptr,
          part_o, part_o + batch * q_heads * splits * head_dim,
          q.strides[0], q.strides[1], out.strides[0], out.strides[1],
          q_heads, kv_heads, q_heads / kv_heads, head_blocks(q, kv),
          static_cast<int>(kv.page_table.shape[1]), static_cast<int>(kv.k_pages.shape[1]),
          page_shift_of(kv.k_pages.shape[1]),
          aligned16(out.data) && out.strides[0] % 8 == 0 && out.strides[1] % 8 == 0 &&
              aligned16(part_o),
          splits, one_chunk_keys(q, kv), softmax_scale * kLog2e};
}

dim3 split_grid(const DecodeArgs& a, int64_t batch) {
  return dim3(static_cast<unsigned>(a.splits), static_cast<unsigned>(a.kv_heads * a.head_blocks),
              static_cast<unsigned>(batch));
}

}  // namespace

int attention_decode_splits(const Tensor& q, const ops::PagedKV& kv, int max_splits) {
  if (!use_split_kernels(q, kv)) return 1;
  int resident = 0, dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  dispatch_split(q, kv, [&](auto tag, auto dim, auto warps) {
    resident = sms * blocks_per_sm<decltype(tag), decltype(dim)::value, decltype(warps)::value>();
  });
  // Fill the GPU's resident block slots once: every SM streams from the start and no second,
  // partial wave is left at the end. A batch that fills them alone needs no split.
  const int64_t capacity = capacity_of(kv);
  int64_t splits = std::max<int64_t>(1, resident / units_of(q, kv));
  splits = std::min<int64_t>(splits, (capacity + kMinSplitKeys - 1) / kMinSplitKeys);
  splits = std::clamp<int64_t>(splits, 1, std::max(max_splits, 1));
  return grid_splits(q, kv, static_cast<int>(splits));
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
  const DecodeArgs a =
      decode_args(q, kv, softmax_scale, out, lse, workspace, grid_splits(q, kv, splits));
  dispatch_split(q, kv, [&](auto tag, auto dim, auto warps) {
    using T = decltype(tag);
    constexpr int D = decltype(dim)::value, W = decltype(warps)::value;
    blocks_per_sm<T, D, W>();  // sets the shared-memory attribute on first use
    launch_programmatic(decode_split_kernel<T, D, false, W>, split_grid(a, batch),
                        Block<W>::kThreads, smem_bytes<T, D, W>(), s, a, AppendArgs{},
                        ops::RopeTable{});
    BRAID_CUDA_CHECK_LAUNCH();
    if (a.splits > 1) {
      launch_programmatic(decode_combine_kernel<T, D>,
                          static_cast<unsigned>(batch * a.q_heads), kCombineThreads, 0, s, a);
      BRAID_CUDA_CHECK_LAUNCH();
    }
  });
}

bool attention_decode_append_supported(const Tensor& q, const ops::PagedKV& kv) {
  return use_split_kernels(q, kv);
}

void attention_decode_append(const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& q_norm, const Tensor& k_norm, float eps,
                             const Tensor& positions, const ops::RopeTable& table,
                             const Tensor& slots, const ops::PagedKV& kv, float softmax_scale,
                             const Tensor& out, const Tensor& lse, const Tensor& workspace,
                             [[maybe_unused]] const Tensor& counters, int splits, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  const int64_t batch = q.shape[0];
  const bool norm = q_norm.data != nullptr;
  const int64_t elem = static_cast<int64_t>(dtype_size(q.dtype));
  const AppendArgs ap{qk_rope::head_of(q),
                      qk_rope::head_of(k),
                      qk_rope::head_of(v),
                      norm ? q_norm.data : nullptr,
                      norm ? k_norm.data : nullptr,
                      norm ? qk_rope::norm_layout(q, q_norm) : qk_rope::NormLayout{1, 32},
                      norm ? qk_rope::norm_layout(k, k_norm) : qk_rope::NormLayout{1, 32},
                      eps,
                      positions.data,
                      positions.dtype == DType::i64,
                      slots.ptr<const int32_t>(),
                      kv.k_pages.data,
                      kv.v_pages.data,
                      (q.size(2) * elem) % 16 == 0};  // the pages are aligned (use_split_kernels)
  splits = grid_splits(q, kv, splits);
  dispatch_split(q, kv, [&](auto tag, auto dim, auto warps) {
    using T = decltype(tag);
    constexpr int D = decltype(dim)::value, W = decltype(warps)::value;
    const DecodeArgs a = decode_args(q, kv, softmax_scale, out, lse, workspace, splits);
    blocks_per_sm<T, D, W>();  // sets the shared-memory attribute on first use
    launch_programmatic(decode_split_kernel<T, D, true, W>, split_grid(a, batch),
                        Block<W>::kThreads, smem_bytes<T, D, W>(), s, a, ap, table);
    BRAID_CUDA_CHECK_LAUNCH();
    if (a.splits > 1) {
      launch_programmatic(decode_combine_kernel<T, D>,
                          static_cast<unsigned>(batch * a.q_heads), kCombineThreads, 0, s, a);
      BRAID_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace braid::cuda
