// The serving engine: many requests share one model, one KV page pool and one step loop.
//
//   add_request -> Scheduler (continuous batching, chunked prefill, preemption) -> BlockManager
//   (paged KV pool, prefix cache) -> ModelRunner (forward, CUDA graphs) -> sampling -> TextStream
//   (detokenize, stop strings) -> SequenceOutput
//
// Not thread-safe: one thread calls step() (engine_loop.h puts it behind queues for a server).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/metrics.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/text_stream.h"
#include "model/config.h"
#include "model/weights.h"
#include "parallel/comm.h"
#include "parallel/rank_threads.h"
#include "tokenizer/tokenizer.h"

namespace braid::engine {

struct EngineConfig {
  Device device = Device::cpu();
  std::optional<DType> dtype;   // default: f32 on the CPU, the checkpoint's 16-bit type on CUDA
  // fp8: a 16-bit checkpoint's linear layers quantized to 128 x 128 block fp8 at load
  // (model::Quantize; the constructor from a folder only).
  model::Quantize quantize = model::Quantize::none;
  int max_model_len = 0;        // 0: the config's max_position_embeddings, at most 8192
  int page_size = 16;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  // KV pool: num_kv_pages if > 0; else on CUDA this fraction of the memory free once weights and
  // workspace are in place; on the CPU enough for max_num_seqs full contexts, at most 1 GiB.
  double gpu_memory_utilization = 0.9;
  int num_kv_pages = 0;
  bool enable_prefix_caching = true;
  bool cuda_graphs = true;
  bool warm_up = true;          // CUDA: eager steps and graph capture at start-up
  int moe_gemv_max_tokens = model::kMoeGemvMaxTokens;
  // Ranks the model is split over (model/shard.h; the constructor from a folder only): on CUDA
  // GPUs device.index .. + N-1 over NCCL, on the CPU threads. Each rank holds its part of the
  // weights and of every KV page; the scheduler and the pool's page numbers are shared.
  int tensor_parallel = 1;
  // Expert parallelism: over the same ranks, each holds num_experts / tensor_parallel whole
  // routed experts instead of a slice of every expert (model/shard.h). A MoE model only; with
  // one rank a no-op.
  bool expert_parallel = false;
};

// What the last step() ran, for benchmarks that model a step's time from its work.
struct StepInfo {
  bool ran = false;     // the model ran (false: nothing was scheduled)
  bool graph = false;   // replayed from a CUDA graph
  int seqs = 0;         // sequences in the step
  int tokens = 0;       // tokens run: prompt chunks and decode tokens
  int decode_seqs = 0;  // sequences that ran one token
  int64_t kv_tokens = 0;         // keys the step's attention reads (sum of the kv lengths)
  double attention_pairs = 0;    // (query, key) pairs under the causal mask
  double seconds = 0;   // wall time of step(), sampling and bookkeeping included
};

class LLMEngine {
 public:
  // Loads config, weights and (when the folder has one) tokenizer.json. Throws braid::Error.
  LLMEngine(const std::string& model_dir, const EngineConfig& config);
  // A model already in memory (random weights for benchmarks, say), with an optional tokenizer.
  // The weights' device and dtype win over config.device and config.dtype.
  LLMEngine(model::ModelConfig model_config, model::Weights weights, const EngineConfig& config,
            std::unique_ptr<tokenizer::Tokenizer> tokenizer = nullptr);
  ~LLMEngine();

  // Queues a request. Throws ErrorKind::invalid_argument for a bad one (empty prompt, a token
  // outside the vocabulary, prompt + max_tokens past the context, a duplicate id, stop strings
  // without a tokenizer, bad sampling parameters); nothing is queued then.
  void add_request(const Request& request);
  // The checks of add_request that need no engine state (all but the id's uniqueness): safe to
  // call from any thread while another runs step().
  void check(const Request& request) const;
  // Ends a live request at once (its pages return to the pool); false if it is not live. Its
  // final output (finish = abort) comes from the next step().
  bool abort_request(const std::string& request_id);

  // One scheduler step: runs the model on the planned tokens and returns the new output of every
  // sequence that produced some or finished.
  std::vector<SequenceOutput> step();
  bool has_unfinished() const { return !live_.empty() || !aborted_.empty(); }

  const model::ModelConfig& model_config() const { return model_config_; }
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  int max_model_len() const { return max_model_len_; }
  int num_kv_pages() const { return blocks_->total_pages(); }
  Device device() const { return weights_.device; }
  DType dtype() const { return weights_.dtype; }
  size_t weight_bytes() const { return weights_.bytes; }  // tensor parallelism: rank 0's part
  int tensor_parallel() const { return static_cast<int>(followers_.size()) + 1; }
  bool expert_parallel() const { return rank_config_.expert_parallel > 1; }  // (a no-op at 1 rank)
  const Metrics& metrics() const { return metrics_; }
  const BlockManager& blocks() const { return *blocks_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  ModelRunner& runner() { return *runner_; }
  const StepInfo& last_step() const { return last_step_; }

 private:
  struct Live;  // a sequence and its text stream
  // Appends the sampled token to a sequence and decides whether it is done.
  void accept_token(Live& live, int32_t token, const TokenLogprob* logprob, Clock::time_point now);
  SequenceOutput take_output(Live& live);
  void finish(Live& live, FinishReason reason, Clock::time_point now);
  void publish_gauges(bool ran, bool graph);
  // Everything after weights and tokenizer; `dir` (the checkpoint) loads the other ranks.
  void start(const EngineConfig& config, const std::string& dir);
  // runner_->run on every rank of the group at once (rank 0's result).
  StepResult run_step(const StepPlan& plan, SampleOn on, const std::vector<RowSampling>& rows);
  ModelRunner& runner_of(int rank);

  // Tensor parallelism: the group's communicator (first: made before any weight is read), and
  // ranks 1 .. N-1, each with its weights and runner. rank_config_ is every rank's part of
  // model_config_ (which stays the whole model's).
  struct Follower;
  std::unique_ptr<parallel::Comm> group_comm_;
  model::ModelConfig model_config_;
  model::ModelConfig rank_config_;
  model::Weights weights_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  int max_model_len_ = 0;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::vector<std::unique_ptr<Follower>> followers_;
  std::unique_ptr<parallel::RankThreads> rank_threads_;  // steps them with rank 0, one thread each
  std::vector<int32_t> eos_ids_;
  std::map<uint64_t, std::unique_ptr<Live>> live_;  // by sequence id, in arrival order
  std::vector<std::unique_ptr<Live>> aborted_;      // to report from the next step
  uint64_t next_seq_id_ = 1;
  std::mt19937_64 seed_rng_;
  Metrics metrics_;
  StepInfo last_step_;
};

}  // namespace braid::engine
