// `braidinfer bench kernels`: every op of include/braid/ops.h timed on the GPU over shape sweeps
// taken from the models braidinfer runs (Llama-3.2-1B, Llama-3-8B, Qwen3-30B-A3B, DeepSeek-V3),
// each row checked against the op's CPU reference on the same inputs. This header is the CPU
// side: the case list, each case's FLOPs and minimum bytes, its check tolerance, the timing rule
// and the pass/fail rule of a run, so all of it is unit-tested in CI. The GPU runner is
// src/bench/suites/cuda/kernels*.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "bench/harness/timer.h"

namespace braid::bench {

// Every op the suite measures; the row name is kernel_op_name().
enum class KernelOp {
  embedding,
  rms_norm,
  add_rms_norm,
  rope_apply,
  silu_mul,
  softmax,
  argmax,
  kv_append,
  qk_norm_rope_kv_append,
  add_inplace,
  gemm,
  rms_norm_gemm,
  gemm_add,
  swiglu_gemm_add,
  rms_norm_gemm_argmax,
  attention_prefill,
  attention,
  attention_decode,
  paged_kv_gather,
  moe_route_topk_softmax,
  moe_route_grouped,
  moe_permute,
  moe_gather,
  moe_combine,
  moe_grouped_gemm,
  moe_experts,
  moe_fp8_quantize,
  moe_gather_fp8,
  moe_grouped_gemm_fp8,
  moe_fp8_block_scale,
};
const char* kernel_op_name(KernelOp op);  // the ops.h function name, "rms_norm"
std::vector<KernelOp> all_kernel_ops();   // in the order above

// One case: an op and its dimensions. Which fields an op reads is listed beside each; the others
// stay 0. Activations and weights are bf16 unless the op's entry in kernel_cases() says otherwise.
struct KernelCase {
  KernelOp op = KernelOp::rms_norm;
  std::string model;    // whose dimensions: "llama-3-8b", "qwen3-30b-a3b", "deepseek-v3"
  std::string variant;  // which projection or path: "gate", "lm_head", "swiglu", "gemm1"; or ""
  int64_t tokens = 0;   // T: tokens (rows); GEMM m; attention: sequences (batch)
  int64_t hidden = 0;   // H: hidden size (norms, adds, embedding, rope's packed QKV, MoE)
  int64_t inter = 0;    // I: MLP intermediate (silu_mul, swiglu_gemm_add's I, MoE experts)
  int64_t vocab = 0;    // V: embedding rows; softmax / argmax row width; LM head n
  int64_t n = 0, k = 0; // GEMMs: w [n, k]
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t seq_len = 0;  // prefill: tokens per sequence (queries = keys); decode: context length;
                        // paged_kv_gather: cached tokens per sequence
  int experts = 0;         // MoE: experts the tokens are spread over (local ones for fp8)
  int routed_experts = 0;  // moe_route_grouped, moe_fp8_block_scale: experts the router scores
  int top_k = 0, n_group = 0, topk_group = 0;
  int terms = 0;  // moe_fp8_quantize: fp8 terms; moe_fp8_block_scale: intermediate_terms
  // gemm on fp8 e4m3 weights: 128 (a scale per 128 x 128 block) or 1 (one per row); 0: bf16.
  int fp8_scale_rows = 0;
};

// "llama-3-8b gate m=128 n=14336 k=4096": the row's params, unique within kernel_cases().
std::string kernel_case_params(const KernelCase& c);

// FLOPs and minimum bytes through device memory of one call: every input read once and every
// output written once (weights of MoE experts only for the experts that get tokens; scratch
// tensors not at all). Elementwise and data-movement ops count no FLOPs (0: they are read
// against the copy ceiling). `fp8` marks fp8 tensor-core work (read against the fp8 ceiling).
struct KernelCost {
  double flops = 0, bytes = 0;
  bool fp8 = false;
};
KernelCost kernel_case_cost(const KernelCase& c);

// The ceiling a row is read against: memory for ops without FLOPs, else the roofline side of the
// run's ridge (fp8 work against the fp8 ridge: Bound::compute_fp8 above it).
Bound kernel_case_bound(const KernelCase& c, const Ceilings& ceilings);

// The rel L2 tolerance of the case's check (Accuracy::rel_l2_tolerance):
//   0 (exact): outputs that are indices (argmax, rms_norm_gemm_argmax, moe_permute) or copies
//     (embedding, kv_append, paged_kv_gather, moe_gather, moe_gather_fp8);
//   rel_l2_tolerance_for(output bytes) otherwise: 1e-5 for the routers' f32 weights, 1e-2 for
//     bf16 and fp8 outputs, and 1e-2 for moe_grouped_gemm_fp8 whatever its output type: Hopper's
//     fp8 tensor cores keep about 14 bits while they accumulate (tests/ops), so an fp32 output of
//     fp8 operands is only as close to the fp64 reference as a 16-bit type.
double kernel_case_tolerance(const KernelCase& c);

// The sweep: full (about 150 cases; the whole run, ceilings and CPU checks included, took 25 s on
// an H100) or quick (about 40 cases, a few of each op family: 6 s), in op order.
std::vector<KernelCase> kernel_cases(bool quick);

// `only` = comma-separated op names ("" = every case). Throws braid::Error (invalid_argument)
// naming an unknown op and listing the known ones.
std::vector<KernelCase> select_kernel_cases(const std::vector<KernelCase>& cases,
                                            const std::string& only);

// The text of --list: one line per case (index, op, params, bytes, FLOPs, check tolerance).
std::string kernel_case_list(const std::vector<KernelCase>& cases);

// Balanced routing, the same in every MoE case so that bytes follow from the shape: pair p
// (token p / k, choice p % k) of input set `set` goes to expert (37 (p + set * pairs)) mod E.
// 37 is prime to every power of two, so any E consecutive pairs (a token's k choices included)
// reach E distinct experts: min(pairs, E) experts get tokens, within one of pairs / E each.
int32_t balanced_expert(int64_t pair, int64_t set, int64_t pairs, int experts);
// The experts that get at least one of `pairs` pairs: min(pairs, experts).
int64_t balanced_active_experts(int64_t pairs, int experts);
// Expert offsets [E + 1] of `rows` permuted rows spread as evenly as possible (the first
// rows % E experts get one more): what moe_permute writes for a balanced routing.
std::vector<int32_t> balanced_expert_offsets(int64_t rows, int experts);

// How a case is timed, from one calibration launch of `estimate_us`: `batch` launches captured in
// a CUDA graph per sample so that a sample takes about 2 ms (0.5 ms with --quick), 15 samples (5),
// warm-up replays as many as launches in a batch, at most 20.
TimingConfig kernel_timing(double estimate_us, bool quick, int sets);

struct KernelSuiteOptions {
  bool quick = false;
  int device = 0;
  std::string only;  // comma list of op names, "" = all
};

// The note of a case that could not be measured starts with this (its row has no time).
inline constexpr const char* kKernelCaseFailed = "FAILED: ";
// Rows of kernel cases (not the ceilings' rows) that failed: not measured, or the check failed.
int kernel_suite_failures(const Report& run);

// Measures the copy, bf16 GEMM and fp8 GEMM ceilings (their rows kept in the report), then every
// selected case: a check launch against the CPU reference, a calibration launch, the timing.
// A case that throws (an op's error, a CUDA error) gets a row without time whose note says why,
// and the run goes on; after an error that breaks the CUDA context the remaining cases are
// reported as not run. Prints "[i/N] op params" to stderr as each case starts. Throws
// braid::Error (unsupported) without a CUDA device, and (invalid_argument)
// for an unknown op in `only`. (suites/cuda/kernels.cpp)
Report run_kernel_suite(const KernelSuiteOptions& options);

// `bench kernels`: --list prints kernel_case_list without a GPU (in any build); otherwise the run
// is printed with the ceilings it was read against, and fails when a case did.
SuiteRun kernels_command(CLI::App& cmd);

}  // namespace braid::bench
