// Tensor: a non-owning view (data, dtype, device, shape, strides in elements).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "braid/dtype.h"

namespace braid {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
};

std::string device_name(Device d);  // "cpu", "cuda:0"

inline constexpr int kMaxDims = 6;

// Rows laid out on a two-level grid: row r starts at element
// (r / inner) * outer_stride + (r % inner) * inner_stride. This covers every tensor whose rows fold
// into one stride (outer_stride unused) and also views such as q = qkv[:, :q_dim] seen as
// [tokens, heads, head_dim], whose rows step by head_dim within a token and by the packed width
// between tokens.
struct RowGrid {
  int64_t rows = 0;
  int64_t inner = 1;
  int64_t outer_stride = 0;
  int64_t inner_stride = 0;
  int64_t offset(int64_t r) const { return (r / inner) * outer_stride + (r % inner) * inner_stride; }
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements, not bytes

  Tensor() = default;
  // Contiguous (row-major) view.
  Tensor(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);
  static Tensor contiguous(void* data, DType dtype, Device device, const int64_t* shape, int ndim);

  bool defined() const { return data != nullptr || numel() == 0; }
  int64_t size(int dim) const;      // negative dims count from the end
  int64_t stride(int dim) const;
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  // True when the last dimension is dense (stride 1) and every other dimension can be folded
  // into one "rows" dimension with a single row stride.
  bool rows_foldable() const;
  int64_t rows() const;             // product of all but the last dimension
  int64_t row_stride() const;       // stride between rows when rows_foldable()
  // The tensor's rows as a RowGrid; false when the last dimension is not dense or the leading
  // dimensions do not fold into two levels.
  bool row_grid(RowGrid* grid) const;

  template <typename T> T* ptr() const { return static_cast<T*>(data); }
  // Pointer to element `offset` (in elements).
  void* at(int64_t offset) const {
    return static_cast<char*>(data) + offset * static_cast<int64_t>(dtype_size(dtype));
  }

  // Views.
  Tensor slice(int dim, int64_t start, int64_t stop) const;  // [start, stop) along dim
  Tensor reshape(std::initializer_list<int64_t> shape) const; // contiguous tensors only
  Tensor select(int dim, int64_t index) const;                // drops dim
};

std::string shape_string(const Tensor& t);  // "[4, 4096]"
std::string describe(const Tensor& t);      // "bf16[4, 4096] on cuda:0"

}  // namespace braid
