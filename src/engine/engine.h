// One model loaded on one device, serving one sequence: prefill, then decode, token by token.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/buffer.h"
#include "engine/decode_graph.h"
#include "engine/kv_cache.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/shard.h"
#include "model/weights.h"
#include "parallel/comm.h"
#include "parallel/rank_threads.h"

namespace braid::engine {

struct EngineOptions {
  Device device = Device::cpu();
  // Compute dtype; f32 on the CPU by default, the checkpoint's 16-bit type (bf16 for fp32
  // checkpoints) on CUDA.
  std::optional<DType> dtype;
  // fp8: a 16-bit checkpoint's linear layers quantized to 128 x 128 block fp8 at load
  // (model::Quantize); the model then runs as an fp8 checkpoint would.
  model::Quantize quantize = model::Quantize::none;
  int max_context = 0;       // tokens; 0: the config's max_position_embeddings, at most 8192
  int page_size = 16;
  int max_step_tokens = 512; // longer prompts are prefilled in chunks of this many tokens
  // MoE models: steps of up to this many tokens run the experts as GEMVs, longer ones (f16/bf16)
  // as permuted grouped GEMMs (model::kMoeGemvMaxTokens).
  int moe_gemv_max_tokens = model::kMoeGemvMaxTokens;
  bool warm_up = true;  // CUDA: a dummy prefill and two decode steps at construction
  // Tensor parallelism (model/shard.h) over tensor_parallel.size ranks. With `comm`, this engine
  // is rank tensor_parallel.rank of a group whose engines the caller steps together, one thread
  // each, with the same tokens. Without it, this engine is the group's front: it builds ranks
  // 1 .. size - 1 itself and every call steps them all, one thread per rank per step: on the
  // CPU through a parallel::ThreadComm, on CUDA over NCCL with rank r on GPU device.index + r.
  // Every rank returns the full logits. tensor_parallel.expert_parallel: the routed experts
  // divided whole over the ranks instead of along their width (model/shard.h).
  model::TensorParallel tensor_parallel;
  parallel::Comm* comm = nullptr;
};

// The compute dtype when none is asked for: f32 on the CPU, the checkpoint's 16-bit type (bf16 for
// fp32 checkpoints, and for fp8 experts) on CUDA.
DType default_dtype(const model::ModelConfig& config, Device device, std::optional<DType> asked);
// Tensor parallelism with a group's front on `front`: rank r's device (CPU ranks share the CPU,
// CUDA ranks take the GPUs from the front's on, one each), and the group's communicator (a
// parallel::ThreadComm on the CPU, NCCL on CUDA: made before any weight is read, so that a group
// larger than the GPUs present, or GPUs without peer access, are refused first).
Device rank_device(Device front, int rank);
std::unique_ptr<parallel::Comm> make_group_comm(Device front, int size);
// The context when none is asked for (asked <= 0): the config's max_position_embeddings, at most
// 8192.
int default_context(const model::ModelConfig& config, int asked);

class Engine {
 public:
  Engine(const std::string& model_dir, const EngineOptions& options);

  const model::ModelConfig& config() const { return config_; }
  Device device() const { return options_.device; }
  DType dtype() const { return weights_.dtype; }
  size_t weight_bytes() const { return weights_.bytes; }
  int context() const { return cache_.capacity(); }
  int position() const { return position_; }  // tokens in the sequence so far

  // Forgets the sequence (the cache pages are reused).
  void reset();
  // Appends `tokens` to the sequence and returns fp32 logits: of the last token ([vocab]), or
  // with all_logits of every token in `tokens` ([tokens.size() * vocab], row-major). Throws
  // ErrorKind::invalid_argument if the sequence would outgrow the context or a token id is
  // outside the vocabulary.
  std::vector<float> step(const std::vector<int32_t>& tokens, bool all_logits = false);
  // Appends one token and returns the greedy choice for the next position (argmax of the logits,
  // ties to the lowest id) without bringing the logits to the host. On CUDA the step after the
  // first runs as one CUDA graph (decode_graph.h).
  int32_t decode_greedy(int32_t token);
  // Kernels in the captured decode step (0 until the graph exists).
  int decode_graph_kernels() const;

 private:
  std::vector<float> step_rank(const std::vector<int32_t>& tokens, bool all_logits);
  int32_t decode_greedy_rank(int32_t token);
  // A front engine: runs `work` on every rank of its group at once, one thread each with the
  // rank's device current; a rank that fails aborts the group's communicator (so that none waits
  // at a collective forever) and its error is rethrown here.
  void on_every_rank(const std::function<void(Engine&)>& work);
  void run_chunk(const int32_t* tokens, int n, bool all_logits, float* logits_out);
  void check_tokens(const int32_t* tokens, int n) const;

  // The group a front engine builds (EngineOptions::tensor_parallel without comm): its
  // communicator (before options_, which points at it) and ranks 1 .. size - 1.
  std::unique_ptr<parallel::Comm> group_comm_;
  EngineOptions options_;
  model::ModelConfig config_;
  model::ModelConfig rank_config_;  // this rank's part of config_ (config_ itself for one rank)
  model::Weights weights_;
  KVCache cache_;
  model::Workspace workspace_;
  int position_ = 0;
  // Step inputs on the device, and their host staging (one upload per step).
  OwnedTensor host_inputs_, device_inputs_;  // [4 * max_step + 3] i32
  OwnedTensor logits_;                       // [max_step, vocab] f32 on the device
  OwnedTensor local_logits_;                 // tensor parallelism: [max_step, vocab / size]
  OwnedTensor host_logits_;
  // Greedy decode as a graph: inputs [token, position, slot, 0, 1, kv_len] and the chosen token.
  OwnedTensor decode_inputs_, decode_token_;
  std::unique_ptr<DecodeGraph> decode_graph_;
  std::vector<std::unique_ptr<Engine>> followers_;
  std::unique_ptr<parallel::RankThreads> rank_threads_;  // a front engine's: one per follower
};

}  // namespace braid::engine
