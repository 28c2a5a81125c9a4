// Helpers for differential tests: random tensors, poisoning, host copies, error norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#if BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/tensor.h"

namespace braid {

// Lets gtest print a DType parameter by name. It must live in DType's own namespace, where
// argument-dependent lookup finds it.
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }

}  // namespace braid

namespace braid::test {

// Skips the current test, saying why, when no CUDA device can be used.
#define BRAID_REQUIRE_CUDA()                                                             \
  do {                                                                                   \
    if (!::braid::cuda_available())                                                      \
      GTEST_SKIP() << "no CUDA device (or a CPU-only build): differential test skipped"; \
  } while (0)

// A fresh seed per call (printed by the tests through SCOPED_TRACE so failures reproduce).
inline uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Host tensor filled with uniform values in [lo, hi), rounded to its dtype. Integer dtypes get
// integers in [lo, hi).
inline OwnedTensor random_host(DType dtype, const std::vector<int64_t>& shape, uint64_t seed,
                               float lo = -1.0f, float hi = 1.0f) {
  OwnedTensor t(dtype, shape, Device::cpu());
  std::mt19937_64 rng(seed);
  const int64_t n = t.view().numel();
  if (dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u8) {
    std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(lo), static_cast<int64_t>(hi) - 1);
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = dist(rng);
      if (dtype == DType::i32) t.view().ptr<int32_t>()[i] = static_cast<int32_t>(v);
      else if (dtype == DType::i64) t.view().ptr<int64_t>()[i] = v;
      else t.view().ptr<uint8_t>()[i] = static_cast<uint8_t>(v);
    }
  } else {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < n; ++i) store_from_float(t.data(), dtype, i, dist(rng));
  }
  return t;
}

// Copy of a host tensor on `device` (the same object's contents when device is the CPU).
inline OwnedTensor to_device(const Tensor& host, Device device) {
  std::vector<int64_t> shape(host.shape, host.shape + host.ndim);
  OwnedTensor t(host.dtype, shape, device);
  copy(host, t.view());
  return t;
}

// A [1] i32 counter on `device`, zero: what the ops that count finished blocks in one
// (gemv_chain) take.
inline OwnedTensor zero_counter(Device device) {
  const int32_t zero = 0;
  OwnedTensor t(DType::i32, {1}, device);
  copy(Tensor(const_cast<int32_t*>(&zero), DType::i32, Device::cpu(), {1}), t.view());
  return t;
}

// An uninitialised tensor whose bytes are all 0xFF: NaN for every floating type, so an element
// the op forgets to write fails the comparison. The fill is finished before it returns: it runs on
// the legacy stream, and a test that then writes the tensor on a non-blocking stream would
// otherwise race with it (ProgrammaticLaunch's decode chain read inf under racecheck, H200).
inline OwnedTensor poisoned(DType dtype, const std::vector<int64_t>& shape, Device device) {
  OwnedTensor t(dtype, shape, device);
  fill_bytes(t.view(), 0xFF);
#if BRAID_WITH_CUDA
  if (device.is_cuda() && cudaStreamSynchronize(nullptr) != cudaSuccess)
    throw Error(ErrorKind::internal, "poisoned: the legacy stream's fill failed");
#endif
  return t;
}

// All elements as float, in logical (row-major) order; works for strided and device tensors.
inline std::vector<float> to_floats(const Tensor& t) {
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  Tensor src = t;
  OwnedTensor host_copy;
  if (t.device.is_cuda()) {
    if (!t.is_contiguous()) ADD_FAILURE() << "to_floats: device tensors must be contiguous";
    host_copy = OwnedTensor(t.dtype, shape, Device::cpu());
    copy(t, host_copy.view());
    src = host_copy.view();
  }
  std::vector<float> out(static_cast<size_t>(t.numel()));
  std::vector<int64_t> idx(static_cast<size_t>(t.ndim), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[d] * src.strides[d];
    out[i] = load_as_float(src.data, src.dtype, off);
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// ‖got − ref‖ / ‖ref‖ (absolute norm when ‖ref‖ is 0); infinity if any element is NaN or the
// sizes differ.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) return INFINITY;
    double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Elements whose bits differ (NaN poison included: equal bits are equal); -1 if the sizes differ.
inline int64_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += float_bits(a[i]) != float_bits(b[i]);
  return bad;
}

// DESIGN.md's tolerances: fp32 1e-5 relative, bf16 1e-2; fp16 has 3 more mantissa bits.
inline double tolerance(DType t) {
  switch (t) {
    case DType::f32: return 1e-5;
    case DType::f16: return 2e-3;
    case DType::bf16: return 1e-2;
    default: return 0.0;
  }
}

// Expects `f` to throw braid::Error of `kind` whose message contains every fragment.
template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "expected a braid::Error, nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    for (const auto& frag : fragments)
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos)
          << "message \"" << e.what() << "\" lacks \"" << frag << "\"";
  }
}

// A CUDA-device view over a bogus pointer: lets the argument checks be tested on machines with
// no GPU (checks run before anything touches the data).
inline Tensor fake_cuda(DType dtype, std::initializer_list<int64_t> shape) {
  return Tensor(reinterpret_cast<void*>(uintptr_t{0x1000}), dtype, Device::cuda(0), shape);
}

}  // namespace braid::test
