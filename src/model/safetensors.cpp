// safetensors reading: the header is checked field by field before any offset is used, so a
// corrupt or hostile file gives an error that names the file and the tensor, never a wild read.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "braid/error.h"

namespace braid::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The safetensors library refuses headers above 100 MB; a real one is a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void io_error(const std::string& file, const std::string& what) {
  throw Error(ErrorKind::io, file + ": " + what);
}

[[noreturn]] void tensor_error(const std::string& file, const std::string& name,
                               const std::string& what) {
  throw Error(ErrorKind::io, file + ": tensor '" + name + "': " + what);
}

// The dtype names of the safetensors format that braid has a type for.
bool dtype_from_safetensors(const std::string& name, DType& out) {
  static const std::map<std::string, DType> known = {
      {"F32", DType::f32},        {"F16", DType::f16},        {"BF16", DType::bf16},
      {"F8_E4M3", DType::f8e4m3}, {"F8_E5M2", DType::f8e5m2}, {"I32", DType::i32},
      {"I64", DType::i64},        {"U8", DType::u8},
  };
  auto it = known.find(name);
  if (it == known.end()) return false;
  out = it->second;
  return true;
}

// Valid in the format, but without a braid type: reported as unsupported rather than corrupt.
bool is_other_safetensors_dtype(const std::string& name) {
  static const std::set<std::string> others = {"BOOL", "I8",  "I16", "U16",     "U32",   "U64",
                                                "F64",  "C64", "F4",  "F6_E2M3", "F6_E3M2",
                                                "F8_E8M0"};
  return others.count(name) != 0;
}

// A JSON integer >= 0 (what shape entries and offsets must be).
bool as_nonnegative(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks one header entry and fills `e` (except data, which needs the mapping's address).
void parse_entry(const std::string& file, const std::string& name, const json& v,
                 uint64_t data_size, TensorEntry& e, uint64_t& begin) {
  if (!v.is_object()) tensor_error(file, name, "expected an object, got " + v.dump());
  e.name = name;
  e.file = file;

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string())
    tensor_error(file, name, "expected a string field 'dtype'");
  const std::string dname = dt->get<std::string>();
  if (!dtype_from_safetensors(dname, e.dtype)) {
    if (is_other_safetensors_dtype(dname))
      throw Error(ErrorKind::unsupported,
                  file + ": tensor '" + name + "': dtype " + dname +
                      " is not supported (supported: BF16, F16, F32, F8_E4M3, F8_E5M2, I32, I64, U8)");
    tensor_error(file, name, "unknown dtype '" + dname + "'");
  }

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array())
    tensor_error(file, name, "expected an array field 'shape'");
  // numel, and the product of the nonzero sizes: a view's strides are products of sizes, so
  // that one must fit int64 too even when a zero makes the tensor empty.
  uint64_t numel = 1;
  int64_t nonzero = 1;
  for (const json& d : *sh) {
    uint64_t n = 0;
    if (!as_nonnegative(d, n) || n > static_cast<uint64_t>(INT64_MAX))
      tensor_error(file, name, "shape " + sh->dump() + ": every entry must be an integer >= 0");
    numel *= n;
    if (n != 0 && __builtin_mul_overflow(nonzero, static_cast<int64_t>(n), &nonzero))
      tensor_error(file, name,
                   "shape " + sh->dump() + " has too many elements (more than 2^63 - 1)");
    e.shape.push_back(static_cast<int64_t>(n));
  }

  auto off = v.find("data_offsets");
  uint64_t end = 0;
  if (off == v.end() || !off->is_array() || off->size() != 2 || !as_nonnegative((*off)[0], begin) ||
      !as_nonnegative((*off)[1], end) || end < begin)
    tensor_error(file, name,
                 "expected 'data_offsets' [begin, end] with 0 <= begin <= end, got " +
                     (off == v.end() ? std::string("nothing") : off->dump()));
  if (end > data_size)
    tensor_error(file, name,
                 "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] leave the data area of " + std::to_string(data_size) +
                     " bytes (file truncated?)");
  uint64_t need = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &need) ||
      need != end - begin)
    tensor_error(file, name,
                 "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                     std::to_string(end - begin) + " bytes, but shape " + shape_text(e.shape) +
                     " of " + dname + " needs " + std::to_string(numel) + " x " +
                     std::to_string(dtype_size(e.dtype)) + " bytes");
  e.nbytes = static_cast<size_t>(need);
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_error(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    io_error(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    io_error(path, "not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    io_error(path, "truncated: " + std::to_string(size) +
                       " bytes, shorter than the 8-byte header length that starts a safetensors file");
  }
  // The mapping is read-only and private: views over it must never be written.
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) io_error(path, std::string("mmap failed: ") + std::strerror(map_errno));
  f->map_ = map;
  f->map_size_ = size;  // from here on the destructor unmaps, also when a check below throws

  const auto* bytes = static_cast<const unsigned char*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian u64
  if (header_len > size - 8)
    io_error(path, "header length " + std::to_string(header_len) +
                       " runs past the end of the file (" + std::to_string(size) +
                       " bytes; truncated or not a safetensors file?)");
  if (header_len > kMaxHeaderBytes)
    io_error(path, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                       std::to_string(kMaxHeaderBytes) + " bytes");

  json header;
  try {
    const char* text = reinterpret_cast<const char*>(bytes + 8);
    header = json::parse(text, text + header_len);
  } catch (const json::exception& e) {
    io_error(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object())
    io_error(path, "header must be a JSON object, got " + std::string(header.type_name()));

  const unsigned char* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<std::pair<uint64_t, size_t>> by_offset;  // (begin, index into entries_)
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object())
        io_error(path, "'__metadata__' must be an object, got " + std::string(value.type_name()));
      for (const auto& [key, meta] : value.items())
        if (!meta.is_string())
          io_error(path, "'__metadata__' entry '" + key + "' must be a string, got " + meta.dump());
      continue;
    }
    TensorEntry e;
    uint64_t begin = 0;
    parse_entry(path, name, value, data_size, e, begin);
    e.data = data + begin;
    by_offset.emplace_back(begin, f->entries_.size());
    f->entries_.push_back(std::move(e));
  }

  // Overlap: sorted by begin, each tensor must start at or after the previous one's end.
  std::sort(by_offset.begin(), by_offset.end());
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorEntry& prev = f->entries_[by_offset[i - 1].second];
    const TensorEntry& cur = f->entries_[by_offset[i].second];
    const uint64_t prev_end = by_offset[i - 1].first + prev.nbytes;
    if (by_offset[i].first < prev_end)
      tensor_error(path, cur.name,
                   "data_offsets overlap tensor '" + prev.name + "' (it starts at " +
                       std::to_string(by_offset[i].first) + ", '" + prev.name + "' ends at " +
                       std::to_string(prev_end) + ")");
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

// ---------------------------------------------------------------------------------------------

namespace {

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_error(path, std::string("cannot open: ") + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    io_error(path, std::string("not valid JSON: ") + e.what());
  }
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint c;
  c.dir_ = dir;
  std::error_code ec;
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string single_path = (fs::path(dir) / "model.safetensors").string();
  // (tensor, shard path) pairs the index promises; checked once every shard is open.
  std::vector<std::pair<std::string, std::string>> promised;

  if (fs::is_regular_file(dir, ec)) {
    // A single .safetensors file given directly.
    c.files_.push_back(SafetensorsFile::open(dir));
  } else if (!fs::is_directory(dir, ec)) {
    io_error(dir, "no such checkpoint folder");
  } else if (fs::exists(index_path, ec)) {
    const json index = read_json_file(index_path);
    auto wm = index.is_object() ? index.find("weight_map") : index.end();
    if (!index.is_object() || wm == index.end() || !wm->is_object())
      io_error(index_path, "expected an object field 'weight_map' {tensor: shard file}");
    // Open each shard once, in the order the index first names it.
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const auto& [name, shard] : wm->items()) {
      if (!shard.is_string())
        io_error(index_path, "weight_map entry '" + name + "': expected a file name, got " +
                                 shard.dump());
      const std::string file = shard.get<std::string>();
      const std::string shard_path = (fs::path(dir) / file).string();
      promised.emplace_back(name, shard_path);
      if (shards.count(file)) continue;
      if (!fs::exists(shard_path, ec))
        io_error(index_path, "shard '" + file + "' (named for tensor '" + name +
                                 "') does not exist: " + shard_path);
      shards[file] = SafetensorsFile::open(shard_path);
      c.files_.push_back(shards[file]);
    }
  } else if (fs::exists(single_path, ec)) {
    c.files_.push_back(SafetensorsFile::open(single_path));
  } else {
    std::vector<std::string> found;
    for (const auto& item : fs::directory_iterator(dir, ec))
      if (item.path().extension() == ".safetensors") found.push_back(item.path().string());
    if (found.empty())
      io_error(dir, "no model.safetensors, model.safetensors.index.json or *.safetensors file");
    std::sort(found.begin(), found.end());
    for (const auto& p : found) c.files_.push_back(SafetensorsFile::open(p));
  }

  for (const auto& f : c.files_)
    for (const auto& e : f->entries()) c.sorted_.push_back(&e);
  std::sort(c.sorted_.begin(), c.sorted_.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->name < b->name; });
  for (size_t i = 1; i < c.sorted_.size(); ++i)
    if (c.sorted_[i]->name == c.sorted_[i - 1]->name)
      io_error(dir, "tensor '" + c.sorted_[i]->name + "' appears in both " +
                        c.sorted_[i - 1]->file + " and " + c.sorted_[i]->file);
  for (const auto& [name, shard_path] : promised) {
    const TensorEntry* e = c.find(name);
    if (e == nullptr || e->file != shard_path)
      io_error(index_path, "tensor '" + name + "' is mapped to shard '" +
                               fs::path(shard_path).filename().string() +
                               "', which does not contain it");
  }
  return c;
}

const TensorEntry* Checkpoint::find(const std::string& name) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), name,
                             [](const TensorEntry* e, const std::string& n) { return e->name < n; });
  return it != sorted_.end() && (*it)->name == name ? *it : nullptr;
}

Tensor Checkpoint::view(const std::string& name) const {
  const TensorEntry* e = find(name);
  if (e == nullptr) throw Error(ErrorKind::io, "checkpoint " + dir_ + ": tensor '" + name + "' not found");
  if (e->shape.size() > static_cast<size_t>(kMaxDims))
    throw Error(ErrorKind::unsupported, e->file + ": tensor '" + name + "': " +
                                            std::to_string(e->shape.size()) +
                                            " dimensions (at most " + std::to_string(kMaxDims) +
                                            " are supported)");
  // The mapping is PROT_READ: the view must only ever be read (writing it faults).
  return Tensor::contiguous(const_cast<void*>(e->data), e->dtype, Device::cpu(), e->shape.data(),
                            static_cast<int>(e->shape.size()));
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(sorted_.size());
  for (const TensorEntry* e : sorted_) out.push_back(e->name);
  return out;
}

}  // namespace braid::model
