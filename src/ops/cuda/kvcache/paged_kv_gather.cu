// paged_kv_gather: each sequence's tokens copied out of their pages into contiguous rows, K and V
// in one kernel. Everything the copy depends on (offsets, lengths, page ids) is read on the
// device, and the grid depends on shapes only, so a call can be captured in a CUDA graph.
//
// A block walks tiles of consecutive output rows (grid-stride). For each tile, one thread per row
// finds the row's sequence (a binary search of cu_seqlens_kv) and its source slot, into shared
// memory; then the whole block copies the tile's rows in units of U (16 bytes where the row size
// and the four base addresses allow it), K and V side by side, each thread with kUnroll units of
// each in flight before it stores. A token's K (or V) is one contiguous run of kv_heads * head_dim
// elements both in the pages and in the output, so a row is a flat run of units.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "core/cuda_check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/launch_util.h"
#include "ops/check.h"

namespace braid::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;       // units of K and of V each thread has in flight
constexpr int kBlocksPerSm = 4;  // resident together (__launch_bounds__ keeps it possible)
constexpr int kTileUnits = kThreads * kUnroll;

struct GatherArgs {
  const char* k_pages;
  const char* v_pages;
  char* k_out;
  char* v_out;
  const int32_t* page_table;
  const int32_t* kv_lens;
  const int32_t* cu_seqlens;
  int64_t num_pages;
  int64_t capacity;   // max_pages * page_size: the tokens a page-table row can name
  int batch;
  int max_pages;
  int page_size;
  int out_rows;       // k_out's rows, at most INT_MAX (the offsets are i32 anyway)
  int units_per_row;  // one token's K (or V) in units of U
  int rows_per_tile;  // <= kThreads: one thread finds each row's source
};

// The source slot (page * page_size + offset in the page) of output row r, or -1 when the row
// names no valid token: past its sequence's kv_len or the table's capacity, or a page id outside
// the pool (the values are trusted on CUDA; this only keeps bad ones from reading out of bounds).
__device__ __forceinline__ int64_t row_source(const GatherArgs& a, int r) {
  // The largest b with cu[b] <= r: upper_bound over cu[0 .. batch], minus one. lo only moves
  // past indices whose offset is <= r, so cu[b] <= r holds even for unsorted offsets.
  int lo = 0, hi = a.batch + 1;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (__ldg(a.cu_seqlens + mid) <= r)
      lo = mid + 1;
    else
      hi = mid;
  }
  const int b = lo - 1;
  if (b < 0 || b >= a.batch) return -1;
  const int64_t t = int64_t{r} - __ldg(a.cu_seqlens + b);  // >= 0
  if (t >= __ldg(a.kv_lens + b) || t >= a.capacity) return -1;
  const int64_t page = __ldg(a.page_table + int64_t{b} * a.max_pages + t / a.page_size);
  if (page < 0 || page >= a.num_pages) return -1;
  return page * a.page_size + t % a.page_size;
}

template <typename U>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) paged_kv_gather_kernel(GatherArgs a) {
  __shared__ int64_t source[kThreads];
  const int rows = min(__ldg(a.cu_seqlens + a.batch), a.out_rows);
  if (rows <= 0) return;
  const int tiles = (rows - 1) / a.rows_per_tile + 1;
  const int tile_units = a.rows_per_tile * a.units_per_row;
  const U* k_src = reinterpret_cast<const U*>(a.k_pages);
  const U* v_src = reinterpret_cast<const U*>(a.v_pages);
  U* k_dst = reinterpret_cast<U*>(a.k_out);
  U* v_dst = reinterpret_cast<U*>(a.v_out);

  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t first_row = int64_t{tile} * a.rows_per_tile;
    if (threadIdx.x < a.rows_per_tile) {
      const int64_t r = first_row + threadIdx.x;
      source[threadIdx.x] = r < rows ? row_source(a, static_cast<int>(r)) : -1;
    }
    __syncthreads();
    for (int base = threadIdx.x; base < tile_units; base += kTileUnits) {
      U k[kUnroll], v[kUnroll];
      int64_t dst[kUnroll];
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        dst[j] = -1;
        const int i = base + j * kThreads;
        if (i < tile_units) {
          const int row = i / a.units_per_row, u = i - row * a.units_per_row;
          const int64_t slot = source[row];
          if (slot >= 0) {
            const int64_t src = slot * a.units_per_row + u;
            k[j] = __ldg(k_src + src);
            v[j] = __ldg(v_src + src);
            dst[j] = (first_row + row) * a.units_per_row + u;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kUnroll; ++j)
        if (dst[j] >= 0) {
          k_dst[dst[j]] = k[j];
          v_dst[dst[j]] = v[j];
        }
    }
    __syncthreads();  // the next tile's sources overwrite this one's
  }
}

}  // namespace

void paged_kv_gather(const ops::PagedKV& kv, const Tensor& cu_seqlens_kv, const Tensor& k_out,
                     const Tensor& v_out, Stream stream) {
  const Tensor& kp = kv.k_pages;
  const int64_t token_bytes =
      kp.shape[2] * kp.shape[3] * static_cast<int64_t>(dtype_size(kp.dtype));
  // The largest unit that divides the row size and every base address (slots and rows are whole
  // multiples of the row size in both layouts, so every unit is then aligned).
  const uint64_t bits = reinterpret_cast<uintptr_t>(kp.data) |
                        reinterpret_cast<uintptr_t>(kv.v_pages.data) |
                        reinterpret_cast<uintptr_t>(k_out.data) |
                        reinterpret_cast<uintptr_t>(v_out.data) | static_cast<uint64_t>(token_bytes);
  const int unit = bits % 16 == 0 ? 16 : bits % 8 == 0 ? 8 : bits % 4 == 0 ? 4 : 2;
  const int64_t units_per_row = token_bytes / unit;
  if (units_per_row > (int64_t{1} << 24))
    check::fail(ErrorKind::unsupported, "paged_kv_gather", "kv.k_pages",
                "a token (kv_heads * head_dim) of at most 2^24 " + std::to_string(unit) +
                    "-byte units on CUDA",
                std::to_string(units_per_row) + " units");

  GatherArgs a{};
  a.k_pages = static_cast<const char*>(kp.data);
  a.v_pages = static_cast<const char*>(kv.v_pages.data);
  a.k_out = static_cast<char*>(k_out.data);
  a.v_out = static_cast<char*>(v_out.data);
  a.page_table = kv.page_table.ptr<const int32_t>();
  a.kv_lens = kv.kv_lens.ptr<const int32_t>();
  a.cu_seqlens = cu_seqlens_kv.ptr<const int32_t>();
  a.num_pages = kp.shape[0];
  a.capacity = kv.page_table.shape[1] * kp.shape[1];
  a.batch = static_cast<int>(kv.page_table.shape[0]);
  a.max_pages = static_cast<int>(kv.page_table.shape[1]);
  a.page_size = static_cast<int>(kp.shape[1]);
  a.out_rows = static_cast<int>(std::min<int64_t>(k_out.shape[0], INT_MAX));
  a.units_per_row = static_cast<int>(units_per_row);

  // Rows per tile: about kTileUnits units (kUnroll of K and of V per thread), at most kThreads
  // rows, and fewer when k_out is short, so that its rows still spread over about twice as many
  // tiles as there are SMs. The true row count (cu_seqlens_kv[batch]) is on the device; k_out's
  // rows bound it.
  const int64_t sms = sm_count();
  int64_t rows_per_tile = std::max<int64_t>(1, kTileUnits / units_per_row);
  rows_per_tile = std::min<int64_t>(rows_per_tile, kThreads);
  rows_per_tile = std::min<int64_t>(rows_per_tile, std::max<int64_t>(1, (a.out_rows + 2 * sms - 1) / (2 * sms)));
  a.rows_per_tile = static_cast<int>(rows_per_tile);
  const int64_t tiles = (a.out_rows + rows_per_tile - 1) / rows_per_tile;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tiles, sms * kBlocksPerSm));

  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (unit) {
    case 16: paged_kv_gather_kernel<int4><<<blocks, kThreads, 0, s>>>(a); break;
    case 8: paged_kv_gather_kernel<int2><<<blocks, kThreads, 0, s>>>(a); break;
    case 4: paged_kv_gather_kernel<int32_t><<<blocks, kThreads, 0, s>>>(a); break;
    default: paged_kv_gather_kernel<int16_t><<<blocks, kThreads, 0, s>>>(a); break;
  }
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
