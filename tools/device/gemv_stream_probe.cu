// Probe for docs/perf/fp8.md and docs/perf/gemv.md: a GEMV whose weights reach shared memory
// through bulk copies (cp.async.bulk, one per row and 1 KB chunk, a ring of stages per block, a
// producer warp ahead of 8 consumer warps, persistent blocks over the 16-row tiles) against the
// library's register-streaming GEMVs (braid::cuda::gemv for bf16, gemv_plain for fp8 with
// 128 x 128 block scales), same shapes, same timing, same call. m = 1 (batch-1 decode).
//
// The question it answers: is the fp8 GEMV's 50-75 % of copy bandwidth the register-streaming
// design (one group of loads in flight per warp, the warp's mma chain between groups) or the
// memory system? The bulk-copy kernel keeps kStages x 16 KB per block in flight whatever the
// consumers do.
//
// Build (here, against a CUDA build's static library):
//   nvcc -std=c++20 -O3 -arch=sm_90a -Iinclude -Isrc tools/device/gemv_stream_probe.cu \
//     build/libbraid_static.a -lcublasLt -lcublas -o build/gemv_stream_probe
// Run: gemv_stream_probe [--once [SHAPE]]   (--once: each kernel once per set, for ncu)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "braid/tensor.h"
#include "ops/cuda/gemv/gemv.h"
#include "ops/cuda/gemv/gemv_device.cuh"
#include "ops/cuda/gemv/gemv_fused.h"
#include "ops/cuda/hopper.cuh"
#include "braid/ops.h"

using namespace braid;
namespace hop = braid::cuda::hopper;
using braid::cuda::gemv_device::fp8x8_to;
using braid::cuda::gemv_device::mma;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

constexpr int kChunkBytes = 1024;            // bytes of one row per stage
constexpr int kPitch = kChunkBytes + 64;     // rows g, g + 1 of a quarter-warp 64 B apart in banks
constexpr int kStageBytes = 16 * kPitch;
constexpr int kConsumers = 8;
constexpr int kThreads = (kConsumers + 1) * 32;

struct Args {
  const __nv_bfloat16* a;
  const uint8_t* w;
  const float* scale;  // fp8: [ceil(n/128), k/128]
  __nv_bfloat16* out;
  int n, k, tiles, row_bytes, chunks;
};

__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

template <bool kFp8, int kStages, int kBlocksPerSm>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) gemv_stream_kernel(Args p) {
  extern __shared__ __align__(128) uint8_t smem[];
  float* partial = reinterpret_cast<float*>(smem + kStages * kStageBytes);  // [8][256]
  uint64_t* bars = reinterpret_cast<uint64_t*>(partial + kConsumers * 256);  // full, empty
  const uint32_t stage0 = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars));
  const uint32_t empty0 = full0 + 8 * kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      hop::mbar_init(full0 + 8 * s, 1);
      hop::mbar_init(empty0 + 8 * s, kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumers) {  // producer: weights only, so no wait for the kernel before
    if (lane != 0) return;
    int it = 0;
    for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      const int rows = min(16, p.n - tile * 16);
      const uint8_t* wt = p.w + int64_t{tile} * 16 * p.row_bytes;
      for (int c = 0; c < p.chunks; ++c, ++it) {
        const int s = it % kStages, use = it / kStages;
        hop::mbar_wait(empty0 + 8 * s, (use & 1) ^ 1);
        const int bytes = min(kChunkBytes, p.row_bytes - c * kChunkBytes);
        hop::mbar_arrive_expect_tx(full0 + 8 * s, static_cast<uint32_t>(bytes * rows));
        for (int r = 0; r < rows; ++r)
          bulk_copy(stage0 + s * kStageBytes + r * kPitch, wt + int64_t{r} * p.row_bytes + c * kChunkBytes,
                    static_cast<uint32_t>(bytes), full0 + 8 * s);
      }
    }
    return;
  }

  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int g = lane / 4, t = lane % 4;
  const bool has_lo = g < 1;  // m = 1
  const int col_blocks = p.k / 128;
  int it = 0;
  for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    float acc[2][4] = {};
    for (int c = 0; c < p.chunks; ++c, ++it) {
      const int s = it % kStages, use = it / kStages;
      const int seg = c * kChunkBytes + warp * 128;  // this warp's 128 bytes of each row
      float sc = 0.0f;
      if constexpr (kFp8) sc = seg < p.row_bytes ? __ldg(p.scale + (tile / 8) * col_blocks + seg / 128) : 0.0f;
      hop::mbar_wait(full0 + 8 * s, use & 1);
      const uint32_t base = stage0 + s * kStageBytes + warp * 128 + t * 16;
      float part[2][4] = {};
      float (&sums)[2][4] = kFp8 ? part : acc;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int off = seg + u * 64 + t * 16;  // byte in the row
        if (off >= p.row_bytes) continue;
        uint4 wv[2];
        wv[0] = lds128(base + u * 64 + g * kPitch);
        wv[1] = lds128(base + u * 64 + (g + 8) * kPitch);
        if constexpr (kFp8) {
          const uint4* x = reinterpret_cast<const uint4*>(p.a + off);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint4 xl = has_lo ? __ldg(x + h) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const uint4 wr = fp8x8_to<__nv_bfloat16>(h == 0 ? make_uint2(wv[r].x, wv[r].y)
                                                             : make_uint2(wv[r].z, wv[r].w));
              mma<__nv_bfloat16>(sums[r], xl.x, 0u, xl.y, 0u, wr.x, wr.y);
              mma<__nv_bfloat16>(sums[r], xl.z, 0u, xl.w, 0u, wr.z, wr.w);
            }
          }
        } else {
          const uint4 xl = has_lo ? __ldg(reinterpret_cast<const uint4*>(p.a + off / 2)) : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            mma<__nv_bfloat16>(sums[r], xl.x, 0u, xl.y, 0u, wv[r].x, wv[r].y);
            mma<__nv_bfloat16>(sums[r], xl.z, 0u, xl.w, 0u, wv[r].z, wv[r].w);
          }
        }
      }
      __syncwarp();
      if (lane == 0) hop::mbar_arrive(empty0 + 8 * s);
      if constexpr (kFp8) {
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[r][j] = fmaf(sc, part[r][j], acc[r][j]);
      }
    }
    braid::cuda::gemv_device::store_partial(partial + warp * 256, acc, g, t, has_lo, false);
    hop::named_sync(1, kConsumers * 32);
    if (threadIdx.x < 16) {  // row 0 of the 16 columns
      const int col = tile * 16 + threadIdx.x;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumers; ++w) sum += partial[w * 256 + threadIdx.x * 16];
      if (col < p.n) p.out[col] = __float2bfloat16(sum);
    }
    hop::named_sync(1, kConsumers * 32);
  }
}

template <bool kFp8, int kStages, int kBlocksPerSm>
struct StreamKernel {
  static size_t smem() { return kStages * kStageBytes + kConsumers * 256 * 4 + 16 * kStages; }
  static void launch(const Args& p, cudaStream_t s) {
    static int grid = 0;
    auto k = gemv_stream_kernel<kFp8, kStages, kBlocksPerSm>;
    if (!grid) {
      CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem())));
      int per_sm = 0, sms = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, smem()));
      CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      grid = per_sm * sms;
      printf("  [stream fp8=%d stages=%d: %d blocks/SM resident]\n", kFp8, kStages, per_sm);
    }
    k<<<std::min(grid, p.tiles), kThreads, smem(), s>>>(p);
  }
};


// The fp8 tensor cores instead of conversions: activations quantized per 128 columns
// (moe_fp8_quantize, one term), weights fed to mma.m16n8k32.e4m3 as they are loaded. The
// register-streaming layout of gemv_fused.cu (16 rows per block, k over 8 warps, 64-column steps
// of 16 bytes per lane, kGroup steps in flight). m = 1.
struct QArgs {
  const uint8_t* q;      // [k] e4m3
  const float* q_scale;  // [k / 128]
  const uint8_t* w;
  const float* w_scale;  // [ceil(n/128), k/128]
  __nv_bfloat16* out;
  int n, k, steps_per_slice;
};

template <int kGroup>
__global__ void __launch_bounds__(256, 2) gemv_q8_kernel(QArgs p) {
  __shared__ float partial[8][256];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tile = blockIdx.x;
  const int steps = p.k / 64;
  const int step_begin = warp * p.steps_per_slice, step_end = min(steps, step_begin + p.steps_per_slice);
  const int row0 = min(tile * 16 + g, p.n - 1), row1 = min(tile * 16 + 8 + g, p.n - 1);
  const uint4* w0 = reinterpret_cast<const uint4*>(p.w + int64_t{row0} * p.k);
  const uint4* w1 = reinterpret_cast<const uint4*>(p.w + int64_t{row1} * p.k);
  const uint4* x = reinterpret_cast<const uint4*>(p.q);
  const float* ws = p.w_scale + int64_t{tile / 8} * (p.k / 128);
  const bool has_lo = g < 1;
  uint4 wv[kGroup][2];
  auto load_group = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const int c = (s0 + u) * 4 + t;
      const bool ok = s0 + u < step_end;
      wv[u][0] = braid::cuda::gemv_device::load_weights(w0 + c, ok);
      wv[u][1] = braid::cuda::gemv_device::load_weights(w1 + c, ok);
    }
  };
  load_group(step_begin);
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  float acc[2][4] = {};
  float part[2][4];
  for (int s0 = step_begin; s0 < step_end; s0 += kGroup) {
    if (s0 != step_begin) load_group(s0);
    uint4 xl[kGroup];
    float sc[kGroup / 2];
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const int c = (s0 + u) * 4 + t;
      const bool ok = s0 + u < step_end;
      xl[u] = ok && has_lo ? __ldg(x + c) : make_uint4(0, 0, 0, 0);
      if (u % 2 == 0) {
        const int b = (s0 + u) / 2;
        sc[u / 2] = ok ? __ldg(ws + b) * __ldg(p.q_scale + b) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      if (u % 2 == 0)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int j = 0; j < 4; ++j) part[r][j] = 0.0f;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        braid::cuda::gemv_device::mma_e4m3(part[r], xl[u].x, 0u, xl[u].y, 0u, wv[u][r].x, wv[u][r].y);
        braid::cuda::gemv_device::mma_e4m3(part[r], xl[u].z, 0u, xl[u].w, 0u, wv[u][r].z, wv[u][r].w);
      }
      if (u % 2 == 1)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[r][j] = fmaf(sc[u / 2], part[r][j], acc[r][j]);
    }
  }
  braid::cuda::gemv_device::store_partial(partial[warp], acc, g, t, has_lo, false);
  __syncthreads();
  if (threadIdx.x < 16) {
    const int col = tile * 16 + threadIdx.x;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) sum += partial[w][threadIdx.x * 16];
    if (col < p.n) p.out[col] = __float2bfloat16(sum);
  }
}

template <int kGroup>
void launch_q8(const QArgs& p, cudaStream_t s) {
  gemv_q8_kernel<kGroup><<<(p.n + 15) / 16, 256, 0, s>>>(p);
}

struct Shape {
  const char* name;
  int n, k;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median time of one call (us): graphs of `batch` calls cycling over the sets.
template <typename F>
float time_us(F&& call, int sets, cudaStream_t s, bool once) {
  if (once) {
    (void)sets;
    call(0, s);
    CK(cudaStreamSynchronize(s));
    return 0;
  }
  const int batch = 40;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < batch; ++i) call(i % sets, s);
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 23; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) t.push_back(ms * 1000.0f / batch);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return median(t);
}

int main(int argc, char** argv) {
  const bool once = argc > 1 && !strcmp(argv[1], "--once");
  const char* only = argc > 2 ? argv[2] : nullptr;  // --once SHAPE: that shape only
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, l2 >> 20);

  {  // copy ceiling: 1 GiB device to device, read + write
    const size_t cb = size_t{1} << 30;
    void *src, *dst;
    CK(cudaMalloc(&src, cb));
    CK(cudaMalloc(&dst, cb));
    std::vector<float> ct;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 12; ++i) {
      CK(cudaEventRecord(a, s));
      CK(cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice, s));
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (i >= 2) ct.push_back(ms);
    }
    printf("copy ceiling %.0f GB/s (read + write)\n", 2.0 * cb / (median(ct) * 1e-3) / 1e9);
    CK(cudaFree(src));
    CK(cudaFree(dst));
  }

  const Shape shapes[] = {
      {"8b qkv", 6144, 4096},       {"8b o", 4096, 4096},       {"8b gate_up", 28672, 4096},
      {"8b down", 4096, 14336},     {"1b qkv", 3072, 2048},     {"1b o", 2048, 2048},
      {"1b gate_up", 16384, 2048},  {"1b down", 2048, 8192},    {"0.5b qkv", 1152, 896},
      {"0.5b o", 896, 896},         {"0.5b gate_up", 9728, 896}, {"0.5b down", 896, 4864},
      {"30b-a3b qkv", 9216, 2048},  {"1b lm_head", 128256, 2048},
  };
  std::mt19937 rng(7);
  printf("%-14s %-5s %10s %10s %10s %10s %10s   (us; GB/s of weights in brackets)\n", "shape", "w",
         "library", "s4 b2", "s6 b2", "s3 b3", "max err");
  printf("fp8 rows also: quantize alone, q8 g2, q8 g4, quantize + q8 g4 (us), q8 error against the library\n");
  for (const Shape& sh : shapes) {
    if (only && strcmp(only, sh.name)) continue;
    for (int fp8 = 0; fp8 < 2; ++fp8) {
      if (fp8 && sh.k % 128) continue;
      const int64_t welem = int64_t{sh.n} * sh.k;
      const size_t wbytes = static_cast<size_t>(welem) * (fp8 ? 1 : 2);
      const int sets = std::max<int>(2, static_cast<int>((2.5 * l2) / wbytes) + 1);
      std::vector<uint8_t*> w(sets);
      std::vector<float*> sc(sets);
      std::vector<__nv_bfloat16*> out(sets), out2(sets);
      const int sc_n = ((sh.n + 127) / 128) * (sh.k / 128);
      std::vector<uint8_t> hw(wbytes);
      std::vector<float> hs(std::max(sc_n, 1));
      for (int i = 0; i < sets; ++i) {
        for (size_t j = 0; j < wbytes; ++j) {
          uint8_t b = static_cast<uint8_t>(rng());
          if (fp8) b &= 0xb7;  // |code| <= 0x37: values below 2, no NaN
          else if (j & 1) b = static_cast<uint8_t>((b & 0x80) | 0x3c | (b & 1));  // bf16 of magnitude ~1e-2..2
          hw[j] = b;
        }
        for (float& x : hs) x = 0.01f + 0.001f * static_cast<float>(rng() % 100);
        CK(cudaMalloc(&w[i], wbytes));
        CK(cudaMemcpy(w[i], hw.data(), wbytes, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&sc[i], hs.size() * 4));
        CK(cudaMemcpy(sc[i], hs.data(), hs.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&out[i], sh.n * 2));
        CK(cudaMalloc(&out2[i], sh.n * 2));
      }
      std::vector<__nv_bfloat16> ha(sh.k);
      for (auto& x : ha) x = __float2bfloat16(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1000.0f);
      __nv_bfloat16* a;
      CK(cudaMalloc(&a, sh.k * 2));
      CK(cudaMemcpy(a, ha.data(), sh.k * 2, cudaMemcpyHostToDevice));

      const Device dev = Device::cuda(0);
      auto lib = [&](int i, cudaStream_t st) {
        const Tensor ta(a, DType::bf16, dev, {1, sh.k});
        const Tensor to(out[i], DType::bf16, dev, {1, sh.n});
        if (fp8) {
          const Tensor tw(w[i], DType::f8e4m3, dev, {sh.n, sh.k});
          const Tensor ts(sc[i], DType::f32, dev, {(sh.n + 127) / 128, sh.k / 128});
          braid::cuda::gemv_plain(ta, tw, ts, Tensor{}, to, Stream{st});
        } else {
          const Tensor tw(w[i], DType::bf16, dev, {sh.n, sh.k});
          braid::cuda::gemv(ta, tw, Tensor{}, to, Stream{st});
        }
      };
      auto args = [&](int i) {
        Args p{};
        p.a = a;
        p.w = w[i];
        p.scale = sc[i];
        p.out = out2[i];
        p.n = sh.n;
        p.k = sh.k;
        p.tiles = (sh.n + 15) / 16;
        p.row_bytes = sh.k * (fp8 ? 1 : 2);
        p.chunks = (p.row_bytes + kChunkBytes - 1) / kChunkBytes;
        return p;
      };
      // max relative difference of out2 against the library's out, set 0
      auto check = [&]() {
        std::vector<__nv_bfloat16> r(sh.n), o(sh.n);
        CK(cudaMemcpy(r.data(), out[0], sh.n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(o.data(), out2[0], sh.n * 2, cudaMemcpyDeviceToHost));
        double mx = 0, err = 0;
        for (int j = 0; j < sh.n; ++j) mx = std::max(mx, std::abs(double(__bfloat162float(r[j]))));
        for (int j = 0; j < sh.n; ++j)
          err = std::max(err, std::abs(double(__bfloat162float(r[j])) - __bfloat162float(o[j])) / (mx > 0 ? mx : 1));
        CK(cudaMemset(out2[0], 0xff, sh.n * 2));
        return err;
      };
      float tl = time_us(lib, sets, s, once);
      double err = 0;
      // One variant: its time, its output checked against the library's (the largest
      // difference so far in `e`).
      auto timed = [&](auto&& call, double& e) {
        const float t = time_us(call, sets, s, once);
        e = std::max(e, check());
        return t;
      };
      float t4, t6, t3;
      auto time_stream = [&](auto fp8_tag) {
        constexpr bool kFp8 = decltype(fp8_tag)::value;
        t4 = timed([&](int i, cudaStream_t st) { StreamKernel<kFp8, 4, 2>::launch(args(i), st); }, err);
        t6 = timed([&](int i, cudaStream_t st) { StreamKernel<kFp8, 6, 2>::launch(args(i), st); }, err);
        t3 = timed([&](int i, cudaStream_t st) { StreamKernel<kFp8, 3, 3>::launch(args(i), st); }, err);
      };
      if (fp8)
        time_stream(std::true_type{});
      else
        time_stream(std::false_type{});
      float tq = 0, tq2 = 0, tq4 = 0, tqq = 0;
      double qerr = 0;
      if (fp8) {
        uint8_t* q;
        float* qs;
        CK(cudaMalloc(&q, sh.k));
        CK(cudaMalloc(&qs, sh.k / 128 * 4));
        const Tensor ta(a, DType::bf16, dev, {1, sh.k});
        const Tensor tq_(q, DType::f8e4m3, dev, {1, sh.k});
        const Tensor tqs(qs, DType::f32, dev, {sh.k / 128, 1});
        auto quant = [&](int, cudaStream_t st) { ops::moe_fp8_quantize(ta, tq_, tqs, Stream{st}); };
        auto qargs = [&](int i) {
          QArgs p{};
          p.q = q;
          p.q_scale = qs;
          p.w = w[i];
          p.w_scale = sc[i];
          p.out = out2[i];
          p.n = sh.n;
          p.k = sh.k;
          const int steps = sh.k / 64;
          p.steps_per_slice = ((steps + 7) / 8 + 1) / 2 * 2;
          return p;
        };
        tq = time_us(quant, sets, s, once);
        tq2 = timed([&](int i, cudaStream_t st) { launch_q8<2>(qargs(i), st); }, qerr);
        tq4 = timed([&](int i, cudaStream_t st) { launch_q8<4>(qargs(i), st); }, qerr);
        tqq = time_us([&](int i, cudaStream_t st) { quant(i, st); launch_q8<4>(qargs(i), st); }, sets, s, once);
        CK(cudaFree(q));
        CK(cudaFree(qs));
      }
      CK(cudaGetLastError());
      auto gbs = [&](float us) { return us > 0 ? wbytes / (us * 1e-6) / 1e9 : 0.0; };
      printf("%-14s %-5s %6.2f(%4.0f) %6.2f(%4.0f) %6.2f(%4.0f) %6.2f(%4.0f) %10.2e\n", sh.name, fp8 ? "fp8" : "bf16",
             tl, gbs(tl), t4, gbs(t4), t6, gbs(t6), t3, gbs(t3), err);
      if (fp8)
        printf("%-14s q8    quant %5.2f  g2 %6.2f(%4.0f)  g4 %6.2f(%4.0f)  quant+g4 %6.2f   err %.2e\n", sh.name, tq, tq2,
               gbs(tq2), tq4, gbs(tq4), tqq, qerr);
      fflush(stdout);
      for (int i = 0; i < sets; ++i) {
        CK(cudaFree(w[i]));
        CK(cudaFree(sc[i]));
        CK(cudaFree(out[i]));
        CK(cudaFree(out2[i]));
      }
      CK(cudaFree(a));
    }
  }
  return 0;
}
