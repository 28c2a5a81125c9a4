// qk_norm_rope_kv_append_attention_decode: on CUDA one kernel, against the two ops it joins run
// on the same GPU (cache rows bit for bit, the output to rounding) and against the CPU reference;
// the new key's cache slot starts as NaN poison, so a kernel that read it from the cache instead
// of taking the key it appends would show it. Also: a CUDA graph replayed over new lengths (the
// counters must be back at zero after every call), and the argument errors (no GPU needed).
#include <algorithm>
#include <cmath>
#include <utility>

#include "braid/ops.h"
#include "ops/attention/decode_batch.h"
#include "ops/rope_configs.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

using ops::RopeConfig;
using ops::RopeScaling;

constexpr float kEps = 1e-6f;

struct StepCase {
  DType dtype;
  int64_t page_size, q_heads, kv_heads, head_dim;
  std::vector<int32_t> lens;  // keys per sequence, the new one included
  int64_t spare_pages;
  bool norm;
  RopeScaling scaling;
  int rotary_dim;  // 0: head_dim
  bool lse;
  const char* what;
};

std::string case_name(const StepCase& c) {
  return std::string(c.what) + "_" + std::string(dtype_name(c.dtype)) + "_q" + std::to_string(c.q_heads) + "k" +
         std::to_string(c.kv_heads) + "_d" + std::to_string(c.head_dim) + "_p" +
         std::to_string(c.page_size);
}
void PrintTo(const StepCase& c, std::ostream* os) { *os << case_name(c); }

// One decode step's inputs on the host: the QKV projection's output, the cache with every key
// but each sequence's last (whose slot holds NaN until the op appends it), positions and slots.
struct StepProblem {
  StepCase c;
  DecodeBatch cache;
  OwnedTensor packed, q_norm, k_norm, positions, slots;

  StepProblem(const StepCase& cs, uint64_t seed)
      : c(cs),
        cache(make_batch(cs.dtype, cs.q_heads, cs.kv_heads, cs.head_dim, cs.page_size, cs.lens,
                         cs.spare_pages, seed)),
        packed(random_host(cs.dtype, {batch(), (cs.q_heads + 2 * cs.kv_heads) * cs.head_dim},
                           seed + 5, -2, 2)),
        q_norm(random_host(cs.dtype, {cs.head_dim}, seed + 6, 0.5f, 1.5f)),
        k_norm(random_host(cs.dtype, {cs.head_dim}, seed + 7, 0.5f, 1.5f)),
        positions(DType::i64, {batch()}, Device::cpu()),
        slots(DType::i32, {batch()}, Device::cpu()) {
    const Tensor table = cache.page_table.view();
    const int64_t token_elems = cs.kv_heads * cs.head_dim;
    for (int64_t b = 0; b < batch(); ++b) {
      const int64_t key = cs.lens[static_cast<size_t>(b)] - 1;
      const int64_t slot =
          int64_t{table.ptr<int32_t>()[b * table.shape[1] + key / cs.page_size]} * cs.page_size +
          key % cs.page_size;
      positions.view().ptr<int64_t>()[b] = key;
      slots.view().ptr<int32_t>()[b] = static_cast<int32_t>(slot);
      for (int64_t e = 0; e < token_elems; ++e) {
        store_from_float(cache.k_pages.data(), cs.dtype, slot * token_elems + e, NAN);
        store_from_float(cache.v_pages.data(), cs.dtype, slot * token_elems + e, NAN);
      }
    }
  }
  int64_t batch() const { return static_cast<int64_t>(c.lens.size()); }

  struct Result {
    std::vector<float> out, lse, k_pages, v_pages;
    std::vector<int32_t> counters;
  };

  // fused: the one op; otherwise qk_norm_rope_kv_append, then attention_decode.
  Result run(Device dev, bool fused) const {
    const int64_t B = batch(), qh = c.q_heads, kvh = c.kv_heads, hd = c.head_dim;
    auto d_packed = to_device(packed, dev);
    auto qn = to_device(q_norm, dev), kn = to_device(k_norm, dev);
    auto pos = to_device(positions, dev), sl = to_device(slots, dev);
    auto kp = to_device(cache.k_pages, dev), vp = to_device(cache.v_pages, dev);
    auto table = to_device(cache.page_table, dev), lens = to_device(cache.kv_lens, dev);
    const ops::PagedKV kv{kp, vp, table, lens};
    Tensor heads = d_packed.view().reshape({B, qh + 2 * kvh, hd});
    const Tensor q = heads.slice(1, 0, qh), k = heads.slice(1, qh, qh + kvh),
                 v = heads.slice(1, qh + kvh, qh + 2 * kvh);
    const Tensor qnorm = c.norm ? Tensor(qn) : Tensor{}, knorm = c.norm ? Tensor(kn) : Tensor{};
    auto out = poisoned(c.dtype, {B, qh, hd}, dev);
    auto lse = poisoned(DType::f32, {B, qh}, dev);
    const Tensor lse_arg = c.lse ? Tensor(lse) : Tensor{};
    auto ws = workspace_for(cache, dev);
    const int64_t n_counters = ops::attention_decode_counters(B, qh, kvh);
    OwnedTensor zeros(DType::i32, {n_counters}, Device::cpu());
    std::fill_n(zeros.view().ptr<int32_t>(), n_counters, 0);
    auto counters = to_device(zeros, dev);
    const RopeConfig rope = rope_config_for(c.scaling, c.rotary_dim);
    if (fused) {
      ops::qk_norm_rope_kv_append_attention_decode(q, k, v, qnorm, knorm, kEps, pos, rope, sl, kv,
                                                   0.09f, out, lse_arg, ws, counters);
    } else {
      ops::qk_norm_rope_kv_append(q, k, v, qnorm, knorm, kEps, pos, rope, sl, kp, vp);
      ops::attention_decode(q, kv, 0.09f, out, lse_arg, ws);
    }
    Result r{to_floats(out), c.lse ? to_floats(lse) : std::vector<float>{}, to_floats(kp),
             to_floats(vp), std::vector<int32_t>(static_cast<size_t>(n_counters))};
    copy(counters, Tensor(r.counters.data(), DType::i32, Device::cpu(), {n_counters}));
    return r;
  }
};

// Cache values that are not NaN; the rest (slots no sequence owns) must stay NaN on both sides.
double cache_error(const std::vector<float>& got, const std::vector<float>& want) {
  std::vector<float> g, w;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      if (!std::isnan(got[i])) return INFINITY;
      continue;
    }
    g.push_back(got[i]);
    w.push_back(want[i]);
  }
  return rel_error(g, w);
}

class AttentionDecodeStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(AttentionDecodeStep, CudaMatchesTheTwoOpsAndTheReference) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const StepProblem p(GetParam(), seed);
  const auto fused = p.run(Device::cuda(), true);
  const auto seq = p.run(Device::cuda(), false);
  const auto ref = p.run(Device::cpu(), true);
  // The cache: the same bits as qk_norm_rope_kv_append's (poison included).
  EXPECT_EQ(bit_mismatches(fused.k_pages, seq.k_pages), 0) << "k cache";
  EXPECT_EQ(bit_mismatches(fused.v_pages, seq.v_pages), 0) << "v cache";
  EXPECT_LE(cache_error(fused.k_pages, ref.k_pages), tolerance(p.c.dtype));
  EXPECT_EQ(cache_error(fused.v_pages, ref.v_pages), 0.0) << "v is a copy";
  // The output: the two ops' up to the order of the chunks' merge, the reference's to tolerance.
  for (float x : fused.out) ASSERT_FALSE(std::isnan(x)) << "a NaN: the new key read from the cache?";
  EXPECT_LE(rel_error(fused.out, seq.out), tolerance(p.c.dtype) / 4);
  EXPECT_LE(rel_error(fused.out, ref.out), tolerance(p.c.dtype));
  if (p.c.lse) EXPECT_LE(rel_error(fused.lse, ref.lse), tolerance(DType::f32));
  for (size_t i = 0; i < fused.counters.size(); ++i)
    ASSERT_EQ(fused.counters[i], 0) << "counter " << i << " left behind";
}

// Sixteen sequences whose lengths fall on and around the tile (64 keys) and page boundaries.
const std::vector<int32_t> kMixedLens = {1,   2,   255, 4097, 16,  17,   63,  64,
                                         65,  128, 129, 1000, 2048, 300, 5,   4096};

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionDecodeStep,
    ::testing::Values(
        // Llama-3.2-1B's attention at bench decode's context: the new key in a prologue tile
        StepCase{DType::bf16, 16, 32, 8, 64, {257}, 1, false, RopeScaling::llama3, 0, false, "llama1b"},
        // Qwen3's q/k norms, GQA 4:1 d128
        StepCase{DType::bf16, 16, 32, 8, 128, {257}, 1, true, RopeScaling::none, 0, true, "qwen3"},
        // only the new key; a page of one token
        StepCase{DType::bf16, 1, 14, 2, 64, {1}, 1, false, RopeScaling::none, 0, true, "first"},
        StepCase{DType::f16, 1, 28, 4, 128, {1, 7, 255, 4097}, 1, true, RopeScaling::yarn, 0, true, "gqa7"},
        StepCase{DType::bf16, 16, 32, 8, 64, kMixedLens, 1, false, RopeScaling::llama3, 0, true, "mixed"},
        // MHA (DeepSeek-OCR's language model), one long sequence: many chunks merged in the kernel,
        // the new key in a tile of the main loop
        StepCase{DType::bf16, 16, 10, 10, 128, {130, 33000}, 1, false, RopeScaling::none, 0, true, "mha"},
        // 20 query heads per KV head: two head blocks, one of which appends
        StepCase{DType::bf16, 7, 20, 1, 64, {255, 4097, 33000}, 1, true, RopeScaling::llama3, 0, false, "mqa20"},
        // partial rotary, new keys at tile edges
        StepCase{DType::bf16, 16, 16, 2, 128, {64, 65, 128, 129, 192, 193}, 1, true, RopeScaling::yarn, 64, true, "edges"},
        // a page table 64x longer than the sequences: chunks sized from kv_len on the device
        StepCase{DType::bf16, 16, 8, 2, 128, {7, 255, 1, 3000}, 256, false, RopeScaling::none, 0, true, "spare"},
        StepCase{DType::f16, 16, 4, 4, 64, {1, 2, 3}, 1, true, RopeScaling::none, 0, false, "tiny"},
        // the two ops in sequence: f32, head_dim 96
        StepCase{DType::f32, 16, 8, 2, 128, {7, 4097}, 1, true, RopeScaling::none, 0, true, "fallback"},
        StepCase{DType::bf16, 16, 8, 2, 96, {255, 4097}, 1, false, RopeScaling::llama3, 0, true, "fallback"}),
    [](const auto& info) { return case_name(info.param); });

#if BRAID_WITH_CUDA
// Captured once, replayed over new inputs with other lengths: the grid depends on shapes only, and
// a replay that found counters left non-zero by the one before would merge at the wrong time.
TEST(AttentionDecodeStepCuda, GraphReplayFollowsNewLengths) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t qh = 32, kvh = 8, hd = 128;
  const StepCase base{DType::bf16, 16, qh, kvh, hd, {100, 3000}, 1, true, RopeScaling::llama3, 0, true, "graph"};
  StepCase swapped = base;
  swapped.lens = {3000, 100};
  const StepProblem first(base, seed), second(swapped, seed + 11);
  ASSERT_EQ(first.cache.capacity(), second.cache.capacity());

  const Device d = Device::cuda();
  auto packed = to_device(first.packed, d);
  auto qn = to_device(first.q_norm, d), kn = to_device(first.k_norm, d);
  auto pos = to_device(first.positions, d), sl = to_device(first.slots, d);
  auto kp = to_device(first.cache.k_pages, d), vp = to_device(first.cache.v_pages, d);
  auto table = to_device(first.cache.page_table, d), lens = to_device(first.cache.kv_lens, d);
  const ops::PagedKV kv{kp, vp, table, lens};
  Tensor heads = packed.view().reshape({2, qh + 2 * kvh, hd});
  const Tensor q = heads.slice(1, 0, qh), k = heads.slice(1, qh, qh + kvh),
               v = heads.slice(1, qh + kvh, qh + 2 * kvh);
  auto out = poisoned(DType::bf16, {2, qh, hd}, d);
  auto lse = poisoned(DType::f32, {2, qh}, d);
  auto ws = workspace_for(first.cache, d);
  const int64_t n_counters = ops::attention_decode_counters(2, qh, kvh);
  OwnedTensor counters(DType::i32, {n_counters}, d);
  fill_bytes(counters, 0);
  const RopeConfig rope = rope_config_for(base.scaling, base.rotary_dim);
  StreamOwner stream;
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  stream.synchronize();
  cudaDeviceSynchronize();  // the zeroed counters, before the capture
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::qk_norm_rope_kv_append_attention_decode(q, k, v, qn, kn, kEps, pos, rope, sl, kv, 0.09f,
                                                 out, lse, ws, counters, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "the op failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (const StepProblem* host : {&first, &second, &first}) {
    for (const auto& [src, dst] :
         {std::pair{&host->packed, &packed}, std::pair{&host->q_norm, &qn},
          std::pair{&host->k_norm, &kn}, std::pair{&host->positions, &pos},
          std::pair{&host->slots, &sl}, std::pair{&host->cache.k_pages, &kp},
          std::pair{&host->cache.v_pages, &vp}, std::pair{&host->cache.page_table, &table},
          std::pair{&host->cache.kv_lens, &lens}})
      copy(*src, *dst);
    fill_bytes(out, 0xFF);
    fill_bytes(lse, 0xFF);
    cudaDeviceSynchronize();
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    stream.synchronize();
    const auto ref = host->run(Device::cpu(), true);
    const int32_t first_len = host->cache.kv_lens.view().ptr<int32_t>()[0];
    EXPECT_LE(rel_error(to_floats(out), ref.out), tolerance(DType::bf16)) << "kv_lens[0] " << first_len;
    EXPECT_LE(rel_error(to_floats(lse), ref.lse), tolerance(DType::f32)) << "kv_lens[0] " << first_len;
    EXPECT_LE(cache_error(to_floats(kp), ref.k_pages), tolerance(DType::bf16));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif

// ---------------------------------------------------------------------------------------------
// The CPU path and the argument errors (no GPU needed).

TEST(AttentionDecodeStepReference, IsTheTwoOpsInSequence) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (bool norm : {true, false}) {
    const StepProblem p(StepCase{DType::bf16, 4, 6, 2, 32, {1, 9, 30}, 2, norm, RopeScaling::llama3,
                                 0, true, "cpu"},
                        seed);
    const auto fused = p.run(Device::cpu(), true), seq = p.run(Device::cpu(), false);
    EXPECT_EQ(bit_mismatches(fused.out, seq.out), 0) << "norm " << norm;
    EXPECT_EQ(bit_mismatches(fused.lse, seq.lse), 0) << "norm " << norm;
    EXPECT_EQ(bit_mismatches(fused.k_pages, seq.k_pages), 0) << "norm " << norm;
    EXPECT_EQ(bit_mismatches(fused.v_pages, seq.v_pages), 0) << "norm " << norm;
    for (float x : fused.out) ASSERT_FALSE(std::isnan(x)) << "the new key was not appended";
  }
}

TEST(AttentionDecodeStepErrors, NameTheArgument) {
  const StepProblem p(StepCase{DType::f32, 4, 4, 2, 16, {3, 9}, 1, false, RopeScaling::none, 0,
                               false, "errors"},
                      1);
  const Tensor heads = p.packed.view().reshape({2, 8, 16});
  const Tensor q = heads.slice(1, 0, 4), k = heads.slice(1, 4, 6), v = heads.slice(1, 6, 8);
  auto out = poisoned(DType::f32, {2, 4, 16}, Device::cpu());
  const auto ws = workspace_for(p.cache, Device::cpu());
  const int64_t need = ops::attention_decode_counters(2, 4, 2);
  EXPECT_EQ(need, 4);  // 2 sequences x 2 KV heads x 1 block of query heads
  EXPECT_EQ(ops::attention_decode_counters(1, 40, 2), 2 * 2);  // 20 heads per KV head: 2 blocks
  OwnedTensor counters(DType::i32, {need}, Device::cpu());
  fill_bytes(counters, 0);
  const char* op = "qk_norm_rope_kv_append_attention_decode";
  auto call = [&](const Tensor& slots, const Tensor& ctr, const Tensor& o) {
    ops::qk_norm_rope_kv_append_attention_decode(q, k, v, Tensor{}, Tensor{}, kEps, p.positions,
                                                 RopeConfig{}, slots, p.cache.paged(), 0.1f, o,
                                                 Tensor{}, ws, ctr);
  };
  call(p.slots, counters, out);  // the arguments as made are right
  expect_error([&] { call(p.slots, Tensor{}, out); }, ErrorKind::invalid_argument,
               {op, "'counters'"});
  OwnedTensor few(DType::i32, {need - 1}, Device::cpu());
  expect_error([&] { call(p.slots, few, out); }, ErrorKind::shape,
               {op, "'counters'", "at least 4", "3 elements"});
  OwnedTensor f32_counters(DType::f32, {need}, Device::cpu());
  expect_error([&] { call(p.slots, f32_counters, out); }, ErrorKind::dtype, {op, "'counters'", "i32"});
  // The new key must go where the page table puts key kv_lens[b] - 1.
  OwnedTensor moved(DType::i32, {2}, Device::cpu());
  std::copy_n(p.slots.view().ptr<int32_t>(), 2, moved.view().ptr<int32_t>());
  moved.view().ptr<int32_t>()[1] ^= 1;
  expect_error([&] { call(moved, counters, out); }, ErrorKind::invalid_argument,
               {op, "'slots'", "slots[1]", "kv_lens[b] - 1"});
  // The two ops' own checks, named under this op.
  expect_error([&] { call(p.slots, counters, poisoned(DType::bf16, {2, 4, 16}, Device::cpu())); },
               ErrorKind::dtype, {op, "'out'"});
  expect_error([&] { call(p.slots, fake_cuda(DType::i32, {need}), out); }, ErrorKind::device,
               {op, "'counters'"});
}

}  // namespace
}  // namespace braid::test
