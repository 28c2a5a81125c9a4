// kv_append: tokens land in their slots (and nothing else changes), CUDA equals the reference,
// bad arguments are named.
#include <algorithm>
#include <numeric>
#include <random>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

// k and v as strided [n, heads, head_dim] views of one packed [n, (q + 2 kv) * head_dim] tensor.
struct Packed {
  OwnedTensor qkv;
  Tensor k, v;
};

Packed packed_kv(DType t, int64_t n, int64_t q_heads, int64_t kv_heads, int64_t hd, uint64_t seed) {
  Packed p{random_host(t, {n, (q_heads + 2 * kv_heads) * hd}, seed), {}, {}};
  auto head_view = [&](int64_t col0) {
    Tensor v = p.qkv.view().slice(1, col0, col0 + kv_heads * hd);
    v.ndim = 3;
    v.shape[1] = kv_heads, v.shape[2] = hd;
    v.strides[1] = hd, v.strides[2] = 1;
    return v;
  };
  p.k = head_view(q_heads * hd);
  p.v = head_view((q_heads + kv_heads) * hd);
  return p;
}

OwnedTensor shuffled_slots(int64_t n, int64_t capacity, uint64_t seed) {
  std::vector<int32_t> all(static_cast<size_t>(capacity));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(seed));
  OwnedTensor s(DType::i32, {n}, Device::cpu());
  std::copy(all.begin(), all.begin() + n, s.view().ptr<int32_t>());
  return s;
}

TEST(KvAppendReference, TokensLandInTheirSlots) {
  const int64_t n = 5, kv = 2, hd = 8, pages = 3, page_size = 4;
  auto p = packed_kv(DType::f32, n, 4, kv, hd, fresh_seed());
  auto slots = shuffled_slots(n, pages * page_size, fresh_seed());
  auto kp = random_host(DType::f32, {pages, page_size, kv, hd}, fresh_seed());
  auto vp = random_host(DType::f32, {pages, page_size, kv, hd}, fresh_seed());
  auto kp_before = to_floats(kp), vp_before = to_floats(vp);
  ops::kv_append(p.k, p.v, slots, kp, vp);
  auto kf = to_floats(p.k), vf = to_floats(p.v), kpf = to_floats(kp), vpf = to_floats(vp);
  std::vector<bool> written(static_cast<size_t>(pages * page_size), false);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t s = slots.view().ptr<int32_t>()[i];
    written[s] = true;
    for (int64_t j = 0; j < kv * hd; ++j) {
      EXPECT_EQ(kpf[s * kv * hd + j], kf[i * kv * hd + j]);
      EXPECT_EQ(vpf[s * kv * hd + j], vf[i * kv * hd + j]);
    }
  }
  for (int64_t s = 0; s < pages * page_size; ++s)
    if (!written[s])
      for (int64_t j = 0; j < kv * hd; ++j) EXPECT_EQ(kpf[s * kv * hd + j], kp_before[s * kv * hd + j]);
}

TEST(KvAppendDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  for (DType t : {DType::bf16, DType::f32}) {
    for (int64_t hd : {64, 128, 12}) {  // 12 bf16 = 24 bytes per row: the scalar path
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(dtype_name(t)) + " hd " +
                   std::to_string(hd));
      const int64_t n = 37, kv = 2, pages = 5, page_size = 16;
      auto p = packed_kv(t, n, 6, kv, hd, seed);
      auto slots = shuffled_slots(n, pages * page_size, seed + 1);
      auto kp = random_host(t, {pages, page_size, kv, hd}, seed + 2);
      auto vp = random_host(t, {pages, page_size, kv, hd}, seed + 3);
      auto dqkv = to_device(p.qkv, Device::cuda());
      auto dslots = to_device(slots, Device::cuda());
      auto dkp = to_device(kp, Device::cuda());
      auto dvp = to_device(vp, Device::cuda());
      Tensor dk = p.k, dv = p.v;
      dk.device = dv.device = Device::cuda();
      dk.data = static_cast<char*>(dqkv.data()) +
                (static_cast<char*>(p.k.data) - static_cast<char*>(p.qkv.data()));
      dv.data = static_cast<char*>(dqkv.data()) +
                (static_cast<char*>(p.v.data) - static_cast<char*>(p.qkv.data()));
      ops::kv_append(p.k, p.v, slots, kp, vp);
      ops::kv_append(dk, dv, dslots, dkp, dvp);
      EXPECT_EQ(to_floats(dkp), to_floats(kp));
      EXPECT_EQ(to_floats(dvp), to_floats(vp));
    }
  }
}

TEST(KvAppendErrors, NameTheArgument) {
  auto p = packed_kv(DType::bf16, 3, 4, 2, 8, 1);
  OwnedTensor slots(DType::i32, {3}, Device::cpu()), slots_i64(DType::i64, {3}, Device::cpu());
  for (int i = 0; i < 3; ++i) slots.view().ptr<int32_t>()[i] = i;
  OwnedTensor kp(DType::bf16, {2, 4, 2, 8}, Device::cpu()), vp(DType::bf16, {2, 4, 2, 8}, Device::cpu());
  OwnedTensor kp_heads(DType::bf16, {2, 4, 3, 8}, Device::cpu()), vp_f32(DType::f32, {2, 4, 2, 8}, Device::cpu());
  expect_error([&] { ops::kv_append(p.k, p.v, slots_i64, kp, vp); }, ErrorKind::dtype, {"kv_append", "'slots'", "i32"});
  expect_error([&] { ops::kv_append(p.k, p.v, slots, kp_heads, vp); }, ErrorKind::shape, {"'k_pages'", "[2, 4, 3, 8]"});
  expect_error([&] { ops::kv_append(p.k, p.v, slots, kp, vp_f32); }, ErrorKind::dtype, {"'v_pages'"});
  slots.view().ptr<int32_t>()[1] = 8;  // capacity is 2 pages x 4 = 8
  expect_error([&] { ops::kv_append(p.k, p.v, slots, kp, vp); }, ErrorKind::invalid_argument,
               {"'slots'", "[0, 8)", "8 at index 1"});
  Tensor kp_cuda = fake_cuda(DType::bf16, {2, 4, 2, 8});
  expect_error([&] { ops::kv_append(p.k, p.v, slots, kp_cuda, vp); }, ErrorKind::device, {"'k_pages'"});
}

}  // namespace
}  // namespace braid::test
