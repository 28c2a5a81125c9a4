// rope_apply: the frequency table (as Hugging Face transformers computes it), argument checks and
// dispatch.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "braid/ops.h"
#include "core/device_guard.h"
#include "ops/check.h"
#include "ops/cpu/cpu_ops.h"
#if BRAID_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace braid::ops {

namespace {

constexpr const char* kOp = "rope_apply";

std::string num(double v) {
  std::string s = std::to_string(v);
  // std::to_string prints 6 decimals; trim the trailing zeros so "4" reads as "4".
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

void require(bool ok, const char* arg, const std::string& expected, double given) {
  if (!ok) check::fail(ErrorKind::invalid_argument, kOp, arg, expected, num(given));
}

// Fills half and checks the values every scaling uses; returns the rotary dimension.
int check_config(const RopeConfig& c, int head_dim) {
  require(head_dim > 0 && head_dim % 2 == 0, "head_dim", "an even head_dim > 0", head_dim);
  require(c.theta > 0.0f && std::isfinite(c.theta), "config.theta", "theta > 0", c.theta);
  const int dim = c.rotary_dim == 0 ? head_dim : c.rotary_dim;
  require(c.rotary_dim >= 0 && dim % 2 == 0 && dim <= head_dim, "config.rotary_dim",
          "an even value <= head_dim (" + std::to_string(head_dim) + "), or 0 for head_dim",
          c.rotary_dim);
  require(dim / 2 <= kMaxRotaryHalf, "config.rotary_dim",
          "at most " + std::to_string(2 * kMaxRotaryHalf), dim);
  if (c.scaling == RopeScaling::none) return dim;

  require(c.factor > 0.0f && std::isfinite(c.factor), "config.factor", "factor > 0", c.factor);
  require(c.original_max_position > 0, "config.original_max_position", "a value > 0",
          c.original_max_position);
  if (c.scaling == RopeScaling::llama3) {
    require(c.low_freq_factor > 0.0f, "config.low_freq_factor", "a value > 0", c.low_freq_factor);
    require(c.high_freq_factor > 0.0f, "config.high_freq_factor", "a value > 0",
            c.high_freq_factor);
    require(c.high_freq_factor != c.low_freq_factor, "config.high_freq_factor",
            "a value different from low_freq_factor (" + num(c.low_freq_factor) + ")",
            c.high_freq_factor);
  } else {
    // yarn divides by ln(theta) and takes ln(original_max_position / (beta * 2 pi)).
    require(c.theta != 1.0f, "config.theta", "theta != 1 for yarn", c.theta);
    require(c.beta_fast > 0.0f, "config.beta_fast", "a value > 0", c.beta_fast);
    require(c.beta_slow > 0.0f, "config.beta_slow", "a value > 0", c.beta_slow);
    require(c.mscale >= 0.0f, "config.mscale", "a value >= 0 (0: unset)", c.mscale);
    require(c.mscale_all_dim >= 0.0f, "config.mscale_all_dim", "a value >= 0 (0: unset)",
            c.mscale_all_dim);
    require(c.attention_factor >= 0.0f, "config.attention_factor", "a value >= 0 (0: derive)",
            c.attention_factor);
  }
  return dim;
}

// transformers' _compute_llama3_parameters, applied to one default frequency.
double llama3_frequency(const RopeConfig& c, double inv_freq) {
  const double orig = c.original_max_position;
  const double low_freq_wavelen = orig / c.low_freq_factor;
  const double high_freq_wavelen = orig / c.high_freq_factor;
  const double wavelen = 2.0 * std::numbers::pi / inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / c.factor;  // low frequencies: interpolate
  if (wavelen < high_freq_wavelen) return inv_freq;            // high frequencies: keep
  const double smooth =
      (orig / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
  return (1.0 - smooth) * inv_freq / c.factor + smooth * inv_freq;
}

double yarn_mscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

// transformers' _compute_yarn_parameters: fills the table's frequencies and returns the
// attention factor.
double yarn_table(const RopeConfig& c, int dim, RopeTable& t) {
  const double theta = c.theta, factor = c.factor;
  double attention_factor = c.attention_factor;
  if (attention_factor <= 0.0) {
    if (c.mscale > 0.0f && c.mscale_all_dim > 0.0f)
      attention_factor = yarn_mscale(factor, c.mscale) / yarn_mscale(factor, c.mscale_all_dim);
    else
      attention_factor = yarn_mscale(factor, 1.0);
  }
  // The dimension index at which a frequency makes `rotations` turns over the original context.
  auto correction_dim = [&](double rotations) {
    return dim * std::log(c.original_max_position / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(theta));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a division by zero in the ramp

  for (int i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;
    const double pos_freq = std::pow(theta, 2.0 * i / dim);
    const double inv = (1.0 / (factor * pos_freq)) * (1.0 - extrapolation) +
                       (1.0 / pos_freq) * extrapolation;
    t.inv_freq[i] = static_cast<float>(inv);
  }
  return attention_factor;
}

}  // namespace

RopeTable rope_table(const RopeConfig& config, int head_dim) {
  const int dim = check_config(config, head_dim);
  RopeTable t;
  t.half = dim / 2;
  t.interleaved = config.interleaved;
  if (config.scaling == RopeScaling::yarn) {
    t.attention_scaling = static_cast<float>(yarn_table(config, dim, t));
    return t;
  }
  for (int i = 0; i < t.half; ++i) {
    double inv = 1.0 / std::pow(static_cast<double>(config.theta), 2.0 * i / dim);
    if (config.scaling == RopeScaling::llama3) inv = llama3_frequency(config, inv);
    t.inv_freq[i] = static_cast<float>(inv);
  }
  return t;
}

void rope_apply(const Tensor& q, const Tensor& k, const Tensor& positions, const RopeConfig& config,
                Stream stream) {
  check::defined(kOp, "q", q);
  check::defined(kOp, "positions", positions);
  check::dtype_in(kOp, "q", q, {DType::f32, DType::f16, DType::bf16});
  check::ndim_eq(kOp, "q", q, 3);
  if (q.strides[2] != 1)
    check::fail(ErrorKind::shape, kOp, "q", "a dense last dimension (stride 1)",
                "stride " + std::to_string(q.strides[2]));
  const int64_t n = q.size(0), head_dim = q.size(2);
  if (head_dim % 2 != 0 || head_dim == 0)
    check::fail(ErrorKind::shape, kOp, "q", "an even head_dim > 0 (last dimension)",
                shape_string(q));
  // k is optional: Tensor{} (no dimensions, no data) means "rotate q only".
  const bool has_k = !(k.ndim == 0 && k.data == nullptr);
  if (has_k) {
    check::defined(kOp, "k", k);
    check::dtype_eq(kOp, "k", k, q.dtype);
    check::shape_eq(kOp, "k", k, {n, -1, head_dim});
    if (k.strides[2] != 1)
      check::fail(ErrorKind::shape, kOp, "k", "a dense last dimension (stride 1)",
                  "stride " + std::to_string(k.strides[2]));
  }
  check::dtype_in(kOp, "positions", positions, {DType::i32, DType::i64});
  check::shape_eq(kOp, "positions", positions, {n});
  check::contiguous(kOp, "positions", positions);
  const RopeTable table = rope_table(config, static_cast<int>(head_dim));
  const Tensor none;
  Device dev = check::same_device(
      kOp, {{"q", &q}, {"k", has_k ? &k : &none}, {"positions", &positions}});
  if (q.numel() == 0 && (!has_k || k.numel() == 0)) return;
  if (dev.is_cpu()) return cpu::rope_apply(q, has_k ? k : none, positions, table);
#if BRAID_WITH_CUDA
  DeviceGuard guard(dev);
  cuda::rope_apply(q, has_k ? k : none, positions, table, stream);
#else
  (void)stream;
#endif
}

}  // namespace braid::ops
