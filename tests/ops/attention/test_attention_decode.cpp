// attention_decode: the CUDA split-KV kernels (and their fallback) against the CPU reference on
// batches of 1, 3 and 16 sequences with caches of 1 to 33000 tokens, GQA 4:1 and 7:1, MQA, more
// query heads per KV head than one block takes, pages of 1, 7 and 16 tokens in shuffled order,
// page tables far larger than the sequences, strided q/out, lse, and a CUDA graph replayed over
// new kv_lens; plus the argument errors (which run without a GPU).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "braid/ops.h"
#include "ops/attention/decode_batch.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

// ---------------------------------------------------------------------------------------------

struct DecodeCase {
  DType dtype;
  int64_t page_size, q_heads, kv_heads, head_dim;
  std::vector<int32_t> lens;
  int64_t spare_pages;
  float scale_factor;  // softmax_scale = scale_factor / sqrt(head_dim): > 1 sharpens the softmax
  const char* what;
};

std::string case_name(const DecodeCase& c) {
  return std::string(dtype_name(c.dtype)) + "_page" + std::to_string(c.page_size) + "_q" +
         std::to_string(c.q_heads) + "k" + std::to_string(c.kv_heads) + "_d" +
         std::to_string(c.head_dim) + "_b" + std::to_string(c.lens.size()) + "_" + c.what;
}
void PrintTo(const DecodeCase& c, std::ostream* os) { *os << case_name(c); }

class AttentionDecodeDiff : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(AttentionDecodeDiff, MatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto& c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const DecodeBatch b = make_batch(c.dtype, c.q_heads, c.kv_heads, c.head_dim, c.page_size, c.lens,
                                   c.spare_pages, seed);
  const int64_t batch = static_cast<int64_t>(c.lens.size());
  const float scale = c.scale_factor / std::sqrt(static_cast<float>(c.head_dim));
  auto ref = poisoned(c.dtype, {batch, c.q_heads, c.head_dim}, Device::cpu());
  auto ref_lse = poisoned(DType::f32, {batch, c.q_heads}, Device::cpu());
  ops::attention_decode(b.q, b.paged(), scale, ref, ref_lse, workspace_for(b, Device::cpu()));

  const DeviceBatch d = to_cuda(b);
  auto out = poisoned(c.dtype, {batch, c.q_heads, c.head_dim}, Device::cuda());
  auto lse = poisoned(DType::f32, {batch, c.q_heads}, Device::cuda());
  ops::attention_decode(d.q, d.paged(), scale, out, lse, workspace_for(b, Device::cuda()));
  EXPECT_LE(rel_error(to_floats(out), to_floats(ref)), tolerance(c.dtype));
  // lse is fp32 from the same rounded inputs, whatever the dtype.
  EXPECT_LE(rel_error(to_floats(lse), to_floats(ref_lse)), tolerance(DType::f32));
}

// Sixteen sequences whose lengths fall on and around the tile (64 keys) and page boundaries.
const std::vector<int32_t> kMixedLens = {1,   7,   255, 4097, 16,  17,   63,  64,
                                         65,  128, 129, 1000, 2048, 300, 5,   4096};

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionDecodeDiff,
    ::testing::Values(
        DecodeCase{DType::bf16, 16, 8, 2, 128, {33000}, 1, 1.0f, "long"},          // GQA 4:1
        DecodeCase{DType::f16, 16, 8, 2, 64, {4097}, 1, 1.0f, "pastpow2"},
        DecodeCase{DType::bf16, 1, 28, 4, 128, {1, 7, 255}, 1, 1.0f, "short"},     // 7:1, page 1
        DecodeCase{DType::f16, 1, 28, 4, 64, {255, 1, 4097}, 1, 3.0f, "sharp"},
        DecodeCase{DType::bf16, 16, 32, 8, 128, kMixedLens, 1, 1.0f, "mixed"},
        DecodeCase{DType::f16, 16, 32, 8, 64, kMixedLens, 1, 4.0f, "mixedsharp"},
        DecodeCase{DType::f16, 16, 8, 1, 128, {7, 4097, 1}, 1, 1.0f, "mqa"},       // MQA 8:1
        // 20 query heads on one KV head: two blocks of heads (16 + 4) per KV head
        DecodeCase{DType::bf16, 16, 20, 1, 64, {255, 4097, 33000}, 1, 1.0f, "mqa20"},
        DecodeCase{DType::bf16, 7, 16, 2, 128, {1, 7, 255}, 1, 2.0f, "page7"},
        DecodeCase{DType::f16, 16, 4, 4, 64, {1, 7, 100}, 1, 1.0f, "mhaonesplit"},
        // a page table 64x longer than the sequences: most chunks are empty
        DecodeCase{DType::bf16, 16, 8, 2, 128, {7, 255, 1}, 256, 1.0f, "spare"},
        // fallback through attention()'s kernel: f32, head_dim 96
        DecodeCase{DType::f32, 16, 8, 2, 128, {7, 4097}, 1, 1.0f, "fallback"},
        DecodeCase{DType::bf16, 16, 8, 2, 96, {255, 4097}, 1, 1.0f, "fallback"}),
    [](const auto& info) { return case_name(info.param); });

TEST(AttentionDecodeCuda, StridedQueriesAndNoLse) {
  // q as the query part of a packed QKV output and out as a head slice of a wider buffer, with
  // lse not requested; the heads around the out slice must stay untouched.
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t qh = 8, kvh = 2, hd = 128;
  for (const std::vector<int32_t>& lens : {std::vector<int32_t>{40, 5000}, std::vector<int32_t>{3, 9}}) {
    const DecodeBatch b = make_batch(DType::bf16, qh, kvh, hd, 16, lens, 1, seed);
    const int64_t batch = static_cast<int64_t>(lens.size());
    auto packed = random_host(DType::bf16, {batch, qh + 2 * kvh, hd}, seed + 7);
    const Tensor q_host = packed.view().slice(1, 0, qh);
    for (int64_t t = 0; t < batch; ++t)
      for (int64_t e = 0; e < qh * hd; ++e)
        store_from_float(q_host.data, DType::bf16, t * q_host.strides[0] + e,
                         load_as_float(b.q.data(), DType::bf16, t * qh * hd + e));
    auto ref = poisoned(DType::bf16, {batch, qh, hd}, Device::cpu());
    ops::attention_decode(b.q, b.paged(), 0.08f, ref, Tensor{}, workspace_for(b, Device::cpu()));

    const DeviceBatch d = to_cuda(b);
    auto packed_dev = to_device(packed, Device::cuda());
    auto wide_out = poisoned(DType::bf16, {batch, qh + 2, hd}, Device::cuda());
    ops::attention_decode(packed_dev.view().slice(1, 0, qh), d.paged(), 0.08f,
                          wide_out.view().slice(1, 1, qh + 1), Tensor{},
                          workspace_for(b, Device::cuda()));
    const auto wide = to_floats(wide_out);
    std::vector<float> got;
    for (int64_t t = 0; t < batch; ++t) {
      for (int64_t h = 0; h < qh + 2; ++h) {
        const auto begin = wide.begin() + (t * (qh + 2) + h) * hd;
        if (h == 0 || h == qh + 1) {
          for (int64_t e = 0; e < hd; ++e) ASSERT_TRUE(std::isnan(begin[e])) << "sequence " << t;
        } else {
          got.insert(got.end(), begin, begin + hd);
        }
      }
    }
    EXPECT_LE(rel_error(got, to_floats(ref)), tolerance(DType::bf16)) << "lens " << lens[0];
  }
}

TEST(AttentionDecodeCuda, UnalignedOutputRowsGetTheSameBits) {
  // The kernel stores its output 16 bytes at a time where out's rows allow it, else an element at
  // a time: an out whose rows start one element past 16-byte boundaries (a view of a wider
  // buffer) must get exactly the aligned call's bits, the column before it left untouched. One
  // short sequence (its block writes out) and one long (split: the chunks' partial sums too).
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t qh = 8, kvh = 2;
  for (const int64_t hd : {int64_t{64}, int64_t{128}}) {
    const std::vector<int32_t> lens{40, 5000};
    const DecodeBatch b = make_batch(DType::bf16, qh, kvh, hd, 16, lens, 1, seed);
    const int64_t batch = static_cast<int64_t>(lens.size());
    const DeviceBatch d = to_cuda(b);
    auto aligned = poisoned(DType::bf16, {batch, qh, hd}, Device::cuda());
    ops::attention_decode(d.q, d.paged(), 0.08f, aligned, Tensor{}, workspace_for(b, Device::cuda()));
    auto wide = poisoned(DType::bf16, {batch, qh, hd + 1}, Device::cuda());
    ops::attention_decode(d.q, d.paged(), 0.08f, wide.view().slice(2, 1, hd + 1), Tensor{},
                          workspace_for(b, Device::cuda()));
    const auto want = to_floats(aligned), got = to_floats(wide);
    for (int64_t row = 0; row < batch * qh; ++row) {
      ASSERT_TRUE(std::isnan(got[row * (hd + 1)])) << "head row " << row << ", head_dim " << hd;
      for (int64_t e = 0; e < hd; ++e)
        ASSERT_EQ(got[row * (hd + 1) + 1 + e], want[row * hd + e])
            << "head row " << row << ", element " << e << ", head_dim " << hd;
    }
  }
}

#if BRAID_WITH_CUDA
// The grid depends on shapes only: a call captured once in a CUDA graph must give the right
// answer when replayed after kv_lens (and the page table) have changed on the device.
TEST(AttentionDecodeCuda, GraphReplayFollowsNewLengths) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t qh = 32, kvh = 8, hd = 128;
  // Both steps fit the same page table shape: sequence lengths swap between the steps.
  const std::vector<std::vector<int32_t>> steps = {{100, 3000}, {3000, 100}};
  const DecodeBatch first = make_batch(DType::bf16, qh, kvh, hd, 16, steps[0], 1, seed);
  const DecodeBatch second = make_batch(DType::bf16, qh, kvh, hd, 16, steps[1], 1, seed + 11);
  ASSERT_EQ(first.capacity(), second.capacity());
  ASSERT_EQ(first.k_pages.view().shape[0], second.k_pages.view().shape[0]);

  DeviceBatch d = to_cuda(first);
  auto out = poisoned(DType::bf16, {2, qh, hd}, Device::cuda());
  auto lse = poisoned(DType::f32, {2, qh}, Device::cuda());
  auto ws = workspace_for(first, Device::cuda());
  StreamOwner stream;
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::attention_decode(d.q, d.paged(), 0.09f, out, lse, ws, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "attention_decode failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (const DecodeBatch* host : {&first, &second}) {
    for (const auto& [src, dst] : {std::pair{&host->q, &d.q}, std::pair{&host->k_pages, &d.k_pages},
                                   std::pair{&host->v_pages, &d.v_pages},
                                   std::pair{&host->page_table, &d.page_table},
                                   std::pair{&host->kv_lens, &d.kv_lens}})
      copy(*src, *dst);
    // On the graph's stream: `s` does not wait for the legacy stream, so a memset there could
    // land in the middle of the replay (it did under racecheck and initcheck).
    fill_bytes(out, 0xFF, stream.get());
    fill_bytes(lse, 0xFF, stream.get());
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    stream.synchronize();
    auto ref = poisoned(DType::bf16, {2, qh, hd}, Device::cpu());
    auto ref_lse = poisoned(DType::f32, {2, qh}, Device::cpu());
    ops::attention_decode(host->q, host->paged(), 0.09f, ref, ref_lse,
                          workspace_for(*host, Device::cpu()));
    EXPECT_LE(rel_error(to_floats(out), to_floats(ref)), tolerance(DType::bf16))
        << "step with kv_lens[0] = " << host->kv_lens.view().ptr<int32_t>()[0];
    EXPECT_LE(rel_error(to_floats(lse), to_floats(ref_lse)), tolerance(DType::f32));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif

// ---------------------------------------------------------------------------------------------

TEST(AttentionDecodeReference, WorkspaceBound) {
  // Room for at least one chunk per (sequence, head), growing with the context up to a bound
  // set by the batch, and always room for the fallback's batch + 1 offsets.
  const int64_t one = ops::attention_decode_workspace_floats(4, 32, 128, 64);
  EXPECT_GE(one, 4 * 32 * 129);
  EXPECT_GT(ops::attention_decode_workspace_floats(4, 32, 128, 8192), one);
  EXPECT_EQ(ops::attention_decode_workspace_floats(4, 32, 128, 1 << 20),
            ops::attention_decode_workspace_floats(4, 32, 128, 1 << 21));
  EXPECT_GE(ops::attention_decode_workspace_floats(1000, 1, 1, 1), 1001);
}

TEST(AttentionDecodeReference, AgreesWithAttentionOfOneQueryPerSequence) {
  // The CPU path is attention() with cu_seqlens_q = {0, 1, ..., batch}, causal or not.
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const DecodeBatch b = make_batch(DType::f32, 6, 3, 32, 4, {1, 9, 30}, 2, seed);
  OwnedTensor cu(DType::i32, {4}, Device::cpu());
  std::iota(cu.view().ptr<int32_t>(), cu.view().ptr<int32_t>() + 4, 0);
  auto got = poisoned(DType::f32, {3, 6, 32}, Device::cpu());
  auto got_lse = poisoned(DType::f32, {3, 6}, Device::cpu());
  ops::attention_decode(b.q, b.paged(), 0.2f, got, got_lse, workspace_for(b, Device::cpu()));
  for (bool causal : {true, false}) {
    auto want = poisoned(DType::f32, {3, 6, 32}, Device::cpu());
    auto want_lse = poisoned(DType::f32, {3, 6}, Device::cpu());
    ops::attention(b.q, cu, b.paged(), causal, 0.2f, want, want_lse);
    EXPECT_EQ(rel_error(to_floats(got), to_floats(want)), 0.0);
    EXPECT_EQ(rel_error(to_floats(got_lse), to_floats(want_lse)), 0.0);
  }
}

TEST(AttentionDecodeErrors, IndexValuesOnTheCpu) {
  DecodeBatch b = make_batch(DType::f32, 4, 2, 16, 4, {3, 9}, 1, 1);
  auto out = poisoned(DType::f32, {2, 4, 16}, Device::cpu());
  const auto ws = workspace_for(b, Device::cpu());
  int32_t* lens = b.kv_lens.view().ptr<int32_t>();
  lens[1] = 0;  // a decode query needs at least its own key
  expect_error([&] { ops::attention_decode(b.q, b.paged(), 0.1f, out, Tensor{}, ws); },
               ErrorKind::invalid_argument, {"attention_decode", "'kv.kv_lens'", "kv_lens[1]", "got 0"});
  lens[1] = 17;  // past the table's capacity of 4 pages of 4
  expect_error([&] { ops::attention_decode(b.q, b.paged(), 0.1f, out, Tensor{}, ws); },
               ErrorKind::invalid_argument, {"attention_decode", "'kv.kv_lens'", "capacity 16"});
  lens[1] = 9;
  b.page_table.view().ptr<int32_t>()[1 * 4 + 2] = 99;
  expect_error([&] { ops::attention_decode(b.q, b.paged(), 0.1f, out, Tensor{}, ws); },
               ErrorKind::invalid_argument, {"attention_decode", "'kv.page_table'", "[1, 2] = 99"});
}

TEST(AttentionDecodeErrors, ShapesDtypesDevices) {
  // Runs without a GPU: every error below is raised before anything touches the device.
  const int64_t hd = 128, cap = 3 * 16;
  const int64_t need = ops::attention_decode_workspace_floats(2, 8, hd, cap);
  Tensor q = fake_cuda(DType::bf16, {2, 8, hd}), out = fake_cuda(DType::bf16, {2, 8, hd});
  ops::PagedKV kv{fake_cuda(DType::bf16, {6, 16, 2, hd}), fake_cuda(DType::bf16, {6, 16, 2, hd}),
                  fake_cuda(DType::i32, {2, 3}), fake_cuda(DType::i32, {2})};
  Tensor ws = fake_cuda(DType::f32, {need});
  auto call = [&](const Tensor& q_, const ops::PagedKV& kv_, const Tensor& out_, const Tensor& lse_,
                  const Tensor& ws_) { ops::attention_decode(q_, kv_, 0.1f, out_, lse_, ws_); };

  expect_error([&] { call(q, kv, out, Tensor{}, fake_cuda(DType::f32, {need - 1})); },
               ErrorKind::shape,
               {"attention_decode", "'workspace'", "at least " + std::to_string(need),
                std::to_string(need - 1) + " elements"});
  expect_error([&] { call(q, kv, out, Tensor{}, fake_cuda(DType::bf16, {need})); }, ErrorKind::dtype,
               {"attention_decode", "'workspace'", "f32", "bf16"});
  expect_error([&] { call(fake_cuda(DType::bf16, {2, 8 * hd}), kv, out, Tensor{}, ws); },
               ErrorKind::shape, {"attention_decode", "'q'", "3 dimensions"});
  ops::PagedKV kv_batch = kv;
  kv_batch.page_table = fake_cuda(DType::i32, {3, 3});
  expect_error([&] { call(q, kv_batch, out, Tensor{}, ws); }, ErrorKind::shape,
               {"attention_decode", "'kv.page_table'", "batch"});
  ops::PagedKV kv_heads = kv;
  kv_heads.k_pages = kv_heads.v_pages = fake_cuda(DType::bf16, {6, 16, 3, hd});
  expect_error([&] { call(q, kv_heads, out, Tensor{}, ws); }, ErrorKind::shape,
               {"attention_decode", "'kv.k_pages'", "divides"});
  expect_error([&] { call(q, kv, fake_cuda(DType::f16, {2, 8, hd}), Tensor{}, ws); },
               ErrorKind::dtype, {"attention_decode", "'out'", "bf16", "f16"});
  expect_error([&] { call(q, kv, out, fake_cuda(DType::f32, {2, 4}), ws); }, ErrorKind::shape,
               {"attention_decode", "'lse'", "[2, 8]"});
  ops::PagedKV kv_i64 = kv;
  kv_i64.kv_lens = fake_cuda(DType::i64, {2});
  expect_error([&] { call(q, kv_i64, out, Tensor{}, ws); }, ErrorKind::dtype,
               {"attention_decode", "'kv.kv_lens'", "i32", "i64"});
  OwnedTensor ws_cpu(DType::f32, {need}, Device::cpu());
  expect_error([&] { call(q, kv, out, Tensor{}, ws_cpu); }, ErrorKind::device,
               {"attention_decode", "'workspace'", "cuda:0", "cpu"});
  expect_error([&] { ops::attention_decode(q, kv, NAN, out, Tensor{}, ws); },
               ErrorKind::invalid_argument, {"attention_decode", "'softmax_scale'", "finite"});

  const int64_t big = 288;
  Tensor q_big = fake_cuda(DType::bf16, {2, 8, big}), out_big = fake_cuda(DType::bf16, {2, 8, big});
  ops::PagedKV kv_big{fake_cuda(DType::bf16, {6, 16, 2, big}), fake_cuda(DType::bf16, {6, 16, 2, big}),
                      fake_cuda(DType::i32, {2, 3}), fake_cuda(DType::i32, {2})};
  Tensor ws_big = fake_cuda(DType::f32, {ops::attention_decode_workspace_floats(2, 8, big, cap)});
#if BRAID_WITH_CUDA
  expect_error([&] { call(q_big, kv_big, out_big, Tensor{}, ws_big); }, ErrorKind::unsupported,
               {"attention_decode", "'q'", "at most 256", "head_dim 288"});
#else
  expect_error([&] { call(q_big, kv_big, out_big, Tensor{}, ws_big); }, ErrorKind::unsupported,
               {"attention_decode", "no CUDA support"});
#endif
}

}  // namespace
}  // namespace braid::test
