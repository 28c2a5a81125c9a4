// moe_experts' whole layer at one token in one launch (16-bit or fp8 experts): the kernel, its
// plan and its launch. moe_experts.cu runs the two kernels otherwise; moe_experts_device.cuh holds
// the tiles both use.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/launch_util.h"
#include "ops/cuda/moe/moe_experts_device.cuh"

namespace braid::cuda::moe_experts_device {

namespace {

// ---- one launch for the whole layer at one token ------------------------------------------------
//
// At one token moe_experts.cu's two kernels each pay a ramp and a drain: gate_up's warps take
// two dependent round trips for their 8 KB, and the down kernel's blocks start only as gate_up's
// leave their SMs, so its stream follows gate_up's (Qwen3-30B-A3B-FP8: 15.6 + 11.0 us a layer
// for 37.8 MB, 1.4 TB/s; docs/perf/decode.md, session 13). Here one block per 16 rows of H (at
// most one an SM, all resident) asks for nearly all of its bytes at once, through bulk copies
// into shared memory:
//   - its share of the gate_up items (8 intermediate rows of one expert: 8 gate rows and 8 up
//     rows, contiguous items per block, so every SM streams the same bytes) through a ring of R
//     entries, each refilled with the entry R places on as soon as it has been read;
//   - its 16 down rows of every chosen expert: in a stage of their own from the start where they
//     fit beside the ring (fp8 Qwen3-30B-A3B-FP8: 106 KB), else (16-bit experts) as the ring's
//     entries after the gate_up items, a few experts' rows an entry, arriving while the last
//     items are computed and the grid meets.
// Up to four groups of four warps compute the items from shared memory with the gate_up kernel's
// warp slices, sums and roundings (the same h bits), the blocks meet at a grid-wide counter, and each
// block runs the down kernel's items and combine over its staged rows (the same sums in the same
// order: out is bit for bit the two kernels'). The counter is the caller's
// (MoeExpertsExtras::barrier), zero at the call and left zero.
constexpr int kOneTokenGroups = kDownWarps / kGateUpWarps;  // gate_up items side by side
constexpr int kOneTokenMaxSlots = 32;   // routed + shared experts: one lane of warp 1 each
constexpr int kOneTokenMaxRing = 8;     // ring entries
// The groups that take gate_up items: one per ring entry up to four, and the ring a multiple of
// them (one_token_ring), so that each entry belongs to one group. A group then reads its entries
// in order and refills each one itself, so when it waits for an entry, the entry before it in that
// place has been read and its barrier phase is complete: a group can never be two phases ahead of
// a barrier, where a parity wait would pass at once on the older phase.
__host__ __device__ inline int one_token_groups(int ring) {
  return ring < kOneTokenGroups ? ring : kOneTokenGroups;
}
inline int one_token_ring(int ring) {
  return ring > kOneTokenGroups ? ring - ring % kOneTokenGroups : ring;
}
// Shared memory kept back from the dynamic allowance: the kernel's static barriers and row
// pointers (256 bytes), with room.
constexpr int kOneTokenStaticSmem = 1024;

// A staged row's pitch: its bytes, padded so that rows g and g + 1 fall 64 bytes apart modulo
// 128 (a quarter-warp's 16-byte loads of two rows then take distinct banks).
__host__ __device__ inline int one_token_pitch(int row_bytes) {
  return row_bytes + (64 - row_bytes % 128 + 128) % 128;
}

// Shared memory, in order: the down stage [slots][16][down pitch] (none when the ring carries
// the down rows), the ring [R][entry], the down partials [ksplit][slots][16] and the groups'
// gate_up partials [groups][4 warps][16]. A ring entry is a gate_up item [16][gate_up pitch], or
// per_entry experts' down rows [per_entry][16][down pitch] (per_entry 0: the down stage).
struct OneTokenLayout {
  int gate_pitch, down_pitch;   // a staged row's bytes
  size_t expert_down;           // one expert's 16 down rows
  size_t entry;                 // a ring entry
  size_t down, ring, partials;  // offsets
  size_t bytes;                 // in all
};
__host__ __device__ inline OneTokenLayout one_token_layout(int slots, int hidden, int inter,
                                                           int elem, int ksplit, int ring,
                                                           int per_entry) {
  OneTokenLayout l;
  l.gate_pitch = one_token_pitch(hidden * elem);
  l.down_pitch = one_token_pitch(inter * elem);
  l.expert_down = static_cast<size_t>(kTileRows) * l.down_pitch;
  const size_t item = static_cast<size_t>(kTileRows) * l.gate_pitch;
  const size_t packed = static_cast<size_t>(per_entry) * l.expert_down;
  l.entry = item > packed ? item : packed;
  l.down = 0;
  l.ring = per_entry == 0 ? slots * l.expert_down : 0;
  l.partials = l.ring + static_cast<size_t>(ring) * l.entry;
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

// Copies gate_up item `item` (chunk = item / slots, slot = item % slots) into `dst`: its 8 gate
// rows to rows 0-7, its 8 up rows to rows 8-15, completing on `bar` (an expert of -1 copies
// nothing, but the barrier's phase still completes). One thread.
template <typename W>
__device__ __forceinline__ void copy_gate_up_item(const ExpertArgs& a, int64_t item, int slots,
                                                  uint8_t* dst, int pitch, uint32_t bar) {
  const int chunk = static_cast<int>(item / slots);
  const int e = one_token_expert(a, static_cast<int>(item % slots));
  const int i0 = chunk * kGateUpRows, rows = e < 0 ? 0 : min(kGateUpRows, a.inter - i0);
  const uint32_t row_bytes = static_cast<uint32_t>(a.hidden * sizeof(W));
  hopper::mbar_arrive_expect_tx(bar, 2u * rows * row_bytes);
  for (int r = 0; r < rows; ++r) {
    const GateUpRows<W> t = gate_up_rows<W>(a, e, i0 + r);
    hopper::bulk_copy(hopper::smem_u32(dst + r * pitch), t.base + t.gate * a.hidden, row_bytes, bar);
    hopper::bulk_copy(hopper::smem_u32(dst + (r + kGateUpRows) * pitch), t.base + t.up * a.hidden,
                      row_bytes, bar);
  }
}

// Copies the block's `rows` down rows (from n0) of slots [s0, s0 + n) into `dst`, slot s0 + j's at
// dst + j * expert_bytes, completing on `bar` (slots whose expert is -1 copy nothing). One thread.
template <typename W>
__device__ __forceinline__ void copy_down_rows(const ExpertArgs& a, int s0, int n, int n0,
                                               int rows, uint8_t* dst, size_t expert_bytes,
                                               int pitch, uint32_t bar) {
  const uint32_t row_bytes = static_cast<uint32_t>(a.inter * sizeof(W));
  int valid = 0;
  for (int j = 0; j < n; ++j) valid += one_token_expert(a, s0 + j) >= 0;
  hopper::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(valid * rows) * row_bytes);
  for (int j = 0; j < n; ++j) {
    const int e = one_token_expert(a, s0 + j);
    for (int r = 0; r < rows && e >= 0; ++r)
      hopper::bulk_copy(hopper::smem_u32(dst + j * expert_bytes + r * pitch),
                        down_row<W>(a, e, n0 + r), row_bytes, bar);
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

template <typename T, bool kFp8>
__global__ void __launch_bounds__(kDownWarps * 32, 1) moe_one_token_kernel(const ExpertArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // cp.async.bulk and transaction barriers: the host takes this path on 9.0+ only
#else
  using W = std::conditional_t<kFp8, uint8_t, T>;  // a weight element
  extern __shared__ __align__(128) uint8_t dyn[];
  __shared__ __align__(8) uint64_t staged;                  // the down stage
  __shared__ __align__(8) uint64_t full[kOneTokenMaxRing];  // the ring's entries
  __shared__ const T* act_rows[kDownWarps];  // per warp: the tile's one activation row (x or h)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int slots = a.k + a.shared, ring = a.ring_slots, per_entry = a.down_per_entry;
  const int n0 = blockIdx.x * kTileRows, rows = min(kTileRows, a.hidden - n0);
  const OneTokenLayout layout = one_token_layout(slots, a.hidden, a.inter, sizeof(W), a.ksplit,
                                                 ring, per_entry);
  uint8_t* down_stage = dyn + layout.down;
  uint8_t* ring_stage = dyn + layout.ring;
  float* down_partial = reinterpret_cast<float*>(dyn + layout.partials);
  float* gate_partial = down_partial + a.ksplit * slots * kTileRows;
  // This block's gate_up items: [first, first + mine), the i-th in ring entry i; with the down
  // rows in the ring, entries mine + p hold slots [p * per_entry, (p + 1) * per_entry).
  const int chunks = (a.inter + kGateUpRows - 1) / kGateUpRows;
  const int64_t items = static_cast<int64_t>(chunks) * slots;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * a.items_per_block;
  const int64_t left = items - first;
  const int mine =
      left <= 0 ? 0 : static_cast<int>(left < a.items_per_block ? left : a.items_per_block);
  const int packs = per_entry == 0 ? 0 : (slots + per_entry - 1) / per_entry;
  const int entries = mine + packs;
  const uint64_t policy = evict_first_policy();
  // Entry i's bytes into its place in the ring, completing on its barrier. One thread.
  auto fill = [&](int i) {
    uint8_t* dst = ring_stage + (i % ring) * layout.entry;
    const uint32_t bar = hopper::smem_u32(&full[i % ring]);
    if (i < mine) {
      copy_gate_up_item<W>(a, first + i, slots, dst, layout.gate_pitch, bar);
    } else {
      const int s0 = (i - mine) * per_entry;
      copy_down_rows<W>(a, s0, min(per_entry, slots - s0), n0, rows, dst, layout.expert_down,
                        layout.down_pitch, bar);
    }
  };

  if (tid == 0) {
    hopper::mbar_init(hopper::smem_u32(&staged), 1);
    for (int s = 0; s < ring; ++s) hopper::mbar_init(hopper::smem_u32(&full[s]), 1);
    hopper::fence_mbarrier_init();
  }
  // The router's ids and x come from the kernels before: nothing global is touched before this.
  if constexpr (kProgrammaticGateUp) pdl::wait();
  __syncthreads();  // the barriers' initialisation
  if (tid == 0)  // the ring's first entries, first: gate_up is the longer chain
    for (int i = 0; i < min(ring, entries); ++i) fill(i);
  if (per_entry == 0 && warp == 1) {  // the down stage: every chosen expert's rows, a lane each
    const int e = lane < slots ? one_token_expert(a, lane) : -1;
    const unsigned valid = __ballot_sync(kFull, e >= 0);
    const uint32_t row_bytes = static_cast<uint32_t>(a.inter * sizeof(W));
    if (lane == 0) hopper::mbar_arrive_expect_tx(hopper::smem_u32(&staged), __popc(valid) * rows * row_bytes);
    __syncwarp();  // the bytes announced before any copy lands
    for (int r = 0; r < rows && e >= 0; ++r)
      hopper::bulk_copy(hopper::smem_u32(down_stage + lane * layout.expert_down + r * layout.down_pitch),
                        down_row<W>(a, e, n0 + r), row_bytes, hopper::smem_u32(&staged));
  }

  // gate_up: group grp's four warps take the block's items grp, grp + groups, ... from the ring
  // (entries of their own: one_token_groups), with the gate_up kernel's warp slices of H (fp8:
  // whole scale blocks), partial sums and roundings.
  {
    const int groups = one_token_groups(ring);
    const int grp = warp / kGateUpWarps, w4 = warp % kGateUpWarps;
    constexpr int kUnit = kFp8 ? kFp8Block : kStepCols;
    const int units = (a.hidden + kUnit - 1) / kUnit;
    const int slice = (units + kGateUpWarps - 1) / kGateUpWarps * kUnit;
    const int k0 = min(a.hidden, w4 * slice), k1 = min(a.hidden, k0 + slice);
    float* partial = gate_partial + grp * kGateUpWarps * kTileRows;  // [w4][16 rows]
    if (lane == 0) act_rows[warp] = static_cast<const T*>(a.x);
    __syncwarp();
    for (int i = grp; i < mine && grp < groups; i += groups) {
      const int64_t item = first + i;
      const int chunk = static_cast<int>(item / slots), slot = static_cast<int>(item % slots);
      const int e = one_token_expert(a, slot);
      const uint8_t* held = ring_stage + (i % ring) * layout.entry;
      hopper::mbar_wait(hopper::smem_u32(&full[i % ring]), (i / ring) & 1);
      const int i0 = chunk * kGateUpRows;
      if (e >= 0) {  // group-uniform
        const bool row_ok = i0 + g < a.inter;
        const uint8_t* gate_row = held + g * layout.gate_pitch;
        const uint8_t* up_row = held + (g + kGateUpRows) * layout.gate_pitch;
        float c[1][4] = {};
        LateWait waited{false};
        if constexpr (kFp8) {
          const int hb = a.hidden / kFp8Block;
          const GateUpRows<uint8_t> tile = gate_up_rows<uint8_t>(a, e, i0 + g);
          warp_tile_fp8<T, 1, true, FromStageX>(gate_row, row_ok, up_row, row_ok,
                                                tile.scale + tile.gate / kFp8Block * hb,
                                                tile.scale + tile.up / kFp8Block * hb,
                                                &act_rows[warp], 1, k0, k1, policy, waited, c);
        } else {
          warp_tile<T, 1, true, FromStageX>(reinterpret_cast<const T*>(gate_row), row_ok,
                                            reinterpret_cast<const T*>(up_row), row_ok,
                                            &act_rows[warp], 1, k0, k1, policy, waited, c);
        }
        if (t == 0) {  // token 0's column: rows g (gate) and g + 8 (up)
          partial[w4 * kTileRows + g] = c[0][0];
          partial[w4 * kTileRows + g + 8] = c[0][2];
        }
      }
      hopper::named_sync(1 + grp, kGateUpWarps * 32);  // the entry read, the partials written
      if (w4 == 1 && lane == 0 && i + ring < entries) {
        // The entry ring places on (this group's next in this place, or a down entry). The reads
        // of this one were generic-proxy loads ordered before the barrier above; the bulk copy
        // writes through the async proxy.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        fill(i + ring);
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

  // down: warp items (slot, slice of I) over the staged rows (fp8: whole scale blocks), h through L2.
  constexpr int kDownUnit = kFp8 ? kFp8Block : kStepCols;
  const int down_units = (a.inter + kDownUnit - 1) / kDownUnit;
  const int down_slice = (down_units + a.ksplit - 1) / a.ksplit * kDownUnit;
  // Slots [s0, s0 + n), slot s0 + j's rows at base + j * expert_down.
  auto down_items = [&](int s0, int n, const uint8_t* base) {
    for (int item = warp; item < n * a.ksplit; item += kDownWarps) {
      const int slot = s0 + item / a.ksplit, part = item % a.ksplit;
      const int e = one_token_expert(a, slot);
      if (e < 0) continue;  // warp-uniform
      const int k0 = min(a.inter, part * down_slice), k1 = min(a.inter, k0 + down_slice);
      const uint8_t* lo_row = base + (slot - s0) * layout.expert_down + g * layout.down_pitch;
      const uint8_t* hi_row = lo_row + 8 * layout.down_pitch;
      if (lane == 0) act_rows[warp] = h_store<T>(a) + static_cast<int64_t>(slot) * a.inter;
      __syncwarp();
      float c[1][4] = {};
      LateWait waited{false};
      if constexpr (kFp8) {
        const float* row_scale = down_scale_row(a, e, n0);
        warp_tile_fp8<T, 1, true, FromStage>(lo_row, g < rows, hi_row, g + 8 < rows, row_scale,
                                             row_scale, &act_rows[warp], 1, k0, k1, policy,
                                             waited, c);
      } else {
        warp_tile<T, 1, true, FromStage>(reinterpret_cast<const T*>(lo_row), g < rows,
                                         reinterpret_cast<const T*>(hi_row), g + 8 < rows,
                                         &act_rows[warp], 1, k0, k1, policy, waited, c);
      }
      if (t == 0) {
        float* y = down_partial + (part * slots + slot) * kTileRows;
        y[g] = c[0][0];
        y[g + 8] = c[0][2];
      }
      __syncwarp();  // act_rows is rewritten next
    }
  };
  if (per_entry == 0) {
    hopper::mbar_wait(hopper::smem_u32(&staged), 0);
    down_items(0, slots, down_stage);
  } else {
    for (int i = mine; i < entries; ++i) {
      const uint8_t* held = ring_stage + (i % ring) * layout.entry;
      hopper::mbar_wait(hopper::smem_u32(&full[i % ring]), (i / ring) & 1);
      const int s0 = (i - mine) * per_entry;
      down_items(s0, min(per_entry, slots - s0), held);
      __syncthreads();  // the entry read (its refill below, and the partials for the combine)
      if (tid == 0 && i + ring < entries) {
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        fill(i + ring);
      }
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

template <typename T, bool kFp8>
void launch_as(const ExpertArgs& a, size_t smem, cudaStream_t s) {
  const auto kernel = moe_one_token_kernel<T, kFp8>;
  // Opted in once per device, for the most any call may ask (opt_in keeps the first value).
  opt_in(kernel, smem_optin_limit() - kOneTokenStaticSmem);
  const unsigned grid = static_cast<unsigned>((a.hidden + kTileRows - 1) / kTileRows);
  launch_dependent_if(kProgrammaticGateUp && programmatic_launch_enabled(), kernel, dim3(grid),
                      dim3(kDownWarps * 32), smem, s, a);
  BRAID_CUDA_CHECK_LAUNCH();
}

// BRAID_MOE_ONE_TOKEN_DOWN=ring sends the down rows through the ring even where they fit a stage
// of their own (the A/B of the two forms on fp8 experts). Read at every call, so that one test
// process can take both forms.
bool down_through_ring_forced() {
  const char* v = std::getenv("BRAID_MOE_ONE_TOKEN_DOWN");
  return v != nullptr && std::strcmp(v, "ring") == 0;
}

}  // namespace

// The path takes one token, 16-bit or fp8 experts with 16-bit activations, aligned rows, exact
// products, the caller's counter, and a grid of at most one block per SM (every block resident:
// they wait on each other). Its down rows get a stage of their own where it fits beside a ring
// entry, else they follow the gate_up items through the ring (at least two entries: one is
// read while the next arrives).
size_t one_token_plan(ExpertArgs& a, bool fp8, DType dtype, bool vec) {
  if (a.barrier == nullptr || a.tokens != 1 || !vec || a.quantized ||
      (dtype != DType::f16 && dtype != DType::bf16) || !device_is_sm90_or_later())
    return 0;
  const int slots = a.k + a.shared;
  const int blocks = (a.hidden + kTileRows - 1) / kTileRows;
  if (slots > kOneTokenMaxSlots || blocks > sm_count()) return 0;
  const int elem = fp8 ? 1 : static_cast<int>(dtype_size(dtype));
  const int64_t items = static_cast<int64_t>((a.inter + kGateUpRows - 1) / kGateUpRows) * slots;
  a.items_per_block = static_cast<int>((items + blocks - 1) / blocks);
  const size_t limit = static_cast<size_t>(smem_optin_limit() - kOneTokenStaticSmem);
  if (!down_through_ring_forced())
    for (int r = std::min(kOneTokenMaxRing, a.items_per_block); r >= 1; --r) {
      const int ring = one_token_ring(r);
      const OneTokenLayout l = one_token_layout(slots, a.hidden, a.inter, elem, a.ksplit, ring, 0);
      if (l.bytes <= limit) {
        a.ring_slots = ring;
        a.down_per_entry = 0;
        return l.bytes;
      }
    }
  // Through the ring: as many experts' down rows an entry as a gate_up item's room holds.
  const OneTokenLayout one = one_token_layout(slots, a.hidden, a.inter, elem, a.ksplit, 1, 1);
  const size_t item = static_cast<size_t>(kTileRows) * one.gate_pitch;
  const int per_entry = std::max(1, static_cast<int>(std::min<size_t>(item / one.expert_down, slots)));
  const int packs = (slots + per_entry - 1) / per_entry;
  for (int r = std::min(kOneTokenMaxRing, a.items_per_block + packs); r >= 2; --r) {
    const int ring = one_token_ring(r);
    const OneTokenLayout l =
        one_token_layout(slots, a.hidden, a.inter, elem, a.ksplit, ring, per_entry);
    if (l.bytes <= limit) {
      a.ring_slots = ring;
      a.down_per_entry = per_entry;
      return l.bytes;
    }
  }
  return 0;
}

void launch_one_token(const ExpertArgs& a, size_t smem, DType dtype, bool fp8, cudaStream_t s) {
  if (dtype == DType::bf16)
    fp8 ? launch_as<__nv_bfloat16, true>(a, smem, s) : launch_as<__nv_bfloat16, false>(a, smem, s);
  else
    fp8 ? launch_as<__half, true>(a, smem, s) : launch_as<__half, false>(a, smem, s);
}

}  // namespace braid::cuda::moe_experts_device
