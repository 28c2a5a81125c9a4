#include "engine/llm_engine.h"

#include <algorithm>
#include <filesystem>

#include "braid/error.h"
#include "core/device_guard.h"
#include "engine/engine.h"
#include "model/safetensors.h"
#include "model/shard.h"
#include "parallel/rank_threads.h"

namespace braid::engine {

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

[[noreturn]] void bad_request(const std::string& message) {
  throw Error(ErrorKind::invalid_argument, message);
}

// CPU pool: max_num_seqs full contexts, at most 1 GiB, at least one context.
int cpu_pages(const model::ModelConfig& c, const EngineConfig& e, int max_model_len, DType dtype) {
  const int64_t per_seq = (max_model_len + e.page_size - 1) / e.page_size;
  const int64_t by_memory =
      (int64_t{1} << 30) / static_cast<int64_t>(ModelRunner::page_bytes(c, e.page_size, dtype));
  return static_cast<int>(std::max(per_seq + 1, std::min(per_seq * e.max_num_seqs + 1, by_memory)));
}

}  // namespace

// A sequence being served, with what it has produced since its last output.
struct LLMEngine::Live {
  Sequence seq;
  std::unique_ptr<TextStream> text;
  std::vector<uint64_t> held_siblings;  // n > 1: started once this one's prompt is cached
  std::vector<int32_t> new_tokens;
  std::vector<TokenLogprob> new_logprobs;
  bool reported_final = false;
};

// Rank r > 0 of a tensor-parallel group: its part of the weights and its runner.
struct LLMEngine::Follower {
  Device device;
  model::Weights weights;
  std::unique_ptr<ModelRunner> runner;
};

namespace {

// The group's communicator, made (and the group's size checked) before any weight is read.
std::unique_ptr<parallel::Comm> group_comm(const EngineConfig& e) {
  if (e.tensor_parallel < 1)
    bad_request("engine: tensor_parallel must be at least 1, got " + std::to_string(e.tensor_parallel));
  return e.tensor_parallel > 1 ? make_group_comm(e.device, e.tensor_parallel) : nullptr;
}

}  // namespace

LLMEngine::LLMEngine(const std::string& dir, const EngineConfig& e)
    : group_comm_(group_comm(e)),
      model_config_(model::quantized_config(model::load_config(dir), e.quantize)),
      rank_config_(model::shard_config(model_config_, e.tensor_parallel, e.expert_parallel)),
      weights_(model::load_weights(model_config_, model::Checkpoint::open(dir), e.device,
                                   default_dtype(model_config_, e.device, e.dtype), e.quantize,
                                   {0, e.tensor_parallel, e.expert_parallel})),
      seed_rng_(std::random_device{}()) {
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(dir));
  start(e, dir);
}

LLMEngine::LLMEngine(model::ModelConfig model_config, model::Weights weights,
                     const EngineConfig& e, std::unique_ptr<tokenizer::Tokenizer> tokenizer)
    : model_config_(std::move(model_config)),
      rank_config_(model_config_),
      weights_(std::move(weights)),
      tokenizer_(std::move(tokenizer)),
      seed_rng_(std::random_device{}()) {
  if (e.tensor_parallel != 1)
    bad_request("engine: tensor parallelism loads each rank's part from a checkpoint folder; a "
                "model already in memory runs on one device");
  (void)model::shard_config(model_config_, 1, e.expert_parallel);  // refused on a dense model
  start(e, "");
}

void LLMEngine::start(const EngineConfig& e, const std::string& dir) {
  if (e.page_size <= 0 || e.max_num_seqs <= 0 || e.max_num_batched_tokens <= 0)
    bad_request("engine: page_size, max_num_seqs and max_num_batched_tokens must be positive");
  if (!(e.gpu_memory_utilization > 0 && e.gpu_memory_utilization <= 1))
    bad_request("engine: gpu_memory_utilization must be in (0, 1]");
  max_model_len_ = default_context(model_config_, e.max_model_len);
  if (model_config_.max_position_embeddings > 0 && max_model_len_ > model_config_.max_position_embeddings)
    bad_request("engine: max_model_len " + std::to_string(max_model_len_) + " is past the model's " +
                std::to_string(model_config_.max_position_embeddings) + " positions");
  eos_ids_.assign(model_config_.eos_token_ids.begin(), model_config_.eos_token_ids.end());

  RunnerConfig rc;
  rc.page_size = e.page_size;
  rc.num_pages = e.num_kv_pages > 0           ? e.num_kv_pages + 1
                 : weights_.device.is_cpu() ? cpu_pages(rank_config_, e, max_model_len_, weights_.dtype)
                                            : 0;
  rc.gpu_memory_utilization = e.gpu_memory_utilization;
  rc.max_num_seqs = e.max_num_seqs;
  rc.max_num_batched_tokens = e.max_num_batched_tokens;
  rc.max_model_len = max_model_len_;
  rc.cuda_graphs = e.cuda_graphs;
  rc.moe_gemv_max_tokens = e.moe_gemv_max_tokens;
  const int n = e.tensor_parallel;
  runner_ = std::make_unique<ModelRunner>(rank_config_, weights_, rc,
                                          RunnerRank{0, group_comm_.get(), model_config_.vocab_size});
  // The other ranks, each on its own device, with rank 0's page count: the pool's page numbers
  // are shared, so every rank holds every page (its part of each).
  rc.num_pages = runner_->num_pages();
  for (int r = 1; r < n; ++r) {
    auto f = std::make_unique<Follower>();
    f->device = rank_device(e.device, r);
    DeviceGuard guard(f->device);
    f->weights = model::load_weights(model_config_, model::Checkpoint::open(dir), f->device,
                                     weights_.dtype, e.quantize, {r, n, e.expert_parallel});
    f->runner = std::make_unique<ModelRunner>(rank_config_, f->weights, rc,
                                              RunnerRank{r, group_comm_.get(), model_config_.vocab_size});
    followers_.push_back(std::move(f));
  }
  if (n > 1) rank_threads_ = std::make_unique<parallel::RankThreads>(n);
  blocks_ = std::make_unique<BlockManager>(runner_->num_pages(), e.page_size,
                                           e.enable_prefix_caching, /*reserved_pages=*/1);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{e.max_num_seqs, e.max_num_batched_tokens}, *blocks_);
  if (weights_.device.is_cuda() && e.warm_up) {
    if (followers_.empty()) {
      runner_->warm_up();
    } else {
      rank_threads_->run(*group_comm_, [&](int rank) {
        DeviceGuard guard(rank_device(e.device, rank));
        runner_of(rank).warm_up();
      });
    }
  }
}

StepResult LLMEngine::run_step(const StepPlan& plan, SampleOn on, const std::vector<RowSampling>& rows) {
  if (followers_.empty()) return runner_->run(plan, on, rows);
  StepResult result;
  rank_threads_->run(*group_comm_, [&](int rank) {
    DeviceGuard guard(rank == 0 ? weights_.device : followers_[static_cast<size_t>(rank - 1)]->device);
    StepResult r = runner_of(rank).run(plan, on, rows);  // every rank: the same tokens or logits
    if (rank == 0) result = std::move(r);
  });
  return result;
}

ModelRunner& LLMEngine::runner_of(int rank) {
  return rank == 0 ? *runner_ : *followers_[static_cast<size_t>(rank - 1)]->runner;
}

LLMEngine::~LLMEngine() = default;

void LLMEngine::check(const Request& r) const {
  if (r.id.empty()) bad_request("request: an id is required");
  const int prompt = static_cast<int>(r.prompt.size());
  if (prompt == 0) bad_request("request: the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= model_config_.vocab_size)
      bad_request("request: prompt token " + std::to_string(r.prompt[i]) + " at index " +
                  std::to_string(i) + " is outside the vocabulary [0, " +
                  std::to_string(model_config_.vocab_size) + ")");
  if (r.stop.max_tokens < 1)
    bad_request("request: max_tokens must be at least 1, got " + std::to_string(r.stop.max_tokens));
  if (r.stop.min_tokens < 0 || r.stop.min_tokens > r.stop.max_tokens)
    bad_request("request: min_tokens must be in [0, max_tokens], got " +
                std::to_string(r.stop.min_tokens));
  if (int64_t{prompt} + r.stop.max_tokens > max_model_len_)
    bad_request("request: the prompt has " + std::to_string(prompt) + " tokens and max_tokens is " +
                std::to_string(r.stop.max_tokens) + ", " + std::to_string(prompt + int64_t{r.stop.max_tokens}) +
                " in all, but the context holds " + std::to_string(max_model_len_) + " tokens");
  if (r.n < 1 || r.n > 64) bad_request("request: n must be in [1, 64], got " + std::to_string(r.n));
  if (!r.stop.stop.empty() && !tokenizer_)
    bad_request("request: stop strings need a tokenizer, and the model folder has no tokenizer.json");
  for (int32_t t : r.stop.stop_token_ids)
    if (t < 0 || t >= model_config_.vocab_size)
      bad_request("request: stop token id " + std::to_string(t) + " is outside the vocabulary");
  engine::validate(r.sampling);
}

void LLMEngine::add_request(const Request& r) {
  check(r);
  for (const auto& [id, live] : live_)
    if (live->seq.request_id == r.id) bad_request("request: id '" + r.id + "' is already in use");
  const Clock::time_point now = Clock::now();
  const uint64_t base_seed = r.seeded ? r.sampling.seed : seed_rng_();
  std::vector<uint64_t> ids;
  for (int i = 0; i < r.n; ++i) {
    auto live = std::make_unique<Live>();
    Sequence& s = live->seq;
    s.id = next_seq_id_++;
    s.request_id = r.id;
    s.index = i;
    s.tokens = r.prompt;
    s.prompt_len = static_cast<int>(r.prompt.size());
    s.sampling = r.sampling;
    s.sampling.seed = base_seed + static_cast<uint64_t>(i);
    s.stop = r.stop;
    s.arrival = now;
    if (tokenizer_)
      live->text = std::make_unique<TextStream>(*tokenizer_, r.skip_special_tokens, r.stop.stop,
                                                r.stop.include_stop_str_in_output);
    ids.push_back(s.id);
    live_.emplace(s.id, std::move(live));
  }
  // Choice 0 runs first; the others start once its prompt pages are cached, and share them.
  Live& first = *live_.at(ids[0]);
  if (blocks_->prefix_caching()) first.held_siblings.assign(ids.begin() + 1, ids.end());
  for (size_t i = 0; i < ids.size(); ++i)
    if (i == 0 || !blocks_->prefix_caching()) scheduler_->add(&live_.at(ids[i])->seq);
  metrics_.on_tokens(int64_t{r.n} * static_cast<int64_t>(r.prompt.size()), 0);
}

bool LLMEngine::abort_request(const std::string& request_id) {
  bool found = false;
  const Clock::time_point now = Clock::now();
  for (auto it = live_.begin(); it != live_.end();) {
    if (it->second->seq.request_id != request_id) {
      ++it;
      continue;
    }
    found = true;
    finish(*it->second, FinishReason::abort, now);
    aborted_.push_back(std::move(it->second));
    it = live_.erase(it);
  }
  return found;
}

void LLMEngine::finish(Live& live, FinishReason reason, Clock::time_point now) {
  Sequence& s = live.seq;
  s.status = SequenceStatus::finished;
  s.finish = reason;
  scheduler_->remove(&s);
  metrics_.on_finish(finish_reason_name(reason), seconds(now - s.arrival));
  // Siblings still held wait no longer.
  for (uint64_t id : live.held_siblings)
    if (auto it = live_.find(id); it != live_.end()) scheduler_->add(&it->second->seq);
  live.held_siblings.clear();
}

void LLMEngine::accept_token(Live& live, int32_t token, const TokenLogprob* logprob,
                             Clock::time_point now) {
  Sequence& s = live.seq;
  s.tokens.push_back(token);
  if (s.num_output() == 1) {
    s.first_token = now;
    metrics_.on_first_token(seconds(now - s.arrival), seconds(s.first_scheduled - s.arrival));
  } else {
    metrics_.on_token_gap(seconds(now - s.last_token));
  }
  s.last_token = now;
  metrics_.on_tokens(0, 1);
  live.new_tokens.push_back(token);
  if (logprob) live.new_logprobs.push_back(*logprob);

  const StopCriteria& c = s.stop;
  // min_tokens: the first min_tokens outputs cannot end the sequence.
  const bool may_stop = s.num_output() > c.min_tokens;
  if (may_stop && !c.ignore_eos &&
      std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) {
    finish(live, FinishReason::stop, now);
    return;
  }
  if (may_stop && std::find(c.stop_token_ids.begin(), c.stop_token_ids.end(), token) !=
                      c.stop_token_ids.end()) {
    s.stop_reason = std::to_string(token);
    finish(live, FinishReason::stop, now);
    return;
  }
  if (live.text) {
    if (std::optional<std::string> hit = live.text->push(token)) {
      s.stop_reason = *hit;
      finish(live, FinishReason::stop, now);
      return;
    }
  }
  if (s.num_output() >= c.max_tokens || s.num_tokens() >= max_model_len_)
    finish(live, FinishReason::length, now);
}

SequenceOutput LLMEngine::take_output(Live& live) {
  const Sequence& s = live.seq;
  SequenceOutput o;
  o.request_id = s.request_id;
  o.index = s.index;
  o.tokens = std::move(live.new_tokens);
  o.logprobs = std::move(live.new_logprobs);
  live.new_tokens.clear();
  live.new_logprobs.clear();
  o.finish = s.finish;
  o.stop_reason = s.stop_reason;
  if (live.text) o.text = live.text->take(s.finished());
  o.prompt_tokens = s.prompt_len;
  o.cached_prompt_tokens = std::max(s.cached_prompt_tokens, 0);
  o.output_tokens = s.num_output();
  return o;
}

std::vector<SequenceOutput> LLMEngine::step() {
  std::vector<SequenceOutput> outputs;
  for (auto& live : aborted_) outputs.push_back(take_output(*live));
  aborted_.clear();

  const Clock::time_point start = Clock::now();
  last_step_ = {};
  StepPlan plan = scheduler_->schedule();
  if (plan.empty()) {
    // Nothing runs yet something waits: its first sequence cannot fit even an empty pool. The
    // start-up check (a pool holds a whole context) rules this out; should it ever happen, that
    // request ends here rather than the loop spinning on it.
    if (Sequence* stuck = scheduler_->num_running() == 0 ? scheduler_->front_waiting() : nullptr) {
      Live& live = *live_.at(stuck->id);
      stuck->stop_reason = "the KV cache cannot hold this sequence";
      finish(live, FinishReason::abort, Clock::now());
      outputs.push_back(take_output(live));
      live_.erase(stuck->id);
    }
    publish_gauges(/*ran=*/false, /*graph=*/false);  // aborts may have freed pages
    return outputs;
  }
  // Greedy rows stay on the device (decode graphs); rows that sample plainly too
  // (ops::sample_tokens); penalties, logprobs and bans (min_tokens) bring the logits to the host.
  bool all_greedy = true, on_device = true;
  std::vector<RowSampling> row_sampling;
  for (const ScheduledSequence& s : plan.seqs) {
    const double n = s.num_tokens, kv = s.start + s.num_tokens;
    last_step_.kv_tokens += static_cast<int64_t>(kv);
    last_step_.attention_pairs += n * s.start + n * (n + 1) / 2;
    last_step_.decode_seqs += s.num_tokens == 1 ? 1 : 0;
    if (s.seq->first_scheduled == Clock::time_point{}) s.seq->first_scheduled = start;
    if (!s.samples()) continue;
    const SamplingParams& p = s.seq->sampling;
    all_greedy = all_greedy && p.greedy();
    on_device = on_device && !p.has_penalties() && p.logprobs < 0 &&
                s.seq->num_output() >= s.seq->stop.min_tokens;
    row_sampling.push_back({p.greedy() ? 0.0f : p.temperature, p.top_k, p.top_p, p.min_p, p.seed,
                            static_cast<uint64_t>(s.seq->num_output())});
  }
  const SampleOn sample_on = !on_device ? SampleOn::host : all_greedy ? SampleOn::greedy : SampleOn::device;
  const StepResult result = run_step(plan, sample_on, row_sampling);
  scheduler_->complete(plan);

  const Clock::time_point now = Clock::now();
  std::vector<Live*> touched;
  int row = 0;
  std::vector<int32_t> banned;
  for (const ScheduledSequence& s : plan.seqs) {
    Live& live = *live_.at(s.seq->id);
    if (!s.samples()) continue;
    const int r = row++;
    Sequence& seq = live.seq;
    int32_t token;
    TokenLogprob lp;
    if (!result.tokens.empty()) {
      token = result.tokens[static_cast<size_t>(r)];
    } else {
      banned.clear();
      if (seq.num_output() < seq.stop.min_tokens) {
        if (!seq.stop.ignore_eos) banned = eos_ids_;
        banned.insert(banned.end(), seq.stop.stop_token_ids.begin(), seq.stop.stop_token_ids.end());
      }
      const size_t V = static_cast<size_t>(model_config_.vocab_size);
      const std::span<const float> logits(result.logits + static_cast<size_t>(r) * V, V);
      const std::span<const int32_t> all(seq.tokens);
      const TokenHistory history{all.first(static_cast<size_t>(seq.prompt_len)),
                                 all.subspan(static_cast<size_t>(seq.prompt_len))};
      token = sample_token(logits, seq.sampling, static_cast<uint64_t>(seq.num_output()), history,
                           banned, &lp);
    }
    accept_token(live, token, seq.sampling.logprobs >= 0 ? &lp : nullptr, now);
    touched.push_back(&live);
  }

  // Held siblings start once their first choice's prompt is in the cache.
  for (const ScheduledSequence& s : plan.seqs) {
    auto it = live_.find(s.seq->id);
    if (it == live_.end() || it->second->held_siblings.empty()) continue;
    Live& first = *it->second;
    if (first.seq.num_computed < first.seq.prompt_len) continue;
    for (uint64_t id : first.held_siblings) scheduler_->add(&live_.at(id)->seq);
    first.held_siblings.clear();
  }

  for (Live* live : touched) outputs.push_back(take_output(*live));
  for (Live* live : touched)
    if (live->seq.finished()) live_.erase(live->seq.id);
  publish_gauges(/*ran=*/true, result.graph);
  last_step_.ran = true;
  last_step_.graph = result.graph;
  last_step_.seqs = static_cast<int>(plan.seqs.size());
  last_step_.tokens = plan.num_tokens;
  last_step_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return outputs;
}

void LLMEngine::publish_gauges(bool ran, bool graph) {
  metrics_.on_step(scheduler_->num_running(), scheduler_->num_waiting(), blocks_->used_pages(),
                   blocks_->total_pages(), blocks_->prefix_queried_tokens(),
                   blocks_->prefix_hit_tokens(), scheduler_->preemptions(), ran, graph);
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
    case FinishReason::none: break;
  }
  return "";
}

}  // namespace braid::engine
