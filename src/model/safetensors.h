// safetensors checkpoints, memory-mapped: one file, or shards through
// model.safetensors.index.json. Headers are validated before anything is trusted.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "braid/tensor.h"

namespace braid::model {

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // inside the read-only mapping; alignment is not guaranteed by the format
  size_t nbytes;
  std::string file;  // which file it lives in (for messages)
};

// One mapped .safetensors file. open() validates: file size >= 8, header length within the file,
// the header is a JSON object, every entry has a known dtype, a shape of non-negative ints, and
// data_offsets [begin, end] inside the data area with end - begin == numel * dtype size; entries
// must not overlap. "__metadata__" is allowed (string values). The header length is at most
// 100 MB (the safetensors library's limit). Errors (ErrorKind::io) name the file and the tensor;
// a dtype the format knows but braid has no type for (F64, BOOL, I8, ...) is ErrorKind::unsupported.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorEntry>& entries() const { return entries_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorEntry> entries_;
};

// All tensors of a checkpoint folder: model.safetensors, or the shards an index names (every
// shard must exist; a tensor the index maps to a shard must be in that shard), or, with neither,
// every *.safetensors file in the folder. `dir` may also be one .safetensors file. A tensor name
// found in two files is an error.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir);

  // nullptr when absent.
  const TensorEntry* find(const std::string& name) const;
  // The tensor as a contiguous CPU view over the mapping: read-only (the pages are PROT_READ, so a
  // write faults), valid while this Checkpoint (or a copy) lives. Throws ErrorKind::io naming the
  // tensor if absent.
  Tensor view(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::string dir_;  // for messages
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<const TensorEntry*> sorted_;  // by name
};

}  // namespace braid::model
