// safetensors: files written here byte by byte (a valid one read back, sharded through an index,
// and each kind of corruption rejected with a message that names the file, tensor and problem).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "test_util.h"

namespace braid::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using model::Checkpoint;
using model::SafetensorsFile;

// A fresh folder under the system temp dir, removed with everything in it at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("braid_safetensors_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter++) + "_" + std::to_string(fresh_seed() % 1000000));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// The file as the format lays it out: header length, header text, data area.
void write_raw(const std::string& path, uint64_t header_len, const std::string& header,
               const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << le64(header_len) << header << data;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

struct Blob {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A well-formed file: tensors packed back to back, header padded with spaces to 8 bytes (as the
// Python writer does).
void write_safetensors(const std::string& path, const std::vector<Blob>& blobs,
                       const json& metadata = json()) {
  json header = json::object();
  std::string data;
  for (const auto& b : blobs) {
    header[b.name] = {{"dtype", b.dtype},
                      {"shape", b.shape},
                      {"data_offsets", {data.size(), data.size() + b.bytes.size()}}};
    data += b.bytes;
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  write_raw(path, text.size(), text, data);
}

// One file holding `header` (a JSON text) and `data_bytes` zero bytes of data.
std::string file_with_header(const TempDir& dir, const std::string& header, size_t data_bytes) {
  const std::string path = dir.file("model.safetensors");
  write_raw(path, header.size(), header, std::string(data_bytes, '\0'));
  return path;
}

TEST(Safetensors, SingleFileValuesReadBack) {
  TempDir dir;
  const std::vector<float> a = {0.5f, -1.0f, 2.0f, 3.25f, -4.5f, 1e-3f};
  std::vector<uint16_t> b;
  for (float v : {1.0f, -2.5f, 0.125f, 100.0f}) b.push_back(float_to_bf16(v));
  const std::vector<int64_t> c = {7, -9};
  write_safetensors(dir.file("model.safetensors"),
                    {{"model.a", "F32", {2, 3}, bytes_of(a)},
                     {"model.b", "BF16", {4}, bytes_of(b)},
                     {"model.c", "I64", {2}, bytes_of(c)},
                     {"empty", "F16", {0, 5}, ""},
                     {"scalar", "F32", {}, bytes_of(std::vector<float>{42.0f})}},
                    {{"format", "pt"}});

  const Checkpoint ck = Checkpoint::open(dir.path.string());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"empty", "model.a", "model.b", "model.c",
                                                  "scalar"}));
  const Tensor ta = ck.view("model.a");
  EXPECT_EQ(ta.dtype, DType::f32);
  EXPECT_TRUE(ta.device.is_cpu());
  EXPECT_EQ(shape_string(ta), "[2, 3]");
  EXPECT_TRUE(ta.is_contiguous());
  EXPECT_EQ(to_floats(ta), a);
  const Tensor tb = ck.view("model.b");
  EXPECT_EQ(tb.dtype, DType::bf16);
  EXPECT_EQ(to_floats(tb), (std::vector<float>{1.0f, -2.5f, 0.125f, 100.0f}));
  const Tensor tc = ck.view("model.c");
  EXPECT_EQ(tc.dtype, DType::i64);
  EXPECT_EQ(tc.ptr<int64_t>()[0], 7);
  EXPECT_EQ(tc.ptr<int64_t>()[1], -9);
  EXPECT_EQ(ck.view("empty").numel(), 0);
  EXPECT_EQ(ck.view("scalar").ndim, 0);
  EXPECT_EQ(to_floats(ck.view("scalar")), std::vector<float>{42.0f});

  const auto* e = ck.find("model.b");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->nbytes, 8u);
  EXPECT_EQ(e->file, dir.file("model.safetensors"));
  EXPECT_EQ(ck.find("model.z"), nullptr);

  // The same file opened directly, and through its path instead of the folder.
  auto f = SafetensorsFile::open(dir.file("model.safetensors"));
  EXPECT_EQ(f->entries().size(), 5u);
  EXPECT_EQ(to_floats(Checkpoint::open(dir.file("model.safetensors")).view("model.a")), a);
}

TEST(Safetensors, ShardedThroughIndex) {
  TempDir dir;
  const std::vector<float> x = {1, 2, 3, 4}, y = {5, 6}, z = {7};
  write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                    {{"x", "F32", {2, 2}, bytes_of(x)}, {"y", "F32", {2}, bytes_of(y)}});
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"z", "F32", {1}, bytes_of(z)}});
  write_text(dir.file("model.safetensors.index.json"),
             R"({"metadata": {"total_size": 28}, "weight_map": {
                   "x": "model-00001-of-00002.safetensors",
                   "y": "model-00001-of-00002.safetensors",
                   "z": "model-00002-of-00002.safetensors"}})");
  const Checkpoint ck = Checkpoint::open(dir.path.string());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(to_floats(ck.view("x")), x);
  EXPECT_EQ(to_floats(ck.view("y")), y);
  EXPECT_EQ(to_floats(ck.view("z")), z);
  EXPECT_EQ(ck.find("z")->file, dir.file("model-00002-of-00002.safetensors"));
}

TEST(Safetensors, EveryFileWithoutIndex) {
  TempDir dir;
  write_safetensors(dir.file("a.safetensors"), {{"p", "F32", {1}, bytes_of(std::vector<float>{1})}});
  write_safetensors(dir.file("b.safetensors"), {{"q", "F32", {1}, bytes_of(std::vector<float>{2})}});
  const Checkpoint ck = Checkpoint::open(dir.path.string());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(to_floats(ck.view("q")), std::vector<float>{2});
}

// ---- bad input ----

TEST(SafetensorsErrors, TruncatedBelowHeaderLength) {
  TempDir dir;
  write_text(dir.file("model.safetensors"), "abc");
  expect_error([&] { SafetensorsFile::open(dir.file("model.safetensors")); }, ErrorKind::io,
               {dir.file("model.safetensors"), "truncated", "3 bytes"});
}

TEST(SafetensorsErrors, HeaderLengthPastEndOfFile) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write_raw(dir.file("model.safetensors"), 1000, header, std::string(4, '\0'));
  expect_error([&] { Checkpoint::open(dir.path.string()); }, ErrorKind::io,
               {"model.safetensors", "header length 1000", "past the end of the file"});
}

TEST(SafetensorsErrors, HeaderLengthOverLimit) {
  TempDir dir;
  // A sparse file just big enough to hold the claimed header: rejected before it is parsed.
  const uint64_t len = 100'000'001;
  const std::string path = dir.file("model.safetensors");
  write_raw(path, len, "", "");
  fs::resize_file(path, 8 + len);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {"header length 100000001", "exceeds the limit"});
}

TEST(SafetensorsErrors, BrokenJson) {
  TempDir dir;
  const std::string path = file_with_header(dir, R"({"a": {"dtype": "F32", "shape": [1],)", 4);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {path, "header is not valid JSON", "parse error"});
}

TEST(SafetensorsErrors, HeaderNotAnObject) {
  TempDir dir;
  const std::string path = file_with_header(dir, "[1, 2, 3]", 0);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {path, "header must be a JSON object", "array"});
}

TEST(SafetensorsErrors, UnknownDtypeName) {
  TempDir dir;
  const std::string path =
      file_with_header(dir, R"({"w": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}})", 4);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {path, "tensor 'w'", "unknown dtype 'F33'"});
}

TEST(SafetensorsErrors, UnsupportedDtype) {
  TempDir dir;
  const std::string path =
      file_with_header(dir, R"({"w64": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::unsupported,
               {path, "tensor 'w64'", "dtype F64 is not supported"});
  const std::string path2 = file_with_header(
      dir, R"({"mask": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})", 3);
  expect_error([&] { SafetensorsFile::open(path2); }, ErrorKind::unsupported,
               {"tensor 'mask'", "dtype BOOL"});
}

TEST(SafetensorsErrors, SizeDisagreesWithShapeAndDtype) {
  TempDir dir;
  const std::string path = file_with_header(
      dir, R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 24]}})", 24);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {path, "tensor 'w'", "hold 24 bytes", "shape [2, 3] of BF16 needs 6 x 2 bytes"});
}

TEST(SafetensorsErrors, DataShorterThanOffsets) {
  TempDir dir;
  // The header promises 24 bytes, the file holds 12 after it: a truncated download.
  const std::string path = file_with_header(
      dir, R"({"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}})", 12);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {path, "tensor 'w'", "[0, 24]", "leave the data area of 12 bytes"});
}

TEST(SafetensorsErrors, OffsetsLeaveTheFile) {
  TempDir dir;
  const std::string path = file_with_header(
      dir, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [400, 404]}})", 16);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {"tensor 'w'", "[400, 404]", "leave the data area of 16 bytes"});
}

TEST(SafetensorsErrors, OffsetsReversedOrMalformed) {
  TempDir dir;
  for (const char* offsets : {"[8, 4]", "[0]", "[-4, 0]", "\"0-4\"", "[0, 4.5]"}) {
    SCOPED_TRACE(offsets);
    const std::string path = file_with_header(
        dir, std::string(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": )") + offsets + "}}",
        16);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
                 {"tensor 'w'", "expected 'data_offsets' [begin, end] with 0 <= begin <= end"});
  }
}

TEST(SafetensorsErrors, OverlappingOffsets) {
  TempDir dir;
  const std::string path = file_with_header(
      dir,
      R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
      24);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {path, "tensor 'b'", "overlap tensor 'a'"});
}

TEST(SafetensorsErrors, InvalidShapeEntries) {
  TempDir dir;
  for (const char* shape : {"[-1, 2]", "[2, 1.5]", "[\"2\"]", "[null]", "7"}) {
    SCOPED_TRACE(shape);
    const std::string path = file_with_header(
        dir, std::string(R"({"w": {"dtype": "U8", "data_offsets": [0, 2], "shape": )") + shape + "}}",
        2);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io, {"tensor 'w'", "shape"});
  }
}

TEST(SafetensorsErrors, ShapeOverflow) {
  TempDir dir;
  const std::string path = file_with_header(
      dir,
      R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {"tensor 'w'", "too many elements"});
}

// Loader limits (issue 20): the element count must fit int64 even where a zero dimension makes
// the product 0 (the strides of a view would overflow), and where it fits uint64 but not int64.
TEST(SafetensorsErrors, ShapeOverflowsInt64) {
  TempDir dir;
  for (const char* shape : {"[0, 4611686018427387904, 4]", "[4294967296, 2147483648]",
                            "[9223372036854775807, 2, 0]"}) {
    SCOPED_TRACE(shape);
    const std::string path = file_with_header(
        dir, std::string(R"({"w": {"dtype": "U8", "data_offsets": [0, 0], "shape": )") + shape + "}}",
        0);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
                 {"tensor 'w'", "too many elements"});
  }
}

TEST(SafetensorsErrors, EntryMissingFields) {
  TempDir dir;
  const std::string path =
      file_with_header(dir, R"({"w": {"shape": [1], "data_offsets": [0, 1]}})", 1);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io, {"tensor 'w'", "'dtype'"});
  const std::string path2 = file_with_header(dir, R"({"w": [1, 2]})", 1);
  expect_error([&] { SafetensorsFile::open(path2); }, ErrorKind::io,
               {"tensor 'w'", "expected an object"});
}

TEST(SafetensorsErrors, MetadataValuesMustBeStrings) {
  TempDir dir;
  const std::string path = file_with_header(dir, R"({"__metadata__": {"format": 1}})", 0);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::io,
               {"'__metadata__' entry 'format' must be a string"});
}

TEST(SafetensorsErrors, IndexNamesMissingShard) {
  TempDir dir;
  write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                    {{"x", "F32", {1}, bytes_of(std::vector<float>{1})}});
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"x": "model-00001-of-00002.safetensors",
                                "y": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir.path.string()); }, ErrorKind::io,
               {"model.safetensors.index.json", "shard 'model-00002-of-00002.safetensors'",
                "tensor 'y'", "does not exist"});
}

TEST(SafetensorsErrors, IndexTensorNotInItsShard) {
  TempDir dir;
  write_safetensors(dir.file("s1.safetensors"), {{"x", "F32", {1}, bytes_of(std::vector<float>{1})}});
  write_safetensors(dir.file("s2.safetensors"), {{"y", "F32", {1}, bytes_of(std::vector<float>{2})}});
  // "y" exists, but in s2, not in s1 where the index says it is.
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors", "z": "s2.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir.path.string()); }, ErrorKind::io,
               {"model.safetensors.index.json", "tensor 'y'", "shard 's1.safetensors'",
                "does not contain it"});
  // "w" is in no shard at all.
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors", "w": "s2.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir.path.string()); }, ErrorKind::io,
               {"model.safetensors.index.json", "tensor 'w'", "shard 's2.safetensors'",
                "does not contain it"});
}

TEST(SafetensorsErrors, IndexBroken) {
  TempDir dir;
  write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": )");
  expect_error([&] { Checkpoint::open(dir.path.string()); }, ErrorKind::io,
               {"model.safetensors.index.json", "not valid JSON"});
  write_text(dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
  expect_error([&] { Checkpoint::open(dir.path.string()); }, ErrorKind::io,
               {"model.safetensors.index.json", "'weight_map'"});
}

TEST(SafetensorsErrors, MissingTensorLookup) {
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), {{"x", "F32", {1}, bytes_of(std::vector<float>{1})}});
  const Checkpoint ck = Checkpoint::open(dir.path.string());
  expect_error([&] { ck.view("model.layers.0.mlp.gate_proj.weight"); }, ErrorKind::io,
               {"tensor 'model.layers.0.mlp.gate_proj.weight' not found", dir.path.string()});
}

TEST(SafetensorsErrors, DuplicateTensorAcrossFiles) {
  TempDir dir;
  write_safetensors(dir.file("a.safetensors"), {{"x", "F32", {1}, bytes_of(std::vector<float>{1})}});
  write_safetensors(dir.file("b.safetensors"), {{"x", "F32", {1}, bytes_of(std::vector<float>{2})}});
  expect_error([&] { Checkpoint::open(dir.path.string()); }, ErrorKind::io,
               {"tensor 'x' appears in both", "a.safetensors", "b.safetensors"});
}

TEST(SafetensorsErrors, NoCheckpointThere) {
  TempDir dir;
  expect_error([&] { Checkpoint::open(dir.path.string()); }, ErrorKind::io,
               {dir.path.string(), "no model.safetensors"});
  expect_error([&] { Checkpoint::open(dir.file("nothing-here")); }, ErrorKind::io,
               {"nothing-here", "no such checkpoint folder"});
}

}  // namespace
}  // namespace braid::test
