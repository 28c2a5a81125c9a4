// Is initcheck's "Uninitialized global memory read" of a buffer cuBLASLt wrote a false report?
// (docs/perf/sanitizer.md: every such report in the GPU tests is a kernel reading a GEMM's output.)
// Run under `compute-sanitizer --tool initcheck`:
//   1. out is allocated and never written by anything but ops::gemm (m = 256 > 16: cuBLASLt's
//      Hopper kernels); a kernel then reads every element and compares it with the product
//      computed on the host. If the values match, the GEMM wrote those bytes, and a report on
//      the read is the tool not seeing the GEMM's stores (TMA stores are not tracked).
//   2. the same with out set by cudaMemset before the GEMM: no report expected.
//   3. the same with m = 8 (braidinfer's GEMV, plain st.global stores): no report expected.
// The program prints which cases matched; initcheck prints a report per uninitialized read.
// Build: nvcc -std=c++20 -O2 -arch=sm_90a -Iinclude -Isrc tools/device/initcheck_cublaslt_probe.cu \
//          build/libbraid_static.a -lcublasLt -lcublas -o build/initcheck_cublaslt_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "braid/ops.h"

using namespace braid;

// mismatches[0] += elements of out that differ from ref by more than tol (relative to 1).
__global__ void compare_kernel(const __nv_bfloat16* out, const float* ref, int n, float tol,
                               unsigned* mismatches) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (fabsf(__bfloat162float(out[i]) - ref[i]) > tol * fmaxf(1.0f, fabsf(ref[i]))) atomicAdd(mismatches, 1u);
}

int run_case(const char* name, int m, bool memset_first) {
  const int n = 512, k = 256;
  std::vector<__nv_bfloat16> ha(static_cast<size_t>(m) * k), hw(static_cast<size_t>(n) * k);
  std::vector<float> ref(static_cast<size_t>(m) * n, 0.0f);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = __float2bfloat16(static_cast<float>(static_cast<int>(i % 7) - 3) / 4.0f);
  for (size_t i = 0; i < hw.size(); ++i) hw[i] = __float2bfloat16(static_cast<float>(static_cast<int>(i % 5) - 2) / 8.0f);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      float s = 0.0f;
      for (int j = 0; j < k; ++j) s += __bfloat162float(ha[static_cast<size_t>(r) * k + j]) * __bfloat162float(hw[static_cast<size_t>(c) * k + j]);
      ref[static_cast<size_t>(r) * n + c] = s;
    }
  void *a, *w, *out, *dref, *mism;
  cudaMalloc(&a, ha.size() * 2);
  cudaMalloc(&w, hw.size() * 2);
  cudaMalloc(&out, ref.size() * 2);
  cudaMalloc(&dref, ref.size() * 4);
  cudaMalloc(&mism, 4);
  cudaMemcpy(a, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dref, ref.data(), ref.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(mism, 0, 4);
  if (memset_first) cudaMemset(out, 0xff, ref.size() * 2);
  const Device dev = Device::cuda(0);
  ops::gemm(Tensor(a, DType::bf16, dev, {m, k}), Tensor(w, DType::bf16, dev, {n, k}), Tensor{},
            Tensor(out, DType::bf16, dev, {m, n}));
  compare_kernel<<<64, 256>>>(static_cast<const __nv_bfloat16*>(out), static_cast<const float*>(dref), m * n,
                              1.0f / 64.0f, static_cast<unsigned*>(mism));
  unsigned bad = 0;
  cudaMemcpy(&bad, mism, 4, cudaMemcpyDeviceToHost);
  const cudaError_t e = cudaDeviceSynchronize();
  printf("case %s (m = %d%s): %u of %d elements differ from the host product; %s\n", name, m,
         memset_first ? ", out memset first" : ", out never written but by the GEMM", bad, m * n,
         cudaGetErrorString(e));
  cudaFree(a);
  cudaFree(w);
  cudaFree(out);
  cudaFree(dref);
  cudaFree(mism);
  return bad == 0 && e == cudaSuccess ? 0 : 1;
}

int main() {
  int rc = 0;
  rc |= run_case("1 cuBLASLt", 256, false);
  rc |= run_case("2 cuBLASLt", 256, true);
  rc |= run_case("3 GEMV", 8, false);
  return rc;
}
