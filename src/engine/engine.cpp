#include "engine/engine.h"

#include <algorithm>
#include <cstring>

#include "braid/error.h"
#include "braid/ops.h"
#include "core/device_guard.h"
#include "model/safetensors.h"
#include "parallel/nccl_comm.h"
#include "parallel/rank_threads.h"

namespace braid::engine {

namespace {

model::ModelConfig load_checked_config(const std::string& dir, const EngineOptions& o) {
  model::ModelConfig c = model::quantized_config(model::load_config(dir), o.quantize);
  if (o.page_size <= 0 || o.max_step_tokens <= 0)
    throw Error(ErrorKind::invalid_argument, "engine: page_size and max_step_tokens must be positive");
  // Checked before any weight is read: positions past the model's are untrained (and its RoPE
  // scaling is defined only up to them), so a larger context is refused, not silently allowed.
  if (c.max_position_embeddings > 0 && o.max_context > c.max_position_embeddings)
    throw Error(ErrorKind::invalid_argument,
                "engine: --max-context " + std::to_string(o.max_context) +
                    " is larger than the model's max_position_embeddings (" +
                    std::to_string(c.max_position_embeddings) + ")");
  const model::TensorParallel tp = o.tensor_parallel;
  if (tp.size > 1) {
    if (tp.rank < 0 || tp.rank >= tp.size || !o.comm || o.comm->size() != tp.size)
      throw Error(ErrorKind::invalid_argument,
                  "engine: tensor-parallel rank " + std::to_string(tp.rank) + " of " +
                      std::to_string(tp.size) + " needs a rank in [0, size) and a communicator "
                      "of that size");
  }
  // What does not split is refused before any weight is read (expert parallelism on a dense model
  // too, at any size).
  if (tp.size > 1 || tp.expert_parallel) (void)model::shard_config(c, tp.size, tp.expert_parallel);
  return c;
}

// A front engine's group (tensor parallelism without a caller's communicator).
std::unique_ptr<parallel::Comm> group_comm_for(const EngineOptions& o) {
  if (o.tensor_parallel.size <= 1 || o.comm) return nullptr;
  return make_group_comm(o.device, o.tensor_parallel.size);
}

EngineOptions with_comm(EngineOptions o, parallel::Comm* comm) {
  if (comm) {
    o.tensor_parallel.rank = 0;
    o.comm = comm;
  }
  return o;
}

}  // namespace

Device rank_device(Device front, int rank) {
  return front.is_cuda() ? Device::cuda(front.index + rank) : front;
}

std::unique_ptr<parallel::Comm> make_group_comm(Device front, int size) {
  if (front.is_cpu()) return std::make_unique<parallel::ThreadComm>(size);
  std::vector<int> devices;
  for (int r = 0; r < size; ++r) devices.push_back(rank_device(front, r).index);
  return parallel::make_nccl_comm(devices);
}

DType default_dtype(const model::ModelConfig& c, Device device, std::optional<DType> asked) {
  if (asked) return *asked;
  if (device.is_cpu()) return DType::f32;
  // fp8 experts quantize bf16 activations (moe_fp8_quantize takes no f16).
  if (c.fp8_experts()) return DType::bf16;
  return c.dtype == DType::f16 ? DType::f16 : DType::bf16;  // CUDA gemms take 16-bit inputs
}

int default_context(const model::ModelConfig& c, int asked) {
  if (asked > 0) return asked;
  const int from_config = c.max_position_embeddings > 0 ? c.max_position_embeddings : 8192;
  return std::min(from_config, 8192);
}

Engine::Engine(const std::string& dir, const EngineOptions& o)
    : group_comm_(group_comm_for(o)),
      options_(with_comm(o, group_comm_.get())),
      config_(load_checked_config(dir, options_)),
      rank_config_(model::shard_config(config_, o.tensor_parallel.size,
                                       o.tensor_parallel.expert_parallel)),
      weights_(model::load_weights(config_, model::Checkpoint::open(dir), o.device,
                                   default_dtype(config_, o.device, o.dtype), o.quantize,
                                   o.tensor_parallel)),
      cache_(rank_config_, default_context(config_, o.max_context), o.page_size, o.device,
             weights_.dtype),
      workspace_(rank_config_, o.max_step_tokens, o.device, weights_.dtype,
                 int64_t{cache_.pages_per_seq} * cache_.page_size, o.moe_gemv_max_tokens) {
  for (int r = 1; group_comm_ && r < o.tensor_parallel.size; ++r) {
    EngineOptions rank = options_;
    rank.tensor_parallel.rank = r;
    rank.device = rank_device(o.device, r);
    rank.warm_up = false;  // the front warms the whole group up below: a rank alone would wait
    DeviceGuard guard(rank.device);
    followers_.push_back(std::make_unique<Engine>(dir, rank));
  }
  if (!followers_.empty())
    rank_threads_ = std::make_unique<parallel::RankThreads>(o.tensor_parallel.size);
  const int T = o.max_step_tokens;
  host_inputs_ = OwnedTensor(DType::i32, {4 * T + 3}, Device::cpu());
  device_inputs_ = OwnedTensor(DType::i32, {4 * T + 3}, o.device);
  logits_ = OwnedTensor(DType::f32, {T, config_.vocab_size}, o.device);
  if (o.tensor_parallel.size > 1)
    local_logits_ = OwnedTensor(DType::f32, {T, rank_config_.vocab_size}, o.device);
  host_logits_ = OwnedTensor(DType::f32, {T, config_.vocab_size}, Device::cpu());
  // Start-up work belongs to start-up, not to the first prompt: lazy module loading, the GEMM
  // plans of a prefill chunk and of one token, the decode graph's capture.
  if (o.device.is_cuda() && o.warm_up) {
    const int n = std::min({T, 512, context() - 3});
    if (n > 0) {
      step(std::vector<int32_t>(static_cast<size_t>(n), 0));
      decode_greedy(0);
      decode_greedy(0);
    }
    reset();
  }
}

void Engine::check_tokens(const int32_t* tokens, int n) const {
  if (n == 0) throw Error(ErrorKind::invalid_argument, "engine: step needs at least one token");
  if (position_ + n > context())
    throw Error(ErrorKind::invalid_argument,
                "engine: the sequence would hold " + std::to_string(position_ + n) +
                    " tokens but the context holds " + std::to_string(context()) +
                    " (raise --max-context up to the model's " +
                    std::to_string(config_.max_position_embeddings) + ")");
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size)
      throw Error(ErrorKind::invalid_argument,
                  "engine: token id " + std::to_string(tokens[i]) + " at index " +
                      std::to_string(i) + " is outside the vocabulary [0, " +
                      std::to_string(config_.vocab_size) + ")");
}

void Engine::reset() {
  position_ = 0;
  for (auto& f : followers_) f->reset();
}

void Engine::on_every_rank(const std::function<void(Engine&)>& work) {
  rank_threads_->run(*group_comm_, [&](int rank) {
    Engine& e = rank == 0 ? *this : *followers_[static_cast<size_t>(rank - 1)];
    DeviceGuard guard(e.options_.device);
    work(e);
  });
}

std::vector<float> Engine::step(const std::vector<int32_t>& tokens, bool all_logits) {
  if (followers_.empty()) return step_rank(tokens, all_logits);
  // A front engine: bad tokens are refused here, before any rank starts.
  check_tokens(tokens.data(), static_cast<int>(tokens.size()));
  std::vector<float> out;
  on_every_rank([&](Engine& e) {
    std::vector<float> logits = e.step_rank(tokens, all_logits);
    if (&e == this) out = std::move(logits);
  });
  return out;
}

std::vector<float> Engine::step_rank(const std::vector<int32_t>& tokens, bool all_logits) {
  const int n = static_cast<int>(tokens.size());
  check_tokens(tokens.data(), n);
  const size_t V = static_cast<size_t>(config_.vocab_size);
  std::vector<float> out(all_logits ? n * V : V);
  for (int at = 0; at < n; at += options_.max_step_tokens) {
    const int chunk = std::min(options_.max_step_tokens, n - at);
    const bool last = at + chunk == n;
    float* dst = all_logits ? out.data() + at * V : (last ? out.data() : nullptr);
    run_chunk(tokens.data() + at, chunk, all_logits, dst);
  }
  return out;
}

int32_t Engine::decode_greedy(int32_t token) {
  check_tokens(&token, 1);
  if (followers_.empty()) return decode_greedy_rank(token);
  // Every rank gathers the same logits, so every rank must choose the same token.
  std::vector<int32_t> chosen(followers_.size() + 1);
  on_every_rank([&](Engine& e) { chosen[e.options_.tensor_parallel.rank] = e.decode_greedy_rank(token); });
  for (int32_t t : chosen)
    if (t != chosen[0])
      throw Error(ErrorKind::internal, "engine: the ranks of a tensor-parallel group chose different tokens");
  return chosen[0];
}

int32_t Engine::decode_greedy_rank(int32_t token) {
  check_tokens(&token, 1);
  // The CPU, and the first CUDA step (which also plans the gemms of one-token shapes, so that
  // nothing is planned or allocated inside the capture), run eagerly.
  if (options_.device.is_cpu() || decode_inputs_.view().ndim == 0) {
    if (options_.device.is_cuda()) {
      decode_inputs_ = OwnedTensor(DType::i32, {6}, options_.device);
      decode_token_ = OwnedTensor(DType::i32, {1}, options_.device);
    }
    const std::vector<float> logits = step_rank({token}, false);
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  if (!decode_graph_) {
    const Tensor d = decode_inputs_.view();
    const model::StepInputs in{.tokens = d.slice(0, 0, 1),
                               .positions = d.slice(0, 1, 2),
                               .slots = d.slice(0, 2, 3),
                               .cu_seqlens_q = d.slice(0, 3, 5),
                               .kv_lens = d.slice(0, 5, 6),
                               .decode = true};
    const Tensor logits = logits_.view().slice(0, 0, 1);
    decode_graph_ = std::make_unique<DecodeGraph>(
        6, d.ptr<int32_t>(), 1, decode_token_.view().ptr<int32_t>(), [this, in, logits](Stream s) {
          if (options_.tensor_parallel.size > 1) {
            // The gathered logits, then their argmax: the same on every rank.
            const model::TensorParallelStep tp{options_.tensor_parallel.rank, options_.comm,
                                               local_logits_.view()};
            model::forward(rank_config_, weights_, cache_, workspace_, in, 1, false, logits, s,
                           nullptr, Tensor{}, &tp);
            ops::argmax(logits, decode_token_.view(), s);
          } else {
            model::forward(config_, weights_, cache_, workspace_, in, 1, false, logits, s, nullptr,
                           decode_token_.view());
          }
        });
  }
  int32_t* h = decode_graph_->inputs();
  h[0] = token;
  h[1] = position_;
  h[2] = static_cast<int32_t>(cache_.slot(0, position_));
  h[3] = 0;
  h[4] = 1;
  h[5] = position_ + 1;
  const int32_t next = decode_graph_->run()[0];
  ++position_;
  return next;
}

int Engine::decode_graph_kernels() const {
  return decode_graph_ ? decode_graph_->kernel_count() : 0;
}

void Engine::run_chunk(const int32_t* tokens, int n, bool all_logits, float* logits_out) {
  // Host staging: tokens | positions | slots | cu_seqlens_q (2) | kv_lens (1).
  int32_t* h = host_inputs_.view().ptr<int32_t>();
  const int T = options_.max_step_tokens;
  for (int i = 0; i < n; ++i) {
    h[i] = tokens[i];
    h[T + i] = position_ + i;
    h[2 * T + i] = static_cast<int32_t>(cache_.slot(0, position_ + i));
  }
  h[3 * T] = 0;
  h[3 * T + 1] = n;
  h[3 * T + 2] = position_ + n;
  copy(host_inputs_.view(), device_inputs_.view());

  const Tensor d = device_inputs_.view();
  const model::StepInputs in{.tokens = d.slice(0, 0, n),
                             .positions = d.slice(0, T, T + n),
                             .slots = d.slice(0, 2 * T, 2 * T + n),
                             .cu_seqlens_q = d.slice(0, 3 * T, 3 * T + 2),
                             .kv_lens = d.slice(0, 3 * T + 2, 3 * T + 3)};
  const int rows = all_logits ? n : 1;
  const Tensor logits = logits_.view().slice(0, 0, rows);
  if (options_.tensor_parallel.size > 1) {
    const model::TensorParallelStep tp{options_.tensor_parallel.rank, options_.comm,
                                       local_logits_.view()};
    model::forward(rank_config_, weights_, cache_, workspace_, in, n, all_logits, logits, {},
                   nullptr, Tensor{}, &tp);
  } else {
    model::forward(config_, weights_, cache_, workspace_, in, n, all_logits, logits);
  }
  position_ += n;
  if (logits_out) {
    const Tensor host = host_logits_.view().slice(0, 0, rows);
    copy(logits, host);  // synchronises with the device
    std::memcpy(logits_out, host.data, host.nbytes());
  }
}

}  // namespace braid::engine
