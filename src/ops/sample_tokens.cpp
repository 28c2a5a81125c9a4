// sample_tokens: argument checks (parameter values on the CPU only), the workspace size, and
// dispatch (contract in ops.h).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/sample_tokens_math.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

constexpr const char* kOp = "sample_tokens";

std::string str(int64_t v) { return std::to_string(v); }

// A per-row parameter: [rows] of one dtype, contiguous.
void check_param(const char* arg, const Tensor& t, DType dtype, int64_t rows) {
  check::defined(kOp, arg, t);
  check::dtype_eq(kOp, arg, t, dtype);
  check::shape_eq(kOp, arg, t, {rows});
  check::contiguous(kOp, arg, t);
}

// CPU only: every row's values in the documented ranges; the message names the first bad row.
template <typename T, typename Ok>
void check_values(const char* arg, const Tensor& t, const char* expected, Ok ok) {
  const T* v = t.ptr<T>();
  for (int64_t r = 0; r < t.numel(); ++r)
    if (!ok(v[r])) {
      const std::string value = std::is_floating_point_v<T> ? std::to_string(static_cast<double>(v[r]))
                                                            : std::to_string(static_cast<int64_t>(v[r]));
      check::fail(ErrorKind::invalid_argument, kOp, arg, expected,
                  std::string(arg) + "[" + str(r) + "] = " + value);
    }
}

}  // namespace

int64_t sample_tokens_workspace_bytes(int64_t rows, int64_t vocab) {
  const char* op = "sample_tokens_workspace_bytes";
  if (rows < 0) check::fail(ErrorKind::invalid_argument, op, "rows", "rows >= 0", str(rows));
  if (vocab < 1 || vocab > sampling::kMaxVocab)
    check::fail(ErrorKind::invalid_argument, op, "vocab",
                "between 1 and " + str(sampling::kMaxVocab), str(vocab));
  return 0;  // one block per row: its state lives in shared memory
}

void sample_tokens(const Tensor& logits, const Tensor& temperature, const Tensor& top_k,
                   const Tensor& top_p, const Tensor& min_p, const Tensor& seeds,
                   const Tensor& steps, const Tensor& workspace, const Tensor& tokens,
                   Stream stream) {
  check::defined(kOp, "logits", logits);
  check::dtype_eq(kOp, "logits", logits, DType::f32);
  check::ndim_eq(kOp, "logits", logits, 2);
  check::rows(kOp, "logits", logits);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (vocab < 1 || vocab > sampling::kMaxVocab)
    check::fail(ErrorKind::shape, kOp, "logits",
                "a vocabulary (last dimension) of 1 to " + str(sampling::kMaxVocab),
                "shape " + shape_string(logits));
  if (rows > INT32_MAX)
    check::fail(ErrorKind::shape, kOp, "logits", "fewer than 2^31 rows",
                "shape " + shape_string(logits));
  check_param("temperature", temperature, DType::f32, rows);
  check_param("top_k", top_k, DType::i32, rows);
  check_param("top_p", top_p, DType::f32, rows);
  check_param("min_p", min_p, DType::f32, rows);
  check_param("seeds", seeds, DType::i64, rows);
  check_param("steps", steps, DType::i64, rows);
  check_param("tokens", tokens, DType::i32, rows);
  const int64_t need = sample_tokens_workspace_bytes(rows, vocab);
  if (workspace.defined() || need > 0) {
    check::defined(kOp, "workspace", workspace);
    check::dtype_eq(kOp, "workspace", workspace, DType::u8);
    check::contiguous(kOp, "workspace", workspace);
    if (workspace.numel() < need)
      check::fail(ErrorKind::shape, kOp, "workspace",
                  "at least sample_tokens_workspace_bytes(" + str(rows) + ", " + str(vocab) +
                      ") = " + str(need) + " bytes",
                  shape_string(workspace));
  }
  Device dev = check::same_device(kOp, {{"logits", &logits},
                                        {"temperature", &temperature},
                                        {"top_k", &top_k},
                                        {"top_p", &top_p},
                                        {"min_p", &min_p},
                                        {"seeds", &seeds},
                                        {"steps", &steps},
                                        {"workspace", &workspace},
                                        {"tokens", &tokens}});
  if (dev.is_cpu()) {
    check_values<float>("temperature", temperature, "values >= 0 and finite",
                        [](float v) { return v >= 0.0f && std::isfinite(v); });
    check_values<int32_t>("top_k", top_k, "values >= -1 (0 or -1: no limit)",
                          [](int32_t v) { return v >= -1; });
    check_values<float>("top_p", top_p, "values in (0, 1]",
                        [](float v) { return v > 0.0f && v <= 1.0f; });
    check_values<float>("min_p", min_p, "values in [0, 1]",
                        [](float v) { return v >= 0.0f && v <= 1.0f; });
    if (rows == 0) return;
    return cpu::sample_tokens(logits, temperature, top_k, top_p, min_p, seeds, steps, tokens);
  }
#if BRAID_WITH_CUDA
  if (rows == 0) return;
  DeviceGuard guard(dev);
  cuda::sample_tokens(logits, temperature, top_k, top_p, min_p, seeds, steps, workspace, tokens,
                      stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
