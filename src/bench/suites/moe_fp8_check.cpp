#include "bench/suites/moe_fp8_check.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <thread>

#include "bench/harness/fp8_random.h"
#include "bench/harness/host_copy.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {

namespace {

constexpr int64_t kBlock = ops::kFp8Block;

// Columns `cols` of a host [R, C] f32 tensor, as a contiguous [R, cols.size()] tensor.
OwnedTensor host_columns(const Tensor& t, const std::vector<int64_t>& cols) {
  const int64_t R = t.shape[0], C = t.shape[1], n = static_cast<int64_t>(cols.size());
  OwnedTensor out(DType::f32, {R, n}, Device::cpu());
  const float* src = t.ptr<float>();
  float* dst = out.view().ptr<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < n; ++i) dst[r * n + i] = src[r * C + cols[i]];
  return out;
}

std::vector<float> row_floats(const Tensor& host, int64_t row) {
  const int64_t n = host.shape[1];
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = load_as_float(host.data, host.dtype, row * n + i);
  return v;
}

// fn(i) for i in [0, count), spread over the cores; the first exception is rethrown.
void parallel_for(int64_t count, const std::function<void(int64_t)>& fn) {
  if (count <= 0) return;
  const int64_t threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, count);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        for (int64_t i = t; i < count; i += threads) fn(i);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// One (token, slot) pair of a routing: the token's row in the sample, the local expert, weight.
struct Pair {
  int64_t row;
  int64_t expert;
  double weight;
};

// out[row] = sum over the row's pairs, in slot order, of weight * expert(a[row]).
std::vector<double> combine_pairs(const std::vector<Pair>& pairs,
                                  const std::vector<std::vector<double>>& a,
                                  const HostExpertWeights& w1, const HostExpertWeights& w2,
                                  bool gate_last, int64_t rows) {
  const int64_t H = w2.rows();
  std::vector<std::vector<double>> y(pairs.size(), std::vector<double>(static_cast<size_t>(H)));
  parallel_for(static_cast<int64_t>(pairs.size()), [&](int64_t p) {
    host_swiglu_expert(w1, w2, pairs[p].expert, gate_last, a[pairs[p].row].data(), y[p].data());
  });
  std::vector<double> out(static_cast<size_t>(rows * H), 0.0);
  for (size_t p = 0; p < pairs.size(); ++p)  // pairs are in (row, slot) order
    for (int64_t h = 0; h < H; ++h) out[pairs[p].row * H + h] += pairs[p].weight * y[p][h];
  return out;
}

// Errors of host rows `got` [n, H] (any float dtype) against ref [n * H].
void accumulate(const Tensor& got, const std::vector<double>& ref, ErrorAccumulator* acc,
                MatchCounter* match, int64_t* nonfinite) {
  const int64_t n = got.shape[0], H = got.shape[1];
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> g = row_floats(got, i);
    if (nonfinite)
      for (float v : g) *nonfinite += !std::isfinite(v);
    if (acc) acc->add(g.data(), ref.data() + i * H, H);
    if (match) match->add(g.data(), ref.data() + i * H, H);
  }
}

std::vector<double> as_doubles(const Tensor& host) {
  std::vector<double> v(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(host.data, host.dtype, int64_t(i));
  return v;
}

}  // namespace

// ---- host expert arithmetic ----

DenseHostWeights::DenseHostWeights(const Tensor& w) : w_(w) {
  if (!w.device.is_cpu() || w.ndim != 3 || !w.is_contiguous() ||
      (w.dtype != DType::bf16 && w.dtype != DType::f32))
    throw_arg_error(ErrorKind::invalid_argument, "bench moe-fp8 reference", "w",
                    "a contiguous host bf16/f32 [E, N, K] tensor", describe(w));
}

double DenseHostWeights::dot(int64_t e, int64_t n, const double* v) const {
  const int64_t K = w_.shape[2], base = (e * w_.shape[1] + n) * K;
  double sum = 0;
  if (w_.dtype == DType::bf16) {
    const uint16_t* p = w_.ptr<uint16_t>() + base;
    for (int64_t k = 0; k < K; ++k) sum += double(bf16_to_float(p[k])) * v[k];
  } else {
    const float* p = w_.ptr<float>() + base;
    for (int64_t k = 0; k < K; ++k) sum += double(p[k]) * v[k];
  }
  return sum;
}

Fp8HostWeights::Fp8HostWeights(const Tensor& q, const Tensor& scale) : q_(q), scale_(scale) {
  const bool ok = q.device.is_cpu() && scale.device.is_cpu() && q.ndim == 3 &&
                  q.dtype == DType::f8e4m3 && q.is_contiguous() && q.shape[1] % kBlock == 0 &&
                  q.shape[2] % kBlock == 0 && scale.dtype == DType::f32 && scale.ndim == 3 &&
                  scale.is_contiguous() && scale.shape[0] == q.shape[0] &&
                  scale.shape[1] == q.shape[1] / kBlock && scale.shape[2] == q.shape[2] / kBlock;
  if (!ok)
    throw_arg_error(ErrorKind::invalid_argument, "bench moe-fp8 reference", "q/scale",
                    "contiguous host f8e4m3 [E, N, K] and f32 [E, N/128, K/128]",
                    describe(q) + " and " + describe(scale));
  for (int i = 0; i < 256; ++i) lut_[i] = f8e4m3_to_float(static_cast<uint8_t>(i));
}

double Fp8HostWeights::dot(int64_t e, int64_t n, const double* v) const {
  const int64_t N = q_.shape[1], K = q_.shape[2], kb = K / kBlock;
  const uint8_t* p = q_.ptr<uint8_t>() + (e * N + n) * K;
  const float* s = scale_.ptr<float>() + (e * (N / kBlock) + n / kBlock) * kb;
  double sum = 0;
  for (int64_t b = 0; b < kb; ++b) {
    double part = 0;
    for (int64_t k = b * kBlock; k < (b + 1) * kBlock; ++k) part += double(lut_[p[k]]) * v[k];
    sum += part * double(s[b]);
  }
  return sum;
}

void host_swiglu_expert(const HostExpertWeights& w1, const HostExpertWeights& w2, int64_t e,
                        bool gate_last, const double* a, double* out) {
  const int64_t I = w1.rows() / 2, H = w2.rows();
  std::vector<double> c(static_cast<size_t>(I));
  for (int64_t i = 0; i < I; ++i) {
    const double first = w1.dot(e, i, a), second = w1.dot(e, I + i, a);
    c[i] = gate_last ? silu(second) * first : silu(first) * second;
  }
  for (int64_t h = 0; h < H; ++h) out[h] = w2.dot(e, h, c.data());
}

std::vector<double> fp8_round_trip_row(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b + kBlock <= x.size(); b += kBlock) {
    float amax = 0;
    for (size_t i = b; i < b + kBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = fp8rand::block_scale(amax);
    for (size_t i = b; i < b + kBlock; ++i)
      out[i] = double(f8e4m3_to_float(float_to_f8e4m3(x[i] / s))) * double(s);
  }
  return out;
}

// ---- seed003 ----

DsHostWeights copy_ds_weights_to_host(const DsWeights& w) {
  return {to_host(w.w1), to_host(w.w1_scale), to_host(w.w2), to_host(w.w2_scale)};
}

DsReference ds_reference(const DsModel& m, const DsInputs& in, const DsHostWeights& w, int samples,
                         uint64_t seed) {
  const int64_t T = in.hidden.view().shape[0], H = m.hidden, k = m.k;
  DsReference ref;
  ref.rows = moe_sample_tokens(T, samples, seed);
  const int64_t n = static_cast<int64_t>(ref.rows.size());
  ref.logits = host_rows(in.logits, ref.rows);
  ref.hidden = host_rows(in.hidden, ref.rows);
  ref.hidden_scale = host_columns(to_host(in.hidden_scale), ref.rows);
  ref.bias = to_host(in.bias);

  // Routing: the CPU reference op of moe_route_grouped (the bits every backend must agree on).
  OwnedTensor weights(DType::f32, {n, k}, Device::cpu()), ids(DType::i32, {n, k}, Device::cpu());
  ops::moe_route_grouped(ref.logits, ref.bias, m.n_group, m.topk_group, m.k,
                         m.routed_scaling_factor, weights, ids);

  // A = dequant(hidden): fp8 value times its 1 x 128 block's scale ([H / 128, n]).
  std::vector<std::vector<double>> a(static_cast<size_t>(n), std::vector<double>(size_t(H)));
  const uint8_t* q = ref.hidden.view().ptr<uint8_t>();
  const float* s = ref.hidden_scale.view().ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h)
      a[i][h] = double(f8e4m3_to_float(q[i * H + h])) * double(s[(h / kBlock) * n + i]);

  std::vector<Pair> pairs;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids.view().ptr<int32_t>()[i * k + j];
      if (e >= m.local_offset && e < m.local_offset + m.local_experts)
        pairs.push_back({i, e - m.local_offset, double(weights.view().ptr<float>()[i * k + j])});
    }
  const Fp8HostWeights w1(w.w1, w.w1_scale), w2(w.w2, w.w2_scale);
  ref.out = combine_pairs(pairs, a, w1, w2, /*gate_last=*/true, n);

  // The library's CPU reference, the rows split over the cores (each with its own contiguous
  // copies: a row's scales are a column of [H / 128, n]).
  ops::MoeFp8Options opt;
  opt.n_group = m.n_group;
  opt.topk_group = m.topk_group;
  opt.top_k = m.k;
  ref.cpu_op = OwnedTensor(DType::bf16, {n, H}, Device::cpu());
  parallel_for(n, [&](int64_t i) {
    const OwnedTensor scale = host_columns(ref.hidden_scale, {i});
    ops::moe_fp8_block_scale(ref.logits.view().slice(0, i, i + 1), ref.bias,
                             ref.hidden.view().slice(0, i, i + 1), scale, w.w1, w.w1_scale, w.w2,
                             w.w2_scale, m.local_offset, m.routed_scaling_factor, opt, Tensor{},
                             ref.cpu_op.view().slice(0, i, i + 1));
  });
  return ref;
}

Fp8DsCheck check_ds_case(const DsBuffers& b, const DsReference& ref) {
  Fp8DsCheck check;
  check.terms = b.terms;
  check.tokens = static_cast<int64_t>(ref.rows.size());
  const OwnedTensor got = host_rows(b.op_out, ref.rows);

  ErrorAccumulator fp32_acc, cpu_acc;
  MatchCounter fp32_match, cpu_match;
  accumulate(got, ref.out, &fp32_acc, &fp32_match, &check.nonfinite);
  accumulate(got, as_doubles(ref.cpu_op), &cpu_acc, &cpu_match, nullptr);
  check.vs_fp32 = fp32_acc.summary();
  check.match_fp32 = fp32_match.count();
  check.vs_cpu_op = cpu_acc.summary();
  check.match_cpu_op = cpu_match.count();

  // The pipeline of public ops against the op, every row.
  const OwnedTensor pipeline = to_host(b.out), op = to_host(b.op_out);
  ErrorAccumulator pipe_acc;
  accumulate(pipeline, as_doubles(op), &pipe_acc, nullptr, nullptr);
  check.pipeline_vs_op = pipe_acc.summary();
  return check;
}

// ---- seed001 in FP8 ----

Fp8LayerHostWeights copy_fp8_layer_weights_to_host(const Fp8LayerWeights& w) {
  return {to_host(w.gate_up), to_host(w.gate_up_scale), to_host(w.down),
          to_host(w.down_scale)};
}

Fp8LayerCheck check_fp8_layer(const MoeShape& s, const MoeHostWeights& bf16,
                              const Fp8LayerHostWeights& fp8, const MoeBuffers& b,
                              const Fp8LayerBuffers& b8, bool bf16_written, int samples,
                              uint64_t seed) {
  const MoeModel& m = s.model;
  const std::vector<int64_t> rows = moe_sample_tokens(s.tokens, samples, seed);
  const int64_t n = static_cast<int64_t>(rows.size()), k = m.k;
  const OwnedTensor x = host_rows(b.x, rows), ids = host_rows(b.topk_ids, rows),
                    weights = host_rows(b.topk_weights, rows);

  std::vector<std::vector<double>> a(static_cast<size_t>(n)), a8(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> xf = row_floats(x, i);
    a[i].assign(xf.begin(), xf.end());
    a8[i] = fp8_round_trip_row(xf);
  }
  std::vector<Pair> pairs;  // the layer's own routing (ids outside [0, E) contribute nothing)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids.view().ptr<int32_t>()[i * k + j];
      if (e >= 0 && e < m.experts)
        pairs.push_back({i, e, double(weights.view().ptr<float>()[i * k + j])});
    }
  const DenseHostWeights gu(bf16.gate_up), dn(bf16.down);
  const Fp8HostWeights gu8(fp8.gate_up, fp8.gate_up_scale), dn8(fp8.down, fp8.down_scale);
  const std::vector<double> ref = combine_pairs(pairs, a, gu, dn, false, n);
  const std::vector<double> ref8 = combine_pairs(pairs, a8, gu8, dn8, false, n);

  Fp8LayerCheck check;
  check.tokens = n;
  const OwnedTensor got = host_rows(b8.out, rows);
  ErrorAccumulator acc, acc8, acc_bf16;
  accumulate(got, ref, &acc, nullptr, &check.nonfinite);
  accumulate(got, ref8, &acc8, nullptr, nullptr);
  check.vs_fp32 = acc.summary();
  check.vs_fp8_fp32 = acc8.summary();
  if (bf16_written) {
    accumulate(host_rows(b.out, rows), ref, &acc_bf16, nullptr, nullptr);
    check.bf16_vs_fp32 = acc_bf16.summary();
  }
  return check;
}

}  // namespace braid::bench
