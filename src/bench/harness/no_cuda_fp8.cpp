// CPU-only builds: the CUDA parts of the FP8 benchmarks exist but say why they cannot run.
#if !BRAID_WITH_CUDA

#include <string>

#include "bench/harness/ceilings.h"
#include "bench/harness/fp8_fill.h"
#include "bench/harness/cuda/fp8_gemm.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw Error(ErrorKind::unsupported,
              std::string(what) + ": this build of braidinfer has no CUDA support");
}

}  // namespace

void fp8_gemm(const Tensor&, const Tensor&, const Tensor&, Stream) { no_cuda("bench fp8_gemm"); }
std::string fp8_gemm_plan_description(const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("bench fp8_gemm");
}
void measure_fp8_gemm_ceiling(bool, int, const std::function<void(ResultRow)>&) {
  no_cuda("bench fp8 gemm ceiling");
}

namespace fp8_fill_cuda {
void fill_normal(const Tensor&, uint64_t, float, float, Stream) { no_cuda("bench fill_normal"); }
void fill_fp8_normal(const Tensor&, uint64_t, float, Stream) { no_cuda("bench fill_fp8_normal"); }
void quantize_blocks(const Tensor&, const BlockLayout&, uint64_t, float, const Tensor&,
                     const Tensor&, Stream) {
  no_cuda("bench fp8 block quantization");
}
}  // namespace fp8_fill_cuda

}  // namespace braid::bench

#endif  // !BRAID_WITH_CUDA
