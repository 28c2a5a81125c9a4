// Tensor views, owning buffers and host copies.
#include <gtest/gtest.h>

#include <numeric>

#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/tensor.h"

namespace braid {
namespace {

TEST(Tensor, ContiguousStridesAndViews) {
  OwnedTensor t(DType::f32, {2, 3, 4}, Device::cpu());
  const Tensor& v = t.view();
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_TRUE(v.rows_foldable());
  EXPECT_EQ(v.rows(), 6);
  EXPECT_EQ(v.row_stride(), 4);

  Tensor cols = v.slice(2, 1, 3);  // [2, 3, 2] inside rows of 4
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_TRUE(cols.rows_foldable());
  EXPECT_EQ(cols.row_stride(), 4);
  EXPECT_EQ(cols.data, v.at(1));

  Tensor mid = v.slice(1, 0, 2);  // rows no longer nest evenly across dim 0
  EXPECT_FALSE(mid.rows_foldable());

  Tensor row = v.select(0, 1);
  EXPECT_EQ(row.ndim, 2);
  EXPECT_EQ(row.data, v.at(12));
  EXPECT_EQ(describe(v), "f32[2, 3, 4] on cpu");
}

TEST(Tensor, BadViewsAreErrors) {
  OwnedTensor t(DType::bf16, {4, 8}, Device::cpu());
  EXPECT_THROW(t.view().slice(0, 2, 5), Error);
  EXPECT_THROW(t.view().reshape({3, 11}), Error);
  EXPECT_THROW(t.view().slice(1, 0, 4).reshape({16}), Error);
  EXPECT_THROW(t.view().size(2), Error);
  EXPECT_EQ(t.view().reshape({2, 16}).shape[1], 16);
}

TEST(Buffer, CopyAndFillOnHost) {
  OwnedTensor a(DType::i32, {10}, Device::cpu()), b(DType::i32, {10}, Device::cpu());
  std::iota(a.view().ptr<int32_t>(), a.view().ptr<int32_t>() + 10, 0);
  copy(a, b);
  EXPECT_EQ(b.view().ptr<int32_t>()[9], 9);
  fill_bytes(b, 0xFF);
  EXPECT_EQ(b.view().ptr<int32_t>()[3], -1);
  OwnedTensor c(DType::i32, {11}, Device::cpu());
  EXPECT_THROW(copy(a, c), Error);
}

TEST(Buffer, CudaRoundTripAndCachingAllocator) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (or a CPU-only build): skipped";
  OwnedTensor host(DType::f32, {1000}, Device::cpu());
  for (int i = 0; i < 1000; ++i) host.view().ptr<float>()[i] = 0.5f * i;
  void* first = nullptr;
  {
    OwnedTensor dev(DType::f32, {1000}, Device::cuda());
    first = dev.data();
    copy(host, dev);
    OwnedTensor back(DType::f32, {1000}, Device::cpu());
    copy(dev, back);
    EXPECT_EQ(back.view().ptr<float>()[999], 499.5f);
  }
  EXPECT_GT(cuda_allocator::bytes_cached(), 0u);
  OwnedTensor again(DType::f32, {1000}, Device::cuda());
  EXPECT_EQ(again.data(), first);  // the freed block of the same size class is reused
}

TEST(Buffer, CudaWithoutDeviceIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    OwnedTensor dev(DType::f32, {4}, Device::cuda());
    FAIL() << "allocation on a missing device should throw";
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == ErrorKind::cuda || e.kind() == ErrorKind::unsupported) << e.what();
  }
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

TEST(Tensor, RowGridCoversPackedHeadViews) {
  // qkv [5 tokens, (4 q heads + 2 k + 2 v) * 8]; q seen as [5, 4, 8], k as [5, 2, 8].
  OwnedTensor qkv(DType::bf16, {5, 64}, Device::cpu());
  Tensor q = qkv.view().slice(1, 0, 32);
  q.ndim = 3;
  q.shape[0] = 5, q.shape[1] = 4, q.shape[2] = 8;
  q.strides[0] = 64, q.strides[1] = 8, q.strides[2] = 1;
  EXPECT_FALSE(q.rows_foldable());
  RowGrid g;
  ASSERT_TRUE(q.row_grid(&g));
  EXPECT_EQ(g.rows, 20);
  EXPECT_EQ(g.offset(0), 0);
  EXPECT_EQ(g.offset(3), 24);  // token 0, head 3
  EXPECT_EQ(g.offset(4), 64);  // token 1, head 0
  EXPECT_EQ(g.offset(19), 4 * 64 + 24);

  RowGrid flat;
  ASSERT_TRUE(qkv.view().row_grid(&flat));
  EXPECT_EQ(flat.offset(3), 3 * 64);

  Tensor bad = q;  // three levels that do not nest: [2, 5, 4, 8] with a gap between the two
  bad.ndim = 4;
  bad.shape[0] = 2, bad.shape[1] = 5, bad.shape[2] = 4, bad.shape[3] = 8;
  bad.strides[0] = 1000, bad.strides[1] = 64, bad.strides[2] = 8, bad.strides[3] = 1;
  EXPECT_FALSE(bad.row_grid(&g));
}

}  // namespace
}  // namespace braid
