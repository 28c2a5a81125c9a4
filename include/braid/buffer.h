// Owning device or host memory, and an owning tensor built on it.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid {

bool cuda_available();  // built with CUDA and at least one device visible
int cuda_device_count();

// Allocates through the CPU allocator (aligned to 256 bytes) or the CUDA caching allocator.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, Device device);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_{};
};

// A tensor that owns its (contiguous) memory.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(DType dtype, std::initializer_list<int64_t> shape, Device device);
  OwnedTensor(DType dtype, const std::vector<int64_t>& shape, Device device);
  const Tensor& view() const { return view_; }
  operator const Tensor&() const { return view_; }
  void* data() const { return view_.data; }

 private:
  Buffer buffer_;
  Tensor view_;
};

// Copies between host and device (or within one). Shapes and dtypes must match; both tensors
// must be contiguous. Synchronous with respect to the host when either side is on the CPU.
void copy(const Tensor& src, const Tensor& dst, Stream stream = {});
// Fills every byte of a contiguous tensor (e.g. 0xFF poisons bf16/f32 with NaN).
void fill_bytes(const Tensor& t, unsigned char value, Stream stream = {});

// CUDA caching allocator on plain cudaMalloc: freed blocks go to per-size free lists and are
// reused for requests that round to the same size class. Blocks are handed out for any stream:
// callers that free memory still in use by another stream must synchronize first.
namespace cuda_allocator {
void* allocate(size_t bytes, int device);
void deallocate(void* ptr);
void empty_cache();            // cudaFree every cached block
size_t bytes_in_use();
size_t bytes_cached();
// The device's free and total memory as the driver reports them (cudaMemGetInfo); cached blocks
// count as used.
void memory_info(int device, size_t* free_bytes, size_t* total_bytes);
}  // namespace cuda_allocator

}  // namespace braid
