// `braidinfer bench decode`: one decode step of a model shape (random weights on the GPU, or a
// checkpoint), timed eagerly and as a CUDA graph, against the floor that the bytes it must read
// and the copy bandwidth measured in the same run imply.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/harness/report.h"
#include "bench/harness/suite.h"
#include "model/config.h"

namespace braid::bench {

// Model shapes known by name ("qwen2.5-0.5b", "llama-3.2-1b", "llama-2-7b", ...), as the
// config.json of the public checkpoint would give them.
std::vector<std::string> decode_preset_names();
// Throws braid::Error (invalid_argument) listing the known names.
model::ModelConfig decode_preset(const std::string& name);

// Bytes one decode step must read at least: every weight it uses once (the embedding rows of the
// batch's tokens only; for MoE layers the experts the batch can reach, at most batch * k of E),
// the KV cache of `context` tokens per sequence (greedy decoding writes ids, not logits).
double decode_step_bytes(const model::ModelConfig& config, int batch, int context,
                         size_t dtype_bytes);

// The same bytes split by component of the forward pass (names as forward() marks them).
std::map<std::string, double> decode_component_bytes(const model::ModelConfig& config, int batch,
                                                    int context, size_t dtype_bytes);

struct DecodeOptions {
  std::string preset;     // a decode_preset name, or
  std::string model_dir;  // a Hugging Face folder
  std::string quantize = "none";  // model_dir's load-time quantization (--quantize none | fp8)
  int batch = 1;
  int context = 1024;     // tokens already in each sequence's KV cache
  int capacity = 0;       // keys each sequence's page table holds (0: context); more, as the
                          // engine's max_model_len makes it, shows how the split-KV chunks follow
  int device = 0;
  bool quick = false;     // fewer repetitions
  bool breakdown = false; // also time each component of the step (eager, event-timed)
};

// Measures the copy ceiling, then the decode step (eager and graph), and returns the run; the
// first row is the graph replay, the second the eager step. With breakdown, one more row per
// component ("decode_component", params = the component): its time per step summed over the
// layers (eager, between CUDA events recorded after each component, so it includes launch gaps
// where the host falls behind), and the bytes it must read. Throws braid::Error without a CUDA
// device. (suites/cuda/decode.cpp)
Report run_decode(const DecodeOptions& options);

// A few lines under the table: ms/token, tok/s, GB/s, % of the floor, kernels per token.
std::string decode_summary(const Report& run);

// `bench decode`: --shape NAME (random weights) or --model DIR, --batch, --context, --capacity,
// --breakdown.
SuiteRun decode_command(CLI::App& cmd);  // suites/cuda/decode.cpp

}  // namespace braid::bench
