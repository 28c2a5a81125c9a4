// CPU-only builds: no NCCL group (tensor parallelism runs on the CPU through ThreadComm).
#if !BRAID_WITH_CUDA

#include "braid/error.h"
#include "parallel/nccl_comm.h"

namespace braid::parallel {

std::unique_ptr<Comm> make_nccl_comm(const std::vector<int>&) {
  throw Error(ErrorKind::unsupported,
              "tensor parallelism on CUDA: this build of braidinfer has no CUDA support");
}

bool cuda_module_loading_is_eager() { return false; }

}  // namespace braid::parallel

#endif
