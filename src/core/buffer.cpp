#include "braid/buffer.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "braid/error.h"
#include "core/device_guard.h"
#if BRAID_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace braid {

namespace {

constexpr size_t kCpuAlignment = 256;

[[noreturn]] void throw_no_cuda(const char* what) {
  throw Error(ErrorKind::unsupported,
              std::string(what) + ": this build of braidinfer has no CUDA support");
}

}  // namespace

bool cuda_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
#if BRAID_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    data_ = std::aligned_alloc(kCpuAlignment, rounded);
    if (!data_)
      throw Error(ErrorKind::out_of_memory, "buffer: could not allocate " + std::to_string(bytes) +
                                                " bytes of host memory");
    return;
  }
#if BRAID_WITH_CUDA
  data_ = cuda_allocator::allocate(bytes, device.index);
#else
  throw_no_cuda("buffer");
#endif
}

void Buffer::release() {
  if (!data_) return;
  if (device_.is_cpu()) {
    std::free(data_);
  } else {
#if BRAID_WITH_CUDA
    cuda_allocator::deallocate(data_);
#endif
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

OwnedTensor::OwnedTensor(DType dtype, std::initializer_list<int64_t> shape, Device device)
    : OwnedTensor(dtype, std::vector<int64_t>(shape), device) {}

OwnedTensor::OwnedTensor(DType dtype, const std::vector<int64_t>& shape, Device device) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) throw Error(ErrorKind::shape, "tensor: negative dimension " + std::to_string(s));
    n *= s;
  }
  buffer_ = Buffer(static_cast<size_t>(n) * dtype_size(dtype), device);
  view_ = Tensor::contiguous(buffer_.data(), dtype, device, shape.data(),
                             static_cast<int>(shape.size()));
}

void copy(const Tensor& src, const Tensor& dst, Stream stream) {
  if (src.dtype != dst.dtype || src.numel() != dst.numel())
    throw_arg_error(ErrorKind::shape, "copy", "dst", "the dtype and size of src " + describe(src),
                    describe(dst));
  if (!src.is_contiguous() || !dst.is_contiguous())
    throw Error(ErrorKind::shape, "copy: both tensors must be contiguous");
  if (src.nbytes() == 0) return;
  if (src.device.is_cpu() && dst.device.is_cpu()) {
    std::memcpy(dst.data, src.data, src.nbytes());
    return;
  }
#if BRAID_WITH_CUDA
  auto s = static_cast<cudaStream_t>(stream.handle);
  BRAID_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDefault, s));
  if (src.device.is_cpu() || dst.device.is_cpu()) BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
#else
  (void)stream;
  throw_no_cuda("copy");
#endif
}

void fill_bytes(const Tensor& t, unsigned char value, Stream stream) {
  if (!t.is_contiguous()) throw Error(ErrorKind::shape, "fill_bytes: tensor must be contiguous");
  if (t.nbytes() == 0) return;  // an empty tensor may have no memory at all
  if (t.device.is_cpu()) {
    std::memset(t.data, value, t.nbytes());
    return;
  }
#if BRAID_WITH_CUDA
  BRAID_CUDA_CHECK(
      cudaMemsetAsync(t.data, value, t.nbytes(), static_cast<cudaStream_t>(stream.handle)));
#else
  (void)stream;
  throw_no_cuda("fill_bytes");
#endif
}

#if !BRAID_WITH_CUDA
namespace cuda_allocator {
void* allocate(size_t, int) { throw_no_cuda("cuda_allocator"); }
void deallocate(void*) {}
void empty_cache() {}
size_t bytes_in_use() { return 0; }
size_t bytes_cached() { return 0; }
void memory_info(int, size_t*, size_t*) { throw_no_cuda("cuda_allocator::memory_info"); }
}  // namespace cuda_allocator

DeviceGuard::DeviceGuard(Device) {}
DeviceGuard::~DeviceGuard() = default;

StreamOwner::StreamOwner() { throw_no_cuda("stream"); }
StreamOwner::~StreamOwner() = default;
void StreamOwner::synchronize() const {}
#endif

}  // namespace braid
