// Probe for docs/perf/decode.md (gemv_chain, issue 19): where a chain's time goes.
//   layer     a dense layer's four products (o_proj, gate_up, down, next qkv) as one gemv_chain,
//             and as the four ops one by one (the path BRAID_GEMV_CHAIN=0 takes), programmatic
//             launch on both (inside ops::ConstantWeights, as forward() captures them);
//   stream    gate_up alone: one stage, as the chain and as the op, in GB/s;
//   boundary  a chain of 8 gemm_add stages on the (small) o_proj weight, each reading what the
//             stage before wrote: its time per stage is what a stage boundary costs;
//   stamps    one layer chain with globaltimer stamps per block and stage (gemv_chain.cu's Stamp
//             events): when blocks open a stage, have its row, finish it, and when the producer
//             issued its pieces.
// Each case is timed by the bench harness (time_launches, graph mode: one call per weight set,
// enough sets to overflow L2 twice, the graph replayed; the median per call), against the bench's
// copy ceiling measured in the same run.
// Build (here, against a CUDA build of the library; one command):
//   g++ -std=c++20 -O2 -Iinclude -Isrc -I/usr/local/cuda/include tools/device/chain_probe.cpp
//     build/libbraid_bench.a build/libbraid_http.a build/libbraid_static.a
//     -L/usr/local/cuda/lib64 -lcudart -lcublasLt -lcublas -o build/chain_probe
// Run: chain_probe [SHAPE...]  (default: qwen2.5-0.5b llama-3.2-1b llama-3.1-8b); the ring's depth
// follows BRAID_CHAIN_SLOTS, as in the library.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/timer.h"
#include "braid/buffer.h"
#include "braid/ops.h"
#include "ops/cuda/cuda_ops.h"

using namespace braid;

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

namespace {

struct Shape {
  const char* name;
  int64_t hidden, inter, qkv;
  bool bias;
};
const Shape kShapes[] = {{"qwen2.5-0.5b", 896, 4864, 1152, true},
                         {"llama-3.2-1b", 2048, 8192, 3072, false},
                         {"llama-3.1-8b", 4096, 14336, 6144, false}};

// bf16 values in [-a, a]: 1 MB of random values, tiled over the tensor from a point `seed` picks
// (timing only; the values need not differ between sets).
void fill_random(const Tensor& t, float a, uint64_t seed) {
  constexpr size_t kTile = size_t{1} << 19;  // values copied at a time
  std::vector<uint16_t> values(2 * kTile);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& v : values) {
    const float f = d(rng) * a;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  const uint16_t* tile = values.data() + (seed * 4099) % kTile;
  const size_t count = static_cast<size_t>(t.numel());
  for (size_t at = 0; at < count; at += kTile)
    CK(cudaMemcpy(static_cast<uint16_t*>(t.data) + at, tile, std::min(kTile, count - at) * 2,
                  cudaMemcpyHostToDevice));
}

struct Layer {
  OwnedTensor o, o_bias, mlp_norm, gate_up, down, attn_norm, qkv_w, qkv_bias;
  OwnedTensor attn, residual, mlp, qkv, normed, act, proj, counter, other;
  Layer(const Shape& s, uint64_t seed) {
    const Device d = Device::cuda();
    auto make = [&](std::vector<int64_t> shape, float a) {
      OwnedTensor t(DType::bf16, shape, d);
      fill_random(t, a, ++seed);
      return t;
    };
    o = make({s.hidden, s.hidden}, 0.03f);
    gate_up = make({2 * s.inter, s.hidden}, 0.03f);
    down = make({s.hidden, s.inter}, 0.015f);
    qkv_w = make({s.qkv, s.hidden}, 0.03f);
    mlp_norm = make({s.hidden}, 1.0f);
    attn_norm = make({s.hidden}, 1.0f);
    if (s.bias) {
      o_bias = make({s.hidden}, 0.1f);
      qkv_bias = make({s.qkv}, 0.1f);
    }
    attn = make({1, s.hidden}, 1.0f);
    residual = make({1, s.hidden}, 1.0f);
    other = make({1, s.hidden}, 1.0f);
    mlp = make({1, 2 * s.inter}, 1.0f);
    qkv = make({1, s.qkv}, 1.0f);
    normed = make({1, s.hidden}, 1.0f);
    act = make({1, s.inter}, 1.0f);
    proj = make({1, s.hidden}, 1.0f);
    counter = OwnedTensor(DType::i32, {1}, d);
    CK(cudaMemset(counter.view().data, 0, 4));
  }
  std::vector<ops::ChainStage> stages(float eps) const {
    return {ops::ChainStage::gemm_add(attn, o, o_bias, residual, proj),
            ops::ChainStage::rms_norm_gemm(residual, mlp_norm, eps, gate_up, Tensor{}, mlp, normed),
            ops::ChainStage::swiglu_gemm_add(mlp, down, residual, act, proj),
            ops::ChainStage::rms_norm_gemm(residual, attn_norm, eps, qkv_w, qkv_bias, qkv, normed)};
  }
  void ops_one_by_one(float eps, Stream st) const {
    ops::gemm_add(attn, o, o_bias, residual, proj, st);
    ops::rms_norm_gemm(residual, mlp_norm, eps, gate_up, Tensor{}, mlp, normed, st);
    ops::swiglu_gemm_add(mlp, down, residual, act, proj, st);
    ops::rms_norm_gemm(residual, attn_norm, eps, qkv_w, qkv_bias, qkv, normed, st);
  }
  // 8 gemm_add stages on o, alternating residual and other: each reads what the one before wrote.
  std::vector<ops::ChainStage> boundary_stages() const {
    std::vector<ops::ChainStage> v;
    for (int i = 0; i < 8; ++i)
      v.push_back(ops::ChainStage::gemm_add(i % 2 ? other : residual, o, Tensor{},
                                            i % 2 ? residual : other, proj));
    return v;
  }
  int64_t bytes() const {
    return 2 * (o.view().numel() + gate_up.view().numel() + down.view().numel() +
                qkv_w.view().numel());
  }
};

// Median microseconds of one call of `call(layer, stream)`, over every layer's weights in turn
// (a graph of one call per layer, replayed; programmatic launch on, as forward()'s capture).
template <typename Call>
double time_per_layer(const std::vector<Layer>& layers, Call call) {
  bench::TimingConfig config;
  config.mode = bench::TimingMode::graph;
  config.sets = config.batch = static_cast<int>(layers.size());
  config.warmup = 3;
  config.reps = 15;
  return bench::time_launches(
             [&](int set, Stream s) {
               ops::ConstantWeights constant;
               call(layers[static_cast<size_t>(set)], s);
             },
             config)
      .median_us;
}

// Per stage, over blocks: when the stage opened (median, last), its row was ready, it was done
// (median, last), fenced (last), and when the producer issued its first and last piece (median);
// microseconds from the first block's opening of stage 0.
void print_stamps(const std::vector<unsigned long long>& st, int blocks, int stages) {
  constexpr int kEvents = 6;
  auto at = [&](int b, int s, int e) { return st[(static_cast<size_t>(b) * ops::kMaxChainStages + s) * kEvents + e]; };
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < blocks; ++b) t0 = std::min(t0, at(b, 0, 0));
  auto stat = [&](int s, int e, bool last) {
    std::vector<double> v;
    for (int b = 0; b < blocks; ++b) v.push_back((at(b, s, e) - t0) / 1e3);
    std::sort(v.begin(), v.end());
    return last ? v.back() : v[v.size() / 2];
  };
  std::printf("  stage: open med/last | row ready med | done med/last | fenced last | copies first/last med (us)\n");
  for (int s = 0; s < stages; ++s)
    std::printf("  %d: %7.2f %7.2f | %7.2f | %7.2f %7.2f | %7.2f | %7.2f %7.2f\n", s, stat(s, 0, false),
                stat(s, 0, true), stat(s, 1, false), stat(s, 2, false), stat(s, 2, true),
                stat(s, 3, true), stat(s, 4, false), stat(s, 5, false));
}

void probe(const Shape& sh, cudaStream_t s, double copy) {
  const float eps = 1e-6f;
  Layer first(sh, 1);
  const int64_t layer_bytes = first.bytes();
  int dev = 0, l2 = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const int sets = bench::rotating_sets(static_cast<size_t>(layer_bytes), static_cast<size_t>(l2), 2);
  std::vector<Layer> layers;
  layers.reserve(sets);
  layers.push_back(std::move(first));
  for (int i = 1; i < sets; ++i) layers.emplace_back(sh, 100 * i + 1);

  const double chain = time_per_layer(layers, [&](const Layer& L, Stream st) {
    auto v = L.stages(eps);
    ops::gemv_chain(v, L.counter, st);
  });
  const double separate =
      time_per_layer(layers, [&](const Layer& L, Stream st) { L.ops_one_by_one(eps, st); });
  const double floor_us = layer_bytes / copy / 1e3;
  std::printf("%s layer (%.1f MB, floor %.2f us at %.0f GB/s): chain %.2f us (%.0f GB/s), ops %.2f us (%.0f GB/s)\n",
              sh.name, layer_bytes / 1e6, floor_us, copy, chain, layer_bytes / chain / 1e3, separate,
              layer_bytes / separate / 1e3);

  const double gu_bytes = 2.0 * layers[0].gate_up.view().numel();
  const double gu_chain = time_per_layer(layers, [&](const Layer& L, Stream st) {
    auto v = L.stages(eps);
    ops::gemv_chain(std::span(v).subspan(1, 1), L.counter, st);
  });
  const double gu_op = time_per_layer(layers, [&](const Layer& L, Stream st) {
    ops::rms_norm_gemm(L.residual, L.mlp_norm, eps, L.gate_up, Tensor{}, L.mlp, L.normed, st);
  });
  std::printf("%s gate_up alone (%.1f MB): chain %.2f us (%.0f GB/s), op %.2f us (%.0f GB/s)\n", sh.name,
              gu_bytes / 1e6, gu_chain, gu_bytes / gu_chain / 1e3, gu_op, gu_bytes / gu_op / 1e3);

  const double b8 = time_per_layer(layers, [&](const Layer& L, Stream st) {
    auto v = L.boundary_stages();
    ops::gemv_chain(v, L.counter, st);
  });
  const double b1 = time_per_layer(layers, [&](const Layer& L, Stream st) {
    auto v = L.boundary_stages();
    ops::gemv_chain(std::span(v).first(1), L.counter, st);
  });
  std::printf("%s boundary (o_proj %.2f MB a stage): 1 stage %.2f us, 8 stages %.2f us: %.2f us a stage after the first\n",
              sh.name, 2.0 * layers[0].o.view().numel() / 1e6, b1, b8, (b8 - b1) / 7);

  int blocks = 0;
  CK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, dev));
  unsigned long long* d_stamps;
  const size_t n_stamps = static_cast<size_t>(blocks) * ops::kMaxChainStages * 6;
  CK(cudaMalloc(&d_stamps, n_stamps * 8));
  CK(cudaMemset(d_stamps, 0, n_stamps * 8));
  cuda::gemv_chain_record_stamps(d_stamps);
  for (int rep = 0; rep < 3; ++rep) {  // the last of three, each after the other sets' chains
    for (size_t i = 1; i < layers.size(); ++i) {
      auto v = layers[i].stages(eps);
      cuda::gemv_chain_record_stamps(nullptr);
      ops::gemv_chain(v, layers[i].counter, Stream{s});
    }
    cuda::gemv_chain_record_stamps(d_stamps);
    auto v = layers[0].stages(eps);
    ops::gemv_chain(v, layers[0].counter, Stream{s});
  }
  cuda::gemv_chain_record_stamps(nullptr);
  CK(cudaStreamSynchronize(s));
  std::vector<unsigned long long> h(n_stamps);
  CK(cudaMemcpy(h.data(), d_stamps, n_stamps * 8, cudaMemcpyDeviceToHost));
  CK(cudaFree(d_stamps));
  std::printf("%s stamps of one layer chain (eager launch):\n", sh.name);
  print_stamps(h, blocks, 4);
}

}  // namespace

int main(int argc, char** argv) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double copy =
      bench::measure_ceilings(/*quick=*/true, /*device=*/0, false, false, [](bench::ResultRow) {})
          .copy_gbps;
  std::printf("copy ceiling %.0f GB/s (bench ceilings --quick)\n", copy);
  for (const Shape& sh : kShapes) {
    bool wanted = argc < 2;
    for (int i = 1; i < argc; ++i) wanted |= std::string(argv[i]) == sh.name;
    if (wanted) probe(sh, s, copy);
  }
  return 0;
}
