// `braidinfer bench attention-decode`: ops::attention_decode on the decode shapes of ANCHORS.md
// (32 query heads, 8 KV heads, head_dim 128, bf16, pages of 16 tokens in shuffled order), with the
// copy bandwidth measured in the same run as the ceiling. Bytes per call = K and V of every
// sequence read once, plus q read and out written.
#include "bench/suites/attention_decode.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/harness/cuda/ceilings.h"
#include "bench/harness/cuda/device.h"
#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/timer.h"
#include "bench/harness/host_copy.h"
#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "bench/suites/attention.h"
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"
#include "ops/cuda/cuda_ops.h"

namespace braid::bench {

namespace {

constexpr int64_t kQHeads = 32, kKvHeads = 8, kHeadDim = 128, kPageSize = 16;
constexpr uint64_t kSeed = 0xdec0de5eedull;

struct DecodeShape {
  int64_t batch, kv_len;
  const char* anchor;  // the H100 peers (ANCHORS.md)
};

const DecodeShape kShapes[] = {
    {1, 4096, "H100 cuDNN 19.7 us (853 GB/s), FA2 29.0 us"},
    {1, 32768, "H100 cuDNN 65.2 us (2059 GB/s), FA2 73.3 us"},
    {16, 4096, "H100 cuDNN 102 us (2623 GB/s), FA2 109 us"},
    {64, 8192, "H100 cuDNN 709 us (3030 GB/s), FA2 797 us"},
};

struct DecodeArgs {
  bool quick = false;
  std::vector<int> splits;  // extra rows with these split counts (tuning)
};

TimingConfig timing(TimingMode mode, bool quick) {
  TimingConfig c;
  c.mode = mode;
  c.warmup = quick ? 2 : 5;
  c.reps = quick ? 5 : 30;
  c.batch = quick ? 3 : 20;
  return c;
}

// The inputs of one shape: `sets` copies of the K/V pools (rotated so that a small cache is not
// read from L2), one page table shuffling the pages of every sequence, all lengths = kv_len.
struct DecodeInputs {
  std::vector<OwnedTensor> k_pages, v_pages;
  OwnedTensor q, page_table, kv_lens, out, lse, workspace;
  ops::PagedKV kv(int set) const { return {k_pages[set], v_pages[set], page_table, kv_lens}; }
};

DecodeInputs make_inputs(const DecodeShape& s, int sets, int64_t workspace_floats, Device dev) {
  DecodeInputs in;
  const int64_t pages_per_seq = (s.kv_len + kPageSize - 1) / kPageSize;
  const int64_t num_pages = s.batch * pages_per_seq;
  for (int i = 0; i < sets; ++i) {
    in.k_pages.emplace_back(DType::bf16, std::vector<int64_t>{num_pages, kPageSize, kKvHeads, kHeadDim}, dev);
    in.v_pages.emplace_back(DType::bf16, std::vector<int64_t>{num_pages, kPageSize, kKvHeads, kHeadDim}, dev);
    fill_uniform(in.k_pages.back(), kSeed + 2 * i, -1.0f, 1.0f, {});
    fill_uniform(in.v_pages.back(), kSeed + 2 * i + 1, -1.0f, 1.0f, {});
  }
  in.q = OwnedTensor(DType::bf16, {s.batch, kQHeads, kHeadDim}, dev);
  fill_uniform(in.q, kSeed - 1, -1.0f, 1.0f, {});

  OwnedTensor table(DType::i32, {s.batch, pages_per_seq}, Device::cpu());
  std::iota(table.view().ptr<int32_t>(), table.view().ptr<int32_t>() + num_pages, 0);
  std::shuffle(table.view().ptr<int32_t>(), table.view().ptr<int32_t>() + num_pages,
               std::mt19937_64(kSeed));
  OwnedTensor lens(DType::i32, {s.batch}, Device::cpu());
  std::fill_n(lens.view().ptr<int32_t>(), s.batch, static_cast<int32_t>(s.kv_len));
  in.page_table = OwnedTensor(DType::i32, {s.batch, pages_per_seq}, dev);
  in.kv_lens = OwnedTensor(DType::i32, {s.batch}, dev);
  copy(table, in.page_table);
  copy(lens, in.kv_lens);

  in.out = OwnedTensor(DType::bf16, {s.batch, kQHeads, kHeadDim}, dev);
  in.lse = OwnedTensor(DType::f32, {s.batch, kQHeads}, dev);
  in.workspace = OwnedTensor(DType::f32, {workspace_floats}, dev);
  return in;
}

// The outputs were poisoned with NaN before timing: one left means the timed call did not
// write its output, and its time means nothing.
void expect_written(const Tensor& t, const std::string& what) {
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  OwnedTensor host(t.dtype, shape, Device::cpu());
  copy(t, host);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(load_as_float(host.data(), t.dtype, i)))
      throw Error(ErrorKind::internal,
                  fmt::format("bench attention-decode: {}: element {} is not finite after timing",
                              what, i));
}

// The output of set 0 against the fp64 reference for the first and last sequences and query
// heads 0 and 31 (different KV heads): each sequence's keys gathered page by page through the
// page table, as the kernel reads them.
Accuracy check_against_reference(const DecodeShape& s, const DecodeInputs& in, float scale) {
  const int64_t pages_per_seq = (s.kv_len + kPageSize - 1) / kPageSize;
  const std::vector<float> table = host_floats(in.page_table);
  const std::vector<float> q = host_floats(in.q);
  const std::vector<float> out = host_floats(in.out);
  const int64_t row = kKvHeads * kHeadDim;  // one token's K (or V) in a page
  ErrorAccumulator acc;
  std::vector<double> ref(kHeadDim);
  const std::vector<int64_t> seqs = s.batch > 1 ? std::vector<int64_t>{0, s.batch - 1}
                                                : std::vector<int64_t>{0};
  for (int64_t b : seqs) {
    std::vector<float> k, v;  // [kv_len, kv_heads, head_dim] of this sequence
    for (int64_t p = 0; p < pages_per_seq; ++p) {
      const int64_t page = static_cast<int64_t>(table[size_t(b * pages_per_seq + p)]);
      const std::vector<float> kp = host_floats(in.k_pages[0].view().slice(0, page, page + 1));
      const std::vector<float> vp = host_floats(in.v_pages[0].view().slice(0, page, page + 1));
      k.insert(k.end(), kp.begin(), kp.end());
      v.insert(v.end(), vp.begin(), vp.end());
    }
    for (int64_t h : {int64_t{0}, kQHeads - 1}) {
      const int64_t kv_head = h / (kQHeads / kKvHeads);
      reference_attention_row(&q[size_t((b * kQHeads + h) * kHeadDim)],
                                     &k[size_t(kv_head * kHeadDim)], &v[size_t(kv_head * kHeadDim)],
                                     s.kv_len, kHeadDim, row, scale, ref.data());
      acc.add(&out[size_t((b * kQHeads + h) * kHeadDim)], ref.data(), kHeadDim);
    }
  }
  Accuracy a;
  a.error = acc.summary();
  a.reference = fmt::format("cpu fp64, {} sequences x 2 query heads", seqs.size());
  a.rel_l2_tolerance = rel_l2_tolerance_for(2);
  return a;
}

double decode_bytes(const DecodeShape& s) {
  const double kv = 2.0 * double(s.batch) * double(s.kv_len) * kKvHeads * kHeadDim * 2;
  const double q_out = 2.0 * double(s.batch) * kQHeads * kHeadDim * 2;
  return kv + q_out;
}

double decode_flops(const DecodeShape& s) {  // q.k and p.v for every (query head, key)
  return 4.0 * double(s.batch) * kQHeads * double(s.kv_len) * kHeadDim;
}

// `splits` = 0: ops::attention_decode as a caller sees it; otherwise the CUDA kernels with that
// split count (the op's checks have run on the same tensors first).
void measure_shape(const DecodeShape& s, const DecodeArgs& args, const DeviceInfo& info,
                   Device dev, const std::function<void(ResultRow)>& add) {
  const int64_t set_bytes = static_cast<int64_t>(decode_bytes(s));
  const int sets = rotating_sets(static_cast<size_t>(set_bytes), info.l2_bytes, 1);
  const int64_t capacity = (s.kv_len + kPageSize - 1) / kPageSize * kPageSize;
  int64_t ws = ops::attention_decode_workspace_floats(s.batch, kQHeads, kHeadDim, capacity);
  for (int n : args.splits) ws = std::max<int64_t>(ws, s.batch * kQHeads * n * (kHeadDim + 1));
  DecodeInputs in = make_inputs(s, sets, ws, dev);
  const float scale = 1.0f / std::sqrt(float(kHeadDim));

  std::vector<int> variants = {0};
  const int chosen = cuda::attention_decode_splits(in.q, in.kv(0), INT_MAX);
  variants.insert(variants.end(), args.splits.begin(), args.splits.end());
  for (int splits : variants) {
    for (auto mode : {TimingMode::back_to_back, TimingMode::graph}) {
      TimingConfig cfg = timing(mode, args.quick);
      cfg.sets = sets;
      fill_bytes(in.out, 0xFF);
      fill_bytes(in.lse, 0xFF);
      ops::attention_decode(in.q, in.kv(0), scale, in.out, in.lse, in.workspace);  // checks
      LaunchFn fn = [&](int set, Stream st) {
        ops::attention_decode(in.q, in.kv(set), scale, in.out, in.lse, in.workspace, st);
      };
      if (splits > 0)
        fn = [&, splits](int set, Stream st) {
          cuda::attention_decode(in.q, in.kv(set), scale, in.out, in.lse, in.workspace, splits, st);
        };
      const Stats st = time_launches(fn, cfg);
      expect_written(in.out, "out");
      expect_written(in.lse, "lse");
      fn(0, {});  // the last timed launch may have read another set: the check reads set 0's
      ResultRow r;
      r.accuracy = check_against_reference(s, in, scale);
      r.name = "attention_decode_bf16";
      r.params = fmt::format("b={} kv={} q32 kv8 d128 page16 {}", s.batch, s.kv_len,
                             splits == 0 ? fmt::format("splits=auto({})", chosen)
                                         : fmt::format("splits={}", splits));
      r.timing = timing_label(cfg) + (sets > 1 ? fmt::format(", {} sets", sets) : "");
      r.stats = st;
      r.bytes = double(set_bytes);
      r.flops = decode_flops(s);
      r.bound = Bound::memory;
      r.note = splits == 0 ? s.anchor : "";
      add(std::move(r));
    }
  }
}

SuiteResult run_attention_decode(const DecodeArgs& args) {
  std::string reason;
  const auto info = query_device(0, &reason);
  if (!info) return not_measured("braidinfer bench attention-decode: " + reason);
  const Device dev = Device::cuda(0);
  Report run = start_report(args.quick ? "attention-decode (quick)" : "attention-decode", *info);
  auto add = [&](ResultRow r) { record_row(run, std::move(r)); };
  fmt::print(stderr, "braidinfer bench attention-decode{}: measuring...\n", args.quick ? " --quick" : "");
  run.ceilings = measure_ceilings(args.quick, 0, false, false, add);
  cuda_allocator::empty_cache();
  for (const DecodeShape& s : kShapes) {
    measure_shape(s, args, *info, dev, add);
    cuda_allocator::empty_cache();
  }

  return report_result(run, fmt::format("bytes = K + V of every sequence + q + out; % ceil = of "
                                        "this run's copy ceiling, {:.2f} TB/s\n",
                                        run.ceilings.copy_gbps / 1000));
}

}  // namespace

SuiteRun attention_decode_command(CLI::App& cmd) {
  auto args = std::make_shared<DecodeArgs>();
  cmd.add_flag("--quick", args->quick, "Fewer repetitions (smoke test)");
  cmd.add_option("--splits", args->splits,
                  "Also time the CUDA kernels with these split counts (tuning), e.g. --splits 1 2 4")
      ->delimiter(',');
  return [args] { return run_attention_decode(*args); };
}

}  // namespace braid::bench
