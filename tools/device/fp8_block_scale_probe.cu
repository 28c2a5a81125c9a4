// Does cuBLASLt on this GPU run an fp8 GEMM with DeepSeek's block scales (activations: one f32
// scale per 128 columns of a row, VEC128_32F; weights: one per 128 x 128 block, BLK128x128_32F),
// and with which scale layouts? Checks each candidate layout against an fp32 reference on the
// host, then times the ones that pass against the plain (unscaled) fp8 GEMM on large shapes.
// Build: nvcc -std=c++17 -O2 -arch=sm_90a tools/device/fp8_block_scale_probe.cu -lcublasLt -o probe
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("cuda %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

struct Case { int m, n, k; };

// out[m, n] = sum_k a[m,k] sa[m,k/128] * w[n,k] sw[n/128,k/128]
// act_scale_kmajor: sa stored [m][k/128]; else [k/128][m].
cublasStatus_t run(cublasLtHandle_t h, const Case& c, const void* a, const void* w, const float* sa,
                   const float* sw, void* out, bool scaled, void* ws, size_t ws_bytes, int iters,
                   float* ms) {
  cublasLtMatmulDesc_t d;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (scaled) {
    // cuBLASLt's A is the weight matrix (k x n column-major), B the activations (k x m).
    cublasLtMatmulMatrixScale_t wm = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    cublasLtMatmulMatrixScale_t am = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &wm, sizeof(wm));
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &am, sizeof(am));
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof(sw));
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof(sa));
  }
  cublasLtMatrixLayout_t lw, la, lo;
  cublasLtMatrixLayoutCreate(&lw, CUDA_R_8F_E4M3, c.k, c.n, c.k);
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, c.k, c.m, c.k);
  cublasLtMatrixLayoutCreate(&lo, CUDA_R_16BF, c.n, c.m, c.n);
  cublasLtMatmulPreference_t p;
  cublasLtMatmulPreferenceCreate(&p);
  cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, lw, la, lo, lo, p, 1, &r, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
  if (st == CUBLAS_STATUS_SUCCESS) {
    float alpha = 1, beta = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    st = cublasLtMatmul(h, d, &alpha, w, lw, a, la, &beta, out, lo, out, lo, &r.algo, ws, ws_bytes, 0);
    cudaEventRecord(e0);
    for (int i = 0; i < iters && st == CUBLAS_STATUS_SUCCESS; ++i)
      st = cublasLtMatmul(h, d, &alpha, w, lw, a, la, &beta, out, lo, out, lo, &r.algo, ws, ws_bytes, 0);
    cudaEventRecord(e1);
    CK(cudaEventSynchronize(e1));
    cudaEventElapsedTime(ms, e0, e1);
    *ms /= iters;
  }
  cublasLtMatmulPreferenceDestroy(p);
  cublasLtMatrixLayoutDestroy(lw), cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lo);
  cublasLtMatmulDescDestroy(d);
  return st;
}

int main() {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  size_t ws_bytes = 64 << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 1);
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  // Correctness on a small shape, for both layouts of the activation scales.
  const Case c{256, 384, 512};
  const int kb = c.k / 128, nb = c.n / 128;
  std::vector<__nv_fp8_e4m3> a(c.m * c.k), w(c.n * c.k);
  std::vector<float> af(c.m * c.k), wf(c.n * c.k);
  for (size_t i = 0; i < a.size(); ++i) { a[i] = __nv_fp8_e4m3(nd(rng)); af[i] = float(a[i]); }
  for (size_t i = 0; i < w.size(); ++i) { w[i] = __nv_fp8_e4m3(nd(rng)); wf[i] = float(w[i]); }
  std::vector<float> sa(c.m * kb), sw(nb * kb);  // sa[m][kb] logical, sw[nb][kb]
  for (auto& s : sa) s = ud(rng);
  for (auto& s : sw) s = ud(rng);
  std::vector<double> ref(c.m * c.n, 0);
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int k = 0; k < c.k; ++k)
        acc += double(af[i * c.k + k]) * sa[i * kb + k / 128] * wf[j * c.k + k] * sw[(j / 128) * kb + k / 128];
      ref[i * c.n + j] = acc;
    }
  void *da, *dw, *dout;
  float *dsa, *dsw;
  CK(cudaMalloc(&da, a.size())); CK(cudaMalloc(&dw, w.size())); CK(cudaMalloc(&dout, c.m * c.n * 2));
  CK(cudaMalloc(&dsa, sa.size() * 4)); CK(cudaMalloc(&dsw, sw.size() * 4));
  CK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice));
  for (int layout = 0; layout < 4; ++layout) {
    const bool act_kmajor = layout & 1, w_transposed = layout & 2;
    std::vector<float> sa_dev(sa.size()), sw_dev(sw.size());
    for (int i = 0; i < c.m; ++i)
      for (int b = 0; b < kb; ++b) sa_dev[act_kmajor ? i * kb + b : b * c.m + i] = sa[i * kb + b];
    for (int j = 0; j < nb; ++j)
      for (int b = 0; b < kb; ++b) sw_dev[w_transposed ? b * nb + j : j * kb + b] = sw[j * kb + b];
    CK(cudaMemcpy(dsa, sa_dev.data(), sa.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsw, sw_dev.data(), sw.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0, c.m * c.n * 2));
    float ms = 0;
    cublasStatus_t st = run(h, c, da, dw, dsa, dsw, dout, true, ws, ws_bytes, 1, &ms);
    if (st != CUBLAS_STATUS_SUCCESS) { printf("layout act %s, w %s: cuBLASLt status %d\n", act_kmajor ? "[m][k/128]" : "[k/128][m]", w_transposed ? "[k/128][n/128]" : "[n/128][k/128]", int(st)); continue; }
    CK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> out(c.m * c.n);
    CK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < out.size(); ++i) { double d = double(float(out[i])) - ref[i]; num += d * d; den += ref[i] * ref[i]; }
    printf("layout act %s, w %s: rel l2 %.3g\n", act_kmajor ? "[m][k/128]" : "[k/128][m]", w_transposed ? "[k/128][n/128]" : "[n/128][k/128]", std::sqrt(num / den));
  }
  // Which shapes the heuristic takes (m not a multiple of 4, 16 or 128; one k block).
  for (Case sc : {Case{1, 384, 128}, Case{40, 384, 128}, Case{64, 384, 128}, Case{253, 384, 128},
                  Case{256, 384, 128}, Case{64, 6144, 4096}, Case{100, 6144, 4096}, Case{128, 6144, 4096},
                  Case{253, 6144, 4096}, Case{256, 6144, 4096}, Case{512, 6144, 4096}}) {
    void *ba, *bw, *bo; float *bsa, *bsw;
    CK(cudaMalloc(&ba, size_t(sc.m) * sc.k)); CK(cudaMalloc(&bw, size_t(sc.n) * sc.k));
    CK(cudaMalloc(&bo, size_t(sc.m) * sc.n * 2));
    CK(cudaMalloc(&bsa, size_t(sc.m + 128) * (sc.k / 128) * 4)); CK(cudaMalloc(&bsw, size_t(sc.n / 128 + 1) * (sc.k / 128) * 4));
    float ms = 0;
    cublasStatus_t st = run(h, sc, ba, bw, bsa, bsw, bo, true, ws, ws_bytes, 1, &ms);
    printf("shape m=%d n=%d k=%d: status %d\n", sc.m, sc.n, sc.k, int(st));
    cudaFree(ba), cudaFree(bw), cudaFree(bo), cudaFree(bsa), cudaFree(bsw);
  }
  // Speed: block-scaled vs plain fp8 on large shapes (values and scales uninitialised: timing only).
  for (Case big : {Case{4096, 4096, 4096}, Case{8192, 8192, 8192}, Case{2048, 28672, 4096}, Case{2048, 4096, 14336}}) {
    void *ba, *bw, *bo; float *bsa, *bsw;
    CK(cudaMalloc(&ba, size_t(big.m) * big.k)); CK(cudaMalloc(&bw, size_t(big.n) * big.k));
    CK(cudaMalloc(&bo, size_t(big.m) * big.n * 2));
    CK(cudaMalloc(&bsa, size_t(big.m) * (big.k / 128) * 4)); CK(cudaMalloc(&bsw, size_t(big.n / 128) * (big.k / 128) * 4));
    CK(cudaMemset(ba, 0x30, size_t(big.m) * big.k)); CK(cudaMemset(bw, 0x30, size_t(big.n) * big.k));
    CK(cudaMemset(bsa, 0, size_t(big.m) * (big.k / 128) * 4)); CK(cudaMemset(bsw, 0, size_t(big.n / 128) * (big.k / 128) * 4));
    const double flops = 2.0 * big.m * big.n * big.k;
    for (int scaled = 0; scaled < 2; ++scaled) {
      float ms = 0;
      cublasStatus_t st = run(h, big, ba, bw, bsa, bsw, bo, scaled, ws, ws_bytes, 20, &ms);
      printf("m=%d n=%d k=%d %s: %s %.3f ms %.0f TFLOP/s\n", big.m, big.n, big.k, scaled ? "block-scaled" : "plain fp8",
             st == CUBLAS_STATUS_SUCCESS ? "ok" : "FAILED", ms, flops / ms / 1e9);
    }
    cudaFree(ba), cudaFree(bw), cudaFree(bo), cudaFree(bsa), cudaFree(bsw);
  }
  return 0;
}
