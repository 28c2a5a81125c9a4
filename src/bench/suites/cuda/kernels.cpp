// `bench kernels` on the GPU: the ceilings, then each case (plan, check, calibrate, time), one row
// each; and the helpers the op families share (kernels.h).
#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/timer.h"
#include "bench/suites/cuda/kernels.h"
#include "bench/suites/moe.h"
#include "braid/error.h"
#include "braid/ops.h"
#include "core/cuda_check.h"

namespace braid::bench {

namespace kernel_suite {

// ---- SetTensor ----------------------------------------------------------------------------------

SetTensor::SetTensor(DType dtype, std::vector<int64_t> shape, int sets, Device device)
    : shape_(std::move(shape)), sets_(sets), dtype_(dtype) {
  if (sets < 1) throw Error(ErrorKind::invalid_argument, "bench kernels: a tensor needs >= 1 set");
  int64_t numel = 1;
  for (int64_t d : shape_) numel *= d;
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  stride_ = (numel * elem + 255) / 256 * 256 / elem;
  storage_ = OwnedTensor(dtype, {int64_t{sets}, std::max<int64_t>(stride_, 1)}, device);
}

Tensor SetTensor::operator[](int set) const {
  if (set < 0 || set >= sets_)
    throw Error(ErrorKind::internal, fmt::format("bench kernels: set {} of {}", set, sets_));
  return Tensor::contiguous(storage_.view().at(int64_t{set} * stride_), dtype_,
                            storage_.view().device, shape_.data(), static_cast<int>(shape_.size()));
}

void SetTensor::fill_uniform(uint64_t seed, float lo, float hi) const {
  bench::fill_uniform(storage_, seed, lo, hi, {});
}

void SetTensor::poison() const { fill_bytes(storage_, 0xFF); }

void SetTensor::upload(const std::function<void(int set, const Tensor& host)>& make) const {
  OwnedTensor host(dtype_, {int64_t{sets_}, storage_.view().shape[1]}, Device::cpu());
  std::memset(host.data(), 0, host.view().nbytes());
  for (int s = 0; s < sets_; ++s)
    make(s, Tensor::contiguous(host.view().at(int64_t{s} * stride_), dtype_, Device::cpu(),
                               shape_.data(), static_cast<int>(shape_.size())));
  copy(host, storage_);
}

int case_sets(const KernelCase& c, const SuiteEnv& env, int max_sets) {
  const size_t bytes = static_cast<size_t>(kernel_case_cost(c).bytes);
  return std::min(rotating_sets(bytes, env.l2_bytes, 1), max_sets);
}

// ---- host copies and the check ----------------------------------------------------------------

namespace {

std::vector<int64_t> shape_of(const Tensor& t) { return {t.shape, t.shape + t.ndim}; }

// Element offset of vector v (row-major over every dimension but the last).
int64_t vector_offset(const Tensor& t, int64_t v) {
  int64_t off = 0;
  for (int d = t.ndim - 2; d >= 0; --d) {
    off += (v % t.shape[d]) * t.strides[d];
    v /= t.shape[d];
  }
  return off;
}

}  // namespace

OwnedTensor to_host_as(const Tensor& t, const std::vector<int64_t>& shape) {
  OwnedTensor host(t.dtype, shape, Device::cpu());
  if (host.view().numel() != t.numel())
    throw Error(ErrorKind::internal, "bench kernels: to_host_as: sizes differ");
  copy(Tensor::contiguous(t.data, t.dtype, t.device, shape.data(), static_cast<int>(shape.size())),
       host);
  return host;
}

std::vector<int64_t> sample_rows(int64_t rows, int count, uint64_t seed) {
  return moe_sample_tokens(rows, count, seed);
}

std::string rotation(int sets, const char* what) {
  return sets > 1 ? fmt::format("; {} rotate {} sets", what, sets) : std::string();
}

std::string rows_label(size_t checked, int64_t rows, const char* what) {
  if (rows == 1 && checked == 1) {  // "1 row", "1 token"
    std::string one = what;
    one.pop_back();
    return "1 " + one;
  }
  if (static_cast<int64_t>(checked) == rows) return fmt::format("all {} {}", rows, what);
  return fmt::format("{} of {} {}", checked, rows, what);
}

void add_vectors(ErrorAccumulator& acc, const Tensor& got, const Tensor& ref) {
  if (got.ndim != ref.ndim || got.numel() != ref.numel())
    throw Error(ErrorKind::internal, "bench kernels: compared tensors differ in shape: " +
                                         shape_string(got) + " vs " + shape_string(ref));
  if (got.numel() == 0) return;
  const int64_t n = got.shape[got.ndim - 1], vectors = got.numel() / n;
  std::vector<float> g(static_cast<size_t>(n));
  std::vector<double> r(static_cast<size_t>(n));
  const int64_t gs = got.strides[got.ndim - 1], rs = ref.strides[ref.ndim - 1];
  for (int64_t v = 0; v < vectors; ++v) {
    const int64_t go = vector_offset(got, v), ro = vector_offset(ref, v);
    for (int64_t i = 0; i < n; ++i) {
      g[i] = load_as_float(got.data, got.dtype, go + i * gs);
      r[i] = load_as_float(ref.data, ref.dtype, ro + i * rs);
    }
    acc.add(g.data(), r.data(), n);
  }
}

void add_values(ErrorAccumulator& acc, const void* got, const void* ref, DType dtype, int64_t n) {
  std::vector<float> g(static_cast<size_t>(n));
  std::vector<double> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    g[i] = load_as_float(got, dtype, i);
    r[i] = load_as_float(ref, dtype, i);
  }
  acc.add(g.data(), r.data(), n);
}

Accuracy make_accuracy(const ErrorAccumulator& acc, const KernelCase& c, std::string reference) {
  Accuracy a;
  a.error = acc.summary();
  a.reference = std::move(reference);
  a.rel_l2_tolerance = kernel_case_tolerance(c);
  return a;
}

void parallel_ranges(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::min<int64_t>(n, 16));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        fn(n * t / threads, n * (t + 1) / threads);
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

OwnedTensor host_experts(const Tensor& w, const std::vector<int64_t>& experts) {
  OwnedTensor host(w.dtype, {static_cast<int64_t>(experts.size()), w.shape[1], w.shape[2]},
                   Device::cpu());
  for (size_t u = 0; u < experts.size(); ++u)
    copy(w.select(0, experts[u]), host.view().select(0, static_cast<int64_t>(u)));
  return host;
}

RowExperts experts_of_rows(const std::vector<int32_t>& offsets, const std::vector<int64_t>& rows) {
  RowExperts out;
  out.offsets.push_back(0);
  for (int64_t r : rows) {
    const int64_t e =
        std::upper_bound(offsets.begin(), offsets.end(), static_cast<int32_t>(r)) - offsets.begin() - 1;
    if (out.experts.empty() || out.experts.back() != e) {
      out.experts.push_back(e);
      out.offsets.push_back(out.offsets.back());
    }
    ++out.offsets.back();
    out.expert_of_row.push_back(static_cast<int64_t>(out.experts.size()) - 1);
  }
  return out;
}

std::vector<int32_t> RowExperts::offsets_of(int64_t r0, int64_t r1) const {
  std::vector<int32_t> o(experts.size() + 1, 0);
  for (int64_t r = r0; r < r1; ++r) ++o[static_cast<size_t>(expert_of_row[r]) + 1];
  for (size_t u = 1; u < o.size(); ++u) o[u] += o[u - 1];
  return o;
}

void fill_balanced_ids(const Tensor& ids, int set, int experts) {
  const int64_t pairs = ids.numel();
  for (int64_t p = 0; p < pairs; ++p)
    ids.ptr<int32_t>()[p] = balanced_expert(p, set, pairs, experts);
}

HostPermutation host_permutation(const Tensor& ids, int experts) {
  const int64_t pairs = ids.numel();
  const Device cpu = Device::cpu();
  const OwnedTensor offsets(DType::i32, {int64_t{experts} + 1}, cpu);
  const OwnedTensor sorted(DType::i32, {pairs}, cpu), rows(DType::i32, {pairs}, cpu);
  const OwnedTensor ws(DType::i32, {ops::moe_permute_workspace_size(pairs, experts)}, cpu);
  ops::moe_permute(ids, experts, offsets, sorted, rows, ws);
  auto vec = [](const OwnedTensor& t) {
    const int32_t* p = t.view().ptr<int32_t>();
    return std::vector<int32_t>(p, p + t.view().numel());
  };
  return {vec(offsets), vec(sorted), vec(rows)};
}

OwnedTensor host_i32(const std::vector<int32_t>& values) {
  OwnedTensor t(DType::i32, {static_cast<int64_t>(values.size())}, Device::cpu());
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

}  // namespace kernel_suite

// ---- the run ----------------------------------------------------------------------------------

namespace {

using kernel_suite::CasePlan;
using kernel_suite::SuiteEnv;

constexpr uint64_t kSuiteSeed = 0x6b65726e656c73ull;  // "kernels"

// FNV-1a of the row's name and params: a fixed seed per case, whatever else the run selects.
uint64_t case_seed(const KernelCase& c) {
  uint64_t h = 0xcbf29ce484222325ull ^ kSuiteSeed;
  for (char ch : std::string(kernel_op_name(c.op)) + " " + kernel_case_params(c)) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ull;
  }
  return h;
}

CasePlan plan_case(const KernelCase& c, const SuiteEnv& env) {
  switch (c.op) {
    case KernelOp::embedding:
    case KernelOp::rms_norm:
    case KernelOp::add_rms_norm:
    case KernelOp::rope_apply:
    case KernelOp::silu_mul:
    case KernelOp::softmax:
    case KernelOp::argmax:
    case KernelOp::kv_append:
    case KernelOp::qk_norm_rope_kv_append:
    case KernelOp::add_inplace: return kernel_suite::plan_row_case(c, env);
    case KernelOp::gemm:
    case KernelOp::rms_norm_gemm:
    case KernelOp::gemm_add:
    case KernelOp::swiglu_gemm_add:
    case KernelOp::rms_norm_gemm_argmax: return kernel_suite::plan_gemm_case(c, env);
    case KernelOp::attention_prefill:
    case KernelOp::attention:
    case KernelOp::attention_decode:
    case KernelOp::paged_kv_gather: return kernel_suite::plan_attention_case(c, env);
    case KernelOp::moe_route_topk_softmax:
    case KernelOp::moe_route_grouped:
    case KernelOp::moe_permute:
    case KernelOp::moe_gather:
    case KernelOp::moe_combine:
    case KernelOp::moe_grouped_gemm:
    case KernelOp::moe_experts: return kernel_suite::plan_moe_case(c, env);
    case KernelOp::moe_fp8_quantize:
    case KernelOp::moe_gather_fp8:
    case KernelOp::moe_grouped_gemm_fp8:
    case KernelOp::moe_fp8_block_scale: return kernel_suite::plan_moe_fp8_case(c, env);
  }
  throw Error(ErrorKind::internal, "bench kernels: no plan for this op");
}

// The row of a case before it is measured: its name, params, bytes, FLOPs and bound.
ResultRow case_row(const KernelCase& c, const Ceilings& ceilings) {
  const KernelCost cost = kernel_case_cost(c);
  ResultRow r;
  r.name = kernel_op_name(c.op);
  r.params = kernel_case_params(c);
  r.timing = "not measured";
  r.bytes = cost.bytes;
  r.flops = cost.flops;
  r.bound = kernel_case_bound(c, ceilings);
  return r;
}

// Plans, checks, calibrates and times one case. Any exception becomes the row's note (no time);
// an error that leaves the CUDA context unusable is also written to *broken.
ResultRow measure_case(const KernelCase& c, const DeviceInfo& info, const Ceilings& ceilings,
                       bool quick, int device, std::string* broken) {
  ResultRow row = case_row(c, ceilings);
  try {
    const SuiteEnv env{Device::cuda(device), static_cast<size_t>(info.l2_bytes), case_seed(c)};
    const CasePlan plan = plan_case(c, env);
    row.accuracy = plan.check();
    // One launch alone sizes the batch (a sample of ~2 ms), then the timing proper.
    TimingConfig once;
    once.mode = TimingMode::back_to_back;
    once.sets = plan.sets;
    once.warmup = 1;
    once.reps = 1;
    const Stats calibration = time_launches(plan.launch, once);
    const TimingConfig cfg = kernel_timing(calibration.median_us, quick, plan.sets);
    row.stats = time_launches(plan.launch, cfg);
    row.timing = timing_label(cfg) + (cfg.sets > 1 ? fmt::format(", {} sets", cfg.sets) : "");
    row.note = plan.note;
  } catch (const std::exception& e) {
    row.stats = Stats{};
    row.timing = "not measured";
    row.note = std::string(kKernelCaseFailed) + e.what();
    cudaGetLastError();  // clear an error that does not stick
    const cudaError_t sticky = cudaDeviceSynchronize();
    if (sticky != cudaSuccess) {
      *broken = fmt::format("{} {}: {}", kernel_op_name(c.op), kernel_case_params(c),
                            cudaGetErrorString(sticky));
      row.note += "; the CUDA context is broken";
    }
  }
  return row;
}

}  // namespace

Report run_kernel_suite(const KernelSuiteOptions& options) {
  const std::vector<KernelCase> cases =
      select_kernel_cases(kernel_cases(options.quick), options.only);
  const DeviceInfo info = require_device(options.device, "bench kernels");
  BRAID_CUDA_CHECK(cudaSetDevice(options.device));

  Report run = start_report(options.quick ? "kernels (quick)" : "kernels", info);
  const auto add = [&](ResultRow r) { record_row(run, std::move(r)); };
  // The ceilings first: every row's % of ceiling and roofline class read against them.
  measure_copy_ceiling(options.quick, options.device, add);
  measure_gemm_ceiling(options.quick, options.device, add);
  try {
    measure_fp8_gemm_ceiling(options.quick, options.device, add);
  } catch (const std::exception& e) {  // the fp8 rows then have no ceiling; the run goes on
    ResultRow r;
    r.name = kFp8GemmRow;
    r.params = "ceiling";
    r.timing = "not measured";
    r.bound = Bound::compute_fp8;
    r.note = std::string("FAILED: ") + e.what();
    add(std::move(r));
  }
  run.ceilings = ceilings_from_rows(run.rows);

  std::string broken;  // set once an error leaves the CUDA context unusable
  for (size_t i = 0; i < cases.size(); ++i) {
    const KernelCase& c = cases[i];
    fmt::print(stderr, "[{}/{}] {} {}\n", i + 1, cases.size(), kernel_op_name(c.op),
               kernel_case_params(c));
    ResultRow row;
    if (broken.empty()) {
      row = measure_case(c, info, run.ceilings, options.quick, options.device, &broken);
    } else {
      row = case_row(c, run.ceilings);
      row.note = std::string(kKernelCaseFailed) + "not run: the CUDA context broke in " + broken;
    }
    add(std::move(row));
    if (broken.empty()) cuda_allocator::empty_cache();  // the next case has the whole card
  }
  return run;
}

}  // namespace braid::bench
