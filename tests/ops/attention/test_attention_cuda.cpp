// attention on CUDA against the CPU reference: ragged prefill batches (chunked and whole
// prompts, an empty sequence), decode steps over short and long caches, GQA/MQA/MHA, pages of
// 1, 7 and 16 tokens in shuffled order, head_dim 64/128/256, every float dtype, with lse; and
// the CUDA-only argument errors.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Seq {
  int32_t q_len, kv_len;
};

// A batch in the op's layout, on the host. Each sequence's pages are drawn from a shuffled pool;
// every slot no sequence owns (spare pages, the tail of last pages) holds NaN, and unused
// page-table entries hold -1, so a read outside a sequence shows up in the output.
struct PagedBatch {
  OwnedTensor q, k_pages, v_pages, page_table, kv_lens, cu_seqlens_q;
  int64_t total_q = 0;
  ops::PagedKV paged() const { return {k_pages, v_pages, page_table, kv_lens}; }
};

PagedBatch make_paged_batch(DType dtype, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                            int64_t page_size, const std::vector<Seq>& seqs, uint64_t seed) {
  PagedBatch b;
  const int64_t batch = static_cast<int64_t>(seqs.size());
  int64_t pages_needed = 0, max_pages = 1;
  for (const Seq& s : seqs) {
    b.total_q += s.q_len;
    const int64_t p = (s.kv_len + page_size - 1) / page_size;
    pages_needed += p;
    max_pages = std::max(max_pages, p + 1);  // one spare column of padding
  }
  const int64_t num_pages = pages_needed + 3;
  b.q = random_host(dtype, {b.total_q, q_heads, head_dim}, seed);
  b.k_pages = random_host(dtype, {num_pages, page_size, kv_heads, head_dim}, seed + 1);
  b.v_pages = random_host(dtype, {num_pages, page_size, kv_heads, head_dim}, seed + 2);
  b.page_table = OwnedTensor(DType::i32, {batch, max_pages}, Device::cpu());
  b.kv_lens = OwnedTensor(DType::i32, {batch}, Device::cpu());
  b.cu_seqlens_q = OwnedTensor(DType::i32, {batch + 1}, Device::cpu());

  std::vector<int32_t> pool(static_cast<size_t>(num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937_64(seed + 3));
  std::vector<bool> owned(static_cast<size_t>(num_pages * page_size), false);
  int32_t* table = b.page_table.view().ptr<int32_t>();
  std::fill_n(table, batch * max_pages, -1);
  int32_t* cu = b.cu_seqlens_q.view().ptr<int32_t>();
  cu[0] = 0;
  for (int64_t s = 0; s < batch; ++s) {
    const Seq& seq = seqs[static_cast<size_t>(s)];
    b.kv_lens.view().ptr<int32_t>()[s] = seq.kv_len;
    cu[s + 1] = cu[s] + seq.q_len;
    for (int64_t j = 0; j < seq.kv_len; ++j) {
      if (j % page_size == 0) {
        table[s * max_pages + j / page_size] = pool.back();
        pool.pop_back();
      }
      owned[static_cast<size_t>(table[s * max_pages + j / page_size] * page_size + j % page_size)] = true;
    }
  }
  const int64_t token_elems = kv_heads * head_dim;
  for (int64_t slot = 0; slot < num_pages * page_size; ++slot) {
    if (owned[static_cast<size_t>(slot)]) continue;
    for (int64_t e = 0; e < token_elems; ++e) {
      store_from_float(b.k_pages.data(), dtype, slot * token_elems + e, NAN);
      store_from_float(b.v_pages.data(), dtype, slot * token_elems + e, NAN);
    }
  }
  return b;
}

struct Devices {
  OwnedTensor q, k_pages, v_pages, page_table, kv_lens, cu_seqlens_q;
  ops::PagedKV paged() const { return {k_pages, v_pages, page_table, kv_lens}; }
};

Devices to_cuda(const PagedBatch& b) {
  const Device d = Device::cuda();
  return {to_device(b.q, d),          to_device(b.k_pages, d), to_device(b.v_pages, d),
          to_device(b.page_table, d), to_device(b.kv_lens, d), to_device(b.cu_seqlens_q, d)};
}

// ---------------------------------------------------------------------------------------------

enum class Mix { prefill, decode };

// Prefill: a chunk of a longer prompt (q_len < kv_len), an empty sequence, a whole prompt
// (q_len == kv_len) and another chunk. Decode: one query over caches of 1, 17, 1000 and 4097
// tokens (4097: one past a power of two, a partial last page).
std::vector<Seq> sequences(Mix mix) {
  if (mix == Mix::prefill) return {{6, 37}, {0, 5}, {45, 45}, {17, 90}};
  return {{1, 1}, {1, 17}, {1, 1000}, {1, 4097}};
}

struct CudaAttnCase {
  DType dtype;
  int64_t page_size, q_heads, kv_heads, head_dim;
  bool causal;
  Mix mix;
};

std::string case_name(const CudaAttnCase& c) {
  return std::string(dtype_name(c.dtype)) + "_page" + std::to_string(c.page_size) + "_q" +
         std::to_string(c.q_heads) + "k" + std::to_string(c.kv_heads) + "_d" +
         std::to_string(c.head_dim) + (c.causal ? "_causal" : "_full") +
         (c.mix == Mix::prefill ? "_prefill" : "_decode");
}
void PrintTo(const CudaAttnCase& c, std::ostream* os) { *os << case_name(c); }

class AttentionCudaDiff : public ::testing::TestWithParam<CudaAttnCase> {};

TEST_P(AttentionCudaDiff, MatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const PagedBatch b = make_paged_batch(c.dtype, c.q_heads, c.kv_heads, c.head_dim, c.page_size,
                                        sequences(c.mix), seed);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  auto ref = poisoned(c.dtype, {b.total_q, c.q_heads, c.head_dim}, Device::cpu());
  auto ref_lse = poisoned(DType::f32, {b.total_q, c.q_heads}, Device::cpu());
  ops::attention(b.q, b.cu_seqlens_q, b.paged(), c.causal, scale, ref, ref_lse);

  const Devices d = to_cuda(b);
  auto out = poisoned(c.dtype, {b.total_q, c.q_heads, c.head_dim}, Device::cuda());
  auto lse = poisoned(DType::f32, {b.total_q, c.q_heads}, Device::cuda());
  ops::attention(d.q, d.cu_seqlens_q, d.paged(), c.causal, scale, out, lse);
  EXPECT_LE(rel_error(to_floats(out), to_floats(ref)), tolerance(c.dtype));
  // lse is fp32 from the same rounded inputs, whatever the dtype.
  EXPECT_LE(rel_error(to_floats(lse), to_floats(ref_lse)), tolerance(DType::f32));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionCudaDiff,
    ::testing::Values(
        CudaAttnCase{DType::bf16, 16, 8, 2, 128, true, Mix::prefill},   // GQA 4:1
        CudaAttnCase{DType::bf16, 16, 8, 2, 128, false, Mix::prefill},  // full, FlashAttention path
        CudaAttnCase{DType::f16, 3, 8, 4, 64, false, Mix::prefill},     // pages of 3
        CudaAttnCase{DType::bf16, 16, 8, 2, 128, true, Mix::decode},
        CudaAttnCase{DType::bf16, 16, 28, 4, 128, true, Mix::decode},   // GQA 7:1
        CudaAttnCase{DType::bf16, 7, 28, 4, 64, true, Mix::prefill},    // 7:1, pages of 7
        CudaAttnCase{DType::f16, 1, 8, 1, 64, true, Mix::prefill},      // MQA, one token per page
        CudaAttnCase{DType::f16, 16, 32, 8, 128, true, Mix::decode},
        CudaAttnCase{DType::f32, 16, 8, 2, 64, false, Mix::prefill},    // full (non-causal)
        CudaAttnCase{DType::f32, 1, 7, 1, 128, false, Mix::decode},     // 7:1 MQA, page 1
        CudaAttnCase{DType::f32, 16, 8, 8, 128, true, Mix::prefill},    // MHA
        CudaAttnCase{DType::bf16, 1, 4, 1, 64, false, Mix::decode},
        CudaAttnCase{DType::bf16, 16, 16, 4, 256, true, Mix::prefill},  // head_dim 256
        CudaAttnCase{DType::f32, 16, 14, 2, 256, true, Mix::decode},
        CudaAttnCase{DType::f16, 7, 12, 3, 256, false, Mix::prefill},
        // head_dims below the padded width: lanes past head_dim stay idle
        CudaAttnCase{DType::bf16, 16, 4, 2, 16, true, Mix::prefill},
        CudaAttnCase{DType::f32, 7, 4, 2, 32, true, Mix::decode},
        CudaAttnCase{DType::bf16, 16, 12, 4, 96, true, Mix::prefill},
        CudaAttnCase{DType::f16, 16, 8, 2, 80, false, Mix::decode}),
    [](const auto& info) { return case_name(info.param); });

TEST(AttentionCuda, StridedQueriesAndNoLse) {
  // q and out as head slices of wider packed buffers (q inside a QKV projection output), with
  // lse not requested; the heads around the out slice must stay untouched.
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t qh = 8, kvh = 2, hd = 128;
  const PagedBatch b = make_paged_batch(DType::bf16, qh, kvh, hd, 16, {{3, 40}, {5, 5}}, seed);
  const int64_t tokens = b.total_q;
  auto packed = random_host(DType::bf16, {tokens, qh + 2 * kvh, hd}, seed + 7);
  Tensor q_host = packed.view().slice(1, 0, qh);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < qh * hd; ++e)
      store_from_float(q_host.data, DType::bf16, t * q_host.strides[0] + e,
                       load_as_float(b.q.data(), DType::bf16, t * qh * hd + e));
  auto ref = poisoned(DType::bf16, {tokens, qh, hd}, Device::cpu());
  ops::attention(b.q, b.cu_seqlens_q, b.paged(), true, 0.08f, ref, Tensor{});

  const Devices d = to_cuda(b);
  auto packed_dev = to_device(packed, Device::cuda());
  auto wide_out = poisoned(DType::bf16, {tokens, qh + 2, hd}, Device::cuda());
  ops::attention(packed_dev.view().slice(1, 0, qh), d.cu_seqlens_q, d.paged(), true, 0.08f,
                 wide_out.view().slice(1, 1, qh + 1), Tensor{});
  const auto wide = to_floats(wide_out);
  std::vector<float> got;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < qh + 2; ++h) {
      const auto begin = wide.begin() + (t * (qh + 2) + h) * hd;
      if (h == 0 || h == qh + 1) {
        for (int64_t e = 0; e < hd; ++e) ASSERT_TRUE(std::isnan(begin[e])) << "token " << t;
      } else {
        got.insert(got.end(), begin, begin + hd);
      }
    }
  }
  EXPECT_LE(rel_error(got, to_floats(ref)), tolerance(DType::bf16));
}

TEST(AttentionCudaErrors, UnsupportedHeadDimAndShapes) {
  // Runs without a GPU: every error below is raised before anything touches the device.
  const int64_t hd = 288;
  Tensor q = fake_cuda(DType::bf16, {5, 8, hd}), out = fake_cuda(DType::bf16, {5, 8, hd});
  ops::PagedKV kv{fake_cuda(DType::bf16, {6, 4, 2, hd}), fake_cuda(DType::bf16, {6, 4, 2, hd}),
                  fake_cuda(DType::i32, {2, 3}), fake_cuda(DType::i32, {2})};
  Tensor cu = fake_cuda(DType::i32, {3});
#if BRAID_WITH_CUDA
  expect_error([&] { ops::attention(q, cu, kv, true, 0.1f, out, Tensor{}); },
               ErrorKind::unsupported, {"attention", "'q'", "at most 256", "head_dim 288"});
#else
  expect_error([&] { ops::attention(q, cu, kv, true, 0.1f, out, Tensor{}); },
               ErrorKind::unsupported, {"attention", "no CUDA support"});
#endif
  // Shape and dtype checks still run on CUDA tensors.
  Tensor lse_bad = fake_cuda(DType::f32, {5, 4});
  expect_error([&] { ops::attention(q, cu, kv, true, 0.1f, out, lse_bad); }, ErrorKind::shape,
               {"attention", "'lse'", "[5, 8]"});
  ops::PagedKV kv_i64 = kv;
  kv_i64.kv_lens = fake_cuda(DType::i64, {2});
  expect_error([&] { ops::attention(q, cu, kv_i64, true, 0.1f, out, Tensor{}); }, ErrorKind::dtype,
               {"attention", "'kv.kv_lens'", "i32", "i64"});
  OwnedTensor cu_cpu(DType::i32, {3}, Device::cpu());
  expect_error([&] { ops::attention(q, cu_cpu, kv, true, 0.1f, out, Tensor{}); }, ErrorKind::device,
               {"attention", "'cu_seqlens_q'", "cuda:0", "cpu"});
}

}  // namespace
}  // namespace braid::test
