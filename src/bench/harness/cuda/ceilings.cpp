// The ceilings on the GPU: copy bandwidth, bf16 GEMM / GEMV through ops::gemm, fp8 e4m3 GEMM
// through cuBLASLt (fp8_gemm.h), and the fixed cost of a kernel launch (seed 000), in that order.
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/fp8_gemm.h"
#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/timer.h"
#include "bench/harness/fp8_fill.h"
#include "braid/buffer.h"
#include "braid/ops.h"
#include "core/cuda_check.h"

namespace braid::bench {

namespace {

using AddRow = std::function<void(ResultRow)>;

cudaStream_t cu(Stream s) { return static_cast<cudaStream_t>(s.handle); }

// Fixed seeds: the data must be random (never zeros), not different on every run.
constexpr uint64_t kSeed = 0x5eedb0a7ull;

// The outputs were poisoned with NaN before timing: a NaN left at either end means the timed
// operation did not write its output, and its time means nothing.
void expect_written(const Tensor& out, const std::string& what) {
  const int64_t n = out.numel();
  const int64_t k = std::min<int64_t>(n, 4096);
  Tensor flat = Tensor::contiguous(out.data, out.dtype, out.device, &n, 1);
  for (int64_t start : {int64_t{0}, n - k}) {
    OwnedTensor host(out.dtype, {k}, Device::cpu());
    copy(flat.slice(0, start, start + k), host.view());
    for (int64_t i = 0; i < k; ++i)
      if (!std::isfinite(load_as_float(host.data(), out.dtype, i)))
        throw Error(ErrorKind::internal,
                    fmt::format("bench ceilings: {}: output element {} is not finite after "
                                "timing (left unwritten?)", what, start + i));
  }
}

// The first and last KiB of dst equal those of src.
void expect_copied(const void* src, const void* dst, size_t bytes, const std::string& what) {
  const size_t k = std::min<size_t>(bytes, 1024);
  std::vector<unsigned char> a(k), b(k);
  for (size_t start : {size_t{0}, bytes - k}) {
    BRAID_CUDA_CHECK(cudaMemcpy(a.data(), static_cast<const char*>(src) + start, k,
                                cudaMemcpyDeviceToHost));
    BRAID_CUDA_CHECK(cudaMemcpy(b.data(), static_cast<const char*>(dst) + start, k,
                                cudaMemcpyDeviceToHost));
    if (std::memcmp(a.data(), b.data(), k) != 0)
      throw Error(ErrorKind::internal,
                  fmt::format("bench ceilings: {}: destination differs from source at offset {}",
                              what, start));
  }
}

void measure_copies(const CeilingsPlan& plan, Device dev, const AddRow& add) {
  const size_t bytes = plan.copy_bytes;
  OwnedTensor src(DType::f32, {static_cast<int64_t>(bytes / 4)}, dev);
  OwnedTensor dst(DType::f32, {static_cast<int64_t>(bytes / 4)}, dev);
  fill_uniform(src, kSeed, -1.0f, 1.0f, {});
  const std::string anchor = bytes == (size_t{1} << 30) ? "H100: 3.00 TB/s" : "";

  fill_bytes(dst, 0xFF);
  Stats st = time_launches(
      [&](int, Stream s) {
        BRAID_CUDA_CHECK(
            cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, cu(s)));
      },
      plan.copy_timing);
  expect_copied(src.data(), dst.data(), bytes, "cudaMemcpyAsync");
  add({"copy_memcpy", format_bytes(double(bytes)) + " cudaMemcpyAsync D2D",
       timing_label(plan.copy_timing), st, 2.0 * double(bytes), 0, Bound::memory, anchor});

  const int blocks = copy_kernel_blocks();
  fill_bytes(dst, 0xFF);
  st = time_launches(
      [&](int, Stream s) { copy_kernel(src.data(), dst.data(), bytes, blocks, s); },
      plan.copy_timing);
  expect_copied(src.data(), dst.data(), bytes, "copy kernel");
  add({"copy_kernel", fmt::format("{} 16 B/thread, {} blocks x 256", format_bytes(double(bytes)),
                                  blocks),
       timing_label(plan.copy_timing), st, 2.0 * double(bytes), 0, Bound::memory, anchor});
}

// Rotating sets of bf16 a [m, k], w [n, k], out [m, n] for one GEMM shape.
struct GemmSets {
  std::vector<OwnedTensor> a, w, out;
};

GemmSets make_gemm_sets(const GemmShape& s, int sets, Device dev) {
  GemmSets g;
  for (int i = 0; i < sets; ++i) {
    g.a.emplace_back(DType::bf16, std::vector<int64_t>{s.m, s.k}, dev);
    g.w.emplace_back(DType::bf16, std::vector<int64_t>{s.n, s.k}, dev);
    g.out.emplace_back(DType::bf16, std::vector<int64_t>{s.m, s.n}, dev);
    fill_uniform(g.a.back(), kSeed + 2 * i, -1.0f, 1.0f, {});
    fill_uniform(g.w.back(), kSeed + 2 * i + 1, -1.0f, 1.0f, {});
    fill_bytes(g.out.back(), 0xFF);
  }
  return g;
}

Stats time_gemm(const GemmSets& g, TimingConfig cfg, const std::string& what) {
  const Stats st = time_launches(
      [&](int i, Stream s) { ops::gemm(g.a[i], g.w[i], Tensor{}, g.out[i], s); }, cfg);
  for (const auto& out : g.out) expect_written(out, what);
  return st;
}

size_t gemm_set_bytes(const GemmShape& s) {
  return 2 * static_cast<size_t>(s.m * s.k + s.n * s.k + s.m * s.n);
}

void measure_gemm_rows(const CeilingsPlan& plan, const DeviceInfo& info, Device dev,
                       const AddRow& add) {
  for (const GemmShape& s : plan.gemms) {
    TimingConfig cfg = plan.gemm_timing;
    cfg.sets = rotating_sets(gemm_set_bytes(s), info.l2_bytes, 1);
    const GemmSets g = make_gemm_sets(s, cfg.sets, dev);
    const Stats st = time_gemm(g, cfg, fmt::format("gemm {}x{}x{}", s.m, s.n, s.k));
    add(gemm_row(s, st, timing_label(cfg)));
  }
}

void measure_gemms(const CeilingsPlan& plan, const DeviceInfo& info, Device dev,
                   const AddRow& add) {
  measure_gemm_rows(plan, info, dev, add);
  TimingConfig cfg = plan.gemv_timing;
  cfg.sets = rotating_sets(gemm_set_bytes(plan.gemv), info.l2_bytes, plan.gemv_min_sets);
  const GemmSets g = make_gemm_sets(plan.gemv, cfg.sets, dev);
  const Stats st = time_gemm(g, cfg, "gemv");
  add(gemv_row(plan.gemv, st, timing_label(cfg), cfg.sets));
}

// Rotating sets of fp8 a [m, k], w [n, k] and bf16 out [m, n]: normal values (std 1), far from
// zero and from e4m3's range limits, as real operands after scaling are.
GemmSets make_fp8_gemm_sets(const GemmShape& s, int sets, Device dev) {
  GemmSets g;
  for (int i = 0; i < sets; ++i) {
    g.a.emplace_back(DType::f8e4m3, std::vector<int64_t>{s.m, s.k}, dev);
    g.w.emplace_back(DType::f8e4m3, std::vector<int64_t>{s.n, s.k}, dev);
    g.out.emplace_back(DType::bf16, std::vector<int64_t>{s.m, s.n}, dev);
    fill_fp8_normal(g.a.back(), kSeed + 2 * i, 1.0f);
    fill_fp8_normal(g.w.back(), kSeed + 2 * i + 1, 1.0f);
    fill_bytes(g.out.back(), 0xFF);
  }
  return g;
}

size_t fp8_gemm_set_bytes(const GemmShape& s) {
  return static_cast<size_t>(s.m * s.k + s.n * s.k + 2 * s.m * s.n);
}

// One row per fp8 shape; a shape cuBLASLt cannot run gives a row that says why (no time, no rate).
void measure_fp8_gemm_rows(const CeilingsPlan& plan, const DeviceInfo& info, Device dev,
                           const AddRow& add) {
  for (const GemmShape& s : plan.fp8_gemms) {
    TimingConfig cfg = plan.gemm_timing;
    cfg.sets = rotating_sets(fp8_gemm_set_bytes(s), info.l2_bytes, 1);
    ResultRow row;
    try {
      const GemmSets g = make_fp8_gemm_sets(s, cfg.sets, dev);
      fp8_gemm(g.a[0], g.w[0], g.out[0], {});  // the plan, outside any timing
      const Stats st = time_launches(
          [&](int i, Stream st) { fp8_gemm(g.a[i], g.w[i], g.out[i], st); }, cfg);
      for (const auto& out : g.out)
        expect_written(out, fmt::format("fp8 gemm {}x{}x{}", s.m, s.n, s.k));
      row = fp8_gemm_row(s, st, timing_label(cfg));
      row.note += (row.note.empty() ? "" : "; ") +
                  fp8_gemm_plan_description(g.a[0], g.w[0], g.out[0]);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::unsupported && e.kind() != ErrorKind::cublas) throw;
      row = fp8_gemm_failed_row(s, e.what());
    }
    add(std::move(row));
  }
}

void measure_launch_costs(const CeilingsPlan& plan, Device dev, const AddRow& add) {
  const LaunchProbes probes(dev);
  for (const LaunchProbes::Probe& p : probes.probes()) {
    const bool empty = std::strcmp(p.name, "empty_kernel") == 0;
    const struct {
      const TimingConfig* cfg;
      std::string note;
    } modes[] = {
        {&plan.launch_alone, empty ? "A40 seed 000: 4.35 us" : "A40 seed 000: 4.42 us"},
        {&plan.launch_back_to_back, "H100 eager PyTorch tiny kernel: 6.3 us"},
        {&plan.launch_graph, "H100 tiny kernel in a graph: 1.0 us"},
    };
    for (const auto& m : modes) {
      const Stats st = time_launches(p.launch, *m.cfg);
      add({p.name, "<<<1, 1>>>", timing_label(*m.cfg), st, 0, 0, Bound::none, m.note});
    }
  }
  probes.check("bench ceilings");
}

}  // namespace

LaunchProbes::LaunchProbes(Device dev)
    : in_(DType::i32, {1}, dev), out_(DType::i32, {1}, dev) {
  fill_bytes(in_, 0x01);  // in[0] = 0x01010101
  fill_bytes(out_, 0xFF);
  probes_ = {{"empty_kernel", [](int, Stream s) { launch_empty_kernel(s); }},
             {"minimal_rw_kernel", [this](int, Stream s) {
                launch_minimal_rw_kernel(in_.view().ptr<int>(), out_.view().ptr<int>(), s);
              }}};
}

void LaunchProbes::check(const std::string& what) const {
  int got = 0;
  BRAID_CUDA_CHECK(cudaMemcpy(&got, out_.data(), sizeof got, cudaMemcpyDeviceToHost));
  if (got != 0x01010101 + 1)
    throw Error(ErrorKind::internal, fmt::format("{}: minimal_rw_kernel wrote {}, expected {}",
                                                 what, got, 0x01010101 + 1));
}

void measure_copy_ceiling(bool quick, int device, const std::function<void(ResultRow)>& add) {
  measure_copies(ceilings_plan(quick), Device::cuda(device), add);
  cuda_allocator::empty_cache();
}

void measure_gemm_ceiling(bool quick, int device, const std::function<void(ResultRow)>& add) {
  const DeviceInfo info = require_device(device, "bench gemm ceiling");
  measure_gemm_rows(ceilings_plan(quick), info, Device::cuda(device), add);
  cuda_allocator::empty_cache();
}

void measure_fp8_gemm_ceiling(bool quick, int device, const std::function<void(ResultRow)>& add) {
  const DeviceInfo info = require_device(device, "bench fp8 gemm ceiling");
  measure_fp8_gemm_rows(ceilings_plan(quick), info, Device::cuda(device), add);
  cuda_allocator::empty_cache();
}

Ceilings measure_ceilings(bool quick, int device, bool gemm, bool fp8,
                          const std::function<void(ResultRow)>& add) {
  std::vector<ResultRow> rows;
  const auto keep = [&](ResultRow r) {
    rows.push_back(r);
    add(std::move(r));
  };
  measure_copy_ceiling(quick, device, keep);
  if (gemm) measure_gemm_ceiling(quick, device, keep);
  if (fp8) measure_fp8_gemm_ceiling(quick, device, keep);
  return ceilings_from_rows(rows);
}

Report run_ceilings(const CeilingsOptions& options) {
  const DeviceInfo info = require_device(options.device, "bench ceilings");
  BRAID_CUDA_CHECK(cudaSetDevice(options.device));
  const Device dev = Device::cuda(options.device);
  const CeilingsPlan plan = ceilings_plan(options.quick);

  Report run = start_report(options.quick ? "ceilings (quick)" : "ceilings", info);
  const AddRow add = [&](ResultRow r) {
    if (options.on_row) options.on_row(r);
    run.rows.push_back(std::move(r));
  };
  // Each section frees its buffers; give the cached blocks back too, so the next section has
  // the whole card.
  measure_copies(plan, dev, add);
  cuda_allocator::empty_cache();
  measure_gemms(plan, info, dev, add);
  cuda_allocator::empty_cache();
  measure_fp8_gemm_rows(plan, info, dev, add);
  cuda_allocator::empty_cache();
  measure_launch_costs(plan, dev, add);
  cuda_allocator::empty_cache();
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  run.ceilings = ceilings_from_rows(run.rows);
  return run;
}

}  // namespace braid::bench
