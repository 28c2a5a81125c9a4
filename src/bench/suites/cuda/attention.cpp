// `braidinfer bench attention`: ops::attention_prefill (FlashAttention forward, K/V contiguous)
// on the six bf16 shapes of ANCHORS.md's "Attention forward" table, read against the copy and
// bf16 GEMM ceilings measured in the same run. Every case is also checked: its whole output for
// NaN/Inf, and a subset of it (a few dozen query rows of two heads, in the first and last
// sequence) against an exact fp64 reference computed here from the same bf16 inputs.
//   --sweep  also lengths 512 .. 16384 at 32 heads, d128, batch = 16384 / length, causal and full
//   --gqa    also the six shapes with a quarter of the KV heads (GQA 4:1)
// FLOPs count only the score entries a causal mask leaves (S (S + 1) / 2 per head), see
// suites/attention.h; bytes = q, k, v read + out written.
#include "bench/suites/attention.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/timer.h"
#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {

namespace {

constexpr const char* kCmd = "braidinfer bench attention";
constexpr uint64_t kSeed = 0xa77e45eedull;
constexpr int kValidationRows = 64;  // query rows checked per validated sequence
// DESIGN.md's bf16 tolerance for ||out - ref|| / ||ref||; the log-sum-exp is computed in fp32
// by any kernel, so anything near this bound is a bug, not rounding.
constexpr double kRelL2Tolerance = 1e-2;
constexpr double kLseTolerance = 1e-3;

// ANCHORS.md, H100 (2026-11-22), torch SDPA backends.
struct Peer {
  double cudnn_ms, cudnn_tflops, fa2_ms, fa2_tflops;
};

struct Case {
  PrefillShape shape;
  std::optional<Peer> peer;
  std::string note;
};

PrefillShape mha(int64_t batch, int64_t seq, int64_t heads, int64_t dim, bool causal) {
  return {batch, seq, heads, heads, dim, causal};
}

// As ANCHORS.md writes them: three decimals under a millisecond, two above.
std::string anchor_ms(double ms) {
  return ms < 1 ? fmt::format("{:.3f}", ms) : fmt::format("{:.2f}", ms);
}

std::vector<Case> anchor_cases() {
  const Peer p[] = {{0.587, 468, 0.918, 300}, {0.350, 393, 0.519, 265}, {14.57, 604, 24.30, 362},
                    {8.19, 537, 13.27, 331},  {6.98, 631, 12.59, 349},  {3.66, 601, 6.65, 331}};
  const PrefillShape shapes[] = {
      mha(16, 2048, 16, 64, false), mha(16, 2048, 16, 64, true),  mha(32, 4096, 32, 128, false),
      mha(32, 4096, 32, 128, true), mha(4, 8192, 32, 128, false), mha(1, 16384, 32, 128, true)};
  std::vector<Case> cases;
  for (int i = 0; i < 6; ++i)
    cases.push_back({shapes[i], p[i],
                     fmt::format("H100 cuDNN {} ms ({:.0f} TF/s), FA2 {} ms ({:.0f} TF/s)",
                                 anchor_ms(p[i].cudnn_ms), p[i].cudnn_tflops,
                                 anchor_ms(p[i].fa2_ms), p[i].fa2_tflops)});
  return cases;
}

std::string case_params(const PrefillShape& s) {
  const std::string heads = s.kv_heads == s.q_heads
                                ? fmt::format("h={}", s.q_heads)
                                : fmt::format("h={} kv={}", s.q_heads, s.kv_heads);
  return fmt::format("b={} s={} {} d={} {}", s.batch, s.seq_len, heads, s.head_dim,
                     s.causal ? "causal" : "full");
}

struct AttentionArgs {
  bool quick = false;
  bool sweep = false;
  bool gqa = false;
};

std::vector<Case> bench_cases(const AttentionArgs& args) {
  std::vector<Case> cases = anchor_cases();
  if (args.gqa)
    for (const Case& c : anchor_cases()) {
      PrefillShape s = c.shape;
      s.kv_heads = s.q_heads / 4;
      cases.push_back({s, std::nullopt, "GQA 4:1 (no peer figure)"});
    }
  if (args.sweep) {
    std::set<std::string> seen;
    for (const Case& c : cases) seen.insert(case_params(c.shape));
    for (int64_t seq = 512; seq <= 16384; seq *= 2)
      for (bool causal : {false, true}) {
        const PrefillShape s = mha(16384 / seq, seq, 32, 128, causal);
        if (seen.insert(case_params(s)).second)
          cases.push_back({s, std::nullopt, "sweep, 16384 tokens"});
      }
  }
  return cases;
}

// The mode and batch only: the expected time (at ~400 TF/s) is never reported. Multi-ms cases
// are timed a launch or a few at a time between events (the launch gap is noise there);
// shorter ones as CUDA-graph replays, so launch gaps do not inflate them.
TimingConfig timing_for(const PrefillShape& s, bool quick, int sets) {
  const double est_us = std::max(1.0, attention_prefill_flops(s) / 4e8);
  const double sample_us = quick ? 2000 : 10000;
  TimingConfig cfg;
  cfg.sets = sets;
  cfg.reps = quick ? 5 : 20;
  if (est_us < 1000) {
    cfg.mode = TimingMode::graph;
    cfg.warmup = quick ? 1 : 3;  // replays of the whole graph
    cfg.batch = std::clamp(static_cast<int>(sample_us / est_us), 2, 100);
  } else {
    cfg.mode = TimingMode::back_to_back;
    cfg.warmup = quick ? 1 : 3;
    cfg.batch = std::clamp(static_cast<int>(sample_us / est_us), 1, 5);
  }
  return cfg;
}

// Rotating input sets of q, k, v (bf16, uniform in [-1, 1]); one output, one offsets tensor
// {0, S, 2S, ...} serving as both cu_seqlens_q and cu_seqlens_kv.
struct Inputs {
  std::vector<OwnedTensor> q, k, v;
  OwnedTensor cu_seqlens, out, lse;
};

Inputs make_inputs(const PrefillShape& s, int sets, Device dev) {
  const int64_t tokens = s.batch * s.seq_len;
  Inputs in;
  for (int i = 0; i < sets; ++i) {
    in.q.emplace_back(DType::bf16, std::vector<int64_t>{tokens, s.q_heads, s.head_dim}, dev);
    in.k.emplace_back(DType::bf16, std::vector<int64_t>{tokens, s.kv_heads, s.head_dim}, dev);
    in.v.emplace_back(DType::bf16, std::vector<int64_t>{tokens, s.kv_heads, s.head_dim}, dev);
    fill_uniform(in.q.back(), kSeed + 3 * i, -1.0f, 1.0f, {});
    fill_uniform(in.k.back(), kSeed + 3 * i + 1, -1.0f, 1.0f, {});
    fill_uniform(in.v.back(), kSeed + 3 * i + 2, -1.0f, 1.0f, {});
  }
  OwnedTensor cu(DType::i32, {s.batch + 1}, Device::cpu());
  for (int64_t b = 0; b <= s.batch; ++b)
    cu.view().ptr<int32_t>()[b] = static_cast<int32_t>(b * s.seq_len);
  in.cu_seqlens = OwnedTensor(DType::i32, {s.batch + 1}, dev);
  copy(cu, in.cu_seqlens);
  in.out = OwnedTensor(DType::bf16, {tokens, s.q_heads, s.head_dim}, dev);
  in.lse = OwnedTensor(DType::f32, {tokens, s.q_heads}, dev);
  return in;
}

float softmax_scale(const PrefillShape& s) {
  return 1.0f / std::sqrt(float(s.head_dim));
}

void run_op(const PrefillShape& s, const Inputs& in, int set, Stream stream) {
  ops::attention_prefill(in.q[set], in.k[set], in.v[set], in.cu_seqlens, in.cu_seqlens,
                         static_cast<int>(s.seq_len), s.causal, softmax_scale(s), in.out, in.lse,
                         stream);
}

// NaN/Inf elements of a contiguous bf16 or f32 device tensor, read back in chunks (a 1 GiB
// output is not copied to the host at once). Tests the exponent bits: all ones is NaN or Inf.
int64_t count_nonfinite(const Tensor& t) {
  const int64_t n = t.numel();
  const Tensor flat = Tensor::contiguous(t.data, t.dtype, t.device, &n, 1);
  const int64_t chunk = std::min<int64_t>(n, int64_t{32} << 20);
  OwnedTensor host(t.dtype, {chunk}, Device::cpu());
  int64_t bad = 0;
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    copy(flat.slice(0, start, start + len), host.view().slice(0, 0, len));
    if (t.dtype == DType::bf16) {
      const uint16_t* h = host.view().ptr<uint16_t>();
      for (int64_t i = 0; i < len; ++i) bad += (h[i] & 0x7f80u) == 0x7f80u;
    } else {
      const uint32_t* h = host.view().ptr<uint32_t>();
      for (int64_t i = 0; i < len; ++i) bad += (h[i] & 0x7f800000u) == 0x7f800000u;
    }
  }
  return bad;
}

// Row `row` of a [rows, ...] device tensor as floats.
std::vector<float> host_row(const Tensor& t, int64_t row) {
  const Tensor r = t.slice(0, row, row + 1);
  OwnedTensor host(t.dtype, std::vector<int64_t>(r.shape, r.shape + r.ndim), Device::cpu());
  copy(r, host);
  std::vector<float> v(static_cast<size_t>(r.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(host.data(), t.dtype, int64_t(i));
  return v;
}

// One KV head of rows [start, start + len) of a [tokens, kv_heads, head_dim] device tensor, as
// [len, head_dim] floats (bf16 converts to float exactly).
std::vector<float> host_head(const Tensor& t, int64_t start, int64_t len, int64_t head) {
  const Tensor rows = t.slice(0, start, start + len);
  OwnedTensor host(t.dtype, std::vector<int64_t>(rows.shape, rows.shape + rows.ndim),
                   Device::cpu());
  copy(rows, host);
  const int64_t heads = t.shape[1], dim = t.shape[2];
  std::vector<float> v(static_cast<size_t>(len * dim));
  for (int64_t r = 0; r < len; ++r)
    for (int64_t d = 0; d < dim; ++d)
      v[r * dim + d] = load_as_float(host.data(), t.dtype, (r * heads + head) * dim + d);
  return v;
}

struct Validation {
  std::string params;
  std::vector<int64_t> batches, heads;
  int rows = 0;  // query rows per validated sequence
  ErrorSummary out;
  double lse_max_abs = 0;
  int64_t nonfinite_out = 0, nonfinite_lse = 0;
  bool ok = false;
};

// The first and last sequences (the last one exercises the offsets), query heads 0 and the last
// (under GQA they read different KV heads), validation_rows() of each, against the fp64 reference.
void check_subset(const PrefillShape& s, const Inputs& in, Validation* val) {
  const int64_t S = s.seq_len, D = s.head_dim, group = s.q_heads / s.kv_heads;
  const std::vector<int64_t> rows = validation_rows(S, kValidationRows, kSeed);
  val->rows = static_cast<int>(rows.size());
  val->batches = s.batch > 1 ? std::vector<int64_t>{0, s.batch - 1} : std::vector<int64_t>{0};
  val->heads = {0, s.q_heads - 1};
  const double scale = softmax_scale(s);  // the float the op was given, exactly
  ErrorAccumulator acc;
  std::vector<double> ref(static_cast<size_t>(D));
  for (int64_t b : val->batches) {
    const int64_t start = b * S;
    for (int64_t h : val->heads) {
      const int64_t kv_head = h / group;
      const std::vector<float> k = host_head(in.k[0], start, S, kv_head);
      const std::vector<float> v = host_head(in.v[0], start, S, kv_head);
      for (int64_t i : rows) {
        const std::vector<float> q = host_row(in.q[0], start + i);
        const std::vector<float> out = host_row(in.out, start + i);
        const std::vector<float> lse = host_row(in.lse, start + i);
        const int64_t visible = s.causal ? i + 1 : S;  // queries = keys: the diagonal is i
        const double ref_lse = reference_attention_row(q.data() + h * D, k.data(), v.data(),
                                                              visible, D, D, scale, ref.data());
        acc.add(out.data() + h * D, ref.data(), D);
        const double lse_err = std::fabs(double(lse[h]) - ref_lse);
        val->lse_max_abs = std::isnan(lse_err) ? lse_err : std::max(val->lse_max_abs, lse_err);
      }
    }
  }
  val->out = acc.summary();
}

ResultRow make_row(const Case& c, const TimingConfig& cfg, const Stats& st,
                          const Ceilings& ceil) {
  ResultRow r;
  r.name = "attention_prefill_bf16";
  r.params = case_params(c.shape);
  r.timing = timing_label(cfg) + (cfg.sets > 1 ? fmt::format(", {} sets", cfg.sets) : "");
  r.stats = st;
  r.flops = attention_prefill_flops(c.shape);
  r.bytes = attention_prefill_bytes(c.shape, 2);
  // Roofline: FLOPs per byte above the ridge (GEMM rate / copy rate of this run) is compute
  // bound, so its % is of the GEMM ceiling; below it (short sequences) of the copy ceiling.
  const double ridge = ceil.copy_gbps > 0 ? ceil.gemm_tflops * 1e3 / ceil.copy_gbps : 0;
  r.bound = r.flops / r.bytes >= ridge ? Bound::compute : Bound::memory;
  r.note = c.note;
  return r;
}

Validation measure_case(const Case& c, const AttentionArgs& args, const DeviceInfo& info,
                        const Ceilings& ceil, Device dev,
                        const std::function<void(ResultRow)>& add) {
  const PrefillShape& s = c.shape;
  // One set = q, k and v (the output is shared); in practice every case here exceeds twice the
  // L2 with one set, so rotation only matters for a smaller card or a smaller shape added later.
  const double set_bytes =
      2.0 * double(s.batch * s.seq_len) * double(s.q_heads + 2 * s.kv_heads) * double(s.head_dim);
  const int sets = rotating_sets(static_cast<size_t>(set_bytes), info.l2_bytes, 1);
  const TimingConfig cfg = timing_for(s, args.quick, sets);
  const Inputs in = make_inputs(s, sets, dev);

  run_op(s, in, 0, {});  // the op's checks and any first-call setup, outside the timing (and graph)
  // Poisoned with NaN after that call: an element no timed launch wrote shows up in the scan.
  fill_bytes(in.out, 0xFF);
  fill_bytes(in.lse, 0xFF);
  const Stats st =
      time_launches([&](int set, Stream stream) { run_op(s, in, set, stream); }, cfg);

  Validation val;
  val.params = case_params(s);
  val.nonfinite_out = count_nonfinite(in.out);
  val.nonfinite_lse = count_nonfinite(in.lse);
  if (sets > 1) run_op(s, in, 0, {});  // the subset is checked against set 0's inputs
  check_subset(s, in, &val);
  val.ok = val.nonfinite_out == 0 && val.nonfinite_lse == 0 && val.out.rel_l2 <= kRelL2Tolerance &&
           val.lse_max_abs <= kLseTolerance;
  ResultRow row = make_row(c, cfg, st, ceil);
  Accuracy accuracy;
  accuracy.error = val.out;
  accuracy.reference = fmt::format("cpu fp64, {} query rows x {} heads x {} sequences", val.rows,
                                   val.heads.size(), val.batches.size());
  accuracy.rel_l2_tolerance = kRelL2Tolerance;
  // Every element scanned for NaN/Inf, and the log-sum-exp against the reference.
  accuracy.other_checks_passed =
      val.nonfinite_out == 0 && val.nonfinite_lse == 0 && val.lse_max_abs <= kLseTolerance;
  row.accuracy = accuracy;
  // The verdict travels with the row too (JSON readers that know only rows see it).
  row.note +=
      fmt::format("; fp64 check {} (rel L2 {:.1e})", val.ok ? "ok" : "FAILED", val.out.rel_l2);
  add(std::move(row));
  return val;
}

struct MemoryRow {
  int64_t tokens;
  double io_bytes;          // q, k, v, out (bf16) and lse (f32)
  double braid_extra;       // computed: the op takes no workspace and allocates nothing
  double allocator_growth;  // measured: braid's CUDA allocator (in use + cached) across one call
  double naive_extra;       // computed: S x S scores (bf16) + softmax (f32) per head
};

// B = 1, 32 heads, d128 at 2048, 4096 and 8192 tokens: what the op needs beyond its inputs and
// outputs against what materialising the score matrix would. cudaMemGetInfo around the call says
// nothing when nothing is allocated, so the op's figure is computed (zero workspace, O(tokens)
// total) and only braid's own allocator is watched across one call.
std::vector<MemoryRow> measure_memory(Device dev) {
  std::vector<MemoryRow> rows;
  for (int64_t tokens : {2048, 4096, 8192}) {
    const PrefillShape s = mha(1, tokens, 32, 128, true);
    const Inputs in = make_inputs(s, 1, dev);
    cuda_allocator::empty_cache();
    const double before = double(cuda_allocator::bytes_in_use() + cuda_allocator::bytes_cached());
    run_op(s, in, 0, {});
    host_row(in.lse, tokens - 1);  // waits for the call
    const double after = double(cuda_allocator::bytes_in_use() + cuda_allocator::bytes_cached());
    const double io = attention_prefill_bytes(s, 2) + 4.0 * tokens * s.q_heads;
    rows.push_back({tokens, io, 0.0, after - before, naive_attention_extra_bytes(s)});
  }
  cuda_allocator::empty_cache();
  return rows;
}

std::string pct_or_dash(std::optional<double> v) {
  return v ? fmt::format("{:.1f}", *v) : "-";
}

// One line per attention row: time, rates, roofline position, % of the GEMM ceiling, and the
// ANCHORS.md peers as "% of reference" (peer time / our time; measured on an H100 another day).
std::string summary(const Report& run, const std::vector<Case>& cases) {
  const double ridge =
      run.ceilings.copy_gbps > 0 ? run.ceilings.gemm_tflops * 1e3 / run.ceilings.copy_gbps : 0;
  std::string out = fmt::format("{:<34} {:>9} {:>7} {:>6} {:>7} {:>7} {:>8} {:>7} {:>7}\n", "case",
                                "ms", "TF/s", "%GEMM", "GB/s", "FLOP/B", "bound", "%cuDNN", "%FA2");
  for (const Case& c : cases) {
    const std::string params = case_params(c.shape);
    const ResultRow* r = nullptr;
    for (const auto& row : run.rows)
      if (row.name == "attention_prefill_bf16" && row.params == params) r = &row;
    if (!r) continue;
    const double ms = r->stats.median_us / 1e3;
    const double tflops = achieved_tflops(*r).value_or(0);
    const std::optional<double> of_gemm =
        run.ceilings.gemm_tflops > 0
            ? std::optional<double>(100 * tflops / run.ceilings.gemm_tflops)
            : std::nullopt;
    out +=
        fmt::format("{:<34} {:>9.3f} {:>7.1f} {:>6} {:>7.0f} {:>7.0f} {:>8} {:>7} {:>7}\n", params,
                    ms, tflops, pct_or_dash(of_gemm), achieved_gbps(*r).value_or(0),
                    r->flops / r->bytes, r->bound == Bound::compute ? "compute" : "memory",
                    c.peer ? fmt::format("{:.0f}", 100 * c.peer->cudnn_ms / ms) : "-",
                    c.peer ? fmt::format("{:.0f}", 100 * c.peer->fa2_ms / ms) : "-");
  }
  out += fmt::format("ridge (GEMM / copy ceiling of this run): {:.0f} FLOP/B\n", ridge);
  return out;
}

std::string validation_table(const std::vector<Validation>& vals) {
  std::string out = fmt::format("{:<34} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>6}\n",
                                "case", "rows", "max abs", "mean abs", "max rel", "rel L2",
                                "bf16 rnd", "lse abs", "non-finite", "ok");
  for (const Validation& v : vals)
    out += fmt::format(
        "{:<34} {:>5} {:>9.2e} {:>9.2e} {:>9.2e} {:>9.2e} {:>9.2e} {:>9.2e} {:>10} {:>6}\n",
        v.params, v.rows * v.batches.size() * v.heads.size(), v.out.max_abs, v.out.mean_abs,
        v.out.max_rel, v.out.rel_l2, v.out.rounding_max_abs, v.lse_max_abs,
        v.nonfinite_out + v.nonfinite_lse, v.ok ? "ok" : "FAIL");
  out += fmt::format(
      "rows = (query row, head) vectors checked: {} rows (ends, tile edges 63/64 .. 511/512, "
      "random) x heads 0 and H-1 x the first and last sequence, against fp64 on the same bf16 "
      "inputs.\n"
      "max rel = |out - ref| / max(|ref|, 0.1 * RMS of its vector); bf16 rnd = max |bf16(ref) - "
      "ref|, "
      "the error rounding the exact output to bf16 alone makes.\n"
      "non-finite = NaN/Inf anywhere in out and lse after timing (outputs poisoned with NaN "
      "first).\n"
      "ok = no non-finite, rel L2 <= {:g} (DESIGN.md, bf16), lse abs <= {:g}. "
      "Seed 001 acceptable: max abs < 1e-3, mean abs < 1e-4, max rel < 1e-2.\n",
      kValidationRows, kRelL2Tolerance, kLseTolerance);
  return out;
}

std::string memory_table(const std::vector<MemoryRow>& rows) {
  std::string out =
      "memory, B=1 H=32 D=128 bf16: device memory beyond the op's inputs and outputs\n";
  out += fmt::format("{:>7} {:>14} {:>15} {:>17} {:>20} {:>10}\n", "tokens", "q,k,v,out,lse",
                     "braid extra", "allocator growth", "naive S*S scores", "naive/braid");
  out += fmt::format("{:>7} {:>14} {:>15} {:>17} {:>20} {:>10}\n", "", "", "(computed)",
                     "(measured)", "+softmax (computed)", "totals");
  for (const MemoryRow& m : rows)
    out += fmt::format("{:>7} {:>14} {:>15} {:>17} {:>20} {:>9.1f}x\n", m.tokens,
                       format_bytes(m.io_bytes), format_bytes(m.braid_extra),
                       format_bytes(m.allocator_growth), format_bytes(m.naive_extra),
                       (m.io_bytes + m.naive_extra) / (m.io_bytes + m.braid_extra));
  out +=
      "naive = B*H*S*S*(2 + 4) bytes (bf16 scores, fp32 softmax); braid stores no score matrix "
      "and takes no workspace, so its total is O(tokens).\n";
  return out;
}

// This suite's own sections of the JSON (beside the standard run, which report_from_json reads).
nlohmann::json json_sections(const std::vector<Validation>& vals, const std::vector<MemoryRow>& mem) {
  nlohmann::json v = nlohmann::json::array();
  for (const Validation& x : vals)
    v.push_back({{"params", x.params},
                 {"batches", x.batches},
                 {"heads", x.heads},
                 {"rows_per_sequence", x.rows},
                 {"elements", x.out.elements},
                 {"max_abs_error", x.out.max_abs},
                 {"mean_abs_error", x.out.mean_abs},
                 {"max_rel_error", x.out.max_rel},
                 {"rel_l2_error", x.out.rel_l2},
                 {"bf16_rounding_max_abs", x.out.rounding_max_abs},
                 {"lse_max_abs_error", x.lse_max_abs},
                 {"nonfinite_out", x.nonfinite_out},
                 {"nonfinite_lse", x.nonfinite_lse},
                 {"ok", x.ok}});
  nlohmann::json m = nlohmann::json::array();
  for (const MemoryRow& x : mem)
    m.push_back({{"batch", 1},
                 {"tokens", x.tokens},
                 {"heads", 32},
                 {"head_dim", 128},
                 {"io_bytes", x.io_bytes},
                 {"braid_extra_bytes_computed", x.braid_extra},
                 {"braid_allocator_growth_bytes_measured", x.allocator_growth},
                 {"naive_extra_bytes_computed", x.naive_extra}});
  return {{"validation", v}, {"memory", m}};
}

SuiteResult run_attention_bench(const AttentionArgs& args) {
  std::string reason;
  const auto info = query_device(0, &reason);
  if (!info) return not_measured(fmt::format("{}: {}", kCmd, reason));
  const Device dev = Device::cuda(0);
  const std::string suite = std::string("attention") + (args.quick ? " (quick)" : "") +
                            (args.sweep ? " sweep" : "") + (args.gqa ? " gqa" : "");
  Report run = start_report(suite, *info);
  auto add = [&](ResultRow r) { record_row(run, std::move(r)); };
  fmt::print(stderr, "{}{}{}{}: measuring...\n", kCmd, args.quick ? " --quick" : "",
             args.sweep ? " --sweep" : "", args.gqa ? " --gqa" : "");
  // Ceilings first: each attention row's roofline class needs them.
  run.ceilings = measure_ceilings(args.quick, 0, true, false, add);

  const std::vector<Case> cases = bench_cases(args);
  std::vector<Validation> vals;
  for (const Case& c : cases) {
    vals.push_back(measure_case(c, args, *info, run.ceilings, dev, add));
    cuda_allocator::empty_cache();
  }
  const std::vector<MemoryRow> mem = measure_memory(dev);

  SuiteResult r = report_result(
      run,
      fmt::format("{}\n{}\n{}\n", summary(run, cases), validation_table(vals), memory_table(mem)) +
          fmt::format(
              "FLOPs = 4 * D * B * H * visible score entries (S*S full, S*(S+1)/2 causal); "
              "bytes = q, k, v read + out written (bf16).\n"
              "ceilings of this run: copy {:.2f} TB/s, bf16 GEMM {:.1f} TFLOP/s; %cuDNN / %FA2 = "
              "ANCHORS.md H100 time / this time (another day, another card unless it says H100).\n",
              run.ceilings.copy_gbps / 1000, run.ceilings.gemm_tflops),
      json_sections(vals, mem));
  const auto failed =
      std::count_if(vals.begin(), vals.end(), [](const Validation& v) { return !v.ok; });
  fail_if(r, kCmd, failed, vals.size(), "cases FAILED validation (see the table)");
  return r;
}

}  // namespace

SuiteRun attention_command(CLI::App& cmd) {
  auto args = std::make_shared<AttentionArgs>();
  cmd.add_flag("--quick", args->quick, "Fewer repetitions, smaller ceiling shapes (smoke test)");
  cmd.add_flag("--sweep", args->sweep,
                "Also lengths 512..16384 at h=32 d=128, batch 16384/length, causal and full");
  cmd.add_flag("--gqa", args->gqa, "Also the six shapes with a quarter of the KV heads (GQA 4:1)");
  return [args] { return run_attention_bench(*args); };
}

}  // namespace braid::bench
