// embedding: CUDA against the CPU reference, out-of-range ids on both backends, the reference
// against plain row copies, and argument errors.
#include <cstring>

#include "braid/ops.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct EmbedCase {
  DType dtype;     // table and out
  DType id_dtype;  // i32 or i64
  int64_t vocab, hidden, n;
};

std::string case_name(const EmbedCase& c) {
  return std::string(dtype_name(c.dtype)) + "_" + std::string(dtype_name(c.id_dtype)) + "_v" +
         std::to_string(c.vocab) + "_h" + std::to_string(c.hidden) + "_n" + std::to_string(c.n);
}
void PrintTo(const EmbedCase& c, std::ostream* os) { *os << case_name(c); }

class EmbeddingDiff : public ::testing::TestWithParam<EmbedCase> {};

TEST_P(EmbeddingDiff, CudaMatchesReference) {
  BRAID_REQUIRE_CUDA();
  const auto c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto table = random_host(c.dtype, {c.vocab, c.hidden}, seed, -2, 2);
  auto ids = random_host(c.id_dtype, {c.n}, seed + 1, 0, static_cast<float>(c.vocab));
  auto ref = poisoned(c.dtype, {c.n, c.hidden}, Device::cpu());
  ops::embedding(ids, table, ref);

  auto dtable = to_device(table, Device::cuda());
  auto dids = to_device(ids, Device::cuda());
  auto dout = poisoned(c.dtype, {c.n, c.hidden}, Device::cuda());
  ops::embedding(dids, dtable, dout);
  // A lookup is a copy: the result must be bit-identical.
  EXPECT_EQ(to_floats(dout), to_floats(ref));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmbeddingDiff,
    ::testing::Values(EmbedCase{DType::bf16, DType::i32, 151936, 64, 37},  // a real vocab
                      EmbedCase{DType::bf16, DType::i64, 1000, 896, 5},
                      EmbedCase{DType::f16, DType::i32, 300, 4096, 17},
                      EmbedCase{DType::f32, DType::i64, 50, 1000, 1},
                      EmbedCase{DType::bf16, DType::i32, 70, 1001, 9},  // odd width: scalar path
                      EmbedCase{DType::f32, DType::i32, 11, 3, 130},    // more tokens than rows
                      EmbedCase{DType::f16, DType::i64, 1, 12, 4}),    // 24 bytes: scalar path
    [](const auto& info) { return case_name(info.param); });

// Ids outside [0, vocab) give zero rows on the GPU; the others are still looked up.
TEST(EmbeddingCuda, OutOfRangeIdsGiveZeroRows) {
  BRAID_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t vocab = 100;
  for (int64_t hidden : {64, 13}) {  // vector and scalar paths
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    auto table = random_host(DType::bf16, {vocab, hidden}, seed, 0.5f, 1.5f);  // no zeros
    // 2^33 + 3 would alias id 3 if it were truncated to 32 bits.
    const std::vector<int64_t> id_values = {3, -1, vocab, (int64_t{1} << 33) + 3, vocab - 1, 0};
    OwnedTensor ids(DType::i64, {static_cast<int64_t>(id_values.size())}, Device::cpu());
    std::memcpy(ids.data(), id_values.data(), id_values.size() * sizeof(int64_t));
    auto dout = poisoned(DType::bf16, {ids.view().size(0), hidden}, Device::cuda());
    auto dids = to_device(ids, Device::cuda());
    auto dtable = to_device(table, Device::cuda());
    ops::embedding(dids, dtable, dout);
    const auto got = to_floats(dout);
    const auto rows = to_floats(table);
    for (size_t i = 0; i < id_values.size(); ++i) {
      const int64_t id = id_values[i];
      const bool valid = id >= 0 && id < vocab;
      for (int64_t j = 0; j < hidden; ++j)
        ASSERT_EQ(got[i * hidden + j], valid ? rows[id * hidden + j] : 0.0f)
            << "token " << i << " (id " << id << "), column " << j;
    }
  }
}

TEST(EmbeddingReference, CopiesTheRowsNamedByTheIds) {
  auto table = random_host(DType::f32, {5, 3}, fresh_seed());
  const int32_t id_values[] = {4, 0, 4, 2};
  OwnedTensor ids(DType::i32, {4}, Device::cpu());
  std::memcpy(ids.data(), id_values, sizeof(id_values));
  auto out = poisoned(DType::f32, {4, 3}, Device::cpu());
  ops::embedding(ids, table, out);
  const float* t = table.view().ptr<float>();
  const float* o = out.view().ptr<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(o[i * 3 + j], t[id_values[i] * 3 + j]) << i << "," << j;
}

TEST(EmbeddingReference, OutOfRangeIdIsAnError) {
  OwnedTensor table(DType::bf16, {5, 8}, Device::cpu()), out(DType::bf16, {3, 8}, Device::cpu());
  for (int64_t bad : {int64_t{5}, int64_t{-1}}) {
    OwnedTensor ids(DType::i64, {3}, Device::cpu());
    const int64_t id_values[] = {0, bad, 2};
    std::memcpy(ids.data(), id_values, sizeof(id_values));
    expect_error([&] { ops::embedding(ids, table, out); }, ErrorKind::invalid_argument,
                 {"embedding", "'ids'", "[0, 5)", "id " + std::to_string(bad), "position 1"});
  }
}

// embedding_rows (a vocabulary-parallel rank's part): ids in the table's range of the vocabulary
// are looked up, every other id gives a zero row; the parts of a split table sum to the lookup.
TEST(EmbeddingRows, PartsOfASplitTableSumToTheLookup) {
  const int64_t vocab = 12, hidden = 5, parts = 3, per = vocab / parts;
  auto table = random_host(DType::f32, {vocab, hidden}, fresh_seed(), 0.5f, 1.5f);
  const int32_t id_values[] = {0, 11, 4, 7, 3, 8};
  OwnedTensor ids(DType::i32, {6}, Device::cpu());
  std::memcpy(ids.data(), id_values, sizeof(id_values));
  auto whole = poisoned(DType::f32, {6, hidden}, Device::cpu());
  ops::embedding(ids, table, whole);
  std::vector<float> sum(6 * hidden, 0.0f);
  for (int64_t p = 0; p < parts; ++p) {
    const Tensor rows = table.view().slice(0, p * per, (p + 1) * per);
    auto out = poisoned(DType::f32, {6, hidden}, Device::cpu());
    ops::embedding_rows(ids, rows, p * per, out);
    const auto got = to_floats(out);
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t id = id_values[i / hidden];
      if (id < p * per || id >= (p + 1) * per) EXPECT_EQ(got[i], 0.0f) << "part " << p << " element " << i;
      sum[i] += got[i];
    }
    if (cuda_available()) {  // CUDA: the same bits
      auto dout = poisoned(DType::f32, {6, hidden}, Device::cuda());
      ops::embedding_rows(to_device(ids, Device::cuda()), to_device(rows, Device::cuda()),
                          p * per, dout);
      EXPECT_EQ(to_floats(dout), got) << "part " << p;
    }
  }
  EXPECT_EQ(sum, to_floats(whole));
  expect_error([&] { ops::embedding_rows(ids, table, -1, whole); }, ErrorKind::invalid_argument,
               {"embedding_rows", "'first_id'"});
}

TEST(EmbeddingErrors, NameTheArgument) {
  OwnedTensor ids(DType::i32, {3}, Device::cpu()), table(DType::bf16, {10, 8}, Device::cpu()),
      out(DType::bf16, {3, 8}, Device::cpu());
  OwnedTensor ids_f32(DType::f32, {3}, Device::cpu()), ids_2d(DType::i32, {3, 1}, Device::cpu());
  OwnedTensor table_1d(DType::bf16, {80}, Device::cpu()), table_i32(DType::i32, {10, 8}, Device::cpu());
  OwnedTensor out_f16(DType::f16, {3, 8}, Device::cpu()), out_short(DType::bf16, {2, 8}, Device::cpu());
  OwnedTensor out_wide(DType::bf16, {3, 9}, Device::cpu());
  expect_error([&] { ops::embedding(ids_f32, table, out); }, ErrorKind::dtype,
               {"embedding", "'ids'", "i32 or i64", "f32"});
  expect_error([&] { ops::embedding(ids_2d, table, out); }, ErrorKind::shape, {"'ids'", "[3, 1]"});
  expect_error([&] { ops::embedding(ids, table_1d, out); }, ErrorKind::shape, {"'table'", "[80]"});
  expect_error([&] { ops::embedding(ids, table_i32, out); }, ErrorKind::dtype, {"'table'", "i32"});
  expect_error([&] { ops::embedding(ids, table, out_f16); }, ErrorKind::dtype,
               {"'out'", "bf16", "f16"});
  expect_error([&] { ops::embedding(ids, table, out_short); }, ErrorKind::shape,
               {"'out'", "[3, 8]", "[2, 8]"});
  expect_error([&] { ops::embedding(ids, table, out_wide); }, ErrorKind::shape, {"'out'", "[3, 9]"});
  Tensor table_cuda = fake_cuda(DType::bf16, {10, 8});
  expect_error([&] { ops::embedding(ids, table_cuda, out); }, ErrorKind::device,
               {"'table'", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace braid::test
