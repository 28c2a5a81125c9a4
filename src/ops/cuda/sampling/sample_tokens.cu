// sample_tokens on CUDA: one block per row (1024 threads while the rows fit the SMs, else 512),
// every intermediate in shared memory
// (no workspace), no host synchronisation. The row is read in passes (the first from HBM, the
// rest mostly from L2):
//   1. the maximum and its lowest index (greedy rows stop here);
//   2-4. top-k only: radix select (11 + 11 + 10 bits of an order key) of the top_k-th largest
//      logit among the candidates that can carry weight (skipped when they are no more than
//      top_k);
//   5. each kept token's probability (sampling::relative_prob) and integer weight, summed per
//      warp segment and to W, and, with top-p, a weighted histogram of the probabilities' top
//      bits (non-negative floats order like their bits);
//   6-7. top-p only: the same weighted radix select, 10 more bits at a time, giving the threshold
//      t and the kept mass exactly;
//   8. the draw: the segment sums (pass 5's, or again after top-p), the segment holding u split
//      again, down to 128 tokens that one warp scans in order (about 0.07 of a pass without
//      top-p, 1.07 with).
// Weights are integers, so every sum is exact and the token does not depend on how the block
// splits the row: it equals the CPU reference's. Passes after the first skip the exp2 of any token
// that cannot carry weight: below the top-k threshold, or with (l - m) * c more than 1/64 under
// log2 of the smallest probability that still counts (min_p, 2^-40, the bucket or threshold being
// selected). The exp2 is accurate to 2^-22, so the skipped tokens' weights are 0 anyway.
// docs/perf/sample_tokens.md has the bytes, the passes and the times.
#include <climits>
#include <cstdint>

#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/sample_tokens_math.h"

namespace braid::cuda {

namespace {

namespace smp = braid::sampling;

// Blocks of 1024 threads while the rows leave SMs idle (more loads in flight per row), else 512
// (two blocks per SM). The token does not depend on the choice: every sum is exact.
constexpr int kMaxWarps = 32;
constexpr int kUnroll = 4;  // float4 loads in flight per thread
constexpr unsigned kFull = 0xffffffffu;

struct SampleArgs {
  const float* logits;
  int64_t stride;
  int vocab;
  const float* temperature;
  const int32_t* top_k;
  const float* top_p;
  const float* min_p;
  const int64_t* seeds;
  const int64_t* steps;
  int32_t* tokens;
};

// Logits i .. i + 3 (i a multiple of 4); -inf past the end of the row.
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* __restrict__ row, int i, int vocab) {
  if (kVec && i + 3 < vocab) return *reinterpret_cast<const float4*>(row + i);
  float4 v;
  v.x = i < vocab ? row[i] : -INFINITY;
  v.y = i + 1 < vocab ? row[i + 1] : -INFINITY;
  v.z = i + 2 < vocab ? row[i + 2] : -INFINITY;
  v.w = i + 3 < vocab ? row[i + 3] : -INFINITY;
  return v;
}

// f(index, logit) for every logit of the row, each thread in ascending index order.
template <int kThreads, bool kVec, typename F>
__device__ __forceinline__ void for_each_logit(const float* __restrict__ row, int vocab, F&& f) {
  constexpr int kStep = kThreads * 4;  // logits per step of the whole block
  int base = threadIdx.x * 4;
  for (; base + (kUnroll - 1) * kStep + 3 < vocab; base += kUnroll * kStep) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load4<kVec>(row, base + u * kStep, vocab);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kStep;
      f(i, v[u].x);
      f(i + 1, v[u].y);
      f(i + 2, v[u].z);
      f(i + 3, v[u].w);
    }
  }
  for (; base < vocab; base += kStep) {
    const float4 v = load4<kVec>(row, base, vocab);
    f(base, v.x);
    if (base + 1 < vocab) f(base + 1, v.y);
    if (base + 2 < vocab) f(base + 2, v.z);
    if (base + 3 < vocab) f(base + 3, v.w);
  }
}

__device__ __forceinline__ uint64_t warp_sum_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

struct Shared {
  unsigned long long hist[1024];  // 8 KB: see hist_add
  unsigned long long warp_u64[kMaxWarps];
  unsigned long long seg_sum[kMaxWarps];  // the draw's segment sums
  float warp_value[kMaxWarps];
  int warp_index[kMaxWarps];
  // Broadcasts from one thread to the block.
  unsigned long long above, bin_mass, draw;
  int bin, lo, hi;
  float max_value;
  int max_index;
};

template <int kThreads>
__device__ __forceinline__ void clear_hist(Shared& s) {
  for (int i = threadIdx.x; i < 1024; i += kThreads) s.hist[i] = 0;
  __syncthreads();
}

template <int kThreads>
__device__ __forceinline__ uint64_t block_sum_u64(uint64_t v, Shared& s) {
  constexpr int kWarps = kThreads / 32;
  v = warp_sum_u64(v);
  if ((threadIdx.x & 31) == 0) s.warp_u64[threadIdx.x >> 5] = v;
  __syncthreads();
  uint64_t total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += s.warp_u64[w];
  __syncthreads();  // warp_u64 is written again by the next reduction
  return total;
}

// The lowest index of the largest value, over the block; every thread gets it.
template <int kThreads>
__device__ __forceinline__ void block_argmax(float v, int i, Shared& s, float* out_v, int* out_i) {
  constexpr int kWarps = kThreads / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, o);
    const int oi = __shfl_xor_sync(kFull, i, o);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    s.warp_value[threadIdx.x >> 5] = v;
    s.warp_index[threadIdx.x >> 5] = i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // v, i: warp 0's result
    for (int w = 1; w < kWarps; ++w)
      if (s.warp_value[w] > v || (s.warp_value[w] == v && s.warp_index[w] < i)) {
        v = s.warp_value[w];
        i = s.warp_index[w];
      }
    s.max_value = v;
    s.max_index = i;
  }
  __syncthreads();
  *out_v = s.max_value;
  *out_i = s.max_index;
}

// Histograms live in s.hist's 8 KB: 2048 u32 counts (top-k), or 1024 weight bins (top-p) kept as
// two u32 words each, low words then high words, because shared-memory atomics are native on 32
// bits (a 64-bit add is a compare-and-swap loop).
__device__ __forceinline__ void count_add(Shared& s, uint32_t bin) {
  atomicAdd(reinterpret_cast<uint32_t*>(s.hist) + bin, 1u);
}

__device__ __forceinline__ uint64_t count_of(const Shared& s, int bin) {
  return reinterpret_cast<const uint32_t*>(s.hist)[bin];
}

__device__ __forceinline__ void hist_add(Shared& s, uint32_t bin, uint64_t w) {
  uint32_t* lo = reinterpret_cast<uint32_t*>(s.hist) + bin;
  const auto wl = static_cast<uint32_t>(w), wh = static_cast<uint32_t>(w >> 32);
  const uint32_t old = atomicAdd(lo, wl);
  const uint32_t carry = old + wl < old ? 1u : 0u;  // this add wrapped the low word
  if (wh + carry != 0) atomicAdd(lo + 1024, wh + carry);
}

__device__ __forceinline__ uint64_t hist_mass(const Shared& s, int bin) {
  const uint32_t* lo = reinterpret_cast<const uint32_t*>(s.hist) + bin;
  return (static_cast<uint64_t>(lo[1024]) << 32) | lo[0];
}

// Radix select over one level's histogram (mass(b) of bin b): the largest bin d with
// above + (mass of bins >= d) >= target, given above < target <= above + (mass of all bins).
// Sets s.bin = d, s.above = above + (mass of bins > d), s.bin_mass = mass of bin d.
template <int kThreads, int kBins, typename Mass>
__device__ __forceinline__ void select_bin(Mass&& mass, uint64_t above, uint64_t target, Shared& s) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kPer = kBins / kThreads;
  static_assert(kPer * kThreads == kBins, "bins must split evenly over the threads");
  const int first = threadIdx.x * kPer;
  uint64_t h[kPer];
  uint64_t mine = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) mine += h[j] = mass(first + j);
  // The mass of the bins of higher threads: a suffix sum within the warp, then over warps.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint64_t suffix = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t other = __shfl_down_sync(kFull, suffix, o);
    if (lane + o < 32) suffix += other;
  }
  if (lane == 0) s.warp_u64[warp] = suffix;
  __syncthreads();
  uint64_t run = above + suffix - mine;
  for (int w = warp + 1; w < kWarps; ++w) run += s.warp_u64[w];
#pragma unroll
  for (int j = kPer - 1; j >= 0; --j) {
    if (run < target && run + h[j] >= target) {  // exactly one bin of the block
      s.bin = first + j;
      s.above = run;
      s.bin_mass = h[j];
    }
    run += h[j];
  }
  __syncthreads();  // s.* written; every thread is done reading the histogram and warp_u64
}

// Which tokens carry weight, and how much (the contract's w_i), given what is known so far.
struct Keep {
  float m, c, min_p;
  float y_lo;          // skip the exp2 below this (never changes a weight: see the top)
  bool top_k;          // key_lo applies
  uint32_t key_lo;     // top-k: the key of the top_k-th largest logit
  uint32_t prob_lo;    // top-p: the bits of the threshold t (0 keeps all)

  __device__ __forceinline__ uint64_t weight(float x, uint32_t* prob_bits) const {
    const float l = smp::canonical(x);
    if (top_k && smp::logit_key(l) < key_lo) return 0;
    const float y = smp::mul_rn(smp::sub_rn(l, m), c);  // relative_prob's exponent, same bits
    if (y < y_lo) return 0;
    const float p = smp::exp2_nonpositive(y);
    if (!(p >= min_p)) return 0;
    *prob_bits = smp::float_bits(p);
    if (*prob_bits < prob_lo) return 0;
    return smp::weight_of(p);
  }

  // Raises the exp2 cut to what a probability must reach to count now.
  __device__ __forceinline__ void skip_below(float p) {
    if (p > 0.0f) y_lo = fmaxf(y_lo, log2f(p) - 1.0f / 64.0f);
  }
};

// The draw's segments: the block's warps split [lo, lo + len) into kWarps pieces of a multiple
// of 128 logits (so every lane's float4 stays 16-byte aligned).
template <int kThreads>
__device__ __forceinline__ int segment_size(int len) {
  constexpr int kWarps = kThreads / 32;
  return ((len + kWarps - 1) / kWarps + 127) / 128 * 128;
}

// The sum of f(logit) over [wlo, whi) (wlo a multiple of 4), by one warp: its lanes take chunks
// of 4, four chunks in flight. Logits past the row's end read as -inf, so f must give them 0.
template <bool kVec, typename F>
__device__ __forceinline__ uint64_t warp_range_sum(const float* __restrict__ row, int wlo, int whi,
                                                   int vocab, F&& f) {
  const int lane = threadIdx.x & 31;
  uint64_t sum = 0;
  int i = wlo + lane * 4;
  for (; i + 3 * 128 < whi; i += 4 * 128) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = load4<kVec>(row, i + u * 128, vocab);
#pragma unroll
    for (int u = 0; u < 4; ++u) sum += f(v[u].x) + f(v[u].y) + f(v[u].z) + f(v[u].w);
  }
  for (; i < whi; i += 128) {
    const float4 v = load4<kVec>(row, i, vocab);
    sum += f(v.x) + f(v.y) + f(v.z) + f(v.w);
  }
  return warp_sum_u64(sum);
}

// Probabilities at or above this go into top-p's first histogram while W is summed; lighter
// tokens (the long tail, where the shared-memory atomics would pile up on a few bins) only when
// the heavy ones cannot reach the target. A bin boundary: 2^-20 = bits 0x35800000.
constexpr uint32_t kHistFloorBits = 0x35800000u;

template <int kThreads, bool kVec>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads) sample_tokens_kernel(SampleArgs a) {
  constexpr int kWarps = kThreads / 32;
  __shared__ Shared s;
  const int r = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* __restrict__ row = a.logits + static_cast<int64_t>(r) * a.stride;
  const int vocab = a.vocab;
  const smp::RowParams p = smp::row_params(a.temperature[r], a.top_k[r], a.top_p[r], a.min_p[r],
                                           a.seeds[r], a.steps[r], vocab);
  const bool top_k = p.sample && p.top_k > 0;
  const bool top_p = p.sample && p.top_p < 1.0f;
  auto counts = [&](int b) { return count_of(s, b); };
  auto mass_of = [&](int b) { return hist_mass(s, b); };

  // Pass 1: the maximum (lowest index).
  float best = -INFINITY;
  int best_index = INT_MAX;
  for_each_logit<kThreads, kVec>(row, vocab, [&](int i, float x) {
    const float l = smp::canonical(x);
    if (l > best || best_index == INT_MAX) {  // ascending i: the first of equal values stays
      best = l;
      best_index = i;
    }
  });
  float m;
  int greedy;
  block_argmax<kThreads>(best, best_index, s, &m, &greedy);
  if (!p.sample || !(m > -INFINITY && m < INFINITY)) {
    if (threadIdx.x == 0) a.tokens[r] = greedy;
    return;
  }

  Keep keep{m, p.c, p.min_p, -INFINITY, false, 0u, 0u};
  keep.skip_below(fmaxf(p.min_p, 0x1p-40f));

  // Passes 2-4 (top-k): the top_k-th largest key, 11 + 11 + 10 bits, among the candidates
  // C = {y >= keep.y_lo} (y as relative_prob computes it, monotone in the logit: C is the upper
  // end of the row). Outside C every weight is 0 (p < max(min_p, 2^-40)), so: if |C| <= top_k,
  // top-k changes no weight and is skipped; else the top_k-th largest of C is the row's.
  if (top_k) {
    auto candidate_key = [&](float x, uint32_t* key) {
      const float l = smp::canonical(x);
      *key = smp::logit_key(l);
      return smp::mul_rn(smp::sub_rn(l, m), keep.c) >= keep.y_lo;
    };
    clear_hist<kThreads>(s);
    uint64_t mine = 0;
    for_each_logit<kThreads, kVec>(row, vocab, [&](int, float x) {
      uint32_t key;
      if (!candidate_key(x, &key)) return;
      ++mine;
      count_add(s, key >> 21);
    });
    const uint64_t candidates = block_sum_u64<kThreads>(mine, s);
    if (candidates > static_cast<uint64_t>(p.top_k)) {
      select_bin<kThreads, 2048>(counts, 0, static_cast<uint64_t>(p.top_k), s);
      const uint32_t d1 = static_cast<uint32_t>(s.bin);
      uint64_t above = s.above;
      clear_hist<kThreads>(s);
      for_each_logit<kThreads, kVec>(row, vocab, [&](int, float x) {
        uint32_t key;
        if (candidate_key(x, &key) && (key >> 21) == d1) count_add(s, (key >> 10) & 2047u);
      });
      __syncthreads();
      select_bin<kThreads, 2048>(counts, above, static_cast<uint64_t>(p.top_k), s);
      const uint32_t prefix = (d1 << 11) | static_cast<uint32_t>(s.bin);
      above = s.above;
      clear_hist<kThreads>(s);
      for_each_logit<kThreads, kVec>(row, vocab, [&](int, float x) {
        uint32_t key;
        if (candidate_key(x, &key) && (key >> 10) == prefix) count_add(s, key & 1023u);
      });
      __syncthreads();
      select_bin<kThreads, 1024>(counts, above, static_cast<uint64_t>(p.top_k), s);
      keep.top_k = true;
      keep.key_lo = (prefix << 10) | static_cast<uint32_t>(s.bin);
    }
  }

  // Pass 5: the weights, in the draw's first segments (their sums are kept: without top-p the
  // draw starts from them), the kept mass W, and top-p's first histogram (probability bits
  // 29..20) of the tokens at or above 2^-20.
  if (top_p) clear_hist<kThreads>(s);
  const int seg = segment_size<kThreads>(vocab);
  const int wlo = min(vocab, warp * seg), whi = min(vocab, wlo + seg);
  uint64_t heavy = 0;
  const uint64_t sum = warp_range_sum<kVec>(row, wlo, whi, vocab, [&](float x) -> uint64_t {
    uint32_t bits;
    const uint64_t w = keep.weight(x, &bits);
    if (top_p && w != 0 && bits >= kHistFloorBits) {
      hist_add(s, bits >> 20, w);
      heavy += w;
    }
    return w;
  });
  if (lane == 0) s.seg_sum[warp] = sum;
  __syncthreads();
  uint64_t total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += s.seg_sum[w];

  // Passes 6-7 (top-p): the threshold t, 10 bits at a time, and the mass it keeps.
  if (top_p) {
    const uint64_t target = smp::top_p_target(p.top_p, total);
    if (block_sum_u64<kThreads>(heavy, s) < target) {  // the tail matters: histogram every token
      clear_hist<kThreads>(s);
      for_each_logit<kThreads, kVec>(row, vocab, [&](int, float x) {
        uint32_t bits;
        const uint64_t w = keep.weight(x, &bits);
        if (w != 0) hist_add(s, bits >> 20, w);
      });
      __syncthreads();
    }
    select_bin<kThreads, 1024>(mass_of, 0, target, s);
    const uint32_t e1 = static_cast<uint32_t>(s.bin);
    uint64_t above = s.above;
    Keep level = keep;
    level.skip_below(smp::bits_float(e1 << 20));
    clear_hist<kThreads>(s);
    for_each_logit<kThreads, kVec>(row, vocab, [&](int, float x) {
      uint32_t bits;
      const uint64_t w = level.weight(x, &bits);
      if (w != 0 && (bits >> 20) == e1) hist_add(s, (bits >> 10) & 1023u, w);
    });
    __syncthreads();
    select_bin<kThreads, 1024>(mass_of, above, target, s);
    const uint32_t prefix = (e1 << 10) | static_cast<uint32_t>(s.bin);
    above = s.above;
    level.skip_below(smp::bits_float(prefix << 10));
    clear_hist<kThreads>(s);
    for_each_logit<kThreads, kVec>(row, vocab, [&](int, float x) {
      uint32_t bits;
      const uint64_t w = level.weight(x, &bits);
      if (w != 0 && (bits >> 10) == prefix) hist_add(s, bits & 1023u, w);
    });
    __syncthreads();
    select_bin<kThreads, 1024>(mass_of, above, target, s);
    keep.prob_lo = (prefix << 10) | static_cast<uint32_t>(s.bin);
    total = s.above + s.bin_mass;  // the mass of {p >= t}
    keep.skip_below(smp::bits_float(keep.prob_lo));
  }

  // Pass 8: the first index whose running weight passes u. Segment sums (pass 5's, unless top-p
  // changed the weights), the segment that holds u, split again, down to 128 logits.
  uint64_t u = smp::draw_point(p.seed, p.step, total);
  auto weight = [&](float x) -> uint64_t {
    uint32_t bits;
    return keep.weight(x, &bits);
  };
  int lo = 0, hi = vocab, len_seg = seg;
  bool have_sums = !top_p;
  while (hi - lo > 128) {
    if (!have_sums) {
      const int slo = min(hi, lo + warp * len_seg), shi = min(hi, slo + len_seg);
      const uint64_t part = warp_range_sum<kVec>(row, slo, shi, vocab, weight);
      if (lane == 0) s.seg_sum[warp] = part;
      __syncthreads();
    }
    have_sums = false;
    if (threadIdx.x == 0) {
      uint64_t run = 0;
      int w = 0;
      while (w < kWarps - 1 && run + s.seg_sum[w] <= u) run += s.seg_sum[w++];
      s.lo = min(hi, lo + w * len_seg);
      s.hi = min(hi, s.lo + len_seg);
      s.draw = u - run;
    }
    __syncthreads();
    lo = s.lo;
    hi = s.hi;
    u = s.draw;
    len_seg = segment_size<kThreads>(hi - lo);
    __syncthreads();  // s.seg_sum and s.lo.. are written again in the next round
  }
  if (warp != 0) return;
  int token = -1;
  for (int base = lo; base < hi && token < 0; base += 128) {
    const int i = base + lane * 4;
    const float4 v = load4<kVec>(row, i, vocab);
    const uint64_t w[4] = {weight(v.x), weight(v.y), weight(v.z), weight(v.w)};
    const uint64_t mine = w[0] + w[1] + w[2] + w[3];
    uint64_t incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint64_t other = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += other;
    }
    const uint64_t excl = incl - mine;
    const unsigned hit = __ballot_sync(kFull, excl <= u && u < incl);
    if (hit != 0) {
      const int owner = __ffs(hit) - 1;
      int found = -1;
      if (lane == owner) {
        uint64_t run = excl;
        for (int k = 0; k < 4 && found < 0; ++k) {
          run += w[k];
          if (run > u) found = i + k;
        }
      }
      token = __shfl_sync(kFull, found, owner);
    } else {
      u -= __shfl_sync(kFull, incl, 31);
    }
  }
  if (lane == 0) a.tokens[r] = token >= 0 ? token : greedy;  // token < 0 cannot happen: u < W
}

}  // namespace

void sample_tokens(const Tensor& logits, const Tensor& temperature, const Tensor& top_k,
                   const Tensor& top_p, const Tensor& min_p, const Tensor& seeds,
                   const Tensor& steps, const Tensor& workspace, const Tensor& tokens,
                   Stream stream) {
  (void)workspace;  // sample_tokens_workspace_bytes is 0
  SampleArgs a{logits.ptr<float>(),        logits.row_stride(),        static_cast<int>(logits.size(1)),
               temperature.ptr<float>(),   top_k.ptr<int32_t>(),       top_p.ptr<float>(),
               min_p.ptr<float>(),         seeds.ptr<int64_t>(),       steps.ptr<int64_t>(),
               tokens.ptr<int32_t>()};
  const bool vec = aligned16(a.logits) && a.stride % 4 == 0;
  const auto blocks = static_cast<unsigned>(logits.size(0));
  auto s = static_cast<cudaStream_t>(stream.handle);
  int sms = 0, device = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&device));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const bool wide = blocks <= static_cast<unsigned>(sms);
  if (wide && vec)
    sample_tokens_kernel<1024, true><<<blocks, 1024, 0, s>>>(a);
  else if (wide)
    sample_tokens_kernel<1024, false><<<blocks, 1024, 0, s>>>(a);
  else if (vec)
    sample_tokens_kernel<512, true><<<blocks, 512, 0, s>>>(a);
  else
    sample_tokens_kernel<512, false><<<blocks, 512, 0, s>>>(a);
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace braid::cuda
