// sample_tokens. On the CPU reference: the shared exp2, the exact top-p target and draw; the
// draw is the engine's (the same token on a flat row, and on random rows unless u sits within
// 2e-6 of a boundary of the engine's double cumulative sum); greedy, tie and NaN rules; top_k = 1
// and tiny top_p are greedy; ties at the top-k threshold stay; min_p cuts; over many seeds the
// frequencies are the renormalised kept distribution; a row's token does not depend on its batch.
// On CUDA: the kernel equals the reference token for token on every row (weights are integers,
// so no summation order can move a boundary: the allowed distance from a boundary is 0), on
// vocabularies from 1 to 262144, rows of ties, NaN, -inf and +inf, strided and misaligned rows,
// out-of-range parameter values read as ops.h says, a row alone and in a batch of 37, and under
// CUDA-graph replay with new logits and parameters. Argument errors run without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "braid/ops.h"
#include "braid/sampling_random.h"
#include "engine/sampler.h"
#include "ops/sample_tokens_math.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

namespace smp = braid::sampling;

struct RowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int64_t seed = 0;
  int64_t step = 0;
};

// A batch on the host: logits [rows, vocab] (row stride vocab + pad) and one RowParams a row.
struct Batch {
  int64_t vocab = 0, pad = 0;
  std::vector<float> logits;  // rows * (vocab + pad)
  std::vector<RowParams> params;
  int64_t rows() const { return static_cast<int64_t>(params.size()); }
  float* row(int64_t r) { return logits.data() + r * (vocab + pad); }
  const float* row(int64_t r) const { return logits.data() + r * (vocab + pad); }
  void add(const std::vector<float>& l, const RowParams& p) {
    logits.insert(logits.end(), l.begin(), l.end());
    logits.insert(logits.end(), static_cast<size_t>(pad), NAN);
    params.push_back(p);
  }
};

template <typename T, typename F>
OwnedTensor column(const Batch& b, DType dtype, F field, Device device) {
  OwnedTensor host(dtype, {b.rows()}, Device::cpu());
  for (int64_t r = 0; r < b.rows(); ++r) host.view().ptr<T>()[r] = field(b.params[r]);
  return to_device(host, device);
}

// Runs the op on `device` (misalign: the logits start one float past a 16-byte boundary) and
// returns the tokens; the output starts poisoned (-1).
std::vector<int32_t> run(const Batch& b, Device device, bool misalign = false) {
  const int64_t rows = b.rows(), width = b.vocab + b.pad;
  OwnedTensor store(DType::f32, {rows * width + 4}, Device::cpu());
  std::memcpy(static_cast<float*>(store.data()) + (misalign ? 1 : 0), b.logits.data(),
              b.logits.size() * sizeof(float));
  OwnedTensor dstore = to_device(store, device);
  Tensor logits(dstore.view().at(misalign ? 1 : 0), DType::f32, device, {rows, width});
  logits = logits.slice(1, 0, b.vocab);
  auto t = column<float>(b, DType::f32, [](const RowParams& p) { return p.temperature; }, device);
  auto k = column<int32_t>(b, DType::i32, [](const RowParams& p) { return p.top_k; }, device);
  auto tp = column<float>(b, DType::f32, [](const RowParams& p) { return p.top_p; }, device);
  auto mp = column<float>(b, DType::f32, [](const RowParams& p) { return p.min_p; }, device);
  auto seeds = column<int64_t>(b, DType::i64, [](const RowParams& p) { return p.seed; }, device);
  auto steps = column<int64_t>(b, DType::i64, [](const RowParams& p) { return p.step; }, device);
  auto tokens = poisoned(DType::i32, {rows}, device);
  ops::sample_tokens(logits, t, k, tp, mp, seeds, steps, Tensor{}, tokens);
  OwnedTensor host(DType::i32, {rows}, Device::cpu());
  copy(tokens, host.view());
  return std::vector<int32_t>(host.view().ptr<int32_t>(), host.view().ptr<int32_t>() + rows);
}

int32_t run_one(const std::vector<float>& logits, const RowParams& p) {
  Batch b;
  b.vocab = static_cast<int64_t>(logits.size());
  b.add(logits, p);
  return run(b, Device::cpu())[0];
}

// Logits shaped like a language model's: Gaussian with a few tall peaks; `style` adds ties
// (rounded values), -inf (banned tokens), NaN, or a +inf, or is a long flat tail (one token at 0,
// the rest near -14.6, p ~ 2^-21 at temperature 1: top-p then needs the tail's mass).
std::vector<float> random_logits(int64_t vocab, uint64_t seed, int style = 0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> l(static_cast<size_t>(vocab));
  if (style == 5) {
    for (auto& x : l) x = -14.6f + 0.004f * normal(rng);
    l[static_cast<size_t>(rng() % vocab)] = 0.0f;
    return l;
  }
  for (auto& x : l) x = normal(rng);
  const int64_t peaks = std::min<int64_t>(vocab, 5);
  for (int64_t j = 0; j < peaks; ++j)
    l[static_cast<size_t>(rng() % vocab)] += 8.0f + 2.0f * static_cast<float>(j);
  for (auto& x : l) {
    if (style == 1) x = std::round(x);
    if (style == 2 && rng() % 11 == 0) x = -INFINITY;
    if (style == 3 && rng() % 13 == 0) x = NAN;
  }
  if (style == 4) l[static_cast<size_t>(rng() % vocab)] = INFINITY;
  return l;
}

RowParams random_params(std::mt19937_64& rng, int64_t vocab) {
  static const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.0f, 1.3f, 4.0f};
  const int32_t ks[] = {0, -1, 0, 1, 5, 40, 1000, static_cast<int32_t>(vocab) - 1};
  static const float ps[] = {1.0f, 1.0f, 0.9f, 0.95f, 0.5f, 1e-6f, 0.999f};
  static const float mps[] = {0.0f, 0.0f, 0.0f, 0.05f, 0.3f, 1.0f};
  RowParams p;
  p.temperature = temps[rng() % 7];
  p.top_k = ks[rng() % 8];
  p.top_p = ps[rng() % 7];
  p.min_p = mps[rng() % 6];
  p.seed = static_cast<int64_t>(rng());
  p.step = static_cast<int64_t>(rng() % 4096);
  return p;
}

Batch random_batch(int64_t rows, int64_t vocab, uint64_t seed, int64_t pad = 0) {
  std::mt19937_64 rng(seed);
  Batch b;
  b.vocab = vocab;
  b.pad = pad;
  for (int64_t r = 0; r < rows; ++r)
    b.add(random_logits(vocab, rng(), static_cast<int>(r % 6)), random_params(rng, vocab));
  return b;
}

// The kept distribution the contract describes, computed independently in double (sorting, no
// integer weights): what the empirical frequencies must approach.
std::vector<double> kept_distribution(const std::vector<float>& l, const RowParams& p) {
  const size_t V = l.size();
  const double m = *std::max_element(l.begin(), l.end());
  std::vector<double> prob(V);
  for (size_t i = 0; i < V; ++i) prob[i] = std::exp((l[i] - m) / p.temperature);
  std::vector<bool> keep(V, true);
  for (size_t i = 0; i < V; ++i) keep[i] = prob[i] >= p.min_p;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < V) {
    std::vector<float> sorted(l);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && l[i] >= sorted[static_cast<size_t>(p.top_k - 1)];
  }
  double mass = 0;
  for (size_t i = 0; i < V; ++i) mass += keep[i] ? prob[i] : 0;
  if (p.top_p < 1.0f) {
    std::vector<size_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
    double run = 0, t = 0;
    for (size_t i : order) {
      if (!keep[i]) continue;
      run += prob[i];
      if (run >= p.top_p * mass) {
        t = prob[i];
        break;
      }
    }
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && prob[i] >= t;
  }
  std::vector<double> d(V, 0.0);
  double total = 0;
  for (size_t i = 0; i < V; ++i) total += d[i] = keep[i] ? prob[i] : 0;
  for (auto& x : d) x /= total;
  return d;
}

// Draws n tokens (steps 0..n-1 of one seed) and checks each frequency against the expected
// probability within 5 standard deviations (plus 1e-3); tokens with probability 0 never appear.
void expect_frequencies(const std::vector<float>& l, RowParams p, int n) {
  const std::vector<double> want = kept_distribution(l, p);
  Batch b;
  b.vocab = static_cast<int64_t>(l.size());
  for (int i = 0; i < n; ++i) {
    p.step = i;
    b.add(l, p);
  }
  std::map<int32_t, int> counts;
  for (int32_t t : run(b, Device::cpu())) ++counts[t];
  for (const auto& [token, count] : counts)
    EXPECT_GT(want[static_cast<size_t>(token)], 0.0) << "token " << token << " drawn " << count << " times";
  for (size_t i = 0; i < want.size(); ++i) {
    const double f = counts.count(static_cast<int32_t>(i)) ? counts[static_cast<int32_t>(i)] / double(n) : 0.0;
    const double sigma = std::sqrt(want[i] * (1 - want[i]) / n);
    EXPECT_NEAR(f, want[i], 5 * sigma + 1e-3) << "token " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// The shared arithmetic.

TEST(SampleTokensMath, Exp2IsAccurateAndExactAtZero) {
  EXPECT_EQ(smp::exp2_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(smp::exp2_nonpositive(-0.0f), 1.0f);
  EXPECT_EQ(smp::exp2_nonpositive(-INFINITY), 0.0f);
  EXPECT_EQ(smp::exp2_nonpositive(-125.5f), 0.0f);
  EXPECT_EQ(smp::exp2_nonpositive(-3.0f), 0.125f);
  double worst = 0;
  for (float y = -125.0f; y <= 0.0f; y = std::nextafter(y, 1.0f) + 1e-4f) {
    const double want = std::exp2(static_cast<double>(y));
    worst = std::max(worst, std::fabs(smp::exp2_nonpositive(y) - want) / want);
  }
  EXPECT_LT(worst, 0x1p-22) << "relative error of exp2_nonpositive";
  // Monotone where the kernel's prefilter relies on it: more than 1/64 below log2(p) is below p.
  for (float y = -40.0f; y <= 0.0f; y += 1e-3f)
    EXPECT_LT(smp::exp2_nonpositive(y - 1.0f / 64.0f), smp::exp2_nonpositive(y));
}

TEST(SampleTokensMath, TopPTargetIsTheExactCeiling) {
  EXPECT_EQ(smp::top_p_target(0.5f, 3), 2u);
  EXPECT_EQ(smp::top_p_target(0.75f, 4), 3u);
  EXPECT_EQ(smp::top_p_target(0.1f, 10), 2u);  // 0.1f is 0.100000001490116...: just above 1
  EXPECT_EQ(smp::top_p_target(0.25f, uint64_t{1} << 62), uint64_t{1} << 60);
  EXPECT_EQ(smp::top_p_target(0x1p-40f, uint64_t{1} << 40), 1u);
  EXPECT_EQ(smp::top_p_target(0x1p-149f, uint64_t{1} << 63), 1u);  // subnormal top_p
  EXPECT_EQ(smp::top_p_target(0.0f, 12345), 1u);                    // at least 1
  const uint64_t w = (uint64_t{1} << 63) + 12345;                  // 0.999... * w: no overflow
  EXPECT_EQ(smp::top_p_target(std::nextafter(1.0f, 0.0f), w), w - (w >> 24));
}

TEST(SampleTokensMath, DrawPointScalesTheEnginesUniform) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t seed = rng(), step = rng() % 100000, total = (rng() >> 1) | 1;
    const uint64_t u = smp::draw_point(seed, step, total);
    EXPECT_LT(u, total);
    const long double want = std::floor(static_cast<long double>(smp::uniform(seed, step)) * total);
    EXPECT_LE(std::fabs(static_cast<long double>(u) - want), 1.0L);
  }
  EXPECT_EQ(smp::draw_point(0, 0, uint64_t{1} << 53), smp::uniform_bits53(0, 0));
}

// ---------------------------------------------------------------------------------------------
// The reference against the engine's sampler (src/engine/sampler.cpp).

TEST(SampleTokensReference, FlatRowDrawsTheEnginesToken) {
  // All logits equal: every p is 1 in both, so both pick floor(uniform(seed, step) * V): the
  // engine's draw and the op's are the same bits.
  const int64_t V = 4096;
  const std::vector<float> flat(static_cast<size_t>(V), 0.25f);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    RowParams p;
    p.seed = static_cast<int64_t>(rng());
    p.step = static_cast<int64_t>(rng() % 10000);
    engine::SamplingParams e;
    e.temperature = 1.0f;
    e.seed = static_cast<uint64_t>(p.seed);
    const int32_t want = static_cast<int32_t>(smp::uniform_bits53(e.seed, p.step) >> 41);
    EXPECT_EQ(engine::sample_token(flat, e, static_cast<uint64_t>(p.step)), want);
    EXPECT_EQ(run_one(flat, p), want);
  }
}

TEST(SampleTokensReference, AgreesWithTheEngineAwayFromBoundaries) {
  // Temperature and min_p only (the engine walks tokens in index order then, as the op does).
  // The engine sums double probabilities, the op fp32 exp2 weights (relative error < 2^-21 each,
  // so their running sums differ by less than 1e-6 of the mass): they may differ only when u lies
  // within 2e-6 (relative) of a boundary of the engine's cumulative sum.
  std::mt19937_64 rng(12);
  int compared = 0, near = 0;
  for (int i = 0; i < 400; ++i) {
    const int64_t V = 50 + static_cast<int64_t>(rng() % 500);
    const std::vector<float> l = random_logits(V, rng());
    RowParams p;
    p.temperature = (i % 3 == 0) ? 0.5f : (i % 3 == 1 ? 1.0f : 2.0f);
    p.min_p = (i % 4 == 0) ? 0.02f : 0.0f;
    p.seed = static_cast<int64_t>(rng());
    p.step = i;
    engine::SamplingParams e;
    e.temperature = p.temperature;
    e.min_p = p.min_p;
    e.seed = static_cast<uint64_t>(p.seed);
    const double m = *std::max_element(l.begin(), l.end());
    std::vector<double> cum;
    double mass = 0;
    for (float x : l) {
      const double q = std::exp((x - m) / p.temperature);
      mass += q >= p.min_p ? q : 0;
      cum.push_back(mass);
    }
    const double u = smp::uniform(e.seed, static_cast<uint64_t>(p.step)) * mass;
    double gap = INFINITY;
    for (double c : cum) gap = std::min(gap, std::fabs(c - u));
    if (gap < 2e-6 * mass) {
      ++near;
      continue;
    }
    ++compared;
    EXPECT_EQ(run_one(l, p), engine::sample_token(l, e, static_cast<uint64_t>(p.step))) << "row " << i;
  }
  EXPECT_LE(near, 8) << "u landed near a boundary too often";
  EXPECT_GE(compared, 392);
}

// ---------------------------------------------------------------------------------------------
// The reference's rules.

TEST(SampleTokensReference, GreedyTieNanAndInfinityRules) {
  RowParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(run_one({0.1f, 3.0f, -1.0f, 3.0f}, greedy), 1);
  EXPECT_EQ(run_one({NAN, 5.0f, 7.0f, NAN}, greedy), 2);  // NaN never wins
  EXPECT_EQ(run_one({NAN, 5.0f}, greedy), 1);
  EXPECT_EQ(run_one({NAN, NAN, NAN}, greedy), 0);
  EXPECT_EQ(run_one({-INFINITY, -INFINITY}, greedy), 0);
  EXPECT_EQ(run_one({-0.0f, 0.0f}, greedy), 0);  // equal values
  greedy.temperature = 0.99e-5f;
  EXPECT_EQ(run_one({0.0f, 1.0f, 1.0f}, greedy), 1);
  // Sampling rows whose maximum is not finite are greedy too.
  RowParams hot;
  hot.temperature = 1.0f;
  for (int64_t seed = 0; seed < 20; ++seed) {
    hot.seed = seed;
    EXPECT_EQ(run_one({-INFINITY, NAN, -INFINITY}, hot), 0);
    EXPECT_EQ(run_one({1.0f, INFINITY, 2.0f, INFINITY}, hot), 1);
    // NaN and -inf are never drawn while a finite logit exists.
    const int32_t t = run_one({NAN, 0.0f, -INFINITY, 0.0f, NAN}, hot);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(SampleTokensReference, TopKOneAndTinyTopPAreGreedy) {
  std::mt19937_64 rng(21);
  for (int i = 0; i < 200; ++i) {
    const std::vector<float> l = random_logits(1000, rng());
    const int32_t argmax = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    RowParams p;
    p.temperature = 1.5f;
    p.seed = static_cast<int64_t>(rng());
    p.top_k = 1;
    EXPECT_EQ(run_one(l, p), argmax);
    p.top_k = 0;
    p.top_p = 1e-6f;
    EXPECT_EQ(run_one(l, p), argmax);
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    EXPECT_EQ(run_one(l, p), argmax);
  }
}

TEST(SampleTokensReference, TiesAtTheThresholdsAreKept) {
  // Two tokens tie for the top: top_k = 1 and tiny top_p keep both, and both get drawn.
  const std::vector<float> l = {3.0f, 1.0f, 3.0f, 0.0f};
  for (int which = 0; which < 2; ++which) {
    RowParams p;
    p.top_k = which == 0 ? 1 : 0;
    p.top_p = which == 0 ? 1.0f : 0.01f;
    std::set<int32_t> seen;
    for (int64_t s = 0; s < 200; ++s) {
      p.seed = s;
      seen.insert(run_one(l, p));
    }
    EXPECT_EQ(seen, (std::set<int32_t>{0, 2}));
  }
  // top_k = 2 with a tie at the 2nd largest keeps all three.
  RowParams p;
  p.top_k = 2;
  std::set<int32_t> seen;
  for (int64_t s = 0; s < 300; ++s) {
    p.seed = s;
    seen.insert(run_one({2.0f, 5.0f, 2.0f, -1.0f}, p));
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(SampleTokensReference, FrequenciesMatchTheKeptDistribution) {
  const std::vector<float> three = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  RowParams p;
  p.seed = 7;
  expect_frequencies(three, p, 20000);
  p.top_p = 0.75f;  // keeps {0, 1}: 0.625 / 0.375
  expect_frequencies(three, p, 20000);
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // 0.2 / 0.5 < 0.5: drops token 2
  expect_frequencies(three, p, 20000);

  std::mt19937_64 rng(31);
  const std::vector<float> l = random_logits(40, rng());
  const RowParams cases[] = {
      {1.0f, 0, 1.0f, 0.0f, 1, 0},  {0.7f, 0, 1.0f, 0.0f, 2, 0},  {2.0f, 5, 1.0f, 0.0f, 3, 0},
      {1.0f, 0, 0.9f, 0.0f, 4, 0},  {1.3f, 10, 0.8f, 0.0f, 5, 0}, {1.0f, 0, 1.0f, 0.01f, 6, 0},
      {3.0f, 20, 0.95f, 0.02f, 7, 0}};
  for (const RowParams& c : cases) {
    SCOPED_TRACE("T " + std::to_string(c.temperature) + " k " + std::to_string(c.top_k) + " p " +
                 std::to_string(c.top_p) + " min_p " + std::to_string(c.min_p));
    expect_frequencies(l, c, 20000);
  }
}

TEST(SampleTokensReference, MinPCutsRelativeToTheMostLikely) {
  // p relative to the max: 1, e^-1 = 0.37, e^-2 = 0.14, e^-3 = 0.05.
  const std::vector<float> l = {0.0f, -1.0f, -2.0f, -3.0f};
  RowParams p;
  p.min_p = 0.2f;
  std::set<int32_t> seen;
  for (int64_t s = 0; s < 500; ++s) {
    p.seed = s;
    seen.insert(run_one(l, p));
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(SampleTokensReference, TokenDoesNotDependOnTheBatch) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Batch big = random_batch(37, 3001, seed);
  const std::vector<int32_t> together = run(big, Device::cpu());
  for (int64_t r = 0; r < big.rows(); ++r) {
    Batch one;
    one.vocab = big.vocab;
    one.add(std::vector<float>(big.row(r), big.row(r) + big.vocab), big.params[r]);
    EXPECT_EQ(run(one, Device::cpu())[0], together[static_cast<size_t>(r)]) << "row " << r;
  }
}

TEST(SampleTokensReference, SameSeedAndStepSameToken) {
  std::mt19937_64 rng(41);
  const std::vector<float> l = random_logits(500, rng());
  RowParams p;
  p.seed = 99;
  std::set<int32_t> over_steps;
  for (int64_t step = 0; step < 50; ++step) {
    p.step = step;
    const int32_t t = run_one(l, p);
    EXPECT_EQ(run_one(l, p), t);
    over_steps.insert(t);
  }
  EXPECT_GT(over_steps.size(), 1u) << "the step must change the draw";
}

// ---------------------------------------------------------------------------------------------
// CUDA against the reference.

struct DiffCase {
  int64_t rows, vocab, pad;
  bool misalign;
};

std::string case_name(const DiffCase& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.vocab) + (c.pad ? "_pad" + std::to_string(c.pad) : "") +
         (c.misalign ? "_misaligned" : "");
}
void PrintTo(const DiffCase& c, std::ostream* os) { *os << case_name(c); }

class SampleTokensDiff : public ::testing::TestWithParam<DiffCase> {};

TEST_P(SampleTokensDiff, CudaMatchesReferenceExactly) {
  BRAID_REQUIRE_CUDA();
  const DiffCase c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Batch b = random_batch(c.rows, c.vocab, seed, c.pad);
  const std::vector<int32_t> want = run(b, Device::cpu());
  const std::vector<int32_t> got = run(b, Device::cuda(), c.misalign);
  for (int64_t r = 0; r < c.rows; ++r) {
    const RowParams& p = b.params[static_cast<size_t>(r)];
    EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)])
        << "row " << r << ": T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p
        << " min_p " << p.min_p << " seed " << p.seed << " step " << p.step;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SampleTokensDiff,
    ::testing::Values(DiffCase{1, 128256, 0, false},  // Llama-3
                      DiffCase{3, 151936, 0, false},  // Qwen2/3
                      DiffCase{2, 262144, 0, false},  // Gemma-3-sized
                      DiffCase{37, 32000, 0, false}, DiffCase{64, 50257, 0, false},
                      DiffCase{5, 1, 0, false}, DiffCase{9, 2, 0, false},
                      DiffCase{7, 17, 0, false}, DiffCase{11, 128, 0, false},
                      DiffCase{11, 129, 0, false}, DiffCase{33, 1000, 0, false},
                      DiffCase{4, 4097, 0, false}, DiffCase{256, 2048, 0, false},
                      DiffCase{6, 10007, 3, false},   // row stride not a multiple of 4
                      DiffCase{6, 10000, 0, true},    // rows off a 16-byte boundary
                      DiffCase{5, 65536, 4, true}),
    [](const auto& info) { return case_name(info.param); });

TEST(SampleTokensCuda, ManySeedsOneRow) {
  // One row, every parameter family, 600 draws: exercises boundaries of the draw. A row of ties,
  // and a long flat tail (top-p's histogram of the tail).
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int style : {1, 5}) {
    SCOPED_TRACE("style " + std::to_string(style));
    const int64_t vocab = style == 1 ? 32000 : 151936;
    const std::vector<float> l = random_logits(vocab, rng(), style);
    Batch b;
    b.vocab = vocab;
    for (int i = 0; i < 600; ++i) {
      RowParams p = random_params(rng, b.vocab);
      if (p.temperature == 0.0f) p.temperature = 1.0f;
      b.add(l, p);
    }
    EXPECT_EQ(run(b, Device::cuda()), run(b, Device::cpu()));
  }
}

TEST(SampleTokensCuda, OutOfRangeValuesReadAsDocumented) {
  BRAID_REQUIRE_CUDA();
  std::mt19937_64 rng(51);
  Batch raw, meant;
  raw.vocab = meant.vocab = 3000;
  auto both = [&](RowParams r, RowParams m) {
    const std::vector<float> l = random_logits(3000, rng());
    raw.add(l, r);
    meant.add(l, m);
  };
  RowParams base;
  base.seed = 5;
  RowParams r = base, m = base;
  r.temperature = NAN, m.temperature = 0.0f;
  both(r, m);
  r = base, m = base;
  r.temperature = INFINITY, m.temperature = 0.0f;
  both(r, m);
  r = base, m = base;
  r.temperature = -2.0f, m.temperature = 0.0f;
  both(r, m);
  r = base, m = base;
  r.top_k = -7, m.top_k = 0;
  both(r, m);
  r = base, m = base;
  r.top_p = 0.0f, m.top_p = 1e-30f;  // keeps just the maximum
  both(r, m);
  r = base, m = base;
  r.top_p = NAN, m.top_p = 1.0f;
  both(r, m);
  r = base, m = base;
  r.top_p = 3.0f, m.top_p = 1.0f;
  both(r, m);
  r = base, m = base;
  r.min_p = NAN, m.min_p = 0.0f;
  both(r, m);
  r = base, m = base;
  r.min_p = -1.0f, m.min_p = 0.0f;
  both(r, m);
  r = base, m = base;
  r.min_p = 7.0f, m.min_p = 1.0f;
  both(r, m);
  EXPECT_EQ(run(raw, Device::cuda()), run(meant, Device::cpu()));
}

TEST(SampleTokensCuda, TokenDoesNotDependOnTheBatch) {
  // Alone, in a batch of 37, and in a batch of 300 (more rows than SMs: the kernel then takes
  // narrower blocks, which must not change a token either).
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Batch big = random_batch(37, 50000, seed);
  const std::vector<int32_t> together = run(big, Device::cuda());
  Batch crowd = big;
  const Batch filler = random_batch(300 - 37, 50000, seed + 1);
  crowd.logits.insert(crowd.logits.end(), filler.logits.begin(), filler.logits.end());
  crowd.params.insert(crowd.params.end(), filler.params.begin(), filler.params.end());
  const std::vector<int32_t> crowded = run(crowd, Device::cuda());
  for (int64_t r = 0; r < big.rows(); ++r) {
    Batch one;
    one.vocab = big.vocab;
    one.add(std::vector<float>(big.row(r), big.row(r) + big.vocab), big.params[r]);
    EXPECT_EQ(run(one, Device::cuda())[0], together[static_cast<size_t>(r)]) << "row " << r;
    EXPECT_EQ(crowded[static_cast<size_t>(r)], together[static_cast<size_t>(r)]) << "row " << r;
  }
}

#if BRAID_WITH_CUDA
// Captured once in a CUDA graph, replayed over new logits and parameters written into the same
// buffers: the kernel reads everything on the device.
TEST(SampleTokensCuda, GraphReplayFollowsNewInputs) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 8, V = 20000;
  const Device d = Device::cuda();
  OwnedTensor logits(DType::f32, {rows, V}, d), t(DType::f32, {rows}, d), k(DType::i32, {rows}, d),
      tp(DType::f32, {rows}, d), mp(DType::f32, {rows}, d), seeds(DType::i64, {rows}, d),
      steps(DType::i64, {rows}, d), tokens(DType::i32, {rows}, d);
  auto load = [&](const Batch& b) {
    OwnedTensor host(DType::f32, {rows, V}, Device::cpu());
    std::memcpy(host.data(), b.logits.data(), b.logits.size() * sizeof(float));
    copy(host, logits.view());
    copy(column<float>(b, DType::f32, [](const RowParams& p) { return p.temperature; }, Device::cpu()), t.view());
    copy(column<int32_t>(b, DType::i32, [](const RowParams& p) { return p.top_k; }, Device::cpu()), k.view());
    copy(column<float>(b, DType::f32, [](const RowParams& p) { return p.top_p; }, Device::cpu()), tp.view());
    copy(column<float>(b, DType::f32, [](const RowParams& p) { return p.min_p; }, Device::cpu()), mp.view());
    copy(column<int64_t>(b, DType::i64, [](const RowParams& p) { return p.seed; }, Device::cpu()), seeds.view());
    copy(column<int64_t>(b, DType::i64, [](const RowParams& p) { return p.step; }, Device::cpu()), steps.view());
    fill_bytes(tokens.view(), 0xFF);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the copies ran on the legacy stream
  };
  const Batch first = random_batch(rows, V, seed), second = random_batch(rows, V, seed + 1);
  load(first);
  StreamOwner stream;
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ops::sample_tokens(logits, t, k, tp, mp, seeds, steps, Tensor{}, tokens, stream.get());
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const Batch* b : {&first, &second}) {
    load(*b);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    stream.synchronize();
    OwnedTensor host(DType::i32, {rows}, Device::cpu());
    copy(tokens, host.view());
    EXPECT_EQ(std::vector<int32_t>(host.view().ptr<int32_t>(), host.view().ptr<int32_t>() + rows),
              run(*b, Device::cpu()));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif

// ---------------------------------------------------------------------------------------------
// Argument errors (no GPU needed).

TEST(SampleTokensErrors, NameTheArgument) {
  const Device cpu = Device::cpu();
  OwnedTensor logits(DType::f32, {2, 10}, cpu), t(DType::f32, {2}, cpu), k(DType::i32, {2}, cpu),
      tp(DType::f32, {2}, cpu), mp(DType::f32, {2}, cpu), seeds(DType::i64, {2}, cpu),
      steps(DType::i64, {2}, cpu), tokens(DType::i32, {2}, cpu);
  for (int r = 0; r < 2; ++r) {
    t.view().ptr<float>()[r] = 1.0f;
    k.view().ptr<int32_t>()[r] = 0;
    tp.view().ptr<float>()[r] = 1.0f;
    mp.view().ptr<float>()[r] = 0.0f;
    seeds.view().ptr<int64_t>()[r] = steps.view().ptr<int64_t>()[r] = 0;
  }
  std::fill_n(logits.view().ptr<float>(), 20, 0.0f);
  auto call = [&](const Tensor& l, const Tensor& ws, const Tensor& out) {
    ops::sample_tokens(l, t, k, tp, mp, seeds, steps, ws, out);
  };
  call(logits, Tensor{}, tokens);  // fine

  OwnedTensor bf(DType::bf16, {2, 10}, cpu), flat(DType::f32, {20}, cpu), empty(DType::f32, {2, 0}, cpu);
  expect_error([&] { call(bf, Tensor{}, tokens); }, ErrorKind::dtype, {"sample_tokens", "'logits'", "bf16"});
  expect_error([&] { call(flat, Tensor{}, tokens); }, ErrorKind::shape, {"'logits'"});
  expect_error([&] { call(empty, Tensor{}, tokens); }, ErrorKind::shape, {"'logits'", "vocabulary"});
  OwnedTensor tok64(DType::i64, {2}, cpu), tok3(DType::i32, {3}, cpu);
  expect_error([&] { call(logits, Tensor{}, tok64); }, ErrorKind::dtype, {"'tokens'", "i32"});
  expect_error([&] { call(logits, Tensor{}, tok3); }, ErrorKind::shape, {"'tokens'", "[2]", "[3]"});
  OwnedTensor ws_f32(DType::f32, {4}, cpu);
  expect_error([&] { call(logits, ws_f32, tokens); }, ErrorKind::dtype, {"'workspace'", "u8"});

  OwnedTensor k64(DType::i64, {2}, cpu), tp3(DType::f32, {3}, cpu), seeds32(DType::i32, {2}, cpu);
  expect_error([&] { ops::sample_tokens(logits, t, k64, tp, mp, seeds, steps, Tensor{}, tokens); },
               ErrorKind::dtype, {"'top_k'", "i32"});
  expect_error([&] { ops::sample_tokens(logits, t, k, tp3, mp, seeds, steps, Tensor{}, tokens); },
               ErrorKind::shape, {"'top_p'", "[2]"});
  expect_error([&] { ops::sample_tokens(logits, t, k, tp, mp, seeds32, steps, Tensor{}, tokens); },
               ErrorKind::dtype, {"'seeds'", "i64"});

  // Values, on the CPU: the message names the row.
  auto bad = [&](const OwnedTensor& param, int row, auto value, const char* arg, const char* range) {
    using T = decltype(value);
    const T old = param.view().ptr<T>()[row];
    param.view().ptr<T>()[row] = value;
    expect_error([&] { call(logits, Tensor{}, tokens); }, ErrorKind::invalid_argument,
                 {"sample_tokens", std::string("'") + arg + "'", range,
                  std::string(arg) + "[" + std::to_string(row) + "]"});
    param.view().ptr<T>()[row] = old;
  };
  bad(t, 1, -1.0f, "temperature", ">= 0");
  bad(t, 0, NAN, "temperature", "finite");
  bad(t, 0, INFINITY, "temperature", "finite");
  bad(k, 1, int32_t{-2}, "top_k", ">= -1");
  bad(tp, 0, 0.0f, "top_p", "(0, 1]");
  bad(tp, 1, 1.5f, "top_p", "(0, 1]");
  bad(mp, 0, -0.1f, "min_p", "[0, 1]");
  bad(mp, 1, 2.0f, "min_p", "[0, 1]");

  Tensor tokens_cuda = fake_cuda(DType::i32, {2});
  expect_error([&] { call(logits, Tensor{}, tokens_cuda); }, ErrorKind::device, {"'tokens'", "cpu", "cuda:0"});
  // Shapes are checked before anything touches CUDA memory.
  Tensor lc = fake_cuda(DType::f32, {2, 10}), tc = fake_cuda(DType::f32, {3});
  expect_error([&] {
    ops::sample_tokens(lc, tc, fake_cuda(DType::i32, {2}), fake_cuda(DType::f32, {2}),
                       fake_cuda(DType::f32, {2}), fake_cuda(DType::i64, {2}),
                       fake_cuda(DType::i64, {2}), Tensor{}, fake_cuda(DType::i32, {2}));
  }, ErrorKind::shape, {"'temperature'", "[2]", "[3]"});
}

TEST(SampleTokensErrors, WorkspaceBytes) {
  EXPECT_EQ(ops::sample_tokens_workspace_bytes(256, 151936), 0);
  EXPECT_EQ(ops::sample_tokens_workspace_bytes(0, 1), 0);
  expect_error([] { ops::sample_tokens_workspace_bytes(-1, 100); }, ErrorKind::invalid_argument,
               {"sample_tokens_workspace_bytes", "'rows'"});
  expect_error([] { ops::sample_tokens_workspace_bytes(4, 0); }, ErrorKind::invalid_argument,
               {"'vocab'", "16777215"});
  expect_error([] { ops::sample_tokens_workspace_bytes(4, int64_t{1} << 24); },
               ErrorKind::invalid_argument, {"'vocab'"});
}

}  // namespace
}  // namespace braid::test
