// Reference mixture-of-experts ops (see ops.h): the router's softmax and top-k, and the experts'
// SwiGLU MLPs (whole, moe_experts; or as the grouped GEMMs of a permuted batch, moe_grouped_gemm)
// combined with the routing weights. Plain loops; dot products in fp64, rounded where the contract
// rounds.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

namespace {

// n elements of a `t` buffer from element `offset` on, as floats (the dtype switch once per row,
// not per element: these loops are the reference for Qwen3-MoE-sized tests).
void row_to_floats(const void* base, DType t, int64_t offset, int64_t n, float* dst) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, static_cast<const float*>(base) + offset, static_cast<size_t>(n) * 4);
      return;
    case DType::bf16: {
      const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(p[i]);
      return;
    }
    case DType::f16: {
      const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(p[i]);
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as_float(base, t, offset + i);
  }
}

// Four partial sums, so the loop is not one long chain of dependent adds.
double dot(const float* x, const float* y, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(x[i]) * y[i];
    s1 += static_cast<double>(x[i + 1]) * y[i + 1];
    s2 += static_cast<double>(x[i + 2]) * y[i + 2];
    s3 += static_cast<double>(x[i + 3]) * y[i + 3];
  }
  for (; i < n; ++i) s0 += static_cast<double>(x[i]) * y[i];
  return (s0 + s1) + (s2 + s3);
}

// An fp8 weight row's dot product with x: per 128-column block, the exact sum of the e4m3 values
// times x, times the block's scale, and times x's own scale for the block when x is quantized
// (x_scales defined; fp64 throughout: every product and scaling is exact).
double dot_block_scaled(const float* w, const float* x, int64_t n, const float* scales,
                        const float* x_scales = nullptr) {
  constexpr int64_t B = ops::kFp8Block;
  double s = 0;
  for (int64_t c = 0; c < n; c += B) {
    const double scale = static_cast<double>(scales[c / B]) * (x_scales ? x_scales[c / B] : 1.0f);
    s += scale * dot(w + c, x + c, std::min(B, n - c));
  }
  return s;
}

// v[0, n) (n a multiple of 128) quantized in place by moe_fp8_quantize's one-term rule: each
// element becomes its e4m3 value, each 128-column block's scale goes to scales[block].
void quantize_blocks(float* v, int64_t n, float* scales) {
  constexpr int64_t B = ops::kFp8Block;
  uint8_t codes[B];
  for (int64_t b = 0; b < n / B; ++b) {
    fp8_quantize_block(v + b * B, 1, codes, 0, scales + b, 0);
    for (int64_t j = 0; j < B; ++j) v[b * B + j] = f8e4m3_to_float(codes[j]);
  }
}

}  // namespace

void router_softmax(const float* x, int64_t n, float* p) {
  // Softmax in fp32 with the maximum subtracted (a NaN logit makes the whole row NaN).
  float m = -INFINITY;
  for (int64_t e = 0; e < n; ++e) m = std::fmax(m, x[e]);
  double sum = 0;
  for (int64_t e = 0; e < n; ++e) {
    p[e] = std::exp(x[e] - m);
    sum += p[e];
  }
  for (int64_t e = 0; e < n; ++e) p[e] = static_cast<float>(p[e] / sum);
}

void moe_route_topk_softmax(const Tensor& logits, int k, bool renormalize,
                            const Tensor& topk_weights, const Tensor& topk_ids) {
  const int64_t tokens = logits.shape[0], experts = logits.shape[1];
  std::vector<float> x(static_cast<size_t>(experts)), p(static_cast<size_t>(experts));
  std::vector<bool> chosen(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    row_to_floats(logits.data, logits.dtype, t * logits.row_stride(), experts, x.data());
    router_softmax(x.data(), experts, p.data());

    // k rounds of "largest remaining logit, lowest index among equals"; NaN ranks lowest.
    std::fill(chosen.begin(), chosen.end(), false);
    float* w = topk_weights.ptr<float>() + t * k;
    int32_t* ids = topk_ids.ptr<int32_t>() + t * k;
    for (int j = 0; j < k; ++j) {
      int64_t best = -1;
      float best_key = 0;
      for (int64_t e = 0; e < experts; ++e) {
        if (chosen[e]) continue;
        const float key = std::isnan(x[e]) ? -INFINITY : x[e];
        if (best < 0 || key > best_key) {
          best = e;
          best_key = key;
        }
      }
      chosen[best] = true;
      ids[j] = static_cast<int32_t>(best);
      w[j] = p[best];
    }
    if (renormalize) {
      float chosen_sum = 0;  // fp32, in order, as the kernel sums them
      for (int j = 0; j < k; ++j) chosen_sum += w[j];
      for (int j = 0; j < k; ++j) w[j] /= chosen_sum;
    }
  }
}

void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& gate_up_scale,
                 const Tensor& down_scale, const ops::MoeExpertsExtras& extras,
                 const Tensor& workspace, const Tensor& out) {
  const int64_t tokens = x.shape[0], hidden = x.shape[1];
  const int64_t k = topk_ids.shape[1], inter = down.shape[2];
  const DType dt = x.dtype, wt = gate_up.dtype;
  // The shared experts' MLP (S = shared * I wide) as `shared` experts of width I: piece j is
  // gate/up rows [j I, (j + 1) I) and [S + j I, S + (j + 1) I), down columns [j I, (j + 1) I).
  const Tensor& sgu = extras.shared_gate_up.w;
  const Tensor& sdn = extras.shared_down.w;
  const int64_t shared = sgu.data ? sgu.shape[0] / 2 / inter : 0, width = shared * inter;
  // fp8 weights: one scale per 128 x 128 block, [E, 2I / 128, H / 128] and [E, H / 128, I / 128].
  const bool fp8 = wt == DType::f8e4m3;
  const int64_t B = ops::kFp8Block;
  // Quantized activations (fp8, routed experts only): x[t] and the routed h rows as their e4m3
  // values (xq; h in place), with one scale per 128-column block (x_scales; h_scales by row).
  const bool quantized = fp8 && extras.quantize_activations;
  std::vector<float> x_scales(quantized ? static_cast<size_t>(hidden / B) : 0);
  std::vector<float> h_scales(quantized ? static_cast<size_t>(tokens * k * (inter / B)) : 0);
  // w's row `row` of a [rows, n] matrix . v[0, n), the row's scales (fp8) starting at column col0
  // of a matrix `cols` wide: plain, or per scale block for fp8 (times v's own, v_scales defined).
  auto row_dot = [&](const float* w, const float* v, int64_t n, const Tensor& scale, int64_t row,
                     int64_t cols, int64_t col0, const float* v_scales) {
    if (!fp8) return dot(w, v, n);
    return dot_block_scaled(w, v, n, scale.ptr<float>() + (row / B) * (cols / B) + col0 / B, v_scales);
  };
  std::vector<float> xf(static_cast<size_t>(hidden)), gate(static_cast<size_t>(hidden)),
      up(static_cast<size_t>(hidden)), row(static_cast<size_t>(inter));
  std::vector<float> xq;  // quantized: x[t]'s e4m3 values
  float* ws = workspace.ptr<float>();
  // h of gate_up rows (gate_row, up_row) of `w` for the token in x (its block scales, or null), as
  // the kernels round it.
  auto swiglu_row = [&](const Tensor& w, const Tensor& scale, int64_t gate_row, int64_t up_row,
                        const float* x, const float* x_block_scales) {
    row_to_floats(w.data, wt, gate_row * hidden, hidden, gate.data());
    row_to_floats(w.data, wt, up_row * hidden, hidden, up.data());
    // g and u rounded as a gemm's output would be; silu(g) * u in fp32, rounded once.
    const float g = quantize(dt, static_cast<float>(row_dot(gate.data(), x, hidden, scale, gate_row,
                                                            hidden, 0, x_block_scales)));
    const float u = quantize(dt, static_cast<float>(row_dot(up.data(), x, hidden, scale, up_row,
                                                            hidden, 0, x_block_scales)));
    return quantize(dt, g / (1.0f + std::exp(-g)) * u);
  };
  // Workspace row p's h, and a routed row's block scales when quantized.
  auto h_row = [&](int64_t p) { return ws + p * inter; };
  auto h_scale = [&](int64_t p) { return quantized ? h_scales.data() + p * (inter / B) : nullptr; };

  for (int64_t t = 0; t < tokens; ++t) {
    // Every h of this token first: out may be x, and x[t] is not needed once they exist.
    row_to_floats(x.data, dt, t * x.row_stride(), hidden, xf.data());
    // The routed experts' input: x[t] itself, or its quantized values.
    const float* x_routed = xf.data();
    const float* x_routed_scales = nullptr;
    if (quantized) {
      xq = xf;
      quantize_blocks(xq.data(), hidden, x_scales.data());
      x_routed = xq.data();
      x_routed_scales = x_scales.data();
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = topk_ids.ptr<int32_t>()[t * k + j];
      if (e < 0) continue;  // kMoeNotLocal: another rank's expert adds nothing
      float* h = h_row(t * k + j);
      for (int64_t i = 0; i < inter; ++i)
        h[i] = swiglu_row(gate_up, gate_up_scale, e * 2 * inter + i, e * 2 * inter + inter + i,
                          x_routed, x_routed_scales);
      if (quantized) quantize_blocks(h, inter, h_scale(t * k + j));
    }
    for (int64_t j = 0; j < shared; ++j) {
      float* h = h_row(tokens * k + t * shared + j);
      for (int64_t i = 0; i < inter; ++i)
        h[i] = swiglu_row(sgu, extras.shared_gate_up.scale, j * inter + i, width + j * inter + i,
                          xf.data(), nullptr);
    }
    for (int64_t n = 0; n < hidden; ++n) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = topk_ids.ptr<int32_t>()[t * k + j];
        if (e < 0) continue;
        row_to_floats(down.data, wt, (e * hidden + n) * inter, inter, row.data());
        const double y = row_dot(row.data(), h_row(t * k + j), inter, down_scale, e * hidden + n,
                                 inter, 0, h_scale(t * k + j));
        acc += static_cast<double>(topk_weights.ptr<float>()[t * k + j]) * y;
      }
      float moe = static_cast<float>(acc);
      if (shared > 0) {
        double sh = 0;
        for (int64_t j = 0; j < shared; ++j) {
          row_to_floats(sdn.data, wt, n * width + j * inter, inter, row.data());
          sh += row_dot(row.data(), h_row(tokens * k + t * shared + j), inter,
                        extras.shared_down.scale, n, width, j * inter, nullptr);
        }
        moe = quantize(dt, quantize(dt, moe) + quantize(dt, static_cast<float>(sh)));
      }
      if (extras.residual.data) {
        const float r = load_as_float(extras.residual.at(t * extras.residual.row_stride()), dt, n);
        moe = quantize(dt, r + quantize(dt, moe));
      }
      store_from_float(out.at(t * out.row_stride()), dt, n, moe);
    }
  }
}

// Weight row by weight row, so each is converted once and applied to all of its expert's rows.
void moe_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& expert_offsets,
                      ops::MoeActivation activation, const Tensor& y) {
  const int64_t k = x.shape[1], experts = w.shape[0], w_rows = w.shape[1];
  const bool swiglu = activation == ops::MoeActivation::swiglu;
  const int64_t out_cols = swiglu ? w_rows / 2 : w_rows;
  const DType dt = x.dtype;
  const int32_t* offsets = expert_offsets.ptr<int32_t>();
  std::vector<float> wa(static_cast<size_t>(k)), wb(static_cast<size_t>(k));
  std::vector<float> xs;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t r0 = offsets[e], rows = offsets[e + 1] - r0;
    xs.resize(static_cast<size_t>(rows * k));
    for (int64_t r = 0; r < rows; ++r)
      row_to_floats(x.data, dt, (r0 + r) * x.row_stride(), k, xs.data() + r * k);
    for (int64_t n = 0; n < out_cols; ++n) {
      row_to_floats(w.data, dt, (e * w_rows + n) * k, k, wa.data());
      if (swiglu) row_to_floats(w.data, dt, (e * w_rows + out_cols + n) * k, k, wb.data());
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xs.data() + r * k;
        float v = static_cast<float>(dot(wa.data(), xr, k));
        if (swiglu) {
          // g and u rounded as a gemm's outputs would be; silu(g) * u in fp32, rounded once.
          const float g = quantize(dt, v), u = quantize(dt, static_cast<float>(dot(wb.data(), xr, k)));
          v = g / (1.0f + std::exp(-g)) * u;
        }
        store_from_float(y.at((r0 + r) * y.row_stride()), dt, n, v);
      }
    }
  }
}

}  // namespace braid::cpu
