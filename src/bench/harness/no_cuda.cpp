// CPU-only builds: the CUDA parts of the bench suite exist but say why they cannot run.
#if !BRAID_WITH_CUDA

#include <string>

#include "bench/harness/ceilings.h"
#include "bench/suites/decode.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/model_setup.h"
#include "bench/suites/prefill.h"
#include "bench/harness/timer.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

constexpr const char* kNoCuda = "this build of braidinfer has no CUDA support";

[[noreturn]] void no_cuda(const char* what) {
  throw Error(ErrorKind::unsupported, std::string(what) + ": " + kNoCuda);
}

}  // namespace

Stats time_launches(const LaunchFn&, const TimingConfig&) { no_cuda("bench timer"); }

std::optional<DeviceInfo> query_device(int, std::string* reason) {
  if (reason) *reason = kNoCuda;
  return std::nullopt;
}

void fill_uniform(const Tensor&, uint64_t, float, float, Stream) { no_cuda("fill_uniform"); }
void copy_kernel(const void*, void*, size_t, int, Stream) { no_cuda("copy_kernel"); }
int copy_kernel_blocks() { no_cuda("copy_kernel"); }
void launch_empty_kernel(Stream) { no_cuda("empty_kernel"); }
void launch_minimal_rw_kernel(const int*, int*, Stream) { no_cuda("minimal_rw_kernel"); }

Report run_ceilings(const CeilingsOptions&) { no_cuda("bench ceilings"); }
void measure_copy_ceiling(bool, int, const std::function<void(ResultRow)>&) { no_cuda("bench copy ceiling"); }
void measure_gemm_ceiling(bool, int, const std::function<void(ResultRow)>&) { no_cuda("bench gemm ceiling"); }
Report run_decode(const DecodeOptions&) { no_cuda("bench decode"); }
Report run_prefill(const PrefillOptions&) { no_cuda("bench prefill"); }
std::unique_ptr<ModelUnderTest> setup_model(const ModelSetupOptions&) { no_cuda("bench model"); }
StepBatch make_step_batch(const ModelUnderTest&, int, int, int, bool) { no_cuda("bench model"); }
int32_t step_token_id(int, int, int) { no_cuda("bench model"); }
std::vector<float> cpu_reference_logits(const ModelUnderTest&, int, int, DType) {
  no_cuda("bench model");
}
Accuracy check_last_logits(const ModelUnderTest&, const Tensor&, int, int) { no_cuda("bench model"); }

}  // namespace braid::bench

#endif  // !BRAID_WITH_CUDA
