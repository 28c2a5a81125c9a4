// attention_mla on CUDA against the CPU reference: decode batches (one query per sequence, caches
// of 1 to ~3000 rows, several sequences, pages in shuffled order, page tables far longer than the
// sequences), ragged causal prefill chunks after cached prefixes, heads 1 / 16 / 20 / 64 / 80 /
// 128 (64 and up at r 512 / dr 64: the Hopper kernel), r / dr 64 / 32, 128 / 64 and 512 / 64,
// bf16 and f16, lse given or not, split-KV and one-chunk calls, strided views, and a CUDA graph
// replayed over new kv_lens. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "braid/ops.h"
#include "ops/attention/mla_test_util.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

struct DeviceMla {
  OwnedTensor q_latent, q_rope, cache, page_table, kv_lens, cu_seqlens_q;
};

DeviceMla to_cuda(const MlaBatch& b) {
  const Device d = Device::cuda();
  return {to_device(b.q_latent, d),   to_device(b.q_rope, d),  to_device(b.cache, d),
          to_device(b.page_table, d), to_device(b.kv_lens, d), to_device(b.cu_seqlens_q, d)};
}

std::vector<MlaSeq> decode(const std::vector<int64_t>& lens) {
  std::vector<MlaSeq> seqs;
  for (int64_t len : lens) seqs.push_back({1, len});
  return seqs;
}

// n decode sequences of random lengths in [1, max_len].
std::vector<MlaSeq> random_decode(int n, int64_t max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> len(1, max_len);
  std::vector<MlaSeq> seqs;
  for (int i = 0; i < n; ++i) seqs.push_back({1, len(rng)});
  return seqs;
}

struct MlaCase {
  DType dtype;
  int64_t heads, r, dr, page_size;
  std::vector<MlaSeq> seqs;
  int64_t spare_pages;
  bool causal, with_lse;
  float scale_factor;  // softmax_scale = scale_factor / sqrt(r + dr): > 1 sharpens the softmax
  const char* what;
};

std::string case_name(const MlaCase& c) {
  return std::string(dtype_name(c.dtype)) + "_h" + std::to_string(c.heads) + "_r" +
         std::to_string(c.r) + "_dr" + std::to_string(c.dr) + "_page" +
         std::to_string(c.page_size) + "_b" + std::to_string(c.seqs.size()) +
         (c.causal ? "" : "_full") + (c.with_lse ? "" : "_nolse") + "_" + c.what;
}
void PrintTo(const MlaCase& c, std::ostream* os) { *os << case_name(c); }

class AttentionMlaCudaDiff : public ::testing::TestWithParam<MlaCase> {};

TEST_P(AttentionMlaCudaDiff, MatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto& c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MlaBatch b =
      make_mla_batch(c.dtype, c.heads, c.r, c.dr, c.page_size, c.seqs, c.spare_pages, seed);
  const int64_t T = b.total_q();
  const float scale = c.scale_factor / std::sqrt(static_cast<float>(c.r + c.dr));
  auto ref = poisoned(c.dtype, {T, c.heads, c.r}, Device::cpu());
  auto ref_lse = poisoned(DType::f32, {T, c.heads}, Device::cpu());
  ops::attention_mla(b.q_latent, b.q_rope, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens,
                     c.causal, scale, ref, ref_lse, mla_workspace(b, Device::cpu()));

  const DeviceMla d = to_cuda(b);
  auto out = poisoned(c.dtype, {T, c.heads, c.r}, Device::cuda());
  auto lse = poisoned(DType::f32, {T, c.heads}, Device::cuda());
  ops::attention_mla(d.q_latent, d.q_rope, d.cu_seqlens_q, d.cache, d.page_table, d.kv_lens,
                     c.causal, scale, out, c.with_lse ? lse.view() : Tensor{},
                     mla_workspace(b, Device::cuda()));
  EXPECT_LE(rel_error(to_floats(out), to_floats(ref)), tolerance(c.dtype));
  if (c.with_lse) {
    // lse is fp32 from the same rounded inputs, whatever the dtype.
    EXPECT_LE(rel_error(to_floats(lse), to_floats(ref_lse)), tolerance(DType::f32));
  } else {
    for (float v : to_floats(lse)) ASSERT_TRUE(std::isnan(v)) << "lse written though not requested";
  }
}

// Lengths on and around the tile (32 keys), page and split-chunk (256 keys) boundaries.
const std::vector<int64_t> kMixedLens = {1, 7, 31, 32, 33, 255, 256, 257, 1000, 3000};
// Chunked prefill after cached prefixes, a whole prompt, decode steps, an idle sequence.
const std::vector<MlaSeq> kRagged = {{6, 37}, {13, 13}, {1, 20}, {0, 5}, {40, 300}, {1, 1}};

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionMlaCudaDiff,
    ::testing::Values(
        // Decode, split-KV.
        MlaCase{DType::bf16, 16, 64, 32, 16, decode(kMixedLens), 1, true, true, 1.0f, "mixed"},
        MlaCase{DType::f16, 16, 64, 32, 16, decode(kMixedLens), 1, true, false, 4.0f, "sharp"},
        MlaCase{DType::bf16, 128, 512, 64, 64, decode({1, 300, 3000}), 1, true, true, 1.0f, "v3"},
        MlaCase{DType::f16, 16, 512, 64, 16, decode({2999, 1, 64}), 1, true, false, 1.0f, "v3tp8"},
        // The Hopper kernel (64-head blocks, 64-key tiles): lengths around its tiles, f16, a
        // partial second head group.
        MlaCase{DType::bf16, 128, 512, 64, 64, decode({1, 63, 64, 65, 127, 128, 129, 4096}), 1,
                true, true, 2.0f, "v3tiles"},
        MlaCase{DType::f16, 64, 512, 64, 16, decode({2999, 64, 1}), 1, true, true, 1.0f, "v3f16"},
        MlaCase{DType::bf16, 80, 512, 64, 32, random_decode(5, 700, 7), 1, true, false, 1.0f,
                "heads80"},
        MlaCase{DType::bf16, 1, 64, 32, 1, decode({3000}), 1, true, true, 1.0f, "onehead"},
        MlaCase{DType::bf16, 20, 128, 64, 7, decode({100, 2048, 5}), 1, true, true, 2.0f,
                "heads20"},
        // A page table 64x longer than the sequences: most chunks are empty.
        MlaCase{DType::bf16, 16, 64, 32, 16, decode({7, 255, 1}), 256, true, true, 1.0f, "spare"},
        // Enough blocks without splitting: one chunk per token, written directly.
        MlaCase{DType::bf16, 128, 512, 64, 16, random_decode(64, 300, 5), 1, true, true, 1.0f,
                "wide"},
        MlaCase{DType::f16, 16, 64, 32, 16, random_decode(600, 200, 6), 1, true, true, 1.0f,
                "many"},
        // Ragged causal prefill chunks with cached prefixes, and the same without masking.
        MlaCase{DType::bf16, 16, 64, 32, 16, kRagged, 1, true, true, 1.0f, "ragged"},
        MlaCase{DType::bf16, 16, 64, 32, 16, kRagged, 1, false, true, 1.0f, "ragged"},
        MlaCase{DType::f16, 1, 64, 32, 3, kRagged, 1, true, true, 3.0f, "ragged"},
        MlaCase{DType::bf16,
                128,
                512,
                64,
                64,
                {{17, 100}, {1, 2500}, {5, 5}},
                1,
                true,
                true,
                1.0f,
                "ragged"},
        MlaCase{DType::bf16, 16, 64, 32, 16, {{520, 600}}, 1, true, false, 1.0f, "prefill"}),
    [](const auto& info) { return case_name(info.param); });

TEST(AttentionMlaCuda, StridedViews) {
  // q_latent and q_rope as the two parts of one [T, H, r + dr] projection output, out as a head
  // slice of a wider buffer whose other heads must stay untouched; lse not requested.
  // The second shape takes the Hopper kernel, its q rows an odd number of elements apart (no
  // 16-byte copies).
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Shape {
    int64_t H, r, dr, pad;
  };
  for (const Shape& shape : {Shape{16, 64, 32, 0}, Shape{64, 512, 64, 1}})
  for (const std::vector<MlaSeq>& seqs : {decode({40, 3000}), kRagged}) {
    const int64_t H = shape.H, r = shape.r, dr = shape.dr;
    const MlaBatch b = make_mla_batch(DType::bf16, H, r, dr, 16, seqs, 1, seed);
    const int64_t T = b.total_q();
    auto packed = random_host(DType::bf16, {T, H, r + dr + shape.pad}, seed + 7);
    const Tensor ql = packed.view().slice(2, 0, r), qr = packed.view().slice(2, r, r + dr);
    for (int64_t i = 0; i < T * H; ++i) {
      const int64_t t = i / H, h = i % H;
      for (int64_t d = 0; d < r; ++d)
        store_from_float(ql.data, DType::bf16, t * ql.strides[0] + h * ql.strides[1] + d,
                         load_as_float(b.q_latent.data(), DType::bf16, i * r + d));
      for (int64_t d = 0; d < dr; ++d)
        store_from_float(qr.data, DType::bf16, t * qr.strides[0] + h * qr.strides[1] + d,
                         load_as_float(b.q_rope.data(), DType::bf16, i * dr + d));
    }
    auto ref = poisoned(DType::bf16, {T, H, r}, Device::cpu());
    ops::attention_mla(b.q_latent, b.q_rope, b.cu_seqlens_q, b.cache, b.page_table, b.kv_lens, true,
                       0.1f, ref, Tensor{}, mla_workspace(b, Device::cpu()));

    const DeviceMla d = to_cuda(b);
    auto packed_dev = to_device(packed, Device::cuda());
    auto wide = poisoned(DType::bf16, {T, H + 2, r}, Device::cuda());
    ops::attention_mla(packed_dev.view().slice(2, 0, r), packed_dev.view().slice(2, r, r + dr),
                       d.cu_seqlens_q, d.cache, d.page_table, d.kv_lens, true, 0.1f,
                       wide.view().slice(1, 1, H + 1), Tensor{}, mla_workspace(b, Device::cuda()));
    const auto all = to_floats(wide);
    std::vector<float> got;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H + 2; ++h) {
        const auto begin = all.begin() + (t * (H + 2) + h) * r;
        if (h == 0 || h == H + 1) {
          for (int64_t e = 0; e < r; ++e) ASSERT_TRUE(std::isnan(begin[e])) << "token " << t;
        } else {
          got.insert(got.end(), begin, begin + r);
        }
      }
    EXPECT_LE(rel_error(got, to_floats(ref)), tolerance(DType::bf16)) << T << " tokens";
  }
}

#if BRAID_WITH_CUDA
// The grid depends on shapes only: a call captured once in a CUDA graph must give the right
// answer when replayed after kv_lens (and the page table) have changed on the device.
TEST(AttentionMlaCuda, GraphReplayFollowsNewLengths) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t H = 16, r = 512, dr = 64;
  // Both steps fit the same page table shape: sequence lengths swap between the steps.
  const std::vector<std::vector<MlaSeq>> steps = {decode({100, 3000}), decode({3000, 100})};
  const MlaBatch first = make_mla_batch(DType::bf16, H, r, dr, 16, steps[0], 1, seed);
  const MlaBatch second = make_mla_batch(DType::bf16, H, r, dr, 16, steps[1], 1, seed + 11);
  ASSERT_EQ(first.capacity(), second.capacity());
  ASSERT_EQ(first.cache.view().shape[0], second.cache.view().shape[0]);

  DeviceMla d = to_cuda(first);
  auto out = poisoned(DType::bf16, {2, H, r}, Device::cuda());
  auto lse = poisoned(DType::f32, {2, H}, Device::cuda());
  auto ws = mla_workspace(first, Device::cuda());
  ASSERT_TRUE(ws.view().numel() > 0) << "a decode step of 2 x 16 heads should split its keys";
  StreamOwner stream;
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::attention_mla(d.q_latent, d.q_rope, d.cu_seqlens_q, d.cache, d.page_table, d.kv_lens, true,
                       0.07f, out, lse, ws, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "attention_mla failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (const MlaBatch* host : {&first, &second}) {
    for (const auto& [src, dst] :
         {std::pair{&host->q_latent, &d.q_latent}, std::pair{&host->q_rope, &d.q_rope},
          std::pair{&host->cache, &d.cache}, std::pair{&host->page_table, &d.page_table},
          std::pair{&host->kv_lens, &d.kv_lens}, std::pair{&host->cu_seqlens_q, &d.cu_seqlens_q}})
      copy(*src, *dst);
    // On the graph's stream: `s` does not wait for the legacy stream, so a memset there could
    // land in the middle of the replay (it did under racecheck and initcheck).
    fill_bytes(out, 0xFF, stream.get());
    fill_bytes(lse, 0xFF, stream.get());
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    stream.synchronize();
    auto ref = poisoned(DType::bf16, {2, H, r}, Device::cpu());
    auto ref_lse = poisoned(DType::f32, {2, H}, Device::cpu());
    ops::attention_mla(host->q_latent, host->q_rope, host->cu_seqlens_q, host->cache,
                       host->page_table, host->kv_lens, true, 0.07f, ref, ref_lse,
                       mla_workspace(*host, Device::cpu()));
    EXPECT_LE(rel_error(to_floats(out), to_floats(ref)), tolerance(DType::bf16))
        << "step with kv_lens[0] = " << host->kv_lens.view().ptr<int32_t>()[0];
    EXPECT_LE(rel_error(to_floats(lse), to_floats(ref_lse)), tolerance(DType::f32));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif

}  // namespace
}  // namespace braid::test
