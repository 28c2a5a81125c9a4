// gemv_chain's kernel (ops.h): a chain of one-row products (rms_norm_gemm, gemm_add,
// swiglu_gemm_add) in one persistent kernel, one block per SM.
//
// Why: a decode step's GEMVs each pay a ramp (the first DRAM round trip of every warp) and a
// drain (the last loads, the reduction, the stores) that a stream of a few MB cannot hide: the
// small models' projections run at half the copy bandwidth one kernel at a time, and programmatic
// launch with a 32 KB preload per block recovered only part of it (docs/perf/decode.md, version
// 4). Here the weight stream of the whole chain is one stream: the weights never depend on the
// activations, so each block's producer warp copies its rows of every stage, in order, into a
// ring of shared-memory slots (cp.async.bulk, completing on an mbarrier per slot) without ever
// waiting for a stage to finish; it waits only for a free slot. The consumer warps wait for the
// stage before (a grid-wide counter), build the stage's activation row in shared memory (rms_norm
// or SwiGLU applied, with the fused kernels' roundings: gemv_fused_device.cuh), and take the
// slots as they land. So while the consumers of every block wait at a stage boundary, the ring
// keeps filling with the next stages' weights: the DRAM stream pauses only when a ring is full.
//
// Layout: block b owns rows [n * b / G, n * (b + 1) / G) of each stage (G blocks). Those rows go
// through the ring in pieces of kGroupRows rows x kChunkCols columns, row group by row group,
// each row's chunks in column order; consumer warp w owns row w of each group, accumulates its
// dot product over the chunks in fp32 (lane-strided, then a warp sum: deterministic), and writes
// the output element (bias, rounding and residual add as gemv_fused_device.cuh's store_out).
//
// Grid-wide ordering: after a stage, each block's consumers meet at a named barrier and thread 0
// does a release fence and an atomic add on the counter; before stage s + 1, thread 0 spins until
// the counter reaches (s + 1) * G (acquire), and the consumers meet again. The activations a
// stage reads were written by other blocks inside this kernel, so they are read through L2
// (ld.global.cg), never from a possibly stale L1 line. The last block to finish resets the
// counter to zero for the next call. All G blocks must be resident at once: G is the SM count,
// and a block takes at most the shared memory one SM offers.
//
// Measured (decode.md, versions 17 and 18): faster than the separate kernels on the small dense
// models, where the next layer's weights stream while the attention runs; on an H100 a stage
// streams as fast as its separate kernel, and a stage boundary costs 2.3-4.7 us, mostly the
// counter's fence, atomic and poll (tools/device/chain_probe.cpp's stamps). forward() takes the
// chain only where it measured faster.
//
// Programmatic launch (pdl.cuh): the producer's weight copies are the only global accesses before
// the consumers' pdl::wait(), and the kernel is launched as a programmatic dependent only inside
// ops::ConstantWeights; the consumers release the next kernel at the start of the last stage.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "braid/error.h"
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemv/gemv_fused_device.cuh"
#include "ops/cuda/hopper.cuh"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreads = kConsumers + 32;  // and one producer warp
constexpr int kGroupRows = kConsumerWarps;  // rows of a piece: one per consumer warp
constexpr int kChunkCols = 1024;            // columns of a piece
constexpr int kRowBytes = kChunkCols * 2;   // a row's place in a slot (16-bit weights)
constexpr int kSlotBytes = kGroupRows * kRowBytes;  // 16 KiB
constexpr int kLaneVecs = kChunkCols / 8 / 32;      // 16-byte pieces of a row per lane
constexpr int kMinSlots = 3;
constexpr int kMaxSlots = 13;
constexpr int kDefaultSlots = 8;  // 128 KiB: leaves room on an SM for a decode attention block
constexpr int kMaxK = 16384;      // columns of a product: the activation row's shared memory
constexpr int kVecsPerThread = kMaxK / 8 / kConsumers;  // 16-byte activation loads per thread
constexpr int kConsumerBarrier = 1;                     // named barrier of the consumer warps

using StageOp = ops::ChainStage::Op;

struct StageArgs {
  const void* x;            // the row: [k]; swiglu: [2k], gate then up
  const void* norm_weight;  // rms_norm_gemm: [k]
  const void* w;            // [n, k]
  const void* bias;         // [n] or null
  void* out;                // [n]; the residual of the add stages
  int n, k;
  float eps;
  StageOp op;
};

// Times a block records when asked (gemv_chain_record_stamps, for tools/device/chain_probe.cpp):
// per block and stage, globaltimer readings at these events. Only the kernel's kRecord
// instantiation records them; the one a decode step runs has no trace of them.
enum Stamp {
  kStageOpen,  // the consumers are past the wait for the stage before
  kRowReady,   // the stage's activation row is in shared memory
  kStageDone,  // the block's outputs of the stage are stored
  kReleased,   // ... and fenced: its arrival on the counter follows
  kFirstCopy,  // the producer issued the stage's first piece
  kLastCopy,   // ... and its last
  kStamps
};

struct ChainArgs {
  StageArgs stage[ops::kMaxChainStages];
  int stages;
  int slots;
  unsigned int* counter;
  unsigned long long* stamps;  // [blocks][kMaxChainStages][kStamps]: the kRecord kernel's
};

template <bool kRecord>
__device__ __forceinline__ void stamp(const ChainArgs& a, int s, Stamp event) {
  if constexpr (kRecord) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    a.stamps[(blockIdx.x * ops::kMaxChainStages + s) * kStamps + event] = t;
  }
}

// The first of block b's rows among n rows split over `blocks` blocks.
__device__ __forceinline__ int row_begin(int n, int b, int blocks) {
  return static_cast<int>(static_cast<int64_t>(n) * b / blocks);
}

// One 16-bit element through L2 (it may have been written by another block of this kernel).
template <typename T>
__device__ __forceinline__ float load_cg(const T* p) {
  const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(p));
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(__ushort_as_bfloat16(bits));
  else
    return __half2float(__ushort_as_half(bits));
}

template <typename T>
__device__ __forceinline__ float dot8(uint4 w, uint4 x, float acc) {
  gemv_fused::Pack8<T> wv, xv;
  wv.u = w;
  xv.u = x;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc = fmaf(to_float(wv.v[i]), to_float(xv.v[i]), acc);
  return acc;
}

template <typename T>
__device__ __forceinline__ float sum_squares8(uint4 x) {
  gemv_fused::Pack8<T> xv;
  xv.u = x;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += to_float(xv.v[i]) * to_float(xv.v[i]);
  return s;
}

// The ring's slot i: its buffer and its two barriers. Piece p (numbered across the block's whole
// chain, in the order both roles walk it) sits in slot p % slots and fills in that slot's phase
// (p / slots) % 2.
struct Ring {
  const unsigned char* first;  // slot 0
  uint32_t base;   // its shared address
  uint32_t bars;   // shared address of the barriers: full[kMaxSlots], then empty[kMaxSlots]
  int slots;
  __device__ const unsigned char* data(int p) const { return first + (p % slots) * kSlotBytes; }
  __device__ uint32_t buffer(int p) const { return base + (p % slots) * kSlotBytes; }
  __device__ uint32_t full(int p) const { return bars + (p % slots) * 8; }
  __device__ uint32_t empty(int p) const { return bars + (kMaxSlots + p % slots) * 8; }
  __device__ uint32_t parity(int p) const { return static_cast<uint32_t>((p / slots) & 1); }
};

// The producer (one thread): every piece of every stage, as soon as its slot is free.
template <typename T, bool kRecord>
__device__ void produce(const ChainArgs& a, const Ring& ring) {
  int p = 0;
  for (int s = 0; s < a.stages; ++s) {
    const StageArgs& st = a.stage[s];
    const int r0 = row_begin(st.n, blockIdx.x, gridDim.x);
    const int r1 = row_begin(st.n, blockIdx.x + 1, gridDim.x);
    const T* w = static_cast<const T*>(st.w);
    stamp<kRecord>(a, s, kFirstCopy);
    for (int g = r0; g < r1; g += kGroupRows) {
      const int rows = min(kGroupRows, r1 - g);
      for (int c = 0; c < st.k; c += kChunkCols, ++p) {
        const int cols = min(kChunkCols, st.k - c);
        const uint32_t bytes = static_cast<uint32_t>(cols) * sizeof(T);
        hopper::mbar_wait(ring.empty(p), ring.parity(p) ^ 1);  // a fresh slot passes at once
        hopper::mbar_arrive_expect_tx(ring.full(p), bytes * rows);
        for (int r = 0; r < rows; ++r)
          hopper::bulk_copy(ring.buffer(p) + r * kRowBytes,
                            w + static_cast<int64_t>(g + r) * st.k + c, bytes, ring.full(p));
      }
    }
    stamp<kRecord>(a, s, kLastCopy);
  }
}

// The consumers: wait until `target` blocks have arrived.
__device__ __forceinline__ void wait_for(const unsigned int* counter, unsigned int target) {
  if (threadIdx.x == 0) {
    hopper::spin_until(counter, target);  // traps if a block never ran: see the top
    __threadfence();
  }
  hopper::named_sync(kConsumerBarrier, kConsumers);
}

// The stage's activation row into act (shared), transformed as the stage's op does.
template <typename T>
__device__ void stage_row(const StageArgs& st, T* act, float* partial) {
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int vecs = st.k / 8;
  const uint4* x = static_cast<const uint4*>(st.x);
  uint4* out = reinterpret_cast<uint4*>(act);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 xv[kVecsPerThread];
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {  // every load in flight at once
    const int v = t + i * kConsumers;
    xv[i] = v < vecs ? __ldcg(x + v) : zero;
  }
  if (st.op == StageOp::swiglu_gemm_add) {
    uint4 up[kVecsPerThread];
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      const int v = t + i * kConsumers;
      up[i] = v < vecs ? __ldcg(x + vecs + v) : zero;
    }
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      const int v = t + i * kConsumers;
      if (v < vecs) out[v] = gemv_fused::swiglu_transform<T>(xv[i], up[i]);
    }
  } else if (st.op == StageOp::gemm_add) {
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      const int v = t + i * kConsumers;
      if (v < vecs) out[v] = xv[i];
    }
  } else {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) ss += sum_squares8<T>(xv[i]);  // zeros add nothing
    ss = warp_sum(ss);
    if (lane == 0) partial[warp] = ss;
    hopper::named_sync(kConsumerBarrier, kConsumers);
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) total += partial[w];  // one order in every thread
    const float inv_rms = rsqrtf(total / static_cast<float>(st.k) + st.eps);
    const uint4* norm_weight = static_cast<const uint4*>(st.norm_weight);
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      const int v = t + i * kConsumers;
      if (v < vecs) out[v] = gemv_fused::rms_transform<T>(xv[i], __ldg(norm_weight + v), inv_rms);
    }
  }
  hopper::named_sync(kConsumerBarrier, kConsumers);
}

// Output element `row` of the stage: gemv_fused_device.cuh's store_out for one row.
template <typename T>
__device__ __forceinline__ void store_row(const StageArgs& st, int row, float v) {
  if (st.bias) v += to_float(static_cast<const T*>(st.bias)[row]);
  T* o = static_cast<T*>(st.out) + row;
  if (st.op == StageOp::rms_norm_gemm)
    *o = from_float<T>(v);
  else
    *o = from_float<T>(load_cg(o) + to_float(from_float<T>(v)));
}

template <typename T, bool kRecord>
__device__ void consume(const ChainArgs& a, const Ring& ring, T* act, float* partial) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned int blocks = gridDim.x;
  pdl::wait();  // the first stage's row comes from the kernel before
  int p = 0;
  for (int s = 0; s < a.stages; ++s) {
    const StageArgs& st = a.stage[s];
    if (s > 0) wait_for(a.counter, s * blocks);
    if (threadIdx.x == 0) stamp<kRecord>(a, s, kStageOpen);
    if (s == a.stages - 1) pdl::launch_dependents();
    stage_row<T>(st, act, partial);
    if (threadIdx.x == 0) stamp<kRecord>(a, s, kRowReady);
    const int r0 = row_begin(st.n, blockIdx.x, gridDim.x);
    const int r1 = row_begin(st.n, blockIdx.x + 1, gridDim.x);
    for (int g = r0; g < r1; g += kGroupRows) {
      const int row = g + warp;
      const bool live = row < r1;  // the group's last rows may not exist: wait and release anyway
      float acc[2] = {0.0f, 0.0f};  // two chains of FMAs, added in one order at the end
      for (int c = 0; c < st.k; c += kChunkCols, ++p) {
        const int vecs = min(kChunkCols, st.k - c) / 8;
        hopper::mbar_wait(ring.full(p), ring.parity(p));
        if (live) {
          const uint4* w = reinterpret_cast<const uint4*>(ring.data(p) + warp * kRowBytes);
          const uint4* x = reinterpret_cast<const uint4*>(act + c);
          uint4 wv[kLaneVecs], xv[kLaneVecs];
#pragma unroll
          for (int i = 0; i < kLaneVecs; ++i) {  // every load of the piece first, then the FMAs
            const int v = lane + 32 * i;
            wv[i] = v < vecs ? w[v] : make_uint4(0, 0, 0, 0);
            xv[i] = v < vecs ? x[v] : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int i = 0; i < kLaneVecs; ++i) acc[i % 2] = dot8<T>(wv[i], xv[i], acc[i % 2]);
        }
        // The copies that refill the slot are the async proxy's writes: order this warp's reads
        // of it before them (the slot's empty barrier alone does not, across proxies).
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        // Every lane arrives after its own reads (the barrier counts kConsumers): lane 0's
        // arrival for its warp after __syncwarp orders the same, but racecheck does not follow
        // __syncwarp into an mbarrier and reported each refill as a race (sanitizer.md).
        hopper::mbar_arrive(ring.empty(p));
      }
      if (live) {
        const float sum = warp_sum(acc[0] + acc[1]);
        if (lane == 0) store_row<T>(st, row, sum);
      }
    }
    hopper::named_sync(kConsumerBarrier, kConsumers);  // every warp of the block past its stores
    if (threadIdx.x == 0) {
      stamp<kRecord>(a, s, kStageDone);
      __threadfence();  // release them to the blocks that wait for the counter
      stamp<kRecord>(a, s, kReleased);
      const unsigned int before = atomicAdd(a.counter, 1u);
      // The last arrival of the last stage: every block is past every wait; ready for next time.
      if (s == a.stages - 1 && before == a.stages * blocks - 1) atomicExch(a.counter, 0u);
    }
  }
}

template <typename T, bool kRecord>
__global__ void __launch_bounds__(kThreads, 1) gemv_chain_kernel(const ChainArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // cp.async.bulk and transaction barriers: the host launches this on 9.0+ only
#else
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[2 * kMaxSlots];
  __shared__ float partial[kConsumerWarps];
  const Ring ring{smem, hopper::smem_u32(smem), hopper::smem_u32(bars), a.slots};
  T* act = reinterpret_cast<T*>(smem + a.slots * kSlotBytes);
  if (threadIdx.x == 0) {
    for (int i = 0; i < a.slots; ++i) {
      hopper::mbar_init(ring.full(i), 1);                // the producer's arrival, with the bytes
      hopper::mbar_init(ring.empty(i), kConsumers);  // one per consumer thread
    }
    hopper::fence_mbarrier_init();  // visible to the copies
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    if (threadIdx.x == kConsumers) produce<T, kRecord>(a, ring);
    return;
  }
  consume<T, kRecord>(a, ring, act, partial);
#endif
}

// Slots of the ring: BRAID_CHAIN_SLOTS (to measure ring depths in one call), else kDefaultSlots.
int ring_slots() {
  static const int slots = [] {
    const char* v = std::getenv("BRAID_CHAIN_SLOTS");
    const int n = v ? std::atoi(v) : kDefaultSlots;
    return std::clamp(n, kMinSlots, kMaxSlots);
  }();
  return slots;
}

int stage_k(const ops::ChainStage& s) {
  const int64_t k = s.x.size(1);
  return static_cast<int>(s.op == ops::ChainStage::Op::swiglu_gemm_add ? k / 2 : k);
}

// The dynamic shared memory a block may take: the device's opt-in limit less the kernel's static
// barriers and scratch (read once: the GPUs of one host are alike, as sm_count() assumes). A
// block of at most this much fits an SM, so every block of the grid is resident.
size_t smem_limit() {
  static const size_t limit = [] {
    cudaFuncAttributes attr{};
    BRAID_CUDA_CHECK(cudaFuncGetAttributes(&attr, gemv_chain_kernel<__nv_bfloat16, true>));
    for (auto kernel : {gemv_chain_kernel<__nv_bfloat16, false>, gemv_chain_kernel<__half, false>,
                        gemv_chain_kernel<__nv_bfloat16, true>, gemv_chain_kernel<__half, true>})
      prefer_max_shared_if_asked(reinterpret_cast<const void*>(kernel));
    return static_cast<size_t>(smem_optin_limit()) - attr.sharedSizeBytes;
  }();
  return limit;
}

template <typename T, bool kRecord>
void launch(const ChainArgs& a, size_t smem, cudaStream_t stream) {
  opt_in(gemv_chain_kernel<T, kRecord>, static_cast<int>(smem_limit()));
  // One block per SM: every block resident at once (the stages wait on all of them).
  const bool programmatic = programmatic_launch_enabled() && ops::ConstantWeights::active();
  launch_dependent_if(programmatic, gemv_chain_kernel<T, kRecord>,
                      dim3(static_cast<unsigned>(sm_count())), dim3(kThreads), smem, stream, a);
  BRAID_CUDA_CHECK_LAUNCH();
}

unsigned long long* g_stamps = nullptr;  // gemv_chain_record_stamps

}  // namespace

bool gemv_chain_takes(std::span<const ops::ChainStage> stages) {
  if (stages.empty() || stages.size() > static_cast<size_t>(ops::kMaxChainStages)) return false;
  if (!device_is_sm90_or_later()) return false;
  const DType t = stages[0].x.dtype;
  if (t != DType::bf16 && t != DType::f16) return false;
  for (const ops::ChainStage& s : stages) {
    const int64_t k = stage_k(s);
    const bool rms = s.op == ops::ChainStage::Op::rms_norm_gemm;
    if (s.x.dtype != t || s.x.size(0) != 1 || s.w.fp8() || s.w.w.dtype != t || s.out.dtype != t)
      return false;
    if (k % 8 != 0 || k > kMaxK || s.w.w.size(0) > INT32_MAX) return false;
    if (!aligned16(s.x.data) || !aligned16(s.w.w.data) || (rms && !aligned16(s.norm_weight.data)))
      return false;
  }
  return true;
}

void gemv_chain_record_stamps(unsigned long long* stamps) { g_stamps = stamps; }

void gemv_chain(std::span<const ops::ChainStage> stages, const Tensor& counter, Stream stream) {
  ChainArgs a{};
  a.stages = static_cast<int>(stages.size());
  a.slots = ring_slots();
  a.counter = static_cast<unsigned int*>(counter.data);
  a.stamps = g_stamps;
  int64_t widest = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const ops::ChainStage& s = stages[i];
    const bool given_bias = s.op != ops::ChainStage::Op::swiglu_gemm_add && s.bias.data != nullptr;
    a.stage[i] = {s.x.data,
                  s.op == ops::ChainStage::Op::rms_norm_gemm ? s.norm_weight.data : nullptr,
                  s.w.w.data,
                  given_bias ? s.bias.data : nullptr,
                  s.out.data,
                  static_cast<int>(s.w.w.size(0)),
                  stage_k(s),
                  s.eps,
                  s.op};
    widest = std::max<int64_t>(widest, stage_k(s));
  }
  // The ring gives up slots where the activation row would not fit beside it (k near kMaxK).
  const size_t row_bytes = static_cast<size_t>(widest) * 2, limit = smem_limit();
  while (a.slots > kMinSlots && a.slots * size_t{kSlotBytes} + row_bytes > limit) --a.slots;
  const size_t smem = static_cast<size_t>(a.slots) * kSlotBytes + row_bytes;
  auto s = static_cast<cudaStream_t>(stream.handle);
  const bool bf16 = stages[0].x.dtype == DType::bf16;
  if (g_stamps)
    bf16 ? launch<__nv_bfloat16, true>(a, smem, s) : launch<__half, true>(a, smem, s);
  else
    bf16 ? launch<__nv_bfloat16, false>(a, smem, s) : launch<__half, false>(a, smem, s);
}

}  // namespace braid::cuda
