// `braidinfer bench moe`: the shapes it runs, the FLOPs and minimum bytes of each step of the
// MoE layer, the roofline class of a row, how steps are timed, the summary figures (router share,
// grouped experts against dense cuBLAS) and the tables and JSON it prints. CPU-only (no CUDA
// headers), so it is unit-tested in CI; the device work is in suites/moe_layer.h and the run
// in suites/cuda/moe.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "bench/harness/timer.h"
#include "bench/suites/attention.h"  // ErrorSummary
#include "bench/suites/moe_stats.h"

namespace braid::bench {

// One MoE layer's dimensions: bf16 SwiGLU experts, gate_up [E, 2I, H], down [E, H, I], router
// weight [E, H], softmax top-k routing (renormalised, as Mixtral and Qwen3-MoE's norm_topk_prob).
struct MoeModel {
  std::string name;  // "seed001", "qwen3"
  int64_t hidden = 0, inter = 0;
  int experts = 0, k = 0;
  bool renormalize = true;
};
MoeModel seed001_model();  // seed 001: H 4096, I 11008, 32 experts, top-2
MoeModel qwen3_model();    // Qwen3-30B-A3B: H 2048, I 768, 128 experts, top-8

// Up to this many tokens the layer takes the decode path (router gemm, route, moe_experts: one
// read of each chosen expert's weights); above it, the grouped path (permute, gather, two
// grouped GEMMs, combine). 16 is where ops::gemm leaves its GEMV kernel too.
inline constexpr int64_t kMoeDecodeMaxTokens = 16;

struct MoeShape {
  MoeModel model;
  int64_t tokens = 0;
  std::string label;  // "4x512" (seed 001's batch x seq) or "T=512"
  bool decode() const { return tokens <= kMoeDecodeMaxTokens; }
};

// --shape (seed001, qwen3 or all) and --tokens (empty: each model's preset counts: seed 001 at
// 4x512, 16x2048 and 32x2048 tokens; Qwen3 at 1, 4, 16, 512 and 4096). Throws braid::Error
// (invalid_argument) naming the option for an unknown shape or a token count < 1.
std::vector<MoeShape> moe_shapes(const std::string& which, const std::vector<int64_t>& tokens);
// Throws for samples < 0 (the number of tokens checked against the CPU reference).
void validate_moe_samples(int samples);

// Figures from other runs, printed beside ours (0 = none): ANCHORS.md's H100 torch._grouped_mm
// pipeline and naive per-expert loop, and seed 001's H100 target.
struct MoeAnchor {
  double grouped_mm_ms = 0, naive_loop_ms = 0, seed_target_ms = 0;
};
std::optional<MoeAnchor> moe_anchor(const MoeShape& s);

// The targets (printed, never asserted).
inline constexpr double kMoeTargetPercentOfDense = 85;  // grouped experts vs dense cuBLAS TFLOP/s
inline constexpr double kMoeTargetDecodeCopyPercent = 80;  // decode experts vs the copy ceiling
// DESIGN.md's bf16 tolerance for ||out - ref|| / ||ref||.
inline constexpr double kMoeRelL2Tolerance = 1e-2;

// With --skew the router gemm gets a bias of +kMoeSkewBias on the first max(k, E / 16) experts
// (the router logits have a standard deviation of about 1), so that they get most pairs.
inline constexpr float kMoeSkewBias = 3.0f;
std::vector<float> moe_skew_bias(int experts, int k);

// The rows of the bench. Components in pipeline order, then the whole layer (a sequence of
// launches, then the same as a CUDA graph replay), then the dense cuBLAS peer.
enum class MoeStep {
  router_gemm,    // ops::gemm, x [T, H] by router [E, H] -> logits [T, E]
  route,          // moe_route_topk_softmax
  permute,        // moe_permute
  gather,         // moe_gather
  gate_up,        // moe_grouped_gemm swiglu: xs [P, H] by gate_up -> h [P, I]
  down,           // moe_grouped_gemm none: h [P, I] by down -> ys [P, H]
  combine,        // moe_combine
  experts,        // moe_experts (decode path)
  layer,          // every component, back to back
  layer_graph,    // every component, one CUDA graph
  dense_gate_up,  // ops::gemm xs [P, H] by one expert's gate_up [2I, H]
  dense_down,     // ops::gemm h [P, I] by one expert's down [H, I]
};
const char* moe_step_name(MoeStep s);  // the row name, "moe_grouped_gemm_swiglu"
// The components of a path, in order (what `layer` enqueues).
std::vector<MoeStep> moe_components(bool decode);

// What a routing put on the experts: P = pairs with a valid id, and the experts that got at
// least one pair (a mean over rotating input sets, hence fractional).
struct MoeRouting {
  int64_t pairs = 0;
  double active_experts = 0;
};

struct MoeCost {
  double flops = 0, bytes = 0;
};
// Expert FLOPs of P pairs: 2 P H 2I (gate_up) + 2 P I H (down).
double moe_expert_flops(const MoeModel& m, int64_t pairs);
// FLOPs and minimum bytes through device memory of one step (bf16 activations and weights, f32
// routing weights, i32 ids): each input read once and each output written once; expert weights
// counted only for the experts that got tokens. The layer counts x, the router weight, the active
// experts' weights and the output (its intermediates could stay on chip in a fused layer).
MoeCost moe_step_cost(MoeStep s, const MoeShape& shape, const MoeRouting& r);

// How a step is timed, from an estimate of one call: batches of calls between events, sized so
// one sample takes ~10 ms (~2 ms with --quick), as graph replays or back to back.
TimingConfig moe_timing(double estimate_us, bool quick, TimingMode mode);

// The token rows checked against the CPU reference: every row when tokens <= count, else the
// first, the last and random others (from `seed`) up to count. Sorted, distinct.
std::vector<int64_t> moe_sample_tokens(int64_t tokens, int count, uint64_t seed);

// The check of one case: the layer's output rows of the sampled tokens against the CPU
// reference (ops::moe_experts on the host, from the same bf16 inputs and the same routing), and
// the GPU moe_experts on the same rows against that reference (what a second implementation of
// the same contract differs by).
struct MoeCheck {
  int64_t tokens = 0;  // rows checked
  ErrorSummary layer_vs_cpu;
  ErrorSummary experts_vs_cpu;
  int64_t nonfinite = 0;  // NaN/Inf among the checked rows of the layer's output
  bool ok() const;        // nothing non-finite, layer_vs_cpu.rel_l2 <= kMoeRelL2Tolerance
};

// One measured shape.
struct MoeCase {
  MoeShape shape;
  bool skew = false;
  int sets = 1;  // rotating input sets (decode: different tokens, so different experts)
  MoeRouting routing;
  MoeLoadStats load;  // of input set 0
  std::vector<MoeStep> steps;
  std::vector<ResultRow> rows;    // parallel to steps (also recorded in the run)
  std::optional<MoeCheck> check;  // none with --samples 0
};

// Figures derived from a case's rows (0 where a row was not measured).
struct MoeSummary {
  double layer_ms = 0, layer_graph_ms = 0;
  double router_share = 0;  // (router gemm + route) / layer graph time
  // Expert FLOPs / time of the expert steps (the two grouped GEMMs, or moe_experts).
  double expert_tflops = 0;
  double dense_tflops = 0;         // the same FLOPs / dense cuBLAS time
  double percent_of_dense = 0;     // expert_tflops / dense_tflops * 100
  double expert_copy_percent = 0;  // the expert steps' GB/s against the copy ceiling
  double layer_tflops = 0;         // layer FLOPs (router + experts) / layer graph time
};
MoeSummary moe_summary(const MoeCase& c, const Ceilings& ceil);

// Text: one table per case, the summary lines, and the load and validation tables.
std::string moe_case_table(const MoeCase& c, const Ceilings& ceil);
std::string moe_summary_lines(const MoeCase& c, const Ceilings& ceil);
std::string moe_load_table(const std::vector<MoeCase>& cases);
std::string moe_validation_table(const std::vector<MoeCase>& cases);

// The bench's own JSON section (every case with its rows' derived figures, load statistics,
// check and summary, and the targets).
nlohmann::json moe_json(const std::vector<MoeCase>& cases, const Ceilings& ceil);

// `bench moe`: --shape seed001|qwen3|all, --tokens, --samples, --skew, --quick; exits 1 when a
// shape fails its check.
SuiteRun moe_command(CLI::App& cmd);  // suites/cuda/moe.cpp

}  // namespace braid::bench
