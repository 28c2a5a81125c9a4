#include "ops/check.h"

#include <string>

namespace braid::check {

void fail(ErrorKind kind, const char* op, const char* arg, const std::string& expected,
          const std::string& given) {
  throw_arg_error(kind, op, arg, expected, given);
}

static std::string dims_string(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  bool first = true;
  for (int64_t d : dims) {
    if (!first) s += ", ";
    s += d < 0 ? std::string("*") : std::to_string(d);
    first = false;
  }
  return s + "]";
}

void defined(const char* op, const char* arg, const Tensor& t) {
  if (t.data == nullptr && t.numel() != 0)
    fail(ErrorKind::invalid_argument, op, arg, "a tensor", "a null data pointer");
  if (t.ndim == 0 && t.data == nullptr)
    fail(ErrorKind::invalid_argument, op, arg, "a tensor", "an undefined tensor");
}

void dtype_in(const char* op, const char* arg, const Tensor& t, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype == d) return;
  std::string names;
  for (DType d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  fail(ErrorKind::dtype, op, arg, "dtype " + names, std::string(dtype_name(t.dtype)));
}

void dtype_eq(const char* op, const char* arg, const Tensor& t, DType expected) {
  if (t.dtype != expected)
    fail(ErrorKind::dtype, op, arg, "dtype " + std::string(dtype_name(expected)),
         std::string(dtype_name(t.dtype)));
}

void ndim_eq(const char* op, const char* arg, const Tensor& t, int ndim) {
  if (t.ndim != ndim)
    fail(ErrorKind::shape, op, arg, std::to_string(ndim) + " dimensions",
         std::to_string(t.ndim) + " (shape " + shape_string(t) + ")");
}

void ndim_at_least(const char* op, const char* arg, const Tensor& t, int ndim) {
  if (t.ndim < ndim)
    fail(ErrorKind::shape, op, arg, "at least " + std::to_string(ndim) + " dimensions",
         std::to_string(t.ndim) + " (shape " + shape_string(t) + ")");
}

void shape_eq(const char* op, const char* arg, const Tensor& t, std::initializer_list<int64_t> expected) {
  bool ok = t.ndim == static_cast<int>(expected.size());
  int d = 0;
  for (int64_t e : expected) {
    if (ok && e >= 0 && t.shape[d] != e) ok = false;
    ++d;
  }
  if (!ok) fail(ErrorKind::shape, op, arg, "shape " + dims_string(expected), shape_string(t));
}

void dim_eq(const char* op, const char* arg, const Tensor& t, int dim, int64_t expected,
            const char* meaning) {
  if (t.size(dim) != expected)
    fail(ErrorKind::shape, op, arg,
         "size " + std::to_string(expected) + " in dimension " + std::to_string(dim) + " (" +
             meaning + ")",
         shape_string(t));
}

void same_shape(const char* op, const char* arg, const Tensor& t, const Tensor& like) {
  bool ok = t.ndim == like.ndim;
  for (int d = 0; ok && d < t.ndim; ++d) ok = t.shape[d] == like.shape[d];
  if (!ok) fail(ErrorKind::shape, op, arg, "shape " + shape_string(like), shape_string(t));
}

void contiguous(const char* op, const char* arg, const Tensor& t) {
  if (!t.is_contiguous())
    fail(ErrorKind::shape, op, arg, "a contiguous tensor", "a strided view of shape " + shape_string(t));
}

void rows(const char* op, const char* arg, const Tensor& t) {
  if (!t.rows_foldable())
    fail(ErrorKind::shape, op, arg,
         "a dense last dimension with leading dimensions that fold into rows",
         "shape " + shape_string(t) + " with incompatible strides");
}

void dense_last_dim(const char* op, const char* arg, const Tensor& t) {
  if (t.ndim > 0 && t.strides[t.ndim - 1] != 1 && t.shape[t.ndim - 1] > 1)
    fail(ErrorKind::shape, op, arg, "a dense last dimension (stride 1)",
         "stride " + std::to_string(t.strides[t.ndim - 1]));
}

RowGrid row_grid(const char* op, const char* arg, const Tensor& t) {
  RowGrid g;
  if (!t.row_grid(&g))
    fail(ErrorKind::shape, op, arg,
         "a dense last dimension with leading dimensions that fold into at most two row strides",
         "shape " + shape_string(t) + " with incompatible strides");
  return g;
}

Device same_device(const char* op, std::initializer_list<Named> tensors) {
  const Named* first = nullptr;
  for (const Named& n : tensors) {
    if (n.tensor->ndim == 0 && n.tensor->data == nullptr) continue;  // undefined optional
    if (!first) {
      first = &n;
      continue;
    }
    if (!(n.tensor->device == first->tensor->device))
      fail(ErrorKind::device, op, n.name,
           "device " + device_name(first->tensor->device) + " (that of '" + first->name + "')",
           device_name(n.tensor->device));
  }
  Device d = first ? first->tensor->device : Device::cpu();
#if !BRAID_WITH_CUDA
  if (d.is_cuda())
    throw Error(ErrorKind::unsupported,
                std::string(op) + ": tensors are on " + device_name(d) +
                    " but this build of braidinfer has no CUDA support");
#endif
  return d;
}

}  // namespace braid::check
