// Runs a scheduler step on the device: packs the step's ragged batch (tokens, positions, cache
// slots, per-sequence lengths, page tables, the rows to sample) into one upload, runs the forward
// pass, and brings back the tokens of the rows that sample (greedy, or drawn by ops::sample_tokens
// on the device) or their logits.
//
// Decode-only steps whose rows all decode greedily run as CUDA graphs captured at start-up for a
// ladder of batch sizes, the batch padded to the next size (padded rows read and write the
// reserved scratch page 0). Every other step runs eagerly.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "braid/buffer.h"
#include "engine/decode_graph.h"
#include "engine/kv_cache.h"
#include "engine/scheduler.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/weights.h"
#include "parallel/comm.h"

namespace braid::engine {

struct RunnerConfig {
  int page_size = 16;
  // KV pool size, page 0 included (reserved as scratch); 0 on CUDA: gpu_memory_utilization of the
  // memory free once the workspace is allocated.
  int num_pages = 0;
  double gpu_memory_utilization = 0.9;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 0;
  bool cuda_graphs = true;
  int moe_gemv_max_tokens = model::kMoeGemvMaxTokens;
};

// Who picks the tokens of a step's sampling rows (the scheduled sequences whose chunk ends at
// their last token, in plan order).
enum class SampleOn {
  greedy,  // argmax on the device; decode steps replay CUDA graphs
  device,  // ops::sample_tokens on the device, with each row's RowSampling
  host,    // nobody here: the logits come back to the host (penalties, logprobs, bans)
};

struct RowSampling {  // ops::sample_tokens' parameters for one row
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0, step = 0;
};

// What a step gives back for its sampling rows.
struct StepResult {
  int rows = 0;
  std::vector<int32_t> tokens;    // [rows] chosen on the device (SampleOn greedy or device)
  const float* logits = nullptr;  // [rows, vocab] on the host (SampleOn host)
  bool graph = false;             // replayed from a captured CUDA graph
};

// One rank of a tensor-parallel group (model/shard.h): its rank, the group's communicator, and the
// whole model's vocabulary (the runner's config is the rank's part, whose vocabulary is a slice).
struct RunnerRank {
  int rank = 0;
  parallel::Comm* comm = nullptr;  // null: no group
  int full_vocab = 0;
};

class ModelRunner {
 public:
  // With `group`, `config` and `weights` are one rank's part of the model, and the caller runs
  // every rank's run() (and warm_up()) at once, one thread each, with the same arguments: every
  // rank then computes the same tokens or logits.
  ModelRunner(const model::ModelConfig& config, const model::Weights& weights,
              const RunnerConfig& config_runner, const RunnerRank& group = {});

  // Bytes one KV page takes on the device (all layers, K and V).
  static size_t page_bytes(const model::ModelConfig& config, int page_size, DType dtype);

  // Runs the plan's tokens and picks its sampling rows' tokens as `on` says; `rows` gives their
  // parameters (in plan order) for SampleOn::device.
  StepResult run(const StepPlan& plan, SampleOn on, const std::vector<RowSampling>& rows = {});

  // Start-up work, so the first request pays none of it: one eager step of each kind (lazy module
  // loading, GEMM plans) and the decode graphs' capture.
  void warm_up();

  // Called by forward() after each component it enqueues, in eager steps (graph replays run no
  // forward); `braidinfer bench throughput --profile-steps` names the kernels with it. Null: none.
  void set_forward_probe(const model::ForwardProbe* probe) { probe_ = probe; }

  int graph_batch_for(int batch) const;  // the ladder size a decode batch pads to (0: none)
  const std::vector<int>& graph_sizes() const { return graph_sizes_; }
  int vocab() const { return group_.comm ? group_.full_vocab : config_.vocab_size; }
  int num_pages() const { return num_pages_; }
  int pages_per_seq() const { return pages_per_seq_; }

 private:
  struct Layout;  // where each input sits in the packed upload
  // decode_rows >= 0: a serving step whose first decode_rows sequences run one token each and
  // the others prompt chunks; -1: a decode step (every sequence one token, attention_decode).
  Layout layout(int tokens, int seqs, int rows, int decode_rows) const;
  // Fills `h` (host, Layout's size) for the plan, padded to `seqs` sequences when larger.
  void pack(const StepPlan& plan, const Layout& l, int padded_seqs, int32_t* h) const;
  model::StepInputs inputs_at(const Tensor& device, const Layout& l, bool decode) const;
  StepResult run_graph(const StepPlan& plan, int padded);
  // ops::sample_tokens over the step's logits rows, into `tokens`.
  void sample_on_device(const Tensor& logits, const std::vector<RowSampling>& rows,
                        const Tensor& tokens);
  // forward() over the step; with greedy_ids, also the argmax of each logits row into them (fused
  // with the LM head alone, after the logits are gathered in a group).
  void forward(const model::StepInputs& in, int tokens, const Tensor& logits, Stream s,
               const model::ForwardProbe* probe, const Tensor& greedy_ids);

  const model::ModelConfig& config_;
  const model::Weights& weights_;
  RunnerConfig rc_;
  int pages_per_seq_ = 0;
  bool cuda_ = false;
  model::Workspace workspace_;
  OwnedTensor host_inputs_, device_inputs_;
  OwnedTensor logits_, host_logits_, greedy_ids_;
  // ops::sample_tokens' per-row parameters, on the device
  OwnedTensor temperature_, top_k_, top_p_, min_p_, seeds_, steps_;
  int num_pages_ = 0;
  std::unique_ptr<KVCache> cache_;  // allocated last: on CUDA it takes what memory is left
  std::vector<int> graph_sizes_;
  std::map<int, std::unique_ptr<DecodeGraph>> graphs_;
  std::vector<OwnedTensor> graph_inputs_;
  const model::ForwardProbe* probe_ = nullptr;
  RunnerRank group_;
  OwnedTensor local_logits_;  // a group's rank: its vocabulary columns of the logits
};

}  // namespace braid::engine
