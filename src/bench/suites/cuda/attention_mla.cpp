// `braidinfer bench attention-mla`: ops::attention_mla on decode shapes (one query per sequence)
// of DeepSeek-V3 (128 heads) and DeepSeek-V2-Lite (16 heads): latent rank 512, rope 64, bf16,
// pages of 64 tokens in shuffled order, every sequence kv_len long. Bytes per call = every
// sequence's latent rows read once (all heads share them) + q read + out written; FLOPs = the
// scores (r + dr) and the weighted sum (r) per head and key, two per multiply-add. The peer is
// FlashMLA's published figure (not run here: no FlashMLA on the machine).
#include "bench/suites/attention_mla.h"

#include <CLI/CLI.hpp>

#include <fmt/core.h>

#include <algorithm>
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
#include "braid/buffer.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench {

namespace {

constexpr int64_t kRank = 512, kRope = 64, kPageSize = 64;
constexpr uint64_t kSeed = 0x6d1a5eedull;

struct MlaShape {
  int64_t batch, kv_len, heads;
  const char* note;
};

const MlaShape kShapes[] = {
    {1, 4096, 128, "DeepSeek-V3"},
    {64, 4096, 128, "DeepSeek-V3"},
    {128, 4096, 128, "DeepSeek-V3; FlashMLA (published, H100): ~84% of copy bandwidth"},
    {1, 4096, 16, "DeepSeek-V2-Lite"},
    {64, 4096, 16, "DeepSeek-V2-Lite"},
};

TimingConfig timing(TimingMode mode, bool quick) {
  TimingConfig c;
  c.mode = mode;
  c.warmup = quick ? 2 : 5;
  c.reps = quick ? 5 : 30;
  c.batch = quick ? 3 : 20;
  return c;
}

// `sets` copies of the latent cache (rotated so that a small cache is not read from L2), one
// page table shuffling every sequence's pages, decode queries (cu_seqlens_q = 0, 1, ..., batch).
struct MlaInputs {
  std::vector<OwnedTensor> cache;
  OwnedTensor q_latent, q_rope, cu_seqlens_q, page_table, kv_lens, out, workspace;
};

MlaInputs make_inputs(const MlaShape& s, int sets, Device dev) {
  MlaInputs in;
  const int64_t pages_per_seq = (s.kv_len + kPageSize - 1) / kPageSize;
  const int64_t num_pages = s.batch * pages_per_seq;
  for (int i = 0; i < sets; ++i) {
    in.cache.emplace_back(DType::bf16, std::vector<int64_t>{num_pages, kPageSize, 1, kRank + kRope}, dev);
    fill_uniform(in.cache.back(), kSeed + i, -1.0f, 1.0f, {});
  }
  in.q_latent = OwnedTensor(DType::bf16, {s.batch, s.heads, kRank}, dev);
  in.q_rope = OwnedTensor(DType::bf16, {s.batch, s.heads, kRope}, dev);
  fill_uniform(in.q_latent, kSeed - 1, -1.0f, 1.0f, {});
  fill_uniform(in.q_rope, kSeed - 2, -1.0f, 1.0f, {});

  OwnedTensor table(DType::i32, {s.batch, pages_per_seq}, Device::cpu());
  std::iota(table.view().ptr<int32_t>(), table.view().ptr<int32_t>() + num_pages, 0);
  std::shuffle(table.view().ptr<int32_t>(), table.view().ptr<int32_t>() + num_pages,
               std::mt19937_64(kSeed));
  OwnedTensor lens(DType::i32, {s.batch}, Device::cpu()), cu(DType::i32, {s.batch + 1}, Device::cpu());
  std::fill_n(lens.view().ptr<int32_t>(), s.batch, static_cast<int32_t>(s.kv_len));
  std::iota(cu.view().ptr<int32_t>(), cu.view().ptr<int32_t>() + s.batch + 1, 0);
  in.page_table = OwnedTensor(DType::i32, {s.batch, pages_per_seq}, dev);
  in.kv_lens = OwnedTensor(DType::i32, {s.batch}, dev);
  in.cu_seqlens_q = OwnedTensor(DType::i32, {s.batch + 1}, dev);
  copy(table, in.page_table);
  copy(lens, in.kv_lens);
  copy(cu, in.cu_seqlens_q);

  in.out = OwnedTensor(DType::bf16, {s.batch, s.heads, kRank}, dev);
  const int64_t floats = ops::attention_mla_workspace_floats(s.batch, s.heads, kRank, pages_per_seq * kPageSize);
  if (floats > 0) in.workspace = OwnedTensor(DType::f32, {floats}, dev);
  return in;
}

// The output of set 0 against fp64 for the first and last sequences and heads 0 and heads-1:
// each sequence's rows gathered page by page through the page table, as the kernel reads them.
Accuracy check_against_reference(const MlaShape& s, const MlaInputs& in, float scale) {
  const int64_t pages_per_seq = (s.kv_len + kPageSize - 1) / kPageSize, width = kRank + kRope;
  const std::vector<float> table = host_floats(in.page_table);
  const std::vector<float> ql = host_floats(in.q_latent), qr = host_floats(in.q_rope);
  const std::vector<float> out = host_floats(in.out);
  ErrorAccumulator acc;
  const std::vector<int64_t> seqs = s.batch > 1 ? std::vector<int64_t>{0, s.batch - 1}
                                                : std::vector<int64_t>{0};
  for (int64_t b : seqs) {
    std::vector<float> rows;  // [kv_len, r + dr] of this sequence
    for (int64_t p = 0; p < pages_per_seq; ++p) {
      const int64_t page = static_cast<int64_t>(table[size_t(b * pages_per_seq + p)]);
      const std::vector<float> pr = host_floats(in.cache[0].view().slice(0, page, page + 1));
      rows.insert(rows.end(), pr.begin(), pr.end());
    }
    for (int64_t h : {int64_t{0}, s.heads - 1}) {
      const float* lat = &ql[size_t((b * s.heads + h) * kRank)];
      const float* rope = &qr[size_t((b * s.heads + h) * kRope)];
      std::vector<double> score(size_t(s.kv_len)), ref(kRank, 0.0);
      double mx = -INFINITY, sum = 0;
      for (int64_t t = 0; t < s.kv_len; ++t) {
        const float* c = &rows[size_t(t * width)];
        double d = 0;
        for (int64_t j = 0; j < kRank; ++j) d += double(lat[j]) * c[j];
        for (int64_t j = 0; j < kRope; ++j) d += double(rope[j]) * c[kRank + j];
        score[size_t(t)] = d * scale;
        mx = std::max(mx, score[size_t(t)]);
      }
      for (int64_t t = 0; t < s.kv_len; ++t) {
        const double p = std::exp(score[size_t(t)] - mx);
        sum += p;
        for (int64_t j = 0; j < kRank; ++j) ref[size_t(j)] += p * rows[size_t(t * width + j)];
      }
      for (double& v : ref) v /= sum;
      acc.add(&out[size_t((b * s.heads + h) * kRank)], ref.data(), kRank);
    }
  }
  Accuracy a;
  a.error = acc.summary();
  a.reference = fmt::format("cpu fp64, {} sequences x 2 heads", seqs.size());
  a.rel_l2_tolerance = rel_l2_tolerance_for(2);
  return a;
}

double mla_bytes(const MlaShape& s) {
  const double rows = double(s.batch) * double(s.kv_len) * (kRank + kRope) * 2;
  const double q_out = double(s.batch) * s.heads * (kRank + kRope + kRank) * 2;
  return rows + q_out;
}

double mla_flops(const MlaShape& s) {
  return 2.0 * double(s.batch) * s.heads * double(s.kv_len) * (2 * kRank + kRope);
}

void measure_shape(const MlaShape& s, bool quick, const DeviceInfo& info, Device dev,
                   const std::function<void(ResultRow)>& add) {
  const int64_t set_bytes = static_cast<int64_t>(mla_bytes(s));
  const int sets = rotating_sets(static_cast<size_t>(set_bytes), info.l2_bytes, 1);
  MlaInputs in = make_inputs(s, sets, dev);
  // DeepSeek-V3's softmax scale at its YaRN factor 40: 192^-0.5 x (0.1 ln 40 + 1)^2.
  const float m = 0.1f * std::log(40.0f) + 1.0f;
  const float scale = m * m / std::sqrt(192.0f);
  for (auto mode : {TimingMode::back_to_back, TimingMode::graph}) {
    TimingConfig cfg = timing(mode, quick);
    cfg.sets = sets;
    fill_bytes(in.out, 0xFF);
    auto call = [&](int set, Stream st) {
      ops::attention_mla(in.q_latent, in.q_rope, in.cu_seqlens_q, in.cache[size_t(set)],
                         in.page_table, in.kv_lens, /*causal=*/true, scale, in.out, Tensor{},
                         in.workspace, st);
    };
    call(0, {});  // the op's checks, outside the timing
    const Stats st = time_launches(call, cfg);
    call(0, {});  // the last timed launch may have read another set: the check reads set 0's
    ResultRow r;
    r.accuracy = check_against_reference(s, in, scale);
    r.name = "attention_mla_bf16";
    r.params = fmt::format("b={} kv={} heads={} r{} dr{} page{}", s.batch, s.kv_len, s.heads,
                           kRank, kRope, kPageSize);
    r.timing = timing_label(cfg) + (sets > 1 ? fmt::format(", {} sets", sets) : "");
    r.stats = st;
    r.bytes = double(set_bytes);
    r.flops = mla_flops(s);
    r.bound = s.heads >= 128 ? Bound::compute : Bound::memory;
    r.note = s.note;
    add(std::move(r));
  }
}

// Which shapes a run measures: --batch / --heads keep only the shapes with that value (0: all).
struct MlaFilter {
  int64_t batch = 0, heads = 0;
  bool keeps(const MlaShape& s) const {
    return (batch == 0 || s.batch == batch) && (heads == 0 || s.heads == heads);
  }
};

SuiteResult run_attention_mla(bool quick, const MlaFilter& filter) {
  // A filter that keeps no shape is named before anything is measured (or a GPU looked for).
  if (std::none_of(std::begin(kShapes), std::end(kShapes),
                   [&](const MlaShape& s) { return filter.keeps(s); })) {
    std::string shapes;
    for (const MlaShape& s : kShapes)
      shapes += fmt::format("{}batch {} x {} heads", shapes.empty() ? "" : ", ", s.batch, s.heads);
    throw_arg_error(ErrorKind::invalid_argument, "bench attention-mla", "--batch / --heads",
                    "a batch and head count of one of its shapes (" + shapes + ")",
                    fmt::format("--batch {} --heads {}", filter.batch, filter.heads));
  }
  std::string reason;
  const auto info = query_device(0, &reason);
  if (!info) return not_measured("braidinfer bench attention-mla: " + reason);
  const Device dev = Device::cuda(0);
  Report run = start_report(quick ? "attention-mla (quick)" : "attention-mla", *info);
  auto add = [&](ResultRow r) { record_row(run, std::move(r)); };
  fmt::print(stderr, "braidinfer bench attention-mla{}: measuring...\n", quick ? " --quick" : "");
  run.ceilings = measure_ceilings(quick, 0, false, false, add);
  cuda_allocator::empty_cache();
  for (const MlaShape& s : kShapes) {
    if (!filter.keeps(s)) continue;
    measure_shape(s, quick, *info, dev, add);
    cuda_allocator::empty_cache();
  }
  return report_result(run, fmt::format("bytes = every sequence's latent rows (576 bf16 per key) "
                                        "+ q + out; % ceil = of this run's copy ceiling, {:.2f} "
                                        "TB/s (128-head rows: of the GEMM ceiling too)\n",
                                        run.ceilings.copy_gbps / 1000));
}

}  // namespace

SuiteRun attention_mla_command(CLI::App& cmd) {
  auto quick = std::make_shared<bool>(false);
  auto filter = std::make_shared<MlaFilter>();
  cmd.add_flag("--quick", *quick, "Fewer repetitions (smoke test)");
  cmd.add_option("--batch", filter->batch, "Only the shapes of this batch (1 or 64 or 128)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--heads", filter->heads, "Only the shapes of this head count (16 or 128)")
      ->check(CLI::NonNegativeNumber);
  return [quick, filter] { return run_attention_mla(*quick, *filter); };
}

}  // namespace braid::bench
