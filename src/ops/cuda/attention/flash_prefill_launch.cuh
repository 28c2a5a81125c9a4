// The launcher behind flash::launch<D>, included by the one .cu per head_dim that instantiates it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/check.h"
#include "ops/cuda/attention/flash_prefill.cuh"
#include "ops/cuda/attention/flash_prefill.h"
#include "ops/cuda/attention/flash_prefill_sm90.cuh"
#include "ops/cuda/attention/flash_prefill_ws.cuh"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/tma_map.h"

namespace braid::cuda::flash {

// The grid is (query tiles, q_heads, batch): y and z stop at 65535.
inline void check_grid(const Params& p, int64_t batch, int64_t m_blocks) {
  if (batch > 65535 || p.q_heads > 65535 || m_blocks > INT32_MAX)
    check::fail(ErrorKind::unsupported, "attention_prefill", "q",
                "at most 65535 sequences and 65535 heads",
                std::to_string(batch) + " sequences, " + std::to_string(p.q_heads) + " heads");
}

// One launch of `kernel` over (query tiles of block_m rows, heads, sequences).
inline void launch_kernel(void (*kernel)(Params), int smem, int threads, int block_m,
                          const Params& p, int64_t batch, int64_t max_q, cudaStream_t stream) {
  const int64_t m_blocks = (max_q + block_m - 1) / block_m;
  check_grid(p, batch, m_blocks);
  const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(p.q_heads),
                  static_cast<unsigned>(batch));
  kernel<<<grid, threads, smem, stream>>>(p);
  BRAID_CUDA_CHECK_LAUNCH();
}

template <typename T, int D, bool kPaged>
void launch_mma(const Params& p, int64_t batch, int64_t max_q, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D>();
  opt_in(flash_prefill_kernel<T, D, kPaged>, kSmem);
  launch_kernel(flash_prefill_kernel<T, D, kPaged>, kSmem, kWarps * 32, 16 * kWarps, p, batch,
                max_q, stream);
}

template <typename T, int D, bool kPaged>
void launch_sm90(const Params& p, int64_t batch, int64_t max_q, cudaStream_t stream) {
  constexpr int kSmem = sm90::smem_bytes<D>();
  opt_in(sm90::flash_prefill_sm90_kernel<T, D, kPaged>, kSmem);
  launch_kernel(sm90::flash_prefill_sm90_kernel<T, D, kPaged>, kSmem, 128 * sm90::kWG,
                64 * sm90::kWG, p, batch, max_q, stream);
}

inline bool persistent_flash() {
  static const bool use = [] {
    const char* e = std::getenv("BRAID_FLASH_PERSISTENT");
    return !(e && std::string(e) == "0");
  }();
  return use;
}

// The warp-specialised TMA kernel, when TMA can address q, k and v (false: take another kernel).
template <typename T, int D>
bool launch_ws(const Params& p, int64_t batch, int64_t max_q, cudaStream_t stream) {
  using S = ws::Shape<D>;
  constexpr DType kType = std::is_same_v<T, __nv_bfloat16> ? DType::bf16 : DType::f16;
  ws::TmaParams tp{};
  tp.p = p;
  if (!make_tma_map_rows_heads(&tp.q, kType, p.q, p.q_rows, p.q_heads, D, p.q_row_stride, S::kBlockM) ||
      !make_tma_map_rows_heads(&tp.k, kType, p.k, p.kv_rows, p.kv_heads, D, p.k_row_stride, S::kTileN) ||
      !make_tma_map_rows_heads(&tp.v, kType, p.v, p.kv_rows, p.kv_heads, D, p.v_row_stride, S::kTileN))
    return false;
  opt_in(ws::flash_prefill_ws_kernel<T, D>, S::kSmemBytes);
  const int64_t m_tiles = (max_q + S::kBlockM - 1) / S::kBlockM;
  const int64_t items = m_tiles * p.q_heads * batch;
  if (items > INT32_MAX)
    check::fail(ErrorKind::unsupported, "attention_prefill", "q", "at most 2^31 - 1 work items",
                std::to_string(items) + " (query tiles x heads x sequences)");
  if (items == 0) return true;
  tp.m_tiles = static_cast<int>(m_tiles);
  tp.items = static_cast<int>(items);
  // Persistent: one block per SM walks the items (its next item's loads overlap its last one's
  // stores); BRAID_FLASH_PERSISTENT=0 launches one block per item instead.
  const int64_t blocks = persistent_flash() ? std::min<int64_t>(items, sm_count()) : items;
  const dim3 grid(static_cast<unsigned>(blocks));
  ws::flash_prefill_ws_kernel<T, D><<<grid, S::kThreads, S::kSmemBytes, stream>>>(tp);
  BRAID_CUDA_CHECK_LAUNCH();
  return true;
}

// BRAID_FLASH_WS=0 keeps contiguous K/V on the cp.async wgmma kernel (for comparison).
inline bool use_ws() {
  static const bool use = [] {
    const char* e = std::getenv("BRAID_FLASH_WS");
    return !(e && std::string(e) == "0");
  }();
  return use;
}

// The wgmma kernel on compute capability 9.0 (the build targets sm_90a), unless
// BRAID_FLASH_SM90=0 asks for the mma.sync kernel (the fallback elsewhere; kept for comparison).
inline bool use_sm90() {
  static const bool use = [] {
    const char* e = std::getenv("BRAID_FLASH_SM90");
    return !(e && std::string(e) == "0") && device_runs_sm90a();
  }();
  return use;
}

// Which kernel: on compute capability 9.0 the warp-specialised TMA kernel for contiguous K/V that
// TMA can address, else the cp.async wgmma kernel (paged K/V; its shape per head_dim: 2
// warpgroups, key tiles of 128 at D = 128 and 64 at D = 64); elsewhere the mma.sync kernel.
template <int D>
void launch_any(const Params& p, DType dtype, bool paged, int64_t batch, int64_t max_q,
                cudaStream_t stream) {
  const bool sm90 = use_sm90();
  auto go = [&](auto tag, auto paged_tag) {
    using T = decltype(tag);
    constexpr bool kPaged = decltype(paged_tag)::value;
    if (sm90 && !kPaged && use_ws() && launch_ws<T, D>(p, batch, max_q, stream)) return;
    if (sm90)
      launch_sm90<T, D, kPaged>(p, batch, max_q, stream);
    else
      launch_mma<T, D, kPaged>(p, batch, max_q, stream);
  };
  if (dtype == DType::bf16) {
    if (paged) return go(__nv_bfloat16{}, std::true_type{});
    return go(__nv_bfloat16{}, std::false_type{});
  }
  if (paged) return go(__half{}, std::true_type{});
  go(__half{}, std::false_type{});
}

}  // namespace braid::cuda::flash
