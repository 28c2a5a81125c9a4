// paged_kv_gather: the reference puts each sequence's tokens in its rows (and nothing else
// changes), it feeds attention_prefill the keys attention() reads from the pages; CUDA equals the
// reference byte for byte on every dtype and copy unit (16, 8, 4, 2 bytes), pages of 1 to 16
// tokens in shuffled order, empty and one-token sequences, many sequences, long ones, tokens
// wider than a tile, outputs with spare rows; a CUDA graph replayed over new lengths; bad index
// values on CUDA stay in bounds; and the argument errors (which run without a GPU).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "braid/ops.h"
#include "test_util.h"
#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid::test {
namespace {

// A paged cache on the host: each sequence's pages come from a shuffled pool; every slot no
// sequence owns holds NaN and unused page-table entries hold -1, so a read outside a sequence
// shows up. `spare_pages` extra page-table columns make the table larger than any sequence.
struct Cache {
  OwnedTensor k_pages, v_pages, page_table, kv_lens, cu;
  ops::PagedKV paged() const { return {k_pages, v_pages, page_table, kv_lens}; }
  int64_t batch() const { return page_table.view().shape[0]; }
  int32_t total() const { return cu.view().ptr<int32_t>()[batch()]; }
};

Cache make_cache(DType dtype, int64_t kv_heads, int64_t head_dim, int64_t page_size,
                 const std::vector<int32_t>& lens, int64_t spare_pages, uint64_t seed) {
  Cache c;
  const int64_t batch = static_cast<int64_t>(lens.size());
  int64_t pages_needed = 0, max_pages = 1;
  for (int32_t len : lens) {
    const int64_t p = (len + page_size - 1) / page_size;
    pages_needed += p;
    max_pages = std::max(max_pages, p + spare_pages);
  }
  const int64_t num_pages = pages_needed + 2;
  c.k_pages = random_host(dtype, {num_pages, page_size, kv_heads, head_dim}, seed + 1);
  c.v_pages = random_host(dtype, {num_pages, page_size, kv_heads, head_dim}, seed + 2);
  c.page_table = OwnedTensor(DType::i32, {batch, max_pages}, Device::cpu());
  c.kv_lens = OwnedTensor(DType::i32, {batch}, Device::cpu());
  c.cu = OwnedTensor(DType::i32, {batch + 1}, Device::cpu());

  std::vector<int32_t> pool(static_cast<size_t>(num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937_64(seed + 3));
  std::vector<bool> owned(static_cast<size_t>(num_pages * page_size), false);
  int32_t* table = c.page_table.view().ptr<int32_t>();
  int32_t* cu = c.cu.view().ptr<int32_t>();
  std::fill_n(table, batch * max_pages, -1);
  cu[0] = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t len = lens[static_cast<size_t>(b)];
    c.kv_lens.view().ptr<int32_t>()[b] = len;
    cu[b + 1] = cu[b] + len;
    for (int64_t j = 0; j < len; ++j) {
      if (j % page_size == 0) {
        table[b * max_pages + j / page_size] = pool.back();
        pool.pop_back();
      }
      owned[static_cast<size_t>(table[b * max_pages + j / page_size] * page_size + j % page_size)] = true;
    }
  }
  const int64_t token_elems = kv_heads * head_dim;
  for (int64_t slot = 0; slot < num_pages * page_size; ++slot) {
    if (owned[static_cast<size_t>(slot)]) continue;
    for (int64_t e = 0; e < token_elems; ++e) {
      store_from_float(c.k_pages.data(), dtype, slot * token_elems + e, NAN);
      store_from_float(c.v_pages.data(), dtype, slot * token_elems + e, NAN);
    }
  }
  return c;
}

struct DeviceCache {
  OwnedTensor k_pages, v_pages, page_table, kv_lens, cu;
  ops::PagedKV paged() const { return {k_pages, v_pages, page_table, kv_lens}; }
};

DeviceCache to_cuda(const Cache& c) {
  const Device d = Device::cuda();
  return {to_device(c.k_pages, d), to_device(c.v_pages, d), to_device(c.page_table, d),
          to_device(c.kv_lens, d), to_device(c.cu, d)};
}

// A tensor's bytes (host or device, contiguous): a copy is exact, and NaN poison compares equal.
std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  if (t.device.is_cuda()) {
    OwnedTensor host(t.dtype, std::vector<int64_t>(t.shape, t.shape + t.ndim), Device::cpu());
    copy(t, host.view());
    std::memcpy(out.data(), host.data(), out.size());
  } else {
    std::memcpy(out.data(), t.data, out.size());
  }
  return out;
}

// Token t of sequence b as the pages hold it: kv_heads * head_dim elements.
const uint8_t* token_bytes(const Cache& c, const Tensor& pages, int64_t b, int64_t t) {
  const Tensor& table = c.page_table.view();
  const int64_t page_size = pages.shape[1], token_elems = pages.shape[2] * pages.shape[3];
  const int64_t page = table.ptr<int32_t>()[b * table.shape[1] + t / page_size];
  return static_cast<const uint8_t*>(pages.at((page * page_size + t % page_size) * token_elems));
}

// ---------------------------------------------------------------------------------------------

TEST(PagedKvGatherReference, SequencesLandInTheirRows) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t kv = 3, hd = 8, page_size = 4;
  const Cache c = make_cache(DType::f32, kv, hd, page_size, {9, 0, 1, 4}, 1, seed);
  const int64_t rows = c.total() + 5;  // spare rows: left as they are
  auto k_out = random_host(DType::f32, {rows, kv, hd}, seed + 7);
  auto v_out = random_host(DType::f32, {rows, kv, hd}, seed + 8);
  const std::vector<uint8_t> k_before = bytes_of(k_out), v_before = bytes_of(v_out);
  ops::paged_kv_gather(c.paged(), c.cu, k_out, v_out);

  const std::vector<uint8_t> k_after = bytes_of(k_out), v_after = bytes_of(v_out);
  const size_t row_bytes = static_cast<size_t>(kv * hd) * sizeof(float);
  const int32_t* cu = c.cu.view().ptr<int32_t>();
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t t = 0; t < cu[b + 1] - cu[b]; ++t) {
      const size_t at = static_cast<size_t>(cu[b] + t) * row_bytes;
      EXPECT_EQ(std::memcmp(&k_after[at], token_bytes(c, c.k_pages, b, t), row_bytes), 0)
          << "k row of sequence " << b << " token " << t;
      EXPECT_EQ(std::memcmp(&v_after[at], token_bytes(c, c.v_pages, b, t), row_bytes), 0)
          << "v row of sequence " << b << " token " << t;
    }
  const size_t used = static_cast<size_t>(c.total()) * row_bytes;
  EXPECT_TRUE(std::equal(k_after.begin() + used, k_after.end(), k_before.begin() + used));
  EXPECT_TRUE(std::equal(v_after.begin() + used, v_after.end(), v_before.begin() + used));
}

// What the op is for: attention_prefill over the gathered K/V sees what attention() sees in the
// pages (chunked prefill: each sequence's queries are its last q_len tokens).
TEST(PagedKvGatherReference, FeedsAttentionPrefillTheCachedKeys) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t qh = 6, kv = 2, hd = 16;
  const std::vector<int32_t> kv_lens = {37, 5, 16}, q_lens = {8, 5, 1};
  const Cache c = make_cache(DType::f32, kv, hd, 4, kv_lens, 2, seed);
  OwnedTensor cu_q(DType::i32, {4}, Device::cpu());
  cu_q.view().ptr<int32_t>()[0] = 0;
  for (int b = 0; b < 3; ++b) cu_q.view().ptr<int32_t>()[b + 1] = cu_q.view().ptr<int32_t>()[b] + q_lens[b];
  const int64_t total_q = cu_q.view().ptr<int32_t>()[3];
  auto q = random_host(DType::f32, {total_q, qh, hd}, seed + 5);
  auto k = poisoned(DType::f32, {c.total(), kv, hd}, Device::cpu());
  auto v = poisoned(DType::f32, {c.total(), kv, hd}, Device::cpu());
  ops::paged_kv_gather(c.paged(), c.cu, k, v);

  auto want = poisoned(DType::f32, {total_q, qh, hd}, Device::cpu());
  auto got = poisoned(DType::f32, {total_q, qh, hd}, Device::cpu());
  ops::attention(q, cu_q, c.paged(), true, 0.25f, want, Tensor{});
  ops::attention_prefill(q, k, v, cu_q, c.cu, 8, true, 0.25f, got, Tensor{});
  EXPECT_LE(rel_error(to_floats(got), to_floats(want)), 1e-6);
}

// ---------------------------------------------------------------------------------------------

struct GatherCase {
  DType dtype;
  int64_t kv_heads, head_dim, page_size;
  std::vector<int32_t> lens;
  int64_t spare_rows;    // k_out / v_out rows past the last offset (left poisoned)
  int64_t misalign;      // elements k_out's data is moved by (forces the 2-byte copy unit)
  const char* what;
};

std::string case_name(const GatherCase& c) {
  return std::string(dtype_name(c.dtype)) + "_kv" + std::to_string(c.kv_heads) + "_d" +
         std::to_string(c.head_dim) + "_page" + std::to_string(c.page_size) + "_b" +
         std::to_string(c.lens.size()) + "_" + c.what;
}
void PrintTo(const GatherCase& c, std::ostream* os) { *os << case_name(c); }

std::vector<int32_t> random_lens(int64_t n, int32_t max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, max_len);
  std::vector<int32_t> lens(static_cast<size_t>(n));
  for (auto& l : lens) l = pick(rng);
  return lens;
}

class PagedKvGatherDiff : public ::testing::TestWithParam<GatherCase> {};

TEST_P(PagedKvGatherDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const GatherCase& p = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Cache c = make_cache(p.dtype, p.kv_heads, p.head_dim, p.page_size, p.lens, 2, seed);
  const std::vector<int64_t> shape = {c.total() + p.spare_rows, p.kv_heads, p.head_dim};
  auto k_ref = poisoned(p.dtype, shape, Device::cpu());
  auto v_ref = poisoned(p.dtype, shape, Device::cpu());
  ops::paged_kv_gather(c.paged(), c.cu, k_ref, v_ref);

  const DeviceCache d = to_cuda(c);
  const int64_t elems = shape[0] * shape[1] * shape[2];
  auto k_store = poisoned(p.dtype, {elems + p.misalign}, Device::cuda());
  auto v_out = poisoned(p.dtype, shape, Device::cuda());
  const Tensor k_out(k_store.view().at(p.misalign), p.dtype, Device::cuda(),
                     {shape[0], shape[1], shape[2]});
  ops::paged_kv_gather(d.paged(), d.cu, k_out, v_out);
  EXPECT_TRUE(bytes_of(k_out) == bytes_of(k_ref)) << "k_out differs from the reference";
  EXPECT_TRUE(bytes_of(v_out) == bytes_of(v_ref)) << "v_out differs from the reference";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedKvGatherDiff,
    ::testing::Values(
        // Llama-3-8B's cache: 16-byte units, an empty and a one-token sequence, spare rows.
        GatherCase{DType::bf16, 8, 128, 16, {1000, 1, 517, 0, 33}, 7, 0, "llama8b"},
        GatherCase{DType::f16, 8, 64, 16, {300, 2}, 0, 0, "llama1b"},
        GatherCase{DType::f32, 2, 64, 1, {5, 17, 64}, 3, 0, "page1"},
        // Rows of 7 x 12 x 2 = 168 bytes: 8-byte units; pages of 7 tokens.
        GatherCase{DType::f16, 7, 12, 7, {40, 3, 129}, 1, 0, "unit8"},
        // Rows of 3 x 4 = 12 bytes (f32): 4-byte units. One head of 3 (f16): 2-byte units.
        GatherCase{DType::f32, 1, 3, 5, {23, 9}, 2, 0, "unit4"},
        GatherCase{DType::bf16, 1, 3, 5, {100, 7, 0}, 2, 0, "unit2"},
        // A 16-byte row size but k_out one element off: 2-byte units for all four tensors.
        GatherCase{DType::bf16, 4, 64, 16, {77, 130}, 0, 1, "misaligned"},
        // Many sequences (the binary search over offsets), random lengths incl. empty ones.
        GatherCase{DType::bf16, 4, 64, 16, random_lens(64, 300, 17), 5, 0, "many"},
        GatherCase{DType::bf16, 1, 128, 16, random_lens(257, 40, 23), 0, 0, "mqa_257"},
        // One long sequence; and tokens of 32 x 256 x 4 = 32 KB, wider than a tile.
        GatherCase{DType::f32, 2, 64, 16, {20000}, 0, 0, "long"},
        GatherCase{DType::f32, 32, 256, 4, {3, 40}, 1, 0, "wide_token"},
        GatherCase{DType::bf16, 8, 128, 16, {1}, 0, 0, "one_token"}),
    [](const ::testing::TestParamInfo<GatherCase>& info) { return case_name(info.param); });

#if BRAID_WITH_CUDA
// The grid depends on shapes only: a call captured once in a CUDA graph must give the right
// answer when replayed after the lengths, offsets and page table have changed on the device.
TEST(PagedKvGatherCuda, GraphReplayFollowsNewLengths) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t kvh = 8, hd = 128, rows = 3200;
  // Both steps fit the same shapes (the same pool of pages): the lengths swap between the steps.
  const std::vector<std::vector<int32_t>> steps = {{100, 3000}, {3000, 100}};
  const Cache first = make_cache(DType::bf16, kvh, hd, 16, steps[0], 1, seed);
  const Cache second = make_cache(DType::bf16, kvh, hd, 16, steps[1], 1, seed + 11);
  ASSERT_EQ(first.page_table.view().shape[1], second.page_table.view().shape[1]);
  ASSERT_EQ(first.k_pages.view().shape[0], second.k_pages.view().shape[0]);

  DeviceCache d = to_cuda(first);
  auto k_out = poisoned(DType::bf16, {rows, kvh, hd}, Device::cuda());
  auto v_out = poisoned(DType::bf16, {rows, kvh, hd}, Device::cuda());
  StreamOwner stream;
  auto s = static_cast<cudaStream_t>(stream.get().handle);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    ops::paged_kv_gather(d.paged(), d.cu, k_out, v_out, stream.get());
  } catch (const Error& e) {
    cudaStreamEndCapture(s, &graph);
    FAIL() << "paged_kv_gather failed under capture: " << e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (const Cache* host : {&first, &second}) {
    for (const auto& [src, dst] : {std::pair{&host->k_pages, &d.k_pages},
                                   std::pair{&host->v_pages, &d.v_pages},
                                   std::pair{&host->page_table, &d.page_table},
                                   std::pair{&host->kv_lens, &d.kv_lens}, std::pair{&host->cu, &d.cu}})
      copy(*src, *dst);
    // On the graph's stream: `s` does not wait for the legacy stream, so a memset there could
    // land in the middle of the replay (it did under racecheck and initcheck).
    fill_bytes(k_out, 0xFF, stream.get());
    fill_bytes(v_out, 0xFF, stream.get());
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    stream.synchronize();
    auto k_ref = poisoned(DType::bf16, {rows, kvh, hd}, Device::cpu());
    auto v_ref = poisoned(DType::bf16, {rows, kvh, hd}, Device::cpu());
    ops::paged_kv_gather(host->paged(), host->cu, k_ref, v_ref);
    EXPECT_TRUE(bytes_of(k_out) == bytes_of(k_ref)) << "step with kv_lens[0] = " << host->kv_lens.view().ptr<int32_t>()[0];
    EXPECT_TRUE(bytes_of(v_out) == bytes_of(v_ref)) << "step with kv_lens[0] = " << host->kv_lens.view().ptr<int32_t>()[0];
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Index values are trusted on CUDA, but bad ones must not read or write out of bounds: rows
// whose token is past kv_len, whose page id is outside the pool, or past k_out are not written.
TEST(PagedKvGatherCuda, BadValuesStayInBounds) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t kv = 1, hd = 8, page_size = 4, rows = 12;
  Cache c = make_cache(DType::f32, kv, hd, page_size, {5, 6}, 0, seed);
  // Sequence 0 claims 7 rows for its 5 tokens; sequence 1's second page id is outside the pool
  // (its tokens 4 and 5 would be rows 11 and 12); the offsets end at 13, past k_out's 12 rows.
  int32_t* cu = c.cu.view().ptr<int32_t>();
  cu[1] = 7;
  cu[2] = 13;
  const int64_t max_pages = c.page_table.view().shape[1];
  c.page_table.view().ptr<int32_t>()[1 * max_pages + 1] = 999;
  const DeviceCache d = to_cuda(c);
  auto k_out = poisoned(DType::f32, {rows, kv, hd}, Device::cuda());
  auto v_out = poisoned(DType::f32, {rows, kv, hd}, Device::cuda());
  ops::paged_kv_gather(d.paged(), d.cu, k_out, v_out);
  const std::vector<uint8_t> k = bytes_of(k_out), v = bytes_of(v_out);
  const size_t row_bytes = kv * hd * sizeof(float);
  auto row_is = [&](const std::vector<uint8_t>& got, int64_t row, const uint8_t* want) {
    return std::memcmp(&got[static_cast<size_t>(row) * row_bytes], want, row_bytes) == 0;
  };
  const std::vector<uint8_t> poison(row_bytes, 0xFF);
  for (int64_t t = 0; t < 5; ++t) {
    EXPECT_TRUE(row_is(k, t, token_bytes(c, c.k_pages, 0, t))) << "row " << t;
    EXPECT_TRUE(row_is(v, t, token_bytes(c, c.v_pages, 0, t))) << "row " << t;
  }
  for (int64_t t = 0; t < 4; ++t) {
    EXPECT_TRUE(row_is(k, 7 + t, token_bytes(c, c.k_pages, 1, t))) << "row " << 7 + t;
    EXPECT_TRUE(row_is(v, 7 + t, token_bytes(c, c.v_pages, 1, t))) << "row " << 7 + t;
  }
  for (int64_t row : {5, 6, 11}) {
    EXPECT_TRUE(row_is(k, row, poison.data())) << "row " << row << " was written";
    EXPECT_TRUE(row_is(v, row, poison.data())) << "row " << row << " was written";
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}
#endif

// ---------------------------------------------------------------------------------------------

TEST(PagedKvGatherErrors, IndexValuesOnTheCpu) {
  Cache c = make_cache(DType::f32, 2, 8, 4, {3, 9}, 1, 1);
  auto k = poisoned(DType::f32, {12, 2, 8}, Device::cpu());
  auto v = poisoned(DType::f32, {12, 2, 8}, Device::cpu());
  auto call = [&] { ops::paged_kv_gather(c.paged(), c.cu, k, v); };
  int32_t* cu = c.cu.view().ptr<int32_t>();
  int32_t* lens = c.kv_lens.view().ptr<int32_t>();
  cu[0] = 1;
  expect_error(call, ErrorKind::invalid_argument, {"paged_kv_gather", "'cu_seqlens_kv'", "cu_seqlens_kv[0] = 0"});
  cu[0] = 0;
  cu[2] = 11;
  expect_error(call, ErrorKind::invalid_argument,
               {"paged_kv_gather", "'cu_seqlens_kv'", "kv_lens[1] = 9", "got 11 - 3"});
  cu[1] = 4;  // sequence 0 has 3 tokens
  cu[2] = 13;
  expect_error(call, ErrorKind::invalid_argument, {"'cu_seqlens_kv'", "kv_lens[0] = 3", "got 4 - 0"});
  cu[1] = 3;
  cu[2] = 12;
  ops::paged_kv_gather(c.paged(), c.cu, k, v);  // 3 + 9 rows into 12: fine
  auto k_short = poisoned(DType::f32, {11, 2, 8}, Device::cpu());
  auto v_short = poisoned(DType::f32, {11, 2, 8}, Device::cpu());
  expect_error([&] { ops::paged_kv_gather(c.paged(), c.cu, k_short, v_short); },
               ErrorKind::invalid_argument, {"'k_out'", "cu_seqlens_kv[2] = 12 rows", "got 11 rows"});
  lens[1] = 17;  // past the table's capacity of 4 pages of 4
  expect_error(call, ErrorKind::invalid_argument, {"paged_kv_gather", "'kv.kv_lens'", "capacity 16"});
  lens[1] = -1;
  expect_error(call, ErrorKind::invalid_argument, {"'kv.kv_lens'", "kv_lens[1] between 0 and"});
  lens[1] = 9;
  c.page_table.view().ptr<int32_t>()[1 * 4 + 2] = 99;
  expect_error(call, ErrorKind::invalid_argument, {"paged_kv_gather", "'kv.page_table'", "[1, 2] = 99"});
}

TEST(PagedKvGatherErrors, ShapesDtypesDevices) {
  // Runs without a GPU: every error below is raised before anything touches the device.
  const int64_t hd = 64;
  ops::PagedKV kv{fake_cuda(DType::bf16, {6, 16, 2, hd}), fake_cuda(DType::bf16, {6, 16, 2, hd}),
                  fake_cuda(DType::i32, {2, 3}), fake_cuda(DType::i32, {2})};
  Tensor cu = fake_cuda(DType::i32, {3});
  Tensor k = fake_cuda(DType::bf16, {40, 2, hd}), v = fake_cuda(DType::bf16, {40, 2, hd});
  auto call = [](const ops::PagedKV& kv_, const Tensor& cu_, const Tensor& k_, const Tensor& v_) {
    ops::paged_kv_gather(kv_, cu_, k_, v_);
  };

  expect_error([&] { call(kv, fake_cuda(DType::i64, {3}), k, v); }, ErrorKind::dtype,
               {"paged_kv_gather", "'cu_seqlens_kv'", "i32"});
  expect_error([&] { call(kv, fake_cuda(DType::i32, {2}), k, v); }, ErrorKind::shape,
               {"'cu_seqlens_kv'", "[3]"});
  expect_error([&] { call(kv, cu, fake_cuda(DType::bf16, {40, 4, hd}), v); }, ErrorKind::shape,
               {"'k_out'", "[40, 4, 64]"});
  expect_error([&] { call(kv, cu, k, fake_cuda(DType::f16, {40, 2, hd})); }, ErrorKind::dtype,
               {"'v_out'", "bf16"});
  expect_error([&] { call(kv, cu, k, fake_cuda(DType::bf16, {41, 2, hd})); }, ErrorKind::shape,
               {"'v_out'"});
  Tensor k_strided = k;
  k_strided.strides[0] = 2 * 2 * hd;  // rows twice as far apart: not contiguous
  expect_error([&] { call(kv, cu, k_strided, v); }, ErrorKind::shape, {"'k_out'"});

  ops::PagedKV bad = kv;
  bad.k_pages = fake_cuda(DType::i32, {6, 16, 2, hd});
  expect_error([&] { call(bad, cu, k, v); }, ErrorKind::dtype, {"'kv.k_pages'"});
  bad = kv;
  bad.v_pages = fake_cuda(DType::bf16, {6, 8, 2, hd});
  expect_error([&] { call(bad, cu, k, v); }, ErrorKind::shape, {"'kv.v_pages'"});
  bad = kv;
  bad.k_pages = bad.v_pages = fake_cuda(DType::bf16, {6, 0, 2, hd});
  expect_error([&] { call(bad, cu, fake_cuda(DType::bf16, {40, 2, hd}), v); }, ErrorKind::shape,
               {"'kv.k_pages'", "page_size"});
  bad = kv;
  bad.kv_lens = fake_cuda(DType::i32, {3});
  expect_error([&] { call(bad, cu, k, v); }, ErrorKind::shape, {"'kv.kv_lens'"});
  bad = kv;
  bad.page_table = fake_cuda(DType::i64, {2, 3});
  expect_error([&] { call(bad, cu, k, v); }, ErrorKind::dtype, {"'kv.page_table'"});

  OwnedTensor host_cu(DType::i32, {3}, Device::cpu());
  expect_error([&] { call(kv, host_cu, k, v); }, ErrorKind::device, {"'cu_seqlens_kv'"});
}

}  // namespace
}  // namespace braid::test
