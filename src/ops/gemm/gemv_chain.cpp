// gemv_chain (ops.h): the stages' checks (each its op's), then one kernel on CUDA where it takes
// the stages, else the ops in order.
#include <string>
#include <vector>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/gemm/fused_gemm_check.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

ChainStage ChainStage::rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps,
                                     const Weight& w, const Tensor& bias, const Tensor& out,
                                     const Tensor& normed) {
  ChainStage s;
  s.op = Op::rms_norm_gemm;
  s.x = x;
  s.norm_weight = norm_weight;
  s.eps = eps;
  s.w = w;
  s.bias = bias;
  s.out = out;
  s.scratch = normed;
  return s;
}

ChainStage ChainStage::gemm_add(const Tensor& a, const Weight& w, const Tensor& bias,
                                const Tensor& residual, const Tensor& scratch) {
  ChainStage s;
  s.op = Op::gemm_add;
  s.x = a;
  s.w = w;
  s.bias = bias;
  s.out = residual;
  s.scratch = scratch;
  return s;
}

ChainStage ChainStage::swiglu_gemm_add(const Tensor& gate_up, const Weight& w,
                                       const Tensor& residual, const Tensor& act,
                                       const Tensor& scratch) {
  ChainStage s;
  s.op = Op::swiglu_gemm_add;
  s.x = gate_up;
  s.w = w;
  s.out = residual;
  s.scratch = scratch;
  s.act = act;
  return s;
}

namespace {

// The stage as its op (which dispatches to its own kernels or the CPU reference).
void run_stage(const ChainStage& s, Stream stream) {
  switch (s.op) {
    case ChainStage::Op::rms_norm_gemm:
      return ops::rms_norm_gemm(s.x, s.norm_weight, s.eps, s.w, s.bias, s.out, s.scratch, stream);
    case ChainStage::Op::gemm_add:
      return ops::gemm_add(s.x, s.w, s.bias, s.out, s.scratch, stream);
    case ChainStage::Op::swiglu_gemm_add:
      return ops::swiglu_gemm_add(s.x, s.w, s.out, s.act, s.scratch, stream);
  }
}

// The stage's op's checks, errors named "gemv_chain stage i (op)"; its device.
Device check_stage(const ChainStage& s, size_t i) {
  static const char* const names[] = {"rms_norm_gemm", "gemm_add", "swiglu_gemm_add"};
  const int op = static_cast<int>(s.op);
  if (op < 0 || op > 2)
    check::fail(ErrorKind::invalid_argument, "gemv_chain", "stages",
                "each stage's op one of rms_norm_gemm, gemm_add, swiglu_gemm_add",
                "op " + std::to_string(op) + " at stage " + std::to_string(i));
  const std::string name = "gemv_chain stage " + std::to_string(i) + " (" + names[op] + ")";
  switch (s.op) {
    case ChainStage::Op::rms_norm_gemm:
      return fused_check::rms_norm_gemm(name.c_str(), s.x, s.norm_weight, s.eps, s.w, s.bias,
                                        s.out, s.scratch);
    case ChainStage::Op::gemm_add:
      return fused_check::gemm_add(name.c_str(), s.x, s.w, s.bias, s.out, s.scratch);
    case ChainStage::Op::swiglu_gemm_add:
      break;
  }
  return fused_check::swiglu_gemm_add(name.c_str(), s.x, s.w, s.out, s.act, s.scratch);
}

}  // namespace

void gemv_chain(std::span<const ChainStage> stages, const Tensor& counter, Stream stream) {
  const char* op = "gemv_chain";
  if (stages.empty() || stages.size() > static_cast<size_t>(kMaxChainStages))
    check::fail(ErrorKind::invalid_argument, op, "stages",
                "1 to " + std::to_string(kMaxChainStages) + " stages",
                std::to_string(stages.size()) + " stages");
  const Device dev = check_stage(stages[0], 0);
  for (size_t i = 1; i < stages.size(); ++i) {
    const Device d = check_stage(stages[i], i);
    if (d != dev)
      check::fail(ErrorKind::device, op, "stages", "every stage on one device",
                  "stage 0 on " + device_name(dev) + ", stage " + std::to_string(i) + " on " + device_name(d));
  }
  check::defined(op, "counter", counter);
  check::dtype_eq(op, "counter", counter, DType::i32);
  check::shape_eq(op, "counter", counter, {1});
  if (counter.device != dev)
    check::fail(ErrorKind::device, op, "counter", "on the stages' device " + device_name(dev),
                device_name(counter.device));
#if BRAID_WITH_CUDA
  if (dev.is_cuda()) {
    DeviceGuard guard(dev);
    if (cuda::gemv_chain_takes(stages)) return cuda::gemv_chain(stages, counter, stream);
  }
#endif
  for (const ChainStage& s : stages) run_stage(s, stream);
}

}  // namespace braid::ops
