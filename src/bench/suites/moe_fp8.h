// `braidinfer bench moe-fp8`: the FP8 block-scale MoE layers it measures, the FLOPs and minimum
// bytes of each step, the floors, flashinfer-bench's match rule, the summary figures and the
// tables and JSON it prints. CPU-only (no CUDA headers), so it is unit-tested in CI; the tensors
// and steps are in suites/moe_fp8_layer.h, the checks in suites/moe_fp8_check.h and the run in
// suites/cuda/moe_fp8.cpp.
//
// Two layers:
//   seed003  seed 003's definition moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048:
//            DeepSeek-V3 routing over 256 experts, the 32 local ones computed (H 7168, I 2048),
//            fp8 hidden states and weights with 128-blocks of scales; ops::moe_fp8_block_scale,
//            and the same pipeline built from the public ops to time each step.
//   seed001  seed 001's MoE layer (H 4096, I 11008, 32 experts, top-2 softmax) in FP8: bench
//            moe's bf16 router and permutation, the gathered rows quantized to fp8 (1 x 128
//            blocks), moe_grouped_gemm_fp8 on its weights quantized in 128 x 128 blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "bench/suites/attention.h"  // ErrorSummary
#include "bench/suites/moe.h"

namespace braid::bench {

enum class Fp8Layer { seed003, seed001 };
const char* fp8_layer_name(Fp8Layer l);  // "seed003", "seed001"

// The dimensions the FLOP and byte counts need. For seed003, experts = the local experts (the
// ones computed), routed_experts = every expert the router scores (E_global); for seed001 both 32.
struct Fp8Dims {
  int64_t hidden = 0, inter = 0;
  int experts = 0, routed_experts = 0, k = 0;
};
Fp8Dims fp8_dims(Fp8Layer l);

// Seed 003's definition, beyond its dimensions.
inline constexpr int kSeed003GlobalExperts = 256, kSeed003LocalExperts = 32;
inline constexpr int kSeed003LocalOffset = 0;  // local experts [0, 32): group 0 of 8
inline constexpr int kSeed003Groups = 8, kSeed003TopkGroup = 4, kSeed003TopK = 8;
inline constexpr float kSeed003ScalingFactor = 2.5f;

struct Fp8Shape {
  Fp8Layer layer = Fp8Layer::seed003;
  int64_t tokens = 0;
  std::string label;  // "T=4096", or seed 001's "4x512"
};

// --shape (seed003, seed001 or all) and --tokens (empty: seed003 at 1, 16, 256 and 4096 tokens;
// seed001 at 4x512, 16x2048 and 32x2048). Throws braid::Error (invalid_argument) naming the
// option for an unknown shape, a token count < 1, or one <= kMoeDecodeMaxTokens with seed001 (its
// FP8 layer replaces the experts of bench moe's grouped path, which starts above that).
std::vector<Fp8Shape> moe_fp8_shapes(const std::string& which, const std::vector<int64_t>& tokens);
// --terms (seed003's intermediate_terms; default 3 then 1): each in [1, ops::kFp8MaxTerms].
void validate_fp8_terms(const std::vector<int>& terms);

// Seed 001's H100 targets (ms; 0 = none) beside the FP8 layer.
double seed001_target_ms(int64_t tokens);

// The rows of the bench, components in pipeline order, then the whole layer.
enum class Fp8Step {
  // seed003: the pipeline of moe_fp8_block_scale built from the public ops, then the op itself
  ds_route,     // moe_route_grouped over the 256 experts
  ds_permute,   // moe_permute over the 32 local experts
  ds_gather,    // moe_gather_fp8: fp8 rows and their scales in permuted order
  ds_gemm1,     // moe_grouped_gemm_fp8 swiglu_gate_last: fp8 intermediate, `terms` terms
  ds_gemm2,     // moe_grouped_gemm_fp8 none over those terms: f32 expert outputs
  ds_combine,   // moe_combine: bf16 output
  ds_pipeline,  // the six above, one CUDA graph
  ds_op,        // ops::moe_fp8_block_scale, one CUDA graph
  // seed001 in FP8
  router_gemm,  // as bench moe: ops::gemm x [T, H] by router [E, H] (bf16)
  route,        // moe_route_topk_softmax
  permute,      // moe_permute
  gather,       // moe_gather (bf16 rows)
  quantize,     // moe_fp8_quantize, 1 term: xs -> fp8 xq and its scales
  gate_up,      // moe_grouped_gemm_fp8 swiglu: fp8 h (1 term) and its scales
  down,         // moe_grouped_gemm_fp8 none: bf16 ys
  combine,      // moe_combine
  layer,        // router_gemm .. combine, back to back
  layer_graph,  // the same, one CUDA graph
  bf16_layer_graph,  // bench moe's bf16 layer on the same x, one CUDA graph
  dense_gate_up,     // cuBLASLt fp8: xq [P, H] by one expert's gate_up [2I, H] (same FLOPs)
  dense_down,        // cuBLASLt fp8: h [P, I] by one expert's down [H, I]
};
const char* fp8_step_name(Fp8Step s);
// The components of a layer's forward pass, in order (what ds_pipeline / layer enqueue).
std::vector<Fp8Step> fp8_components(Fp8Layer l);
bool fp8_is_component(Fp8Step s);

// What a routing put on the local experts: pairs with a local expert (T * k when every choice is
// local, as seed 003's inputs make it) and the distinct local experts chosen.
struct Fp8Routing {
  int64_t pairs = 0;
  int active_experts = 0;
};
// From the chosen ids [tokens, k] (row-major): ids in [first, first + experts) count.
Fp8Routing fp8_routing(const int32_t* ids, int64_t tokens, int k, int first, int experts);

// Bytes per element of an fp8 operand with its fp32 scales: 1 + 4/128 (activations, 1 x 128
// blocks) and 1 + 4/16384 (weights, 128 x 128 blocks).
inline constexpr double kFp8ActBytes = 1.0 + 4.0 / 128, kFp8WeightBytes = 1.0 + 4.0 / 16384;

// FLOPs and minimum bytes through device memory of one step: each input read once, each output
// written once, expert weights only of the active experts. `flops` is what the step executes:
// seed003's second GEMM runs once per intermediate term, so with `terms` terms it executes
// terms x its FLOPs; `definition_flops` counts it once (the definition's FLOPs, 2 P (2I H + H I)).
// `fp8` marks fp8 tensor-core work (read against the fp8 GEMM ceiling).
struct Fp8Cost {
  double flops = 0, definition_flops = 0, bytes = 0;
  bool fp8 = false;
};
Fp8Cost moe_fp8_step_cost(Fp8Step s, const Fp8Shape& shape, const Fp8Routing& r, int terms);

// The bound a row's "% of ceiling" is read against: fp8 work at or above the fp8 ridge is
// Bound::compute_fp8, other work as roofline_bound().
Bound fp8_step_bound(const Fp8Cost& c, const Ceilings& ceil);
Roofline fp8_step_roofline(const Fp8Cost& c, const Ceilings& ceil);

// The floor of a whole layer: max(the active experts' fp8 weights and scales / the copy ceiling,
// the definition's FLOPs / the fp8 GEMM ceiling). 0 where a ceiling is unknown.
struct Fp8Floor {
  double weight_bytes = 0, flops = 0;
  double memory_us = 0, compute_us = 0, floor_us = 0;
  bool compute_bound = false;
};
Fp8Floor moe_fp8_floor(const Fp8Shape& s, const Fp8Routing& r, const Ceilings& ceil);

// flashinfer-bench's correctness rule for low-bit kernels (its LowBitEvaluator): an element
// fails only when |out - ref| > atol AND |out - ref| / |ref| > rtol (|ref| = 0: relative error
// infinite, so any |diff| > atol fails); a NaN or Inf output fails. A case passes when at least
// required_ratio of its elements pass.
struct MatchRule {
  double atol = 1e-2, rtol = 1e-2, required_ratio = 0.95;
};
bool element_matches(double out, double ref, const MatchRule& rule);
struct MatchCount {
  int64_t elements = 0, matched = 0;
  double ratio() const;  // matched / elements (0 for none)
  bool passes(const MatchRule& rule) const;
};
class MatchCounter {
 public:
  explicit MatchCounter(MatchRule rule = {}) : rule_(rule) {}
  void add(const float* out, const double* ref, int64_t n);
  MatchCount count() const { return count_; }

 private:
  MatchRule rule_;
  MatchCount count_;
};

// The seed003 pipeline's output against the op's must agree to this rel L2 (the same arithmetic
// up to rounding order; a requantised intermediate can flip one fp8 rounding).
inline constexpr double kFp8PipelineVsOpTolerance = 5e-3;
// The seed001 FP8 layer against fp32 arithmetic on the same fp8 weights and quantized x: what its
// own roundings cost (h requantised to 1 fp8 term, bf16 ys and output): about 2.3% rel L2 in a
// numpy model of the layer, so 4% leaves room for noise but not for a wrong block or scale.
inline constexpr double kFp8LayerRelL2Tolerance = 4e-2;

// seed003's check of one (shape, terms): the op's output on sampled tokens against two fp32
// references, ops::moe_fp8_block_scale on the CPU (cpu_op, the library's reference) and the
// definition written out in the bench (fp32: dequantized inputs, fp64 sums, the intermediate
// unrounded); and the bench's pipeline of public ops against the op on every token.
struct Fp8DsCheck {
  int terms = 0;
  int64_t tokens = 0;  // sampled rows
  ErrorSummary vs_fp32, vs_cpu_op;
  MatchCount match_fp32, match_cpu_op;
  ErrorSummary pipeline_vs_op;
  int64_t nonfinite = 0;  // NaN/Inf in the op's sampled rows
  // No NaN/Inf, the pipeline agrees with the op, and with 3 terms (the default, kFp8MaxTerms)
  // the rule passes against both references; fewer terms are expected to fail it (ops.h): shown,
  // not judged.
  bool ok(const MatchRule& rule = {}) const;
};

// seed001's check: the FP8 layer's output on sampled tokens against fp32 arithmetic on the bf16
// weights and x (what FP8 costs the layer) and on the fp8 weights and the fp8-quantized x (its
// own roundings); bench moe's bf16 layer on the same rows against the first, for scale.
struct Fp8LayerCheck {
  int64_t tokens = 0;
  ErrorSummary vs_fp32, vs_fp8_fp32, bf16_vs_fp32;
  int64_t nonfinite = 0;
  bool ok() const;  // no NaN/Inf and vs_fp8_fp32.rel_l2 <= kFp8LayerRelL2Tolerance
};

// One measured case: a shape and (seed003) a number of intermediate terms.
struct MoeFp8Case {
  Fp8Shape shape;
  int terms = 1;
  Fp8Routing routing;
  std::vector<Fp8Step> steps;
  std::vector<ResultRow> rows;  // parallel to steps (also recorded in the run)
  std::optional<Fp8DsCheck> ds_check;
  std::optional<Fp8LayerCheck> layer_check;
  std::string dense_error;  // why the dense fp8 peer has no rows ("" when it has)
};

// Figures derived from a case's rows (0 where a row was not measured).
struct MoeFp8Summary {
  double time_ms = 0;      // the whole layer: seed003 ds_op, seed001 layer_graph
  double pipeline_ms = 0;  // seed003: the bench's pipeline of public ops, one graph
  Fp8Floor floor;
  double percent_of_floor = 0;  // floor / time
  double executed_tflops = 0, definition_tflops = 0;
  Roofline roofline = Roofline::memory;
  // seed001
  double expert_tflops = 0;        // expert FLOPs / (gate_up + down) time
  double expert_percent_of_fp8 = 0;
  double dense_fp8_tflops = 0, percent_of_dense_fp8 = 0;
  double bf16_layer_ms = 0, speedup_vs_bf16 = 0;  // bf16 time / fp8 time
  double router_share = 0;                        // (router gemm + route) / layer
  double seed_target_ms = 0;
};
MoeFp8Summary moe_fp8_summary(const MoeFp8Case& c, const Ceilings& ceil);

std::string moe_fp8_case_table(const MoeFp8Case& c, const Ceilings& ceil);
std::string moe_fp8_summary_lines(const MoeFp8Case& c, const Ceilings& ceil);
std::string moe_fp8_validation_table(const std::vector<MoeFp8Case>& cases);
nlohmann::json moe_fp8_json(const std::vector<MoeFp8Case>& cases, const Ceilings& ceil);

// `bench moe-fp8`: --shape seed003|seed001|all, --tokens, --terms, --samples, --quick; exits 1
// when a case fails its check.
SuiteRun moe_fp8_command(CLI::App& cmd);  // suites/cuda/moe_fp8.cpp

}  // namespace braid::bench
