// The CPU side of the ceilings benchmark: the plan, the row arithmetic and the summary.
#include "bench/harness/ceilings.h"

#include <algorithm>

#include <fmt/format.h>

namespace braid::bench {

namespace {

TimingConfig timing(TimingMode mode, int warmup, int reps, int batch) {
  TimingConfig c;
  c.mode = mode;
  c.warmup = warmup;
  c.reps = reps;
  c.batch = batch;
  return c;
}

}  // namespace

CeilingsPlan ceilings_plan(bool quick) {
  CeilingsPlan p;
  const TimingMode b2b = TimingMode::back_to_back;
  if (!quick) {
    p.copy_bytes = size_t{1} << 30;
    // Events around a few launches of each big operation: the launch gap is then a small
    // fraction of a sample, and >= 20 samples give a stable median.
    p.copy_timing = timing(b2b, 5, 20, 5);
    p.gemms = {{8192, 8192, 8192, "H100: 680-798 TFLOP/s"},
               {8192, 11008, 4096, "H100: 678 TFLOP/s, 1.089 ms"}};
    p.gemm_timing = timing(b2b, 5, 20, 5);
    // 8192^3 as the bf16 ceiling; 8192 x 4096 x 7168 is seed 003's first expert GEMM shape.
    p.fp8_gemms = {{8192, 8192, 8192, "H100 torch._scaled_mm per-tensor: 1410-1452 TFLOP/s"},
                   {8192, 4096, 7168, "H100 F.scaled_mm 128-block scales: 1221 TFLOP/s"}};
    p.gemv = {1, 11008, 4096, "H100: 1.88 TB/s, 48.0 us"};
    p.gemv_timing = timing(b2b, 30, 20, 30);
    p.launch_alone = timing(TimingMode::per_launch, 100, 2000, 1);
    p.launch_back_to_back = timing(b2b, 100, 20, 1000);
    p.launch_graph = timing(TimingMode::graph, 3, 20, 1000);
  } else {
    p.copy_bytes = size_t{256} << 20;
    p.copy_timing = timing(b2b, 2, 5, 2);
    p.gemms = {{2048, 2048, 2048, ""}};
    p.gemm_timing = timing(b2b, 2, 5, 2);
    p.fp8_gemms = {{2048, 2048, 2048, ""}};
    p.gemv = {1, 11008, 4096, ""};
    p.gemv_timing = timing(b2b, 3, 5, 3);
    p.launch_alone = timing(TimingMode::per_launch, 10, 100, 1);
    p.launch_back_to_back = timing(b2b, 10, 5, 100);
    p.launch_graph = timing(TimingMode::graph, 1, 5, 100);
  }
  p.gemv_min_sets = 3;
  return p;
}

ResultRow gemm_row(const GemmShape& s, const Stats& stats, const std::string& timing_label) {
  ResultRow r;
  r.name = "gemm_bf16";
  r.params = fmt::format("m={} n={} k={}", s.m, s.n, s.k);
  r.timing = timing_label;
  r.stats = stats;
  r.flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  r.bytes = 2.0 * (double(s.m) * double(s.k) + double(s.n) * double(s.k) + double(s.m) * double(s.n));
  r.bound = Bound::compute;
  r.note = s.anchor;
  return r;
}

ResultRow fp8_gemm_row(const GemmShape& s, const Stats& stats, const std::string& timing_label) {
  ResultRow r = gemm_row(s, stats, timing_label);
  r.name = kFp8GemmRow;
  r.bytes = double(s.m) * double(s.k) + double(s.n) * double(s.k) + 2.0 * double(s.m) * double(s.n);
  r.bound = Bound::compute_fp8;
  return r;
}

ResultRow fp8_gemm_failed_row(const GemmShape& s, const std::string& reason) {
  ResultRow r = fp8_gemm_row(s, Stats{}, "not measured");
  r.note = "FAILED: " + reason;
  return r;
}

ResultRow gemv_row(const GemmShape& s, const Stats& stats, const std::string& timing_label,
                   int sets) {
  ResultRow r = gemm_row(s, stats, timing_label);
  r.name = "gemv_bf16";
  r.params = fmt::format("{}x{} weights, {} copies", s.n, s.k, sets);
  r.bound = Bound::memory;
  return r;
}

Ceilings ceilings_from_rows(const std::vector<ResultRow>& rows) {
  Ceilings c;
  for (const ResultRow& r : rows) {
    if (r.name.rfind("copy_", 0) == 0)
      if (auto v = achieved_gbps(r)) c.copy_gbps = std::max(c.copy_gbps, *v);
    if (r.name == "gemm_bf16")
      if (auto v = achieved_tflops(r)) c.gemm_tflops = std::max(c.gemm_tflops, *v);
    if (r.name == kFp8GemmRow)  // a failed row has no time, hence no rate
      if (auto v = achieved_tflops(r)) c.fp8_gemm_tflops = std::max(c.fp8_gemm_tflops, *v);
  }
  return c;
}

std::string ceilings_summary(const Report& run) {
  auto find = [&](const std::string& name, const std::string& mode) -> const ResultRow* {
    for (const ResultRow& r : run.rows)
      if (r.name == name && r.timing.rfind(mode, 0) == 0) return &r;
    return nullptr;
  };
  auto us = [](const ResultRow* r) { return r ? format_us(r->stats.median_us) + " us" : "-"; };
  std::string out = fmt::format("ceilings{}:\n",
                                run.has_device ? " on " + run.device.name : std::string());
  out += fmt::format("  copy (read + write)  {}\n",
                     run.ceilings.copy_gbps > 0
                         ? fmt::format("{:.2f} TB/s", run.ceilings.copy_gbps / 1000)
                         : std::string("-"));
  out += fmt::format("  bf16 GEMM            {}\n",
                     run.ceilings.gemm_tflops > 0
                         ? fmt::format("{:.1f} TFLOP/s", run.ceilings.gemm_tflops)
                         : std::string("-"));
  std::string fp8 = run.ceilings.fp8_gemm_tflops > 0
                        ? fmt::format("{:.1f} TFLOP/s", run.ceilings.fp8_gemm_tflops)
                        : std::string("-");
  if (run.ceilings.fp8_gemm_tflops > 0 && run.ceilings.gemm_tflops > 0)
    fp8 += fmt::format(" ({:.2f}x bf16)", run.ceilings.fp8_gemm_tflops / run.ceilings.gemm_tflops);
  for (const ResultRow& r : run.rows)  // say why a shape has no figure
    if (r.name == kFp8GemmRow && !achieved_tflops(r))
      fp8 += fmt::format("; {} not measured: {}", r.params, r.note);
  out += fmt::format("  fp8 e4m3 GEMM        {}\n", fp8);
  if (const ResultRow* gemv = find("gemv_bf16", ""); gemv && achieved_gbps(*gemv)) {
    std::string pct;
    if (auto p = percent_of_ceiling(*gemv, run.ceilings)) pct = fmt::format(" ({:.0f}% of copy)", *p);
    out += fmt::format("  bf16 GEMV            {:.2f} TB/s{}\n", *achieved_gbps(*gemv) / 1000, pct);
  }
  for (const char* kernel : {"empty_kernel", "minimal_rw_kernel"}) {
    out += fmt::format("  launch, {:<18} alone {}, back-to-back {}, in a graph {} (per kernel)\n",
                       std::string(kernel) + ":", us(find(kernel, "per_launch")),
                       us(find(kernel, "back_to_back")), us(find(kernel, "graph")));
  }
  return out;
}

}  // namespace braid::bench
