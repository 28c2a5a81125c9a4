// A model on the GPU for the end-to-end benchmarks and the profiler: a named shape with random
// weights (decode_preset / prefill shapes) or a Hugging Face checkpoint, its KV cache, its
// workspace, and the device inputs of one forward step. CUDA-only implementation
// (model_setup.cpp).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/harness/accuracy.h"
#include "braid/buffer.h"
#include "engine/kv_cache.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/weights.h"

namespace braid::bench {

struct ModelSetupOptions {
  std::string model_dir;    // a Hugging Face folder (its weights), or
  model::Quantize quantize = model::Quantize::none;  // model_dir's, quantized at load
  model::ModelConfig shape; // used when model_dir is empty: random bf16 weights of this shape
  std::string label;        // the shape's name for reports ("" for a checkpoint: its folder)
  int sequences = 1;        // KV cache sequences
  int context = 1024;       // tokens per sequence the KV cache holds
  int max_step_tokens = 1;  // tokens one forward step may carry (all sequences together)
  bool decode_scratch = false;  // the split-KV decode attention's scratch (decode steps)
  bool random_kv = false;   // fill the KV cache with random values (decode at a given context)
  int device = 0;
};

struct ModelUnderTest {
  model::ModelConfig config;
  model::Weights weights;
  std::unique_ptr<engine::KVCache> cache;
  std::unique_ptr<model::Workspace> workspace;
  std::string label;
  bool random_weights = false;
  // Random weights only: each Hugging Face tensor name and where its values live on the device
  // (views into `weights`), so a CPU reference can be built from the same values.
  std::vector<std::pair<std::string, Tensor>> random_tensors;
};

// Builds the model on CUDA device options.device (bf16). Throws braid::Error (unsupported) without
// a CUDA device, (invalid_argument) for sizes < 1.
std::unique_ptr<ModelUnderTest> setup_model(const ModelSetupOptions& options);

// The device inputs of one forward step: `sequences` sequences (the first ones of the cache), each
// adding `new_tokens` tokens after `past` tokens already cached (positions past .. past +
// new_tokens - 1). Token ids are a fixed pseudo-random function of (sequence, position).
// decode marks a step of one token per sequence (attention_decode). Throws braid::Error
// (invalid_argument) when the cache or workspace is too small for it.
struct StepBatch {
  OwnedTensor storage;  // i32 on the device: tokens, positions, slots, kv_lens, cu_seqlens_q
  model::StepInputs inputs;
  int tokens = 0;       // sequences * new_tokens
};
StepBatch make_step_batch(const ModelUnderTest& m, int sequences, int past, int new_tokens,
                          bool decode);

// The token id make_step_batch puts at `position` of `sequence`.
int32_t step_token_id(int sequence, int position, int vocab_size);

// The CPU reference of a random-weight model's step for its first sequence: the same weights and
// the K/V of its first `past` tokens as the GPU cache holds them (bf16 values read back, computed
// in `dtype`: f32, or bf16 to see how far bf16 activations drift), `new_tokens` tokens from
// position `past` (make_step_batch's ids), the last token's fp32 logits. Slow (the CPU ops are
// references): meant for small models and prompts. Throws braid::Error (invalid_argument) for a
// checkpoint model (no random_tensors).
std::vector<float> cpu_reference_logits(const ModelUnderTest& m, int past, int new_tokens,
                                        DType dtype);
// The GPU's logits of that step (the first row of `gpu_logits`, f32 [>= 1, vocab]) against
// cpu_reference_logits in f32. The tolerance is the engine's golden tests' rule for a bf16
// forward pass: 2.5x the rel L2 of the CPU's bf16 forward from its f32 one, at least 3e-2.
Accuracy check_last_logits(const ModelUnderTest& m, const Tensor& gpu_logits, int past,
                           int new_tokens);

}  // namespace braid::bench
