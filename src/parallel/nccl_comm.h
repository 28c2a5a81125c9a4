// The CUDA communicator of a tensor-parallel group: NCCL, one communicator per GPU, all created
// by one process (one thread per rank steps them: docs/architecture.md).
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm.h"

namespace braid::parallel {

// A group over the CUDA devices `devices` (rank r on devices[r]). Checked before anything is
// loaded: the devices exist and are distinct, and every pair has peer access (the collectives of
// a decode step are a few KB each: through host memory they would cost more than the step).
// Sets NCCL_NVLS_ENABLE=0 for the process first (NVLink multicast stays off on shared hosts).
// NCCL is loaded at run time (libnccl.so.2), so builds and programs that never split a model do
// not need it. Throws ErrorKind::unsupported in a build without CUDA or without a loadable NCCL,
// ErrorKind::invalid_argument for devices that do not qualify.
// Also refused (ErrorKind::unsupported) unless CUDA loads modules eagerly
// (CUDA_MODULE_LOADING=EAGER set before CUDA starts): with lazy loading, a rank that loads a
// kernel while its GPU runs a collective waiting for another rank can deadlock the process.
std::unique_ptr<Comm> make_nccl_comm(const std::vector<int>& devices);

// Whether this process's CUDA loads every module when it starts (false without CUDA).
bool cuda_module_loading_is_eager();

}  // namespace braid::parallel
