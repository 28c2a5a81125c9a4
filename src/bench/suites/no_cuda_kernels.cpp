// CPU-only builds: `bench kernels` exists (its case list, --list, works) but cannot measure.
#if !BRAID_WITH_CUDA

#include <string>

#include "bench/suites/kernels.h"
#include "braid/error.h"

namespace braid::bench {

Report run_kernel_suite(const KernelSuiteOptions& options) {
  select_kernel_cases(kernel_cases(options.quick), options.only);  // --only errors first
  throw Error(ErrorKind::unsupported,
              "bench kernels: this build of braidinfer has no CUDA support");
}

}  // namespace braid::bench

#endif  // !BRAID_WITH_CUDA
