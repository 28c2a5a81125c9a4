#include "bench/harness/cuda_only.h"

#include "braid/error.h"

namespace braid::bench {

void needs_cuda(const std::string& what) {
  throw Error(ErrorKind::unsupported, what + ": this build of braidinfer has no CUDA support");
}

}  // namespace braid::bench
