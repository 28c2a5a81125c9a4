// Times ops::sample_tokens on the GPU for docs/perf/sample_tokens.md, until `braidinfer bench
// kernels` has a case for it (src/bench/ belongs to another change right now): CUDA events around
// one call, median of 30 after 3 warm-ups, logits shaped like a model's (Gaussian, sigma 2.5, five
// peaks of +8..+16 per row) resident in device memory, beside a 1 GiB device-to-device copy timed
// in the same run. Built against a CUDA build's static library:
//   g++ -std=c++20 -O2 -Iinclude -Isrc -I/usr/local/cuda/include -DBRAID_WITH_CUDA=1 \
//     tools/device/sample_tokens_time.cpp build/libbraid_static.a -L/usr/local/cuda/lib64 \
//     -lcudart_static -lcublasLt -lcublas -l:libpcre2-8.a -l:libutf8proc.a -lpthread -ldl -lrt \
//     -static-libstdc++ -static-libgcc -o sample_tokens_time
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>
#include "braid/ops.h"
#include "braid/buffer.h"
using namespace braid;

static float median_ms(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  // copy ceiling: 1 GiB D2D (read + write)
  const size_t cb = size_t{1} << 30; void *src, *dst; cudaMalloc(&src, cb); cudaMalloc(&dst, cb);
  std::vector<float> ct;
  for (int i = 0; i < 10; ++i) { cudaEventRecord(a); cudaMemcpyAsync(dst, src, cb, cudaMemcpyDeviceToDevice); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); ct.push_back(ms); }
  const double copy_gbs = 2.0 * cb / (median_ms(ct) * 1e-3) / 1e9;
  printf("copy ceiling %.0f GB/s (read+write)\n", copy_gbs);
  cudaFree(src); cudaFree(dst);
  const int vocabs[] = {32000, 128256, 151936, 262144};
  const int rows_list[] = {1, 8, 32, 64, 128, 256};
  struct Mode { const char* name; float t; int k; float p; float mp; };
  const Mode modes[] = {{"greedy", 0, 0, 1, 0}, {"temp", 1, 0, 1, 0}, {"top_p.9", 1, 0, 0.9f, 0},
                        {"top_k50+p.9", 0.7f, 50, 0.9f, 0}, {"min_p.05", 1, 0, 1, 0.05f}, {"k1000+p.95", 1, 1000, 0.95f, 0}};
  printf("%-12s %6s %7s %9s %9s %8s\n", "mode", "rows", "vocab", "us", "GB/s", "%copy");
  std::mt19937_64 rng(1);
  for (int V : vocabs) {
    const int M = 256;
    std::vector<float> host((size_t)M * V);
    std::normal_distribution<float> nd(0.f, 2.5f);
    for (auto& x : host) x = nd(rng);
    for (int r = 0; r < M; ++r) for (int j = 0; j < 5; ++j) host[(size_t)r * V + rng() % V] += 8.f + 2.f * j;
    OwnedTensor hl(DType::f32, {M, V}, Device::cpu()); std::copy(host.begin(), host.end(), hl.view().ptr<float>());
    OwnedTensor dl(DType::f32, {M, V}, Device::cuda()); copy(hl, dl.view());
    for (const Mode& mo : modes) for (int m : rows_list) {
      if (V != 128256 && V != 151936 && m != 1 && m != 256 && m != 64) continue;
      OwnedTensor t(DType::f32, {m}, Device::cpu()), k(DType::i32, {m}, Device::cpu()), p(DType::f32, {m}, Device::cpu()), mp(DType::f32, {m}, Device::cpu()), s(DType::i64, {m}, Device::cpu()), st(DType::i64, {m}, Device::cpu());
      for (int r = 0; r < m; ++r) { t.view().ptr<float>()[r] = mo.t; k.view().ptr<int32_t>()[r] = mo.k; p.view().ptr<float>()[r] = mo.p; mp.view().ptr<float>()[r] = mo.mp; s.view().ptr<int64_t>()[r] = r; st.view().ptr<int64_t>()[r] = 7; }
      OwnedTensor dt(DType::f32, {m}, Device::cuda()), dk(DType::i32, {m}, Device::cuda()), dp(DType::f32, {m}, Device::cuda()), dmp(DType::f32, {m}, Device::cuda()), ds(DType::i64, {m}, Device::cuda()), dst2(DType::i64, {m}, Device::cuda()), tok(DType::i32, {m}, Device::cuda());
      copy(t, dt.view()); copy(k, dk.view()); copy(p, dp.view()); copy(mp, dmp.view()); copy(s, ds.view()); copy(st, dst2.view());
      Tensor lv = dl.view().slice(0, 0, m);
      for (int i = 0; i < 3; ++i) ops::sample_tokens(lv, dt, dk, dp, dmp, ds, dst2, Tensor{}, tok);
      std::vector<float> times;
      for (int i = 0; i < 30; ++i) { cudaEventRecord(a); ops::sample_tokens(lv, dt, dk, dp, dmp, ds, dst2, Tensor{}, tok); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); times.push_back(ms); }
      const double ms = median_ms(times), bytes = 4.0 * m * V;
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      printf("%-12s %6d %7d %9.1f %9.0f %7.1f%%\n", mo.name, m, V, ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
    }
  }
  printf("status %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}
