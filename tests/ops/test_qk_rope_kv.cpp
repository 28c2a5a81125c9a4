// qk_norm_rope_kv_append: on CUDA, bit-identical to rms_norm + rope_apply + kv_append run
// separately, and within tolerance of the CPU reference; on the CPU, the reference ops in
// sequence; bad arguments are named.
#include <algorithm>
#include <numeric>
#include <random>

#include "braid/ops.h"
#include "ops/rope_configs.h"
#include "test_util.h"

namespace braid::test {
namespace {

using ops::RopeConfig;
using ops::RopeScaling;

constexpr int64_t kPageSize = 16;
constexpr float kEps = 1e-6f;

const char* scaling_name(RopeScaling s) {
  return s == RopeScaling::llama3 ? "llama3" : s == RopeScaling::yarn ? "yarn" : "default";
}

// q, k and v as head views of one packed [n, (q_heads + 2 kv_heads) * head_dim] buffer.
struct QkvViews {
  Tensor q, k, v;
};

QkvViews split_qkv(const Tensor& packed, int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t n = packed.size(0), heads = q_heads + 2 * kv_heads;
  Tensor h = packed.reshape({n, heads, head_dim});
  return {h.slice(1, 0, q_heads), h.slice(1, q_heads, q_heads + kv_heads),
          h.slice(1, q_heads + kv_heads, heads)};
}

OwnedTensor shuffled_slots(int64_t n, int64_t capacity, uint64_t seed) {
  std::vector<int32_t> all(static_cast<size_t>(capacity));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(seed));
  OwnedTensor s(DType::i32, {n}, Device::cpu());
  std::copy(all.begin(), all.begin() + n, s.view().ptr<int32_t>());
  return s;
}

// The rows of a [pages, page_size, heads, head_dim] cache at `slots`, in token order.
std::vector<float> slot_rows(const Tensor& pages, const Tensor& slots) {
  const auto all = to_floats(pages);
  const int64_t row = pages.size(2) * pages.size(3);
  std::vector<float> out;
  for (int64_t i = 0; i < slots.size(0); ++i) {
    const int64_t s = slots.ptr<int32_t>()[i];
    out.insert(out.end(), all.begin() + s * row, all.begin() + (s + 1) * row);
  }
  return out;
}

struct Case {
  DType dtype;
  int64_t n, q_heads, kv_heads, head_dim;
  bool norm;
  RopeScaling scaling;
  int rotary_dim;  // 0: head_dim
  DType pos_dtype;
};

std::string case_name(const Case& c) {
  std::string name = std::string(dtype_name(c.dtype)) + "_n" + std::to_string(c.n) + "_q" +
                     std::to_string(c.q_heads) + "k" + std::to_string(c.kv_heads) + "_d" +
                     std::to_string(c.head_dim);
  if (c.rotary_dim) name += "_rot" + std::to_string(c.rotary_dim);
  return name + (c.norm ? "_norm_" : "_nonorm_") + scaling_name(c.scaling) + "_pos" +
         std::string(dtype_name(c.pos_dtype));
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// One problem's inputs on the host; run() copies them to a device and applies an op sequence.
struct Problem {
  Case c;
  OwnedTensor packed, q_norm, k_norm, positions, slots;
  int64_t pages;

  Problem(const Case& cs, uint64_t seed)
      : c(cs),
        packed(random_host(cs.dtype, {cs.n, (cs.q_heads + 2 * cs.kv_heads) * cs.head_dim}, seed,
                           -2, 2)),
        q_norm(random_host(cs.dtype, {cs.head_dim}, seed + 1, 0.5f, 1.5f)),
        k_norm(random_host(cs.dtype, {cs.head_dim}, seed + 2, 0.5f, 1.5f)),
        positions(random_host(cs.pos_dtype, {cs.n}, seed + 3, 0, 131072)),
        slots(shuffled_slots(cs.n, (cs.n / kPageSize + 2) * kPageSize, seed + 4)),
        pages(cs.n / kPageSize + 2) {}

  struct Result {
    std::vector<float> packed, k_pages, v_pages;
  };

  // fused: the one op; otherwise the three ops in sequence. Caches start as NaN poison.
  Result run(Device dev, bool fused) const {
    auto d_packed = to_device(packed, dev);
    auto qn = to_device(q_norm, dev), kn = to_device(k_norm, dev);
    auto pos = to_device(positions, dev), sl = to_device(slots, dev);
    const std::vector<int64_t> cache{pages, kPageSize, c.kv_heads, c.head_dim};
    auto kp = poisoned(c.dtype, cache, dev), vp = poisoned(c.dtype, cache, dev);
    auto v = split_qkv(d_packed, c.q_heads, c.kv_heads, c.head_dim);
    const RopeConfig config = rope_config_for(c.scaling, c.rotary_dim);
    if (fused) {
      ops::qk_norm_rope_kv_append(v.q, v.k, v.v, c.norm ? Tensor(qn) : Tensor{},
                                  c.norm ? Tensor(kn) : Tensor{}, kEps, pos, config, sl, kp, vp);
    } else {
      if (c.norm) {
        ops::rms_norm(v.q, qn, kEps, v.q);
        ops::rms_norm(v.k, kn, kEps, v.k);
      }
      ops::rope_apply(v.q, v.k, pos, config);
      ops::kv_append(v.k, v.v, sl, kp, vp);
    }
    return {to_floats(d_packed), to_floats(kp), to_floats(vp)};
  }
};

class QkRopeKvDiff : public ::testing::TestWithParam<Case> {};

TEST_P(QkRopeKvDiff, CudaFusedEqualsCudaSequenceBitForBit) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Problem p(GetParam(), seed);
  const auto fused = p.run(Device::cuda(), true), seq = p.run(Device::cuda(), false);
  EXPECT_EQ(bit_mismatches(fused.packed, seq.packed), 0) << "q/k/v differ";
  EXPECT_EQ(bit_mismatches(fused.k_pages, seq.k_pages), 0) << "k cache differs";
  EXPECT_EQ(bit_mismatches(fused.v_pages, seq.v_pages), 0) << "v cache differs";
  EXPECT_NE(bit_mismatches(fused.packed, to_floats(p.packed)), 0) << "nothing changed";
}

TEST_P(QkRopeKvDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Problem p(GetParam(), seed);
  const auto got = p.run(Device::cuda(), true), ref = p.run(Device::cpu(), true);
  const double tol = tolerance(p.c.dtype);
  EXPECT_LE(rel_error(got.packed, ref.packed), tol);
  // Only the slots written are compared: the rest must still be the NaN poison (bit-equal).
  auto rows = [&](const std::vector<float>& cache) {
    OwnedTensor t(p.c.dtype, {p.pages, kPageSize, p.c.kv_heads, p.c.head_dim}, Device::cpu());
    for (size_t i = 0; i < cache.size(); ++i)
      store_from_float(t.data(), p.c.dtype, static_cast<int64_t>(i), cache[i]);
    return slot_rows(t, p.slots);
  };
  EXPECT_LE(rel_error(rows(got.k_pages), rows(ref.k_pages)), tol);
  EXPECT_EQ(bit_mismatches(rows(got.v_pages), rows(ref.v_pages)), 0) << "v is a copy";
  // Untouched cache rows: poison on both.
  for (size_t i = 0; i < got.k_pages.size(); ++i)
    if (std::isnan(ref.k_pages[i])) ASSERT_TRUE(std::isnan(got.k_pages[i])) << "k cache " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QkRopeKvDiff,
    ::testing::Values(
        Case{DType::bf16, 1, 32, 8, 128, true, RopeScaling::llama3, 0, DType::i64},  // Qwen3 8B
        Case{DType::bf16, 3, 28, 4, 128, true, RopeScaling::yarn, 0, DType::i32},    // GQA 7:1
        Case{DType::f16, 17, 7, 1, 64, true, RopeScaling::none, 0, DType::i64},      // GQA 7:1
        Case{DType::bf16, 17, 14, 2, 64, false, RopeScaling::llama3, 0, DType::i32},
        Case{DType::f16, 1, 7, 1, 32, true, RopeScaling::yarn, 0, DType::i32},
        Case{DType::bf16, 3, 8, 1, 32, false, RopeScaling::none, 0, DType::i64},
        Case{DType::f32, 3, 7, 1, 128, true, RopeScaling::llama3, 0, DType::i32},
        Case{DType::bf16, 17, 16, 2, 128, true, RopeScaling::yarn, 64, DType::i64},  // partial
        Case{DType::f16, 3, 7, 1, 36, true, RopeScaling::llama3, 0, DType::i32},  // scalar, 2 warps
        Case{DType::f32, 3, 4, 2, 256, true, RopeScaling::none, 0, DType::i64},   // 2 warps
        Case{DType::bf16, 17, 7, 1, 128, false, RopeScaling::yarn, 0, DType::i32}),
    [](const auto& info) { return case_name(info.param); });

// The CPU path is the reference ops in order (runs without a GPU).
TEST(QkRopeKvReference, EqualsTheSeparateOps) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (bool norm : {true, false}) {
    Problem p(Case{DType::bf16, 5, 7, 1, 64, norm, RopeScaling::llama3, 0, DType::i32}, seed);
    const auto fused = p.run(Device::cpu(), true), seq = p.run(Device::cpu(), false);
    EXPECT_EQ(bit_mismatches(fused.packed, seq.packed), 0) << "norm " << norm;
    EXPECT_EQ(bit_mismatches(fused.k_pages, seq.k_pages), 0) << "norm " << norm;
    EXPECT_EQ(bit_mismatches(fused.v_pages, seq.v_pages), 0) << "norm " << norm;
    EXPECT_NE(bit_mismatches(fused.packed, to_floats(p.packed)), 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Argument errors (no GPU needed).

TEST(QkRopeKvErrors, NameTheArgument) {
  const DType bf = DType::bf16;
  OwnedTensor packed = random_host(bf, {3, (7 + 2) * 64}, 1);
  auto v = split_qkv(packed, 7, 1, 64);
  OwnedTensor qn(bf, {64}, Device::cpu()), kn(bf, {64}, Device::cpu()), kn32(bf, {32}, Device::cpu());
  OwnedTensor pos(DType::i32, {3}, Device::cpu());
  std::fill_n(pos.view().ptr<int32_t>(), 3, 0);
  OwnedTensor slots = shuffled_slots(3, 32, 2), slots64(DType::i64, {3}, Device::cpu());
  OwnedTensor kp(bf, {2, 16, 1, 64}, Device::cpu()), vp(bf, {2, 16, 1, 64}, Device::cpu());
  const RopeConfig rope;
  auto call = [&](const Tensor& q, const Tensor& k, const Tensor& qnorm, const Tensor& knorm,
                  const Tensor& s, const Tensor& kpages, const RopeConfig& c) {
    ops::qk_norm_rope_kv_append(q, k, v.v, qnorm, knorm, kEps, pos, c, s, kpages, vp);
  };
  const char* op = "qk_norm_rope_kv_append";
  // Only one of the norms.
  expect_error([&] { call(v.q, v.k, qn, Tensor{}, slots, kp, rope); }, ErrorKind::invalid_argument,
               {op, "'k_norm'"});
  expect_error([&] { call(v.q, v.k, Tensor{}, kn, slots, kp, rope); }, ErrorKind::invalid_argument,
               {op, "'q_norm'"});
  // A norm weight of the wrong size.
  expect_error([&] { call(v.q, v.k, qn, kn32, slots, kp, rope); }, ErrorKind::shape,
               {op, "'k_norm'", "[32]"});
  // k with a head_dim other than q's.
  OwnedTensor k32(bf, {3, 1, 32}, Device::cpu());
  expect_error([&] { call(v.q, k32, Tensor{}, Tensor{}, slots, kp, rope); }, ErrorKind::shape,
               {op, "'k'", "[3, 1, 32]"});
  // slots must be i32, as kv_append's.
  expect_error([&] { call(v.q, v.k, qn, kn, slots64, kp, rope); }, ErrorKind::dtype,
               {op, "'slots'", "i32"});
  // Cache of the wrong shape, and on another device.
  OwnedTensor kp_heads(bf, {2, 16, 2, 64}, Device::cpu());
  expect_error([&] { call(v.q, v.k, qn, kn, slots, kp_heads, rope); }, ErrorKind::shape,
               {op, "'k_pages'"});
  Tensor kp_cuda = fake_cuda(bf, {2, 16, 1, 64});
  expect_error([&] { call(v.q, v.k, qn, kn, slots, kp_cuda, rope); }, ErrorKind::device,
               {op, "'k_pages'"});
  // A slot past the cache (checked on the CPU).
  OwnedTensor bad_slots = shuffled_slots(3, 32, 3);
  bad_slots.view().ptr<int32_t>()[2] = 32;
  expect_error([&] { call(v.q, v.k, qn, kn, bad_slots, kp, rope); }, ErrorKind::invalid_argument,
               {op, "'slots'", "[0, 32)", "32 at index 2"});
  // A bad rope config is reported as rope_apply reports it.
  RopeConfig bad;
  bad.theta = -1.0f;
  expect_error([&] { call(v.q, v.k, qn, kn, slots, kp, bad); }, ErrorKind::invalid_argument,
               {"rope_apply", "config.theta"});
}

}  // namespace
}  // namespace braid::test
