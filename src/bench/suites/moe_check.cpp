#include "bench/suites/moe_check.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <thread>
#include <vector>

#include "bench/suites/attention.h"
#include "braid/ops.h"

namespace braid::bench {

namespace {

// The sampled rows of a [T, ...] tensor, gathered into a contiguous host tensor.
OwnedTensor host_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  shape[0] = static_cast<int64_t>(rows.size());
  OwnedTensor host(t.dtype, shape, Device::cpu());
  for (size_t i = 0; i < rows.size(); ++i)
    copy(t.slice(0, rows[i], rows[i] + 1), host.view().slice(0, int64_t(i), int64_t(i) + 1));
  return host;
}

std::vector<float> floats(const Tensor& host_row) {
  std::vector<float> v(static_cast<size_t>(host_row.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = load_as_float(host_row.data, host_row.dtype, int64_t(i));
  return v;
}

// ops::moe_experts on the host, the rows split over the cores (each token is independent).
void cpu_reference(const Tensor& x, const Tensor& weights, const Tensor& ids,
                   const MoeHostWeights& w, const Tensor& workspace, const Tensor& out) {
  const int64_t rows = x.shape[0], k = ids.shape[1];
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, rows);
  const int64_t per = (rows + threads - 1) / threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < threads; ++i) {
    const int64_t lo = i * per, hi = std::min(rows, lo + per);
    if (lo >= hi) break;
    pool.emplace_back([&, i, lo, hi] {
      try {
        ops::moe_experts(x.slice(0, lo, hi), weights.slice(0, lo, hi), ids.slice(0, lo, hi),
                         w.gate_up, w.down, workspace.slice(0, lo * k, hi * k),
                         out.slice(0, lo, hi));
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

MoeHostWeights copy_weights_to_host(const MoeWeights& w) {
  const Tensor& gu = w.gate_up.view();
  const Tensor& dn = w.down.view();
  MoeHostWeights h{
      OwnedTensor(gu.dtype, std::vector<int64_t>(gu.shape, gu.shape + gu.ndim), Device::cpu()),
      OwnedTensor(dn.dtype, std::vector<int64_t>(dn.shape, dn.shape + dn.ndim), Device::cpu())};
  copy(gu, h.gate_up);
  copy(dn, h.down);
  return h;
}

MoeCheck check_moe_layer(const MoeShape& s, const MoeWeights& w, const MoeHostWeights& host,
                         const MoeBuffers& b, int samples, uint64_t seed) {
  const std::vector<int64_t> rows = moe_sample_tokens(s.tokens, samples, seed);
  const int64_t n = static_cast<int64_t>(rows.size()), H = s.model.hidden, I = s.model.inter;
  const int64_t k = s.model.k;
  const OwnedTensor x = host_rows(b.x, rows);
  const OwnedTensor weights = host_rows(b.topk_weights, rows);
  const OwnedTensor ids = host_rows(b.topk_ids, rows);
  const OwnedTensor got = host_rows(b.out, rows);

  OwnedTensor ref(DType::bf16, {n, H}, Device::cpu());
  OwnedTensor workspace(DType::f32, {n * k, I}, Device::cpu());
  cpu_reference(x, weights, ids, host, workspace, ref);

  // The device's own moe_experts on the same rows (on a CPU layer, the reference again).
  const Device dev = b.x.view().device;
  OwnedTensor dx(DType::bf16, {n, H}, dev), dw(DType::f32, {n, k}, dev),
      di(DType::i32, {n, k}, dev);
  OwnedTensor dws(DType::f32, {n * k, I}, dev), dout(DType::bf16, {n, H}, dev);
  copy(x, dx);
  copy(weights, dw);
  copy(ids, di);
  ops::moe_experts(dx, dw, di, w.gate_up, w.down, dws, dout);
  OwnedTensor experts(DType::bf16, {n, H}, Device::cpu());
  copy(dout, experts);

  MoeCheck check;
  check.tokens = n;
  ErrorAccumulator layer_acc, experts_acc;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> r = floats(ref.view().select(0, i));
    const std::vector<double> r64(r.begin(), r.end());
    const std::vector<float> g = floats(got.view().select(0, i));
    const std::vector<float> e = floats(experts.view().select(0, i));
    for (float v : g) check.nonfinite += !std::isfinite(v);
    layer_acc.add(g.data(), r64.data(), H);
    experts_acc.add(e.data(), r64.data(), H);
  }
  check.layer_vs_cpu = layer_acc.summary();
  check.experts_vs_cpu = experts_acc.summary();
  return check;
}

}  // namespace braid::bench
