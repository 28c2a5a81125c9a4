// `braidinfer bench throughput`: the serving engine offline (no HTTP), vLLM's `bench throughput`:
// N random prompts of input_len tokens, output_len tokens each (end-of-text ignored), all queued at
// once. Reports requests/s, output and total tokens/s, and beside them the step-time model: each
// step's floor from its work and the ceilings measured in the same run,
//   max((weights read + KV read and written) / copy bandwidth, FLOPs / bf16 GEMM rate),
// summed over the run and per kind of step (decode batches by size, steps with prompt chunks).
#pragma once

#include <cstdint>
#include <string>

#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "engine/llm_engine.h"

namespace braid::bench {

struct ThroughputOptions {
  std::string model_dir;  // a Hugging Face folder, or
  std::string shape;      // a decode_preset name: random bf16 weights (CUDA)
  int input_len = 1024;
  int output_len = 128;
  int num_prompts = 1000;
  double range_ratio = 0.0;  // lengths uniform in [len (1 - r), len (1 + r)]
  uint64_t seed = 0;
  engine::EngineConfig engine;
  bool quick_ceilings = false;
  // A CUPTI trace of profile_steps steps from step profile_from on (CUDA): the kernels of the
  // steps with prompt chunks ("prefill" in the tables) and of the pure decode steps, per
  // component for eager steps. Those steps' times include CUPTI's cost.
  int profile_steps = 0;
  int profile_from = 100;
};

// The work of one step: the matrix products (the weights they read, the LM head included) and
// attention (the K/V it reads and writes), and their sums.
struct StepWork {
  double bytes = 0, flops = 0;
  double matmul_bytes = 0, matmul_flops = 0;
  double attention_bytes = 0, attention_flops = 0;
};
StepWork step_work(const model::ModelConfig& config, const engine::StepInfo& step, size_t dtype_bytes);
// The step's floor on ceilings `c` (seconds; 0 when a ceiling is unknown): the whole step's work
// at the slower of copy bandwidth and the GEMM rate. A step of prompt chunks is compute bound and
// its decode rows' K/V reads memory bound, so this floor is reached only by overlapping the two.
// With fp8_matmuls (an fp8 checkpoint) the matrix products' FLOPs are priced at the fp8 GEMM
// ceiling (0 when it was not measured), attention's at the bf16 one.
double step_floor_seconds(const StepWork& w, const Ceilings& c, bool fp8_matmuls = false);
// The floor of the same work run as the engine runs it, one part after the other: the matrix
// products at their bound, then attention at its bound.
double sequential_floor_seconds(const StepWork& w, const Ceilings& c, bool fp8_matmuls = false);

struct ThroughputRun {
  Report report;        // rows: one per kind of step, and the whole run
  std::string summary;  // the headline figures (and the profile's tables), for the terminal
};

// Throws braid::Error for bad options (sizes < 1, a prompt + output past the context).
ThroughputRun run_throughput(const ThroughputOptions& options);

// `bench throughput`: --model DIR or --shape NAME, the load (--input-len, --output-len,
// --num-prompts, --range-ratio, --seed) and the engine's limits, as `vllm bench throughput`.
SuiteRun throughput_command(CLI::App& cmd);

}  // namespace braid::bench
