// `braidinfer bench router`: the arithmetic behind its tables (bytes moved, transfer time at the
// copy ceiling, bandwidth use, share of the fixed launch cost), the check of the router's outputs
// against the CPU reference, the ANCHORS.md figures printed beside ours, and the tables laid out
// as seed 000 lays them out. CPU-only (no CUDA headers), so it is unit-tested in CI; the command
// that measures is suites/cuda/router.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/harness/stats.h"
#include "bench/harness/suite.h"

namespace braid::bench {

// One call of ops::moe_route_topk_softmax (n_group == 0) or ops::moe_route_grouped (n_group >= 1,
// with a bias of bias_bytes per expert): logits [tokens, experts] of logit_bytes each, outputs
// topk_weights [tokens, k] f32 and topk_ids [tokens, k] i32.
struct RouterShape {
  int64_t tokens = 1;
  int experts = 128;
  int k = 8;
  size_t logit_bytes = 2;  // bf16
  int n_group = 0;
  int topk_group = 0;
  size_t bias_bytes = 0;
  bool grouped() const { return n_group > 0; }
};

// "moe_route_topk_softmax" or "moe_route_grouped".
const char* router_op_name(const RouterShape& s);

// The targets, printed beside the measurements (never asserted).
inline constexpr double kRouterTargetAloneUs = 4.0;     // per call, timed alone
inline constexpr double kRouterTargetSpeedupVsTorch = 5.0;  // PyTorch softmax + topk time / ours
// The weights are probabilities in [0, 1] computed in fp32 by both sides; DESIGN.md's fp32
// tolerance (1e-5) taken as an absolute bound.
inline constexpr double kRouterWeightTolerance = 1e-5;

// Throws braid::Error (invalid_argument) naming the option: experts in [1, 512], k in
// [1, min(16, experts)] (ops.h's limits), at least one token count, each >= 1.
void validate_router_args(int experts, int k, const std::vector<int64_t>& tokens);

// Minimum bytes through memory per call: logits read once, the grouped router's bias read once
// (per call, not per token), weights (f32) and ids (i32) written once. Qwen3-30B-A3B (E=128, k=8, bf16): 256 + 32 + 32 = 320 bytes per token. (Seed 000 counts
// 352: its kernel also writes vLLM's token_expert_indices, a third [T, k] i32.)
double router_bytes(const RouterShape& s);

// Nanoseconds to move `bytes` at `gbps` GB/s (1 GB/s = 1 byte/ns); 0 when gbps is unknown (<= 0).
double transfer_ns(double bytes, double gbps);

// Outputs against the reference, over tokens * k entries (row-major [tokens, k]).
struct RouterCheck {
  int64_t entries = 0;
  int64_t id_mismatches = 0;        // entries whose expert id differs from the reference
  double max_abs_weight_error = 0;  // NaN when any weight is NaN (an unwritten output)
  bool ok() const;  // ids all equal and max_abs_weight_error <= kRouterWeightTolerance
};
RouterCheck check_router(const float* weights, const int32_t* ids, const float* ref_weights,
                         const int32_t* ref_ids, int64_t entries);

// A timing of the minimal read-write kernel (seed 000's "fixed overhead"), or of the empty kernel.
struct BaselineLine {
  std::string kernel;  // "empty_kernel", "minimal_rw_kernel"
  std::string mode;    // "alone", "back_to_back", "graph"
  std::string timing;  // the timer's label, "per_launch", "graph x1000"
  Stats stats;
};

// One router measurement: a token count timed one way, its check, and the figures derived from
// the copy ceiling and the same-mode baseline of the same run.
struct RouterLine {
  RouterShape shape;
  std::string mode;    // as BaselineLine::mode
  std::string timing;  // the timer's label
  Stats stats;
  RouterCheck check;
  double baseline_us = 0;  // median of minimal_rw_kernel timed the same way (0 = not measured)
  double copy_gbps = 0;    // copy ceiling of the run
};

struct RouterFigures {
  double bytes = 0;
  double transfer_ns = 0;          // bytes at the copy ceiling
  double bw_utilisation = 0;       // transfer time / measured time (fraction)
  double overhead_share = 0;       // baseline / measured time (fraction; 0 without a baseline)
  double above_baseline_us = 0;    // measured time - baseline
};
RouterFigures router_figures(const RouterLine& line);

// ANCHORS.md, H100: PyTorch softmax + top-8 over 128 experts (bf16 logits), eager and inside a
// CUDA graph, for the token counts it lists (1, 256, 1024, 16384); nullopt for other shapes.
// Measured in another run (not by this binary); `compare router` measures both in one process.
struct TorchAnchor {
  double eager_us, graph_us;
};
std::optional<TorchAnchor> torch_router_anchor(const RouterShape& s);

// Seed 000's tables, for the baseline lines and the router lines of one mode.
std::string baseline_table(const std::vector<BaselineLine>& lines);
std::string router_table(const std::vector<RouterLine>& lines);
// "data ratio 1 : 4 : 256 : 1024 / time ratio 1.00 : 1.01 : ..." (relative to the first line).
std::string router_ratios(const std::vector<RouterLine>& lines);
// The targets beside the alone lines, the ANCHORS.md PyTorch figure where there is one,
// and the token count at which moving the data at the copy ceiling would take as long as the
// fixed cost (seed 000's "to achieve high bandwidth utilisation").
std::string router_targets(const std::vector<RouterLine>& alone, double baseline_alone_us);

// The bench's own JSON section: every line with its derived figures and check, and the targets.
nlohmann::json router_json(const std::vector<BaselineLine>& baselines,
                           const std::vector<RouterLine>& lines);

// `bench router`: --router topk_softmax|grouped, --experts, --k, --n-group, --topk-group,
// --tokens, --quick; exits 1 when a configuration fails its check.
SuiteRun router_command(CLI::App& cmd);  // suites/cuda/router.cpp

}  // namespace braid::bench
