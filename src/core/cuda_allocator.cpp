// CUDA caching allocator on plain cudaMalloc. Requests are rounded up to a size class (512 B
// granularity below 1 MiB, 2 MiB above); freed blocks wait in a per-(device, class) free list.
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "braid/buffer.h"
#include "core/cuda_check.h"
#include "core/device_guard.h"

namespace braid {

namespace {

struct Block {
  size_t size;
  int device;
};

struct Pool {
  std::mutex mutex;
  std::unordered_map<void*, Block> live;
  std::map<std::pair<int, size_t>, std::vector<void*>> free_lists;
  size_t in_use = 0;
  size_t cached = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: blocks may be freed during static teardown
  return *p;
}

size_t size_class(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = 2u << 20, kSplit = 1u << 20;
  size_t g = bytes < kSplit ? kSmall : kLarge;
  return (bytes + g - 1) / g * g;
}


}  // namespace

namespace cuda_allocator {

void* allocate(size_t bytes, int device) {
  const size_t cls = size_class(bytes);
  Pool& p = pool();
  {
    std::lock_guard lock(p.mutex);
    auto it = p.free_lists.find({device, cls});
    if (it != p.free_lists.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      p.live[ptr] = {cls, device};
      p.in_use += cls;
      p.cached -= cls;
      return ptr;
    }
  }
  DeviceGuard guard(Device::cuda(device));
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, cls);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    empty_cache();  // give cached blocks back and try once more
    err = cudaMalloc(&ptr, cls);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(err == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::cuda,
                "cuda_allocator: cudaMalloc of " + std::to_string(cls) + " bytes on cuda:" +
                    std::to_string(device) + " failed: " + cudaGetErrorString(err));
  }
  std::lock_guard lock(p.mutex);
  p.live[ptr] = {cls, device};
  p.in_use += cls;
  return ptr;
}

void deallocate(void* ptr) {
  if (!ptr) return;
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  auto it = p.live.find(ptr);
  if (it == p.live.end()) return;  // not ours: ignore rather than corrupt the pool
  Block b = it->second;
  p.live.erase(it);
  p.in_use -= b.size;
  p.cached += b.size;
  p.free_lists[{b.device, b.size}].push_back(ptr);
}

void empty_cache() {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  for (auto& [key, ptrs] : p.free_lists) {
    DeviceGuard guard(Device::cuda(key.first));
    for (void* ptr : ptrs) cudaFree(ptr);
    p.cached -= key.second * ptrs.size();
    ptrs.clear();
  }
}

size_t bytes_in_use() {
  std::lock_guard lock(pool().mutex);
  return pool().in_use;
}

size_t bytes_cached() {
  std::lock_guard lock(pool().mutex);
  return pool().cached;
}

void memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  DeviceGuard guard(Device::cuda(device));
  BRAID_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

}  // namespace cuda_allocator

StreamOwner::StreamOwner() {
  cudaStream_t s;
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_.handle = s;
}

StreamOwner::~StreamOwner() { cudaStreamDestroy(static_cast<cudaStream_t>(stream_.handle)); }

void StreamOwner::synchronize() const {
  BRAID_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_.handle)));
}

}  // namespace braid
