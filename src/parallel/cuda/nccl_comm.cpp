// parallel/nccl_comm.h: the NCCL communicator of a tensor-parallel group in one process.
#include "parallel/nccl_comm.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "braid/buffer.h"
#include "braid/error.h"
#include "core/cuda_check.h"

namespace braid::parallel {

namespace {

// The NCCL functions used, resolved from libnccl.so.2 on first use. Loaded, not linked: NCCL is
// ~200 MB that a program running one GPU never needs, and a host process (PyTorch) may have
// loaded its own copy already, which dlopen then shares.
struct NcclApi {
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      throw Error(ErrorKind::unsupported,
                  std::string("tensor parallelism on CUDA needs NCCL, and libnccl.so.2 did not load (") +
                      dlerror() + "): install NCCL or add its folder to LD_LIBRARY_PATH");
    NcclApi a;
    auto resolve = [lib](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn)
        throw Error(ErrorKind::unsupported, std::string("libnccl.so.2 has no ") + name + " (too old?)");
    };
    resolve(a.error_string, "ncclGetErrorString");
    resolve(a.comm_init_all, "ncclCommInitAll");
    resolve(a.comm_destroy, "ncclCommDestroy");
    resolve(a.comm_abort, "ncclCommAbort");
    resolve(a.all_reduce, "ncclAllReduce");
    resolve(a.all_gather, "ncclAllGather");
    resolve(a.group_start, "ncclGroupStart");
    resolve(a.group_end, "ncclGroupEnd");
    return a;
  }();
  return api;
}

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw Error(ErrorKind::internal, std::string("NCCL: ") + what + " failed: " + nccl().error_string(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default:
      throw Error(ErrorKind::invalid_argument,
                  "NcclComm: a collective takes f32, bf16 or f16 rows, not " + std::string(dtype_name(t)));
  }
}

class NcclComm : public Comm {
 public:
  explicit NcclComm(const std::vector<int>& devices)
      : devices_(devices), comms_(devices.size()) {
    check(nccl().comm_init_all(comms_.data(), static_cast<int>(devices.size()), devices.data()),
          "ncclCommInitAll");
  }
  ~NcclComm() override {
    if (!aborted_)
      for (ncclComm_t c : comms_) nccl().comm_destroy(c);
  }
  int size() const override { return static_cast<int>(comms_.size()); }

  void all_reduce_sum(int rank, const Tensor& x, Stream stream) override {
    check_rows(rank, x, "all_reduce_sum's x");
    check(nccl().all_reduce(x.data, x.data, static_cast<size_t>(x.numel()), nccl_type(x.dtype),
                            ncclSum, comms_[rank], static_cast<cudaStream_t>(stream.handle)),
          "all-reduce");
  }

  void all_gather_columns(int rank, const Tensor& x, const Tensor& out, Stream stream) override {
    check_rows(rank, x, "all_gather_columns's x");
    check_rows(rank, out, "all_gather_columns's out");
    const int64_t m = x.size(0), w = x.size(1);
    if (out.size(0) != m || out.size(1) != w * size() || out.dtype != x.dtype)
      throw Error(ErrorKind::invalid_argument, "NcclComm: all_gather_columns's out must be [m, size * w] of x's dtype");
    const auto s = static_cast<cudaStream_t>(stream.handle);
    // NCCL gathers whole buffers one after another, which for one row is [1, size * w] already;
    // more rows are gathered one by one (rank r's row i lands at out[i, r * w :]), in one NCCL
    // group: no staging buffer, so a captured graph holds no pointer that could move.
    const size_t row_bytes = static_cast<size_t>(out.size(1)) * dtype_size(x.dtype);
    check(nccl().group_start(), "ncclGroupStart");
    for (int64_t i = 0; i < m; ++i) {
      const ncclResult_t r = nccl().all_gather(
          static_cast<const char*>(x.data) + i * w * dtype_size(x.dtype),
          static_cast<char*>(out.data) + i * row_bytes, static_cast<size_t>(w), nccl_type(x.dtype),
          comms_[rank], s);
      if (r != ncclSuccess) {
        nccl().group_end();
        check(r, "all-gather");
      }
    }
    check(nccl().group_end(), "ncclGroupEnd");
  }

  void abort() override {
    std::lock_guard lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t c : comms_) nccl().comm_abort(c);
  }

 private:
  void check_rows(int rank, const Tensor& t, const char* what) const {
    if (rank < 0 || rank >= size())
      throw Error(ErrorKind::invalid_argument,
                  "NcclComm: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size()) + ")");
    if (aborted_)
      throw Error(ErrorKind::internal, "NcclComm: another rank of the group failed; the group is unusable");
    if (!t.device.is_cuda() || t.device.index != devices_[rank] || t.ndim != 2 || !t.is_contiguous())
      throw Error(ErrorKind::invalid_argument,
                  std::string("NcclComm: ") + what + " must be contiguous [m, n] rows on cuda:" +
                      std::to_string(devices_[rank]) + " (rank " + std::to_string(rank) + "'s GPU)");
  }

  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::mutex mutex_;
  std::atomic<bool> aborted_ = false;
};

}  // namespace

// Lazy module loading (CUDA's default) loads each kernel at its first launch, and a load may
// wait for the context to go idle. With one process driving every GPU of a group, a rank loading
// a kernel while its GPU runs a collective that waits for another rank can deadlock: seen on two
// H200s (one rank inside cublasLtMatmul -> cuKernelSetAttribute on a new GEMM shape, the other
// waiting on a lock the first held), gone with CUDA_MODULE_LOADING=EAGER
// (docs/perf/tensor_parallel.md).
bool cuda_module_loading_is_eager() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !fn)
    return false;
  CUmoduleLoadingMode mode{};
  if (reinterpret_cast<CUresult (*)(CUmoduleLoadingMode*)>(fn)(&mode) != CUDA_SUCCESS) return false;
  return mode == CU_MODULE_EAGER_LOADING;
}

std::unique_ptr<Comm> make_nccl_comm(const std::vector<int>& devices) {
  const int count = cuda_device_count();  // 0 without a driver
  const int n = static_cast<int>(devices.size());
  if (n < 1 || n > count)
    throw Error(ErrorKind::invalid_argument,
                "tensor parallelism over " + std::to_string(n) + " GPUs, but " + std::to_string(count) +
                    " are present");
  for (int i = 0; i < n; ++i) {
    if (devices[i] < 0 || devices[i] >= count)
      throw Error(ErrorKind::invalid_argument,
                  "tensor parallelism: no GPU cuda:" + std::to_string(devices[i]) + " (" +
                      std::to_string(count) + " present)");
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      if (devices[i] == devices[j])
        throw Error(ErrorKind::invalid_argument,
                    "tensor parallelism: cuda:" + std::to_string(devices[i]) + " named twice");
      int peer = 0;
      BRAID_CUDA_CHECK(cudaDeviceCanAccessPeer(&peer, devices[i], devices[j]));
      if (!peer)
        throw Error(ErrorKind::unsupported,
                    "tensor parallelism: cuda:" + std::to_string(devices[i]) + " has no peer access to cuda:" +
                        std::to_string(devices[j]) + " (the GPUs of a group must reach each other directly)");
    }
  }
  if (!cuda_module_loading_is_eager())
    throw Error(ErrorKind::unsupported,
                "tensor parallelism on CUDA needs eager module loading: set CUDA_MODULE_LOADING=EAGER "
                "in the environment before CUDA starts (braidinfer's CLI does so for "
                "--tensor-parallel). With lazy loading, a rank that loads a kernel while its GPU runs "
                "a collective waiting for another rank can deadlock the process");
  // NVLink multicast (NVLS) stays off: it is not to be used on the shared hosts, whatever the
  // caller's environment says.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  return std::make_unique<NcclComm>(devices);
}

}  // namespace braid::parallel
