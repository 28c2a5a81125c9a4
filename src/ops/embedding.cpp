// embedding: argument checks and dispatch.
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

// embedding's and embedding_rows's arguments; returns the device.
Device check_lookup(const char* op, const Tensor& ids, const Tensor& table, const Tensor& out) {
  check::defined(op, "ids", ids);
  check::defined(op, "table", table);
  check::defined(op, "out", out);
  check::dtype_in(op, "ids", ids, {DType::i32, DType::i64});
  check::ndim_eq(op, "ids", ids, 1);
  check::contiguous(op, "ids", ids);
  check::dtype_in(op, "table", table, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(op, "table", table, 2);
  check::rows(op, "table", table);
  check::dtype_eq(op, "out", out, table.dtype);
  check::shape_eq(op, "out", out, {ids.size(0), table.size(1)});
  check::rows(op, "out", out);
  return check::same_device(op, {{"ids", &ids}, {"table", &table}, {"out", &out}});
}

}  // namespace

void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, Stream stream) {
  Device dev = check_lookup("embedding", ids, table, out);
  if (out.numel() == 0) return;
  if (dev.is_cpu()) return cpu::embedding(ids, table, out);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::embedding(ids, table, out, stream);
#else
  (void)stream;
#endif
}

void embedding_rows(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out,
                    Stream stream) {
  const char* op = "embedding_rows";
  Device dev = check_lookup(op, ids, table, out);
  if (first_id < 0)
    check::fail(ErrorKind::invalid_argument, op, "first_id", ">= 0", std::to_string(first_id));
  if (out.numel() == 0) return;
  if (dev.is_cpu()) return cpu::embedding_rows(ids, table, first_id, out);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::embedding_rows(ids, table, first_id, out, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
