// `braidinfer bench gemv`: the GEMV kernel (gemm's path for m <= 16) against cuBLASLt on the
// projections of Qwen2.5-0.5B, Llama-3.2-1B and Llama-2-7B, in one run with the copy bandwidth
// measured as the ceiling. bf16 in and out, no bias. Bytes per call = w + a read, out written.
// Both are timed as CUDA-graph replays (what a decode step does) over rotating input sets that
// together exceed twice the L2, so w comes from DRAM every time. --fp8 adds the fused kernel's
// fp8 path (gemv_plain on e4m3 weights with 128 x 128 block scales, bf16 activations) on the
// same shapes and Llama-3.1-8B's, in both activation settings (gemv_fused.h): quantized to e4m3
// on the fp8 tensor cores (the default, gemv_fp8_braid) and exact (gemv_fp8_exact_braid).
#include "bench/suites/gemv.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/timer.h"
#include "bench/harness/fp8_fill.h"
#include "bench/harness/host_copy.h"
#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"
#include "ops/cuda/gemm/gemm_lt.h"
#include "ops/cuda/gemv/gemv.h"
#include "ops/cuda/gemv/gemv_fused.h"

namespace braid::bench {

namespace {

constexpr uint64_t kSeed = 0x6e3f5eedull;

struct Projection {
  const char* model;
  const char* proj;
  int64_t n, k;  // w is [n, k]: [out_features, in_features]
};

const Projection kProjections[] = {
    {"qwen2.5-0.5b", "qkv", 1152, 896},      {"qwen2.5-0.5b", "o", 896, 896},
    {"qwen2.5-0.5b", "gate_up", 9728, 896},  {"qwen2.5-0.5b", "down", 896, 4864},
    {"qwen2.5-0.5b", "lm_head", 151936, 896},
    {"llama-3.2-1b", "qkv", 3072, 2048},     {"llama-3.2-1b", "o", 2048, 2048},
    {"llama-3.2-1b", "gate_up", 16384, 2048}, {"llama-3.2-1b", "down", 2048, 8192},
    {"llama-3.2-1b", "lm_head", 128256, 2048},
    {"llama-2-7b", "qkv", 12288, 4096},      {"llama-2-7b", "o", 4096, 4096},
    {"llama-2-7b", "gate_up", 22016, 4096},  {"llama-2-7b", "down", 4096, 11008},
    {"llama-2-7b", "lm_head", 32000, 4096},
};

struct Case {
  Projection p;
  int64_t m;
};

// Every projection at m = 1; the 1B and 7B MLP projections also at m = 4 and 16 (batched decode).
std::vector<Case> bench_cases() {
  std::vector<Case> cases;
  for (const Projection& p : kProjections) cases.push_back({p, 1});
  for (const Projection& p : kProjections) {
    const std::string model = p.model, proj = p.proj;
    if (model != "qwen2.5-0.5b" && (proj == "gate_up" || proj == "down"))
      for (int64_t m : {4, 16}) cases.push_back({p, m});
  }
  return cases;
}

std::string case_params(const Case& c) {
  return fmt::format("{} {} m={} {}x{}", c.p.model, c.p.proj, c.m, c.p.n, c.p.k);
}

double case_bytes(const Case& c) {  // w and a read, out written, all bf16
  return 2.0 * (double(c.p.n) * double(c.p.k) + double(c.m) * double(c.p.k) +
                double(c.m) * double(c.p.n));
}

struct GemvArgs {
  bool quick = false;
  bool sweep = false;
  bool fp8 = false;
};

// Graph replays of `batch` calls; batch sized so one sample is ~2 ms (~0.5 ms with --quick).
TimingConfig timing(const Case& c, bool quick, int sets) {
  const double est_us = std::max(2.0, case_bytes(c) / 2.5e6);  // at ~2.5 TB/s
  TimingConfig cfg;
  cfg.mode = TimingMode::graph;
  cfg.sets = sets;
  cfg.warmup = 2;
  cfg.reps = quick ? 5 : 20;
  cfg.batch = std::clamp(static_cast<int>((quick ? 500.0 : 2000.0) / est_us), 3, 200);
  return cfg;
}

// Rotating copies of a, w and the two outputs (GEMV's and cuBLASLt's).
struct Sets {
  std::vector<OwnedTensor> a, w, out, out_lt;
};

Sets make_sets(const Case& c, int sets, Device dev) {
  Sets s;
  for (int i = 0; i < sets; ++i) {
    s.a.emplace_back(DType::bf16, std::vector<int64_t>{c.m, c.p.k}, dev);
    s.w.emplace_back(DType::bf16, std::vector<int64_t>{c.p.n, c.p.k}, dev);
    s.out.emplace_back(DType::bf16, std::vector<int64_t>{c.m, c.p.n}, dev);
    s.out_lt.emplace_back(DType::bf16, std::vector<int64_t>{c.m, c.p.n}, dev);
    fill_uniform(s.a.back(), kSeed + 2 * i, -1.0f, 1.0f, {});
    fill_uniform(s.w.back(), kSeed + 2 * i + 1, -1.0f, 1.0f, {});
    fill_bytes(s.out.back(), 0xFF);
    fill_bytes(s.out_lt.back(), 0xFF);
  }
  return s;
}

// braid's output against cuBLASLt's over every set (rel_l2 = ‖braid − cuBLASLt‖ / ‖cuBLASLt‖).
// The outputs were poisoned with NaN before timing, so an unwritten element shows up as NaN here
// and the run stops: a time for a kernel that did not write its output means nothing.
ErrorSummary disagreement(const Sets& s, const std::string& what) {
  ErrorAccumulator acc;
  for (size_t i = 0; i < s.out.size(); ++i) {
    const std::vector<float> got = host_floats(s.out[i]);
    const std::vector<float> ref = host_floats(s.out_lt[i]);
    for (size_t j = 0; j < got.size(); ++j)
      if (!std::isfinite(got[j]) || !std::isfinite(ref[j]))
        throw Error(ErrorKind::internal,
                    fmt::format("bench gemv: {}: output element {} of set {} is not finite "
                                "after timing (left unwritten?)", what, j, i));
    const std::vector<double> ref64(ref.begin(), ref.end());
    acc.add(got.data(), ref64.data(), static_cast<int64_t>(got.size()));
  }
  return acc.summary();
}

ResultRow make_row(const char* name, const Case& c, const TimingConfig& cfg,
                          const Stats& st, std::string note) {
  ResultRow r;
  r.name = name;
  r.params = case_params(c);
  r.timing = timing_label(cfg) + fmt::format(", {} sets", cfg.sets);
  r.stats = st;
  r.bytes = case_bytes(c);
  r.flops = 2.0 * double(c.m) * double(c.p.n) * double(c.p.k);
  r.bound = Bound::memory;
  r.note = std::move(note);
  return r;
}

// Launch shapes to try next to the heuristic's (--sweep): the block's 8 warps as 8 tiles x 1
// slice of k, 4 x 2, 2 x 4 and 1 x 8, and fewer warps on one tile.
std::vector<cuda::GemvLaunch> sweep_launches(const cuda::GemvLaunch& chosen) {
  std::vector<cuda::GemvLaunch> all = {chosen};
  for (cuda::GemvLaunch l : {cuda::GemvLaunch{8, 1}, cuda::GemvLaunch{4, 2},
                             cuda::GemvLaunch{2, 4}, cuda::GemvLaunch{1, 8},
                             cuda::GemvLaunch{1, 4}, cuda::GemvLaunch{1, 2}}) {
    if (l.tiles_per_block != chosen.tiles_per_block || l.split != chosen.split) all.push_back(l);
  }
  return all;
}

void measure_case(const Case& c, const GemvArgs& args, const DeviceInfo& info, Device dev,
                  const std::function<void(ResultRow)>& add) {
  const int sets = rotating_sets(static_cast<size_t>(case_bytes(c)), info.l2_bytes, 2);
  const TimingConfig cfg = timing(c, args.quick, sets);
  const Sets s = make_sets(c, sets, dev);
  if (!cuda::gemv_applicable(s.a[0], s.w[0], Tensor{}, s.out[0]))
    throw Error(ErrorKind::internal, "bench gemv: " + case_params(c) + ": GEMV does not apply");
  const cuda::GemvLaunch chosen = cuda::gemv_launch_for(c.m, c.p.n, c.p.k);

  // One call each outside the graph: ops::gemm's checks, and cuBLASLt's plan (its first call
  // with a shape plans, which must not happen under capture).
  ops::gemm(s.a[0], s.w[0], Tensor{}, s.out[0]);
  cuda::gemm_cublaslt(s.a[0], s.w[0], Tensor{}, s.out_lt[0], {});
  const Stats braid = time_launches(
      [&](int i, Stream st) { ops::gemm(s.a[i], s.w[i], Tensor{}, s.out[i], st); }, cfg);
  const Stats lt = time_launches(
      [&](int i, Stream st) { cuda::gemm_cublaslt(s.a[i], s.w[i], Tensor{}, s.out_lt[i], st); },
      cfg);
  Accuracy accuracy;
  accuracy.error = disagreement(s, case_params(c));
  accuracy.reference = "cuBLASLt's output (bf16, fp32 accumulation), every set";
  accuracy.rel_l2_tolerance = rel_l2_tolerance_for(2);
  const double diff = accuracy.error.rel_l2;
  if (!accuracy.passed())
    throw Error(ErrorKind::internal, fmt::format("bench gemv: {}: GEMV and cuBLASLt disagree "
                                                 "(relative difference {:.3g})",
                                                 case_params(c), diff));
  ResultRow row = make_row("gemv_braid", c, cfg, braid,
                                  fmt::format("x{:.2f} vs cuBLASLt; {}; diff {:.1e}",
                                              lt.median_us / braid.median_us,
                                              cuda::describe(chosen), diff));
  row.accuracy = accuracy;
  add(std::move(row));
  add(make_row("gemv_cublaslt", c, cfg, lt,
               cuda::gemm_plan_description(s.a[0], s.w[0], Tensor{}, s.out_lt[0])));

  if (!args.sweep) return;
  TimingConfig sweep_cfg = cfg;
  sweep_cfg.reps = 10;
  sweep_cfg.batch = std::max(3, cfg.batch / 2);
  for (const cuda::GemvLaunch& l : sweep_launches(chosen)) {
    const Stats st = time_launches(
        [&](int i, Stream str) { cuda::gemv(s.a[i], s.w[i], Tensor{}, s.out[i], l, str); },
        sweep_cfg);
    add(make_row("gemv_sweep", c, sweep_cfg, st, cuda::describe(l)));
  }
  disagreement(s, case_params(c) + " (sweep)");
}

// The fused decode ops (ops.h, "Fused decode ops") against the primitive ops they replace, on
// Llama-3.2-1B's shapes at m = 1: input_layernorm + qkv_proj, o_proj + residual add, and
// silu_mul + down_proj + residual add; and the greedy head (final norm + lm_head + argmax) of
// Qwen2.5-0.5B and Llama-3.2-1B against rms_norm + gemm to f32 logits + argmax. Same timing as the GEMV rows (graph replays over rotating
// sets); bytes = the fused op's (w, the activations, the residual read and written), so both rows
// of a pair have the same byte count and their GB/s compare directly.
void measure_fused(bool quick, const DeviceInfo& info, Device dev,
                   const std::function<void(ResultRow)>& add) {
  struct FusedCase {
    const char* op;
    Projection p;
    int64_t act_cols;  // columns of the activation input: k, or 2k for swiglu's [gate | up]
  };
  const FusedCase cases[] = {
      {"rms_norm_gemm", {"llama-3.2-1b", "norm+qkv", 3072, 2048}, 2048},
      {"gemm_add", {"llama-3.2-1b", "o+residual", 2048, 2048}, 2048},
      {"swiglu_gemm_add", {"llama-3.2-1b", "silu_mul+down+residual", 2048, 8192}, 16384},
      {"rms_norm_gemm_argmax", {"qwen2.5-0.5b", "norm+lm_head+argmax", 151936, 896}, 896},
      {"rms_norm_gemm_argmax", {"llama-3.2-1b", "norm+lm_head+argmax", 128256, 2048}, 2048},
  };
  for (const FusedCase& f : cases) {
    const Case c{f.p, 1};
    const bool head = std::string(f.op) == "rms_norm_gemm_argmax";  // reads w and x only
    const double bytes = 2.0 * (double(c.p.n) * double(c.p.k) + double(f.act_cols) +
                                (head ? 0.0 : 2.0 * double(c.p.n)));
    const int sets = rotating_sets(static_cast<size_t>(bytes), info.l2_bytes, 2);
    const TimingConfig cfg = timing(c, quick, sets);
    std::vector<OwnedTensor> x, w, nw, res, act, scratch, logits, ids;
    for (int i = 0; i < sets; ++i) {
      x.emplace_back(DType::bf16, std::vector<int64_t>{1, f.act_cols}, dev);
      w.emplace_back(DType::bf16, std::vector<int64_t>{c.p.n, c.p.k}, dev);
      nw.emplace_back(DType::bf16, std::vector<int64_t>{c.p.k}, dev);
      res.emplace_back(DType::bf16, std::vector<int64_t>{1, c.p.n}, dev);
      act.emplace_back(DType::bf16, std::vector<int64_t>{1, c.p.k}, dev);
      scratch.emplace_back(DType::bf16, std::vector<int64_t>{1, c.p.n}, dev);
      if (head) {
        logits.emplace_back(DType::f32, std::vector<int64_t>{1, c.p.n}, dev);
        ids.emplace_back(DType::i32, std::vector<int64_t>{1}, dev);
      }
      const float a = 2.0f / std::sqrt(float(c.p.k));
      fill_uniform(x.back(), kSeed + 3 * i, -1.0f, 1.0f, {});
      fill_uniform(w.back(), kSeed + 3 * i + 1, -a, a, {});
      fill_uniform(nw.back(), kSeed + 3 * i + 2, 0.5f, 1.5f, {});
      fill_uniform(res.back(), kSeed + 3 * i + 2, -1.0f, 1.0f, {});
    }
    const std::string op = f.op;
    LaunchFn fused, unfused;
    if (op == "rms_norm_gemm") {  // res holds qkv's output here
      fused = [&](int i, Stream s) {
        ops::rms_norm_gemm(x[i], nw[i], 1e-5f, w[i], Tensor{}, res[i], act[i], s);
      };
      unfused = [&](int i, Stream s) {
        ops::rms_norm(x[i], nw[i], 1e-5f, act[i], s);
        ops::gemm(act[i], w[i], Tensor{}, res[i], s);
      };
    } else if (head) {  // the previous decode step's head: f32 logits, then argmax
      fused = [&](int i, Stream s) {
        ops::rms_norm_gemm_argmax(x[i], nw[i], 1e-5f, w[i], ids[i], logits[i], act[i], s);
      };
      unfused = [&](int i, Stream s) {
        ops::rms_norm_gemm(x[i], nw[i], 1e-5f, w[i], Tensor{}, logits[i], act[i], s);
        ops::argmax(logits[i], ids[i], s);
      };
    } else if (op == "gemm_add") {
      fused = [&](int i, Stream s) { ops::gemm_add(x[i], w[i], Tensor{}, res[i], scratch[i], s); };
      unfused = [&](int i, Stream s) {
        ops::gemm(x[i], w[i], Tensor{}, scratch[i], s);
        ops::add_inplace(scratch[i], res[i], s);
      };
    } else {
      fused = [&](int i, Stream s) { ops::swiglu_gemm_add(x[i], w[i], res[i], act[i], scratch[i], s); };
      unfused = [&](int i, Stream s) {
        ops::silu_mul(x[i], act[i], s);
        ops::gemm(act[i], w[i], Tensor{}, scratch[i], s);
        ops::add_inplace(scratch[i], res[i], s);
      };
    }
    fused(0, {});  // the checks, outside the graph
    unfused(0, {});
    const Stats fs = time_launches(fused, cfg);
    const Stats us = time_launches(unfused, cfg);
    ResultRow fr = make_row("fused_braid", c, cfg, fs,
                                   fmt::format("{}: x{:.2f} vs unfused", op, us.median_us / fs.median_us));
    ResultRow ur = make_row("unfused_braid", c, cfg, us,
                                   op + (head ? ": rms_norm_gemm to f32 logits, then argmax"
                                              : ": primitive ops in sequence"));
    fr.bytes = ur.bytes = bytes;
    add(std::move(fr));
    add(std::move(ur));
  }
}

// --fp8: every bf16 case's shape again with e4m3 weights and 128 x 128 block scales (gemv_plain,
// ops::gemm's decode path for them), and Llama-3.1-8B's projections at m = 1 (the FP8 checkpoints'
// usual size). Bytes = n k (fp8) + 4 ceil(n/128) (k/128) (scales) + 2 m k + 2 m n.
double fp8_bytes(const Case& c) {
  const double n = double(c.p.n), k = double(c.p.k), m = double(c.m);
  return n * k + 4.0 * std::ceil(n / 128.0) * (k / 128.0) + 2.0 * m * k + 2.0 * m * n;
}

std::vector<Case> fp8_cases() {
  std::vector<Case> cases = bench_cases();
  for (const Projection& p : {Projection{"llama-3.1-8b", "qkv", 6144, 4096},
                              Projection{"llama-3.1-8b", "o", 4096, 4096},
                              Projection{"llama-3.1-8b", "gate_up", 28672, 4096},
                              Projection{"llama-3.1-8b", "down", 4096, 14336}})
    cases.push_back({p, 1});
  return cases;
}

// Times gemv_plain on fp8 weights over rotating sets. Set 0's weights are a bf16 matrix quantized
// per block, and its output is checked against the bf16 GEMV on the unquantized matrix: the
// difference is fp8's quantization error (~3% relative for e4m3's 3 mantissa bits, averaged), so
// this catches a broken kernel, not a rounding; tests/ops/gemm/test_gemv_fp8.cpp checks it exactly.
void measure_fp8_case(const Case& c, bool quick, const DeviceInfo& info, Device dev,
                      const std::function<void(ResultRow)>& add) {
  const int sets = rotating_sets(static_cast<size_t>(fp8_bytes(c)), info.l2_bytes, 2);
  TimingConfig cfg = timing(c, quick, sets);
  const float stddev = 1.0f / std::sqrt(float(c.p.k));
  std::vector<OwnedTensor> a, w, scale, out;
  for (int i = 0; i < sets; ++i) {
    a.emplace_back(DType::bf16, std::vector<int64_t>{c.m, c.p.k}, dev);
    w.emplace_back(DType::f8e4m3, std::vector<int64_t>{c.p.n, c.p.k}, dev);
    scale.emplace_back(DType::f32, std::vector<int64_t>{(c.p.n + 127) / 128, c.p.k / 128}, dev);
    out.emplace_back(DType::bf16, std::vector<int64_t>{c.m, c.p.n}, dev);
    fill_uniform(a.back(), kSeed + 2 * i, -1.0f, 1.0f, {});
    if (i > 0) random_weight_blocks(w.back(), scale.back(), kSeed + 2 * i + 1, stddev, {});
    fill_bytes(out.back(), 0xFF);
  }
  OwnedTensor src(DType::bf16, std::vector<int64_t>{c.p.n, c.p.k}, dev);
  OwnedTensor ref(DType::bf16, std::vector<int64_t>{c.m, c.p.n}, dev);
  fill_normal(src, kSeed + 1, 0.0f, stddev, {});
  quantize_weight_blocks(src, w[0], scale[0], {});
  if (!cuda::gemv_fused_applicable(a[0], c.p.k, w[0]))
    throw Error(ErrorKind::internal, "bench gemv: " + case_params(c) + ": fp8 GEMV does not apply");
  ops::gemm(a[0], src, Tensor{}, ref);

  const cuda::Fp8GemvActivations saved = cuda::fp8_gemv_activations();
  for (auto acts : {cuda::Fp8GemvActivations::e4m3, cuda::Fp8GemvActivations::exact}) {
    cuda::set_fp8_gemv_activations(acts);
    const bool exact = acts == cuda::Fp8GemvActivations::exact;
    const bool quantized = cuda::gemv_fp8_quantizes(c.m, c.p.n, c.p.k);
    const Stats st = time_launches(
        [&](int i, Stream s) { cuda::gemv_plain(a[i], w[i], scale[i], Tensor{}, out[i], s); }, cfg);
    cuda::set_fp8_gemv_activations(saved);
    const std::vector<float> got = host_floats(out[0]), want = host_floats(ref);
    ErrorAccumulator acc;
    for (size_t j = 0; j < got.size(); ++j)
      if (!std::isfinite(got[j]))
        throw Error(ErrorKind::internal, fmt::format("bench gemv: {} fp8: output element {} is not "
                                                     "finite after timing", case_params(c), j));
    const std::vector<double> want64(want.begin(), want.end());
    acc.add(got.data(), want64.data(), static_cast<int64_t>(got.size()));
    Accuracy accuracy;
    accuracy.error = acc.summary();
    accuracy.reference = "bf16 GEMV on the weights before fp8 quantization (set 0)";
    accuracy.rel_l2_tolerance = 0.1;
    if (!accuracy.passed())
      throw Error(ErrorKind::internal,
                  fmt::format("bench gemv: {} fp8: relative difference {:.3g} from the bf16 product",
                              case_params(c), accuracy.error.rel_l2));
    ResultRow row = make_row(exact ? "gemv_fp8_exact_braid" : "gemv_fp8_braid", c, cfg, st,
                             fmt::format("e4m3 w, 128x128 block scales, {} activations; diff vs "
                                         "bf16 weights {:.1e}", quantized ? "e4m3" : "bf16",
                                         accuracy.error.rel_l2));
    row.bytes = fp8_bytes(c);
    row.accuracy = accuracy;
    add(std::move(row));
  }
}

// One line per case: both times, rates, % of the copy ceiling and the speed-up.
std::string summary(const Report& run) {
  auto find = [&](const std::string& name, const std::string& params) -> const ResultRow* {
    for (const auto& r : run.rows)
      if (r.name == name && r.params == params) return &r;
    return nullptr;
  };
  auto pct = [&](const ResultRow& r) {
    const auto p = percent_of_ceiling(r, run.ceilings);
    return p ? fmt::format("{:.0f}%", *p) : std::string("-");
  };
  std::string out = fmt::format("{:<32} {:>9} {:>8} {:>6} {:>9} {:>8} {:>6} {:>8}\n", "case",
                                "braid us", "GB/s", "%copy", "cuBLASLt", "GB/s", "%copy",
                                "speed-up");
  for (const Case& c : bench_cases()) {
    const ResultRow* b = find("gemv_braid", case_params(c));
    const ResultRow* l = find("gemv_cublaslt", case_params(c));
    if (!b || !l) continue;
    out += fmt::format("{:<32} {:>9} {:>8.0f} {:>6} {:>9} {:>8.0f} {:>6} {:>7.2f}x\n",
                       case_params(c), format_us(b->stats.median_us),
                       achieved_gbps(*b).value_or(0), pct(*b),
                       format_us(l->stats.median_us), achieved_gbps(*l).value_or(0),
                       pct(*l), l->stats.median_us / b->stats.median_us);
  }
  bool fp8_header = false;
  for (const Case& c : fp8_cases()) {
    const ResultRow* f = find("gemv_fp8_braid", case_params(c));
    if (!f) continue;
    if (!fp8_header)
      out += fmt::format("\n{:<32} {:>9} {:>8} {:>6} {:>9} {:>9} {:>8}\n", "case (fp8 w)",
                         "fp8 us", "GB/s", "%copy", "exact us", "bf16 us", "speed-up");
    fp8_header = true;
    const ResultRow* b = find("gemv_braid", case_params(c));
    const ResultRow* e = find("gemv_fp8_exact_braid", case_params(c));
    out += fmt::format("{:<32} {:>9} {:>8.0f} {:>6} {:>9} {:>9} {:>8}\n", case_params(c),
                       format_us(f->stats.median_us), achieved_gbps(*f).value_or(0), pct(*f),
                       e ? format_us(e->stats.median_us) : std::string("-"),
                       b ? format_us(b->stats.median_us) : std::string("-"),
                       b ? fmt::format("{:.2f}x", b->stats.median_us / f->stats.median_us)
                         : std::string("-"));
  }
  return out;
}

SuiteResult run_gemv_bench(const GemvArgs& args) {
  std::string reason;
  const auto info = query_device(0, &reason);
  if (!info) return not_measured("braidinfer bench gemv: " + reason);
  const Device dev = Device::cuda(0);
  Report run = start_report(args.quick ? "gemv (quick)" : "gemv", *info);
  auto add = [&](ResultRow r) { record_row(run, std::move(r)); };
  fmt::print(stderr, "braidinfer bench gemv{}{}: measuring...\n", args.quick ? " --quick" : "",
             args.sweep ? " --sweep" : "");
  run.ceilings = measure_ceilings(args.quick, 0, false, false, add);
  cuda_allocator::empty_cache();
  for (const Case& c : bench_cases()) {
    measure_case(c, args, *info, dev, add);
    cuda_allocator::empty_cache();
  }
  measure_fused(args.quick, *info, dev, add);
  cuda_allocator::empty_cache();
  if (args.fp8)
    for (const Case& c : fp8_cases()) {
      measure_fp8_case(c, args.quick, *info, dev, add);
      cuda_allocator::empty_cache();
    }

  return report_result(
      run, summary(run) + "\n" +
               fmt::format("bytes = w + a read + out written (bf16); % = of the copy ceiling, "
                           "{:.2f} TB/s; times are CUDA-graph replays (launch gaps included)\n",
                           run.ceilings.copy_gbps / 1000));
}

}  // namespace

SuiteRun gemv_command(CLI::App& cmd) {
  auto args = std::make_shared<GemvArgs>();
  cmd.add_flag("--quick", args->quick, "Fewer repetitions (smoke test)");
  cmd.add_flag("--sweep", args->sweep, "Also time other launch shapes of the kernel (tuning)");
  cmd.add_flag("--fp8", args->fp8,
               "Also time the fused GEMV on fp8 e4m3 weights with 128x128 block scales");
  return [args] { return run_gemv_bench(*args); };
}

}  // namespace braid::bench
