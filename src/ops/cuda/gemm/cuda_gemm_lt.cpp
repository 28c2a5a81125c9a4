// gemm through cuBLASLt: out[m, n] = a[m, k] @ w[n, k]^T (+ bias[n]), fp32 accumulation.
//
// cuBLASLt is column-major. Row-major out[m, n] is column-major out^T[n, m], so we compute
//   C(n x m) = op(A) * B   with A = w, seen column-major as k x n (lda = k), op = transpose;
//                               B = a, seen column-major as k x m (ldb = a's row stride);
//                               C = D = out (ldc = out's row stride).
// The bias epilogue adds bias[i] to row i of C, i.e. to column i of out.
//
// The heuristic's choice depends on the shape, dtypes, leading dimensions and pointer alignment,
// so it is made once per such key and cached with its descriptors (a "plan"). Later calls with the
// same key only enqueue cublasLtMatmul into a workspace allocated once per device: no allocation,
// no synchronisation, so the op is graph-capturable once a shape has been seen.
#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "braid/buffer.h"
#include "core/cuda_check.h"
#include "core/device_guard.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm/gemm_lt.h"
#include "ops/cuda/gemm/lt_plan.h"
#include "ops/cuda/gemv/gemv.h"
#include "ops/cuda/gemv/gemv_fused.h"

namespace braid::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;  // checked by ops::gemm: f32, f16 or bf16 only
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// What the heuristic needs to know about one call. Alignment is recorded as "16-byte aligned or
// not"; a pointer that is not is assumed only element-aligned.
struct PlanKey {
  int device;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  DType in, out, bias;  // bias: meaningful only with has_bias
  bool has_bias;
  bool a_aligned, w_aligned, out_aligned, bias_aligned;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey make_key(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) {
  const int64_t m = a.size(0), k = a.size(1), n = w.size(0);
  PlanKey key{};
  key.device = out.device.index;
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = k;
  // With one row the row stride is never used; cuBLASLt still wants ld >= rows.
  key.ldb = m > 1 ? a.row_stride() : k;
  key.ldc = m > 1 ? out.row_stride() : n;
  key.in = a.dtype;
  key.out = out.dtype;
  key.has_bias = bias.data != nullptr;
  key.bias = key.has_bias ? bias.dtype : key.out;
  key.a_aligned = aligned16(a.data);
  key.w_aligned = aligned16(w.data);
  key.out_aligned = aligned16(out.data);
  key.bias_aligned = key.has_bias && aligned16(bias.data);
  return key;
}

uint32_t alignment_bytes(bool aligned, DType t) {
  return aligned ? 16u : static_cast<uint32_t>(dtype_size(t));
}

std::string describe_key(const PlanKey& key) {
  auto yes_no = [](bool b) { return b ? "yes" : "no"; };
  return fmt::format(
      "m={} n={} k={}, a {} with row stride {}, out {} with row stride {}, bias {}, 16-byte "
      "aligned a/w/out/bias: {}/{}/{}/{}, on cuda:{}",
      key.m, key.n, key.k, dtype_name(key.in), key.ldb, dtype_name(key.out), key.ldc,
      key.has_bias ? std::string(dtype_name(key.bias)) : std::string("none"), yes_no(key.a_aligned),
      yes_no(key.w_aligned), yes_no(key.out_aligned), key.has_bias ? yes_no(key.bias_aligned) : "-",
      key.device);
}

using Plan = cuda::LtPlan;
using DeviceState = cuda::LtDeviceState;

// Handles, workspaces and plans for every device, behind one mutex. Never destroyed: at static
// teardown the CUDA context may already be gone.
struct Cache {
  std::mutex mutex;
  std::map<int, DeviceState> devices;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}


// Caller holds the cache mutex and has made `device` current.
DeviceState& device_state(Cache& c, int device) {
  DeviceState& s = c.devices[device];
  if (!s.handle) {
    // Workspace first: if it fails, no handle is left half-registered.
    if (s.workspace.size() == 0) s.workspace = Buffer(kWorkspaceBytes, Device::cuda(device));
    BRAID_CUBLAS_CHECK(cublasLtCreate(&s.handle));
  }
  return s;
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const T& value) {
  BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
};

std::unique_ptr<Plan> make_plan(const PlanKey& key, cublasLtHandle_t handle) {
  auto plan = std::make_unique<Plan>();
  BRAID_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (key.has_bias) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(key.bias));
    // The heuristic reads the bias pointer's value (never the data) to learn its alignment, and
    // the plan is shared by every bias of this alignment class. So it is shown an address with
    // exactly the alignment the key promises; each call then sets its real pointer.
    const uintptr_t address = (uintptr_t{1} << 20) + alignment_bytes(key.bias_aligned, key.bias);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, reinterpret_cast<const void*>(address));
  }
  const auto m = static_cast<uint64_t>(key.m), n = static_cast<uint64_t>(key.n),
             k = static_cast<uint64_t>(key.k);
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->w_layout, cuda_type(key.in), k, n, key.lda));
  BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a_layout, cuda_type(key.in), k, m, key.ldb));
  BRAID_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan->out_layout, cuda_type(key.out), n, m, key.ldc));

  // The alignments default to 256 bytes; stating the real ones lets the heuristic return only
  // algorithms that can read these pointers.
  Preference p;
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kWorkspaceBytes);
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
           alignment_bytes(key.w_aligned, key.in));
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
           alignment_bytes(key.a_aligned, key.in));
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
           alignment_bytes(key.out_aligned, key.out));
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
           alignment_bytes(key.out_aligned, key.out));

  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle, plan->desc, plan->w_layout, plan->a_layout, plan->out_layout, plan->out_layout,
      p.pref, 1, &plan->choice, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0) ||
      (st == CUBLAS_STATUS_SUCCESS && plan->choice.state != CUBLAS_STATUS_SUCCESS))
    throw Error(ErrorKind::unsupported, "gemm: cuBLASLt has no algorithm for " + describe_key(key));
  BRAID_CUBLAS_CHECK(st);
  return plan;
}


// Caller holds the cache mutex and has made key.device current.
Plan& find_or_make_plan(Cache& c, const DeviceState& dev, const PlanKey& key) {
  auto it = c.plans.find(key);
  if (it == c.plans.end()) it = c.plans.emplace(key, make_plan(key, dev.handle)).first;
  return *it->second;
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

// Skinny products (decode: m <= 16) go to the GEMV kernel, which streams w faster than
// cuBLASLt's kernels do; everything else to cuBLASLt.
void gemm(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out, Stream stream,
          const Tensor& w_scale) {
  if (w.dtype == DType::f8e4m3) {
    // Up to 16 rows: the GEMV streams the fp8 weights (on activations quantized as cuBLASLt's
    // are, or exact: fp8_gemv_activations); more: cuBLASLt's scaled fp8 GEMM on fp8-quantized
    // activations.
    if (a.size(0) <= 16 && gemv_fused_applicable(a, a.size(1), w))
      return gemv_plain(a, w, w_scale, bias, out, stream);
    return gemm_fp8(a, w, w_scale, bias, out, stream);
  }
  if (gemv_applicable(a, w, bias, out))
    gemv(a, w, bias, out, stream);
  else
    gemm_cublaslt(a, w, bias, out, stream);
}

void gemm_cublaslt(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out,
                   Stream stream) {
  const PlanKey key = make_key(a, w, bias, out);
  DeviceGuard guard(Device::cuda(key.device));
  Cache& c = cache();
  DeviceState* found_dev = nullptr;
  Plan* found_plan = nullptr;
  {
    std::lock_guard lock(c.mutex);  // the maps (their elements never move)
    found_dev = &device_state(c, key.device);
    found_plan = &find_or_make_plan(c, *found_dev, key);
  }
  DeviceState& dev = *found_dev;
  Plan& plan = *found_plan;
  // The launch under the device's lock: the bias pointer lives in the plan's descriptor and is
  // set per call, and enqueueing takes microseconds. The workspace is shared by every stream of
  // the device, so gemms on one device must not run concurrently on different streams.
  std::lock_guard launch(dev.launch_mutex);
  if (key.has_bias)
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data));
  const float alpha = 1.0f, beta = 0.0f;  // beta = 0: out is never read (it may hold NaN)
  auto s = static_cast<cudaStream_t>(stream.handle);
  BRAID_CUBLAS_CHECK(cublasLtMatmul(dev.handle, plan.desc, &alpha, w.data, plan.w_layout, a.data,
                                    plan.a_layout, &beta, out.data, plan.out_layout, out.data,
                                    plan.out_layout, &plan.choice.algo, dev.workspace.data(),
                                    dev.workspace.size(), s));
}

size_t gemm_plan_count() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return c.plans.size();
}

void gemm_clear_plans() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.plans.clear();
}

std::string gemm_plan_description(const Tensor& a, const Tensor& w, const Tensor& bias,
                                  const Tensor& out) {
  const PlanKey key = make_key(a, w, bias, out);
  DeviceGuard guard(Device::cuda(key.device));
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const Plan& plan = find_or_make_plan(c, device_state(c, key.device), key);
  const cublasLtMatmulAlgo_t& algo = plan.choice.algo;
  return fmt::format(
      "algo {} tile {} stages {} split-k {} reduction {} cluster {} workspace {} B waves {:.2f}",
                     algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                     algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                     algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                     algo_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                     plan.choice.workspaceSize, plan.choice.wavesCount);
}

}  // namespace braid::cuda
