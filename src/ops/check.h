// Argument checks used at the entry of every op. Each failure throws braid::Error with the
// message "<op>: argument '<arg>': expected <...>, got <...>".
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "braid/error.h"
#include "braid/tensor.h"

namespace braid::check {

struct Named {
  const char* name;
  const Tensor* tensor;
};

void defined(const char* op, const char* arg, const Tensor& t);
void dtype_in(const char* op, const char* arg, const Tensor& t, std::initializer_list<DType> allowed);
void dtype_eq(const char* op, const char* arg, const Tensor& t, DType expected);
void ndim_eq(const char* op, const char* arg, const Tensor& t, int ndim);
void ndim_at_least(const char* op, const char* arg, const Tensor& t, int ndim);
// Each expected entry must match; -1 accepts any size.
void shape_eq(const char* op, const char* arg, const Tensor& t, std::initializer_list<int64_t> expected);
void dim_eq(const char* op, const char* arg, const Tensor& t, int dim, int64_t expected,
            const char* meaning);
void same_shape(const char* op, const char* arg, const Tensor& t, const Tensor& like);
void contiguous(const char* op, const char* arg, const Tensor& t);
void rows(const char* op, const char* arg, const Tensor& t);  // Tensor::rows_foldable
void dense_last_dim(const char* op, const char* arg, const Tensor& t);  // stride 1 (or size 1)
RowGrid row_grid(const char* op, const char* arg, const Tensor& t);  // Tensor::row_grid
// All defined tensors on one device; returns it. If the device is CUDA, the build must have CUDA.
Device same_device(const char* op, std::initializer_list<Named> tensors);
[[noreturn]] void fail(ErrorKind kind, const char* op, const char* arg, const std::string& expected,
                       const std::string& given);

}  // namespace braid::check
