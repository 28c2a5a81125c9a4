// The launcher behind flash::launch<D>, included by the one .cu per head_dim that instantiates it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/cuda_check.h"
#include "ops/check.h"
#include "ops/cuda/attention/flash_prefill.cuh"
#include "ops/cuda/attention/flash_prefill.h"
#include "ops/cuda/attention/flash_prefill_sm90.cuh"

namespace braid::cuda::flash {

// The grid is (query tiles, q_heads, batch): y and z stop at 65535.
inline void check_grid(const Params& p, int64_t batch, int64_t m_blocks) {
  if (batch > 65535 || p.q_heads > 65535 || m_blocks > INT32_MAX)
    check::fail(ErrorKind::unsupported, "attention_prefill", "q",
                "at most 65535 sequences and 65535 heads",
                std::to_string(batch) + " sequences, " + std::to_string(p.q_heads) + " heads");
}

template <typename T, int D, bool kPaged, int kWarps>
void launch_typed(const Params& p, int64_t batch, int64_t m_blocks, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D, kWarps>();
  // Past 48 KB of dynamic shared memory a kernel must opt in, once.
  static const bool opted_in = [] {
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<T, D, kPaged, kWarps>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(p.q_heads),
                  static_cast<unsigned>(batch));
  flash_prefill_kernel<T, D, kPaged, kWarps><<<grid, kWarps * 32, kSmem, stream>>>(p);
  BRAID_CUDA_CHECK_LAUNCH();
}

// Warps per block (16 query rows each): 8, unless BRAID_FLASH_WARPS=4. On the H100 8 warps (128
// query rows sharing each K/V tile) ran the ANCHORS shapes 1.1-1.4x faster than 4
// (docs/perf/attention.md); both stay built for comparison.
inline int flash_warps() {
  static const int warps = [] {
    const char* e = std::getenv("BRAID_FLASH_WARPS");
    return e && std::string(e) == "4" ? 4 : 8;
  }();
  return warps;
}

template <int D, int kWarps>
void launch_warps(const Params& p, DType dtype, bool paged, int64_t batch, int64_t max_q,
                  cudaStream_t stream) {
  const int64_t m_blocks = (max_q + 16 * kWarps - 1) / (16 * kWarps);
  check_grid(p, batch, m_blocks);
  if (dtype == DType::bf16) {
    if (paged) return launch_typed<__nv_bfloat16, D, true, kWarps>(p, batch, m_blocks, stream);
    return launch_typed<__nv_bfloat16, D, false, kWarps>(p, batch, m_blocks, stream);
  }
  if (paged) return launch_typed<__half, D, true, kWarps>(p, batch, m_blocks, stream);
  launch_typed<__half, D, false, kWarps>(p, batch, m_blocks, stream);
}

template <typename T, int D, bool kPaged, int kWG, int kTileN, bool kOverlap = false>
void launch_sm90_typed(const Params& p, int64_t batch, int64_t max_q, cudaStream_t stream) {
  constexpr int kSmem = sm90::smem_bytes<D, kWG, kTileN, kOverlap>();
  constexpr int kBlockM = 64 * kWG;
  const int64_t m_blocks = (max_q + kBlockM - 1) / kBlockM;
  check_grid(p, batch, m_blocks);
  static const bool opted_in = [] {
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(sm90::flash_prefill_sm90_kernel<T, D, kPaged, kWG, kTileN, kOverlap>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(p.q_heads),
                  static_cast<unsigned>(batch));
  sm90::flash_prefill_sm90_kernel<T, D, kPaged, kWG, kTileN, kOverlap>
      <<<grid, 128 * kWG, kSmem, stream>>>(p);
  BRAID_CUDA_CHECK_LAUNCH();
}

// Tuning variants of the wgmma kernel (warpgroups x key tile), bf16 with contiguous K/V only:
// BRAID_FLASH_SM90_VARIANT=1x64 | 2x64 | 1x128 | 2x128 | 2x64o (overlapped); anything else takes
// the default.
inline std::string sm90_variant() {
  static const std::string v = [] {
    const char* e = std::getenv("BRAID_FLASH_SM90_VARIANT");
    return std::string(e ? e : "");
  }();
  return v;
}

// The wgmma kernel on compute capability 9.0 (the build targets sm_90a), unless
// BRAID_FLASH_SM90=0 asks for the mma.sync kernel (the fallback elsewhere; kept for comparison).
inline bool use_sm90() {
#ifndef BRAID_HAS_SM90A
  return false;  // no sm_90a code in this build
#else
  static const bool use = [] {
    const char* e = std::getenv("BRAID_FLASH_SM90");
    if (e && std::string(e) == "0") return false;
    int dev = 0, major = 0, minor = 0;
    BRAID_CUDA_CHECK(cudaGetDevice(&dev));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major == 9 && minor == 0;
  }();
  return use;
#endif
}

// Default shape per head_dim: 2 warpgroups, key tiles of 128 at D = 128 and of 64 at D = 64 (on
// the H100 the 64-wide tile ran D = 64 13-15% faster, and D = 128 4-9% slower; one-warpgroup
// blocks were 1.5-2x slower at both; docs/perf/attention.md).
template <int D>
void launch_sm90(const Params& p, DType dtype, bool paged, int64_t batch, int64_t max_q,
                 cudaStream_t stream) {
  if (dtype == DType::bf16 && !paged) {
    const std::string v = sm90_variant();
    if (v == "1x64") return launch_sm90_typed<__nv_bfloat16, D, false, 1, 64>(p, batch, max_q, stream);
    if (v == "2x64") return launch_sm90_typed<__nv_bfloat16, D, false, 2, 64>(p, batch, max_q, stream);
    if (v == "1x128") return launch_sm90_typed<__nv_bfloat16, D, false, 1, 128>(p, batch, max_q, stream);
    if (v == "2x128") return launch_sm90_typed<__nv_bfloat16, D, false, 2, 128>(p, batch, max_q, stream);
    if (v == "2x64o")  // softmax overlapped with the next tile's S product
      return launch_sm90_typed<__nv_bfloat16, D, false, 2, 64, true>(p, batch, max_q, stream);
  }
  constexpr int kTileN = D == 64 ? 64 : 128;
  if (dtype == DType::bf16) {
    if (paged) return launch_sm90_typed<__nv_bfloat16, D, true, 2, kTileN>(p, batch, max_q, stream);
    return launch_sm90_typed<__nv_bfloat16, D, false, 2, kTileN>(p, batch, max_q, stream);
  }
  if (paged) return launch_sm90_typed<__half, D, true, 2, kTileN>(p, batch, max_q, stream);
  launch_sm90_typed<__half, D, false, 2, kTileN>(p, batch, max_q, stream);
}

template <int D>
void launch_any(const Params& p, DType dtype, bool paged, int64_t batch, int64_t max_q,
                cudaStream_t stream) {
  if (use_sm90()) return launch_sm90<D>(p, dtype, paged, batch, max_q, stream);
  if (flash_warps() == 8) return launch_warps<D, 8>(p, dtype, paged, batch, max_q, stream);
  launch_warps<D, 4>(p, dtype, paged, batch, max_q, stream);
}

}  // namespace braid::cuda::flash
