// moe_fp8_block_scale: the CPU reference against a brute-force transcription of seed 003's
// definition; argument errors and the workspace size; CUDA against the CPU reference with
// flashinfer-bench's rule (small shapes and DeepSeek-V3's real one), tokens that choose no local
// expert, the workspace's bounds, determinism and CUDA-graph replay.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "braid/ops.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

using ops::MoeFp8Options;
constexpr int64_t kB = ops::kFp8Block;

// ---- parallel loops and random numbers -------------------------------------------------------

// fn(i) for every i in [0, n), spread over the machine's cores. The units are independent (each
// seeds its own numbers), so results do not depend on the thread count.
template <typename F>
void parallel_for(int64_t n, F&& fn) {
  const int64_t threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(n, 1));
  std::atomic<int64_t> next{0};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      try {
        for (int64_t i = next++; i < n; i = next++) fn(i);
      } catch (...) {
        errors[static_cast<size_t>(w)] = std::current_exception();
      }
    });
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Standard normal numbers (splitmix64 and Box-Muller): cheap to seed per unit of work, and fast
// enough for the real shape's 1.4 G weights.
class Normal {
 public:
  explicit Normal(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  float operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(next() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
    spare_ = static_cast<float>(r * std::sin(angle));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(angle));
  }

 private:
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
  bool has_spare_ = false;
  float spare_ = 0;
};

uint64_t unit_seed(uint64_t seed, int64_t unit) {
  return seed ^ (static_cast<uint64_t>(unit) * 0xD1B54A32D192ED03ull);
}

// ---- problems: flashinfer's test generator -----------------------------------------------------

struct Shape {
  int64_t global_experts, n_group, topk_group, top_k, local_experts, hidden, inter;
};

MoeFp8Options options_of(const Shape& s, int terms = 3) {
  MoeFp8Options o;
  o.n_group = static_cast<int>(s.n_group);
  o.topk_group = static_cast<int>(s.topk_group);
  o.top_k = static_cast<int>(s.top_k);
  o.intermediate_terms = terms;
  return o;
}

constexpr float kScalingFactor = 2.5f;  // DeepSeek-V3's routed_scaling_factor

struct Weights {
  OwnedTensor w1, w1_scale, w2, w2_scale;
};

struct Inputs {
  OwnedTensor logits, bias, x, x_scale;
  int offset = 0;
};

// q [E, N, K] f8e4m3 and scale [E, N / 128, K / 128]: randn per value, one scale amax / 448 per
// 128 x 128 block. One unit of work per (expert, row block).
void fill_weight_blocks(const Tensor& q, const Tensor& scale, uint64_t seed) {
  const int64_t n = q.shape[1], k = q.shape[2], units = q.shape[0] * (n / kB);
  parallel_for(units, [&](int64_t u) {
    Normal normal(unit_seed(seed, u));
    std::vector<float> v(static_cast<size_t>(kB * k));
    for (float& x : v) x = normal();
    for (int64_t bj = 0; bj < k / kB; ++bj) {
      float amax = 0;
      for (int64_t i = 0; i < kB; ++i)
        for (int64_t j = bj * kB; j < (bj + 1) * kB; ++j) amax = std::max(amax, std::fabs(v[i * k + j]));
      const float s = amax > 0 ? amax / 448.0f : 1.0f;
      scale.ptr<float>()[u * (k / kB) + bj] = s;
      for (int64_t i = 0; i < kB; ++i)
        for (int64_t j = bj * kB; j < (bj + 1) * kB; ++j)
          q.ptr<uint8_t>()[(u * kB + i) * k + j] = float_to_f8e4m3(v[i * k + j] / s);
    }
  });
}

Weights make_weights(const Shape& s, uint64_t seed) {
  const int64_t e = s.local_experts, h = s.hidden, i = s.inter;
  Weights w{OwnedTensor(DType::f8e4m3, {e, 2 * i, h}, Device::cpu()),
            OwnedTensor(DType::f32, {e, 2 * i / kB, h / kB}, Device::cpu()),
            OwnedTensor(DType::f8e4m3, {e, h, i}, Device::cpu()),
            OwnedTensor(DType::f32, {e, h / kB, i / kB}, Device::cpu())};
  fill_weight_blocks(w.w1, w.w1_scale, seed);
  fill_weight_blocks(w.w2, w.w2_scale, seed + 1);
  return w;
}

// logits randn and bias randn (bf16); with `boost`, the local experts' logits + 10 and their bias
// |randn| + 5, so that tokens choose them. Without, the bias is 0.1 randn: a bias of randn, shared
// by all tokens, would outweigh the sigmoids (within (0, 1)) and send every token to the same
// groups, where a mix of local and other choices is wanted. Activations 2 * randn, quantized per
// (token, 128 columns) with scale amax / 448, the scales stored transposed [H / 128, T].
Inputs make_inputs(const Shape& s, int64_t tokens, int offset, bool boost, uint64_t seed) {
  const int64_t eg = s.global_experts, h = s.hidden;
  Inputs in{OwnedTensor(DType::f32, {tokens, eg}, Device::cpu()),
            OwnedTensor(DType::bf16, {eg}, Device::cpu()),
            OwnedTensor(DType::f8e4m3, {tokens, h}, Device::cpu()),
            OwnedTensor(DType::f32, {h / kB, tokens}, Device::cpu()), offset};
  Normal normal(seed);
  auto local = [&](int64_t e) { return e >= offset && e < offset + s.local_experts; };
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < eg; ++e)
      in.logits.view().ptr<float>()[t * eg + e] = normal() + (boost && local(e) ? 10.0f : 0.0f);
  for (int64_t e = 0; e < eg; ++e) {
    const float b = normal();
    store_from_float(in.bias.data(), DType::bf16, e,
                     !boost ? 0.1f * b : local(e) ? std::fabs(b) + 5.0f : b);
  }
  std::vector<float> block(static_cast<size_t>(kB));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t b = 0; b < h / kB; ++b) {
      float amax = 0;
      for (float& v : block) {
        v = 2.0f * normal();
        amax = std::max(amax, std::fabs(v));
      }
      const float sc = amax > 0 ? amax / 448.0f : 1.0f;
      in.x_scale.view().ptr<float>()[b * tokens + t] = sc;
      for (int64_t j = 0; j < kB; ++j)
        in.x.view().ptr<uint8_t>()[t * h + b * kB + j] = float_to_f8e4m3(block[j] / sc);
    }
  return in;
}

// ---- running the op --------------------------------------------------------------------------

// The CPU reference, one token per unit of work (the op on one-token views; the routing is per
// token, so this is the whole batch's answer). Returns the bf16 output as floats.
std::vector<float> cpu_reference(const Inputs& in, const Weights& w, const MoeFp8Options& o) {
  const int64_t tokens = in.logits.view().shape[0], hidden = in.x.view().shape[1];
  auto out = poisoned(DType::bf16, {tokens, hidden}, Device::cpu());
  parallel_for(tokens, [&](int64_t t) {
    ops::moe_fp8_block_scale(in.logits.view().slice(0, t, t + 1), in.bias,
                             in.x.view().slice(0, t, t + 1), in.x_scale.view().slice(1, t, t + 1),
                             w.w1, w.w1_scale, w.w2, w.w2_scale, in.offset, kScalingFactor, o,
                             Tensor{}, out.view().slice(0, t, t + 1));
  });
  return to_floats(out);
}

struct DeviceLayer {
  OwnedTensor logits, bias, x, x_scale, w1, w1_scale, w2, w2_scale;
};

DeviceLayer to_cuda(const Inputs& in, const Weights& w) {
  const Device d = Device::cuda();
  return {to_device(in.logits, d), to_device(in.bias, d), to_device(in.x, d),
          to_device(in.x_scale, d), to_device(w.w1, d), to_device(w.w1_scale, d),
          to_device(w.w2, d), to_device(w.w2_scale, d)};
}

constexpr int64_t kGuardBytes = 4096;

// The op on CUDA into a poisoned output, with a workspace of exactly the size asked for (poisoned
// too) followed by guard bytes that must come back untouched.
std::vector<float> run_cuda(const DeviceLayer& d, int offset, const MoeFp8Options& o) {
  const int64_t tokens = d.logits.view().shape[0], hidden = d.x.view().shape[1];
  const int64_t need = ops::moe_fp8_block_scale_workspace_bytes(
      tokens, hidden, d.w1.view().shape[1] / 2, d.w1.view().shape[0], o);
  OwnedTensor storage(DType::u8, {need + kGuardBytes}, Device::cuda());
  const Tensor workspace = storage.view().slice(0, 0, need);
  fill_bytes(workspace, 0xFF);
  fill_bytes(storage.view().slice(0, need, need + kGuardBytes), 0xAB);
  auto out = poisoned(DType::bf16, {tokens, hidden}, Device::cuda());
  ops::moe_fp8_block_scale(d.logits, d.bias, d.x, d.x_scale, d.w1, d.w1_scale, d.w2, d.w2_scale,
                           offset, kScalingFactor, o, workspace, out);
  const std::vector<float> guard = to_floats(storage.view().slice(0, need, need + kGuardBytes));
  EXPECT_EQ(std::count(guard.begin(), guard.end(), 171.0f), kGuardBytes)
      << "bytes past moe_fp8_block_scale_workspace_bytes were written";
  return to_floats(out);
}

// flashinfer-bench's rule: an element fails only when |diff| > 1e-2 and |diff| / |ref| > 1e-2.
struct Agreement {
  double pass_ratio = 0, rel_l2 = 0;
};

Agreement judge(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  int64_t pass = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    const double diff = std::fabs(double{got[i]} - ref[i]);
    if (diff <= 1e-2 || diff <= 1e-2 * std::fabs(ref[i])) ++pass;  // NaN passes neither
  }
  return {got.empty() ? 1.0 : static_cast<double>(pass) / static_cast<double>(got.size()),
          rel_error(got, ref)};
}

// ---- the CPU reference against the definition, written out here -------------------------------

// Seed 003's definition transcribed loop by loop, for tiny shapes: everything dequantized to fp32
// first, the routing formula, then for each local expert the tokens that chose it (sums in fp64).
// `local_pairs` counts the (token, choice) pairs that hit a local expert.
std::vector<float> brute_force(const Inputs& in, const Weights& w, const Shape& s,
                               int64_t* local_pairs) {
  const int64_t tokens = in.logits.view().shape[0], eg = s.global_experts, h = s.hidden,
                inter = s.inter, experts = s.local_experts;
  auto f8 = [](const OwnedTensor& t, int64_t i) { return f8e4m3_to_float(t.view().ptr<uint8_t>()[i]); };
  auto f32 = [](const OwnedTensor& t, int64_t i) { return t.view().ptr<float>()[i]; };

  std::vector<float> a(static_cast<size_t>(tokens * h));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < h; ++c) a[t * h + c] = f8(in.x, t * h + c) * f32(in.x_scale, (c / kB) * tokens + t);
  std::vector<float> w13(static_cast<size_t>(experts * 2 * inter * h)), w2(static_cast<size_t>(experts * h * inter));
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t n = 0; n < 2 * inter; ++n)
      for (int64_t c = 0; c < h; ++c) {
        const int64_t i = (e * 2 * inter + n) * h + c;
        w13[i] = f8(w.w1, i) * f32(w.w1_scale, (e * (2 * inter / kB) + n / kB) * (h / kB) + c / kB);
      }
    for (int64_t n = 0; n < h; ++n)
      for (int64_t c = 0; c < inter; ++c) {
        const int64_t i = (e * h + n) * inter + c;
        w2[i] = f8(w.w2, i) * f32(w.w2_scale, (e * (h / kB) + n / kB) * (inter / kB) + c / kB);
      }
  }

  // Routing: weight[t][e] for the chosen global experts, 0 elsewhere (a chosen s is never 0).
  std::vector<double> weight(static_cast<size_t>(tokens * eg), 0.0);
  const int64_t group_size = eg / s.n_group;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> sig(eg), biased(eg);
    for (int64_t e = 0; e < eg; ++e) {
      sig[e] = 1.0f / (1.0f + std::exp(-f32(in.logits, t * eg + e)));
      biased[e] = sig[e] + load_as_float(in.bias.data(), DType::bf16, e);
    }
    std::vector<float> group_score(s.n_group);
    for (int64_t g = 0; g < s.n_group; ++g) {
      std::vector<float> members(biased.begin() + g * group_size, biased.begin() + (g + 1) * group_size);
      std::sort(members.begin(), members.end(), std::greater<float>());
      group_score[g] = members[0] + (group_size > 1 ? members[1] : 0.0f);
    }
    std::vector<int64_t> groups(s.n_group);
    for (int64_t g = 0; g < s.n_group; ++g) groups[g] = g;
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int64_t x, int64_t y) { return group_score[x] > group_score[y]; });
    std::vector<int64_t> candidates;
    for (int64_t e = 0; e < eg; ++e)
      if (std::find(groups.begin(), groups.begin() + s.topk_group, e / group_size) !=
          groups.begin() + s.topk_group)
        candidates.push_back(e);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](int64_t x, int64_t y) { return biased[x] > biased[y]; });
    double chosen_sum = 0;
    for (int64_t j = 0; j < s.top_k; ++j) chosen_sum += sig[candidates[j]];
    for (int64_t j = 0; j < s.top_k; ++j)
      weight[t * eg + candidates[j]] = sig[candidates[j]] / (chosen_sum + 1e-20) * kScalingFactor;
  }

  std::vector<double> out(static_cast<size_t>(tokens * h), 0.0);
  std::vector<float> g1(static_cast<size_t>(2 * inter)), c(static_cast<size_t>(inter));
  *local_pairs = 0;
  for (int64_t le = 0; le < experts; ++le) {
    const int64_t ge = in.offset + le;
    if (ge < 0 || ge >= eg) continue;
    for (int64_t t = 0; t < tokens; ++t) {
      if (weight[t * eg + ge] == 0) continue;
      ++*local_pairs;
      for (int64_t n = 0; n < 2 * inter; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < h; ++k) acc += double{a[t * h + k]} * w13[(le * 2 * inter + n) * h + k];
        g1[n] = static_cast<float>(acc);
      }
      for (int64_t i = 0; i < inter; ++i) {
        const float x2 = g1[inter + i];
        c[i] = x2 * (1.0f / (1.0f + std::exp(-x2))) * g1[i];  // silu(X2) * X1
      }
      for (int64_t n = 0; n < h; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < inter; ++k) acc += double{c[k]} * w2[(le * h + n) * inter + k];
        out[t * h + n] += weight[t * eg + ge] * static_cast<float>(acc);
      }
    }
  }
  std::vector<float> result(out.size());
  for (size_t i = 0; i < out.size(); ++i) result[i] = bf16_to_float(float_to_bf16(static_cast<float>(out[i])));
  return result;
}

const Shape kTiny{16, 4, 2, 4, 8, 256, 128};

// Local experts [offset, offset + 8) of 16: inside, past the end, and before the start. 16 tokens
// with unboosted routing: the draw is repeated until some of their choices are local and some
// not. (With offset -4 only experts 0-3, one group, are local, and whole draws of 16 tokens miss
// it: about once in 300 runs, where "2^-16 at most" was assumed and the test failed instead.)
TEST(MoeFp8BlockScaleReference, MatchesTheDefinition) {
  for (int offset : {4, 12, -4}) {
    const int64_t tokens = 16;
    uint64_t seed = 0;
    Weights w;
    Inputs in;
    std::vector<float> want;
    for (int draw = 0;; ++draw) {
      ASSERT_LT(draw, 20) << "no draw with local and remote choices";
      seed = fresh_seed();
      w = make_weights(kTiny, seed);
      in = make_inputs(kTiny, tokens, offset, false, seed + 7);
      int64_t local_pairs = 0;
      want = brute_force(in, w, kTiny, &local_pairs);
      if (local_pairs > 0 && local_pairs < tokens * kTiny.top_k) break;
    }
    SCOPED_TRACE("offset " + std::to_string(offset) + ", seed " + std::to_string(seed));

    auto out = poisoned(DType::bf16, {tokens, kTiny.hidden}, Device::cpu());
    ops::moe_fp8_block_scale(in.logits, in.bias, in.x, in.x_scale, w.w1, w.w1_scale, w.w2,
                             w.w2_scale, offset, kScalingFactor, options_of(kTiny), Tensor{}, out);
    const std::vector<float> got = to_floats(out);
    // The same fp32 values summed in fp64 in another order (and silu written another way, which
    // can move C by an fp32 step): the bf16 results agree but for a rare rounding on the other
    // side of a rounding boundary, one bf16 step (2^-7 relative at most), and for elements that
    // cancel to almost nothing, hence the absolute floor far below the outputs' size.
    const double largest = std::fabs(*std::max_element(want.begin(), want.end(), [](float x, float y) {
      return std::fabs(x) < std::fabs(y);
    }));
    int64_t equal = 0, nonzero = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      equal += got[i] == want[i];
      nonzero += want[i] != 0;
      ASSERT_LE(std::fabs(got[i] - want[i]), std::ldexp(std::fabs(want[i]), -7) + 1e-5 * largest)
          << "element " << i << " of " << got.size();
    }
    EXPECT_GE(equal, static_cast<int64_t>(got.size()) * 9 / 10);
    EXPECT_GT(nonzero, 0);
  }
}

TEST(MoeFp8BlockScaleReference, NoLocalChoiceGivesZeros) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Weights w = make_weights(kTiny, seed);
  for (int offset : {1000, -1000, 16}) {
    const Inputs in = make_inputs(kTiny, 3, offset, false, seed + offset);
    auto out = poisoned(DType::bf16, {3, kTiny.hidden}, Device::cpu());
    ops::moe_fp8_block_scale(in.logits, in.bias, in.x, in.x_scale, w.w1, w.w1_scale, w.w2,
                             w.w2_scale, offset, kScalingFactor, options_of(kTiny), Tensor{}, out);
    for (float v : to_floats(out)) ASSERT_EQ(v, 0.0f) << "offset " << offset;
  }
}

// ---- the CUDA path's steps, on the CPU ops ----------------------------------------------------

// The composition moe_fp8_block_scale runs on CUDA (route, local ids, permute, gather, GEMM1 with
// the SwiGLU as `terms` fp8 terms, GEMM2, combine), on the CPU ops, with the transposed scales at
// the same padded row stride. The CPU moe_permute refuses ids outside [0, E), so the non-local
// pairs go to an extra expert E here: the GEMMs (given offsets[0 .. E]) never touch its rows, ys
// keeps 0 there, and they add nothing to the output (on CUDA, moe_permute gives them
// pair_rows = -1 instead). This shows without a GPU that the fp8 intermediate meets the rule.
std::vector<float> cpu_pipeline(const Inputs& in, const Weights& w, const Shape& s, int terms) {
  const Device cpu = Device::cpu();
  const int64_t tokens = in.logits.view().shape[0], k = s.top_k, e = s.local_experts;
  const int64_t pairs = tokens * k, stride = (pairs + 3) / 4 * 4, h = s.hidden, i = s.inter;
  OwnedTensor topk_w(DType::f32, {tokens, k}, cpu), ids(DType::i32, {tokens, k}, cpu);
  ops::moe_route_grouped(in.logits, in.bias, static_cast<int>(s.n_group),
                         static_cast<int>(s.topk_group), static_cast<int>(k), kScalingFactor,
                         topk_w, ids);
  for (int64_t p = 0; p < pairs; ++p) {
    int32_t& id = ids.view().ptr<int32_t>()[p];
    const int64_t local = int64_t{id} - in.offset;
    id = static_cast<int32_t>(local >= 0 && local < e ? local : e);
  }
  OwnedTensor offsets(DType::i32, {e + 2}, cpu), sorted(DType::i32, {pairs}, cpu),
      pair_rows(DType::i32, {pairs}, cpu),
      scratch(DType::i32, {ops::moe_permute_workspace_size(pairs, e + 1)}, cpu);
  ops::moe_permute(ids, static_cast<int>(e + 1), offsets, sorted, pair_rows, scratch);
  const Tensor local_offsets = offsets.view().slice(0, 0, e + 1);

  OwnedTensor xs(DType::f8e4m3, {pairs, h}, cpu), xs_scale(DType::f32, {h / kB, stride}, cpu);
  ops::moe_gather_fp8(in.x, in.x_scale, sorted, static_cast<int>(k), xs,
                      xs_scale.view().slice(1, 0, pairs));
  OwnedTensor act(DType::f8e4m3, {pairs, terms * i}, cpu),
      act_scale(DType::f32, {terms * i / kB, stride}, cpu), ys(DType::f32, {pairs, h}, cpu);
  fill_bytes(ys, 0);
  ops::moe_grouped_gemm_fp8(xs, xs_scale.view().slice(1, 0, pairs), w.w1, w.w1_scale, local_offsets,
                            ops::MoeActivation::swiglu_gate_last, act,
                            act_scale.view().slice(1, 0, pairs));
  ops::moe_grouped_gemm_fp8(act, act_scale.view().slice(1, 0, pairs), w.w2, w.w2_scale,
                            local_offsets, ops::MoeActivation::none, ys, Tensor{});
  OwnedTensor out(DType::bf16, {tokens, h}, cpu);
  ops::moe_combine(ys, pair_rows, topk_w, out);
  return to_floats(out);
}

TEST(MoeFp8BlockScalePipeline, CpuStepsMeetTheRule) {
  const Shape small{64, 8, 4, 8, 16, 512, 256};
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Weights w = make_weights(small, seed);
  for (bool boost : {true, false}) {
    const Inputs in = make_inputs(small, 24, 16, boost, seed + 5);
    const std::vector<float> ref = cpu_reference(in, w, options_of(small));
    for (int terms : {3, 2, 1}) {
      const Agreement a = judge(cpu_pipeline(in, w, small, terms), ref);
      std::printf("[ moe_fp8 ] CPU steps, %s, %d term(s): %.2f%% pass, rel L2 error %.3g\n",
                  boost ? "boosted" : "unboosted", terms, 100 * a.pass_ratio, a.rel_l2);
      if (terms >= 2) {
        EXPECT_GE(a.pass_ratio, 0.95) << terms << " terms";
      }
      if (terms == 3) {
        EXPECT_LT(a.rel_l2, 2e-3);
      }
    }
  }
}

// ---- workspace size and argument errors ------------------------------------------------------

TEST(MoeFp8BlockScaleWorkspace, IsTheSumOfAlignedPieces) {
  // T 3, k 4 (12 pairs), H 256, I 128, E 8, 3 terms, each piece rounded up to 256 bytes:
  // topk_weights 48, topk_ids 48, offsets 36, sorted_pairs 48, pair_rows 48, permute scratch
  // 9 * 4 = 36 -> 6 * 256; xs 12 * 256 = 3072; xs_scale 2 * 12 * 4 -> 256; h 12 * 384 = 4608;
  // h_scale 3 * 12 * 4 -> 256; ys 12 * 256 * 4 = 12288.
  MoeFp8Options o = options_of(kTiny);
  EXPECT_EQ(ops::moe_fp8_block_scale_workspace_bytes(3, 256, 128, 8, o),
            6 * 256 + 3072 + 256 + 4608 + 256 + 12288);
  o.intermediate_terms = 1;  // h 12 * 128 = 1536, h_scale 48 -> 256
  EXPECT_EQ(ops::moe_fp8_block_scale_workspace_bytes(3, 256, 128, 8, o),
            6 * 256 + 3072 + 256 + 1536 + 256 + 12288);
  // DeepSeek-V3 at 8 tokens: every piece a multiple of 256, more with more tokens.
  const MoeFp8Options ds = options_of({256, 8, 4, 8, 32, 7168, 2048});
  const int64_t at8 = ops::moe_fp8_block_scale_workspace_bytes(8, 7168, 2048, 32, ds);
  EXPECT_EQ(at8 % 256, 0);
  EXPECT_GE(at8, 64 * (7168 + 3 * 2048 + 4 * 7168));
  EXPECT_GT(ops::moe_fp8_block_scale_workspace_bytes(9, 7168, 2048, 32, ds), at8);
  EXPECT_GT(ops::moe_fp8_block_scale_workspace_bytes(0, 7168, 2048, 32, ds), 0);
}

TEST(MoeFp8BlockScaleWorkspace, RefusesBadSizes) {
  const char* op = "moe_fp8_block_scale_workspace_bytes";
  const MoeFp8Options o = options_of(kTiny);
  auto bytes = [&](int64_t t, int64_t h, int64_t i, int64_t e, MoeFp8Options opt) {
    return ops::moe_fp8_block_scale_workspace_bytes(t, h, i, e, opt);
  };
  expect_error([&] { bytes(-1, 256, 128, 8, o); }, ErrorKind::invalid_argument, {op, "'tokens'"});
  expect_error([&] { bytes(3, 200, 128, 8, o); }, ErrorKind::invalid_argument, {op, "'hidden'", "200"});
  expect_error([&] { bytes(3, 256, 0, 8, o); }, ErrorKind::invalid_argument, {op, "'intermediate'"});
  expect_error([&] { bytes(3, 256, 128, 0, o); }, ErrorKind::invalid_argument, {op, "'local_experts'"});
  expect_error([&] { bytes(3, 256, 128, 513, o); }, ErrorKind::invalid_argument, {op, "'local_experts'"});
  MoeFp8Options bad = o;
  bad.top_k = 17;
  expect_error([&] { bytes(3, 256, 128, 8, bad); }, ErrorKind::invalid_argument, {op, "'top_k'"});
  bad = o;
  bad.intermediate_terms = 4;
  expect_error([&] { bytes(3, 256, 128, 8, bad); }, ErrorKind::invalid_argument,
               {op, "'intermediate_terms'"});
}

// Every tensor of a valid tiny call (T 3), which each error case then spoils in one place.
struct Args {
  Tensor logits, bias, x, x_scale, w1, w1_scale, w2, w2_scale, workspace, out;
  int offset = 4;
  float scale = kScalingFactor;
  MoeFp8Options o = options_of(kTiny);
  void run() const {
    ops::moe_fp8_block_scale(logits, bias, x, x_scale, w1, w1_scale, w2, w2_scale, offset, scale,
                             o, workspace, out);
  }
};

TEST(MoeFp8BlockScaleErrors, NameTheArgument) {
  const char* op = "moe_fp8_block_scale";
  const Weights w = make_weights(kTiny, 1);
  const Inputs in = make_inputs(kTiny, 3, 4, false, 2);
  auto out = OwnedTensor(DType::bf16, {3, 256}, Device::cpu());
  const Args good{in.logits, in.bias, in.x, in.x_scale, w.w1, w.w1_scale, w.w2, w.w2_scale, Tensor{}, out};
  good.run();  // the baseline is valid

  auto host = [](DType d, std::initializer_list<int64_t> shape) { return OwnedTensor(d, shape, Device::cpu()); };
  auto expect = [&](Args a, ErrorKind kind, std::vector<std::string> fragments) {
    fragments.insert(fragments.begin(), op);
    expect_error([&] { a.run(); }, kind, fragments);
  };
  auto with = [&](auto change) {
    Args a = good;
    change(a);
    return a;
  };

  const auto logits_bf16 = host(DType::bf16, {3, 16}), logits_1d = host(DType::f32, {48});
  const auto logits_big = host(DType::f32, {3, 513});
  expect(with([&](Args& a) { a.logits = logits_bf16; }), ErrorKind::dtype, {"'routing_logits'", "f32", "bf16"});
  expect(with([&](Args& a) { a.logits = logits_1d; }), ErrorKind::shape, {"'routing_logits'", "2 dimensions"});
  expect(with([&](Args& a) { a.logits = logits_big; }), ErrorKind::shape, {"'routing_logits'", "512"});
  const auto bias_f16 = host(DType::f16, {16}), bias_short = host(DType::bf16, {15});
  expect(with([&](Args& a) { a.bias = bias_f16; }), ErrorKind::dtype, {"'routing_bias'", "f16"});
  expect(with([&](Args& a) { a.bias = bias_short; }), ErrorKind::shape, {"'routing_bias'", "[16]", "[15]"});

  expect(with([&](Args& a) { a.o.n_group = 3; }), ErrorKind::invalid_argument, {"'n_group'", "got 3"});
  expect(with([&](Args& a) { a.o.topk_group = 5; }), ErrorKind::invalid_argument, {"'topk_group'", "got 5"});
  expect(with([&](Args& a) { a.o.top_k = 0; }), ErrorKind::invalid_argument, {"'top_k'", "got 0"});
  expect(with([&](Args& a) { a.o.top_k = 9; }), ErrorKind::invalid_argument, {"'top_k'", "= 8", "got 9"});
  expect(with([&](Args& a) { a.scale = NAN; }), ErrorKind::invalid_argument, {"'routed_scaling_factor'"});
  expect(with([&](Args& a) { a.o.intermediate_terms = 0; }), ErrorKind::invalid_argument,
         {"'intermediate_terms'", "got 0"});
  expect(with([&](Args& a) { a.o.intermediate_terms = 4; }), ErrorKind::invalid_argument,
         {"'intermediate_terms'", "got 4"});

  const auto x_bf16 = host(DType::bf16, {3, 256}), x_rows = host(DType::f8e4m3, {4, 256});
  const auto x_200 = host(DType::f8e4m3, {3, 200});
  expect(with([&](Args& a) { a.x = x_bf16; }), ErrorKind::dtype, {"'hidden_states'", "f8e4m3"});
  expect(with([&](Args& a) { a.x = x_rows; }), ErrorKind::shape, {"'hidden_states'", "tokens"});
  expect(with([&](Args& a) { a.x = x_200; }), ErrorKind::shape, {"'hidden_states'", "multiple of 128"});
  const auto xs_transposed = host(DType::f32, {3, 2}), xs_bf16 = host(DType::bf16, {2, 3});
  expect(with([&](Args& a) { a.x_scale = xs_transposed; }), ErrorKind::shape,
         {"'hidden_states_scale'", "[2, 3]", "[3, 2]"});
  expect(with([&](Args& a) { a.x_scale = xs_bf16; }), ErrorKind::dtype, {"'hidden_states_scale'", "f32"});

  const auto w1_h = host(DType::f8e4m3, {8, 256, 384}), w1_i = host(DType::f8e4m3, {8, 384, 256});
  const auto w1_e = host(DType::f8e4m3, {513, 256, 256}), w1_bf16 = host(DType::bf16, {8, 256, 256});
  expect(with([&](Args& a) { a.w1 = w1_h; }), ErrorKind::shape, {"'gemm1_weights'", "H"});
  expect(with([&](Args& a) { a.w1 = w1_i; }), ErrorKind::shape, {"'gemm1_weights'", "multiple of 128"});
  expect(with([&](Args& a) { a.w1 = w1_e; }), ErrorKind::shape, {"'gemm1_weights'", "512"});
  expect(with([&](Args& a) { a.w1 = w1_bf16; }), ErrorKind::dtype, {"'gemm1_weights'", "f8e4m3"});
  const Tensor w1_four = w.w1.view().slice(0, 0, 4);  // 4 experts: the scales no longer fit
  const auto w1s_wrong = host(DType::f32, {8, 2, 1});
  expect(with([&](Args& a) { a.w1 = w1_four; }), ErrorKind::shape, {"'gemm1_weights_scale'", "[4, 2, 2]"});
  expect(with([&](Args& a) { a.w1_scale = w1s_wrong; }), ErrorKind::shape, {"'gemm1_weights_scale'", "[8, 2, 2]"});
  const auto w2_wrong = host(DType::f8e4m3, {8, 256, 256}), w2_bf16 = host(DType::bf16, {8, 256, 128});
  const auto w2s_wrong = host(DType::f32, {8, 1, 2});
  expect(with([&](Args& a) { a.w2 = w2_wrong; }), ErrorKind::shape, {"'gemm2_weights'", "[8, 256, 128]"});
  expect(with([&](Args& a) { a.w2 = w2_bf16; }), ErrorKind::dtype, {"'gemm2_weights'"});
  expect(with([&](Args& a) { a.w2_scale = w2s_wrong; }), ErrorKind::shape, {"'gemm2_weights_scale'", "[8, 2, 1]"});
  const auto w2_columns = host(DType::f8e4m3, {8, 256, 256});
  const Tensor w2_view = w2_columns.view().slice(2, 0, 128);  // the right shape, not contiguous
  expect(with([&](Args& a) { a.w2 = w2_view; }), ErrorKind::shape, {"'gemm2_weights'", "contiguous"});

  const auto out_f32 = host(DType::f32, {3, 256}), out_short = host(DType::bf16, {2, 256});
  expect(with([&](Args& a) { a.out = out_f32; }), ErrorKind::dtype, {"'output'", "bf16"});
  expect(with([&](Args& a) { a.out = out_short; }), ErrorKind::shape, {"'output'", "[3, 256]"});
  const Tensor out_cuda = fake_cuda(DType::bf16, {3, 256});
  expect(with([&](Args& a) { a.out = out_cuda; }), ErrorKind::device, {"'output'"});
  expect(with([&](Args& a) { a.x = Tensor{}; }), ErrorKind::invalid_argument, {"'hidden_states'"});
}

#if BRAID_WITH_CUDA
// The workspace is checked on CUDA only (views over a bogus device pointer: the checks fail
// before anything is launched).
TEST(MoeFp8BlockScaleErrors, CudaWorkspace) {
  const char* op = "moe_fp8_block_scale";
  const int64_t need = ops::moe_fp8_block_scale_workspace_bytes(3, 256, 128, 8, options_of(kTiny));
  Args a{fake_cuda(DType::f32, {3, 16}), fake_cuda(DType::bf16, {16}),
         fake_cuda(DType::f8e4m3, {3, 256}), fake_cuda(DType::f32, {2, 3}),
         fake_cuda(DType::f8e4m3, {8, 256, 256}), fake_cuda(DType::f32, {8, 2, 2}),
         fake_cuda(DType::f8e4m3, {8, 256, 128}), fake_cuda(DType::f32, {8, 2, 1}),
         Tensor{}, fake_cuda(DType::bf16, {3, 256})};
  expect_error([&] { a.run(); }, ErrorKind::invalid_argument, {op, "'workspace'"});
  a.workspace = fake_cuda(DType::u8, {need - 1});
  expect_error([&] { a.run(); }, ErrorKind::shape, {op, "'workspace'", std::to_string(need) + " bytes"});
  a.workspace = fake_cuda(DType::f32, {need});
  expect_error([&] { a.run(); }, ErrorKind::dtype, {op, "'workspace'", "u8"});
  a.workspace = fake_cuda(DType::u8, {need + 1}).slice(0, 1, need + 1);
  expect_error([&] { a.run(); }, ErrorKind::invalid_argument, {op, "'workspace'", "aligned"});
}
#endif

// ---- CUDA against the CPU reference ----------------------------------------------------------

const Shape kSmall{64, 8, 4, 8, 16, 512, 256};
const Shape kDeepSeek{256, 8, 4, 8, 32, 7168, 2048};

// Three terms must meet flashinfer-bench's rule on 95% of the elements, and a tight aggregate too,
// so that a subtly wrong result cannot hide in the 5%. Two terms pass about 96-97% of the elements
// (see CpuStepsMeetTheRule): 95% is required where the share is measured over enough elements
// to be stable (a few hundred elements, at 1 or 3 tokens of the small shape, would fail it now and
// then by chance alone), and reported elsewhere. One term is the usual fp8 requantisation,
// reported only. Also: two runs of the same call are bitwise equal.
constexpr size_t kStableShare = 4096;

void compare_with_reference(const char* label, const Inputs& in, const Weights& w, const Shape& s) {
  const std::vector<float> ref = cpu_reference(in, w, options_of(s));
  const DeviceLayer d = to_cuda(in, w);
  for (int terms : {3, 2, 1}) {
    const std::vector<float> got = run_cuda(d, in.offset, options_of(s, terms));
    const Agreement a = judge(got, ref);
    std::printf("[ moe_fp8 ] %s, %d intermediate term(s): %.2f%% pass flashinfer-bench's rule, "
                "rel L2 error %.3g\n",
                label, terms, 100 * a.pass_ratio, a.rel_l2);
    if (terms == 3 || (terms == 2 && ref.size() >= kStableShare)) {
      EXPECT_GE(a.pass_ratio, 0.95) << label << ", " << terms << " terms";
    }
    if (terms == 3) {
      EXPECT_LT(a.rel_l2, 2e-3) << label;
      EXPECT_EQ(run_cuda(d, in.offset, options_of(s, terms)), got) << label << ": not deterministic";
    }
  }
}

struct CudaCase {
  int64_t tokens;
  int offset;
  bool boost;  // false: random routing, so that many choices are not local
};

std::string cuda_case_name(const CudaCase& c) {
  return "T" + std::to_string(c.tokens) + "_offset" + (c.offset < 0 ? "m" : "") +
         std::to_string(std::abs(c.offset)) + (c.boost ? "" : "_unboosted");
}
void PrintTo(const CudaCase& c, std::ostream* os) { *os << cuda_case_name(c); }

class MoeFp8BlockScaleDiff : public ::testing::TestWithParam<CudaCase> {};

TEST_P(MoeFp8BlockScaleDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const CudaCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Weights w = make_weights(kSmall, seed);
  const Inputs in = make_inputs(kSmall, c.tokens, c.offset, c.boost, seed + 2);
  compare_with_reference(cuda_case_name(c).c_str(), in, w, kSmall);
}

INSTANTIATE_TEST_SUITE_P(
    Small, MoeFp8BlockScaleDiff,
    ::testing::Values(CudaCase{1, 0, true}, CudaCase{3, 0, true}, CudaCase{40, 0, true},
                      CudaCase{300, 0, true},  // 2400 pairs: moe_permute's multi-chunk path
                      CudaCase{1, 48, true}, CudaCase{3, 48, true}, CudaCase{40, 48, true},
                      CudaCase{300, 48, true},
                      CudaCase{40, 24, false}, CudaCase{300, 24, false},  // local and not
                      CudaCase{40, 56, true}, CudaCase{300, 56, false},   // offset + E > E_global
                      CudaCase{40, -8, true}),                            // offset < 0
    [](const ::testing::TestParamInfo<CudaCase>& info) { return cuda_case_name(info.param); });

// seed 003's own shape (E_global 256, 32 local experts, H 7168, I 2048) at 1 and 8 tokens.
TEST(MoeFp8BlockScaleCuda, DeepSeekV3Shape) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Weights w = make_weights(kDeepSeek, seed);
  compare_with_reference("DeepSeek-V3 T1 offset 0", make_inputs(kDeepSeek, 1, 0, true, seed + 2), w,
                         kDeepSeek);
  compare_with_reference("DeepSeek-V3 T8 offset 96", make_inputs(kDeepSeek, 8, 96, true, seed + 3),
                         w, kDeepSeek);
}

// No token chooses a local expert (unboosted routing, local experts outside the global range):
// the output is exactly zero.
TEST(MoeFp8BlockScaleCuda, NoLocalChoiceGivesZeros) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Weights w = make_weights(kSmall, seed);
  for (int offset : {1000, -1000, 64}) {
    const Inputs in = make_inputs(kSmall, 40, offset, false, seed + 2);
    for (float v : run_cuda(to_cuda(in, w), offset, options_of(kSmall))) ASSERT_EQ(v, 0.0f) << offset;
  }
}

#if BRAID_WITH_CUDA
// The call does no host synchronisation and its launches depend on the shapes only: captured
// once in a CUDA graph, it follows new routing logits and activations when replayed.
TEST(MoeFp8BlockScaleCuda, GraphReplayFollowsNewInputs) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Weights w = make_weights(kSmall, seed);
  const Inputs first = make_inputs(kSmall, 40, 16, true, seed + 2);
  const Inputs second = make_inputs(kSmall, 40, 16, false, seed + 3);
  const DeviceLayer d = to_cuda(first, w);
  const MoeFp8Options o = options_of(kSmall);
  const int64_t need = ops::moe_fp8_block_scale_workspace_bytes(40, kSmall.hidden, kSmall.inter,
                                                                kSmall.local_experts, o);
  OwnedTensor workspace(DType::u8, {need}, Device::cuda());
  auto out = poisoned(DType::bf16, {40, kSmall.hidden}, Device::cuda());
  StreamOwner stream;
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::moe_fp8_block_scale(d.logits, d.bias, d.x, d.x_scale, d.w1, d.w1_scale, d.w2,
                             d.w2_scale, 16, kScalingFactor, o, workspace, out, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "moe_fp8_block_scale failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const Inputs* in : {&second, &first}) {
    copy(in->logits, d.logits);
    copy(in->bias, d.bias);
    copy(in->x, d.x);
    copy(in->x_scale, d.x_scale);
    // On the graph's stream: `s` does not wait for the legacy stream, so a memset there could
    // land in the middle of the replay (it did under racecheck and initcheck).
    fill_bytes(out, 0xFF, stream.get());
    fill_bytes(workspace, 0xFF, stream.get());
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    stream.synchronize();
    const Agreement a = judge(to_floats(out), cpu_reference(*in, w, o));
    EXPECT_GE(a.pass_ratio, 0.95);
    EXPECT_LT(a.rel_l2, 2e-3);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif

}  // namespace
}  // namespace braid::test
