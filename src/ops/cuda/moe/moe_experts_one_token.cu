// moe_experts' whole layer at one token in one launch (fp8 experts): the kernel, its plan and its
// launch. moe_experts.cu runs the two kernels otherwise; moe_experts_device.cuh holds the tiles
// both use.
#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/moe/moe_experts_device.cuh"

namespace braid::cuda::moe_experts_device {

namespace {

// ---- one launch for the whole layer at one token (fp8 experts) ---------------------------------
//
// At one token moe_experts.cu's two kernels each pay a ramp and a drain: gate_up's warps take
// two dependent round trips for their 8 KB, and the down kernel's blocks start only as gate_up's
// leave their SMs, so its stream follows gate_up's (Qwen3-30B-A3B-FP8: 15.6 + 11.0 us a layer
// for 37.8 MB, 1.4 TB/s; docs/perf/decode.md, session 13). Here one block per 16 rows of H (at
// most one an SM, all resident) asks for nearly all of its bytes at once, through bulk copies
// into shared memory:
//   - its share of the gate_up items (8 intermediate rows of one expert: 8 gate rows and 8 up
//     rows, contiguous items per block, so every SM streams the same bytes) through a ring of R
//     item slots, each refilled with the item R places on as soon as its group has read it;
//   - its 16 down rows of every chosen expert, in a stage of their own.
// Four groups of four warps compute the items from shared memory with the gate_up kernel's warp
// slices, sums and roundings (the same h bits), the blocks meet at a grid-wide counter, and each
// block runs the down kernel's items and combine over its staged rows (the same sums in the same
// order: out is bit for bit the two kernels'). The counter is the caller's
// (MoeExpertsExtras::barrier), zero at the call and left zero.
constexpr int kOneTokenGroups = kDownWarps / kGateUpWarps;  // gate_up items side by side
constexpr int kOneTokenMaxSlots = 32;   // routed + shared experts: one lane of warp 1 each
constexpr int kOneTokenMaxRing = 8;     // gate_up item slots
// Shared memory kept back from the dynamic allowance: the kernel's static barriers and row
// pointers (256 bytes), with room.
constexpr int kOneTokenStaticSmem = 1024;

// A staged row's pitch: its bytes, padded so that rows g and g + 1 fall 64 bytes apart modulo
// 128 (a quarter-warp's 16-byte loads of two rows then take distinct banks).
__host__ __device__ inline int one_token_pitch(int row_bytes) {
  return row_bytes + (64 - row_bytes % 128 + 128) % 128;
}

// Shared memory, in order: the down stage [slots][16][down pitch], the ring [R][16][gate_up pitch],
// the down partials [ksplit][slots][16] and the groups' gate_up partials [groups][4 warps][16].
struct OneTokenLayout {
  size_t down, ring, partials;  // offsets
  size_t bytes;                 // in all
};
__host__ __device__ inline OneTokenLayout one_token_layout(int slots, int hidden, int inter,
                                                           int ksplit, int ring) {
  OneTokenLayout l;
  l.down = 0;
  l.ring = l.down + static_cast<size_t>(slots) * kTileRows * one_token_pitch(inter);
  l.partials = l.ring + static_cast<size_t>(ring) * kTileRows * one_token_pitch(hidden);
  l.bytes = l.partials + (static_cast<size_t>(ksplit) * slots + kOneTokenGroups * kGateUpWarps) *
                             kTileRows * sizeof(float);
  return l;
}

// The expert of slot s (s < k: the token's j-th choice, then the shared experts), or -1 for a
// routed id outside [0, E) (it contributes nothing).
__device__ __forceinline__ int one_token_expert(const ExpertArgs& a, int s) {
  if (s >= a.k) return a.experts + (s - a.k);
  const int e = a.ids[s];
  return e >= 0 && e < a.experts ? e : -1;
}

// Copies gate_up item `item` (chunk = item / slots, slot = item % slots) into ring slot `dst`: its
// 8 gate rows to rows 0-7, its 8 up rows to rows 8-15, completing on `bar` (an expert of -1
// copies nothing, but the barrier's phase still completes). One thread.
__device__ __forceinline__ void copy_gate_up_item(const ExpertArgs& a, int64_t item, int slots,
                                                  uint8_t* dst, int pitch, uint32_t bar) {
  const int chunk = static_cast<int>(item / slots);
  const int e = one_token_expert(a, static_cast<int>(item % slots));
  const int i0 = chunk * kGateUpRows, rows = e < 0 ? 0 : min(kGateUpRows, a.inter - i0);
  hopper::mbar_arrive_expect_tx(bar, 2u * rows * a.hidden);
  for (int r = 0; r < rows; ++r) {
    const GateUpRows<uint8_t> t = gate_up_rows<uint8_t>(a, e, i0 + r);
    hopper::bulk_copy(hopper::smem_u32(dst + r * pitch), t.base + t.gate * a.hidden, a.hidden, bar);
    hopper::bulk_copy(hopper::smem_u32(dst + (r + kGateUpRows) * pitch), t.base + t.up * a.hidden,
                      a.hidden, bar);
  }
}

// Shared-memory weights, activations (x) through L1: the one-token kernel's gate_up items.
struct FromStageX {
  static __device__ __forceinline__ uint4 w(const void* p, bool pred, uint64_t) {
    return shared16(p, pred);
  }
  static __device__ __forceinline__ uint4 act(const void* p, bool pred) {
    return cached16(p, pred);
  }
};

template <typename T>
__global__ void __launch_bounds__(kDownWarps * 32, 1) moe_one_token_kernel(const ExpertArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // cp.async.bulk and transaction barriers: the host takes this path on 9.0+ only
#else
  extern __shared__ __align__(128) uint8_t dyn[];
  __shared__ __align__(8) uint64_t staged;                  // the down rows
  __shared__ __align__(8) uint64_t full[kOneTokenMaxRing];  // the ring's slots
  __shared__ const T* act_rows[kDownWarps];  // per warp: the tile's one activation row (x or h)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int slots = a.k + a.shared, ring = a.ring_slots;
  const int n0 = blockIdx.x * kTileRows, rows = min(kTileRows, a.hidden - n0);
  const int down_pitch = one_token_pitch(a.inter), ring_pitch = one_token_pitch(a.hidden);
  const OneTokenLayout layout = one_token_layout(slots, a.hidden, a.inter, a.ksplit, ring);
  uint8_t* down_stage = dyn + layout.down;
  uint8_t* ring_stage = dyn + layout.ring;
  float* down_partial = reinterpret_cast<float*>(dyn + layout.partials);
  float* gate_partial = down_partial + a.ksplit * slots * kTileRows;
  const size_t ring_slot_bytes = static_cast<size_t>(kTileRows) * ring_pitch;
  // This block's gate_up items: [first, first + mine), the i-th in ring slot i % ring.
  const int chunks = (a.inter + kGateUpRows - 1) / kGateUpRows;
  const int64_t items = static_cast<int64_t>(chunks) * slots;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * a.items_per_block;
  const int64_t left = items - first;
  const int mine =
      left <= 0 ? 0 : static_cast<int>(left < a.items_per_block ? left : a.items_per_block);
  const uint64_t policy = evict_first_policy();

  if (tid == 0) {
    hopper::mbar_init(hopper::smem_u32(&staged), 1);
    for (int s = 0; s < ring; ++s) hopper::mbar_init(hopper::smem_u32(&full[s]), 1);
    hopper::fence_mbarrier_init();
  }
  // The router's ids and x come from the kernels before: nothing global is touched before this.
  if constexpr (kProgrammaticGateUp) pdl::wait();
  __syncthreads();  // the barriers' initialisation
  if (tid == 0)  // the ring's first items, first: gate_up is the longer chain
    for (int i = 0; i < min(ring, mine); ++i)
      copy_gate_up_item(a, first + i, slots, ring_stage + i * ring_slot_bytes, ring_pitch,
                        hopper::smem_u32(&full[i]));
  if (warp == 1) {  // the down rows of every chosen expert
    const uint32_t bar = hopper::smem_u32(&staged);
    const int e = lane < slots ? one_token_expert(a, lane) : -1;
    const unsigned valid = __ballot_sync(kFull, e >= 0);
    if (lane == 0) hopper::mbar_arrive_expect_tx(bar, __popc(valid) * rows * a.inter);
    __syncwarp();  // the bytes announced before any copy lands
    for (int r = 0; r < rows && e >= 0; ++r)
      hopper::bulk_copy(hopper::smem_u32(down_stage + (lane * kTileRows + r) * down_pitch),
                        down_row<uint8_t>(a, e, n0 + r), a.inter, bar);
  }

  // gate_up: group grp's four warps take the block's items grp, grp + 4, ... from the ring, with
  // the gate_up kernel's warp slices of H, partial sums and roundings.
  {
    const int grp = warp / kGateUpWarps, w4 = warp % kGateUpWarps;
    const int units = a.hidden / kFp8Block;
    const int slice = (units + kGateUpWarps - 1) / kGateUpWarps * kFp8Block;
    const int k0 = min(a.hidden, w4 * slice), k1 = min(a.hidden, k0 + slice);
    const int hb = a.hidden / kFp8Block;
    float* partial = gate_partial + grp * kGateUpWarps * kTileRows;  // [w4][16 rows]
    if (lane == 0) act_rows[warp] = static_cast<const T*>(a.x);
    __syncwarp();
    for (int i = grp; i < mine; i += kOneTokenGroups) {
      const int64_t item = first + i;
      const int chunk = static_cast<int>(item / slots), slot = static_cast<int>(item % slots);
      const int e = one_token_expert(a, slot);
      uint8_t* held = ring_stage + (i % ring) * ring_slot_bytes;
      hopper::mbar_wait(hopper::smem_u32(&full[i % ring]), (i / ring) & 1);
      const int i0 = chunk * kGateUpRows;
      if (e >= 0) {  // group-uniform
        const bool row_ok = i0 + g < a.inter;
        const GateUpRows<uint8_t> tile = gate_up_rows<uint8_t>(a, e, i0 + g);
        float c[1][4] = {};
        LateWait waited{false};
        warp_tile_fp8<T, 1, true, FromStageX>(held + g * ring_pitch, row_ok,
                                              held + (g + kGateUpRows) * ring_pitch, row_ok,
                                              tile.scale + tile.gate / kFp8Block * hb,
                                              tile.scale + tile.up / kFp8Block * hb,
                                              &act_rows[warp], 1, k0, k1, policy, waited, c);
        if (t == 0) {  // token 0's column: rows g (gate) and g + 8 (up)
          partial[w4 * kTileRows + g] = c[0][0];
          partial[w4 * kTileRows + g + 8] = c[0][2];
        }
      }
      hopper::named_sync(1 + grp, kGateUpWarps * 32);  // the slot read, the partials written
      if (w4 == 1 && lane == 0 && i + ring < mine) {
        // The slot's next item (ring places on). Its reads were generic-proxy loads ordered
        // before the barrier above; the bulk copy writes through the async proxy.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        copy_gate_up_item(a, first + i + ring, slots, held, ring_pitch,
                          hopper::smem_u32(&full[i % ring]));
      }
      if (e >= 0 && w4 == 0 && lane < kGateUpRows && i0 + lane < a.inter) {
        float gs = 0.0f, us = 0.0f;
#pragma unroll
        for (int w = 0; w < kGateUpWarps; ++w) {
          gs += partial[w * kTileRows + lane];
          us += partial[w * kTileRows + lane + 8];
        }
        const float gr = to_float(from_float<T>(gs));
        const float ur = to_float(from_float<T>(us));
        h_store<T>(a)[static_cast<int64_t>(slot) * a.inter + i0 + lane] =
            from_float<T>(gr / (1.0f + expf(-gr)) * ur);
      }
      hopper::named_sync(1 + grp, kGateUpWarps * 32);  // partial is rewritten next
    }
  }

  // Every block's h rows stored: meet at the counter (release, then acquire).
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    atomicAdd(a.barrier, 1u);
    hopper::spin_until(a.barrier, gridDim.x);  // traps if a block never became resident
  }
  __syncthreads();
  // Every block is resident and past its wait: the next kernel may take SMs as they free.
  if constexpr (kProgrammaticDown) pdl::launch_dependents();
  // A second arrival per block; the last one resets the counter for the next call (every block
  // has read it by then: values in [G, 2G) pass the poll above).
  if (tid == 0 && atomicAdd(a.barrier, 1u) == 2 * gridDim.x - 1) atomicExch(a.barrier, 0u);

  // down: warp items (slot, slice of I) from the staged rows, h through L2.
  hopper::mbar_wait(hopper::smem_u32(&staged), 0);
  {
    const int units = a.inter / kFp8Block;
    const int slice = (units + a.ksplit - 1) / a.ksplit * kFp8Block;
    for (int item = warp; item < slots * a.ksplit; item += kDownWarps) {
      const int slot = item / a.ksplit, part = item % a.ksplit;
      const int e = one_token_expert(a, slot);
      if (e < 0) continue;  // warp-uniform
      const int k0 = min(a.inter, part * slice), k1 = min(a.inter, k0 + slice);
      const uint8_t* lo_row = down_stage + (slot * kTileRows + g) * down_pitch;
      const uint8_t* hi_row = down_stage + (slot * kTileRows + g + 8) * down_pitch;
      if (lane == 0) act_rows[warp] = h_store<T>(a) + static_cast<int64_t>(slot) * a.inter;
      __syncwarp();
      float c[1][4] = {};
      LateWait waited{false};
      const float* row_scale = down_scale_row(a, e, n0);
      warp_tile_fp8<T, 1, true, FromStage>(lo_row, g < rows, hi_row, g + 8 < rows, row_scale,
                                           row_scale, &act_rows[warp], 1, k0, k1, policy, waited,
                                           c);
      if (t == 0) {
        float* y = down_partial + (part * slots + slot) * kTileRows;
        y[g] = c[0][0];
        y[g + 8] = c[0][2];
      }
      __syncwarp();  // act_rows is rewritten next
    }
  }
  __syncthreads();

  // The down kernel's combine at one token: routed pairs in j order, then the shared experts and
  // the residual, each rounded as the op's contract says.
  if (tid < rows) {
    const int r = tid;
    float acc = 0.0f;
    for (int j = 0; j < a.k; ++j) {
      if (one_token_expert(a, j) < 0) continue;
      float y = 0.0f;
      for (int s = 0; s < a.ksplit; ++s) y += down_partial[(s * slots + j) * kTileRows + r];
      acc = fmaf(a.weights[j], y, acc);
    }
    if (a.shared > 0) {
      float sh = 0.0f;
      for (int j = a.k; j < slots; ++j)
        for (int s = 0; s < a.ksplit; ++s) sh += down_partial[(s * slots + j) * kTileRows + r];
      acc = rounded<T>(rounded<T>(acc) + rounded<T>(sh));
    }
    if (a.residual) acc = to_float(static_cast<const T*>(a.residual)[n0 + r]) + rounded<T>(acc);
    static_cast<T*>(a.out)[n0 + r] = from_float<T>(acc);
  }
#endif
}

template <typename T>
void launch_as(const ExpertArgs& a, size_t smem, cudaStream_t s) {
  const auto kernel = moe_one_token_kernel<T>;
  // Opted in once per device, for the most any call may ask (opt_in keeps the first value).
  opt_in(kernel, smem_optin_limit() - kOneTokenStaticSmem);
  const unsigned grid = static_cast<unsigned>((a.hidden + kTileRows - 1) / kTileRows);
  launch_dependent_if(kProgrammaticGateUp && programmatic_launch_enabled(), kernel, dim3(grid),
                      dim3(kDownWarps * 32), smem, s, a);
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace

// The path takes one token, fp8 experts with 16-bit activations, aligned rows, exact products,
// the caller's counter, a grid of at most one block per SM (every block resident: they wait on
// each other), and a block's staged down rows and at least one gate_up item slot within what an
// SM offers.
size_t one_token_plan(ExpertArgs& a, bool fp8, DType dtype, bool vec) {
  if (a.barrier == nullptr || a.tokens != 1 || !fp8 || !vec || a.quantized ||
      (dtype != DType::f16 && dtype != DType::bf16) || !device_is_sm90_or_later())
    return 0;
  const int slots = a.k + a.shared;
  const int blocks = (a.hidden + kTileRows - 1) / kTileRows;
  if (slots > kOneTokenMaxSlots || blocks > sm_count()) return 0;
  const int64_t items = static_cast<int64_t>((a.inter + kGateUpRows - 1) / kGateUpRows) * slots;
  a.items_per_block = static_cast<int>((items + blocks - 1) / blocks);
  const size_t limit = static_cast<size_t>(smem_optin_limit() - kOneTokenStaticSmem);
  for (int ring = std::min(kOneTokenMaxRing, a.items_per_block); ring >= 1; --ring) {
    const size_t bytes = one_token_layout(slots, a.hidden, a.inter, a.ksplit, ring).bytes;
    if (bytes <= limit) {
      a.ring_slots = ring;
      return bytes;
    }
  }
  return 0;
}

void launch_one_token(const ExpertArgs& a, size_t smem, DType dtype, cudaStream_t s) {
  if (dtype == DType::bf16)
    launch_as<__nv_bfloat16>(a, smem, s);
  else
    launch_as<__half>(a, smem, s);
}

}  // namespace braid::cuda::moe_experts_device
