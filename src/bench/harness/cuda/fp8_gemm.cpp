// fp8 e4m3 GEMM through cuBLASLt (see fp8_gemm.h). Row-major out[m, n] is column-major
// out^T[n, m], so, as ops::gemm does it:
//   C(n x m) = op(A) * B  with A = w seen column-major as k x n (lda = w's row stride), op = T;
//                              B = a seen column-major as k x m (ldb = a's row stride), op = N;
//                              C = D = out (ldc = out's row stride), bf16.
// Both operands are then K-major: cuBLASLt's "TN", which Hopper's fp8 kernels require.
// Plans (descriptors + the heuristic's choice) are cached per shape key, as in ops/cuda/gemm.
#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "bench/harness/cuda/fp8_gemm.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "core/cuda_check.h"
#include "core/device_guard.h"
#include "ops/cuda/gemm/lt_plan.h"

namespace braid::bench {

namespace {

constexpr const char* kOp = "bench fp8_gemm";
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct Key {
  int device;
  int64_t m, n, k, lda, ldb, ldc;
  auto operator<=>(const Key&) const = default;
};

std::string describe_key(const Key& key) {
  return fmt::format("m={} n={} k={} (row strides a {}, w {}, out {}) on cuda:{}", key.m, key.n,
                     key.k, key.ldb, key.lda, key.ldc, key.device);
}

using Plan = cuda::LtPlan;
using DeviceState = cuda::LtDeviceState;

// Never destroyed: at static teardown the CUDA context may already be gone.
struct Cache {
  std::mutex mutex;
  std::map<int, DeviceState> devices;
  std::map<Key, std::unique_ptr<Plan>> plans;
};

Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

void check_operand(const char* arg, const Tensor& t, DType dtype, int64_t align_elems) {
  if (!t.defined() || t.data == nullptr)
    throw_arg_error(ErrorKind::invalid_argument, kOp, arg, "a tensor", "an undefined tensor");
  if (t.dtype != dtype || t.ndim != 2 || !t.device.is_cuda() || !t.rows_foldable())
    throw_arg_error(ErrorKind::invalid_argument, kOp, arg,
                    fmt::format("a 2-d {} CUDA tensor of rows", dtype_name(dtype)), describe(t));
  const bool aligned = (reinterpret_cast<uintptr_t>(t.data) & 15u) == 0;
  if (!aligned || (t.shape[0] > 1 && t.row_stride() % align_elems != 0))
    throw_arg_error(ErrorKind::invalid_argument, kOp, arg,
                    fmt::format("16-byte aligned rows, row stride a multiple of {}", align_elems),
                    describe(t));
}

Key make_key(const Tensor& a, const Tensor& w, const Tensor& out) {
  check_operand("a", a, DType::f8e4m3, 16);
  check_operand("w", w, DType::f8e4m3, 16);
  check_operand("out", out, DType::bf16, 8);
  const int64_t m = a.shape[0], k = a.shape[1], n = w.shape[0];
  if (w.shape[1] != k || out.shape[0] != m || out.shape[1] != n)
    throw_arg_error(ErrorKind::invalid_argument, kOp, "w/out",
                    fmt::format("w [n, {}] and out [{}, n]", k, m),
                    fmt::format("w {} and out {}", describe(w), describe(out)));
  if (k % 16 != 0 || m < 1 || n < 1)
    throw_arg_error(ErrorKind::invalid_argument, kOp, "a", "k a multiple of 16, m and n >= 1",
                    describe(a));
  if (a.device != w.device || a.device != out.device)
    throw_arg_error(ErrorKind::invalid_argument, kOp, "a/w/out", "one CUDA device",
                    "tensors on different devices");
  // With one row the row stride is never used; cuBLASLt still wants ld >= the rows of a column.
  return {out.device.index, m, n, k,
          n > 1 ? w.row_stride() : k, m > 1 ? a.row_stride() : k, m > 1 ? out.row_stride() : n};
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

std::unique_ptr<Plan> make_plan(const Key& key, cublasLtHandle_t handle) {
  auto plan = std::make_unique<Plan>();
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const auto m = static_cast<uint64_t>(key.m), n = static_cast<uint64_t>(key.n),
             k = static_cast<uint64_t>(key.k);
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->w_layout, CUDA_R_8F_E4M3, k, n, key.lda));
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a_layout, CUDA_R_8F_E4M3, k, m, key.ldb));
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->out_layout, CUDA_R_16BF, n, m, key.ldc));

  if (!cuda::choose_algorithm(handle, *plan, kWorkspaceBytes))
    throw Error(ErrorKind::unsupported,
                "bench fp8_gemm: cuBLASLt has no fp8 e4m3 algorithm for " + describe_key(key));
  return plan;
}

// Caller holds the cache mutex and has made key.device current.
std::pair<const DeviceState*, Plan*> state_and_plan(Cache& c, const Key& key) {
  DeviceState& s = c.devices[key.device];
  if (!s.handle) {
    if (s.workspace.size() == 0) s.workspace = Buffer(kWorkspaceBytes, Device::cuda(key.device));
    BRAID_CUBLAS_CHECK(cublasLtCreate(&s.handle));
  }
  auto it = c.plans.find(key);
  if (it == c.plans.end()) it = c.plans.emplace(key, make_plan(key, s.handle)).first;
  return {&s, it->second.get()};
}

template <typename T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  BRAID_CUBLAS_CHECK(
      cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written));
  return value;
}

}  // namespace

void fp8_gemm(const Tensor& a, const Tensor& w, const Tensor& out, Stream stream) {
  const Key key = make_key(a, w, out);
  DeviceGuard guard(out.device);
  Cache& c = cache();
  std::lock_guard lock(c.mutex);  // the workspace is shared: one fp8_gemm at a time per device
  const auto [dev, plan] = state_and_plan(c, key);
  const float alpha = 1.0f, beta = 0.0f;  // beta = 0: out is never read (it may hold NaN)
  BRAID_CUBLAS_CHECK(cublasLtMatmul(dev->handle, plan->desc, &alpha, w.data, plan->w_layout,
                                    a.data, plan->a_layout, &beta, out.data, plan->out_layout,
                                    out.data, plan->out_layout, &plan->choice.algo,
                                    dev->workspace.data(), dev->workspace.size(),
                                    static_cast<cudaStream_t>(stream.handle)));
}

std::string fp8_gemm_plan_description(const Tensor& a, const Tensor& w, const Tensor& out) {
  const Key key = make_key(a, w, out);
  DeviceGuard guard(out.device);
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const Plan& plan = *state_and_plan(c, key).second;
  const cublasLtMatmulAlgo_t& algo = plan.choice.algo;
  return fmt::format("algo {} tile {} stages {} split-k {} cluster {} workspace {} B",
                     algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                     algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                     algo_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                     plan.choice.workspaceSize);
}

}  // namespace braid::bench
