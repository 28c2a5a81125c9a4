// `braidinfer bench prefill`: seed 001's end-to-end tables. One forward pass over a batch of
// prompts (all sequences in one step, causal attention per sequence, K/V written to the cache,
// logits of the last token), for the seed's small / medium / large models at its batch x length
// pairs, in ms and tokens/s. The arithmetic is CPU-only and unit-tested; the GPU runner is
// suites/cuda/prefill.cpp.
#pragma once

#include <string>
#include <vector>

#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "model/config.h"

namespace braid::bench {

// One of seed 001's models with its batch x length pairs and the H100 times the seed lists.
struct PrefillCase {
  int batch = 1, seq_len = 0;
  double seed_h100_ms = 0;  // seed 001's H100 figure, 0 if none
};
struct PrefillModel {
  std::string name;  // "small", "medium", "large"
  model::ModelConfig config;
  std::vector<PrefillCase> cases;
};

// Seed 001 gives layers, hidden size and heads only; the rest is Llama's: SwiGLU MLP with
// intermediate = 8/3 hidden rounded up to a multiple of 256 (2048, 5632, 11008), one KV head per
// query head, vocab 32000, RoPE theta 10000, untied LM head.
std::vector<PrefillModel> prefill_models();
// Throws braid::Error (invalid_argument) naming the known models.
PrefillModel prefill_model(const std::string& name);

// FLOPs of one prefill step: 2 per weight element per token for every projection (q, k, v, o,
// gate, up, down), the causal attention (4 * head_dim per visible score entry and head), and the
// LM head for one token. Norms, RoPE and activations are left out (under 0.1%).
double prefill_flops(const model::ModelConfig& c, int batch, int seq_len);
// Minimum bytes: every weight once (the embedding rows of the batch's tokens only), the K and V
// written to the cache and read back once by attention, the activations crossing DRAM at most
// once (left out: they can stay in L2 for small batches), the last token's logits (fp32).
double prefill_bytes(const model::ModelConfig& c, int batch, int seq_len, size_t dtype_bytes);

struct PrefillOptions {
  std::vector<std::string> models;  // names from prefill_models(); empty = all
  int batch = 0, seq_len = 0;       // > 0: this one pair instead of the seed's pairs
  int device = 0;
  bool quick = false;               // fewer repetitions
};

// Measures the copy and bf16 GEMM ceilings, then each case: rows "prefill_forward", params
// "<model> batch B seq L", one forward pass per sample (back to back), bound compute. Throws
// braid::Error (unsupported) without a CUDA device. (suites/cuda/prefill.cpp)
Report run_prefill(const PrefillOptions& options);

// Seed 001's layout: per model, batch | seq len | ms | tokens/s | seed H100 ms | ratio.
std::string prefill_summary(const Report& run);

// `bench prefill`: --model small,medium,large, or one --batch / --seq-len pair.
SuiteRun prefill_command(CLI::App& cmd);  // suites/cuda/prefill.cpp

}  // namespace braid::bench
