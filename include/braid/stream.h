// Streams. Ops take a Stream; the default-constructed one is the CUDA legacy default stream
// (and means nothing for CPU tensors). The handle is a cudaStream_t, kept opaque here so that
// this header does not need the CUDA toolkit.
#pragma once

namespace braid {

struct Stream {
  void* handle = nullptr;  // cudaStream_t
};

// An owned, non-blocking CUDA stream on the current device.
class StreamOwner {
 public:
  StreamOwner();
  ~StreamOwner();
  StreamOwner(const StreamOwner&) = delete;
  StreamOwner& operator=(const StreamOwner&) = delete;
  Stream get() const { return stream_; }
  void synchronize() const;

 private:
  Stream stream_;
};

}  // namespace braid
