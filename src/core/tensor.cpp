#include "braid/tensor.h"

#include <string>

#include "braid/error.h"

namespace braid {

std::string device_name(Device d) {
  return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

static void check_ndim(size_t ndim) {
  if (ndim > static_cast<size_t>(kMaxDims))
    throw Error(ErrorKind::shape, "tensor: expected at most " + std::to_string(kMaxDims) +
                                      " dimensions, got " + std::to_string(ndim));
}

Tensor Tensor::contiguous(void* data, DType dtype, Device device, const int64_t* shape, int ndim) {
  check_ndim(static_cast<size_t>(ndim));
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

Tensor::Tensor(void* data_, DType dtype_, Device device_, std::initializer_list<int64_t> shape_) {
  check_ndim(shape_.size());
  *this = contiguous(data_, dtype_, device_, shape_.begin(), static_cast<int>(shape_.size()));
}

static int wrap_dim(const Tensor& t, int dim) {
  int d = dim < 0 ? dim + t.ndim : dim;
  if (d < 0 || d >= t.ndim)
    throw Error(ErrorKind::shape, "tensor: dimension " + std::to_string(dim) +
                                      " out of range for " + std::to_string(t.ndim) + "-d tensor");
  return d;
}

int64_t Tensor::size(int dim) const { return shape[wrap_dim(*this, dim)]; }
int64_t Tensor::stride(int dim) const { return strides[wrap_dim(*this, dim)]; }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

bool Tensor::rows_foldable() const {
  if (ndim == 0) return false;
  if (shape[ndim - 1] > 1 && strides[ndim - 1] != 1) return false;
  // Leading dims must nest: stride[d] == stride[d+1] * shape[d+1] for d < ndim-2.
  for (int d = 0; d + 2 < ndim; ++d)
    if (shape[d] > 1 && strides[d] != strides[d + 1] * shape[d + 1]) return false;
  return true;
}

int64_t Tensor::rows() const {
  int64_t r = 1;
  for (int d = 0; d + 1 < ndim; ++d) r *= shape[d];
  return r;
}

int64_t Tensor::row_stride() const {
  if (ndim < 2) return shape[0];
  return strides[ndim - 2];
}

bool Tensor::row_grid(RowGrid* grid) const {
  if (ndim == 0 || (shape[ndim - 1] > 1 && strides[ndim - 1] != 1)) return false;
  RowGrid g;
  g.rows = rows();
  int d = ndim - 2;
  if (d < 0) {
    *grid = g;
    return true;
  }
  // Inner level: dimension ndim-2 and every outer dimension that nests around it.
  int64_t inner = shape[d];
  g.inner_stride = strides[d];
  int j = d - 1;
  for (; j >= 0; --j) {
    if (shape[j] == 1) continue;
    if (strides[j] != g.inner_stride * inner) break;
    inner *= shape[j];
  }
  // Outer level: the remaining dimensions must nest among themselves.
  if (j >= 0) {
    int64_t outer = shape[j];
    g.outer_stride = strides[j];
    for (int k = j - 1; k >= 0; --k) {
      if (shape[k] == 1) continue;
      if (strides[k] != g.outer_stride * outer) return false;
      outer *= shape[k];
    }
  }
  g.inner = inner > 0 ? inner : 1;
  *grid = g;
  return true;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t stop) const {
  int d = wrap_dim(*this, dim);
  if (start < 0 || stop < start || stop > shape[d])
    throw Error(ErrorKind::shape, "tensor slice: range [" + std::to_string(start) + ", " +
                                      std::to_string(stop) + ") out of bounds for dimension of size " +
                                      std::to_string(shape[d]));
  Tensor t = *this;
  t.data = at(start * strides[d]);
  t.shape[d] = stop - start;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  int d = wrap_dim(*this, dim);
  Tensor t = slice(d, index, index + 1);
  for (int i = d; i + 1 < ndim; ++i) {
    t.shape[i] = t.shape[i + 1];
    t.strides[i] = t.strides[i + 1];
  }
  --t.ndim;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> new_shape) const {
  if (!is_contiguous())
    throw Error(ErrorKind::shape, "tensor reshape: tensor " + describe(*this) + " is not contiguous");
  int64_t n = 1;
  for (int64_t s : new_shape) n *= s;
  if (n != numel())
    throw Error(ErrorKind::shape, "tensor reshape: cannot view " + shape_string(*this) + " as " +
                                      std::to_string(n) + " elements");
  return contiguous(data, dtype, device, new_shape.begin(), static_cast<int>(new_shape.size()));
}

std::string shape_string(const Tensor& t) {
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d) {
    if (d) s += ", ";
    s += std::to_string(t.shape[d]);
  }
  return s + "]";
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return std::string(dtype_name(t.dtype)) + shape_string(t) + " on " + device_name(t.device);
}

}  // namespace braid
