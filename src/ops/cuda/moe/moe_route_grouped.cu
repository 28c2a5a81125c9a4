// The grouped routers, one kernel in two scoring modes (a template parameter):
//   sigmoid_bias (moe_route_grouped, DeepSeek-V3): value s = sigmoid(x), score b = s + bias, a
//                group scores the sum of its two largest b, weights s / (sum + 1e-20) * scale;
//   softmax (moe_route_softmax_grouped, DeepSeek-V2): value and score p = softmax(x) (the bits
//                of moe_route_topk_softmax's kernel: router_softmax.cuh), a group scores its
//                largest p, weights p (/ sum of the chosen p when renormalize) * scale.
// A block of 256 threads takes one token (up to 512 tokens) or four (more: fewer, fuller
// blocks), in four stages:
//   1. the block's threads load every expert's logit of its tokens (coalesced loads) into shared
//      memory. sigmoid_bias computes s and b there: the sigmoid is computed in fp64 to round once
//      like the reference, which is slow per value, and spreading one token's experts over 256
//      threads, rather than 32 lanes looping over their share, is what keeps a call near the
//      launch cost when there are few tokens. Warp w then does the rest for the block's token w;
//      in softmax mode it first turns the logits into p (a warp maximum and sum, as
//      moe_route_topk_softmax does) and stores them back;
//   2. group scores, the sum of a group's top two b (or its top p): L lanes per group (the
//      largest power of two with L * n_group <= 32, else 1), each scanning a contiguous share of
//      its group, their (first, second) pairs merged by shuffles. O(E / 32) shared-memory reads
//      per lane;
//   3. group ranks: the lane of group g counts the groups that beat it (higher score, or equal
//      and a lower index) and keeps g when fewer than topk_group do. O(n_group) per group, which
//      is small where grouping is used (DeepSeek-V3: 8 groups);
//   4. k rounds of moe_route_topk_softmax's warp-wide "largest remaining b, lowest index among
//      equals" reduction, with the dropped groups' experts marked as taken beforehand. Lane j
//      keeps round j's expert and writes its weight from its value (the unbiased s, or p) in
//      shared memory.
// Stages 2 and 3 are skipped when every group is kept (topk_group == n_group, e.g. Kimi-K2's
// single group). Everything stays on the device (no host synchronisation, no allocation), and the
// reductions have a fixed order, so a call is graph-capturable and deterministic.
#include <limits>
#include <string>

#include "core/cuda_check.h"
#include "braid/error.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/moe/router_softmax.cuh"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

constexpr int kThreads = 256;         // stage 1's threads; one warp per token goes on
constexpr int kMaxTokensPerBlock = 4;  // what the shared memory below holds
constexpr int kOneTokenUpTo = 512;     // tokens per call up to which blocks take one token
constexpr int kSlots = ops::kMoeMaxExperts / 32;  // experts per lane at most
// Shared memory holds expert e's score at e + e / 32: one pad word per 32 keeps the lanes of
// stage 2, which read groups at a stride of the group size, on different banks for the usual
// sizes.
constexpr int kPaddedExperts = ops::kMoeMaxExperts + ops::kMoeMaxExperts / 32;

__device__ __forceinline__ int padded(int e) { return e + (e >> 5); }

enum class Scoring { sigmoid_bias, softmax };

struct GroupedArgs {
  const void* logits;
  const void* bias;  // sigmoid_bias only
  float* weights;
  int32_t* ids;
  int64_t tokens, logits_stride;
  int tokens_per_block;  // 1 or kMaxTokensPerBlock
  int experts, n_group, topk_group, k;
  bool renormalize;  // softmax only (sigmoid_bias always renormalises)
  float scale;
};

// The reference's formula to the bit: fp64, rounded once (see cpu/moe_route_grouped.cpp).
__device__ __forceinline__ float sigmoid_f32(float x) {
  return static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(x))));
}

// What the choices compare: a NaN counts as -inf (below every number).
__device__ __forceinline__ float choice_key(float v) { return isnan(v) ? -INFINITY : v; }

// (first, second) <- the two largest of itself and (other_first, other_second). Values only:
// which expert holds them does not matter to a group's score.
__device__ __forceinline__ void merge_top2(float& first, float& second, float other_first,
                                           float other_second) {
  if (other_first > first) {
    second = fmaxf(first, other_second);
    first = other_first;
  } else {
    second = fmaxf(second, other_first);
  }
}

// B: the bias's type (sigmoid_bias; unused in softmax mode).
template <Scoring kScoring, typename T, typename B>
__global__ void __launch_bounds__(kThreads) moe_route_grouped_kernel(GroupedArgs a) {
  constexpr bool kSoftmax = kScoring == Scoring::softmax;
  // The scores the choices compare (b or p, NaN as -inf); softmax mode holds the logits there
  // until the warp has turned them into p.
  __shared__ float scores_smem[kMaxTokensPerBlock][kPaddedExperts];
  __shared__ float values_smem[kMaxTokensPerBlock][ops::kMoeMaxExperts];  // s or p
  __shared__ float group_scores_smem[kMaxTokensPerBlock][ops::kMoeMaxExperts];
  __shared__ bool kept_smem[kMaxTokensPerBlock][ops::kMoeMaxExperts];
  pdl::wait_then_release();

  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * a.tokens_per_block;

  // ---- 1. the logits (softmax), or s and b (sigmoid_bias), spread over the block ----
  for (int i = threadIdx.x; i < a.tokens_per_block * a.experts; i += kThreads) {
    const int w = i / a.experts, e = i - w * a.experts;
    if (t0 + w >= a.tokens) break;  // i only grows: the rest of this thread's share is past too
    const T* row = static_cast<const T*>(a.logits) + (t0 + w) * a.logits_stride;
    if constexpr (kSoftmax) {
      scores_smem[w][padded(e)] = to_float(row[e]);
    } else {
      const float s = sigmoid_f32(to_float(row[e]));
      values_smem[w][e] = s;
      scores_smem[w][padded(e)] = choice_key(s + to_float(static_cast<const B*>(a.bias)[e]));
    }
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = t0 + warp;
  if (warp >= a.tokens_per_block || t >= a.tokens) return;  // whole warps; only warp barriers below
  float* scores = scores_smem[warp];
  float* values = values_smem[warp];
  float* group_scores = group_scores_smem[warp];
  bool* kept = kept_smem[warp];
  const int group_size = a.experts / a.n_group;
  const bool all_kept = a.topk_group == a.n_group;

  float key[kSlots];
  if constexpr (kSoftmax) {
    // p = softmax(x) with moe_route_topk_softmax's expressions (router_softmax.cuh), so the same
    // bits; each lane rewrites its own experts' slots, which stage 2 then reads across lanes.
    float x[kSlots];
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int e = lane + 32 * i;
      x[i] = e < a.experts ? scores[padded(e)] : -INFINITY;
    }
    const float m = router::softmax_max(x);
    const float sum = router::softmax_sum(x, m, lane, a.experts);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int e = lane + 32 * i;
      key[i] = -INFINITY;
      if (e < a.experts) {
        const float p = router::softmax_p(x[i], m, sum);
        values[e] = p;
        key[i] = choice_key(p);
        scores[padded(e)] = key[i];
      }
    }
    __syncwarp();
  } else {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int e = lane + 32 * i;
      key[i] = e < a.experts ? scores[padded(e)] : -INFINITY;
    }
  }

  if (!all_kept) {
    // ---- 2. group scores ----
    const int lanes_per_group = a.n_group >= 32 ? 1 : 1 << (31 - __clz(32 / a.n_group));
    const int groups_per_pass = 32 / lanes_per_group;
    const int share = (group_size + lanes_per_group - 1) / lanes_per_group;
    const int sub = lane % lanes_per_group;
    for (int g0 = 0; g0 < a.n_group; g0 += groups_per_pass) {  // the same trip count in every lane
      const int g = g0 + lane / lanes_per_group;
      float first = -INFINITY, second = -INFINITY;
      if (g < a.n_group) {
        const int begin = sub * share, end = min(group_size, begin + share);
        for (int i = begin; i < end; ++i)
          merge_top2(first, second, scores[padded(g * group_size + i)], -INFINITY);
      }
      for (int o = lanes_per_group / 2; o > 0; o >>= 1)
        merge_top2(first, second, __shfl_xor_sync(0xffffffffu, first, o),
                   __shfl_xor_sync(0xffffffffu, second, o));
      if (sub == 0 && g < a.n_group)
        group_scores[g] = kSoftmax ? first  // the largest p (a NaN p was -inf already)
                                   : choice_key(group_size == 1 ? first : first + second);
    }
    __syncwarp();

    // ---- 3. the topk_group best groups ----
    for (int g = lane; g < a.n_group; g += 32) {
      const float mine = group_scores[g];
      int beaten_by = 0;
      for (int h = 0; h < a.n_group; ++h) {
        const float other = group_scores[h];
        beaten_by += other > mine || (other == mine && h < g);
      }
      kept[g] = beaten_by < a.topk_group;
    }
    __syncwarp();
  }

  // ---- 4. the k best experts of the kept groups ----
  uint32_t taken = 0;  // bit i: expert lane + 32 * i chosen already, or not in the race
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + 32 * i;
    if (e >= a.experts || (!all_kept && !kept[e / group_size])) taken |= 1u << i;
  }
  int my_id = 0;
  for (int j = 0; j < a.k; ++j) {
    float best = -INFINITY;
    int best_e = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int e = lane + 32 * i;
      if (!((taken >> i) & 1u) && (key[i] > best || (key[i] == best && e < best_e))) {
        best = key[i];
        best_e = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, o);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (other > best || (other == best && other_e < best_e)) {
        best = other;
        best_e = other_e;
      }
    }
    // The kept groups hold at least k experts, so every round finds one (keys are never NaN).
    if ((best_e & 31) == lane) taken |= 1u << (best_e >> 5);
    if (lane == j) my_id = best_e;
  }

  const float v = lane < a.k ? values[my_id] : 0.0f;
  float weight;
  if constexpr (kSoftmax) {
    // The sum as moe_route_topk_softmax's kernel takes it (lane j holds the j-th choice).
    weight = a.renormalize ? v / warp_sum(v) * a.scale : v * a.scale;
  } else {
    weight = v / (warp_sum(v) + 1e-20f) * a.scale;
  }
  if (lane < a.k) {
    a.weights[t * a.k + lane] = weight;
    a.ids[t * a.k + lane] = my_id;
  }
}

// One launch in either mode; `op` names the public op in the error message.
template <Scoring kScoring>
void launch(const char* op, GroupedArgs a, DType logits_dtype, DType bias_dtype, Stream stream) {
  a.tokens_per_block = a.tokens <= kOneTokenUpTo ? 1 : kMaxTokensPerBlock;
  const int64_t blocks = (a.tokens + a.tokens_per_block - 1) / a.tokens_per_block;
  if (blocks > std::numeric_limits<int32_t>::max())
    throw Error(ErrorKind::invalid_argument, std::string(op) +
                                                 ": too many tokens for one call (" +
                                                 std::to_string(a.tokens) + ")");
  auto s = static_cast<cudaStream_t>(stream.handle);
  const unsigned grid = static_cast<unsigned>(blocks);
  dispatch_float_type(logits_dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kScoring == Scoring::sigmoid_bias) {
      if (bias_dtype == DType::bf16) {
        launch_programmatic(moe_route_grouped_kernel<kScoring, T, __nv_bfloat16>, grid, kThreads,
                            0, s, a);
        return;
      }
    }
    launch_programmatic(moe_route_grouped_kernel<kScoring, T, float>, grid, kThreads, 0, s, a);
  });
  BRAID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_route_grouped(const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
                       int k, float routed_scaling_factor, const Tensor& topk_weights,
                       const Tensor& topk_ids, Stream stream) {
  GroupedArgs a{logits.data, bias.data, topk_weights.ptr<float>(), topk_ids.ptr<int32_t>(),
                logits.shape[0], logits.row_stride(), /*tokens_per_block=*/1,
                static_cast<int>(logits.shape[1]), n_group, topk_group, k,
                /*renormalize=*/true, routed_scaling_factor};
  launch<Scoring::sigmoid_bias>("moe_route_grouped", a, logits.dtype, bias.dtype, stream);
}

void moe_route_softmax_grouped(const Tensor& logits, int n_group, int topk_group, int k,
                               bool renormalize, float routed_scaling_factor,
                               const Tensor& topk_weights, const Tensor& topk_ids,
                               Stream stream) {
  GroupedArgs a{logits.data, nullptr, topk_weights.ptr<float>(), topk_ids.ptr<int32_t>(),
                logits.shape[0], logits.row_stride(), /*tokens_per_block=*/1,
                static_cast<int>(logits.shape[1]), n_group, topk_group, k, renormalize,
                routed_scaling_factor};
  launch<Scoring::softmax>("moe_route_softmax_grouped", a, logits.dtype, DType::f32, stream);
}

}  // namespace braid::cuda
